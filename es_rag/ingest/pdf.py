"""PDF text extraction (issue 30, step 1): one clean text per document, with its pages, headings and scanned pages.

:func:`extract_pdf` turns a PDF's bytes into :class:`PdfText`. Its ``text`` is *the* source text of the document:
chunk offsets, page starts and heading offsets all index this one string, so lineage stays exact against it (as
:attr:`es_rag.chunking.html.HtmlLayout.clean` is for HTML). The file's bytes are never indexed.

Library: `pypdfium2 <https://pypi.org/project/pypdfium2/>`_ (PDFium, Apache-2.0 / BSD-3-Clause), chosen over pypdf,
pdfminer.six and pdfplumber on real manuals (``docs/ingestion.md``, "PDF (issue 30, step 1: extraction)"): 9 to 80
times less CPU per page, lines kept whole (table rows, table-of-contents lines), hyphenation at line ends marked,
outline destinations with their position on the page, and font sizes per character. PDFium is not thread-safe, so
one lock serialises every call into it.

The text, page by page (:data:`PAGE_BREAK` between pages: a blank line, then a form feed, so the plain-text
chunker sees a paragraph boundary and ``text.split("\\f")`` gives the pages back):

* Line ends are ``\\n`` (PDFium writes ``\\r\\n``); control characters of unmapped glyphs (TeX's big brackets) and
  soft hyphens are dropped; the ligatures U+FB00-U+FB06 become their letters (``ﬁ`` -> ``fi``), so BM25 and the
  embedding model read the words a query names.
* A word hyphenated at a line end (PDFium joins the two lines and marks the break with U+FFFE) is joined
  (``manip-`` + ``ulation`` -> ``manipulation``), unless a digit or a capital meets the break (``group-14``,
  ``anti-Semitic``) or the document spells the hyphenated form elsewhere more often than the joined one
  (``command-line``, ``S-Plus``); then the hyphen stays.
* Running headers and footers are dropped (:mod:`es_rag.ingest.pdf_running`: a first or last line of a page that
  repeats on at least three pages, digits aside, or that carries the printed page number), so no chunk holds
  ``Chapter 2: Simple manipulations; numbers and vectors 11`` in the middle of a paragraph.
* Each page's leading and trailing whitespace is stripped; a page without text is ``""`` between two breaks.

Headings (``heading_source``): from the outline (bookmarks) when it has entries pointing at pages; each is placed
at its title on its page (the occurrence nearest the bookmark's target position; ``found=False`` when the title is
not in the page's text, then at the first line below the target, else the page start), and a section number
before the title on its line (``2.1``, ``Chapter 7:``) is kept in the heading. Without an outline, lines set
clearly larger than the body text (``FONT_RATIO``), short, and not repeated on many pages (running headers) are
headings, one level per size (``font-size``).

Why headings stay data, with no Markdown rendering (``# Title`` lines) for the structure chunker: inserted lines
would make the chunked text differ from the extracted one (or repeat each title, which is already in the text),
and the Markdown parser would read PDF lines that merely look like Markdown (``- item``, ``1.``, ``#include``,
``|`` rows, indented code) as structure. Sections at the heading offsets over this plain text give
``heading_path`` without either problem (the wiring step's layout).

Pages without a text layer: a page with images over at least half its area and fewer than
:data:`SCANNED_MAX_CHARS` characters of text is *scanned* (``scanned_pages``), named once in ``warnings``; its
text is missing (no OCR). A page with neither text nor such images (a blank page, a drawing) is in
``empty_pages``, without a warning. A document with no text at all, an encrypted one (a user password is needed),
an empty, truncated beyond repair or non-PDF file raise :class:`~es_rag.errors.InputError` naming the document.
PDFs that open without a password (owner-password "copy protection" included) are read as every viewer reads them.
"""

from __future__ import annotations

import bisect
import ctypes
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from es_rag.errors import InputError
from es_rag.ingest.pdf_running import blank, running_spans

PAGE_BREAK = "\n\n\f"
"""Between two pages' texts: a blank line (a paragraph boundary for the plain-text chunker), then a form feed."""
SCANNED_MAX_CHARS = 40
"""A page with fewer non-space characters than this, and images over half its area, is a scanned page (a scan
stamped with a page number still counts)."""
FONT_RATIO = 1.15
"""A line set at least this many times the body text's size may be a heading (no outline)."""
MAX_HEADING_CHARS = 150
"""Longer lines are text set large, never headings (no outline)."""
HEADING_SOURCES = ("outline", "font-size", "")
"""Where :attr:`PdfText.headings` come from: the outline, font sizes, or nowhere (no heading found)."""

