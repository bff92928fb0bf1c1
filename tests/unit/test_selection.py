"""MMR with exact expected orders on hand-made vectors."""

from __future__ import annotations

import numpy as np
import pytest

from es_rag.errors import ConfigError
from es_rag.stages.select import mmr


def test_pure_relevance_is_cosine_order() -> None:
    q = [1.0, 0.0]
    cands = [[0.0, 1.0], [1.0, 0.1], [1.0, 1.0], [1.0, 0.0]]
    assert mmr(q, cands, lambda_mult=1.0, k=4) == [3, 1, 2, 0]


def test_diversity_skips_the_near_duplicate() -> None:
    q = [1.0, 0.0, 0.0]
    a = [1.0, 0.05, 0.0]
    a_dup = [1.0, 0.06, 0.0]
    b = [0.7, 0.0, 0.7]
    # lambda 0.5: after a, a_dup is almost identical (redundancy ~1) while b is different.
    assert mmr(q, [a, a_dup, b], lambda_mult=0.5, k=2) == [0, 2]
    assert mmr(q, [a, a_dup, b], lambda_mult=1.0, k=2) == [0, 1]


def test_relevance_scores_replace_query_similarity() -> None:
    q = [1.0, 0.0]
    cands = [[1.0, 0.0], [0.0, 1.0]]
    assert mmr(q, cands, lambda_mult=1.0, k=1, relevance=[0.1, 0.9]) == [1]


def test_k_larger_than_candidates_and_empty() -> None:
    assert mmr([1.0, 0.0], [[1.0, 0.0]], k=5) == [0]
    assert mmr([1.0, 0.0], np.zeros((0, 2)), k=3) == []
    assert mmr([1.0, 0.0], [[1.0, 0.0]], k=0) == []


def test_ties_go_to_lower_index() -> None:
    assert mmr([1.0, 0.0], [[1.0, 0.0], [1.0, 0.0]], lambda_mult=1.0, k=2) == [0, 1]


@pytest.mark.parametrize(
    ("kwargs", "msg"), [({"lambda_mult": 1.5}, "lambda_mult"), ({"k": -1}, "k"), ({"relevance": [1.0]}, "relevance")]
)
def test_invalid_arguments(kwargs, msg) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=msg):
        mmr([1.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], **kwargs)


def test_dimension_mismatch() -> None:
    with pytest.raises(ConfigError, match="dims"):
        mmr([1.0, 0.0, 0.0], [[1.0, 0.0]])


def test_mmr_penalises_similarity_to_every_pick_not_just_the_first() -> None:
    """A hand-computed case with k = 3 (lambda 0.5, cosine): picks c0 (relevance 0.7071, tie with c1 broken by
    index), then c1 (0.5 x 0.7071 - 0.5 x 0 = 0.354 beats c2's 0.350 and c3's 0.318 - 0.300). Third: c2 is
    0.990-similar to c1, so 0.350 - 0.495 < 0; c3 scores 0.318 - 0.5 x max(0.6, 0.3) = 0.018 and wins. Penalising
    only the similarity to the first pick would take c2 (0.350)."""
    q = [1.0, 1.0, 0.0]
    cands = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.99, 0.14], [0.6, 0.3, 0.742]]
    assert mmr(q, cands, lambda_mult=0.5, k=3) == [0, 1, 3]
