"""PDF extraction (issue 30, step 1): the text offsets index, page starts, headings from the outline or font sizes,
scanned pages named once, and clear errors for encrypted, damaged and empty files. PDFs are written by hand
(tests/support/pdfs.py); one test reads a real manual when this machine has one."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rag.errors import InputError
from es_rag.ingest.pdf import PAGE_BREAK, PdfText, extract_pdf
from tests.support.pdfs import Bookmark, Line, Page, build_pdf

GUIDE = [
    Page(
        [
            Line("1 Getting started", 18),
            "Install the tool, then run it once.",
            "The manip-",
            "ulation of trees is easy.",
        ]
    ),
    Page(
        [
            Line("2 Usage", 18),
            "A command-line tool reads command-line options.",
            Line("2.1 Options", 14),
            "Options come first; see Results below.",
            Line("Results", 14),
            "Results are printed.",
        ]
    ),
    Page(scan=True),
    Page(),
    Page(["Appendix text closes the guide."]),
]
OUTLINE = [
    Bookmark("1 Getting started", 1, top=GUIDE[0].baselines()[0] + 18),
    Bookmark("2 Usage", 2, top=GUIDE[1].baselines()[0] + 18),
    Bookmark("Options", 2, level=2, top=GUIDE[1].baselines()[2] + 14, action=True),
    # "Results" is also a word of the line above: the destination's height picks the heading line
    Bookmark("Results", 2, level=2, top=GUIDE[1].baselines()[4] + 14),
    Bookmark("Missing title", 5, top=GUIDE[4].baselines()[0] + 11),
]


@pytest.fixture(scope="module")
def guide() -> PdfText:
    return extract_pdf(build_pdf(GUIDE, outline=OUTLINE, title="The Guide"), name="docs/guide.pdf")


def test_page_offsets_index_the_text(guide: PdfText) -> None:
    firsts = ["1 Getting started", "2 Usage", "", "", "Appendix text"]
    assert len(guide.pages) == 5 and guide.pages[0] == 0
    for i, first in enumerate(firsts):
        assert guide.text[guide.pages[i] :].startswith(first)
        if i:  # the page break before a page belongs to the page before it
            assert guide.text[guide.pages[i] - len(PAGE_BREAK) : guide.pages[i]] == PAGE_BREAK
    assert guide.text.split("\f")[4] == "Appendix text closes the guide."
    assert "\r" not in guide.text and "\ufffe" not in guide.text


def test_page_of_and_page_range(guide: PdfText) -> None:
    text, pages = guide.text, guide.pages
    assert guide.page_of(0) == 1
    assert guide.page_of(pages[1] - 1) == 1  # the form feed closing page 1
    assert guide.page_of(pages[1]) == 2
    assert guide.page_of(text.index("Results are printed")) == 2
    assert guide.page_of(text.index("Appendix")) == 5
    assert guide.page_of(len(text)) == 5
    start = text.index("easy")
    assert guide.page_range(start, text.index("command-line") + 4) == (1, 2)
    assert guide.page_range(start, start + 4) == (1, 1)
    assert guide.page_range(start, start) == (1, 1)
    for bad in (-1, len(text) + 1):
        with pytest.raises(ValueError, match=r"docs/guide\.pdf"):
            guide.page_of(bad)


def test_line_end_hyphenation_is_joined_unless_the_document_spells_the_hyphen() -> None:
    pages = [Page(["The manip-", "ulation of trees.", "A command-", "line flag; the command-line parser."])]
    text = extract_pdf(build_pdf(pages), name="h.pdf").text
    assert "The manipulation of trees." in text
    assert "A command-line flag; the command-line parser." in text


def test_a_digit_or_a_capital_at_a_line_end_hyphen_keeps_it() -> None:
    """No word is hyphenated before a digit or a capital: ``group-14`` and ``anti-Semitic`` are compounds (the
    PDF version of rag-en-train showed ``group14``)."""
    pages = [Page(["Elements of group-", "14 are metals; COVID-", "19 spread; anti-", "Semitic laws."])]
    text = extract_pdf(build_pdf(pages), name="h.pdf").text
    assert "group-14 are metals; COVID-19 spread; anti-Semitic laws." in " ".join(text.split())


def test_headings_come_from_the_outline_at_their_titles(guide: PdfText) -> None:
    assert guide.heading_source == "outline"
    got = [(h.level, h.title, h.page, h.found) for h in guide.headings]
    assert got == [
        (1, "1 Getting started", 1, True),
        (1, "2 Usage", 2, True),
        (2, "Options", 2, True),
        (2, "Results", 2, True),
        (1, "Missing title", 5, False),
    ]
    at = {h.title: guide.text[h.offset :].split("\n", 1)[0] for h in guide.headings}
    assert at["1 Getting started"] == "1 Getting started"
    assert at["Options"] == "2.1 Options"  # the section number before the title belongs to the heading
    assert at["Results"] == "Results"  # not the "see Results below" of the line above
    assert at["Missing title"] == "Appendix text closes the guide."  # not on the page: the line at the target
    assert all(guide.page_of(h.offset) == h.page for h in guide.headings)
    assert [h.offset for h in guide.headings] == sorted(h.offset for h in guide.headings)


def test_an_outline_without_positions_places_titles_by_text() -> None:
    pages = [Page(["Preface text.", Line("Overview", 16), "Body."])]
    outline = [Bookmark("Overview", 1), Bookmark("Nowhere", 0)]
    pdf = extract_pdf(build_pdf(pages, outline=outline), name="fit.pdf")
    (heading,) = pdf.headings
    assert pdf.text[heading.offset :].startswith("Overview\nBody.") and heading.found
    assert pdf.warnings == ("fit.pdf: 1 outline entry points to no page of the document; left out of the headings",)


def test_without_an_outline_larger_lines_are_headings_and_running_headers_are_not() -> None:
    header = Line("ACME Manual", 14)
    pages = [
        Page(
            [
                header,
                Line("Installing", 20),
                "Run the installer and follow the steps it shows.",
                Line("On Linux", 14),
                "Use the package manager of your distribution.",
            ]
        ),
        Page([header, "The installer writes its log next to the program, one line per step."]),
        Page([header, Line("Using it", 20), "Open a file, edit it and save it under a new name."]),
    ]
    pdf = extract_pdf(build_pdf(pages), name="sizes.pdf")
    assert pdf.heading_source == "font-size"
    assert [(h.level, h.title, h.page) for h in pdf.headings] == [
        (1, "Installing", 1),
        (2, "On Linux", 1),
        (1, "Using it", 3),
    ]
    for h in pdf.headings:
        assert pdf.text[h.offset :].startswith(h.title)


def test_scanned_pages_are_named_once_and_blank_pages_are_not_scanned(guide: PdfText) -> None:
    assert guide.scanned_pages == (3,)
    assert guide.empty_pages == (4,)
    assert guide.warnings == (
        "docs/guide.pdf: page 3 (of 5) has no text layer (scanned images); their text is missing from the index: "
        "OCR is not done",
    )


def test_a_scan_stamped_with_a_page_number_is_still_scanned() -> None:
    pages = [Page(["Real text on the first page of this document."]), Page(["Page 2"], scan=True), Page(scan=True)]
    pdf = extract_pdf(build_pdf(pages), name="scan.pdf")
    assert pdf.scanned_pages == (2, 3)
    assert len(pdf.warnings) == 1 and "pages 2, 3 (of 3) have" in pdf.warnings[0] and "scan.pdf" in pdf.warnings[0]


def test_document_title_from_metadata(guide: PdfText) -> None:
    assert guide.title == "The Guide"
    assert extract_pdf(build_pdf([Page(["x"])]), name="t.pdf").title is None


def test_an_owner_password_alone_does_not_stop_reading() -> None:
    pdf = extract_pdf(build_pdf(GUIDE[:2], user_password="", title="Open"), name="open.pdf")
    assert pdf.text.startswith("1 Getting started") and pdf.title == "Open"


@pytest.mark.parametrize(
    "data, field, reason",
    [
        (b"", "pdf", "the file is empty"),
        (b"  \n", "pdf", "the file is empty"),
        (b"<html>not a pdf</html>", "pdf", "not a PDF"),
        (b"%PDF-1.7\n" + bytes(range(256)) * 8, "pdf", "damaged"),
        (build_pdf(GUIDE)[:900], "pdf", "damaged"),  # truncated
        (build_pdf(GUIDE, user_password="secret"), "encryption", "needs a password"),
        (build_pdf([Page(scan=True), Page()]), "text", "no text layer on any of its 2 pages (1 scanned"),
    ],
    ids=["empty", "blank", "html", "garbage", "truncated", "encrypted", "no-text"],
)
def test_unusable_pdfs_raise_input_errors_naming_the_document(data: bytes, field: str, reason: str) -> None:
    with pytest.raises(InputError) as caught:
        extract_pdf(data, name="in/bad.pdf")
    err = caught.value
    assert err.document == "in/bad.pdf" and err.field == field and reason in err.reason
    assert str(err).startswith("in/bad.pdf: ")
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)  # no library traceback


REAL_PDFS = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),  # Debian libtasn1-doc: texinfo manual, pdfTeX, 36 pages
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),  # Debian shared-mime-info: DocBook spec
]


def test_a_real_manual() -> None:
    found = [p for p in REAL_PDFS if p.is_file()]
    if not found:
        pytest.skip(f"no real PDF on this machine (looked for {', '.join(map(str, REAL_PDFS))})")
    path = found[0]
    pdf = extract_pdf(path.read_bytes(), name=path.name)
    assert len(pdf.pages) == pdf.text.count("\f") + 1 and pdf.scanned_pages == () and pdf.warnings == ()
    assert pdf.heading_source == "outline" and len(pdf.headings) >= 10
    assert sum(h.found for h in pdf.headings) >= 0.9 * len(pdf.headings)
    for h in pdf.headings:
        assert pdf.page_of(h.offset) == h.page
        line = pdf.text[h.offset :].split("\n", 1)[0]
        if h.found:
            assert h.title.split()[-1].lower() in line.lower()
    assert "Introduction" in pdf.text
    assert not set(pdf.text) & {"\r", "\ufffe", "\u00ad"}
