"""Source code layout: one section per function, method or class, from a tree-sitter syntax tree.

:class:`CodeLayout` parses a source file with its language's `tree-sitter <https://tree-sitter.github.io/>`_
grammar (Python, JavaScript, TypeScript, TSX, Java, Go; :data:`CODE_SUFFIXES` maps file suffixes to them) and gives
the structure chunker (:mod:`es_rag.chunking.chunkers`) its sections, their blocks and finer splits. Tree-sitter
offsets are UTF-8 byte offsets; every one is mapped to a Python ``str`` index once, so ``text[start:end]`` of a
chunk is exact whatever the file holds (Japanese comments, emoji in strings).

Sections (disjoint, in source order, each one block: its whole span):

* A definition -- Python ``function_definition`` / ``class_definition`` / ``decorated_definition`` (with its
  decorators); JavaScript / TypeScript function, generator and class declarations, ``const f = () => ...`` /
  ``function`` expressions (class fields too), ``export`` and ``declare`` forms of these, TypeScript interfaces,
  type aliases, enums, function signatures and namespaces; Java classes, interfaces, enums, records, annotation
  types, methods and constructors; Go functions, methods and type declarations -- is one section, heading path
  ``(path, name)``, with the comments directly above it (JSDoc, Javadoc, Go doc comments, ``#`` comments: on
  their own lines, no blank line between; TypeScript member decorators likewise) and a ``;`` right after it.
  A Go method's path names its receiver type: ``(path, Type, Method)``.
* A class (interface, enum, record, namespace) with member definitions is split: each member (method,
  constructor, nested class, itself split the same way) is a section ``(path, Class, method)``; the class's own
  code -- its header, docstring and fields up to the first member, then each run of class-level statements
  between or after members -- are sections ``(path, Class)``. A class without member definitions is one section.
  Functions nested in a function stay in its section.
* Code outside definitions (imports, constants, ``if __name__ == "__main__":``) is one section ``(path,)`` per run
  between definitions. A run of mere punctuation (a closing ``}``) is no section, unless the file holds nothing
  else. A file without definitions is one such section; an empty (or whitespace-only) file has none.

:meth:`~CodeLayout.parts` splits a span that alone exceeds the token limit at the statements (members) of the
shallowest body with any inside it that start their line (a definition's signature stays with its first statement,
a comment with the statement below it), then at lines, then nowhere (token windows). :meth:`~CodeLayout.header`
gives a span that starts inside a definition's body (a later part of a split function, or class-level code after
the class header) the definition's signature (decorators included, at most :data:`HEADER_SIGNATURE_LINES` lines)
and docstring (Python: the body's first string; else the comments above it; at most :data:`HEADER_DOC_LINES`
lines), dedented, at most :data:`HEADER_MAX_CHARS` characters, and a newline; the chunker puts it before the
span's text in ``contextual_text`` and counts it in the child's budget. A file with syntax errors is parsed as
well as tree-sitter can (definitions among its ``ERROR`` nodes still count); nothing raises. A parse still running
after :data:`PARSE_SECONDS` (error recovery on some garbage) is cancelled: the file is then one section ``(path,)``,
split at lines.
"""

from __future__ import annotations

import importlib
import re
import textwrap
import time
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import TYPE_CHECKING

from es_rag.chunking.spans import Section, Span, lines_in, trim
from es_rag.errors import ConfigError

if TYPE_CHECKING:
    from tree_sitter import Language, Node

CODE_SUFFIXES: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".java": "java",
    ".go": "go",
}
"""File suffix -> code format (``.d.ts`` is TypeScript by its ``.ts``)."""

CODE_FORMATS: tuple[str, ...] = ("python", "javascript", "typescript", "tsx", "java", "go")
"""The formats :class:`CodeLayout` reads."""

HEADER_SIGNATURE_LINES = 4
"""Lines of a definition's signature a later part of it repeats (:meth:`CodeLayout.header`)."""
HEADER_DOC_LINES = 3
"""Lines of a definition's docstring or doc comment a later part of it repeats."""
HEADER_MAX_CHARS = 400
"""Cap on a header's length in characters."""

_GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "java": ("tree_sitter_java", "language"),
    "go": ("tree_sitter_go", "language"),
}
_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})
_PREFIXES = _COMMENTS | {"decorator"}  # joined to the node below them
_CONTAINERS = frozenset(
    {
        "block",
        "statement_block",
        "statement_list",
        "class_body",
        "interface_body",
        "enum_body",
        "enum_body_declarations",
        "annotation_type_body",
        "constructor_body",
        "declaration_list",
        "field_declaration_list",
        "switch_block",
        "switch_body",
        "object_type",
    }
)
"""Bodies whose named children are statements or members (flattened, nested ones too)."""
_MAX_VISITS = 50_000  # nodes parts() looks at before it falls back to lines
PARSE_SECONDS = 5.0
"""A parse still running after this long is cancelled (tree-sitter's error recovery can take minutes on some
garbage; a 2 MB ``.d.ts`` parses in 0.1 s): the file is then one section, split at lines."""


