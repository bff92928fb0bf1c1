"""Search body builders: channels, identifiers, native rrf/linear, msearch, stored search template."""

from __future__ import annotations

import json

import pytest

from es_rag.elasticsearch.assets import search_template_source
from es_rag.elasticsearch.bodies import native_fusion_body, search_requests
from es_rag.elasticsearch.search_template import render_search_template, search_template_params
from es_rag.filters import SearchFilter
from es_rag.query import channel_plan, extract_identifiers
from es_rag.settings import Settings
from tests.support.double.mustache import render_template

FLT = SearchFilter("acme", ("support",), metadata={"source_id": ("faq",)})
VEC = [0.5, -0.25, 0.125, 1.0]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What does error E1042 mean?", ["E1042"]),
        ("call sync_engine.start() after ERR-SYNC-42.", ["sync_engine.start()", "ERR-SYNC-42"]),
        ("getUserName returns null on X200", ["getUserName", "X200"]),
        ("how do I reset my password", []),
        ("in 2024 the policy changed", []),
        ("E1042 and E1042 again", ["E1042"]),
        # Seed 000's example: an identifier ends where Japanese text begins (kana and kanji are not part of it).
        ("NIM-E1042の対処", ["NIM-E1042"]),
        ("E1042の対処方法", ["E1042"]),
        ("エラーE1042が出た", ["E1042"]),
        ("サーバーのsync_engine.start()が失敗", ["sync_engine.start()"]),
        ("getUserName関数とX200型番", ["getUserName", "X200"]),
        ("v2.3.1で直った？", ["v2.3.1"]),
        ("Ｅ１０４２の対処", ["Ｅ１０４２"]),  # fullwidth: the analyzer's cjk_width folds it to e1042
        ("한국어E1042오류", ["E1042"]),
        ("パスワードを再設定する方法", []),
    ],
)
def test_extract_identifiers(query: str, expected: list[str]) -> None:
    assert extract_identifiers(query) == expected


def test_extracted_identifiers_never_hold_cjk_characters() -> None:
    text = "設定ファイルのNIM-E1042とERR_SYNC-42、v2.3.1版で「getUserName」を呼ぶ"
    found = extract_identifiers(text)
    assert found == ["NIM-E1042", "ERR_SYNC-42", "v2.3.1", "getUserName"]
    assert not any("\u3040" <= c <= "\u9fff" for ident in found for c in ident)


def test_channel_plan() -> None:
    s = Settings()
    assert channel_plan("reset password", None, s) == ["bm25"]
    assert channel_plan("reset password", VEC, s) == ["bm25", "dense"]
    assert channel_plan("error E1042", VEC, s) == ["bm25", "dense", "exact"]
    assert channel_plan("error E1042", VEC, s.replace(exact_channel="off")) == ["bm25", "dense"]


def test_native_body_names_children_and_filters_each() -> None:
    s = Settings(vector_dims=4, candidate_k=20, num_candidates=40, rerank_k=10)
    body = native_fusion_body("error E1042", VEC, FLT, s)
    children = body["retriever"]["rrf"]["retrievers"]
    names = [next(iter(c.values()))["_name"] for c in children]
    assert names == ["bm25", "dense", "exact"]
    assert all(next(iter(c.values()))["filter"] == FLT.to_es() for c in children)
    assert body["size"] == body["retriever"]["rrf"]["rank_window_size"] == 20


def test_linear_body_carries_weights_and_normalizer() -> None:
    s = Settings(vector_dims=4, fusion_method="linear", channel_weights={"dense": 2.0})
    lin = native_fusion_body("reset password", VEC, FLT, s)["retriever"]["linear"]
    assert [e["weight"] for e in lin["retrievers"]] == [1.0, 2.0]
    assert {e["normalizer"] for e in lin["retrievers"]} == {"minmax"}
    assert lin["rank_window_size"] == s.retrieve.candidate_k


def test_msearch_has_one_search_per_channel() -> None:
    (req,) = search_requests("error E1042", VEC, FLT, Settings(vector_dims=4), native=False)
    assert len(req.body) == 6
    assert "dis_max" in req.body[5]["query"]["bool"]["must"][0]


@pytest.mark.parametrize("query", ["reset password", "what is E1042 in sync_engine.start()"])
@pytest.mark.parametrize("vsp", [True, False])
@pytest.mark.parametrize("tie_breaker", [0.0, 0.5])
@pytest.mark.parametrize("rescore", [None, 2.0], ids=["float", "int8-oversample-2"])
def test_stored_template_renders_to_the_native_body(
    query: str, vsp: bool, tie_breaker: float, rescore: float | None
) -> None:
    quantized = {"vector_index_type": "int8_hnsw", "vector_rescore_oversample": rescore} if rescore else {}
    s = Settings(vector_dims=4, bm25_tie_breaker=tie_breaker, **quantized)
    params = search_template_params(query, VEC, FLT, s, vectors_in_source_param=vsp)
    rendered = render_search_template(search_template_source(), params)
    native = native_fusion_body(query, VEC, FLT, s, vectors_in_source_param=vsp)
    assert rendered == native
    knn = native["retriever"]["rrf"]["retrievers"][1]["knn"]
    assert knn.get("rescore_vector") == ({"oversample": rescore} if rescore else None)


def test_template_escapes_quotes_in_the_query() -> None:
    s = Settings(vector_dims=4)
    q = 'he said "stop" \\ now'
    rendered = render_search_template(search_template_source(), search_template_params(q, VEC, FLT, s))
    assert rendered["retriever"]["rrf"]["retrievers"][0]["standard"]["query"]["multi_match"]["query"] == q


@pytest.mark.parametrize("query", ["reset password", "what is E1042 in sync_engine.start()"])
def test_stored_template_in_semantic_text_mode_runs_the_semantic_query_not_knn(query: str) -> None:
    """Issue 29: the stored template carried a ``knn`` child on the ``vector`` field, which a ``semantic_text``
    index does not have. With ``params.semantic`` its dense child is the ``semantic`` query, as the native body."""
    s = Settings(vector_dims=384, inference_id="e5", vector_mode="semantic_text")
    params = search_template_params(query, None, FLT, s)
    assert "query_vector" not in params
    rendered = render_search_template(search_template_source(), params)
    assert rendered == native_fusion_body(query, None, FLT, s)
    assert "knn" not in json.dumps(rendered)
    # the double's independent mustache renderer (the one _search/template runs) agrees
    assert json.loads(render_template(search_template_source(), params)) == rendered
