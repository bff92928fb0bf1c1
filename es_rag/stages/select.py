"""Set selection after reranking: maximal marginal relevance, per-source and per-parent caps.

MMR (seed 002 §12) uses the vectors Elasticsearch (or the embedded store) returned with each hit;
nothing is re-embedded. Lambda presets follow the seed's starting values; tune them on your own
evaluation set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from es_rag.errors import ConfigError
from es_rag.records import Hit
from es_rag.settings import SelectSettings
from es_rag.stages.base import StageOutput

LAMBDA_PRESETS = {"single_fact": 0.8, "multi_source": 0.6, "exploratory": 0.5}
"""Seed 002 §12: single fact 0.7-0.9, multi-source 0.5-0.7, exploratory / summary / multi-hop 0.4-0.6."""


def lambda_for(preset: str) -> float:
    """The MMR lambda of a named preset.

    Args:
        preset: ``single_fact``, ``multi_source`` or ``exploratory``.

    Raises:
        ConfigError: On an unknown preset, naming the valid ones.
    """
    try:
        return LAMBDA_PRESETS[preset]
    except KeyError:
        raise ConfigError(f"mmr preset: invalid value {preset!r}; valid values: {', '.join(LAMBDA_PRESETS)}") from None


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = matrix / norms
    return unit


def mmr(
    query_vector: Sequence[float] | np.ndarray,
    candidate_vectors: Sequence[Sequence[float]] | np.ndarray,
    *,
    lambda_mult: float = 0.5,
    k: int = 4,
    relevance: Sequence[float] | np.ndarray | None = None,
) -> list[int]:
    """Select ``k`` candidates by maximal marginal relevance.

    Each step picks ``argmax lambda * rel(i) - (1 - lambda) * max_{j in selected} cos(i, j)``;
    the first pick is the most relevant candidate. Ties go to the lower index.

    Args:
        query_vector: The query embedding.
        candidate_vectors: One embedding per candidate (rows).
        lambda_mult: 1.0 = pure relevance, 0.0 = pure diversity.
        k: How many candidates to select (fewer if fewer candidates exist).
        relevance: Optional relevance per candidate (e.g. reranker scores) used instead of the
            cosine similarity to the query.

    Returns:
        Indices of the chosen candidates, in selection order.

    Raises:
        ConfigError: On a ``lambda_mult`` outside [0, 1], a negative ``k`` or mismatched shapes.
    """
    if not 0.0 <= lambda_mult <= 1.0:
        raise ConfigError(f"lambda_mult: must be within [0, 1], got {lambda_mult}")
    if k < 0:
        raise ConfigError(f"k: must be >= 0, got {k}")
    candidates = np.asarray(candidate_vectors, dtype=np.float64)
    if candidates.size == 0 or k == 0:
        return []
    if candidates.ndim != 2:
        raise ConfigError(f"candidate_vectors: expected a 2-D array, got shape {candidates.shape}")
    unit = _unit_rows(candidates)
    if relevance is None:
        query = np.asarray(query_vector, dtype=np.float64).reshape(-1)
        if query.shape[0] != candidates.shape[1]:
            raise ConfigError(f"query_vector has {query.shape[0]} dims, candidate_vectors have {candidates.shape[1]}")
        qn = np.linalg.norm(query)
        rel = unit @ (query / qn if qn else query)
    else:
        rel = np.asarray(relevance, dtype=np.float64).reshape(-1)
        if rel.shape[0] != candidates.shape[0]:
            raise ConfigError(f"relevance has {rel.shape[0]} values for {candidates.shape[0]} candidates")
    return _mmr_core(rel, unit, lambda_mult, k)


def _mmr_core(
    rel: np.ndarray,
    unit: np.ndarray,
    lambda_mult: float,
    k: int,
    blocked: Callable[[int, list[int]], str | None] | None = None,
    on_block: Callable[[int, str], None] | None = None,
) -> list[int]:
    """Greedy MMR over unit rows; ``blocked(i, selected)`` may veto a candidate (a cap), which is then
    reported once through ``on_block`` and never reconsidered."""
    n = unit.shape[0]
    similarity = unit @ unit.T
    selected: list[int] = []
    max_sim = np.zeros(n)
    available = np.ones(n, dtype=bool)
    while len(selected) < k and available.any():
        # The first pick is the most relevant candidate whatever lambda is (as documented in mmr()).
        score = lambda_mult * rel - (1.0 - lambda_mult) * max_sim if selected else rel.copy()
        score[~available] = -np.inf
        best = int(np.argmax(score))
        available[best] = False
        reason = blocked(best, selected) if blocked is not None else None
        if reason is not None:
            if on_block is not None:
                on_block(best, reason)
            continue
        max_sim = similarity[best] if not selected else np.maximum(max_sim, similarity[best])
        selected.append(best)
    return selected


def cap_reason(
    hit: Hit, chosen: Sequence[Hit], *, max_per_source: int | None, max_per_parent: int | None
) -> str | None:
    """Why ``hit`` may not join ``chosen`` under the per-source and per-parent caps; None when it may.

    The one definition of the caps: selection applies it in its greedy loop, and the expand stage applies it
    again when it refills slots from the remainder.

    Args:
        hit: The candidate.
        chosen: The hits already chosen.
        max_per_source: Most hits per ``source_id``; None = no cap.
        max_per_parent: Most hits per ``parent_id``; None = no cap.
    """
    if max_per_source is not None and sum(c.source_id == hit.source_id for c in chosen) >= max_per_source:
        return f"per-source cap ({max_per_source}) for {hit.source_id}"
    if (
        max_per_parent is not None
        and hit.parent_id is not None
        and sum(c.parent_id == hit.parent_id for c in chosen) >= max_per_parent
    ):
        return f"per-parent cap ({max_per_parent}) for {hit.parent_id}"
    return None


def remainder(candidates: Sequence[Hit], selected: Sequence[Hit]) -> list[Hit]:
    """The candidates selection did not choose, in rank order: what the expand stage refills empty slots from.

    It holds the hits dropped as ``not selected`` and those dropped by a cap; a cap only tightens as hits are added,
    so :func:`cap_reason` keeps the capped ones out again.

    Args:
        candidates: The select stage's input, best first.
        selected: Its output.
    """
    chosen = {h.chunk_id for h in selected}
    return [h for h in candidates if h.chunk_id not in chosen]


@dataclass
class Selection:
    """Chosen hit indices (selection order) and dropped ``(chunk_id, reason)`` pairs."""

    chosen: list[int]
    dropped: list[tuple[str, str]] = field(default_factory=list)
    method: str = "mmr"


def select_context(
    hits: Sequence[Hit],
    query_vector: Sequence[float] | np.ndarray | None,
    *,
    lambda_mult: float,
    k: int,
    max_per_source: int | None = None,
    max_per_parent: int | None = None,
    relevance: Sequence[float] | np.ndarray | None = None,
) -> Selection:
    """MMR with per-source (document) and per-parent (section) caps applied during the greedy loop.

    A capped candidate is skipped and does not count as selected, so it neither takes a slot nor
    penalises similar candidates. Without a stored vector for every hit, selection falls back to
    relevance order with the same caps (``method == "relevance"``); nothing is re-embedded.

    Args:
        hits: Candidates, best first.
        query_vector: Query embedding (used only when ``relevance`` is None).
        lambda_mult: MMR trade-off, 1.0 = pure relevance.
        k: How many hits to choose (``context_k``).
        max_per_source: Most hits per ``source_id``; None = no cap.
        max_per_parent: Most hits per ``parent_id``; None = no cap.
        relevance: Relevance per hit (e.g. final scores scaled to [0, 1]); None = cosine to the query.
    """
    if not 0.0 <= lambda_mult <= 1.0:
        raise ConfigError(f"lambda_mult: must be within [0, 1], got {lambda_mult}")
    if not hits:
        return Selection(chosen=[])
    dropped: list[tuple[str, str]] = []
    capped: set[int] = set()

    def blocked(i: int, selected: list[int]) -> str | None:
        return cap_reason(
            hits[i], [hits[j] for j in selected], max_per_source=max_per_source, max_per_parent=max_per_parent
        )

    def on_block(i: int, reason: str) -> None:
        capped.add(i)
        dropped.append((hits[i].chunk_id, reason))

    vectors = [h.vector for h in hits]
    if all(v is not None for v in vectors):
        unit = _unit_rows(np.stack([np.asarray(v, dtype=np.float64).reshape(-1) for v in vectors if v is not None]))
        if relevance is None:
            if query_vector is None:
                raise ConfigError("select_context: needs relevance scores or a query vector")
            q = np.asarray(query_vector, dtype=np.float64).reshape(-1)
            qn = np.linalg.norm(q)
            rel = unit @ (q / qn if qn else q)
        else:
            rel = np.asarray(relevance, dtype=np.float64).reshape(-1)
        chosen = _mmr_core(rel, unit, lambda_mult, k, blocked, on_block)
        method = "mmr"
    else:
        chosen = []
        for i in range(len(hits)):
            if len(chosen) >= k:
                break
            reason = blocked(i, chosen)
            if reason is None:
                chosen.append(i)
            else:
                on_block(i, reason)
        method = "relevance"
    seen = set(chosen) | capped
    for i, h in enumerate(hits):
        if i not in seen:
            dropped.append((h.chunk_id, f"not selected (context_k={k})"))
    return Selection(chosen=chosen, dropped=dropped, method=method)


def run(hits: Sequence[Hit], settings: SelectSettings) -> StageOutput:
    """The select stage: MMR over the hits' stored vectors with ``final_score`` (min-max scaled; a missing score
    reads as 0) as relevance, under the per-source and per-parent caps; MMR decides membership, the output keeps
    relevance order. The query vector is not needed: relevance comes from the final scores.

    Args:
        hits: Candidates, best first.
        settings: ``context_k``, lambda and caps.
    """
    if not hits:
        return StageOutput(hits=[])
    rel = np.asarray([h.final_score if h.final_score is not None else 0.0 for h in hits], dtype=np.float64)
    span = rel.max() - rel.min()
    rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
    sel = select_context(
        hits,
        None,
        lambda_mult=settings.mmr_lambda,
        k=settings.context_k,
        max_per_source=settings.max_chunks_per_source,
        max_per_parent=settings.max_chunks_per_parent,
        relevance=rel,
    )
    per_parent = settings.max_chunks_per_parent
    per_source = settings.max_chunks_per_source
    parts = [f"max {per_source}/source" if per_source is not None else "no per-source cap"]
    if per_parent is not None:
        parts.append(f"{per_parent}/parent")
    caps = ", ".join(parts)
    if sel.method == "mmr":
        path = f"mmr(lambda={settings.mmr_lambda}) + {caps}"
    else:
        path = f"relevance order (no stored vectors) + {caps}"
    chosen = sorted(sel.chosen, key=lambda i: (-rel[i], i))
    return StageOutput(
        hits=[hits[i] for i in chosen],
        dropped=sel.dropped,
        info={"mmr_order": [hits[i].chunk_id for i in sel.chosen]},
        path=path,
    )
