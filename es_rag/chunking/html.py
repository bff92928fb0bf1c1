"""HTML layout with exact offsets into the original markup, built on the standard library's HTML parser.

Decision (documented in ``docs/ingestion.md``): an HTML chunk's ``text`` is the **raw markup span**
``source[start_offset:end_offset]``, so citations and offsets point into the file exactly as for
Markdown. What the model embeds and ranks is the span's *visible text* (tags dropped, entities decoded,
``script``/``style``/``template``/``head`` content excluded), recorded in ``contextual_text``; token
counts and limits apply to that visible text. What a reader, the cross-encoder and the LLM see is the same
visible text without any contextual prefix, recorded in ``visible_text`` (``Hit.display_text``);
:func:`visible_text` gives it for a markup span read on its own.

Whitespace is HTML's: a run of spaces, tabs and newlines between words is one space, also when the words sit in
different inline elements (``<span>python3</span> <span>-m</span>`` reads ``python3 -m``), and ``pre`` (or
``textarea``) content keeps every space and newline. Page chrome is not visible text: ``nav`` and ``footer``
elements, elements whose ARIA ``role`` is ``navigation``, ``search``, ``banner`` or ``contentinfo``, and the classes
Sphinx and MkDocs give their sidebars, relation bars and heading permalinks (:data:`CHROME_CLASSES`: the ``¶``
after every Sphinx heading, "Table of Contents", "Next topic", "Quick search").

Structure: ``h1``-``h6`` open sections (their visible text builds ``heading_path``); the blocks of a
section are the outermost block elements that contain no heading (a ``table``, ``ul``, ``pre``, ``p``,
...) plus loose text. A block that does not fit is split into its child blocks (rows ``tr``, items
``li``, cells), then into the sentences of its text nodes, so a row or a list item is never cut while
it fits on its own. HTML's implied end tags (``<p>`` closed by the next block, ``<li>`` by the next item,
``<tr>``/``<td>`` likewise) are applied.
"""

from __future__ import annotations

import bisect
import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from es_rag.chunking.spans import Section, Span, line_starts, sentences_in, trim

BLOCK_TAGS = frozenset(
    "address article aside blockquote caption dd details div dl dt fieldset figcaption figure footer form "
    "h1 h2 h3 h4 h5 h6 header hr li main nav ol p pre section summary table tbody td tfoot th thead tr ul".split()
)
HEADINGS = {f"h{i}": i for i in range(1, 7)}
ENTITY_RE = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);?")
"""A character reference in markup (the ``;`` is optional for some named ones)."""
HIDDEN_TAGS = frozenset({"script", "style", "template", "head", "noscript"})
VOID_TAGS = frozenset("area base br col embed hr img input link meta param source track wbr".split())
PRE_TAGS = frozenset({"pre", "textarea", "listing", "plaintext"})
"""Elements whose text keeps its whitespace (the HTML standard's ``white-space: pre`` elements)."""
CHROME_TAGS = frozenset({"nav", "footer"})
CHROME_ROLES = frozenset({"navigation", "search", "banner", "contentinfo"})
CHROME_CLASSES = frozenset(
    {
        "headerlink",  # Sphinx and MkDocs: the permalink after each heading (a pilcrow)
        "sphinxsidebar",  # Sphinx: table of contents, previous/next topic, this page, quick search
        "related",  # Sphinx: the navigation bar above and below the page
        "footer",  # Sphinx: copyright, licence, "Created using Sphinx"
        "md-header",  # MkDocs Material: site header, navigation, table of contents, footer
        "md-sidebar",
        "md-footer",
        "wy-nav-side",  # Read the Docs theme: navigation sidebar, breadcrumbs, footer buttons
        "wy-breadcrumbs",
        "rst-footer-buttons",
    }
)
"""Classes of page chrome in the documentation generators people publish with (their default themes)."""


