"""Chunking strategies behind one interface.

Every strategy turns one decoded source into :class:`~es_rag.records.Chunk` records whose
``text == source[start_offset:end_offset]`` (Python ``str`` offsets), sized in the embedding model's own
tokens, with a ``chunker_version`` that changes whenever the output would (rules revision, size,
overlap, parent size, contextual prefix, tokenizer):

* ``fixed`` -- token windows of ``L = max_tokens`` tokens with ``O = overlap`` (stride ``S = L - O``,
  seed 000's baseline); children only.
* ``recursive`` -- separators tried in order (blank line, line, sentence ``。！？.!?``, word, token
  window), pieces packed up to ``L`` tokens with up to ``O`` tokens of trailing pieces repeated;
  children only.
* ``structure`` -- Markdown / HTML structure: headings give ``heading_path``; tables, lists and code
  blocks are whole blocks, split only when they alone exceed ``L`` and then at rows / items / lines,
  then sentences, then token windows; children only. A child that starts among a Markdown table's body
  rows repeats the table's header rows before its text in ``contextual_text`` (its offsets still point
  at the rows; the header's tokens count in its budget), so header and cells never part (seed 000). Source
  code (:mod:`es_rag.chunking.code`): each function, method or class is a section (``file > Class > method``), a
  later part of a long one repeats its signature and docstring in ``contextual_text``. A PDF's extracted text
  (:mod:`es_rag.chunking.paged`, every strategy): sections from its outline, pages into ``page_start``/``page_end``.
* ``parent-child`` -- ``structure`` children plus parents (the heading sections, or groups of
  consecutive children of at most ``parent_max_tokens``) for generation context; the default.
* ``semantic`` -- :class:`~es_rag.chunking.semantic.SemanticChunker`: within each section, a new child starts
  where the embedding distance between neighbouring sentences jumps (a topic change); parents as
  ``parent-child``. Its version names the embedding model, whose vectors place the boundaries.

One clean text (issue 31): an HTML source is chunked by its markup structure, but a chunk's ``text`` is its span's
visible text and its offsets index the page's whole visible text (:attr:`~es_rag.chunking.html.HtmlLayout.clean`,
:func:`~es_rag.chunking.html.visible_text` of the file), so BM25, the embedding model, the reranker, the context,
``Hit.text`` and every adapter read the same words, and neighbours merge by offsets as in Markdown. (Indexes written
before keep markup in ``text`` and the visible text in ``visible_text``; :attr:`~es_rag.records.Hit.display_text`
reads either.)

With ``contextual=True`` the text the embedding model reads is ``title \\n heading > path \\n\\n text``,
stored in ``contextual_text`` (the chunk ``text`` stays the source span) and the prefix's tokens are
reserved in the child budget. ``token_count`` counts the text the model actually reads
(``contextual_text`` when set, else ``text``); a chunk whose count exceeds the model's input limit is
reported by ingestion, never cut silently.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import PurePath
from typing import Protocol

from es_rag.chunking.code import CODE_FORMATS, CodeLayout
from es_rag.chunking.html import HtmlLayout
from es_rag.chunking.markdown import TextLayout, blank_front_matter
from es_rag.chunking.paged import Heading, PagedLayout, page_span
from es_rag.chunking.spans import (
    Section,
    Span,
    lines_in,
    pack,
    pack_with_overlap,
    paragraphs_in,
    sentences_in,
    stable_chunk_id,
    token_windows,
    trim,
)
from es_rag.encoders.tokenizer import Tokenizer
from es_rag.errors import ConfigError, InputError
from es_rag.principals import name_problem
from es_rag.records import Chunk
from es_rag.settings import parse_enum

FORMATS = ("markdown", "rst", "plain", "html", "pdf", *CODE_FORMATS)
_TOKENIZER_PROBE = "Chunking 検索拡張生成 (RAG) unbelievably-long_identifiers E1042, naïve café — 2026年4月。"
MIN_CHUNK_TOKENS = 8


class Strategy(str, Enum):
    """Chunking strategy names."""

    FIXED = "fixed"
    RECURSIVE = "recursive"
    STRUCTURE = "structure"
    PARENT_CHILD = "parent-child"
    SEMANTIC = "semantic"

    @classmethod
    def parse(cls, value: str | Strategy) -> Strategy:
        """Parse a name, listing the valid ones on error.

        Args:
            value: A strategy name.
        """
        parsed: Strategy = parse_enum(cls, value, "strategy")
        return parsed


RULES = {
    Strategy.FIXED: "2",
    Strategy.RECURSIVE: "2",
    Strategy.STRUCTURE: "4",
    Strategy.PARENT_CHILD: "4",
    Strategy.SEMANTIC: "1",
}
"""Revision of each strategy's rules: bump when the same settings would produce different chunks (last: a child
starting among a Markdown table's body rows repeats the header rows in ``contextual_text``, and its budget
counts them)."""

CHUNKER_VERSION = f"{Strategy.PARENT_CHILD.value}-{RULES[Strategy.PARENT_CHILD]}"
"""Rules revision of the default (structure-aware parent/child) chunker."""


class Layout(Protocol):
    """A parsed source: sections, the text the model reads for a span, and finer splits of a span."""

    text: str
    sections: list[Section]

    def view(self, start: int, end: int) -> str:
        """Text the model reads for ``text[start:end]``."""
        ...

    def header(self, start: int, end: int) -> str:
        """Context a span repeats before its own text (a table's header rows), or ``""``."""
        ...

    def parts(self, start: int, end: int) -> list[Span]:
        """Next finer split of a span, or ``[]`` when only token windows remain."""
        ...


@dataclass
class _Group:
    heading_path: tuple[str, ...]
    parent: Span | None
    children: list[Span] = field(default_factory=list)
    budget: int = 0


class Chunker:
    """Base of every strategy: validation, lineage, ids, contextual text and token counts.

    Args:
        tokenizer: The embedding model's tokenizer.
        max_tokens: Largest child (L), in model tokens.
        overlap: Overlap (O) in tokens between consecutive windows / recursive chunks.
        contextual: Embed ``title + heading path`` with each child (recorded in ``contextual_text``).
    """

    strategy: Strategy = Strategy.PARENT_CHILD
    formats: tuple[str, ...] = FORMATS

    def __init__(
        self, tokenizer: Tokenizer, *, max_tokens: int = 200, overlap: int = 30, contextual: bool = False
    ) -> None:
        if max_tokens < MIN_CHUNK_TOKENS:
            raise ConfigError(f"max_tokens: must be >= {MIN_CHUNK_TOKENS}, got {max_tokens}")
        if tokenizer.max_tokens is not None and max_tokens > tokenizer.max_tokens:
            raise ConfigError(
                f"max_tokens ({max_tokens}) exceeds the model's input limit ({tokenizer.max_tokens} tokens "
                f"for {tokenizer.name}): chunks would be truncated when embedded"
            )
        if not 0 <= overlap < max_tokens:
            raise ConfigError(f"overlap: must be >= 0 and < max_tokens ({max_tokens}), got {overlap}")
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.overlap = overlap
        self.contextual = contextual
        self._tok_fp: str | None = None

    # -- identity ------------------------------------------------------------------------------
    def _params(self) -> str:
        return f"L{self.max_tokens}.O{self.overlap}"

    @property
    def version(self) -> str:
        """``chunker_version``: strategy, rules revision and every parameter that changes the output.

        The tokenizer enters as a fingerprint of how it splits a fixed probe text (plus its input limit),
        so the version is the same on every machine for the same tokenizer whatever path it was loaded from.
        """
        if self._tok_fp is None:
            spans = self.tokenizer.token_spans(_TOKENIZER_PROBE)
            raw = f"{spans}|{self.tokenizer.max_tokens}".encode()
            self._tok_fp = hashlib.sha256(raw).hexdigest()[:8]
        ctx = ".ctx" if self.contextual else ""
        return f"{self.strategy.value}-{RULES[self.strategy]}+{self._params()}{ctx}.tok={self._tok_fp}"

    # -- planning (strategy specific) ------------------------------------------------------------
    def _plan(self, layout: Layout, prefix: Callable[[tuple[str, ...]], str]) -> list[_Group]:
        raise NotImplementedError

    def _layout(
        self, text: str, fmt: str, doc: str, source_id: str = "", escapes: Sequence[int] | None = None
    ) -> Layout:
        if fmt not in self.formats:
            raise InputError(
                doc,
                "format",
                f"strategy {self.strategy.value!r} does not chunk {fmt}; it handles {', '.join(self.formats)}",
            )
        if fmt in CODE_FORMATS:
            return CodeLayout(text, fmt, source_id or doc)  # the file's id heads every heading path
        return HtmlLayout(text) if fmt == "html" else TextLayout(text, fmt, escapes)

    def _budget(self, prefix: str) -> int:
        if not prefix:
            return self.max_tokens
        return max(MIN_CHUNK_TOKENS, self.max_tokens - self.tokenizer.count(prefix))

    def _header(self, layout: Layout, start: int, end: int) -> str:
        """Context a child repeats before its text; only the structure-aware strategies repeat table headers."""
        return ""

    def _fits(self, layout: Layout, budget: int) -> Callable[[int, int], bool]:
        cache: dict[Span, bool] = {}
        count = self.tokenizer.count

        def fits(start: int, end: int) -> bool:
            key = (start, end)
            hit = cache.get(key)
            if hit is None:
                shown = self._header(layout, start, end) + layout.view(start, end)
                # every word is at least one token: more words than the budget never fits, and is not counted
                # (counting a whole 48 MB section was most of an ingest's time and memory)
                hit = cache[key] = not _more_words_than(shown, budget) and count(shown) <= budget
            return hit

        return fits

    # -- public --------------------------------------------------------------------------------
    def chunk(
        self,
        text: str,
        *,
        source_id: str,
        source_version: str,
        tenant_id: str,
        acl: Sequence[str],
        title: str | None = None,
        source_path: str | None = None,
        fmt: str = "markdown",
        pages: Sequence[int] = (),
        headings: Sequence[Heading] = (),
        escapes: Sequence[int] | None = None,
        page_labels: Sequence[str] = (),
    ) -> list[Chunk]:
        """Chunk one source into parents (if the strategy makes them) followed by children.

        Args:
            text: The whole source, decoded.
            source_id: Stable id of the source.
            source_version: Version of the source.
            tenant_id: Owner tenant (required).
            acl: Groups allowed to read it.
            title: Document title; defaults to the HTML ``<title>``, the first heading or the file name.
            source_path: The file as given, for reports.
            fmt: ``markdown``, ``rst``, ``plain``, ``html``, ``pdf`` (a PDF's extracted text,
                :class:`~es_rag.chunking.paged.PagedLayout`; the fixed and recursive strategies read it as text) or
                a code format (:data:`~es_rag.chunking.code.CODE_FORMATS`: one section per function, method or
                class, :class:`~es_rag.chunking.code.CodeLayout`; the structure-aware strategies only).
            pages: The start offset of each page of a paged source (page ``i + 1`` starts at ``pages[i]``): every
                chunk gets its ``page_start`` and ``page_end``; empty for a source without pages.
            page_labels: The printed label of each page (PDF ``/PageLabels``), one per page of ``pages``: every chunk
                gets its ``page_label_start`` and ``page_label_end``; empty for a document without labels.
            headings: ``pdf`` only: ``(offset, level, title)`` of the headings the extraction found (its sections).
            escapes: ``markdown`` only: ``text`` is a Word or OpenDocument file's text as written, and these are the
                offsets before which its Markdown rendering has a backslash (:mod:`es_rag.ingest.office_render`): the
                structure is read from that rendering, the chunks hold the text as written, and no front matter is
                read. None: ``text`` is Markdown as a file holds it.

        Raises:
            InputError: Missing tenant or source id, a source without any text, or a format the
                strategy does not handle.
        """
        doc = source_path or source_id or "<unnamed>"
        if not source_id or not str(source_id).strip():
            raise InputError(doc, "source_id", "missing or empty")
        if not source_version or not str(source_version).strip():
            raise InputError(doc, "source_version", "missing or empty")
        if not tenant_id or not str(tenant_id).strip():
            raise InputError(doc, "tenant_id", "missing or empty: every chunk needs a tenant")
        if (problem := name_problem(tenant_id)) is not None:
            raise InputError(doc, "tenant_id", problem)
        for group in acl:
            if (problem := name_problem(group)) is not None:
                raise InputError(doc, "acl", problem)
        if fmt not in FORMATS:
            raise ConfigError(f"fmt: invalid value {fmt!r}; valid values: {', '.join(FORMATS)}")
        if escapes is not None and fmt != "markdown":
            raise ConfigError(f"escapes: a Markdown rendering's; fmt {fmt!r} has none")
        if not text.strip():
            raise InputError(doc, "text", "the source contains no text")
        meta: dict[str, object] = {}
        if fmt == "markdown" and escapes is None:  # YAML front matter is metadata, never a heading or a chunk of "---"
            body, meta = blank_front_matter(text)
            if not body.strip():
                raise InputError(doc, "text", "the source holds only front matter")
        else:
            body = text
        if fmt == "pdf":  # extracted text: every strategy reads it; its structure comes from the extraction
            layout: Layout = PagedLayout(body, headings)
        else:
            layout = self._layout(body, fmt, doc, source_id, escapes)
        if title is None and isinstance(meta.get("title"), str) and str(meta["title"]).strip():
            title = str(meta["title"]).strip()
        if title is None:
            title = getattr(layout, "title", None)
            if fmt != "pdf":  # a PDF's first outline entry is a chapter ("1 Introduction"), not its title
                title = title or next((s.heading_path[0] for s in layout.sections if s.heading_path), None)
            title = title or (PurePath(source_path).stem if source_path else source_id)
        doc_title = str(title)
        version = self.version
        html = fmt == "html"

        def prefix(path: tuple[str, ...]) -> str:
            if not self.contextual:
                return ""
            head = " > ".join(path)
            return f"{doc_title}\n{head}\n\n" if head else f"{doc_title}\n\n"

        # A source without chunkable text (e.g. headings only) yields no chunk; ingestion reports it.
        groups = self._plan(layout, prefix)
        labels = list(page_labels)
        if labels and len(labels) != len(pages):
            raise InputError(doc, "page_labels", f"{len(labels)} labels for {len(pages)} pages")
        labelled = bool(labels)

        def make(kind: str, span: Span, path: tuple[str, ...], parent_id: str | None) -> Chunk:
            header = self._header(layout, *span) if kind == "child" else ""
            if html:  # one clean text: an HTML chunk is its span's visible text, at its offsets in the page's
                start, end, piece = layout.locate(*span)  # type: ignore[attr-defined]
            else:
                start, end = span
                piece = text[start:end]
            ctx: str | None = None
            if kind == "child" and (self.contextual or header):
                ctx = prefix(path) + header + piece
            first, last = page_span(pages, start, end) if pages else (0, 0)
            return Chunk(
                chunk_id=stable_chunk_id(source_id, source_version, version, kind, start, end, tenant_id),
                source_id=source_id,
                source_version=source_version,
                parent_id=parent_id,
                heading_path=path,
                start_offset=start,
                end_offset=end,
                chunker_version=version,
                tenant_id=tenant_id,
                acl=tuple(acl),
                title=doc_title,
                text=piece,
                token_count=self.tokenizer.count(ctx if ctx is not None else piece),
                kind=kind,
                source_path=source_path,
                contextual_text=ctx,
                page_start=first if pages else None,
                page_end=last if pages else None,
                page_label_start=labels[first - 1] if labelled else None,
                page_label_end=labels[last - 1] if labelled else None,
            )

        parents: list[Chunk] = []
        children: list[Chunk] = []
        for g in groups:
            parent_id = None
            if g.parent is not None:
                parent = make("parent", g.parent, g.heading_path, None)
                parents.append(parent)
                parent_id = parent.chunk_id
            children.extend(make("child", span, g.heading_path, parent_id) for span in g.children)
        return parents + children


class FixedTokenChunker(Chunker):
    """Seed 000's baseline: windows of ``L`` model tokens, overlap ``O``, stride ``S = L - O`` over the
    whole source (Markdown or plain text read as text; no structure, no parents).

    Args:
        tokenizer: The embedding model's tokenizer.
        max_tokens: Window length L in tokens.
        overlap: Overlap O in tokens.
        contextual: Embed the title with each window.
    """

    strategy = Strategy.FIXED
    formats = ("markdown", "rst", "plain")

    def _plan(self, layout: Layout, prefix: Callable[[tuple[str, ...]], str]) -> list[_Group]:
        budget = self._budget(prefix(()))
        s, e = trim(layout.text, 0, len(layout.text))
        spans = token_windows(
            layout.text, s, e, self.tokenizer, budget, min(self.overlap, budget - 1), self._fits(layout, budget)
        )
        return [_Group((), None, spans, budget)]


class RecursiveChunker(Chunker):
    """Recursive separators in model tokens with exact spans: blank lines, lines, sentences, words, token
    windows; pieces packed up to ``L`` tokens, each chunk repeating up to ``O`` tokens of the previous
    one's trailing pieces (no structure, no parents).

    Args:
        tokenizer: The embedding model's tokenizer.
        max_tokens: Largest chunk L in tokens.
        overlap: Overlap budget O in tokens.
        contextual: Embed the title with each chunk.
    """

    strategy = Strategy.RECURSIVE
    formats = ("markdown", "rst", "plain")

    @staticmethod
    def _words(text: str, start: int, end: int) -> list[Span]:
        return [(m.start(), m.end()) for m in re.compile(r"\S+").finditer(text, start, end)]

    def _plan(self, layout: Layout, prefix: Callable[[tuple[str, ...]], str]) -> list[_Group]:
        text = layout.text
        budget = self._budget(prefix(()))
        fits = self._fits(layout, budget)
        overlap_budget = min(self.overlap, budget - 1)
        count = self.tokenizer.count
        splitters = (paragraphs_in, lines_in, sentences_in, self._words)

        def split(s: int, e: int, level: int) -> list[Span]:
            if fits(s, e):
                return [(s, e)]
            while level < len(splitters):
                pieces = splitters[level](text, s, e)
                level += 1
                if len(pieces) > 1:
                    return [p for a, b in pieces for p in split(a, b, level)]
            return token_windows(text, s, e, self.tokenizer, budget, overlap_budget, fits)

        s, e = trim(text, 0, len(text))
        pieces = split(s, e, 0)
        spans = pack_with_overlap(pieces, fits, lambda a, b: count(text[a:b]) <= overlap_budget)
        return [_Group((), None, spans, budget)]


class StructureChunker(Chunker):
    """Markdown / HTML / plain-text structure: sections (heading paths) are parents, token-bounded
    children are packed from whole blocks; a block is split only when it alone exceeds the limit, at
    rows / items / lines, then sentences (``。！？`` for Japanese), then token windows with overlap.

    Args:
        tokenizer: The embedding model's tokenizer.
        max_tokens: Largest child, in model tokens.
        overlap: Overlap in tokens when one sentence must be cut into token windows.
        contextual: Embed ``title + heading path`` with each child.
        parents: Emit parent documents (``parent-child`` strategy); False gives ``structure``.
        parent_max_tokens: Cap on a parent's size: a longer section becomes several parents, each a
            run of consecutive children; None keeps whole sections.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        max_tokens: int = 200,
        overlap: int = 30,
        contextual: bool = False,
        parents: bool = True,
        parent_max_tokens: int | None = None,
    ) -> None:
        super().__init__(tokenizer, max_tokens=max_tokens, overlap=overlap, contextual=contextual)
        if parent_max_tokens is not None and parent_max_tokens < max_tokens:
            raise ConfigError(
                f"parent_max_tokens ({parent_max_tokens}) must be >= max_tokens ({max_tokens}): "
                "a parent holds whole children"
            )
        self.parents = parents
        self.parent_max_tokens = parent_max_tokens
        self.strategy = Strategy.PARENT_CHILD if parents else Strategy.STRUCTURE

    def _params(self) -> str:
        cap = f".P{self.parent_max_tokens}" if self.parents and self.parent_max_tokens else ""
        return super()._params() + cap

    def _header(self, layout: Layout, start: int, end: int) -> str:
        return layout.header(start, end)

    def _split(self, layout: Layout, start: int, end: int, budget: int, fits: Callable[[int, int], bool]) -> list[Span]:
        if fits(start, end):
            return [(start, end)]
        parts = layout.parts(start, end)
        if parts and parts != [(start, end)]:
            return [p for s, e in parts for p in self._split(layout, s, e, budget, fits)]
        return token_windows(layout.text, start, end, self.tokenizer, budget, min(self.overlap, budget - 1), fits)

    def _plan(self, layout: Layout, prefix: Callable[[tuple[str, ...]], str]) -> list[_Group]:
        groups: list[_Group] = []
        for section in layout.sections:
            budget = self._budget(prefix(section.heading_path))
            fits = self._fits(layout, budget)
            pieces = [p for s, e in section.blocks for p in self._split(layout, s, e, budget, fits)]
            groups.extend(self._groups(layout, section, pack(pieces, fits), budget))
        return groups

    def _groups(self, layout: Layout, section: Section, children: list[Span], budget: int) -> list[_Group]:
        """The children of one section with their parents: the section, or runs of consecutive children of at
        most ``parent_max_tokens``; no parent when the strategy makes none."""
        if not children:
            return []
        if not self.parents:
            return [_Group(section.heading_path, None, children, budget)]
        if self.parent_max_tokens is None:
            return [_Group(section.heading_path, (section.start, section.end), children, budget)]
        pfits = self._fits(layout, self.parent_max_tokens)
        groups: list[_Group] = []
        run: list[Span] = []
        for child in children:
            if run and not pfits(run[0][0], child[1]):
                groups.append(_Group(section.heading_path, (run[0][0], run[-1][1]), run, budget))
                run = []
            run.append(child)
        groups.append(_Group(section.heading_path, (run[0][0], run[-1][1]), run, budget))
        return groups


_WORD = re.compile(r"\S+")


def _more_words_than(text: str, limit: int) -> bool:
    """Whether ``text`` has more than ``limit`` whitespace-separated words (stops reading at word ``limit + 1``)."""
    for n, _ in enumerate(_WORD.finditer(text), start=1):
        if n > limit:
            return True
    return False
