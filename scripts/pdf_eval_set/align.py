"""Gold spans mapped from Markdown offsets to offsets into a PDF's extracted text, for ``scripts/pdf-eval-set.py``:
the Markdown, the text drawn for each block (:class:`pdf_eval_set.render.Block`) and the extracted text aligned
character by character, and each mapped span verified against its Markdown text (step 2 of the script's module doc).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .render import Block

RESULTS = ("exact", "markdown-syntax", "format-chars", "relocated", "reordered", "differs", "unlocated")
"""Verification results, best first; all but ``unlocated`` stay in the golden file."""
EXACT = ("exact", "markdown-syntax", "format-chars")
"""Results whose PDF text is the span's visible text."""


def collapse(text: str) -> str:
    """Whitespace runs as one space, no leading or trailing whitespace."""
    return " ".join(text.split())


def visible(text: str) -> str:
    """:func:`collapse` without invisible format characters (zero-width spaces and joiners, direction marks)."""
    return collapse("".join(c for c in text if unicodedata.category(c) != "Cf"))


@dataclass
class Alignment:
    """Markdown offsets to PDF text ranges, through the text drawn for each block (non-whitespace characters).

    ``md_lo[k]:md_hi[k]`` are the drawn characters Markdown character ``k`` became (``-1`` when it became none: Markdown
    syntax or whitespace); ``pdf_lo[r]:pdf_hi[r]`` the PDF text range drawn character ``r`` was extracted as (``-1``
    when the extraction lost it).
    """

    md_text: str
    pdf_text: str
    md_lo: list[int]
    md_hi: list[int]
    pdf_lo: list[int]
    pdf_hi: list[int]
    lost: str = ""
    """Drawn characters the extraction lost or changed (for the report)."""


def _opcodes(a: str, b: str) -> list[tuple[str, int, int, int, int]]:
    if a == b:
        return [("equal", 0, len(a), 0, len(b))] if a else []
    return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def align(md_text: str, blocks: Sequence[Block], pdf_text: str) -> Alignment:
    """Align a Markdown document, the blocks drawn from it and the PDF's extracted text (see :class:`Alignment`)."""
    md_lo = [-1] * len(md_text)
    md_hi = [-1] * len(md_text)
    drawn: list[str] = []
    spans: list[tuple[int, int]] = []  # drawn range of each block
    for block in blocks:
        where = [k for k in range(block.md_start, min(block.md_end, len(md_text))) if not md_text[k].isspace()]
        source = "".join(md_text[k] for k in where)
        text = "".join(c for c in block.drawn if not c.isspace())
        base = len(drawn)
        drawn.extend(text)
        spans.append((base, len(drawn)))
        for op, a1, a2, b1, b2 in _opcodes(source, text):
            if op == "equal":
                for d in range(a2 - a1):
                    md_lo[where[a1 + d]] = base + b1 + d
                    md_hi[where[a1 + d]] = base + b1 + d + 1
            elif op == "replace":  # e.g. an entity or escape drawn as its character: the group maps as a whole
                for k in where[a1:a2]:
                    md_lo[k], md_hi[k] = base + b1, base + b2
    offsets = [k for k, c in enumerate(pdf_text) if not c.isspace()]
    extracted = "".join(pdf_text[k] for k in offsets)
    all_drawn = "".join(drawn)
    pdf_lo = [-1] * len(drawn)
    pdf_hi = [-1] * len(drawn)
    lost: list[str] = []
    cursor = 0
    for start, end in spans:
        text = all_drawn[start:end]
        if not text:
            continue
        slack = 64 + len(text) // 4
        at = extracted.find(text, cursor, cursor + len(text) + slack)
        if at >= 0:
            for d in range(len(text)):
                pdf_lo[start + d] = offsets[at + d]
                pdf_hi[start + d] = offsets[at + d] + 1
            cursor = at + len(text)
            continue
        window = extracted[cursor : cursor + len(text) + slack]
        last = 0
        for op, a1, a2, b1, b2 in _opcodes(text, window):
            if op == "equal":
                for d in range(a2 - a1):
                    pdf_lo[start + a1 + d] = offsets[cursor + b1 + d]
                    pdf_hi[start + a1 + d] = offsets[cursor + b1 + d] + 1
                last = b2
            elif op == "replace":
                lost.append(text[a1:a2])
                for r in range(start + a1, start + a2):
                    pdf_lo[r], pdf_hi[r] = offsets[cursor + b1], offsets[cursor + b2 - 1] + 1
                last = b2
            elif op == "delete":
                lost.append(text[a1:a2])
        cursor += last
    return Alignment(md_text, pdf_text, md_lo, md_hi, pdf_lo, pdf_hi, "".join(lost))


