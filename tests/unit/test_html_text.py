"""Clean visible text of HTML (issue 31): whitespace between inline elements, ``pre`` kept as written, no page
chrome (Sphinx/MkDocs navigation, footers, the ``¶`` permalinks of headings). Expected texts are written by hand."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from es_rag.chunking.html import HtmlLayout, visible_text

# The shape of a page of Python's documentation (Sphinx, pydoctheme): relation bars, sidebar, headerlinks, a
# highlighted code block and inline code made of spans (written after the idlelib/help.html that CPython ships).
from tests.support.html import PYDOC

CODE = "def foo(mydict={}):  # Dang\n    mydict[x] = 1\n    return mydict"


def test_a_python_docs_page_keeps_its_code_and_drops_its_chrome() -> None:
    layout = HtmlLayout(PYDOC)
    assert [s.heading_path for s in layout.sections] == [("venv — Creation of virtual environments",)]
    text = layout.view(0, len(PYDOC))
    assert text == (
        "venv — Creation of virtual environments\n"
        "Create one with python3 -m venv env, then activate it.\n"
        f"{CODE}\n"
        "Entities & emphasis, bold."
    )


@pytest.mark.parametrize(
    "markup, expected",
    [
        ("<p><span>python3</span> <span>-m</span>\n<span>venv</span></p>", "python3 -m venv"),
        ("<p>word<span>joined</span> x</p>", "wordjoined x"),  # no space in the source: none in the text
        ("<p>a <b> b </b> c</p>", "a b c"),
        ("<p>a<br>b</p><p>c</p>", "a\nb\nc"),
        ("<pre>  two  spaces\n\n  and a blank line</pre>", "  two  spaces\n\n  and a blank line"),
        ("<p>x</p><pre>\nfirst\n  second\n</pre><p>y</p>", "x\nfirst\n  second\ny"),
        ("<h2>Title<a class='headerlink' href='#t'>&para;</a></h2>", "Title"),
        ("<nav><a>Home</a></nav><main><p>Body</p></main><footer>(c) Site</footer>", "Body"),
        ("<div role='navigation'><div><p>Menu</p></div></div><p>Kept</p>", "Kept"),  # nested divs in chrome
        ("<div class='md-sidebar'><ul><li>Nav</li></ul></div><article><p>Doc</p></article>", "Doc"),
        ("<textarea>a  b\nc</textarea>", "a  b\nc"),
    ],
)
def test_visible_text(markup: str, expected: str) -> None:
    assert visible_text(markup) == expected


def test_chunks_of_a_python_docs_page_have_no_navigation_and_no_pilcrow(minilm_tokenizer: object) -> None:
    from es_rag.chunking import StructureChunker

    chunker = StructureChunker(minilm_tokenizer, max_tokens=60)  # type: ignore[arg-type]
    chunks = chunker.chunk(PYDOC, source_id="venv.html", source_version="v1", tenant_id="t", acl=("p",), fmt="html")
    seen = "\n".join(c.text for c in chunks)  # one clean text: the chunk's text is the visible text
    for chrome in ("Navigation", "Table of Contents", "Next topic", "Quick search", "Copyright", "¶", "index"):
        assert chrome not in seen
    assert all("¶" not in part for c in chunks for part in c.heading_path)
    assert "python3 -m venv env" in seen and "mydict[x] = 1" in seen
    clean = visible_text(PYDOC)  # offsets index the page's visible text, which visible_text of the file gives back
    assert all(clean[c.start_offset : c.end_offset] == c.text for c in chunks)


REAL = sorted(glob.glob("/root/.pyenv/versions/*/lib/python3.*/idlelib/help.html"))


@pytest.mark.skipif(not REAL, reason="no Python documentation page (idlelib/help.html) on this machine")
def test_a_real_python_docs_page() -> None:
    page = Path(REAL[-1]).read_text(encoding="utf-8")
    layout = HtmlLayout(page)
    text = layout.view(0, len(page))
    assert "¶" not in text and "Quick search" not in text and "Created using Sphinx" not in text
    assert "python -m idlelib" in text  # inline code of spans, spaces kept
    assert all("¶" not in part for s in layout.sections for part in s.heading_path)
