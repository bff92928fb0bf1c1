"""Exact kNN of the embedded backend: the stored vectors prepared once per index state, the scores of one query
against them (Lucene's similarity functions, in float32), and what a vector a similarity refuses looks like."""

from __future__ import annotations

import numpy as np

from es_rag.settings import Similarity


def knn_rows(matrix: np.ndarray, similarity: Similarity, *, in_place: bool = False) -> np.ndarray:
    """The stored vectors as :func:`prepared_knn_scores` reads them, built once per index state (at the refresh after
    a write, never per query): for cosine every row divided by its norm (a zero row stays zero), else the float32
    vectors as they are.

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
        norms = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
        norms[norms == 0] = 1.0
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
    if similarity is Similarity.COSINE:
        norm = float(np.linalg.norm(q.astype(np.float64)))
        unit = (q.astype(np.float64) / norm).astype(np.float32) if norm else q
        return (1.0 + (rows @ unit).astype(np.float64)) / 2.0
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
    if similarity is Similarity.COSINE:
        norms = np.linalg.norm(m, axis=1) * (np.linalg.norm(q) or 1.0)
        norms[norms == 0] = 1.0
        scores = (1.0 + dots / norms) / 2.0
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


UNIT_TOLERANCE = 1e-6
"""How far from 1 a row's norm may be for :func:`unit_rows` (float32 normalisation leaves about 1e-7)."""


def unit_rows(matrix: np.ndarray) -> bool:
    """Whether every row has unit length within :data:`UNIT_TOLERANCE` (then cosine reads the rows as stored).

    Args:
        matrix: float32 rows.
    """
    step = 4096  # bounded temporaries, as knn_rows
    for start in range(0, matrix.shape[0], step):
        block = matrix[start : start + step]
        norms = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
        if norms.size and float(np.max(np.abs(norms - 1.0))) > UNIT_TOLERANCE:
            return False
    return True
