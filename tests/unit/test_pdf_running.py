"""Running headers and footers leave a PDF's text (issue 46: ``Chapter 2: Simple manipulations; numbers and vectors
11`` sat inside the chunks of the R manuals), and lines that only look like them stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rag.ingest.pdf import extract_pdf
from es_rag.ingest.pdf_running import blank, running_spans
from tests.support.pdfs import Page, build_pdf

BODY = [
    "A vector is the simplest structure that the language manipulates.",
    "Its elements are numbers, strings or logical values of one kind.",
]
LAST = [
    "Assignment uses the arrow.",
    "Lists hold anything.",
    "Factors code categories.",
    "Arrays have dimensions.",
    "Frames hold columns.",
    "Functions are objects too.",
]
"""Each page's own last line (a line that repeats on three pages, digits aside, is running by design)."""


def texinfo_pages() -> list[Page]:
    """A texinfo manual: a page number alone on the first page of each chapter, 'Chapter N: Title  page' above the
    others; chapters of one, two and three pages."""
    chapters = [("Introduction", 1), ("Simple manipulations; numbers and vectors", 3), ("Objects", 2)]
    pages, number = [], 1
    for c, (title, length) in enumerate(chapters, start=1):
        for k in range(length):
            header = str(number) if k == 0 else f"Chapter {c}: {title} {number}"
            pages.append(Page([header, *BODY, LAST[number - 1]]))
            number += 1
    return pages


def test_texinfo_headers_that_change_with_the_chapter_leave_the_text() -> None:
    pdf = extract_pdf(build_pdf(texinfo_pages()), name="r-intro.pdf")
    assert "Chapter" not in pdf.text
    pages = pdf.text.split("\f")
    assert len(pages) == 6 and all(p.strip().startswith(BODY[0]) for p in pages)
    assert [p.strip().splitlines()[-1] for p in pages] == LAST
    assert len(pdf.pages) == 6 and all(pdf.page_of(s) == i for i, s in enumerate(pdf.pages, start=1))


def test_a_title_above_and_a_number_below_every_page_leave_the_text() -> None:
    pages = [Page(["Shared MIME-info Database", *BODY, f"Section text {i}.", str(i + 2)]) for i in range(4)]
    pdf = extract_pdf(build_pdf(pages), name="spec.pdf")
    assert "Shared MIME-info" not in pdf.text
    assert [p.strip().splitlines()[-1] for p in pdf.text.split("\f")] == [f"Section text {i}." for i in range(4)]


def test_lines_that_repeat_twice_or_carry_unrelated_numbers_stay() -> None:
    pages = [
        Page(["Installing", *BODY, "See table 3"]),
        Page(["Installing", *BODY, "See table 9"]),
        Page(["Using it", *BODY, "Version 2026"]),
        Page(["Removing it", *BODY, "Step 1"]),
    ]
    pdf = extract_pdf(build_pdf(pages), name="short.pdf")
    for kept in ("Installing", "See table 3", "See table 9", "Using it", "Version 2026", "Removing it", "Step 1"):
        assert kept in pdf.text


def test_spans_are_raw_indices_and_blanking_keeps_every_index() -> None:
    raw = ["Title\r\nbody one\r\n1", "Title\r\nbody two\r\n2", "Title\r\nbody three\r\n3"]
    spans = running_spans(raw)
    assert spans == [[(0, 5), (17, 18)], [(0, 5), (17, 18)], [(0, 5), (19, 20)]]
    blanked = [blank(r, s) for r, s in zip(raw, spans, strict=True)]
    assert [len(b) for b in blanked] == [len(r) for r in raw] and blanked[0] == "     \r\nbody one\r\n "
    long = ["x " * 100 + "header"] * 4  # a line over MAX_CHARS is never running
    assert running_spans(long) == [[], [], [], []]


@pytest.mark.parametrize(
    "path, gone",
    [
        (Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"), "Chapter 2: ASN.1 structure handling"),
        (Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"), "Shared MIME-info Database\n"),
    ],
    ids=lambda v: getattr(v, "name", ""),
)
def test_real_manuals_lose_their_running_lines(path: Path, gone: str) -> None:
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine (its Debian package is not installed)")
    pdf = extract_pdf(path.read_bytes(), name=path.name)
    pages = pdf.text.split("\f")[2:]
    assert not any(gone in p for p in pages)
    assert not any(p.strip().splitlines()[-1].strip().isdigit() for p in pages if p.strip())  # no page number left