_LOCK = threading.Lock()
_FIX_RE = re.compile(r"\r\n?|[\x00-\x08\x0b-\x1f\x7f\u00ad\ufffe\ufb00-\ufb06]")
_HYPHEN_RE = re.compile(r"(\w+)\ufffe(\w+)")
_WORD_RE = re.compile(r"\w+(?:-\w+)*")
_DIGITS_RE = re.compile(r"\d+")
_LEADERS_RE = re.compile(r"(?:\.\s?){4,}\S*$")
_NUMBERING_RE = re.compile(r"(?:[A-Za-z]+\s+)?(?:[0-9IVXLCivxlc]+|[A-Z])(?:\.[0-9]+)*[.:)]?\s*")
_LOAD_ERRORS = {
    1: "PDFium could not read it (unknown error)",
    2: "the file could not be opened",
    3: "not a PDF or damaged beyond repair (its structure could not be read)",
    4: "the PDF is encrypted and needs a password; es_rag takes none: decrypt it first (e.g. qpdf --decrypt)",
    5: "the PDF uses a security handler PDFium does not support; decrypt it first",
}


@dataclass(frozen=True)
class PdfHeading:
    """A heading of a PDF, placed in :attr:`PdfText.text`.

    Args:
        offset: Start of the heading's line in ``text`` (its section number, when it has one).
        level: 1 for the top level.
        title: The title as the outline (or the page) gives it, whitespace collapsed.
        page: 1-based page it is on.
        found: Whether the title was found in the page's text at ``offset`` (else ``offset`` is the first line below
            the bookmark's target, or the page start).
    """

    offset: int
    level: int
    title: str
    page: int
    found: bool = True


@dataclass(frozen=True)
class PdfText:
    """A PDF's text and what indexes into it (see the module doc).

    Args:
        name: The document (path or source id), as errors and warnings name it.
        text: The whole document's text; offsets index this string.
        pages: Start offset of each page in ``text``: page ``i + 1`` starts at ``pages[i]``.
        headings: Headings in offset order.
        heading_source: ``outline``, ``font-size`` or ``""`` (:data:`HEADING_SOURCES`).
        scanned_pages: 1-based pages without a text layer but with page-sized images (their text is missing).
        empty_pages: 1-based pages with neither text nor page-sized images (blank pages, drawings).
        title: The document's ``Title`` metadata, when set.
        warnings: What a reader of the index must know, each said once (scanned pages, unusable outline entries).
        page_labels: The label each page prints (:func:`page_labels`), one per page; empty when the document has
            none.
    """

    name: str
    text: str
    pages: tuple[int, ...]
    headings: tuple[PdfHeading, ...] = ()
    heading_source: str = ""
    scanned_pages: tuple[int, ...] = ()
    empty_pages: tuple[int, ...] = ()
    title: str | None = None
    warnings: tuple[str, ...] = ()
    page_labels: tuple[str, ...] = ()

    def page_of(self, offset: int) -> int:
        """The 1-based page an offset of :attr:`text` is on (the page break after a page's text belongs to it).

        Args:
            offset: An offset in ``[0, len(text)]`` (``len(text)``: the end of the last page).

        Raises:
            ValueError: An offset outside the text.
        """
        if not 0 <= offset <= len(self.text):
            raise ValueError(f"offset {offset} outside the text of {self.name} (0..{len(self.text)})")
        return bisect.bisect_right(self.pages, offset)

    def page_range(self, start: int, end: int) -> tuple[int, int]:
        """First and last page of the span ``text[start:end]`` (a chunk's ``page_start`` and ``page_end``).

        Args:
            start: Start offset.
            end: End offset (exclusive); an empty span is on the page of ``start``.
        """
        return self.page_of(start), self.page_of(max(start, end - 1))


