"""Word and OpenDocument extraction (es_rag.ingest.office): the Markdown each renders, that markdown-it reads exactly
the intended headings, paragraphs, lists and tables from it, what is left out with a warning, the errors for files
that are no such document, a real ODF file (docutils' styles.odt), and chunking the Markdown with exact offsets.
Documents are written with python-docx and odfpy (tests/support/office_docs.py)."""

from __future__ import annotations

import importlib.resources
import io
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from es_rag.chunking.markdown import with_escapes
from es_rag.errors import InputError
from es_rag.ingest.office import OFFICE_SUFFIXES, OfficeText, extract_office
from es_rag.ingest.office_render import Block as _Block
from es_rag.ingest.office_render import lines, render
from tests.support.office_docs import (
    add_numbering,
    docx_bytes,
    guide_docx,
    guide_odt,
    list_item,
    odt_bytes,
    ole_bytes,
    png,
    raw_paragraph,
    run,
    zip_bytes,
)

MD = MarkdownIt("commonmark").enable("table")


def _plain(token: Token) -> str:
    parts = []
    for child in token.children or ():
        if child.type in ("text", "code_inline", "html_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
    return "".join(parts)


def structure(md: str) -> list[str]:
    """What markdown-it reads: one ``container/path: text`` row per leaf block."""
    stack: list[str] = []
    rows: list[str] = []
    for t in MD.parse(md):
        if t.nesting == 1:
            stack.append(t.tag)
        elif t.nesting == -1:
            stack.pop()
        elif t.type == "inline":
            rows.append(f"{'/'.join(stack)}: {_plain(t)}")
        else:
            rows.append(f"{'/'.join([*stack, t.type])}: {t.content}")
    return rows


def _render(blocks: list[_Block]) -> str:
    """The Markdown rendering of ``blocks`` (the text as written, with its escapes put back)."""
    out = render(blocks)
    return with_escapes(out.text, out.escapes)


def as_written(markdown: str) -> str:
    """What the text holds of a rendering: every backslash the rendering added, dropped (a table cell's ``\\|`` stays:
    the table is Markdown in the text too)."""
    keep = "\x01"
    lines = [line.replace("\\|", keep) if line.startswith("| ") else line for line in markdown.split("\n")]
    return re.sub(r"\\(?=[#>+*=_`~<\[:|.)-])", "", "\n".join(lines)).replace(keep, "\\|")


@pytest.fixture(scope="module")
def word() -> OfficeText:
    return extract_office(guide_docx(), name="docs/guide.docx", kind="docx")


@pytest.fixture(scope="module")
def odt() -> OfficeText:
    return extract_office(guide_odt(), name="docs/guide.odt", kind="odt")


WORD_MD = """\
# The Guide

## Install

First line
second line

\\# not a heading

1986\\. A year

\\- dash

a \\| b

indented

\\<div>html</div>

- alpha
  - beta
- gamma
1. one
2. two

Between the lists.

1. n1
   - n1a
     1. n1a-i
     2. n1a-ii
2. n2
   - \\# n2a

### Tables

| Name | Value \\| pipe | Note |
| --- | --- | --- |
| a |  | x |
| wide |  |  |

| after in side |
| --- |

### Outline level 2

See the site now.

Kept inserted end.

Page 7 and 9 pages.

Visible text.

In a control.

Last words.
"""


def test_word_renders_markdown(word: OfficeText) -> None:
    assert word.markdown == WORD_MD
    assert word.text == as_written(WORD_MD)
    assert "# not a heading\n\n1986. A year\n\n- dash\n\na | b\n" in word.text  # as the document wrote them
    assert word.name == "docs/guide.docx" and word.title == "Guide title"
    assert word.warnings == (
        "2 embedded images skipped",
        "1 footnote/endnote skipped",
        "1 comment skipped",
        "tracked changes read as accepted: 1 insertion kept, 2 deletions dropped",
    )


def test_word_markdown_parses_to_the_intended_blocks(word: OfficeText) -> None:
    assert structure(word.markdown) == [
        "h1: The Guide",
        "h2: Install",
        "p: First line\nsecond line",
        "p: # not a heading",
        "p: 1986. A year",
        "p: - dash",
        "p: a | b",
        "p: indented",
        "p: <div>html</div>",
        "ul/li/p: alpha",
        "ul/li/ul/li/p: beta",
        "ul/li/p: gamma",
        "ol/li/p: one",
        "ol/li/p: two",
        "p: Between the lists.",
        "ol/li/p: n1",
        "ol/li/ul/li/p: n1a",
        "ol/li/ul/li/ol/li/p: n1a-i",
        "ol/li/ul/li/ol/li/p: n1a-ii",
        "ol/li/p: n2",
        "ol/li/ul/li/p: # n2a",
        "h3: Tables",
        "table/thead/tr/th: Name",
        "table/thead/tr/th: Value | pipe",
        "table/thead/tr/th: Note",
        "table/tbody/tr/td: a",
        "table/tbody/tr/td: ",
        "table/tbody/tr/td: x",
        "table/tbody/tr/td: wide",
        "table/tbody/tr/td: ",
        "table/tbody/tr/td: ",
        "table/thead/tr/th: after in side",
        "h3: Outline level 2",
        "p: See the site now.",
        "p: Kept inserted end.",
        "p: Page 7 and 9 pages.",
        "p: Visible text.",
        "p: In a control.",
        "p: Last words.",
    ]


def test_the_text_is_clean(word: OfficeText, odt: OfficeText) -> None:
    for text in (word.text, odt.text):
        assert text.endswith("\n") and not text.endswith("\n\n")
        assert "\r" not in text and "\t" not in text
        assert not any(line != line.rstrip() for line in text.split("\n"))


def test_headings_without_a_title_start_at_level_one() -> None:
    def build(doc: Any) -> None:
        doc.add_heading("Top", level=1)
        doc.add_paragraph("Body.")
        doc.add_heading("Issue #", level=2)
        doc.add_heading("C#", level=3)
        raw_paragraph(doc, run("Body text level"), '<w:outlineLvl w:val="9"/>')

    out = extract_office(docx_bytes(build), name="h.docx", kind="docx")
    assert out.markdown == "# Top\n\nBody.\n\n## Issue \\#\n\n### C#\n\nBody text level\n"
    assert out.text == "# Top\n\nBody.\n\n## Issue #\n\n### C#\n\nBody text level\n"
    from es_rag.chunking.factory import make_chunker
    from tests.support.corpus import WordTokenizer

    chunks = make_chunker(WordTokenizer(), strategy="structure", max_tokens=24, overlap=4).chunk(
        out.text, source_id="h.docx", source_version="1", tenant_id="t", acl=[], escapes=out.escapes
    )
    assert {c.heading_path for c in chunks} == {("Top",), ("Top", "Issue #", "C#")}
    assert structure(out.markdown) == ["h1: Top", "p: Body.", "h2: Issue #", "h3: C#", "p: Body text level"]
    assert out.title is None and out.warnings == ()


def test_word_list_numbering_continues_and_restarts_deeper_levels() -> None:
    def build(doc: Any) -> None:
        add_numbering(doc, 7, ["decimal", "lowerLetter"])
        list_item(doc, "a", 7, 0)
        list_item(doc, "a.i", 7, 1)
        doc.add_paragraph("Interruption.")
        list_item(doc, "b", 7, 0)
        list_item(doc, "b.i", 7, 1)
        list_item(doc, "b.ii", 7, 1)

    out = extract_office(docx_bytes(build), name="l.docx", kind="docx").text
    assert out == "1. a\n   1. a.i\n\nInterruption.\n\n2. b\n   1. b.i\n   2. b.ii\n"
    assert structure(out) == [
        "ol/li/p: a",
        "ol/li/ol/li/p: a.i",
        "p: Interruption.",
        "ol/li/p: b",
        "ol/li/ol/li/p: b.i",
        "ol/li/ol/li/p: b.ii",
    ]


def test_a_nested_list_starting_past_one_stays_nested() -> None:
    md = _render([_Block("li", "parent"), _Block("li", "third", 1, 3), _Block("li", "fourth", 1, 4)])
    assert md == "- parent\n\n  3. third\n  4. fourth\n"
    assert structure(md) == ["ul/li/p: parent", "ul/li/ol/li/p: third", "ul/li/ol/li/p: fourth"]


ODT_MD = """\
# Manual

## Intro

Hello world  x y
\\# next line

See the site.

1986\\. A year

1. first
   - a
   - \\- b
2. second

### Data

| A | B \\| C |  |
| --- | --- | --- |
| span |  | in side |

Picture:  done.
"""


def test_odt_renders_markdown(odt: OfficeText) -> None:
    assert odt.markdown == ODT_MD
    assert odt.text == as_written(ODT_MD)
    assert odt.title == "Meta title"
    assert odt.warnings == (
        "1 embedded image skipped",
        "1 drawing object skipped (text boxes, shapes, charts, embedded objects: their text is not read)",
        "1 footnote/endnote skipped",
        "1 comment skipped",
        "tracked changes read as accepted: 1 deletion dropped",
    )
    assert structure(odt.markdown) == [
        "h1: Manual",
        "h2: Intro",
        "p: Hello world  x y\n# next line",
        "p: See the site.",
        "p: 1986. A year",
        "ol/li/p: first",
        "ol/li/ul/li/p: a",
        "ol/li/ul/li/p: - b",
        "ol/li/p: second",
        "h3: Data",
        "table/thead/tr/th: A",
        "table/thead/tr/th: B | C",
        "table/thead/tr/th: ",
        "table/tbody/tr/td: span",
        "table/tbody/tr/td: ",
        "table/tbody/tr/td: in side",
        "p: Picture:  done.",
    ]


def test_real_odf_file_from_docutils() -> None:
    path = importlib.resources.files("docutils") / "writers" / "odf_odt" / "styles.odt"
    if not path.is_file():
        pytest.skip("docutils ships no writers/odf_odt/styles.odt here")
    out = extract_office(path.read_bytes(), name="styles.odt", kind="odt")
    assert out.text.startswith("Table style 0 (rststyle-table-0) – the default table style\n\n| Do not change")
    assert "Table style 1 (rststyle-table-1)" in out.text
    rows = structure(out.markdown)
    assert rows.count("table/thead/tr/th: ") == 1 and len([r for r in rows if r.startswith("table/")]) == 9
    assert out.title is None and out.warnings == ()


# -- what stays text: any line, whatever its characters, is read back as the block it was rendered as -------------
CHARS = st.sampled_from([*"#>-+*=_`~<[]:|!?/1.) \t\\&;a", "1986.", "```", "<div>", "    "])
LINE = st.lists(CHARS, max_size=8).map("".join)
TEXT = st.lists(LINE, min_size=1, max_size=4).map("\n".join)


def _types(md: str) -> list[str]:
    return [t.type for t in MD.parse(md)]


@settings(max_examples=250, deadline=None)
@given(TEXT, TEXT)
def test_any_paragraph_stays_one_paragraph(first: str, second: str) -> None:
    md = _render([_Block("p", first), _Block("p", second)])
    count = sum(1 for text in (first, second) if text.strip())
    assert _types(md) == ["paragraph_open", "inline", "paragraph_close"] * count
    # and the text holds each paragraph's lines as written: the escapes live only in the rendering
    written = ["\n".join(lines(t)) for t in (first, second) if lines(t)]
    assert render([_Block("p", first), _Block("p", second)]).text == ("\n\n".join(written) + "\n" if written else "")


@settings(max_examples=150, deadline=None)
@given(TEXT, TEXT, st.integers(1, 6))
def test_any_heading_and_list_keep_their_shape(head: str, item: str, level: int) -> None:
    blocks = [_Block("h", head, level), _Block("li", item), _Block("li", item, 1, 2), _Block("li", item)]
    md = _render(blocks)
    heading = ["heading_open", "inline", "heading_close"] if head.strip() else []
    if not item.strip():
        assert _types(md) == heading
        return
    li = ["list_item_open", "paragraph_open", "inline", "paragraph_close"]
    nested = ["ordered_list_open", *li, "list_item_close", "ordered_list_close"]
    assert _types(md) == [
        *heading,
        "bullet_list_open",
        *li,
        *nested,
        "list_item_close",
        *li,
        "list_item_close",
        "bullet_list_close",
    ]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(TEXT, min_size=1, max_size=3), min_size=1, max_size=3))
