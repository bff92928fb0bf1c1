"""Chunking: exact offsets, token limits, stable and unique ids, structure kept."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag.chunking import StructureChunker, parse_markdown, stable_chunk_id
from es_rag.errors import ConfigError, InputError

DOC = """# Policy

Intro paragraph about the policy.

## Remote wipe

Remote wipe is available on all plans.

| Plan | Wipe |
|------|------|
| Free | yes |
| Pro | yes |

## Exceptions

### Trial

Devices enrolled during the trial period cannot be wiped.

```python
client.wipe(device_id)
```
"""

BOILERPLATE = "If the problem continues, contact support with your workspace id."


def chunker(tok, max_tokens=40, overlap=8):  # type: ignore[no-untyped-def]
    return StructureChunker(tok, max_tokens=max_tokens, overlap=overlap)


def do_chunk(ch, text, fmt="markdown"):  # type: ignore[no-untyped-def]
    return ch.chunk(text, source_id="doc-1", source_version="v1", tenant_id="acme", acl=["public"], fmt=fmt)


def test_sections_and_heading_paths(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    paths = [s.heading_path for s in parse_markdown(DOC)]
    # "# Exceptions" has no body of its own: only its subsection is a section.
    assert paths == [("Policy",), ("Policy", "Remote wipe"), ("Policy", "Exceptions", "Trial")]
    chunks = do_chunk(chunker(minilm_tokenizer, 200), DOC)
    children = [c for c in chunks if c.kind == "child"]
    parents = {c.chunk_id: c for c in chunks if c.kind == "parent"}
    assert {c.parent_id for c in children} == set(parents)
    for c in children:
        p = parents[c.parent_id]
        assert p.start_offset <= c.start_offset < c.end_offset <= p.end_offset
        assert c.heading_path == p.heading_path


def test_offsets_reproduce_text_exactly(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    for c in do_chunk(chunker(minilm_tokenizer), DOC):
        assert DOC[c.start_offset : c.end_offset] == c.text


def test_table_and_code_are_not_split_when_they_fit(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    children = [c for c in do_chunk(chunker(minilm_tokenizer, 60), DOC) if c.kind == "child"]
    table = [c for c in children if "| Plan | Wipe |" in c.text]
    assert len(table) == 1 and "| Pro | yes |" in table[0].text
    code = [c for c in children if "```python" in c.text]
    assert len(code) == 1 and code[0].text.rstrip().endswith("```")


def test_no_child_over_the_token_limit(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    long_para = "# T\n\n" + " ".join(f"word{i}" for i in range(400)) + "\n"
    ch = chunker(minilm_tokenizer, 32, 8)
    children = [c for c in do_chunk(ch, long_para) if c.kind == "child"]
    assert len(children) > 3
    assert all(minilm_tokenizer.count(c.text) <= 32 for c in children)
    assert all(long_para[c.start_offset : c.end_offset] == c.text for c in children)


def test_japanese_splits_on_sentence_boundaries(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "# 概要\n\n" + "".join(f"これは{i}番目の文です。" for i in range(60)) + "\n"
    children = [c for c in do_chunk(chunker(minilm_tokenizer, 40, 5), text) if c.kind == "child"]
    assert len(children) > 2
    for c in children[1:]:
        assert c.text.endswith("。"), c.text[-10:]


def test_ids_are_stable_and_unique_for_identical_boilerplate(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = f"# A\n\n{BOILERPLATE}\n\n# B\n\n{BOILERPLATE}\n"
    ch = chunker(minilm_tokenizer)
    first = do_chunk(ch, text)
    again = do_chunk(ch, text)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    ids = [c.chunk_id for c in first]
    assert len(set(ids)) == len(ids)
    assert stable_chunk_id("s", "v1", "c", "child", 0, 5) != stable_chunk_id("s", "v2", "c", "child", 0, 5)


def test_plain_text(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "First paragraph.\n\nSecond paragraph here.\n"
    chunks = do_chunk(chunker(minilm_tokenizer), text, fmt="plain")
    assert [c.heading_path for c in chunks] == [(), ()]
    assert all(text[c.start_offset : c.end_offset] == c.text for c in chunks)


@pytest.mark.parametrize(("kwargs", "field"), [({"tenant_id": ""}, "tenant_id"), ({"source_id": ""}, "source_id")])
def test_bad_input_names_the_field(minilm_tokenizer, kwargs, field) -> None:  # type: ignore[no-untyped-def]
    args = {"source_id": "d", "source_version": "1", "tenant_id": "t", "acl": [], **kwargs}
    with pytest.raises(InputError, match=field):
        chunker(minilm_tokenizer).chunk("# x\n\ntext\n", **args)


def test_empty_source_is_an_error(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="text"):
        do_chunk(chunker(minilm_tokenizer), "   \n")


def test_limit_above_model_input_is_refused(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="input limit"):
        StructureChunker(minilm_tokenizer, max_tokens=10_000)


markdownish = st.lists(
    st.one_of(
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=120),
        st.sampled_from(
            ["# H1", "## H2", "### 見出し", "- item", "| a | b |", "|---|---|", "```", "", "。", "文です。"]
        ),
    ),
    min_size=1,
    max_size=30,
).map("\n".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(markdownish)
def test_property_offsets_and_limits(minilm_tokenizer, text) -> None:  # type: ignore[no-untyped-def]
    ch = chunker(minilm_tokenizer, 24, 6)
    try:
        chunks = do_chunk(ch, text)
    except InputError:
        assert not text.strip()
        return
    ids = [c.chunk_id for c in chunks]
    assert len(set(ids)) == len(ids)
    for c in chunks:
        assert text[c.start_offset : c.end_offset] == c.text
        if c.kind == "child":
            assert minilm_tokenizer.count(c.text) <= 24


# -- YAML front matter (issue 13): metadata, never a heading or a chunk of "---" --------------------------------
_FRONT = (
    "---\ntitle: Setup guide\ntags: [install]\n---\n\n# Install\n\nRun the installer.\n\n## Configure\n\nEdit it.\n"
)


@pytest.mark.parametrize("strategy", ["parent-child", "fixed", "recursive", "structure"])
def test_front_matter_is_skipped_and_its_title_used(strategy: str) -> None:
    from es_rag.chunking import make_chunker
    from tests.support.corpus import WordTokenizer

    chunker = make_chunker(WordTokenizer(), strategy=strategy, max_tokens=50, overlap=5)
    chunks = chunker.chunk(_FRONT, source_id="g.md", source_version="1", tenant_id="t", acl=["public"])
    body = _FRONT.index("# Install")
    assert chunks and all(c.start_offset >= body for c in chunks)  # offsets still index the original text
    assert all(_FRONT[c.start_offset : c.end_offset] == c.text for c in chunks)
    assert not any("---" in c.text or "tags:" in c.text for c in chunks)
    assert {c.title for c in chunks} == {"Setup guide"}
    assert all(not c.heading_path or c.heading_path[0] == "Install" for c in chunks)


def test_what_is_not_front_matter_stays_content() -> None:
    from es_rag.chunking.markdown import front_matter

    assert front_matter("---\n\nText after a thematic break.\n\n---\n\nMore.\n") == (0, {})  # YAML, not a mapping
    assert front_matter("Intro\n---\ntitle: x\n---\n") == (0, {})  # not at the start
    assert front_matter("---\ntitle: [unclosed\n---\nx\n") == (0, {})  # invalid YAML
    end, meta = front_matter("---\ntitle: T\n...\nBody\n")
    assert meta == {"title": "T"} and end == len("---\ntitle: T\n...\n")


def test_a_source_of_only_front_matter_is_reported() -> None:
    from es_rag.chunking import make_chunker
    from es_rag.errors import InputError
    from tests.support.corpus import WordTokenizer

    with pytest.raises(InputError, match="only front matter"):
        make_chunker(WordTokenizer()).chunk(
            "---\ntitle: T\n---\n", source_id="a", source_version="1", tenant_id="t", acl=[]
        )


# -- reStructuredText (issue 13): sections from docutils, spans cut from the source --------------------------
_RST = """=====
Guide
=====

