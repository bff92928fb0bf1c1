"""The search plan (es_rag.query): one pure decision of channels and fusion path that the Elasticsearch
backend follows and ``es-rag explain`` prints."""

from __future__ import annotations

import pytest

from es_rag.explain import explain_sections
from es_rag.filters import SearchFilter
from es_rag.query import plan_search
from es_rag.settings import Settings

VEC = [1.0, 0.0, 0.0, 0.0]
S = Settings(vector_dims=4)


def test_channels_follow_the_query_and_the_vector() -> None:
    assert plan_search("reset password", VEC, S, native_available=True).channels == ("bm25", "dense")
    plan = plan_search("what is E1042", VEC, S, native_available=True)
    assert plan.channels == ("bm25", "dense", "exact") and plan.identifiers == ("E1042",)
    assert plan.notes == ["exact channel: identifiers ['E1042']"]
    off = plan_search("what is E1042", VEC, S.replace(exact_channel="off"), native_available=True)
    assert off.channels == ("bm25", "dense") and off.identifiers == ()
    assert plan_search("reset", None, S, native_available=True).channels == ("bm25",)


@pytest.mark.parametrize(
    ("changes", "version", "blocked"),
    [
        ({}, (9, 5, 0), None),
        ({"fusion_method": "linear", "score_normalizer": "zscore"}, None, "normalizer zscore exists only client-side"),
        ({"channel_weights": {"dense": 2.0}}, (9, 1, 0), "weighted rrf needs Elasticsearch >= 9.2"),
        ({"channel_weights": {"dense": 2.0}}, (9, 2, 0), None),
        ({"fusion_method": "linear"}, (8, 17, 0), "the linear retriever needs Elasticsearch >= 8.18"),
        ({"fusion_method": "linear", "score_normalizer": "l2_norm"}, (9, 0, 0), "the l2_norm normalizer needs"),
    ],
)
def test_native_fusion_is_blocked_only_for_a_reason(
    changes: dict[str, object], version: tuple[int, ...] | None, blocked: str | None
) -> None:
    plan = plan_search("reset password", VEC, S.replace(**changes), native_available=True, version=version)
    assert plan.native is (blocked is None)
    assert plan.fallback == ("client" if blocked is None else None)
    if blocked:
        assert plan.native_blocked is not None and plan.native_blocked.startswith(blocked)
        assert plan.notes[-1].endswith(": client path")
    # without native fusion on offer nothing is blocked: the client path is simply the path
    assert plan_search("reset password", VEC, S.replace(**changes), native_available=False).native_blocked is None


def test_one_channel_never_goes_native_and_says_so_only_in_explain() -> None:
    plan = plan_search("reset", None, S, native_available=True)
    assert not plan.native and plan.native_blocked == "one channel" and plan.notes == []


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"fusion_method": "linear"},
        {"fusion_method": "linear", "score_normalizer": "zscore"},
        {"exact_channel": "off"},
    ],
)
@pytest.mark.parametrize("query", ["reset password", "error E1042 in sync_engine.start()"])
def test_explain_prints_the_plan_retrieve_follows(changes: dict[str, object], query: str) -> None:
    settings = S.replace(**changes)
    plan = plan_search(query, VEC, settings, native_available=True, version=(9, 5, 0))
    sections = explain_sections(query, VEC, SearchFilter("acme"), settings, paths=[True, False], version=(9, 5, 0))
    labels = [comments[-1] for comments, _ in sections]
    assert labels[0].startswith("native fusion" if plan.native else "client fusion")
    assert len(sections) == (2 if plan.native else 1)
    if plan.identifiers:
        assert any(f"identifiers {list(plan.identifiers)}" in c for c in sections[0][0])
