"""Exact kNN of the embedded backend: the stored vectors prepared once per index state, the scores of one query
against them (Lucene's similarity functions, in float32), and what a vector a similarity refuses looks like."""

from __future__ import annotations

import numpy as np

from es_rag.embedded.topk import top_k
from es_rag.settings import Similarity

COSINE_UNIT_EPS = 1e-3
"""``DenseVectorFieldMapper.isNotUnitVector`` (``EPS = 1e-3f``): a cosine vector whose squared length is within this
of 1 is indexed as it is and scored by dot product; any other is normalised first (and a query vector likewise)."""


def _needs_normalising(squared: np.ndarray) -> np.ndarray:
    """Which squared lengths Elasticsearch normalises under cosine (never a zero vector, which it refuses)."""
    return (np.abs(squared - 1.0) > COSINE_UNIT_EPS) & (squared > 0.0)


def knn_rows(matrix: np.ndarray, similarity: Similarity, *, in_place: bool = False) -> np.ndarray:
    """The stored vectors as :func:`prepared_knn_scores` reads them, built once per index state (at the refresh after
    a write, never per query): for cosine, as Elasticsearch indexes them, every row whose squared length is not
    within :data:`COSINE_UNIT_EPS` of 1 divided by its norm and the others as they are; else the float32 vectors as
    they are.

    Args:
        matrix: Stored vectors (float32), one per row.
        similarity: The mapping's similarity.
        in_place: Normalise ``matrix`` itself (a float32 matrix the caller owns) rather than a copy.
    """
    if similarity is not Similarity.COSINE:
        return matrix
    out = matrix if in_place and matrix.dtype == np.float32 else np.empty_like(matrix, dtype=np.float32)
    step = 4096  # bounded temporaries: einsum's float64 copy of one block at a time (6 MB at 384 dims)
    for start in range(0, matrix.shape[0], step):
        block = matrix[start : start + step]
        squared = np.einsum("ij,ij->i", block, block, dtype=np.float64)
        norms = np.where(_needs_normalising(squared), np.sqrt(squared), 1.0)
        out[start : start + step] = block / norms[:, None]
    return out


def prepared_knn_scores(rows: np.ndarray, query: np.ndarray, similarity: Similarity) -> np.ndarray:
    """:func:`knn_scores` over rows prepared by :func:`knn_rows`, without copying them: one float32 matrix-vector
    product per query (cosine: against the unit query). The scores equal :func:`knn_scores` within float32 rounding
    (``tests/unit/test_embedded_backend.py`` checks 1e-6 and the same ranking), as Lucene also scores float vectors
    in float32.

    Args:
        rows: :func:`knn_rows` of the stored vectors.
        query: Query vector.
        similarity: The mapping's similarity.
    """
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    if similarity is Similarity.COSINE:  # indexed as dot_product over the rows knn_rows prepared
        squared = float(np.dot(q.astype(np.float64), q.astype(np.float64)))
        unit = (
            (q.astype(np.float64) / np.sqrt(squared)).astype(np.float32) if _needs_normalising(np.array(squared)) else q
        )
        return np.maximum(0.0, (1.0 + (rows @ unit).astype(np.float64)) / 2.0)
    if similarity is Similarity.L2_NORM:
        return knn_scores(rows, q, similarity)
    dots = (rows @ q).astype(np.float64)
    if similarity is Similarity.DOT_PRODUCT:
        return np.maximum(0.0, (1.0 + dots) / 2.0)
    return np.where(dots < 0, 1.0 / (1.0 - np.minimum(dots, 0.0)), dots + 1.0)


