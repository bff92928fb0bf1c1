"""The embedded backend's filtered exact kNN (``es_rag.embedded.vectors.filtered_knn``, issue 45): a selective filter
scores only the visible rows, a broad one the whole matrix, and both give what a stable sort of every visible score
gives, top ``k`` and ties included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from es_rag.embedded.topk import top_k
from es_rag.embedded.vectors import GATHER_SHARE, filtered_knn, knn_rows, prepared_knn_scores
from es_rag.settings import Similarity


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=-3, max_value=3), min_size=0, max_size=40),  # few values: many ties
    st.integers(min_value=0, max_value=45),
)
def test_top_k_is_the_stable_sort_cut_to_k(values: list[int], k: int) -> None:
    scores = np.asarray(values, dtype=np.float64)
    assert top_k(scores, k).tolist() == np.argsort(-scores, kind="stable")[:k].tolist()


@pytest.mark.parametrize("similarity", list(Similarity))
@pytest.mark.parametrize("share", [0.01, GATHER_SHARE / 2, GATHER_SHARE, 0.5, 1.0])
def test_both_paths_give_the_stable_top_k_of_the_visible_rows(similarity: Similarity, share: float) -> None:
    rng = np.random.default_rng(int(share * 1000) + len(similarity.value))
    n = 2000
    matrix = rng.normal(size=(n, 8)).astype(np.float32)
    matrix[::7] = matrix[3]  # duplicate rows: tied scores
    if similarity is Similarity.DOT_PRODUCT:
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    rows = knn_rows(matrix, similarity)
    visible = np.flatnonzero(rng.random(n) < share)
    q = rng.normal(size=8).astype(np.float32)
    if similarity is Similarity.DOT_PRODUCT:
        q /= np.linalg.norm(q)
    every = prepared_knn_scores(rows, q, similarity)
    for k in (1, 10, 100, visible.shape[0] + 5):
        got_rows, got_scores = filtered_knn(rows, q, similarity, visible, k)
        ref = visible[np.argsort(-every[visible], kind="stable")][:k]
        np.testing.assert_allclose(got_scores, every[got_rows], rtol=0, atol=1e-6)
        assert np.all(np.diff(got_scores) <= 0)
        # the same rows; where float32 rounding differs between the two products, only within a tie of 1e-6
        swaps = [i for i, (a, r) in enumerate(zip(got_rows, ref, strict=True)) if a != r]
        assert all(abs(every[got_rows[i]] - every[ref[i]]) < 1e-6 for i in swaps)
        assert len(got_rows) == min(k, visible.shape[0])


def test_nothing_visible_finds_nothing() -> None:
    rows = knn_rows(np.eye(4, dtype=np.float32), Similarity.COSINE)
    got_rows, got_scores = filtered_knn(rows, np.ones(4, dtype=np.float32), Similarity.COSINE, np.zeros(0, int), 5)
    assert got_rows.shape == (0,) and got_scores.shape == (0,)