@dataclass
class Mapped:
    """A gold span mapped into the PDF text: ``start``/``end`` index ``PdfText.text`` (-1 when unlocated)."""

    start: int
    end: int
    result: str
    want: str
    got: str


def map_span(al: Alignment, start: int, end: int) -> Mapped:
    """Map the Markdown span ``[start, end)`` into the PDF text and verify it (results: :data:`RESULTS`, and
    step 2 of ``scripts/pdf-eval-set.py``'s module doc)."""
    md, pdf = al.md_text, al.pdf_text
    want = collapse(md[start:end])
    los: list[int] = []
    his: list[int] = []
    syntax: set[int] = set()
    for k in range(start, min(end, len(md))):
        if md[k].isspace():
            continue
        if al.md_lo[k] < 0:
            syntax.add(k)
            continue
        for r in range(al.md_lo[k], al.md_hi[k]):
            if al.pdf_lo[r] >= 0:
                los.append(al.pdf_lo[r])
                his.append(al.pdf_hi[r])
    if not los:
        return Mapped(-1, -1, "unlocated", want, "")
    lo, hi = min(los), max(his)
    got = collapse(pdf[lo:hi])
    if got == want:
        return Mapped(lo, hi, "exact", want, got)
    shown = collapse("".join(c for k, c in enumerate(md[start:end], start) if k not in syntax))
    if syntax and got == shown:
        return Mapped(lo, hi, "markdown-syntax", want, got)
    if visible(got) == visible(shown):
        return Mapped(lo, hi, "format-chars", want, got)
    target = visible(shown)
    reach = 2 * len(target) + 200
    region_lo, region_hi = max(0, lo - reach), min(len(pdf), hi + reach)
    if target:
        pattern = r"\s+".join(re.escape(w) for w in target.split())
        hits = list(re.finditer(pattern, pdf[region_lo:region_hi]))
        if hits:
            best = min(hits, key=lambda m: abs(region_lo + m.start() - lo))
            a, b = region_lo + best.start(), region_lo + best.end()
            return Mapped(a, b, "relocated", want, collapse(pdf[a:b]))
    found = _anagram(pdf, region_lo, region_hi, target, lo)
    if found is not None:
        a, b = found
        return Mapped(a, b, "reordered", want, collapse(pdf[a:b]))
    return Mapped(lo, hi, "differs", want, got)


def _anagram(pdf: str, region_lo: int, region_hi: int, target: str, near: int) -> tuple[int, int] | None:
    """The PDF range nearest ``near`` whose visible characters are those of ``target`` in some order."""
    want = Counter(c for c in target if not c.isspace())
    size = sum(want.values())
    if size == 0:
        return None
    where = [k for k in range(region_lo, region_hi) if not pdf[k].isspace() and unicodedata.category(pdf[k]) != "Cf"]
    best: tuple[int, int] | None = None
    for i in range(len(where) - size + 1):
        if Counter(pdf[k] for k in where[i : i + size]) == want:
            a, b = where[i], where[i + size - 1] + 1
            if best is None or abs(a - near) < abs(best[0] - near):
                best = (a, b)
    return best