@dataclass
class _Page:
    """One page as PDFium gives it: raw text (one character per PDFium char index), and what was found on it."""

    raw: str
    scanned: bool = False
    marks: list[tuple[int, int, str, bool]] = field(default_factory=list)
    """Outline headings on the page: (raw index, level, title, found)."""
    lines: list[tuple[int, float, str]] = field(default_factory=list)
    """Lines of the page with their font size: (raw index of the line start, size in points, stripped text)."""


@dataclass(frozen=True)
class _Bookmark:
    level: int
    title: str
    page: int
    top: float | None


def extract_pdf(data: bytes, *, name: str) -> PdfText:
    """Extract a PDF's text, page starts, headings and scanned pages (see the module doc).

    Args:
        data: The file's bytes.
        name: The document (path or source id), named by errors and warnings.

    Raises:
        InputError: An empty file, not a PDF, a damaged or encrypted PDF, a PDF without pages or without any text.
    """
    if not data.strip():
        raise InputError(name, "pdf", "the file is empty")
    if b"%PDF-" not in data[:1024]:
        raise InputError(name, "pdf", "not a PDF (no %PDF- header in its first 1024 bytes)")
    import pypdfium2 as pdfium

    with _LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            code = getattr(exc, "err_code", 1)
            raise InputError(
                name, "encryption" if code in (4, 5) else "pdf", _LOAD_ERRORS.get(code, str(exc))
            ) from None
        try:
            return _extract(doc, name)
        except pdfium.PdfiumError as exc:
            raise InputError(name, "pdf", f"PDFium could not read it: {exc}") from None
        finally:
            doc.close()


def _extract(doc: Any, name: str) -> PdfText:
    import pypdfium2 as pdfium

    count = len(doc)
    if count == 0:
        raise InputError(name, "pdf", "the PDF has no pages")
    bookmarks, unplaced = _bookmarks(doc, count)
    by_page: dict[int, list[_Bookmark]] = {}
    for b in bookmarks:
        by_page.setdefault(b.page, []).append(b)
    pages: list[_Page] = []
    for i in range(count):
        try:
            page = doc[i]
        except pdfium.PdfiumError as exc:
            raise InputError(name, "pdf", f"page {i + 1} cannot be read: {exc}") from None
        try:
            pages.append(_read_page(page, by_page.get(i, []), sizes=not bookmarks))
        finally:
            page.close()
    title = (doc.get_metadata_value("Title") or "").strip() or None
    text = _assemble(name, pages, title=title, outline=bool(bookmarks), unplaced=unplaced)
    return replace(text, page_labels=page_labels(doc, count))


def page_labels(doc: Any, count: int) -> tuple[str, ...]:
    """The label each page prints, as the document's ``/PageLabels`` number tree defines it (ISO 32000-1, 12.4.2:
    a style per range, decimal, Roman or letters, a prefix and a start), read through PDFium
    (``FPDF_GetPageLabel``); empty when the document has no labels, or when every label is just its page's 1-based
    number. A page left without a label by a labelled document is named by its number.

    Args:
        doc: The open ``pypdfium2.PdfDocument``.
        count: Its page count.
    """
    import pypdfium2 as pdfium

    labels = []
    for i in range(count):
        try:
            labels.append((doc.get_page_label(i) or "").strip())
        except pdfium.PdfiumError:
            labels.append("")
    if not any(labels) or all(label == str(i + 1) for i, label in enumerate(labels)):
        return ()
    return tuple(label or str(i + 1) for i, label in enumerate(labels))


def _bookmarks(doc: Any, count: int) -> tuple[list[_Bookmark], int]:
    """The outline's entries that point at a page of the document, in outline order, and how many do not."""
    out: list[_Bookmark] = []
    unplaced = 0
    for item in doc.get_toc():
        title = " ".join(str(item.get_title() or "").split())
        dest = item.get_dest()  # PDFium follows a GoTo action when the entry has no /Dest
        index = dest.get_index() if dest is not None else None
        if not title or index is None or not 0 <= index < count:
            unplaced += 1
            continue
        out.append(_Bookmark(level=item.level + 1, title=title, page=index, top=_dest_top(dest)))
    return out, unplaced


