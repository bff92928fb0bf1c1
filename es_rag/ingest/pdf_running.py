"""Running headers and footers of a PDF's pages: found, so that they never sit inside a chunk's text (issue 46).

A manual's pages repeat a line at their top or bottom that belongs to no paragraph: the document's or chapter's name,
the printed page number, or both (texinfo: ``Chapter 2: Simple manipulations; numbers and vectors 11``; DocBook:
``Shared MIME-info Database`` above and ``7`` below). Left in, it splits a paragraph that runs over a page break and
puts the same words into every chunk that starts a page.

A page's *edge lines* are its first and its last line with text. One is running when either holds:

* **Repeated**: the same line, digits and Roman page numbers aside, is an edge line of at least :data:`MIN_PAGES`
  pages at the same edge (``Shared MIME-info Database``, a page number ``7`` alone).
* **Numbered with the page**: it starts or ends with a number whose difference to the page's index is the same on at
  least :data:`MIN_PAGES` pages (the printed page number, whatever the chapter name beside it: texinfo's headers
  change with each chapter, and a short chapter repeats its header only once or twice).

Lines longer than :data:`MAX_CHARS` are never running. :func:`running_spans` gives each page's spans to drop, as
indices of the page's raw text; the extraction blanks them (spaces, line ends kept), so every other index on the page
stays valid and the page's stripped text no longer holds them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

MIN_PAGES = 3
"""Pages an edge line must repeat on (or be numbered with the page on) to be running."""
MAX_CHARS = 150
_LINE_RE = re.compile(r"[^\r\n]+")
_NUMBER_RE = re.compile(r"\d+")
_ROMAN_PAGE_RE = re.compile(r"[ivxl]{1,6}")
"""A front-matter page number as texinfo and LaTeX print it (lower case)."""
_EDGE_NUMBER_RE = re.compile(r"^\s*(\d{1,5})\b|\b(\d{1,5})\s*$")


def _edges(raw: str) -> list[tuple[str, int, int, str]]:
    """``(edge, start, end, line)`` of a page's first and last line with text (one line: both edges)."""
    lines = [m for m in _LINE_RE.finditer(raw) if m.group(0).strip()]
    if not lines:
        return []
    first, last = lines[0], lines[-1]
    out = [("top", first.start(), first.end(), first.group(0))]
    if last is not first:
        out.append(("bottom", last.start(), last.end(), last.group(0)))
    return out


def _key(line: str) -> str:
    """What repeats of a line: its words, with each number (and a line that is a Roman page number) as ``#``."""
    text = _NUMBER_RE.sub("#", " ".join(line.split()))
    return "#" if _ROMAN_PAGE_RE.fullmatch(text) else text


def _page_number_offset(line: str, index: int) -> int | None:
    m = _EDGE_NUMBER_RE.search(line.strip())
    if m is None:
        return None
    return int(m.group(1) or m.group(2)) - index


def running_spans(pages: Sequence[str]) -> list[list[tuple[int, int]]]:
    """Each page's running header and footer spans (raw indices), by the rules of the module doc.

    Args:
        pages: Each page's raw text, in order.
    """
    edges = [_edges(raw) for raw in pages]
    keys: Counter[tuple[str, str]] = Counter()
    offsets: Counter[tuple[str, int]] = Counter()
    for i, page in enumerate(edges):
        for edge, _, _, line in page:
            if len(line.strip()) > MAX_CHARS:
                continue
            keys[(edge, _key(line))] += 1
            offset = _page_number_offset(line, i)
            if offset is not None:
                offsets[(edge, offset)] += 1
    out: list[list[tuple[int, int]]] = []
    for i, page in enumerate(edges):
        spans = []
        for edge, start, end, line in page:
            if len(line.strip()) > MAX_CHARS:
                continue
            offset = _page_number_offset(line, i)
            numbered = offset is not None and offsets[(edge, offset)] >= MIN_PAGES
            if keys[(edge, _key(line))] >= MIN_PAGES or numbered:
                spans.append((start, end))
        out.append(spans)
    return out


def blank(raw: str, spans: Sequence[tuple[int, int]]) -> str:
    """``raw`` with each span's characters replaced by spaces (its length, and every index into it, unchanged)."""
    if not spans:
        return raw
    chars = list(raw)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)