def is_chrome(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """Whether an element is page chrome (navigation, headers and footers of the site, heading permalinks).

    Args:
        tag: The element's tag.
        attrs: Its attributes.
    """
    if tag in CHROME_TAGS:
        return True
    found = dict(attrs)
    if (found.get("role") or "").strip().lower() in CHROME_ROLES:
        return True
    return bool(CHROME_CLASSES.intersection((found.get("class") or "").split()))


# Open elements a new start tag closes implicitly (a subset of the HTML parsing algorithm's rules).
_CLOSES: dict[str, frozenset[str]] = {
    **{t: frozenset({"p"}) for t in BLOCK_TAGS if t not in {"li", "tr", "td", "th", "dd", "dt"}},
    "li": frozenset({"li", "p"}),
    "dt": frozenset({"dt", "dd", "p"}),
    "dd": frozenset({"dt", "dd", "p"}),
    "tr": frozenset({"tr", "td", "th"}),
    "td": frozenset({"td", "th"}),
    "th": frozenset({"td", "th"}),
}


@dataclass
class Node:
    """A block element: its tag, span (start tag to end tag, inclusive) and child blocks."""

    tag: str
    start: int
    end: int = -1
    hidden: bool = False
    children: list[Node] = field(default_factory=list)
    has_heading: bool = False


class _Parser(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.src = text
        self._starts = line_starts(text)
        self.root = Node("#root", 0, len(text))
        self.stack: list[Node] = [self.root]
        self.hidden_depth = 0
        self.hidden_stack: list[str] = []
        self.runs: list[tuple[int, int, bool, bool]] = []  # (start, end, visible, preformatted) raw text runs
        self.pre_depth = 0
        self.chrome: list[tuple[str, int]] = []  # open chrome elements: (tag, nesting of that tag inside it)
        self.boundary: list[int] = []  # offsets of markup that separates words (block tags, <br>)
        self._data_start: int | None = None
        self.title: str | None = None
        self._in_title = False

    def _offset(self) -> int:
        line, col = self.getpos()
        return self._starts[line - 1] + col

    def _flush(self, at: int) -> None:
        if self._data_start is not None and at > self._data_start:
            visible = self.hidden_depth == 0 and not self.chrome
            self.runs.append((self._data_start, at, visible, self.pre_depth > 0))
        self._data_start = None

    def _track(self, tag: str, attrs: list[tuple[str, str | None]] | None) -> None:
        """Follow ``pre`` and chrome nesting on a start tag (``attrs``) or an end tag (None)."""
        opening = attrs is not None
        if tag in PRE_TAGS:
            self.pre_depth = self.pre_depth + 1 if opening else max(0, self.pre_depth - 1)
        if self.chrome and self.chrome[-1][0] == tag:
            name, depth = self.chrome[-1]
            depth += 1 if opening else -1
            if depth == 0:
                self.chrome.pop()
            else:
                self.chrome[-1] = (name, depth)
        elif attrs is not None and tag not in VOID_TAGS and is_chrome(tag, attrs):
            self.chrome.append((tag, 1))

    def _markup_end(self, start: int, tag_text: str | None) -> int:
        if tag_text is not None:
            return start + len(tag_text)
        gt = self.src.find(">", start)
        return len(self.src) if gt == -1 else gt + 1

    def handle_data(self, data: str) -> None:
        if self._data_start is None:
            self._data_start = self._offset()
        if self._in_title:
            self.title = (self.title or "") + data

    def _close_node(self, node: Node, end: int) -> None:
        node.end = end
        parent = self.stack[-1]
        parent.children.append(node)
        parent.has_heading = parent.has_heading or node.has_heading or node.tag in HEADINGS

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        start = self._offset()
        self._flush(start)
        self._track(tag, attrs)
        end = self._markup_end(start, self.get_starttag_text())
        if tag == "title":
            self._in_title = True
        if tag in HIDDEN_TAGS:
            self.hidden_depth += 1
            self.hidden_stack.append(tag)
            return
        if tag in BLOCK_TAGS or tag == "br":
            self.boundary.append(start)
        if tag not in BLOCK_TAGS:
            return
        closes = _CLOSES.get(tag, frozenset())
        while len(self.stack) > 1 and self.stack[-1].tag in closes:
            self._close_node(self.stack.pop(), start)
        node = Node(tag, start, hidden=self.hidden_depth > 0 or bool(self.chrome))
        if tag in VOID_TAGS:
            self._close_node(node, end)
        else:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        start = self._offset()
        self._flush(start)
        if tag in BLOCK_TAGS or tag == "br":
            self.boundary.append(start)

    def handle_endtag(self, tag: str) -> None:
        start = self._offset()
        self._flush(start)
        self._track(tag, None)
        end = self._markup_end(start, None)
        if tag == "title":
            self._in_title = False
        if tag in HIDDEN_TAGS:
            if tag in self.hidden_stack:
                while self.hidden_stack:
                    self.hidden_depth -= 1
                    if self.hidden_stack.pop() == tag:
                        break
            return
        if tag in BLOCK_TAGS:
            self.boundary.append(start)
        if tag not in BLOCK_TAGS or not any(n.tag == tag for n in self.stack[1:]):
            return
        while len(self.stack) > 1:
            node = self.stack.pop()
            if node.tag == tag:
                self._close_node(node, end)
                break
            self._close_node(node, start)

    def _other(self) -> None:
        self._flush(self._offset())

    def handle_comment(self, data: str) -> None:
        self._other()

    def handle_decl(self, decl: str) -> None:
        self._other()

    def handle_pi(self, data: str) -> None:
        self._other()

    def unknown_decl(self, data: str) -> None:
        self._other()

    def finish(self) -> None:
        self.close()
        self._flush(len(self.src))
        while len(self.stack) > 1:
            self._close_node(self.stack.pop(), len(self.src))


class HtmlLayout:
    """Sections, blocks, visible text and finer splits of an HTML source.

    Args:
        text: The HTML source, decoded.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        parser = _Parser(text)
        parser.feed(text)
        parser.finish()
        self.title = " ".join(html.unescape(parser.title).split()) if parser.title else None
        self.runs = [(s, e) for s, e, visible, _ in parser.runs if visible and text[s:e].strip()]
        self._run_starts = [s for s, _ in self.runs]
        # every visible run, whitespace-only ones included: the space between two inline elements, and pre text
        self._all = [(s, e, pre) for s, e, visible, pre in parser.runs if visible]
        self._all_starts = [s for s, _, _ in self._all]
        self._boundaries = sorted(parser.boundary)
        self._nodes: dict[Span, Node] = {}
        self._tables: list[tuple[Span, Span]] = []  # (table span, header span)
        self.sections = self._sections(parser.root)
        self._clean: str | None = None
        self._marks: list[tuple[int, int, int]] = []
        self._mark_starts: list[int] = []

    # -- visible text ------------------------------------------------------------------------
    def _runs_within(self, start: int, end: int) -> list[Span]:
        i = max(0, bisect.bisect_right(self._run_starts, start) - 1)
        out = []
        while i < len(self.runs) and self.runs[i][0] < end:
            s, e = max(self.runs[i][0], start), min(self.runs[i][1], end)
            if e > s:
                out.append((s, e))
            i += 1
        return out

    def view(self, start: int, end: int) -> str:
        """Visible text of a span: text nodes outside hidden elements and page chrome, entities decoded, whitespace
        collapsed as a browser does (also across inline elements), ``pre`` text as it is, block boundaries and
        ``<br>`` as line breaks.

        Args:
            start: Start offset.
            end: End offset.
        """
        return self._render(start, end, None)

    @property
    def clean(self) -> str:
        """The document's visible text (:meth:`view` of the whole source): the text an HTML source's chunks hold and
        their offsets index (:func:`visible_text` of the file gives it back)."""
        if self._clean is None:
            marks: list[tuple[int, int, int]] = []
            self._clean = self._render(0, len(self.text), marks)
            self._marks = marks
            self._mark_starts = [m for m, _, _ in marks]
        return self._clean

    def locate(self, start: int, end: int) -> tuple[int, int, str]:
        """Where the visible text of the markup span ``[start, end)`` lies in :attr:`clean`: ``(clean_start,
        clean_end, text)`` with ``clean[clean_start:clean_end] == text == view(start, end)``.

        Every text run records where its first output character landed in :attr:`clean`. A span that starts inside a
        run (a sentence split) is searched for from that run's place; one that starts between runs begins where the
        next run landed. A repeated phrase earlier in the page is never taken for it.

        Args:
            start: Start offset in the markup.
            end: End offset in the markup.

        Raises:
            ValueError: The span's visible text is not in the document's (a bug: never expected).
        """
        clean = self.clean
        start, end = self._out_of_entity(start), self._out_of_entity(end)
        text = self.view(start, end)
        i = bisect.bisect_right(self._mark_starts, start) - 1
        if i >= 0 and self._marks[i][1] > start:  # inside run i
            floor = self._marks[i][2]
        else:
            floor = self._marks[i + 1][2] if i + 1 < len(self._marks) else len(clean)
        at = floor if clean.startswith(text, floor) else clean.find(text, floor)
        if at < 0:  # never seen: the longest part of it that starts there, rather than a failed document
            same = 0
            while same < len(text) and floor + same < len(clean) and clean[floor + same] == text[same]:
                same += 1
            if not text[:same].strip():
                raise ValueError(f"visible text of markup [{start}, {end}) not found in the document's: {text[:60]!r}")
            at, text = floor, text[:same].rstrip()
        return at, at + len(text), text

    def _out_of_entity(self, offset: int) -> int:
        """``offset``, or the start of the character reference (``&lt;``, ``&#60;``) it falls inside: a split by
        tokens may cut one, whose halves are no visible text (``&`` and ``lt;``)."""
        lo = max(0, offset - 40)
        for m in ENTITY_RE.finditer(self.text, lo, min(len(self.text), offset + 40)):
            if m.start() < offset < m.end():
                return m.start()
        return offset

    def _render(self, start: int, end: int, marks: list[tuple[int, int, int]] | None) -> str:
        """:meth:`view`; with ``marks``, also record ``(run start, run end, offset in the output)`` of each run that
        is output (where its first output character landed)."""
        length = 0
        pieces: list[str] = []
        pending = ""  # the separator owed before the next word: "", " " or "\n"
        started = False
        prev_end = start
        i = max(0, bisect.bisect_right(self._all_starts, start) - 1)
        while i < len(self._all) and self._all[i][0] < end:
            s, e, pre = self._all[i]
            i += 1
            s, e = max(s, start), min(e, end)
            if e <= s:
                continue
            b = bisect.bisect_left(self._boundaries, prev_end)
            if started and b < len(self._boundaries) and self._boundaries[b] < s:
                pending = "\n"  # a block boundary or <br> between the two runs
            raw = html.unescape(self.text[s:e])
            if pre:
                if not started or (pieces and pieces[-1].endswith("\n")):
                    raw = raw.lstrip("\n")
                separator = pending if started and pending == "\n" and not raw.startswith("\n") else ""
                if marks is not None:
                    marks.append((s, e, length + len(separator)))
                pieces.append(separator + raw)
                length += len(separator) + len(raw)
                started, pending, prev_end = True, "", e
                continue
            words = " ".join(raw.split())
            if not words:  # whitespace between inline elements: one space
                if started and pending != "\n":
                    pending = " "
                prev_end = e
                continue
            lead = raw[0].isspace()
            if started and not (pending == "\n" and pieces[-1].endswith("\n")):  # after a pre's own last newline
                pieces.append(pending or (" " if lead else ""))
                length += len(pieces[-1])
            if marks is not None:
                marks.append((s, e, length))
            pieces.append(words)
            length += len(words)
            started = True
            pending = " " if raw[-1].isspace() else ""
            prev_end = e
        out = "".join(pieces)
        return out.rstrip() if not self._ends_in_pre(end) else out.rstrip("\n")

    def _ends_in_pre(self, end: int) -> bool:
        i = bisect.bisect_right(self._all_starts, end) - 1
        return i >= 0 and self._all[i][2]

    # -- structure ---------------------------------------------------------------------------
    def _loose_text(self, node: Node) -> list[Span]:
        """Visible text runs directly in ``node`` (outside its child blocks), trimmed."""
        out = []
        covered = [(c.start, c.end) for c in node.children]
        for s, e in self._runs_within(node.start, node.end):
            for cs, ce in covered:
                if cs <= s < ce:
                    break
            else:
                t = trim(self.text, s, e)
                if t[1] > t[0]:
                    out.append(t)
        return out

    def _sections(self, root: Node) -> list[Section]:
        items: list[tuple[str, Span, Node | None]] = []  # ("heading" | "block", span, node)

        def walk(node: Node) -> None:
            loose = self._loose_text(node)
            entries: list[tuple[int, str, Span, Node | None]] = [(s, "block", (s, e), None) for s, e in loose]
            for kid in node.children:
                if not kid.hidden:
                    entries.append((kid.start, "node", (kid.start, kid.end), kid))
            for _, _kind, span, child in sorted(entries, key=lambda x: x[0]):
                if child is None:
                    items.append(("block", span, None))
                elif child.tag in HEADINGS:
                    items.append(("heading", span, child))
                elif child.has_heading:
                    walk(child)
                elif self.view(child.start, child.end).strip():
                    self._register(child)
                    items.append(("block", span, child))

        walk(root)
        sections: list[Section] = []
        path: list[tuple[int, str]] = []
        cur_path: tuple[str, ...] = ()
        blocks: list[Span] = []
        has_body = False

        def close() -> None:
            if blocks and has_body:
                sections.append(Section(cur_path, blocks[0][0], blocks[-1][1], tuple(blocks)))

        for what, span, node in items:
            if what == "heading" and node is not None:
                close()
                level = HEADINGS[node.tag]
                title = " ".join(self.view(node.start, node.end).split())
                while path and path[-1][0] >= level:
                    path.pop()
                path.append((level, title))
                cur_path = tuple(t for _, t in path)
                blocks, has_body = [span], False
            else:
                blocks.append(span)
                has_body = True
        close()
        return sections

    def _register(self, node: Node) -> None:
        self._nodes[(node.start, node.end)] = node
        if node.tag == "table":
            head = _table_header(node)
            if head is not None:
                self._tables.append(((node.start, node.end), (head.start, head.end)))
        for child in node.children:
            self._register(child)

    def header(self, start: int, end: int) -> str:
        """The table header a span repeats as context: the visible text of the table's ``thead`` (else of its first
        row when that row holds ``th`` cells) and a newline, when the span starts after the header inside the
        table; else ``""``.

        Args:
            start: Start offset.
            end: End offset.
        """
        for (_, table_end), (head_start, head_end) in self._tables:
            if head_end <= start < table_end:
                return self.view(head_start, head_end) + "\n"
        return ""

    def parts(self, start: int, end: int) -> list[Span]:
        """Next finer split of a span: a block's child blocks and loose text, else the sentences of its
        text nodes, else nothing (token windows).

        Args:
            start: Start offset.
            end: End offset.
        """
        node = self._nodes.get((start, end))
        if node is not None:
            pieces = sorted(
                [(c.start, c.end) for c in node.children if not c.hidden and self.view(c.start, c.end).strip()]
                + self._loose_text(node)
            )
            if len(pieces) == 1:
                return self.parts(*pieces[0]) or pieces
            if len(pieces) > 1:
                return pieces
        sentences = [s for run in self._runs_within(start, end) for s in sentences_in(self.text, run[0], run[1])]
        return sentences if len(sentences) > 1 else []


def _table_header(table: Node) -> Node | None:
    """A table's header: its ``thead``, else its first row (directly or in the first ``tbody``) when that row
    holds a ``th`` cell."""
    for child in table.children:
        if child.tag == "thead":
            return child
    rows = [c for c in table.children if c.tag == "tr"]
    if not rows:
        body = next((c for c in table.children if c.tag == "tbody"), None)
        rows = [c for c in body.children if c.tag == "tr"] if body is not None else []
    if rows and any(c.tag == "th" for c in rows[0].children):
        return rows[0]
    return None


def visible_text(markup: str) -> str:
    """Visible text of a markup span read on its own (tags dropped, entities decoded, ``script``/``style``/...
    excluded, whitespace collapsed, block boundaries and ``<br>`` as line breaks): :meth:`HtmlLayout.view` of the
    whole span.

    Args:
        markup: An HTML span, e.g. a chunk's ``text`` (``source[start_offset:end_offset]``).
    """
    return HtmlLayout(markup).view(0, len(markup)) if markup.strip() else ""