def _dest_top(dest: Any) -> float | None:
    """The vertical position a destination shows at the top of the window, when it names one."""
    import pypdfium2.raw as raw

    has_x, has_y, has_zoom = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    x, y, zoom = ctypes.c_float(), ctypes.c_float(), ctypes.c_float()
    located = raw.FPDFDest_GetLocationInPage(dest.raw, *(ctypes.byref(v) for v in (has_x, has_y, has_zoom, x, y, zoom)))
    if located and has_y.value:
        return float(y.value)
    mode, pos = dest.get_view()
    if mode in (raw.PDFDEST_VIEW_FITH, raw.PDFDEST_VIEW_FITBH) and pos:
        return float(pos[0])
    if mode == raw.PDFDEST_VIEW_FITR and len(pos) == 4:
        return float(pos[3])
    return None


def _read_page(page: Any, marks: Sequence[_Bookmark], *, sizes: bool) -> _Page:
    """Read one page: its raw text, whether it is scanned, where its bookmarks' titles are, its lines' sizes."""
    import pypdfium2.raw as raw

    textpage = page.get_textpage()
    try:
        n = textpage.count_chars()
        text = textpage.get_text_range() if n > 0 else ""
        if len(text) != n:  # PDFium left out or added characters: read them one by one, so indices stay chars
            text = "".join(_char(raw.FPDFText_GetUnicode(textpage.raw, k)) for k in range(n))
        out = _Page(text)
        if len(text) - sum(c.isspace() for c in text) < SCANNED_MAX_CHARS:
            out.scanned = _image_cover(page) >= 0.5
        for mark in marks:
            index, found = _locate(textpage, text, mark.title, mark.top)
            out.marks.append((index, mark.level, mark.title, found))
        if sizes:
            for m in re.finditer(r"[^\r\n]+", text):
                line = m.group(0)
                first = m.start() + len(line) - len(line.lstrip())
                if line.strip():
                    size = float(raw.FPDFText_GetFontSize(textpage.raw, first))
                    out.lines.append((m.start(), size, " ".join(line.split())))
        return out
    finally:
        textpage.close()


def _char(code: int) -> str:
    return chr(code) if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000 else "\ufffd"


def _image_cover(page: Any) -> float:
    """Share of the page's area its images cover, those in form XObjects too (capped at 1; overlaps count twice)."""
    import pypdfium2.raw as raw

    width, height = float(raw.FPDF_GetPageWidthF(page.raw)), float(raw.FPDF_GetPageHeightF(page.raw))
    if width <= 0 or height <= 0:
        return 0.0
    area = 0.0
    left, bottom, right, top = ctypes.c_float(), ctypes.c_float(), ctypes.c_float(), ctypes.c_float()
    for k in range(raw.FPDFPage_CountObjects(page.raw)):
        obj = raw.FPDFPage_GetObject(page.raw, k)
        if not _holds_image(obj, depth=0):
            continue
        if raw.FPDFPageObj_GetBounds(
            obj, ctypes.byref(left), ctypes.byref(bottom), ctypes.byref(right), ctypes.byref(top)
        ):
            across = min(right.value, width) - max(left.value, 0.0)
            up = min(top.value, height) - max(bottom.value, 0.0)
            area += max(0.0, across) * max(0.0, up)
    return min(1.0, area / (width * height))


def _holds_image(obj: Any, *, depth: int) -> bool:
    import pypdfium2.raw as raw

    kind = raw.FPDFPageObj_GetType(obj)
    if kind == raw.FPDF_PAGEOBJ_IMAGE:
        return True
    if kind != raw.FPDF_PAGEOBJ_FORM or depth >= 8:
        return False
    inner = range(raw.FPDFFormObj_CountObjects(obj))
    return any(_holds_image(raw.FPDFFormObj_GetObject(obj, i), depth=depth + 1) for i in inner)


def _locate(textpage: Any, text: str, title: str, top: float | None) -> tuple[int, bool]:
    """Raw index of a bookmark's title on its page (the line start when only a section number precedes it).

    The title is looked for word by word (any whitespace between), then case-blind, then by its letters and digits
    alone (quotes, dashes and hyphens as the page sets them: ``Nonregular`` finds ``Non-regular``).
    """
    words = unicodedata.normalize("NFKC", title).split()
    pattern = r"\s+".join(re.escape(w) for w in words)
    hits = [m.start() for m in re.finditer(pattern, text)] or [
        m.start() for m in re.finditer(pattern, text, re.IGNORECASE)
    ]
    if not hits:
        hits = _skeleton_hits(text, "".join(words))
    if hits:
        best = hits[0]
        if top is not None and len(hits) > 1:
            best = min(hits, key=lambda k: abs(_char_top(textpage, k, default=top) - top))
        line = max(text.rfind("\n", 0, best), text.rfind("\r", 0, best)) + 1
        return (line if _NUMBERING_RE.fullmatch(text[line:best]) else best), True
    if top is not None:  # the first character at or below the target, at its line's start
        for k, c in enumerate(text):
            if not c.isspace() and _char_top(textpage, k, default=top + 1) <= top + 1:
                return max(text.rfind("\n", 0, k), text.rfind("\r", 0, k)) + 1, False
    return 0, False