Intro paragraph
on two lines.

Install
-------

Run the installer.

* step one
* step two

Upgrade
~~~~~~~

::

    es-rag setup

Errors
------

E1042 means a checksum mismatch.
"""


@pytest.mark.parametrize("strategy", ["parent-child", "structure", "fixed", "recursive"])
def test_rst_sections_headings_and_exact_offsets(strategy: str) -> None:
    from es_rag.chunking import make_chunker
    from tests.support.corpus import WordTokenizer

    chunks = make_chunker(WordTokenizer(), strategy=strategy, max_tokens=40, overlap=4).chunk(
        _RST, source_id="g.rst", source_version="1", tenant_id="t", acl=["public"], fmt="rst"
    )
    assert chunks and all(_RST[c.start_offset : c.end_offset] == c.text for c in chunks)
    assert {c.title for c in chunks} == {"Guide"}
    if strategy in ("parent-child", "structure"):
        paths = {c.heading_path for c in chunks}
        assert paths == {("Guide",), ("Guide", "Install"), ("Guide", "Install", "Upgrade"), ("Guide", "Errors")}
        assert not any(set(c.text.strip()) <= set("=-~") for c in chunks)  # adornment lines are no chunk


def test_rst_include_directives_never_read_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``file_insertion_enabled: False``: an ``include`` would otherwise pull another file's sections in."""
    from es_rag.chunking.rst import _titles

    other = tmp_path / "other.rst"
    other.write_text("Injected\n========\n\nFrom another file.\n")
    text = f"Title\n=====\n\n.. include:: {other}\n\nBody text.\n"
    assert [path for _, _, path in _titles(text)] == [("Title",)]


