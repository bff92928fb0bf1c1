"""Set selection after reranking: maximal marginal relevance and per-source caps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from es_rag.errors import ConfigError


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
    similarity = unit @ unit.T
    selected: list[int] = []
    max_sim = np.full(candidates.shape[0], -np.inf)
    available = np.ones(candidates.shape[0], dtype=bool)
    for _ in range(min(k, candidates.shape[0])):
        redundancy = np.where(np.isfinite(max_sim), max_sim, 0.0) if selected else np.zeros_like(rel)
        score = lambda_mult * rel - (1.0 - lambda_mult) * redundancy
        score[~available] = -np.inf
        best = int(np.argmax(score))
        selected.append(best)
        available[best] = False
        max_sim = np.maximum(max_sim, similarity[best])
    return selected