def test_any_table_keeps_its_cells(rows: list[list[str]]) -> None:
    md = _render([_Block("table", rows=rows)])
    if not any(c.split() for r in rows for c in r):
        assert md == ""
        return
    width = max(len(r) for r in rows)
    cells = [t for t in MD.parse(md) if t.type in ("th_open", "td_open")]
    assert len(cells) == width * len(rows)
    assert _types(md)[0] == "table_open" and _types(md)[-1] == "table_close"


CONTENT = '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"/>'
ODT_PARTS = {"mimetype": "application/vnd.oasis.opendocument.text", "content.xml": CONTENT}
MANIFEST = (
    '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
    '<manifest:file-entry manifest:full-path="{}" manifest:media-type="text/xml">{}</manifest:file-entry>'
    "</manifest:manifest>"
)
ODT_CASES = {
    "encrypted-odf": (
        {"META-INF/manifest.xml": MANIFEST.format("content.xml", "<manifest:encryption-data/>")},
        "password-protected",
    ),
    "bad-xml": (
        {"META-INF/manifest.xml": MANIFEST.format("content.xml", ""), "content.xml": "<office:x"},
        "is damaged",
    ),
    "no-manifest": ({}, "cannot be read.*manifest.xml"),
    "no-body": ({"META-INF/manifest.xml": MANIFEST.format("content.xml", "")}, "no office:text body"),
}


