"""Chunking strategies: HTML structure with exact offsets, fixed token windows (seed 000 arithmetic),
recursive separators, contextual prefix, versions, and hypothesis properties across every strategy."""

from __future__ import annotations

import itertools
import math
import re
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag.chunking import (
    FixedTokenChunker,
    HtmlLayout,
    RecursiveChunker,
    Strategy,
    StructureChunker,
    make_chunker,
    visible_text,
)
from es_rag.errors import ConfigError, InputError

HTML = """<!doctype html>
<html><head><title>Acme &amp; Co handbook</title>
<style>p { color: red }</style><script>var s = "<h1>not a heading</h1>";</script></head>
<body>
<h1>Policy</h1>
<p>Intro paragraph about the policy. It has two sentences.</p>
<h2>Remote wipe</h2>
<table>
<tr><th>Plan</th><th>Wipe</th></tr>
<tr><td>Free</td><td>yes &amp; no</td></tr>
<tr><td>Pro</td><td>yes</td></tr>
</table>
<ul><li>first item<li>second item</ul>
<h2>Code</h2>
<pre>client.wipe(device_id)
client.sync()</pre>
</body></html>
"""


def _hashed_embed(texts: list[str]) -> np.ndarray:
    """A stable pseudo-random unit vector per text: the semantic strategy's boundaries without a model."""
    rows = [np.random.default_rng(zlib.crc32(t.encode())).normal(size=8) for t in texts]
    return np.array([r / np.linalg.norm(r) for r in rows])


SEMANTIC = {"embed": _hashed_embed, "embed_version": "hashed@1"}
"""What ``semantic`` needs besides the sizes (the other strategies ignore it)."""


def run(ch, text, fmt="markdown"):  # type: ignore[no-untyped-def]
    return ch.chunk(text, source_id="doc-1", source_version="v1", tenant_id="acme", acl=["public"], fmt=fmt)


