"""RRF with Elasticsearch's rrf retriever semantics."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from es_rag.errors import ConfigError
from es_rag.stages.fusion import check_window, linear_fusion, normalize_scores, reciprocal_rank_fusion


def ids(items):  # type: ignore[no-untyped-def]
    return [i.id for i in items]


def close(a: float, b: float) -> bool:
    """Equal within float32 precision (Elasticsearch accumulates RRF scores in 32-bit floats)."""
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def test_seed_000_worked_example() -> None:
    # Seed 000: k=60, A is BM25 #1 only, B is BM25 #3 and dense #2, C is dense #1 only.
    out = reciprocal_rank_fusion([["A", "X", "B"], ["C", "B", "Y"]], rank_constant=60, rank_window_size=10)
    assert out[0].id == "B"
    assert close(out[0].score, 1 / 63 + 1 / 62)
    # A and C tie at 1/61: first appearance (A, from the first list) wins without a tiebreak.
    assert ids(out)[1:3] == ["A", "C"]
    assert close(out[1].score, 1 / 61)
    assert out[0].ranks == (3, 2)
    assert out[1].ranks == (1, None)


def test_each_child_is_cut_to_the_window_before_fusion() -> None:
    # "D" is rank 3 in the first list: outside a window of 2 it must contribute nothing.
    out = reciprocal_rank_fusion([["A", "B", "D"], ["D", "C"]], rank_window_size=2)
    scores = {i.id: i.score for i in out}
    assert close(scores["D"], 1 / 61)  # only from list 2
    assert len(out) == 2  # fused result also cut to the window


def test_weights_multiply_and_zero_weight_removes_contribution() -> None:
    out = reciprocal_rank_fusion([["A", "B"], ["B", "A"]], weights=[2.0, 1.0])
    assert ids(out) == ["A", "B"]
    assert close(out[0].score, 2 / 61 + 1 / 62)
    out = reciprocal_rank_fusion([["A", "B"], ["B", "A"]], weights=[0.0, 1.0])
    assert ids(out) == ["B", "A"]


def test_tiebreak_orders_equal_scores_ascending() -> None:
    out = reciprocal_rank_fusion([["z", "y"], ["y", "z"]], tiebreak=lambda d: d)
    assert ids(out) == ["y", "z"]
    out = reciprocal_rank_fusion([["z", "y"], ["y", "z"]])
    assert ids(out) == ["z", "y"]  # first appearance


def _rrf_oracle(lists, k, window, weights=None):  # type: ignore[no-untyped-def]
    """RRF written from the formula alone (exact fractions, no float32): each list cut to the window, score =
    sum of weight / (k + rank), best first, ties by first appearance, the fused list cut to the window."""
    from fractions import Fraction

    weights = weights or [1] * len(lists)
    score: dict[str, Fraction] = {}
    first: dict[str, int] = {}
    for lst, w in zip(lists, weights, strict=True):
        for rank, d in enumerate(lst[:window], start=1):
            score[d] = score.get(d, Fraction(0)) + Fraction(w) / (k + rank)
            first.setdefault(d, len(first))
    return sorted(score, key=lambda d: (-score[d], first[d]))[:window]


def test_paging_is_a_slice_of_the_window() -> None:
    """A page is ``window[from:from + size]`` of the fused window: the window itself must be the formula's, and
    the page beyond it is empty (Elasticsearch never fuses past rank_window_size)."""
    lists = [[f"d{i}" for i in range(20)], [f"d{(7 * i) % 20}" for i in range(20)]]
    window = reciprocal_rank_fusion(lists, rank_window_size=10)
    assert ids(window) == _rrf_oracle(lists, 60, 10)
    assert ids(window[2:4]) == _rrf_oracle(lists, 60, 10)[2:4]
    assert window[10:12] == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.permutations([f"d{i}" for i in range(12)]).map(lambda p: p[:8]), min_size=1, max_size=3),
    st.integers(1, 100),
    st.integers(1, 6),
    st.lists(st.integers(0, 5), min_size=3, max_size=3),
)
def test_weighted_rrf_with_short_windows_matches_the_formula(lists, k, window, weights) -> None:  # type: ignore[no-untyped-def]
    """Random weights and windows shorter than the lists, against exact arithmetic. float32 can merge scores
    the exact sums keep apart, so the check is on scores first, then on the order where exact scores differ."""
    from fractions import Fraction

    ws = weights[: len(lists)]
    out = reciprocal_rank_fusion(lists, rank_constant=k, rank_window_size=window, weights=ws)
    expected = _rrf_oracle(lists, k, window, ws)
    exact = {}
    for lst, w in zip(lists, ws, strict=True):
        for rank, d in enumerate(lst[:window], start=1):
            exact[d] = exact.get(d, Fraction(0)) + Fraction(w) / (k + rank)
    assert len(out) == len(expected)
    for item in out:
        assert math.isclose(item.score, float(exact[item.id]), rel_tol=1e-6, abs_tol=1e-9)
    got = ids(out)
    for a, b in itertools.pairwise(got):  # never a clearly worse id before a better one
        assert float(exact[a]) >= float(exact[b]) - 1e-6
    # the same window, except where the last place is a tie float32 cannot split
    boundary = float(exact[got[-1]])
    assert all(abs(float(exact[d]) - boundary) < 1e-6 for d in set(got) ^ set(expected))


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
    assert all(close(i.score, expected[i.id]) for i in out)
    assert [i.score for i in out] == sorted((i.score for i in out), reverse=True)
    # Nothing left out of the window scores higher than what is in it.
    cut = min(i.score for i in out) if out else 0
    assert all(v <= cut * (1 + 1e-6) for d, v in expected.items() if d not in ids(out))


def test_scores_are_elasticsearch_float32_arithmetic() -> None:
    # Java: value.score += weight * (1.0f / (rankConstant + frank)), every operation in float32.
    out = reciprocal_rank_fusion([["a", "b"], ["b", "a"], ["a"]], rank_constant=60, weights=[0.3, 0.7, 1.0])
    one = np.float32(1.0)
    expected_a = np.float32(0.0)
    for w, r in ((0.3, 1), (0.7, 2), (1.0, 1)):
        expected_a = np.float32(expected_a + np.float32(np.float32(w) * np.float32(one / np.float32(60 + r))))
    assert out[0].id == "a"
    assert out[0].score == float(expected_a)  # bit-identical, not merely close


def test_check_window_mirrors_elasticsearch_validation() -> None:
    check_window(10, 10)
    with pytest.raises(ConfigError, match="greater than or equal to size"):
        check_window(5, 6)
    with pytest.raises(ConfigError, match="rank_window_size"):
        check_window(0, 0)


def test_minmax_normalizer_matches_elasticsearch() -> None:
    assert normalize_scores([4.0, 2.0, 0.0], "minmax") == [1.0, 0.5, 0.0]
    # min == max: Elasticsearch keeps min (it does not map to 1.0)
    assert normalize_scores([3.0, 3.0], "minmax") == [3.0, 3.0]
    assert normalize_scores([3.0, 4.0], "l2_norm") == pytest.approx([0.6, 0.8])
    assert normalize_scores([0.0, 0.0], "l2_norm") == [0.0, 0.0]
    assert normalize_scores([1.0, 2.0, 3.0], "zscore") == pytest.approx([-1.2247449, 0.0, 1.2247449])
    with pytest.raises(ConfigError, match="normalizer"):
        normalize_scores([1.0], "softmax")


def test_linear_fusion_weighted_minmax() -> None:
    bm25 = [("a", 12.0), ("b", 6.0), ("c", 2.0)]
    dense = [("c", 0.9), ("a", 0.8), ("d", 0.7)]
    out = linear_fusion([bm25, dense], weights=[1.0, 2.0], normalizer="minmax", rank_window_size=10)
    got = {i.id: i.score for i in out}
    assert close(got["a"], 1.0 + 2 * 0.5)
    assert close(got["c"], 0.0 + 2 * 1.0)
    assert close(got["b"], 0.4)
    assert close(got["d"], 0.0)
    assert ids(out)[:2] == ["a", "c"]  # tie at 2.0: first appearance
    assert out[0].ranks == (1, 2)
    assert ids(linear_fusion([bm25, dense], rank_window_size=2)) == ["a", "c"]


def _normalized(scores: list[float], normalizer: str) -> list[float]:
    """The normalisers as Elasticsearch defines them (x-pack/plugin/rank-rrf .../linear/MinMaxScoreNormalizer.java:
    ``(s - min) / (max - min)``, the score itself when ``|max - min| < 1e-6``; L2ScoreNormalizer: ``s / sqrt(sum
    s^2)``), and es_rag's zscore (population standard deviation, 0 when it is < 1e-6)."""
    if not scores or normalizer == "none":
        return list(scores)
    if normalizer == "minmax":
        lo, hi = min(scores), max(scores)
        return list(scores) if abs(hi - lo) < 1e-6 else [(x - lo) / (hi - lo) for x in scores]
    if normalizer == "l2_norm":
        norm = math.sqrt(sum(x * x for x in scores))
        return list(scores) if norm < 1e-6 else [x / norm for x in scores]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((x - mean) ** 2 for x in scores) / len(scores))
    return [0.0] * len(scores) if std < 1e-6 else [(x - mean) / std for x in scores]