@pytest.mark.parametrize("case", ODT_CASES)
def test_unusable_odf_packages_are_input_errors(case: str) -> None:
    parts, match = ODT_CASES[case]
    with pytest.raises(InputError, match=match) as err:
        extract_office(zip_bytes({**ODT_PARTS, **parts}), name="bad.odt", kind="odt")
    assert err.value.document == "bad.odt"
    assert err.value.field == ("encryption" if case == "encrypted-odf" else "odt")


# -- images and empty documents ---------------------------------------------------------------------------------
def test_a_document_of_images_only_has_no_text() -> None:
    data = docx_bytes(lambda doc: doc.add_paragraph().add_run().add_picture(io.BytesIO(png())))
    with pytest.raises(InputError, match=r"no text.*1 embedded image skipped") as err:
        extract_office(data, name="pic.docx", kind="docx")
    assert err.value.document == "pic.docx" and err.value.field == "text"


@pytest.mark.parametrize(
    ("data", "kind", "field", "match"),
    [
        (b"", "docx", "docx", "empty"),
        (b"  \n", "odt", "odt", "empty"),
        (b"\x8f\x01random bytes\x00\xff" * 10, "docx", "docx", "not a ZIP"),
        (b"{\\rtf1 hello}", "docx", "docx", "not a ZIP"),
        (ole_bytes("EncryptionInfo", "EncryptedPackage"), "docx", "encryption", "password-protected"),
        (ole_bytes("WordDocument"), "docx", "docx", "OLE compound file"),
        (zip_bytes({"word/document.xml": "<x/>"}), "docx", "docx", r"without \[Content_Types\].xml"),
        (zip_bytes({"mimetype": "x", "content.xml": "<x/>"}), "docx", "docx", "looks like an OpenDocument"),
        (zip_bytes({"[Content_Types].xml": "<Types/>"}), "docx", "docx", "cannot be read"),
        (zip_bytes({"a.txt": "x"}), "odt", "odt", "without content.xml"),
        (
            zip_bytes({"mimetype": "application/vnd.oasis.opendocument.spreadsheet", "content.xml": "<x/>"}),
            "odt",
            "odt",
            "mimetype is 'application/vnd.oasis.opendocument.spreadsheet'",
        ),
    ],
    ids=[
        "empty",
        "blank",
        "random",
        "rtf",
        "encrypted-ooxml",
        "legacy-doc",
        "zip-without-word",
        "odf-as-docx",
        "broken-package",
        "zip-without-content",
        "spreadsheet",
    ],
)
def test_unusable_files_are_input_errors(data: bytes, kind: str, field: str, match: str) -> None:
    with pytest.raises(InputError, match=match) as err:
        extract_office(data, name="bad.file", kind=kind)
    assert err.value.document == "bad.file" and err.value.field == field