def knn_scores(matrix: np.ndarray, query: np.ndarray, similarity: Similarity) -> np.ndarray:
    """The kNN ``_score`` of every row for ``query``, as ``DenseVectorFieldMapper.VectorSimilarity`` and Lucene's
    ``VectorSimilarityFunction`` compute it for float vectors: cosine ``(1 + cos) / 2``, dot_product
    ``max(0, (1 + dot) / 2)``, l2_norm ``1 / (1 + d^2)``, max_inner_product ``dot < 0 ? 1 / (1 - dot) : dot + 1``.

    Args:
        matrix: Stored vectors, one per row.
        query: Query vector.
        similarity: The mapping's similarity.
    """
    m = matrix.astype(np.float64)
    q = query.astype(np.float64)
    dots = m @ q
    scores: np.ndarray
    if similarity is Similarity.COSINE:  # Elasticsearch normalises only a vector that is not unit within 1e-3
        row_sq = np.einsum("ij,ij->i", m, m)
        row_norms = np.where(_needs_normalising(row_sq), np.sqrt(row_sq), 1.0)
        q_sq = float(q @ q)
        q_norm = float(np.sqrt(q_sq)) if _needs_normalising(np.array(q_sq)) else 1.0
        scores = np.maximum(0.0, (1.0 + dots / (row_norms * q_norm)) / 2.0)
    elif similarity is Similarity.DOT_PRODUCT:
        scores = np.maximum(0.0, (1.0 + dots) / 2.0)
    elif similarity is Similarity.L2_NORM:
        scores = 1.0 / (1.0 + np.sum((m - q) ** 2, axis=1))
    else:
        scores = np.where(dots < 0, 1.0 / (1.0 - np.minimum(dots, 0.0)), dots + 1.0)
    return scores


def vector_refusal(vector: np.ndarray, similarity: Similarity) -> str | None:
    """Why Elasticsearch refuses to index ``vector`` under ``similarity`` (``DenseVectorFieldMapper``'s index-time
    checks), or None: cosine refuses a zero vector, dot_product a vector whose squared length is not 1 (within 1e-3).

    Args:
        vector: The document vector.
        similarity: The mapping's similarity.
    """
    sq = float(np.dot(vector.astype(np.float64), vector.astype(np.float64)))
    if similarity is Similarity.COSINE and sq == 0.0:
        return "The [cosine] similarity does not support vectors with zero magnitude."
    if similarity is Similarity.DOT_PRODUCT and abs(sq - 1.0) >= 1e-3:
        return "The [dot_product] similarity can only be used with unit-length vectors (use cosine, or normalise)."
    return None


def unit_rows(matrix: np.ndarray) -> bool:
    """Whether cosine reads every row as stored: each squared length within :data:`COSINE_UNIT_EPS` of 1 (or zero),
    as :func:`knn_rows` leaves such rows.

    Args:
        matrix: float32 rows.
    """
    step = 4096  # bounded temporaries, as knn_rows
    for start in range(0, matrix.shape[0], step):
        block = matrix[start : start + step]
        if np.any(_needs_normalising(np.einsum("ij,ij->i", block, block, dtype=np.float64))):
            return False
    return True


GATHER_SHARE = 0.125
"""Below this share of visible rows, :func:`filtered_knn` copies the visible rows and scores only them (a filtered
exact search, as Lucene's exact search under a filter reads only the filter's documents); at or above it, one product
over the whole matrix is cheaper than the copy (``benchmarks/filtered_knn_bench.py`` measures where they cross)."""


def filtered_knn(
    rows: np.ndarray, query: np.ndarray, similarity: Similarity, visible: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The exact top ``k`` of the ``visible`` rows: their row numbers, best first (ties by row number), and their
    :func:`prepared_knn_scores`. A selective filter (fewer than :data:`GATHER_SHARE` of the rows) scores only the
    visible rows; a broad one scores the whole matrix once and reads the visible scores.

    Args:
        rows: :func:`knn_rows` of the stored vectors.
        query: Query vector.
        similarity: The mapping's similarity.
        visible: Ascending row numbers the filter lets through.
        k: Number of hits.
    """
    if visible.shape[0] < GATHER_SHARE * rows.shape[0]:
        scores = prepared_knn_scores(np.take(rows, visible, axis=0), query, similarity)
    else:
        scores = prepared_knn_scores(rows, query, similarity)[visible]
    best = top_k(scores, k)
    return visible[best], scores[best]