@dataclass(frozen=True)
class _Grammar:
    leaves: frozenset[str]  # definitions that are one section
    classes: frozenset[str]  # definitions whose member definitions are sections of their own
    assigned: frozenset[str] = frozenset()  # declarations that define a function when their value is one
    func_values: frozenset[str] = frozenset()


_JS_FUNCS = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_JS = _Grammar(
    leaves=frozenset(
        {"function_declaration", "generator_function_declaration", "method_definition", *_JS_FUNCS}
        | {"interface_declaration", "type_alias_declaration", "enum_declaration", "function_signature"}
    ),
    classes=frozenset({"class_declaration", "abstract_class_declaration", "class", "internal_module", "module"}),
    assigned=frozenset({"lexical_declaration", "variable_declaration", "public_field_definition", "field_definition"}),
    func_values=_JS_FUNCS,
)
_LANGS = {
    "python": _Grammar(frozenset({"function_definition"}), frozenset({"class_definition"})),
    "javascript": _JS,
    "typescript": _JS,
    "tsx": _JS,
    "java": _Grammar(
        frozenset({"method_declaration", "constructor_declaration", "compact_constructor_declaration"}),
        frozenset(
            {
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
                "annotation_type_declaration",
            }
        ),
    ),
    "go": _Grammar(frozenset({"function_declaration", "method_declaration", "type_declaration"}), frozenset()),
}


@cache
def _language(fmt: str) -> Language:
    from tree_sitter import Language

    module, fn = _GRAMMARS[fmt]
    return Language(getattr(importlib.import_module(module), fn)())


def _parse(source: bytes, fmt: str) -> Node | None:
    """The syntax tree's root, or None when the parse ran past :data:`PARSE_SECONDS`."""
    from tree_sitter import Parser

    deadline = time.monotonic() + PARSE_SECONDS
    try:
        tree = Parser(_language(fmt)).parse(
            lambda at, _point: source[at : at + 65536], progress_callback=lambda _at, _err: time.monotonic() > deadline
        )
    except ValueError:  # cancelled
        return None
    return tree.root_node


@dataclass(frozen=True)
class _Def:
    """A definition: its outer node (export / decorators / ``declare`` included), heading names, body, members."""

    node: Node
    names: tuple[str, ...]
    body: Node | None  # the signature ends where it starts; None: the signature is the first line
    members: Node | None  # a class body, whose member definitions are sections of their own


@dataclass(frozen=True)
class _Owner:
    """The definition a section belongs to: where its body starts and the header later parts repeat."""

    body_start: int
    header: str


