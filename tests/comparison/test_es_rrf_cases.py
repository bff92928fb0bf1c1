"""Held-out check: :func:`es_rag.stages.fusion.reciprocal_rank_fusion` reproduces Elasticsearch's own rrf tests.

Each case below is transcribed from the YAML REST tests of ``x-pack/plugin/rank-rrf`` in
``elastic/elasticsearch`` (``350_rrf_retriever_pagination.yml``, ``320_rrf_weighted_retriever.yml``):
the child result lists are the ones the tests' own comments state (or that their single-shard term
queries with descending boosts produce), the expectation is the test's ``match``/``length``/``close_to``
assertions. Documents are indexed in id order on one shard, so Lucene's doc id order is the numeric id
order: that is the tiebreak Elasticsearch applies to equal scores, and the one these cases pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from es_rag.stages.fusion import check_window, reciprocal_rank_fusion


@dataclass(frozen=True)
class EsCase:
    source: str
    lists: tuple[tuple[str, ...], ...]
    rank_window_size: int
    rank_constant: int
    from_: int
    size: int
    expected_ids: tuple[str, ...]
    weights: tuple[float, ...] | None = None
    expected_scores: tuple[float, ...] | None = None


_PAGE = "350_rrf_retriever_pagination.yml"
_SAME = (("1", "2", "3", "4"), ("1", "2", "3", "4"))
_INTERLEAVED = (("1", "2", "3", "4"), ("4", "3", "1", "2"))
_SIZES = (("5", "1"), ("4", "3", "1", "2"))
_W = "320_rrf_weighted_retriever.yml"

CASES = [
    EsCase(f"{_PAGE}: pagination within rank_window_size", _SAME, 10, 10, 1, 10, ("2", "3", "4")),
    EsCase(f"{_PAGE}: pagination outside rank_window_size", _SAME, 2, 10, 10, 2, ()),
    EsCase(f"{_PAGE}: pagination partially outside rank_window_size", _SAME, 3, 10, 2, 2, ("3",)),
    EsCase(f"{_PAGE}: interleaved, from 0", _INTERLEAVED, 10, 10, 0, 2, ("1", "4")),
    EsCase(f"{_PAGE}: interleaved, from 2", _INTERLEAVED, 10, 10, 2, 2, ("3", "2")),
    EsCase(f"{_PAGE}: different sizes, window covers all, from 0", _SIZES, 10, 10, 0, 2, ("1", "4")),
    EsCase(f"{_PAGE}: different sizes, window covers all, from 2", _SIZES, 10, 10, 2, 2, ("5", "3")),
    EsCase(f"{_PAGE}: different sizes, window covers all, from 4", _SIZES, 10, 10, 4, 2, ("2",)),
    EsCase(f"{_PAGE}: window not covering all, from 0 (tie 4/5 by doc id)", _SIZES, 2, 10, 0, 2, ("4", "5")),
    EsCase(f"{_PAGE}: window not covering all, from 2", _SIZES, 2, 10, 2, 2, ()),
    # restaurants: 1 Pizza Palace, 2 Burger House, 3 Sushi World, all region "Austria"
    EsCase(
        f"{_W}: weighted rrf returns correct results",
        (("1", "2", "3"), ("1",)),
        10,
        60,
        0,
        10,
        ("1", "2", "3"),
        weights=(0.3, 0.7),
        # the YAML asserts hits.0 only; the rest by hand: 0.3/61 + 0.7/61, 0.3/62, 0.3/63
        expected_scores=(1 / 61, 0.3 / 62, 0.3 / 63),
    ),
    EsCase(
        f"{_W}: optional weight field (first child weight 1.0)",
        (("1", "2", "3"), ("1",)),
        10,
        60,
        0,
        10,
        ("1", "2", "3"),
        weights=(1.0, 0.7),
        # the YAML asserts hits.0 only; the rest by hand: 1/61 + 0.7/61, 1/62, 1/63
        expected_scores=(1.7 / 61, 1 / 62, 1 / 63),
    ),
    EsCase(
        f"{_W}: weights change result order",
        (("1",), ("2",)),
        10,
        60,
        0,
        10,
        ("2", "1"),
        weights=(0.1, 0.9),
        expected_scores=(0.01475, 0.00164),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.source)
def test_client_rrf_reproduces_elasticsearch_rrf_tests(case: EsCase) -> None:
    check_window(case.rank_window_size, min(case.size, case.rank_window_size))
    window = reciprocal_rank_fusion(
        [list(lst) for lst in case.lists],
        rank_constant=case.rank_constant,
        rank_window_size=case.rank_window_size,
        weights=case.weights,
        tiebreak=int,  # Lucene doc id order == indexing order == numeric id here
    )
    page = window[case.from_ : case.from_ + case.size]
    assert tuple(i.id for i in page) == case.expected_ids
    if case.expected_scores is not None:
        for item, score in zip(page, case.expected_scores, strict=True):
            assert item.score == pytest.approx(score, abs=1e-4)  # the YAML's close_to error


def test_case_count() -> None:
    # reported in docs/retrieval.md; keep in sync
    assert len(CASES) == 13


def test_size_above_window_is_refused_like_elasticsearch() -> None:
    # CompoundRetrieverBuilder.validate: rank_window_size must be >= size
    with pytest.raises(Exception, match="greater than or equal to size"):
        check_window(2, 3)
