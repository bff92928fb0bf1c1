"""Structure-aware chunking with exact lineage.

A source becomes *sections* (one per Markdown heading, or one for plain text); each section is a
parent (generation unit) and is cut into children (retrieval units) of at most ``max_tokens``
embedding-model tokens. Children are packed from whole blocks (paragraphs, lists, tables, code
fences); a block larger than the limit is split at line boundaries, then at sentence boundaries
(``。！？`` for Japanese, ``.!?`` + space otherwise), and only a single over-long sentence falls
back to token windows with ``overlap`` tokens of overlap. Every chunk satisfies
``source_text[start_offset:end_offset] == text``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from markdown_it import MarkdownIt

from es_rag.errors import ConfigError, InputError
from es_rag.models import Chunk
from es_rag.tokenization import Tokenizer

CHUNKER_VERSION = "md-struct-1"

_SENTENCE_RE = re.compile(r".+?(?:[。！？]+|[.!?]+(?=\s)|$)", re.DOTALL)


@dataclass(frozen=True)
class Section:
    """A heading-delimited region of a source: its heading path, span and block spans."""

    heading_path: tuple[str, ...]
    start: int
    end: int
    blocks: tuple[tuple[int, int], ...]


def stable_chunk_id(source_id: str, source_version: str, chunker_version: str, kind: str, start: int, end: int) -> str:
    """Chunk id from lineage and span, never from the text alone (identical boilerplate in two
    sections must not collide; seed 000).

    Args:
        source_id: Source document id.
        source_version: Version of the source.
        chunker_version: Version of the chunking rules.
        kind: ``child`` or ``parent``.
        start: Start offset of the span.
        end: End offset of the span.
    """
    key = "\x1f".join((source_id, source_version, chunker_version, kind, str(start), str(end)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def parse_markdown(text: str) -> list[Section]:
    """Split Markdown into heading sections with block spans (markdown-it-py, CommonMark + tables).

    Args:
        text: Markdown source.
    """
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(text)
    starts = _line_starts(text)

    def offset(line: int) -> int:
        return starts[line] if line < len(starts) else len(text)

    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    cur_path: tuple[str, ...] = ()
    cur_start = 0
    cur_blocks: list[tuple[int, int]] = []
    has_body = False

    def close(end: int) -> None:
        # A section made of a heading only carries no evidence of its own: it is dropped, and its
        # heading still reaches the subsections through their heading_path.
        spans = [b for b in cur_blocks if b[1] > b[0]]
        if spans and has_body:
            s, e = _trim(text, cur_start, end)
            sections.append(Section(cur_path, s, e, tuple(spans)))

    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.map is None or tok.type.endswith("_close"):
            i += 1
            continue
        span = _trim(text, offset(tok.map[0]), offset(tok.map[1]))
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
        i += 1
    close(len(text))
    return sections


def parse_plain(text: str) -> list[Section]:
    """One section whose blocks are blank-line separated paragraphs.

    Args:
        text: Plain text source.
    """
    blocks = []
    for match in re.finditer(r"\S(?:.*?)(?=\n[ \t]*\n|\Z)", text, re.DOTALL):
        s, e = _trim(text, match.start(), match.end())
        if e > s:
            blocks.append((s, e))
    if not blocks:
        return []
    return [Section((), blocks[0][0], blocks[-1][1], tuple(blocks))]


class StructureChunker:
    """Markdown / plain-text chunker producing parents (sections) and token-bounded children.

    Args:
        tokenizer: The embedding model's tokenizer.
        max_tokens: Largest child, in model tokens.
        overlap: Overlap in tokens when one sentence must be cut into token windows.
    """

    version = CHUNKER_VERSION

    def __init__(self, tokenizer: Tokenizer, *, max_tokens: int = 200, overlap: int = 30) -> None:
        if max_tokens < 8:
            raise ConfigError(f"max_tokens: must be >= 8, got {max_tokens}")
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

    # -- splitting -----------------------------------------------------------------------------
    def _fits(self, text: str, start: int, end: int) -> bool:
        return self.tokenizer.count(text[start:end]) <= self.max_tokens

    def _split_block(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        if self._fits(text, start, end):
            return [(start, end)]
        pieces: list[tuple[int, int]] = []
        # 1) lines (table rows, list items, code lines stay whole)
        lines = [(m.start() + start, m.end() + start) for m in re.finditer(r"[^\n]+", text[start:end])]
        if len(lines) > 1:
            for s, e in lines:
                pieces.extend(self._split_block(text, s, e))
            return pieces
        # 2) sentences
        sentences = [
            _trim(text, m.start() + start, m.end() + start)
            for m in _SENTENCE_RE.finditer(text[start:end])
            if m.group().strip()
        ]
        sentences = [(s, e) for s, e in sentences if e > s]
        if len(sentences) > 1:
            for s, e in sentences:
                pieces.extend(self._split_block(text, s, e))
            return pieces
        # 3) token windows with overlap (a single sentence longer than the limit)
        spans = self.tokenizer.token_spans(text[start:end])
        stride = self.max_tokens - self.overlap
        i = 0
        while i < len(spans):
            window = spans[i : i + self.max_tokens]
            pieces.append((start + window[0][0], start + window[-1][1]))
            if i + self.max_tokens >= len(spans):
                break
            i += stride
        return pieces

    def _pack(self, text: str, pieces: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        children: list[tuple[int, int]] = []
        cur: tuple[int, int] | None = None
        for s, e in pieces:
            if cur is None:
                cur = (s, e)
            elif s >= cur[1] and self._fits(text, cur[0], e):
                cur = (cur[0], e)
            else:
                children.append(cur)
                cur = (s, e)
        if cur is not None:
            children.append(cur)
        return children

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
    ) -> list[Chunk]:
        """Chunk one source into parents followed by their children.

        Args:
            text: The whole source, decoded.
            source_id: Stable id of the source.
            source_version: Version of the source.
            tenant_id: Owner tenant (required).
            acl: Groups allowed to read it.
            title: Document title; defaults to the first heading or the file name.
            source_path: The file as given, for reports.
            fmt: ``markdown`` or ``plain``.

        Raises:
            InputError: Missing tenant or source id, or a source without any text.
        """
        doc = source_path or source_id or "<unnamed>"
        if not source_id or not str(source_id).strip():
            raise InputError(doc, "source_id", "missing or empty")
        if not tenant_id or not str(tenant_id).strip():
            raise InputError(doc, "tenant_id", "missing or empty: every chunk needs a tenant")
        if not text.strip():
            raise InputError(doc, "text", "the source contains no text")
        if fmt not in ("markdown", "plain"):
            raise ConfigError(f"fmt: invalid value {fmt!r}; valid values: markdown, plain")
        sections = parse_markdown(text) if fmt == "markdown" else parse_plain(text)
        if title is None:
            title = next((s.heading_path[0] for s in sections if s.heading_path), None)
            title = title or (PurePath(source_path).stem if source_path else source_id)

        def make(kind: str, start: int, end: int, heading_path: tuple[str, ...], parent_id: str | None) -> Chunk:
            piece = text[start:end]
            return Chunk(
                chunk_id=stable_chunk_id(source_id, source_version, self.version, kind, start, end),
                source_id=source_id,
                source_version=source_version,
                parent_id=parent_id,
                heading_path=heading_path,
                start_offset=start,
                end_offset=end,
                chunker_version=self.version,
                tenant_id=tenant_id,
                acl=tuple(acl),
                title=str(title),
                text=piece,
                token_count=self.tokenizer.count(piece),
                kind=kind,
                source_path=source_path,
            )

        parents: list[Chunk] = []
        children: list[Chunk] = []
        for section in sections:
            parent = make("parent", section.start, section.end, section.heading_path, None)
            parents.append(parent)
            pieces = [p for s, e in section.blocks for p in self._split_block(text, s, e)]
            for s, e in self._pack(text, pieces):
                children.append(make("child", s, e, section.heading_path, parent.chunk_id))
        return parents + children