def test_a_docx_read_as_odt_and_a_truncated_one() -> None:
    data = docx_bytes(lambda doc: doc.add_paragraph("Some text."))
    with pytest.raises(InputError, match="looks like an Office Open XML file"):
        extract_office(data, name="a.odt", kind="odt")
    # issue 46, item 13: a cut file said "not a ZIP package", then showed the ZIP signature b'PK\x03\x04'
    for cut in (data[: len(data) // 2], b"PK\x03\x04"):
        with pytest.raises(InputError) as err:
            extract_office(cut, name="cut.docx", kind="docx")
        assert err.value.document == "cut.docx"
        assert str(err.value).endswith(
            "a truncated or damaged Word document (.docx): its ZIP package has no central directory"
        ), str(err.value)


def test_documents_without_text() -> None:
    with pytest.raises(InputError, match="no text"):
        extract_office(docx_bytes(), name="e.docx", kind="docx")
    with pytest.raises(InputError, match="no text"):
        extract_office(odt_bytes(lambda doc: None), name="e.odt", kind="odt")


def test_suffixes_and_an_unknown_kind() -> None:
    assert OFFICE_SUFFIXES == {".docx": "docx", ".odt": "odt"}
    with pytest.raises(InputError, match="unknown office document kind 'doc'"):
        extract_office(b"x", name="a.doc", kind="doc")


# -- end to end: the chunker reads the headings, and every chunk is a slice of the Markdown -------------------------
@pytest.mark.parametrize("strategy", ["structure", "parent-child"])
def test_chunks_of_the_markdown_keep_lineage_and_headings(word: OfficeText, strategy: str) -> None:
    from es_rag.chunking.factory import make_chunker
    from tests.support.corpus import WordTokenizer

    chunker = make_chunker(WordTokenizer(), strategy=strategy, max_tokens=24, overlap=4)
    chunks = chunker.chunk(
        word.text,
        source_id="a.docx",
        source_version="1",
        tenant_id="t",
        acl=[],
        title=word.title,
        fmt="markdown",
        escapes=word.escapes,
    )
    assert chunks
    for c in chunks:
        assert word.text[c.start_offset : c.end_offset] == c.text
        # issue 46: what BM25, the models and the LLM read is the text as written, never the rendering's escapes
        assert not re.search(r"\\[#.<-]", c.text) and not re.search(r"\\\|", c.text.replace("| Value \\| pipe", ""))
    assert any("# not a heading\n\n1986. A year" in c.text for c in chunks)
    paths = {c.heading_path for c in chunks}
    assert ("The Guide", "Install") in paths
    assert ("The Guide", "Install", "Tables") in paths
    table = [c for c in chunks if "| wide |" in c.text and c.kind == "child"]
    assert table and all(c.heading_path == ("The Guide", "Install", "Tables") for c in table)
    assert not any("# not a heading" in p for path in paths for p in path)


# Debian's live-manual.en.odt (package live-manual-odf 2:20151217.2): its META-INF/manifest.xml, verbatim, lists three
# parts its ZIP does not hold (Thumbnails/thumbnail.png, layout-cache, Configurations2/accelerator/current.xml). The
# manifest is the file's only real-world part kept here; the body is this test's own.
LIVE_MANUAL_MANIFEST = (
    '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:'
    'manifest:1.0" manifest:version="1.2">  <manifest:file-entry manifest:media-type="application/vnd.oasis.opendocum'
    'ent.text" manifest:version="1.2" manifest:full-path="/"/>  <manifest:file-entry manifest:media-type="text/xml" '
    'manifest:full-path="styles.xml"/>  <manifest:file-entry manifest:media-type="text/xml" manifest:full-path="conte'
    'nt.xml"/>    <manifest:file-entry manifest:media-type="" manifest:full-path="Pictures/bullet_09.png"/>  <manifes'
    't:file-entry manifest:media-type="text/xml" manifest:full-path="meta.xml"/>  <manifest:file-entry manifest:media-'
    'type="application/rdf+xml" manifest:full-path="manifest.rdf"/>  <manifest:file-entry manifest:media-type="image/p'
    'ng" manifest:full-path="Thumbnails/thumbnail.png"/>  <manifest:file-entry manifest:media-type="application/binar'
    'y" manifest:full-path="layout-cache"/>  <manifest:file-entry manifest:media-type="text/xml" manifest:full-path="s'
    'ettings.xml"/>  <manifest:file-entry manifest:media-type="" manifest:full-path="Configurations2/accelerator/curre'
    'nt.xml"/>  <manifest:file-entry manifest:media-type="application/vnd.sun.xml.ui.configuration" manifest:full-pat'
    'h="Configurations2/"/></manifest:manifest>'
)


def test_a_debian_odt_whose_manifest_lists_parts_it_lacks_is_read() -> None:
    """Issue 46, item 1: ``KeyError: "There is no item named 'Thumbnails/thumbnail.png' in the archive"`` from odfpy's
    ``load``; LibreOffice opens the file, so es_rag reads it and says what the manifest listed in vain."""
    import zipfile

    from odf import text

    base = odt_bytes(lambda doc: doc.text.addElement(text.P(text="Run lb clean before a new build.")))
    parts: dict[str, bytes | str] = {}
    with zipfile.ZipFile(io.BytesIO(base)) as z:
        for name in z.namelist():
            parts[name] = z.read(name)
    parts = {n: c for n, c in parts.items() if not n.startswith(("Thumbnails/", "Configurations2/"))}
    parts.update({"META-INF/manifest.xml": LIVE_MANUAL_MANIFEST, "Pictures/bullet_09.png": png(), "manifest.rdf": ""})
    parts.setdefault("settings.xml", '<?xml version="1.0"?><office:document-settings xmlns:office="urn:oasis:names:tc:'
                     'opendocument:xmlns:office:1.0" office:version="1.2"/>')  # fmt: skip
    data = zip_bytes(parts)
    from odf.opendocument import load

    with pytest.raises(KeyError, match=r"Thumbnails/thumbnail\.png"):
        load(io.BytesIO(data))  # the library alone, as before
    got = extract_office(data, name="live-manual.en.odt", kind="odt")
    assert got.text == "Run lb clean before a new build.\n"
    assert any(w.startswith("3 listed parts skipped") for w in got.warnings), got.warnings