@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(0, 20), st.floats(0, 50, allow_nan=False)), max_size=15, unique_by=lambda t: t[0]
        ),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from(["none", "minmax", "l2_norm", "zscore"]),
    st.lists(st.floats(0, 5, allow_nan=False), min_size=3, max_size=3),
)
def test_linear_fusion_matches_the_weighted_sum(lists, normalizer, weights) -> None:  # type: ignore[no-untyped-def]
    """Against normalisers written out here from Elasticsearch's definitions (MinMaxScoreNormalizer,
    L2ScoreNormalizer, the zscore of the linear retriever), with random weights: not normalize_scores itself."""
    lists = [sorted(lst, key=lambda t: -t[1]) for lst in lists]
    ws = weights[: len(lists)]
    out = linear_fusion(lists, weights=ws, normalizer=normalizer, rank_window_size=50)
    expected: dict[int, float] = {}
    for lst, w in zip(lists, ws, strict=True):
        for (d, _), v in zip(lst, _normalized([s for _, s in lst], normalizer), strict=True):
            expected[d] = expected.get(d, 0.0) + w * v
    assert {i.id for i in out} == set(expected)
    assert all(math.isclose(i.score, expected[i.id], rel_tol=1e-5, abs_tol=1e-4) for i in out)
    assert [i.score for i in out] == sorted((i.score for i in out), reverse=True)