# -- independent oracles on chunk spans (issue 18) -------------------------------------------------------------
_WORDS = st.sampled_from(["sync", "token", "E1042", "reset", "password", "policy", "device", "同期", "設定。"])
_PARA = st.lists(_WORDS, min_size=1, max_size=40).map(" ".join)
_SECTION = st.tuples(
    st.integers(1, 3), st.sampled_from(["Install", "Errors", "FAQ", "設定"]), st.lists(_PARA, min_size=1, max_size=4)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SECTION, min_size=1, max_size=5), st.sampled_from(["parent-child", "structure", "fixed", "recursive"]))
def test_child_spans_are_trimmed_start_at_headings_and_cover_every_character(sections, strategy) -> None:  # type: ignore[no-untyped-def]
    """Checked against the source text itself, not against the chunker's own slicing: no child starts or ends in
    whitespace; with the structure strategies every heading line begins a child; every non-whitespace character
    of the source lies inside some child span."""
    from es_rag.chunking import make_chunker
    from tests.support.corpus import WordTokenizer

    text = "".join(f"{'#' * lvl} {title}\n\n" + "\n\n".join(paras) + "\n\n" for lvl, title, paras in sections)
    chunks = make_chunker(WordTokenizer(), strategy=strategy, max_tokens=25, overlap=3).chunk(
        text, source_id="s", source_version="1", tenant_id="t", acl=["public"]
    )
    children = [c for c in chunks if c.kind == "child"]
    for c in children:
        assert not text[c.start_offset].isspace() and not text[c.end_offset - 1].isspace(), (
            c.start_offset,
            c.end_offset,
        )
    heading_starts = [m.start() for m in re.finditer(r"(?m)^#{1,3} ", text)]
    if strategy in ("parent-child", "structure"):
        assert set(heading_starts) <= {c.start_offset for c in children}
    for p in (c for c in chunks if c.kind == "parent"):  # a section (parent) begins at its heading's "#"
        assert p.start_offset in heading_starts and not text[p.end_offset - 1].isspace()
    covered = bytearray(len(text))
    for c in children:
        covered[c.start_offset : c.end_offset] = b"\x01" * (c.end_offset - c.start_offset)
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert not missing, text[missing[0] : missing[0] + 20]
