"""RRF with Elasticsearch's rrf retriever semantics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from es_rag.errors import ConfigError
from es_rag.fusion import reciprocal_rank_fusion


def ids(items):  # type: ignore[no-untyped-def]
    return [i.id for i in items]


def test_seed_000_worked_example() -> None:
    # Seed 000: k=60, A is BM25 #1 only, B is BM25 #3 and dense #2, C is dense #1 only.
    out = reciprocal_rank_fusion([["A", "X", "B"], ["C", "B", "Y"]], rank_constant=60, rank_window_size=10)
    assert out[0].id == "B"
    assert math.isclose(out[0].score, 1 / 63 + 1 / 62)
    # A and C tie at 1/61: first appearance (A, from the first list) wins without a tiebreak.
    assert ids(out)[1:3] == ["A", "C"]
    assert math.isclose(out[1].score, 1 / 61)
    assert out[0].ranks == (3, 2)
    assert out[1].ranks == (1, None)


def test_each_child_is_cut_to_the_window_before_fusion() -> None:
    # "D" is rank 3 in the first list: outside a window of 2 it must contribute nothing.
    out = reciprocal_rank_fusion([["A", "B", "D"], ["D", "C"]], rank_window_size=2)
    scores = {i.id: i.score for i in out}
    assert math.isclose(scores["D"], 1 / 61)  # only from list 2
    assert len(out) == 2  # fused result also cut to the window


def test_weights_multiply_and_zero_weight_removes_contribution() -> None:
    out = reciprocal_rank_fusion([["A", "B"], ["B", "A"]], weights=[2.0, 1.0])
    assert ids(out) == ["A", "B"]
    assert math.isclose(out[0].score, 2 / 61 + 1 / 62)
    out = reciprocal_rank_fusion([["A", "B"], ["B", "A"]], weights=[0.0, 1.0])
    assert ids(out) == ["B", "A"]


def test_tiebreak_orders_equal_scores_ascending() -> None:
    out = reciprocal_rank_fusion([["z", "y"], ["y", "z"]], tiebreak=lambda d: d)
    assert ids(out) == ["y", "z"]
    out = reciprocal_rank_fusion([["z", "y"], ["y", "z"]])
    assert ids(out) == ["z", "y"]  # first appearance


def test_paging_is_a_slice_of_the_window() -> None:
    lists = [[f"d{i}" for i in range(20)], [f"d{i}" for i in range(19, -1, -1)]]
    window = reciprocal_rank_fusion(lists, rank_window_size=10)
    assert len(window) == 10
    assert ids(window[2:4]) == ids(reciprocal_rank_fusion(lists, rank_window_size=10))[2:4]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank_constant": 0}, "rank_constant"),
        ({"rank_window_size": 0}, "rank_window_size"),
        ({"weights": [1.0]}, "weights"),
        ({"weights": [1.0, -1.0]}, "weights"),
    ],
)
def test_invalid_parameters_name_the_parameter(kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=message):
        reciprocal_rank_fusion([["a"], ["b"]], **kwargs)


def test_duplicate_id_inside_one_list_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"ranked_lists\[1\]"):
        reciprocal_rank_fusion([["a"], ["b", "b"]])


def test_empty_input() -> None:
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


@given(
    st.lists(st.lists(st.integers(0, 30), unique=True, max_size=25), min_size=1, max_size=4),
    st.integers(1, 100),
    st.integers(1, 30),
)
def test_matches_the_formula(lists, k, window) -> None:  # type: ignore[no-untyped-def]
    out = reciprocal_rank_fusion(lists, rank_constant=k, rank_window_size=window)
    expected: dict[int, float] = {}
    for lst in lists:
        for r, d in enumerate(lst[:window], start=1):
            expected[d] = expected.get(d, 0.0) + 1 / (k + r)
    assert len(out) == min(window, len(expected))
    assert all(math.isclose(i.score, expected[i.id]) for i in out)
    assert [i.score for i in out] == sorted((i.score for i in out), reverse=True)
    # Nothing left out of the window scores higher than what is in it.
    cut = min(i.score for i in out) if out else 0
    assert all(v <= cut + 1e-12 for d, v in expected.items() if d not in ids(out))