def test_check_window_boundaries_are_elasticsearchs() -> None:
    """CompoundRetrieverBuilder: rank_window_size >= 1 and >= size; size and from >= 0 (size 0 is a valid search)."""
    check_window(1, 1)
    check_window(1, 0)
    check_window(5, 5, from_=0)
    check_window(5, 0, from_=7)
    for args, kwargs, message in [
        ((0, 0), {}, r"rank_window_size: must be an integer >= 1, got 0"),
        ((5, -1), {}, r"size and from must be >= 0, got size=-1, from=0"),
        ((5, 1), {"from_": -1}, r"size and from must be >= 0, got size=1, from=-1"),
        ((2, 3), {}, r"rank_window_size \(2\) must be greater than or equal to size \(3\), as Elasticsearch requires"),
    ]:
        with pytest.raises(ConfigError, match=message):
            check_window(*args, **kwargs)


def test_an_unknown_normaliser_lists_the_valid_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"normalizer: invalid value 'max'; valid values: none, minmax, l2_norm, zscore$"
    ):
        normalize_scores([1.0], "max")


def test_normalisers_treat_exactly_epsilon_as_a_spread() -> None:
    """Elasticsearch compares ``< 1e-6`` (MinMaxScoreNormalizer, L2ScoreNormalizer): a spread, norm or deviation of
    exactly float32 1e-6 is still normalised."""
    eps = float(np.float32(1e-6))
    assert normalize_scores([eps, 0.0], "minmax") == [1.0, 0.0]
    assert normalize_scores([eps], "l2_norm") == [1.0]
    assert normalize_scores([0.0, 2 * eps], "zscore") == [-1.0, 1.0]


def test_linear_fusion_reads_a_nan_score_as_zero_and_keeps_the_tiebreak() -> None:
    out = linear_fusion([[("a", float("nan")), ("b", 1.0)]], normalizer="none", rank_window_size=5)
    assert {i.id: i.score for i in out} == {"a": 0.0, "b": 1.0}
    tied = [[("x", 1.0), ("y", 1.0)]]
    assert ids(linear_fusion(tied, normalizer="none", rank_window_size=5)) == ["x", "y"]
    assert ids(linear_fusion(tied, normalizer="none", rank_window_size=5, tiebreak=lambda d: d != "y")) == ["y", "x"]
    with pytest.raises(ConfigError, match=r"scored_lists\[0\]: an id appears more than once"):
        linear_fusion([[("x", 1.0), ("x", 0.5)]], rank_window_size=5)


def _hit(cid: str, **scores: float):  # type: ignore[no-untyped-def]
    from es_rag.records import Hit

    fields = dict(source_id="s", source_version="1", parent_id=None, heading_path=(), start_offset=0, end_offset=1)
    return Hit(
        chunk_id=cid, chunker_version="t", tenant_id="t", acl=("public",), title="", text=cid, **fields, **scores
    )


