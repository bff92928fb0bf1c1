"""Span helpers shared by every chunking strategy: ids, trimming, sentences, token windows."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from es_rag.encoders.tokenizer import Tokenizer

SENTENCE_RE = re.compile(r".+?(?:[。！？]+[」』）)]*|[.!?]+(?=\s)|$)", re.DOTALL)
"""A sentence: up to Japanese ``。！？`` (with closing brackets), ``.!?`` before whitespace, or the end."""

Span = tuple[int, int]


@dataclass(frozen=True)
class Section:
    """A heading-delimited region of a source: its heading path, span and block spans."""

    heading_path: tuple[str, ...]
    start: int
    end: int
    blocks: tuple[Span, ...]


def stable_chunk_id(
    source_id: str, source_version: str, chunker_version: str, kind: str, start: int, end: int, tenant_id: str = ""
) -> str:
    """Chunk id from lineage and span, never from the text alone (identical boilerplate in two
    sections must not collide; seed 000).

    Args:
        source_id: Source document id.
        source_version: Version of the source.
        chunker_version: Version of the chunking rules.
        kind: ``child`` or ``parent``.
        start: Start offset of the span.
        end: End offset of the span.
        tenant_id: Owner tenant: the same source ingested by two tenants must not share ids (the chunk id
            is the Elasticsearch ``_id``; a shared id would let one tenant's write replace the other's).
    """
    parts = (source_id, source_version, chunker_version, kind, str(start), str(end))
    key = "\x1f".join((tenant_id, *parts) if tenant_id else parts)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def trim(text: str, start: int, end: int) -> Span:
    """Shrink ``[start, end)`` so that it neither starts nor ends with whitespace.

    Args:
        text: The source.
        start: Start offset.
        end: End offset.
    """
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def line_starts(text: str) -> list[int]:
    """Offset of the first character of every line (line 0 starts at 0).

    Args:
        text: The source.
    """
    starts = [0]
    find = text.find
    i = find("\n")
    while i != -1:
        starts.append(i + 1)
        i = find("\n", i + 1)
    return starts


_PARAGRAPH_RE = re.compile(r"\S(?:.*?)(?=\n[ \t]*\n|\Z)", re.DOTALL)


def paragraphs_in(text: str, start: int, end: int) -> list[Span]:
    """Blank-line separated paragraphs of ``text[start:end]``, trimmed.

    Args:
        text: The source.
        start: Start offset.
        end: End offset.
    """
    out = []
    for m in _PARAGRAPH_RE.finditer(text, start, end):
        s, e = trim(text, m.start(), min(m.end(), end))
        if e > s:
            out.append((s, e))
    return out


def lines_in(text: str, start: int, end: int) -> list[Span]:
    """Non-blank lines of ``text[start:end]``, trimmed.

    Args:
        text: The source.
        start: Start offset.
        end: End offset.
    """
    out = []
    for m in re.finditer(r"[^\n]+", text[start:end]):
        s, e = trim(text, m.start() + start, m.end() + start)
        if e > s:
            out.append((s, e))
    return out


def sentences_in(text: str, start: int, end: int) -> list[Span]:
    """Sentences of ``text[start:end]``, trimmed (``。！？`` for Japanese, ``.!?`` + space otherwise).

    Args:
        text: The source.
        start: Start offset.
        end: End offset.
    """
    out = []
    for m in SENTENCE_RE.finditer(text[start:end]):
        s, e = trim(text, m.start() + start, m.end() + start)
        if e > s:
            out.append((s, e))
    return out


def token_windows(
    text: str,
    start: int,
    end: int,
    tokenizer: Tokenizer,
    size: int,
    overlap: int,
    fits: Callable[[int, int], bool],
) -> list[Span]:
    """Windows of ``size`` model tokens with ``overlap`` tokens of overlap (stride ``size - overlap``).

    Each window is a span from its first token's start to its last token's end. Re-tokenising a span
    that begins inside a word can yield more tokens than the window held, so every window is checked
    with ``fits`` and shrunk from the end until it passes.

    Args:
        text: The source.
        start: Start offset.
        end: End offset.
        tokenizer: The embedding model's tokenizer.
        size: Tokens per window (L).
        overlap: Tokens shared by consecutive windows (O); the stride is ``L - O``.
        fits: Whether a span is within the limit.
    """
    spans = [(start + a, start + b) for a, b in tokenizer.token_spans(text[start:end]) if b > a]
    if not spans:
        return []
    out: list[Span] = []
    i = 0
    while i < len(spans):
        j = min(i + size, len(spans))
        while j - i > 1 and not fits(spans[i][0], spans[j - 1][1]):
            j -= 1
        s, e = trim(text, spans[i][0], spans[j - 1][1])
        if e > s and (not out or (s, e) != out[-1]):
            out.append((s, e))
        if j >= len(spans):
            break
        # advance by the stride (next window starts ``overlap`` tokens before ``j``, so a shrunk window
        # skips no token), and by at least one token when the overlap covers the whole window
        i = max(i + 1, j - overlap)
    return out


def pack(spans: Sequence[Span], fits: Callable[[int, int], bool]) -> list[Span]:
    """Greedily merge consecutive spans while the merged span fits.

    Args:
        spans: Ordered, non-overlapping spans.
        fits: Whether a span is within the limit.
    """
    out: list[Span] = []
    cur: Span | None = None
    for s, e in spans:
        if cur is None:
            cur = (s, e)
        elif s >= cur[1] and fits(cur[0], e):
            cur = (cur[0], e)
        else:
            out.append(cur)
            cur = (s, e)
    if cur is not None:
        out.append(cur)
    return out


def pack_with_overlap(
    spans: Sequence[Span], fits: Callable[[int, int], bool], overlap_fits: Callable[[int, int], bool]
) -> list[Span]:
    """Merge consecutive pieces into chunks; each chunk after the first starts with the trailing pieces of
    the previous chunk that together fit ``overlap_fits`` (LangChain's recursive splitter semantics, in
    model tokens and exact spans).

    Args:
        spans: Ordered, non-overlapping pieces, each fitting on its own.
        fits: Whether a chunk span is within the limit.
        overlap_fits: Whether a span is within the overlap budget.
    """
    out: list[Span] = []
    i, n = 0, len(spans)
    while i < n:
        j = i
        while j + 1 < n and fits(spans[i][0], spans[j + 1][1]):
            j += 1
        out.append((spans[i][0], spans[j][1]))
        if j + 1 >= n:
            break
        k = j + 1
        while k - 1 > i and overlap_fits(spans[k - 1][0], spans[j][1]) and fits(spans[k - 1][0], spans[j + 1][1]):
            k -= 1
        i = k
    return out
