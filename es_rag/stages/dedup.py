"""Cheap, deterministic duplicate removal before reranking (seed 002 §19.1).

Four rules, applied in fused order so the better-ranked copy always survives:

1. the same ``chunk_id`` (the same document returned twice);
2. the same ``content_hash`` (an exact copy indexed under another id);
3. the same text after formatting normalisation (Unicode NFKC, case, whitespace, Markdown emphasis,
   heading and list markers, table pipes): a formatting-only duplicate;
4. heavily overlapping adjacent windows of one source: same ``source_id`` and ``source_version``,
   character spans overlapping by at least ``adjacent_overlap`` of the shorter span.

An optional near-duplicate rule (word 3-shingle Jaccard >= ``near_threshold``) is conservative by
design (seed 002 §19 warns that semantic dedup before the reranker removes needed evidence): it never
merges two versions of one source (conflicting versions are evidence) and is off when the threshold
is None. Semantic diversity is left to MMR after the reranker.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

from es_rag.records import Hit
from es_rag.stages.base import StageOutput

_INLINE_RE = re.compile(r"[*_`~]+")
_BLOCK_RE = re.compile(r"[>#|]+|^\s*(?:[-+]|\d+[.)])\s+", re.MULTILINE)
_SPACE_RE = re.compile(r"\s+")
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)


def normalize_text(text: str) -> str:
    """Text with formatting removed: NFKC, case-folded, Markdown markers dropped, whitespace collapsed.

    Args:
        text: Chunk text.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE_RE.sub(" ", _BLOCK_RE.sub(" ", _INLINE_RE.sub("", folded))).strip()


def normalized_hash(text: str) -> str:
    """SHA-256 of :func:`normalize_text` (hex).

    Args:
        text: Chunk text.
    """
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def shingles(text: str, size: int = 3) -> frozenset[tuple[str, ...]]:
    """Word ``size``-shingles of the normalised text (the whole word list when shorter).

    Args:
        text: Chunk text.
        size: Words per shingle.
    """
    words = _WORD_RE.findall(normalize_text(text))
    if len(words) <= size:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """Jaccard similarity of two shingle sets (0.0 when both are empty).

    Args:
        a: First set.
        b: Second set.
    """
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def span_overlap(a: Hit, b: Hit) -> float:
    """Overlap of two chunks' character spans as a share of the shorter span; 0.0 unless both come
    from the same source and version and carry offsets.

    Args:
        a: First hit.
        b: Second hit.
    """
    if a.source_id != b.source_id or a.source_version != b.source_version:
        return 0.0
    if None in (a.start_offset, a.end_offset, b.start_offset, b.end_offset):
        return 0.0
    assert a.start_offset is not None and a.end_offset is not None
    assert b.start_offset is not None and b.end_offset is not None
    inter = min(a.end_offset, b.end_offset) - max(a.start_offset, b.start_offset)
    shorter = min(a.end_offset - a.start_offset, b.end_offset - b.start_offset)
    return max(inter, 0) / shorter if shorter > 0 else 0.0


def dedup_hits(
    hits: Sequence[Hit], *, adjacent_overlap: float | None = 0.8, near_threshold: float | None = None
) -> StageOutput:
    """Remove duplicates, keeping the first (best fused) copy of each; every dropped hit's reason names the
    copy that was kept.

    Args:
        hits: Fused candidates, best first.
        adjacent_overlap: Drop a chunk whose span overlaps an already kept chunk of the same source
            and version by at least this share of the shorter span; None disables the rule.
        near_threshold: Drop a chunk whose word 3-shingle Jaccard with a kept chunk of another
            source, or of the same source and version, is at least this; None disables the rule.
    """
    kept: list[Hit] = []
    dropped: list[tuple[str, str]] = []
    by_id: set[str] = set()
    by_hash: dict[str, str] = {}
    by_norm: dict[str, str] = {}
    kept_shingles: list[frozenset[tuple[str, ...]]] = []
    for h in hits:
        if h.chunk_id in by_id:
            dropped.append((h.chunk_id, "same chunk_id"))
            continue
        if h.content_hash and h.content_hash in by_hash:
            dropped.append((h.chunk_id, f"same content_hash as {by_hash[h.content_hash]}"))
            continue
        norm = normalized_hash(h.text)
        if norm in by_norm:
            dropped.append((h.chunk_id, f"formatting-only duplicate of {by_norm[norm]}"))
            continue
        reason = None
        if adjacent_overlap is not None:
            for k in kept:
                ov = span_overlap(h, k)
                if ov >= adjacent_overlap:
                    reason = f"overlapping window of {k.chunk_id} ({ov:.2f} of the shorter span)"
                    break
        sh = shingles(h.text) if near_threshold is not None else frozenset()
        if reason is None and near_threshold is not None:
            for k, ksh in zip(kept, kept_shingles, strict=True):
                if k.source_id == h.source_id and k.source_version != h.source_version:
                    continue  # two versions of one source: possible conflict, keep both
                sim = jaccard(sh, ksh)
                if sim >= near_threshold:
                    reason = f"near-duplicate of {k.chunk_id} (shingle jaccard {sim:.2f})"
                    break
        if reason is not None:
            dropped.append((h.chunk_id, reason))
            continue
        by_id.add(h.chunk_id)
        if h.content_hash:
            by_hash[h.content_hash] = h.chunk_id
        by_norm[norm] = h.chunk_id
        kept.append(h)
        kept_shingles.append(sh)
    rules = {
        "chunk_id": True,
        "content_hash": True,
        "formatting": True,
        "adjacent_overlap": adjacent_overlap,
        "near_threshold": near_threshold,
    }
    return StageOutput(hits=kept, dropped=dropped, info={"rules": rules})