def test_fuse_channels_applies_channel_weights_and_each_channels_own_score() -> None:
    """The stage wrapper, checked against hand arithmetic. RRF (k 60): bm25 [a, b], dense [b, c] with dense weight
    3 -> b = 1/62 + 3/61, c = 3/62, a = 1/61. Linear (no normaliser) reads bm25_score and dense_score: a = 10,
    b = 4 + 2 x 0.5 = 5, c = 2 x 0.9 = 1.8."""
    from es_rag.settings import Settings
    from es_rag.stages.fusion import fuse_channels

    channels = {
        "bm25": [_hit("a", bm25_score=10.0), _hit("b", bm25_score=4.0)],
        "dense": [_hit("b", dense_score=0.5), _hit("c", dense_score=0.9)],
    }
    rrf = fuse_channels(
        channels, Settings(channel_weights={"dense": 3.0}, rank_constant=60, candidate_k=10, rerank_k=10)
    )
    got = {h.chunk_id: h.fused_score for h in rrf}
    assert [h.chunk_id for h in rrf] == ["b", "c", "a"]
    assert close(got["b"], 1 / 62 + 3 / 61) and close(got["c"], 3 / 62) and close(got["a"], 1 / 61)
    b = rrf[0]
    assert (b.bm25_score, b.dense_score, b.ranks) == (4.0, 0.5, {"bm25": 2, "dense": 1})
    assert b.retrieval_sources == ("bm25", "dense") and b.final_score == b.fused_score
    linear = fuse_channels(
        channels,
        Settings(
            fusion_method="linear",
            score_normalizer="none",
            channel_weights={"dense": 2.0},
            candidate_k=10,
            rerank_k=10,
        ),
    )
    assert {h.chunk_id: round(h.fused_score, 4) for h in linear} == {"a": 10.0, "b": 5.0, "c": 1.8}
    assert [h.chunk_id for h in linear] == ["a", "b", "c"]


def test_fuse_channels_passes_rank_constant_window_and_reads_other_channels_final_score() -> None:
    from es_rag.settings import Settings
    from es_rag.stages.fusion import fuse_channels

    channels = {"bm25": [_hit("a", bm25_score=3.0)], "custom": [_hit("b", final_score=2.0), _hit("c")]}
    rrf = fuse_channels(channels, Settings(rank_constant=20, candidate_k=10, rerank_k=10))
    assert close(rrf[0].fused_score, 1 / 21) and close(rrf[-1].fused_score, 1 / 22)
    linear = fuse_channels(
        channels, Settings(fusion_method="linear", score_normalizer="none", candidate_k=2, rerank_k=2, context_k=2)
    )
    # a channel without its own score field is scored by final_score; the window is 2
    assert [(h.chunk_id, h.fused_score) for h in linear] == [("a", 3.0), ("b", 2.0)]
    wide = fuse_channels(
        channels, Settings(fusion_method="linear", score_normalizer="none", candidate_k=3, rerank_k=3, context_k=3)
    )
    assert [(h.chunk_id, h.fused_score) for h in wide] == [("a", 3.0), ("b", 2.0), ("c", 0.0)]  # no score: 0


def test_the_fusion_stage_records_its_path_and_the_fused_list() -> None:
    from es_rag.backend import Retrieval
    from es_rag.settings import Settings
    from es_rag.stages.fusion import run

    hits = [_hit("a", bm25_score=2.0), _hit("b", bm25_score=1.0)]
    client = run(
        Retrieval(channels={"bm25": hits}, fused=None, path="client-rrf"),
        Settings(rank_constant=60, candidate_k=10, rerank_k=10),
    )
    assert client.path == "client-rrf (rank_constant=60, rank_window_size=10)"
    assert client.info == {"fused": [{"id": "a", "rank": 1, "score": client.hits[0].fused_score},
                                     {"id": "b", "rank": 2, "score": client.hits[1].fused_score}]}  # fmt: skip
    linear = run(
        Retrieval(channels={"bm25": hits}, fused=None, path="client-rrf"),
        Settings(fusion_method="linear", score_normalizer="minmax", candidate_k=10, rerank_k=10),
    )
    assert linear.path == "client-linear (normalizer=minmax, rank_window_size=10)"
    native_hits = [h.replace(fused_score=0.5) for h in hits]
    native = run(Retrieval(channels={}, fused=native_hits, path="native-rrf"), Settings())
    assert native.path == "native-rrf (Elasticsearch retriever)" and native.hits == native_hits
    assert native.info["fused"] == [{"id": "a", "rank": 1, "score": 0.5}, {"id": "b", "rank": 2, "score": 0.5}]