def _skeleton_hits(text: str, title: str) -> list[int]:
    """Raw indices where the title's letters and digits (lower-cased) occur in the page's, in order."""
    want = "".join(c for c in title.lower() if c.isalnum())
    if len(want) < 3:
        return []
    chars: list[str] = []
    where: list[int] = []
    for k, c in enumerate(text):
        for d in unicodedata.normalize("NFKC", c).lower():
            if d.isalnum():
                chars.append(d)
                where.append(k)
    skeleton = "".join(chars)
    return [where[m.start()] for m in re.finditer(re.escape(want), skeleton)]


def _char_top(textpage: Any, index: int, *, default: float) -> float:
    import pypdfium2 as pdfium

    try:
        return float(textpage.get_charbox(index)[3])
    except pdfium.PdfiumError:
        return default


def _assemble(name: str, pages: list[_Page], *, title: str | None, outline: bool, unplaced: int) -> PdfText:
    """Normalise every page's text, join the pages and move the raw indices found on them to offsets of the text."""
    counts = Counter(_WORD_RE.findall("\n".join(_HYPHEN_RE.sub(" ", p.raw) for p in pages)))
    for page, spans in zip(pages, running_spans([p.raw for p in pages]), strict=True):
        page.raw = blank(page.raw, spans)  # running headers and footers: same length, so every raw index holds
    parts: list[str] = []
    starts: list[int] = []
    maps: list[Callable[[int], int]] = []
    offset = 0
    for page in pages:
        text, to_text = _normalise(page.raw, counts)
        starts.append(offset)
        parts.append(text)
        maps.append(to_text)
        offset += len(text) + len(PAGE_BREAK)
    whole = PAGE_BREAK.join(parts)
    if not whole.strip():
        scanned = sum(p.scanned for p in pages)
        raise InputError(
            name,
            "text",
            f"no text layer on any of its {len(pages)} pages ({scanned} scanned, {len(pages) - scanned} blank or "
            "drawings only); OCR is not done: run it first (e.g. ocrmypdf)",
        )
    headings: list[PdfHeading] = []
    if outline:
        for i, page in enumerate(pages):
            for index, level, heading, found in page.marks:
                headings.append(PdfHeading(starts[i] + maps[i](index), level, heading, i + 1, found))
        headings.sort(key=lambda h: h.offset)
    else:
        headings = _size_headings(pages, starts, maps)
    scanned_pages = tuple(i + 1 for i, p in enumerate(pages) if p.scanned)
    empty_pages = tuple(i + 1 for i, p in enumerate(pages) if not p.scanned and not parts[i].strip())
    warnings = []
    if scanned_pages:
        warnings.append(
            f"{name}: {_pages_phrase(scanned_pages, len(pages))} no text layer (scanned images); their text is "
            "missing from the index: OCR is not done"
        )
    if unplaced:
        entries = "1 outline entry points" if unplaced == 1 else f"{unplaced} outline entries point"
        warnings.append(f"{name}: {entries} to no page of the document; left out of the headings")
    return PdfText(
        name=name,
        text=whole,
        pages=tuple(starts),
        headings=tuple(headings),
        heading_source=("outline" if outline else "font-size") if headings else "",
        scanned_pages=scanned_pages,
        empty_pages=empty_pages,
        title=title,
        warnings=tuple(warnings),
    )


def _pages_phrase(pages: Sequence[int], count: int) -> str:
    if len(pages) == 1:
        return f"page {pages[0]} (of {count}) has"
    return "pages " + ", ".join(str(p) for p in pages) + f" (of {count}) have"