class CodeLayout:
    """Source code: sections per definition (heading path ``path > Class > method``), split at statements.

    Args:
        text: The source.
        fmt: One of :data:`CODE_FORMATS`.
        path: The source id or file name, the first element of every heading path.

    Raises:
        ConfigError: ``fmt`` is not a code format.
    """

    title: str | None = None

    def __init__(self, text: str, fmt: str, path: str) -> None:
        if fmt not in _LANGS:
            raise ConfigError(f"fmt: {fmt!r} is not a code format; valid values: {', '.join(CODE_FORMATS)}")
        self.text = text
        self.fmt = fmt
        self.path = path
        self.sections: list[Section] = []
        self._grammar = _LANGS[fmt]
        self._owners: list[tuple[int, int, _Owner | None]] = []
        self._root: Node | None = None
        self._starts: list[int] = []
        if not text.strip():
            return
        self._map_offsets(text)
        self._root = _parse(text.encode("utf-8", "surrogatepass"), fmt)
        if self._root is not None:
            self._scope(self._root.named_children, 0, len(text), (path,), None)
        if not self.sections:  # nothing but punctuation, or no tree: still the source's one section
            self._add((path,), 0, len(text), None, first=True)
        order = sorted(range(len(self.sections)), key=lambda i: self.sections[i].start)
        self.sections = [self.sections[i] for i in order]
        self._owners = [self._owners[i] for i in order]
        self._starts = [s for s, _, _ in self._owners]

    # -- offsets -------------------------------------------------------------------------------
    def _map_offsets(self, text: str) -> None:
        """Breakpoints of the byte <-> ``str`` index maps: one per non-ASCII character and per ASCII run after it."""
        self._bytes, self._chars = [0], [0]
        byte = char = 0
        for m in re.finditer(r"[^\x00-\x7f]", text):
            i = m.start()
            byte += i - char
            self._bytes.append(byte)
            self._chars.append(i)
            o = ord(m.group())
            byte += 2 if o < 0x800 else 3 if o < 0x10000 else 4
            char = i + 1
            self._bytes.append(byte)
            self._chars.append(char)

    def _char(self, b: int) -> int:
        k = bisect_right(self._bytes, b) - 1
        cap = self._chars[k + 1] if k + 1 < len(self._chars) else len(self.text)  # never past the segment
        return min(self._chars[k] + (b - self._bytes[k]), cap)

    def _byte(self, c: int) -> int:
        k = bisect_right(self._chars, c) - 1
        return self._bytes[k] + (c - self._chars[k])

    def _span(self, node: Node) -> Span:
        return self._char(node.start_byte), self._char(node.end_byte)

    def _starts_line(self, c: int) -> bool:
        return not self.text[self.text.rfind("\n", 0, c) + 1 : c].strip()

    # -- syntax ----------------------------------------------------------------------------------
    def _flatten(self, nodes: Iterable[Node]) -> Iterator[Node]:
        """Nodes with ``ERROR`` nodes and statement bodies replaced by their named children."""
        for n in nodes:
            if n.type == "ERROR" or n.type in _CONTAINERS:
                yield from self._flatten(n.named_children)
            else:
                yield n

    def _items(self, nodes: Iterable[Node]) -> list[tuple[int, int, Node]]:
        """Sibling nodes as ``(start, end, node)``: a comment or decorator on its own line(s) directly above a node
        (no blank line between) is joined to it, a comment after code on its line to that code."""
        text = self.text
        out: list[tuple[int, int, Node]] = []
        pending: list[tuple[int, int, Node]] = []

        def adjacent(end: int, start: int) -> bool:
            gap = text[end:start]
            return not gap.strip() and gap.count("\n") <= 1

        for n in nodes:
            s, e = self._span(n)
            if e <= s:  # a MISSING node
                continue
            if n.type in _PREFIXES:
                if not self._starts_line(s):  # after code on its line: that code's, or on its own
                    if not pending and out and adjacent(out[-1][1], s):
                        out[-1] = (out[-1][0], e, out[-1][2])
                    else:
                        out.extend(pending)
                        out.append((s, e, n))
                        pending = []
                elif pending and adjacent(pending[-1][1], s):
                    pending.append((s, e, n))
                else:
                    out.extend(pending)
                    pending = [(s, e, n)]
                continue
            if pending and adjacent(pending[-1][1], s):
                out.append((pending[0][0], e, n))
            else:
                out.extend(pending)
                out.append((s, e, n))
            pending = []
        out.extend(pending)
        return out

    def _text(self, node: Node | None) -> str:
        return self.text[slice(*self._span(node))] if node is not None else ""

    def _name(self, node: Node, default: str = "<anonymous>") -> str:
        name = node.child_by_field_name("name") or node.child_by_field_name("property")
        if name is None:
            return default
        return " ".join(self._text(name).strip("'\"`").split())

    def _definition(self, node: Node) -> _Def | None:
        """The definition ``node`` makes, if any (decorators, ``export`` and ``declare`` unwrapped)."""
        g, core, default = self._grammar, node, "<anonymous>"
        while True:
            t = core.type
            if t == "decorated_definition":
                inner = core.child_by_field_name("definition")
            elif t in ("export_statement", "ambient_declaration"):
                if any(c.type == "default" for c in core.children):
                    default = "default"
                inner = core.child_by_field_name("declaration") or core.child_by_field_name("value")
                inner = inner or next((c for c in core.named_children if c.type not in _PREFIXES), None)
                if t == "ambient_declaration" and inner is not None and inner.type == "statement_block":
                    return _Def(node, ("global",), inner, inner)  # declare global { ... }
            elif t == "expression_statement" and core.named_child_count == 1:
                inner = core.named_children[0]
                if inner.type != "internal_module":  # TypeScript's namespace X { ... } is a statement
                    return None
            else:
                break
            if inner is None:
                return None
            core = inner
        t = core.type
        if t in g.classes:
            body = core.child_by_field_name("body")
            return _Def(node, (self._name(core, default),), body, body)
        if t in g.leaves:
            names: tuple[str, ...] = (self._name(core, default),)
            if self.fmt == "go" and t == "method_declaration":
                names = (self._receiver(core.child_by_field_name("receiver")), *names)
            elif t == "type_declaration":
                specs = [self._name(c) for c in core.named_children if c.type in ("type_spec", "type_alias")]
                names = (", ".join(specs) or "<anonymous>",)
            return _Def(node, names, core.child_by_field_name("body"), None)
        if t in g.assigned:
            decls = [core] if "field" in t else [c for c in core.named_children if c.type == "variable_declarator"]
            for d in decls:
                value = d.child_by_field_name("value")
                if value is not None and value.type in g.func_values:
                    return _Def(node, (self._name(d, default),), value.child_by_field_name("body"), None)
        return None

    def _receiver(self, params: Node | None) -> str:
        """A Go method's receiver type name (``*Recv`` and ``Recv[T]`` give ``Recv``)."""
        todo = [params] if params is not None else []
        while todo:
            n = todo.pop(0)
            if n.type == "type_identifier":
                return self._text(n)
            todo.extend(n.named_children)
        return "<receiver>"

    # -- sections ----------------------------------------------------------------------------------
    def _scope(self, nodes: Iterable[Node], lo: int, hi: int, path: tuple[str, ...], owner: _Owner | None) -> None:
        """Sections of ``text[lo:hi]``: the definitions among ``nodes``, the code between them in runs."""
        cursor = lo
        for s, e, node in self._items(self._flatten(nodes)):
            d = self._definition(node)
            if d is None:
                continue
            semi = re.match(r"[ \t]*;", self.text[e : e + 80])
            e = e + semi.end() if semi else e  # the `;` ending `h = () => {...};` is the definition's
            self._add(path, cursor, s, owner, first=cursor == lo and owner is not None)
            self._define(s, e, d, path)
            cursor = e
        self._add(path, cursor, hi, owner, first=cursor == lo and owner is not None)

    def _define(self, start: int, end: int, d: _Def, path: tuple[str, ...]) -> None:
        heading = (*path, *d.names)
        node_start, node_end = self._span(d.node)
        sig_end = body_start = node_end
        if d.body is not None:
            body_start = self._char(d.body.start_byte)
            sig_end = body_start
            for c in d.body.parent.children if d.body.parent is not None else []:
                if c == d.body:
                    break
                if c.type not in _COMMENTS:
                    sig_end = self._char(c.end_byte)  # Python's `:`, before a comment above the first statement
        else:
            eol = self.text.find("\n", node_start, node_end)
            sig_end = body_start = eol if eol != -1 else node_end
        owner = _Owner(body_start, self._header_text(start, node_start, sig_end, d.body))
        if d.members is not None:
            members = [*self._comments_before(d.members), *self._flatten([d.members])]
            if any(self._definition(n) is not None for n in members):
                self._scope(members, start, end, heading, owner)
                return
        self._add(heading, start, end, owner, first=True)

    def _comments_before(self, body: Node) -> list[Node]:
        """Comments between a signature and its body (Python puts a class's leading comments there)."""
        out: list[Node] = []
        for c in body.parent.named_children if body.parent is not None else []:
            if c == body:
                break
            out = [*out, c] if c.type in _COMMENTS else []
        return out

    def _add(self, heading: tuple[str, ...], start: int, end: int, owner: _Owner | None, *, first: bool) -> None:
        s, e = trim(self.text, start, end)
        if e <= s or not (first or re.search(r"\w", self.text[s:e])):
            return
        self.sections.append(Section(heading, s, e, ((s, e),)))
        self._owners.append((s, e, owner))

    def _header_text(self, lead: int, start: int, sig_end: int, body: Node | None) -> str:
        """Signature (decorators included) and docstring or doc comment of a definition, in source order, dedented."""
        text = self.text
        line = self._line_start
        sig = _first_lines(text[line(start) : sig_end].rstrip(), HEADER_SIGNATURE_LINES)
        if self.fmt == "python":
            first = body.named_children[0] if body is not None and body.named_child_count else None
            doc = ""
            if first is not None and first.type == "expression_statement" and first.named_child_count == 1:
                if first.named_children[0].type == "string":
                    s, e = self._span(first)
                    doc = text[line(s) : e]
            parts = (sig, _first_lines(doc, HEADER_DOC_LINES))
        else:
            parts = (_first_lines(text[line(lead) : line(start)].rstrip(), HEADER_DOC_LINES), sig)
        return textwrap.dedent("\n".join(p for p in parts if p))[:HEADER_MAX_CHARS].strip("\n") + "\n"

    def _line_start(self, c: int) -> int:
        """Start of the line of ``c`` when only whitespace precedes it there, else ``c``."""
        ls = self.text.rfind("\n", 0, c) + 1
        return ls if not self.text[ls:c].strip() else c

    # -- the Layout protocol -------------------------------------------------------------------------
    def view(self, start: int, end: int) -> str:
        """The text the model reads for a span: the span itself.

        Args:
            start: Start offset.
            end: End offset.
        """
        return self.text[start:end]

    def header(self, start: int, end: int) -> str:
        """What a span that starts inside a definition after its signature repeats before its text: the
        definition's signature and docstring (capped) and a newline; ``""`` for any other span.

        Args:
            start: Start offset.
            end: End offset.
        """
        k = bisect_right(self._starts, start) - 1
        if k < 0:
            return ""
        s, e, owner = self._owners[k]
        if owner is None or not s <= start < e or start < owner.body_start:
            return ""
        return owner.header

    def parts(self, start: int, end: int) -> list[Span]:
        """Next finer split of a span: at the statements (members) of the shallowest body with any starting on
        their own line inside it, else at its lines, else nothing (token windows).

        A body's first statement stays with what precedes it (the signature), a comment with the statement below.

        Args:
            start: Start offset.
            end: End offset.
        """
        if "\n" not in self.text[start:end]:
            return []
        cuts = self._cuts(start, end)
        if cuts:
            edges = [start, *cuts, end]
            pieces = [trim(self.text, a, b) for a, b in pairwise(edges)]
            return [(a, b) for a, b in pieces if b > a]
        lines = lines_in(self.text, start, end)
        return lines if len(lines) > 1 else []

    def _cuts(self, start: int, end: int) -> list[int]:
        """Starts of the shallowest statements strictly inside ``text[start:end]`` that begin their line."""
        if self._root is None:
            return []
        sb, eb = self._byte(start), self._byte(end)
        top = self._root.named_descendant_for_byte_range(sb, eb)
        frontier = [top] if top is not None else []
        visits = 0
        while frontier and visits < _MAX_VISITS:
            cuts: set[int] = set()
            deeper: list[Node] = []
            for node in frontier:
                for s, e, child, may_cut in self._elements(node, sb, eb):
                    if e <= start or s >= end:
                        continue
                    visits += 1
                    if may_cut and start < s < end and self._starts_line(s):
                        cuts.add(s)
                    if child.named_child_count:
                        deeper.append(child)
            if cuts:
                return sorted(cuts)
            frontier = deeper
        return []

    def _elements(self, node: Node, sb: int, eb: int) -> list[tuple[int, int, Node, bool]]:
        """The statement-level children of ``node`` overlapping bytes ``[sb, eb)`` as ``(start, end, node, may_cut)``:
        a definition's body and what follows it (``else`` / ``except`` clauses), else every named child; bodies
        flattened to their statements, whose first one may not be cut from what precedes it."""
        if node.type == "decorated_definition":
            node = node.child_by_field_name("definition") or node
        body = node.child_by_field_name("body")
        if node.type in _CONTAINERS or node.parent is None or node.type == "ERROR":
            kids = [node]
        elif body is not None:
            kids = [body]
            while (k := kids[-1].next_named_sibling) is not None and k.start_byte < eb:
                kids.append(k)
        else:
            kids = list(self._overlapping(node, sb, eb))
        out: list[tuple[int, int, Node, bool]] = []
        for k in kids:
            if k is node or k.type in _CONTAINERS:
                first = k
                while first.named_child_count and (first is k or first.type in _CONTAINERS or first.type == "ERROR"):
                    first = first.named_child(0)
                lead = self._char(first.start_byte)
                out.extend((s, e, n, s > lead) for s, e, n in self._items(self._flat_range(k, sb, eb)))
            else:
                out.append((*self._span(k), k, True))
        return out

    def _overlapping(self, node: Node, sb: int, eb: int) -> Iterator[Node]:
        """Named children of ``node`` overlapping bytes ``[sb, eb)`` (a cursor: ``Node.first_named_child_for_byte``
        crashes on some trees with errors)."""
        cursor = node.walk()
        if cursor.goto_first_child_for_byte(sb) is None:
            return
        while True:
            child = cursor.node
            if child is None or child.start_byte >= eb:
                return
            if child.is_named:
                yield child
            if not cursor.goto_next_sibling():
                return

    def _flat_range(self, node: Node, sb: int, eb: int) -> Iterator[Node]:
        """:meth:`_overlapping`, with ``ERROR`` nodes and nested bodies replaced by their children."""
        for child in self._overlapping(node, sb, eb):
            if child.type == "ERROR" or child.type in _CONTAINERS:
                yield from self._flat_range(child, sb, eb)
            else:
                yield child


def _first_lines(text: str, n: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:n]) + (" ..." if len(lines) > n else "")
