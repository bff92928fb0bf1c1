"""The layout of a paged document's extracted text (a PDF, :mod:`es_rag.ingest.pdf`): heading sections from the
headings the extraction found, paragraph blocks, and the page each offset is on.

The text is plain extracted text: lines end with ``\\n``, pages are joined by a blank line and a form feed
(:data:`es_rag.ingest.pdf.PAGE_BREAK`), and nothing in it is markup, so no line is read as structure (a ``- item``
or ``#include`` line stays text). The structure comes from outside the text:

* **Sections.** Each heading (``(offset, level, title)``: the PDF outline, or lines set in a larger font) starts a
  section at the start of the line its offset is on; its ``heading_path`` is the titles of the open headings of
  lower levels, then its own (a level-2 heading after a level-1 one is under it; a second level-1 heading closes
  both). Text before the first heading is a section with an empty path. The heading line is the first block of its
  section, as a Markdown heading is (its words help BM25, and the section stays one contiguous span). A heading
  whose section is its line alone (a chapter title right before its first subsection) opens no section: its title
  reaches the subsections through their ``heading_path``, as in Markdown, and no chunk is the title alone.
* **Blocks.** Blank-line separated paragraphs (so a page break always ends a block), cut at section starts.
* **Finer splits** of a block over the token limit (:meth:`PagedLayout.parts`): PDF extraction rarely leaves a blank
  line between paragraphs, so a page is often one block. It splits first into paragraphs by the layout's own signs:
  a line that ends a sentence (``.!?:。！？``) and is clearly shorter than the block's longest line ends a paragraph
  (the last line of a justified or ragged paragraph stops short); then into sentences (which may wrap lines); then
  into lines (table rows, table-of-contents entries); then token windows.
* **Pages.** :func:`page_span` gives the first and last page (1-based) of ``[start, end)`` from the pages' start
  offsets; the chunker writes them into each chunk's ``page_start`` / ``page_end``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from es_rag.chunking.spans import Section, Span, lines_in, paragraphs_in, sentences_in

Heading = tuple[int, int, str]
"""``(offset into the text, level (1 = top), title)``."""

_SENTENCE_END = tuple(".!?:。！？")
SHORT_LINE = 0.8
"""A line shorter than this share of its block's longest line, ending a sentence, ends a paragraph."""


def page_span(pages: Sequence[int], start: int, end: int) -> tuple[int, int]:
    """The first and last page (1-based) of ``text[start:end]``.

    Args:
        pages: Start offset of each page (page ``i + 1`` starts at ``pages[i]``; ``pages[0]`` is 0).
        start: Start offset.
        end: End offset (exclusive; an empty span is on the page of ``start``).
    """
    first = max(1, bisect.bisect_right(pages, start))
    last = max(first, bisect.bisect_right(pages, max(start, end - 1)))
    return first, last


class PagedLayout:
    """Sections, blocks and finer splits of a paged document's extracted text (see the module doc).

    Args:
        text: The extracted text (the source text chunk offsets index).
        headings: ``(offset, level, title)`` of each heading, in any order; offsets outside the text are ignored.
    """

    def __init__(self, text: str, headings: Sequence[Heading] = ()) -> None:
        self.text = text
        self.sections = self._sections(headings)

    def _sections(self, headings: Sequence[Heading]) -> list[Section]:
        text = self.text
        starts: dict[int, tuple[int, str]] = {}
        for offset, level, title in sorted(headings, key=lambda h: (h[0], h[1])):
            if 0 <= offset <= len(text) and title.strip():
                line = text.rfind("\n", 0, offset) + 1
                starts.setdefault(line, (max(1, int(level)), " ".join(title.split())))
        bounds = sorted(starts)
        cuts = [0, *(b for b in bounds if b > 0), len(text)]
        open_: list[tuple[int, str]] = []
        out: list[Section] = []
        for a, b in itertools.pairwise(cuts):
            if a in starts:
                level, title = starts[a]
                open_ = [h for h in open_ if h[0] < level] + [(level, title)]
            blocks = paragraphs_in(text, a, b)
            if a in starts and b < len(text) and len(blocks) == 1 and self._title_line(blocks[0], starts[a][1]):
                continue  # a heading with no body of its own opens no section (as in Markdown)
            if blocks:
                out.append(Section(tuple(t for _, t in open_), blocks[0][0], blocks[-1][1], tuple(blocks)))
        return out

    def _title_line(self, block: Span, title: str) -> bool:
        """Whether ``block`` is one line holding ``title`` (the heading's own line, nothing of a body: a heading
        placed at a body line, when the outline's title is not on its page, keeps that line)."""
        line = self.text[block[0] : block[1]]
        return "\n" not in line and " ".join(title.split()).casefold() in " ".join(line.split()).casefold()

    def header(self, start: int, end: int) -> str:
        """No context is repeated before a span (extracted text has no table header rows to repeat).

        Args:
            start: Start offset.
            end: End offset.
        """
        return ""

    def view(self, start: int, end: int) -> str:
        """The text the model reads for a span: the span itself.

        Args:
            start: Start offset.
            end: End offset.
        """
        return self.text[start:end]

    def parts(self, start: int, end: int) -> list[Span]:
        """Next finer split of a span: its paragraphs, else its sentences, else its lines, else nothing (token
        windows).

        Args:
            start: Start offset.
            end: End offset.
        """
        for split in (self._paragraphs, sentences_in, lines_in):
            pieces = split(self.text, start, end)
            if len(pieces) > 1:
                return pieces
        return []

    @staticmethod
    def _paragraphs(text: str, start: int, end: int) -> list[Span]:
        lines = lines_in(text, start, end)
        if len(lines) < 2:
            return lines
        widest = max(e - s for s, e in lines)
        out: list[Span] = []
        first = -1
        for s, e in lines:
            if first < 0:
                first = s
            if text[e - 1] in _SENTENCE_END and e - s < SHORT_LINE * widest:
                out.append((first, e))
                first = -1
        if first >= 0:
            out.append((first, lines[-1][1]))
        return out