def test_html_sections_titles_and_hidden_content(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    layout = HtmlLayout(HTML)
    assert layout.title == "Acme & Co handbook"
    assert [s.heading_path for s in layout.sections] == [("Policy",), ("Policy", "Remote wipe"), ("Policy", "Code")]
    chunks = run(StructureChunker(minilm_tokenizer, max_tokens=200), HTML, "html")
    assert {c.title for c in chunks} == {"Acme & Co handbook"}
    clean = visible_text(HTML)
    for c in chunks:
        assert clean[c.start_offset : c.end_offset] == c.text  # one clean text: offsets index the page's visible text
        assert "color: red" not in c.text and "not a heading" not in c.text
        assert "<" not in c.text and c.visible_text is None  # visible text only, nothing else to show
        assert c.token_count == minilm_tokenizer.count(c.embed_text)
    table = [c for c in chunks if c.kind == "child" and "yes & no" in c.text]
    assert len(table) == 1 and "Free\nyes & no" in table[0].text


def test_html_long_table_splits_between_rows_only(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    rows = "".join(f"<tr><td>row {i}</td><td>value {i} with some words</td></tr>\n" for i in range(40))
    html = f"<h1>T</h1><table>\n{rows}</table>"
    children = [
        c for c in run(StructureChunker(minilm_tokenizer, max_tokens=40, overlap=0), html, "html") if c.kind == "child"
    ]
    assert len(children) > 3
    clean = visible_text(html)
    for c in children:
        assert clean[c.start_offset : c.end_offset] == c.text
        assert c.token_count <= 40
        body = c.text.removeprefix("T\n")
        # every child is a whole number of rows: it starts at a row's first cell and ends at its last
        assert re.match(r"row \d+\n", body) and re.search(r"value \d+ with some words$", body), c.text


def test_html_implied_end_tags_and_entities(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    html = "<h1>Title</h1><p>One &lt;b&gt; para<p>Two para<ul><li>a<li>b</ul>"
    layout = HtmlLayout(html)
    (section,) = layout.sections
    assert layout.view(section.start, section.end) == "Title\nOne <b> para\nTwo para\na\nb"


def test_html_chunks_record_their_visible_text_without_contextual_prefix(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Issue 19 item 5: what the reranker and the LLM read of an HTML chunk is the span's visible text; the contextual
    prefix (title, section) stays in ``contextual_text`` only, so ranking_text and the context do not say it twice."""
    for contextual in (False, True):
        chunks = run(make_chunker(minilm_tokenizer, strategy="parent-child", contextual=contextual), HTML, "html")
        layout = HtmlLayout(HTML)
        assert {c.kind for c in chunks} == {"parent", "child"}
        for c in chunks:
            assert layout.clean[c.start_offset : c.end_offset] == c.text  # one clean text (issue 31)
            assert c.visible_text is None and "visible_text" not in c.to_source()
            assert "<" not in c.text and "&amp;" not in c.text and "color: red" not in c.text
            assert not c.text.startswith("Acme & Co handbook")
            if contextual and c.kind == "child":
                assert c.contextual_text is not None and c.contextual_text.startswith("Acme & Co handbook\nPolicy")
            else:
                assert c.contextual_text is None
    table = next(c for c in chunks if c.kind == "child" and "yes & no" in c.text)
    assert "Free\nyes & no" in table.text
    markdown = run(make_chunker(minilm_tokenizer, strategy="parent-child", contextual=True), "# T\n\nA & <b>.\n")
    assert all(c.visible_text is None and "visible_text" not in c.to_source() for c in markdown)


def test_fixed_windows_follow_seed_000_arithmetic(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    # T tokens, L = 40, O = 10, S = 30: N = 1 + ceil((T - L) / S) windows (seed 000).
    text = " ".join(f"w{i}" for i in range(300))
    total = minilm_tokenizer.count(text)
    L, Ov = 40, 10
    chunks = run(FixedTokenChunker(minilm_tokenizer, max_tokens=L, overlap=Ov), text, "plain")
    assert len(chunks) == 1 + math.ceil((total - L) / (L - Ov))
    assert all(c.kind == "child" and c.parent_id is None for c in chunks)
    spans = [minilm_tokenizer.token_spans(text)]
    starts = [s for s, _ in spans[0]]
    for a, b in itertools.pairwise(chunks):
        assert text[a.start_offset : a.end_offset] == a.text
        assert a.token_count <= L
        # the next window starts S tokens later, so O tokens overlap
        assert starts.index(b.start_offset) - starts.index(a.start_offset) == L - Ov


def test_recursive_prefers_paragraphs_then_sentences(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "Alpha beta gamma.\n\n" + " ".join(f"Sentence number {i} is here." for i in range(30))
    chunks = run(RecursiveChunker(minilm_tokenizer, max_tokens=30, overlap=0), text, "plain")
    assert chunks[0].text.startswith("Alpha beta gamma.\n\nSentence number 0")  # small pieces are packed
    assert len(chunks) > 3
    for c in chunks:
        # never cut inside a sentence: every chunk starts and ends on sentence boundaries
        assert c.text.startswith(("Alpha", "Sentence")) and c.text.endswith("."), c.text
        assert c.token_count <= 30


def test_recursive_overlap_repeats_trailing_pieces(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = " ".join(f"Sentence {i} ends." for i in range(40))
    chunks = run(RecursiveChunker(minilm_tokenizer, max_tokens=24, overlap=8), text, "plain")
    assert len(chunks) > 3
    for a, b in itertools.pairwise(chunks):
        assert b.start_offset < a.end_offset  # overlapping spans
        assert minilm_tokenizer.count(text[b.start_offset : a.end_offset]) <= 8


def test_contextual_prefix_is_separate_and_budgeted(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "# Guide\n\n## Install\n\n" + " ".join(f"Step {i} does a thing." for i in range(40)) + "\n"
    chunks = run(StructureChunker(minilm_tokenizer, max_tokens=40, contextual=True), text)
    children = [c for c in chunks if c.kind == "child"]
    for c in children:
        assert text[c.start_offset : c.end_offset] == c.text
        assert c.contextual_text == f"Guide\nGuide > Install\n\n{c.text}"
        assert c.token_count == minilm_tokenizer.count(c.contextual_text) <= 40
    assert all(c.contextual_text is None for c in chunks if c.kind == "parent")


def test_versions_change_with_every_output_parameter(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    versions = {
        make_chunker(minilm_tokenizer, strategy=s, max_tokens=L, overlap=Ov, contextual=ctx, **SEMANTIC).version
        for s in Strategy
        for L in (32, 64)
        for Ov in (0, 8)
        for ctx in (False, True)
    }
    assert len(versions) == len(Strategy) * 8
    same = make_chunker(minilm_tokenizer, strategy="fixed", max_tokens=32, overlap=8)
    assert same.version == make_chunker(minilm_tokenizer, strategy="fixed", max_tokens=32, overlap=8).version
    assert (
        StructureChunker(minilm_tokenizer, max_tokens=32, parent_max_tokens=64).version
        != StructureChunker(minilm_tokenizer, max_tokens=32).version
    )


def test_parent_cap_groups_children(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "# Long\n\n" + "\n\n".join(f"Paragraph {i} has a few words in it." for i in range(30)) + "\n"
    chunks = run(StructureChunker(minilm_tokenizer, max_tokens=24, overlap=4, parent_max_tokens=60), text)
    parents = {c.chunk_id: c for c in chunks if c.kind == "parent"}
    assert len(parents) > 2
    for c in chunks:
        if c.kind == "child":
            p = parents[c.parent_id]
            assert p.start_offset <= c.start_offset < c.end_offset <= p.end_offset
        else:
            assert minilm_tokenizer.count(c.text) <= 60


def test_structure_without_parents(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    chunks = run(make_chunker(minilm_tokenizer, strategy="structure"), "# A\n\ntext here\n")
    assert [c.kind for c in chunks] == ["child"] and chunks[0].parent_id is None


def test_bad_strategy_and_format(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="valid values: fixed, recursive, structure, parent-child, semantic"):
        make_chunker(minilm_tokenizer, strategy="sentences")
    with pytest.raises(InputError, match="format"):
        run(make_chunker(minilm_tokenizer, strategy="fixed"), "<p>x</p>", "html")
    with pytest.raises(ConfigError, match="parent_max_tokens"):
        StructureChunker(minilm_tokenizer, max_tokens=64, parent_max_tokens=32)


# ------------------------------------------------------------------------------ properties
_chars = st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"])
_mixed = st.lists(
    st.one_of(
        st.text(_chars, min_size=1, max_size=80),
        st.sampled_from(
            ["# H1", "## 見出し", "- item", "| a | b |", "|---|---|", "```", "", "。", "これは文です。", "Done. Next!"]
        ),
    ),
    min_size=1,
    max_size=25,
).map("\n".join)
_html = st.lists(
    st.one_of(
        st.text(_chars, min_size=1, max_size=60),
        st.sampled_from(
            [
                "<h1>",
                "</h1>",
                "<h2>見出し</h2>",
                "<p>",
                "</p>",
                "<table><tr><td>",
                "</td></tr></table>",
                "<li>",
                "<ul>",
                "</ul>",
                "&amp;",
                "<br>",
                "<script>x<y</script>",
                "<!-- c -->",
                "文です。",
                "<pre>a\nb</pre>",
            ]
        ),
    ),
    min_size=1,
    max_size=25,
).map("".join)


def _check(tok, chunks, text, limit):  # type: ignore[no-untyped-def]
    ids = [c.chunk_id for c in chunks]
    assert len(set(ids)) == len(ids)
    for c in chunks:
        assert text[c.start_offset : c.end_offset] == c.text
        if c.kind == "child":
            assert c.token_count <= limit
            assert c.token_count == tok.count(c.embed_text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_mixed, st.sampled_from(list(Strategy)), st.booleans())
def test_property_every_strategy_exact_and_bounded(minilm_tokenizer, text, strategy, contextual) -> None:  # type: ignore[no-untyped-def]
    ch = make_chunker(minilm_tokenizer, strategy=strategy, max_tokens=24, overlap=6, contextual=contextual, **SEMANTIC)
    try:
        chunks = run(ch, text)
    except InputError:
        assert not text.strip()
        return
    limit = 24 if not contextual else max(24, max((c.token_count for c in chunks), default=0))
    _check(minilm_tokenizer, chunks, text, limit if contextual else 24)
    assert [c.chunk_id for c in run(ch, text)] == [c.chunk_id for c in chunks]  # stable across runs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_html)
def test_property_html_offsets_exact(minilm_tokenizer, text) -> None:  # type: ignore[no-untyped-def]
    ch = StructureChunker(minilm_tokenizer, max_tokens=24, overlap=6)
    try:
        chunks = run(ch, text, "html")
    except InputError:
        assert not text.strip()
        return
    _check(minilm_tokenizer, chunks, visible_text(text), 24)  # offsets index the page's visible text
    for c in chunks:
        assert "x<y" not in c.embed_text and "x<y" not in c.text  # script content never reaches the model
        assert c.visible_text is None