def _normalise(raw: str, counts: Counter[str]) -> tuple[str, Callable[[int], int]]:
    """A page's text as indexed (see the module doc) and the map from a raw index to an offset in it."""
    pieces: list[str] = []
    changes: list[tuple[int, int, int, int]] = []  # (raw start, raw end, text start, text end)
    done = 0
    length = 0
    for start, end, new in _changes(raw, counts):
        pieces.append(raw[done:start])
        length += start - done
        pieces.append(new)
        changes.append((start, end, length, length + len(new)))
        length += len(new)
        done = end
    pieces.append(raw[done:])
    text = "".join(pieces)
    lead = len(text) - len(text.lstrip())
    text = text.strip()
    keys = [c[0] for c in changes]

    def to_text(index: int) -> int:
        j = bisect.bisect_right(keys, index) - 1
        if j < 0:
            moved = index
        else:
            _, end, new_start, new_end = changes[j]
            moved = new_start if index < end else index - end + new_end
        return min(max(moved - lead, 0), len(text))

    return text, to_text


def _changes(raw: str, counts: Counter[str]) -> Iterator[tuple[int, int, str]]:
    """The replacements of a page's raw text, in order: (start, end, new text)."""
    for m in _FIX_RE.finditer(raw):
        c = m.group(0)
        if c[0] == "\r":
            yield m.start(), m.end(), "\n"
        elif c == "\ufffe":
            yield m.start(), m.end(), _hyphen(raw, m.start(), counts)
        elif "\ufb00" <= c <= "\ufb06":
            yield m.start(), m.end(), unicodedata.normalize("NFKC", c)
        else:
            yield m.start(), m.end(), ""


def _hyphen(raw: str, at: int, counts: Counter[str]) -> str:
    """What a line-end hyphenation mark becomes: ``-`` when a digit or a capital meets the break (``group-`` /
    ``14``, ``COVID-`` / ``19``, ``anti-`` / ``Semitic``: no word is hyphenated there) or when the document spells the
    hyphenated word more often than the joined one (``command-line``), else nothing (the word's halves join)."""
    before = re.search(r"\w+$", raw[max(0, at - 64) : at])
    after = re.match(r"\w+", raw[at + 1 : at + 65])
    if before is None or after is None:
        return ""
    if before.group(0)[-1].isdigit() or after.group(0)[0].isdigit() or after.group(0)[0].isupper():
        return "-"
    joined, hyphenated = before.group(0) + after.group(0), before.group(0) + "-" + after.group(0)
    return "-" if counts[hyphenated] > counts[joined] else ""


def _size_headings(
    pages: Sequence[_Page], starts: Sequence[int], maps: Sequence[Callable[[int], int]]
) -> list[PdfHeading]:
    """Headings from font sizes (no outline): short lines set at least :data:`FONT_RATIO` times the body size
    (the size most characters have), one level per size, largest first; consecutive lines of one size are one
    heading; lines repeated on many pages (running headers, digits aside) and table-of-contents lines (dot
    leaders) are not headings."""
    weight: Counter[float] = Counter()
    seen: Counter[str] = Counter()
    for page in pages:
        for _, size, line in page.lines:
            if size > 0:
                weight[round(size * 2) / 2] += len(line)
        seen.update({_DIGITS_RE.sub("#", line) for _, _, line in page.lines})
    if not weight:
        return []
    body = weight.most_common(1)[0][0]
    repeated = {k for k, n in seen.items() if n >= 3 and n >= 0.3 * len(pages)}
    found: list[list[Any]] = []  # [page index, raw index, size, title, line number]
    for i, page in enumerate(pages):
        for j, (index, size, line) in enumerate(page.lines):
            size = round(size * 2) / 2
            if (
                size < body * FONT_RATIO
                or len(line) > MAX_HEADING_CHARS
                or not any(c.isalpha() for c in line)
                or _LEADERS_RE.search(line) is not None
                or _DIGITS_RE.sub("#", line) in repeated
            ):
                continue
            last = found[-1] if found else None
            if last is not None and last[0] == i and last[4] == j - 1 and last[2] == size:
                last[3] += " " + line
                last[4] = j
            else:
                found.append([i, index, size, line, j])
    sizes = sorted({f[2] for f in found}, reverse=True)
    return [
        PdfHeading(starts[i] + maps[i](index), min(6, sizes.index(size) + 1), title, i + 1)
        for i, index, size, title, _ in found
    ]
