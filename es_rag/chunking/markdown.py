"""Markdown and plain-text layouts: heading sections and block spans (markdown-it-py, CommonMark + tables)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt

from es_rag.chunking.spans import Section as Section  # re-exported
from es_rag.chunking.spans import Span, line_starts, lines_in, paragraphs_in, sentences_in, trim

_FRONT_MATTER_RE = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE
)


def front_matter(text: str) -> tuple[int, dict[str, object]]:
    """YAML front matter at the very start of a Markdown source (Jekyll / Hugo / MkDocs style: a ``---`` line,
    YAML, a ``---`` or ``...`` line): ``(end offset of the block, its mapping)``, or ``(0, {})`` when there is
    none. A block that is not a YAML mapping is not front matter (a leading thematic break stays content).

    Args:
        text: Markdown source.
    """
    m = _FRONT_MATTER_RE.match(text)
    if m is None:
        return 0, {}
    import yaml

    try:
        data = yaml.safe_load(m.group(1)) if m.group(1).strip() else {}
    except yaml.YAMLError:
        return 0, {}
    if not isinstance(data, dict):
        return 0, {}
    return m.end(), {str(k): v for k, v in data.items()}


def blank_front_matter(text: str) -> tuple[str, dict[str, object]]:
    """``text`` with its front matter replaced by spaces (newlines kept), so every offset into the result is an
    offset into ``text`` and no chunk, heading or ``---`` comes from it; and the front matter's mapping.

    Args:
        text: Markdown source.
    """
    end, data = front_matter(text)
    if not end:
        return text, data
    return re.sub(r"[^\r\n]", " ", text[:end]) + text[end:], data


@dataclass(frozen=True)
class Table:
    """A top-level table of a source: its span and the span of its header (the header row and the delimiter
    row of a GFM table), which every chunk of its later rows repeats as context."""

    span: Span
    header: Span


def with_escapes(text: str, escapes: Sequence[int]) -> str:
    """``text`` with a backslash before each offset in ``escapes``: the Markdown rendering of an extracted document's
    text as written (:mod:`es_rag.ingest.office_render`).

    Args:
        text: The text as written.
        escapes: Sorted offsets of ``text``, each at most ``len(text)``.
    """
    out, at = [], 0
    for pos in escapes:
        out += [text[at:pos], "\\"]
        at = pos
    out.append(text[at:])
    return "".join(out)


def _unescaped(
    sections: list[Section], tables: list[Table], escapes: Sequence[int]
) -> tuple[list[Section], list[Table]]:
    """Sections and tables parsed from :func:`with_escapes`'s rendering, their spans moved onto the text as written:
    a rendering offset ``m`` is text offset ``m`` minus the backslashes before it (a span that starts at a backslash
    starts at the character it escapes). A heading title loses the backslash before its closing ``#``s."""
    marks = [pos + i for i, pos in enumerate(escapes)]  # where each backslash sits in the rendering

    def at(m: int) -> int:
        return m - bisect.bisect_left(marks, m)

    def span(s: Span) -> Span:
        return at(s[0]), at(s[1])

    def title(t: str) -> str:
        return re.sub(r"\\(#+)$", r"\1", t)

    return (
        [
            Section(tuple(title(t) for t in sec.heading_path), at(sec.start), at(sec.end), tuple(map(span, sec.blocks)))
            for sec in sections
        ],
        [Table(span(t.span), span(t.header)) for t in tables],
    )


def parse_markdown(text: str) -> list[Section]:
    """Split Markdown into heading sections with block spans.

    Blocks are markdown-it's top-level blocks (paragraph, list, table, fenced code, quote, ...), so a
    table or code fence is one block. A heading with no body of its own opens no section; its title
    still reaches the subsections through their ``heading_path``.

    Args:
        text: Markdown source.
    """
    return _parse_markdown(text)[0]


def markdown_tables(text: str) -> list[Table]:
    """The top-level tables of a Markdown source, in order.

    Args:
        text: Markdown source.
    """
    return _parse_markdown(text)[1]


