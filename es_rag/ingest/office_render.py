"""The text of a Word or OpenDocument document, as written, and the Markdown structure the chunker reads from it.

:func:`render` lays the blocks :mod:`es_rag.ingest.office` read out as Markdown (headings ``#``, list items ``-`` and
``N.``, GFM tables; the layout rules are in that module's doc) and returns two things:

* ``text``: the source text, every paragraph, list item and heading **as the document wrote it**. A line
  ``# apt-get install virtualbox`` or ``--mirror-binary URL`` of a paragraph reaches BM25, the models and the LLM's
  context unchanged, and chunk offsets index this string.
* ``escapes``: the offsets of ``text`` before which its Markdown *rendering* has a backslash, so that Markdown reads
  each line of a paragraph as text, never as structure: before every ``|`` of a paragraph or list item, and
  before a line that starts with ``#``, ``>``, ``-``, ``+``, ``*``, ``=``, a thematic ``_``, a fence (three
  backticks, ``~~~``), an HTML tag start (``<x``, ``</``, ``<!``, ``<?``), a link reference definition (``[x]:``),
  a delimiter row (``:-``), or after the number of an ordered list marker (``1986. A year`` -> ``1986\\. A year``);
  a heading's text ending in `` #`` gets one before that ``#``. :func:`es_rag.chunking.markdown.with_escapes` puts
  them back, and the Markdown chunker parses that rendering and maps its spans onto ``text``
  (:class:`es_rag.chunking.markdown.TextLayout`).

A table is Markdown in ``text`` too (a GFM table is how a reader and an LLM see its rows and columns): a ``|`` inside
a cell is written ``\\|`` there, which is the one backslash ``text`` adds. Inline characters (``*``, ``_``, backticks)
are never escaped: they shape no block. Line ends are ``\\n``, no line ends in spaces, the text ends with one newline.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_NEWLINE_RE = re.compile(r"\r\n?|[\u2028\u2029]")
_BLOCK_START_RE = re.compile(
    r"[#>+*=-]|<[A-Za-z/!?]|`{3}|~{3}|_[_ \t]*$|\[.*\]:|:[-:| \t]*$|(?P<num>\d{1,9})[.)](?:[ \t]|$)"
)
_MARK = "\x00"
"""Where the Markdown rendering has a backslash that the text has not; never in a document's text (control characters
are removed from it, and XML 1.0 cannot hold NUL)."""


@dataclass
class Block:
    """One block of a document's body, in document order."""

    kind: str  # "p", "h", "title", "li" or "table"
    text: str = ""
    level: int = 0  # heading level; list nesting level (0 = top)
    number: int | None = None  # an ordered list item's number; None for a bullet
    rows: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True)
class Rendered:
    """A document's text and the escapes of its Markdown rendering (see the module doc)."""

    text: str
    escapes: tuple[int, ...] = ()


def lines(text: str) -> list[str]:
    """A block's lines: control characters removed, tabs as spaces, each stripped, empty ones left out."""
    text = CONTROL_RE.sub("", _NEWLINE_RE.sub("\n", text)).replace("\t", " ")
    return [s for s in (line.strip() for line in text.split("\n")) if s]


def _escape(line: str) -> str:
    line = line.replace("|", _MARK + "|")
    m = _BLOCK_START_RE.match(line)
    if m is None:
        return line
    at = m.end("num") if m.group("num") else 0
    return f"{line[:at]}{_MARK}{line[at:]}"


def render(blocks: list[Block]) -> Rendered:
    """The text of ``blocks`` and its escapes (see the module doc); ``""`` when no block has text."""
    shift = any(b.kind == "title" and lines(b.text) for b in blocks)
    parts: list[str] = []
    stack: list[list[int]] = []  # the open list items: [level, content column, children so far]
    listing = False
    for b in blocks:
        if b.kind != "li":
            if block := _render_block(b, shift):
                parts.append(block)
                stack.clear()
                listing = False
            continue
        if not (item_lines := lines(b.text)):
            continue
        while stack and stack[-1][0] >= b.level:
            stack.pop()
        col = stack[-1][1] if stack else 0
        marker = "- " if b.number is None else f"{b.number}. "
        item = " " * col + marker + ("\n" + " " * (col + len(marker))).join(_escape(line) for line in item_lines)
        if not listing:
            parts.append(item)
        else:  # CommonMark: only a list starting at 1 interrupts a paragraph (its parent item's)
            first_child = bool(stack) and stack[-1][2] == 0
            parts[-1] += ("\n\n" if first_child and b.number not in (None, 1) else "\n") + item
        if stack:
            stack[-1][2] += 1
        stack.append([b.level, col + len(marker), 0])
        listing = True
    marked = "\n\n".join(parts) + "\n" if parts else ""
    pieces = marked.split(_MARK)
    escapes, at = [], 0
    for piece in pieces[:-1]:
        at += len(piece)
        escapes.append(at)
    return Rendered("".join(pieces), tuple(escapes))


def _render_block(b: Block, shift: bool) -> str:
    if b.kind == "table":
        rows = [[" ".join(CONTROL_RE.sub("", c).split()).replace("|", "\\|") for c in row] for row in b.rows]
        if not any(any(r) for r in rows):
            return ""
        width = max(len(r) for r in rows)
        table = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
        table.insert(1, "|" + " --- |" * width)
        return "\n".join(table)
    if not (block_lines := lines(b.text)):
        return ""
    if b.kind in ("h", "title"):
        level = 1 if b.kind == "title" else min(6, b.level + shift)
        return "#" * level + " " + re.sub(r"(^|[ \t])(#+)$", r"\1" + _MARK + r"\2", " ".join(block_lines))
    return "\n".join(_escape(line) for line in block_lines)


def flat(blocks: Iterable[Block]) -> str:
    """The text of ``blocks`` on one line (a table cell's)."""
    return " ".join(
        " ".join(b.text if b.kind != "table" else " ".join(c for r in b.rows for c in r) for b in blocks).split()
    )