def _parse_markdown(text: str) -> tuple[list[Section], list[Table]]:
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(text)
    starts = line_starts(text)
    tables: list[Table] = []

    def offset(line: int) -> int:
        return starts[line] if line < len(starts) else len(text)

    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    cur_path: tuple[str, ...] = ()
    cur_start = 0
    cur_blocks: list[Span] = []
    has_body = False

    def close(end: int) -> None:
        spans = [b for b in cur_blocks if b[1] > b[0]]
        if spans and has_body:
            s, e = trim(text, cur_start, end)
            sections.append(Section(cur_path, s, e, tuple(spans)))

    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.map is None or tok.type.endswith("_close"):
            i += 1
            continue
        span = trim(text, offset(tok.map[0]), offset(tok.map[1]))
        if tok.type == "heading_open":
            close(offset(tok.map[0]))
            level = int(tok.tag[1])
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
            cur_path = tuple(t for _, t in path)
            cur_start = offset(tok.map[0])
            cur_blocks = [span]  # the heading line itself: it helps BM25 and keeps the span contiguous
            has_body = False
        else:
            cur_blocks.append(span)
            has_body = True
            if tok.type == "table_open":  # a GFM table's first two lines: the header row and the delimiter row
                tables.append(Table(span, trim(text, offset(tok.map[0]), offset(tok.map[0] + 2))))
        i += 1
    close(len(text))
    return sections, tables


def parse_plain(text: str) -> list[Section]:
    """One section whose blocks are blank-line separated paragraphs.

    Args:
        text: Plain text source.
    """
    blocks = paragraphs_in(text, 0, len(text))
    if not blocks:
        return []
    return [Section((), blocks[0][0], blocks[-1][1], tuple(blocks))]


class TextLayout:
    """Markdown or plain text: the chunk text is what the model reads; blocks split into lines (table
    rows, list items, code lines stay whole), then sentences.

    Args:
        text: The source.
        fmt: ``markdown``, ``rst`` (:mod:`es_rag.chunking.rst`) or ``plain``.
        escapes: ``markdown`` only: ``text`` is an extracted document's text as written (a Word or OpenDocument
            file's, :mod:`es_rag.ingest.office_render`) and its structure is read from its Markdown rendering,
            :func:`with_escapes`; every span indexes ``text``.
    """

    def __init__(self, text: str, fmt: str, escapes: Sequence[int] | None = None) -> None:
        self.text = text
        self.tables: list[Table] = []
        if fmt == "rst":
            from es_rag.chunking.rst import parse_rst

            self.sections = parse_rst(text)
        elif fmt == "markdown" and escapes:
            self.sections, self.tables = _unescaped(*_parse_markdown(with_escapes(text, escapes)), escapes)
        elif fmt == "markdown":
            self.sections, self.tables = _parse_markdown(text)
        else:
            self.sections = parse_plain(text)

    def header(self, start: int, end: int) -> str:
        """The table header a span repeats as context: the header and delimiter rows (and a newline) when the span
        starts among a Markdown table's body rows, else ``""``. The span's own offsets never change.

        Args:
            start: Start offset.
            end: End offset.
        """
        for table in self.tables:
            if table.header[1] <= start < table.span[1]:
                return self.text[table.header[0] : table.header[1]] + "\n"
        return ""

    def view(self, start: int, end: int) -> str:
        """The text the model reads for a span: the span itself.

        Args:
            start: Start offset.
            end: End offset.
        """
        return self.text[start:end]

    def parts(self, start: int, end: int) -> list[Span]:
        """Next finer split of a span: its lines, else its sentences, else nothing (token windows).

        Args:
            start: Start offset.
            end: End offset.
        """
        lines = lines_in(self.text, start, end)
        if len(lines) > 1:
            return lines
        sentences = sentences_in(self.text, start, end)
        return sentences if len(sentences) > 1 else []
