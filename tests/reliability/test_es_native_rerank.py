"""Elasticsearch-native reranking (``text_similarity_reranker``) and MMR (``diversify``) on the strict double, for
both licence states, with the fallbacks to the local cross-encoder and to client MMR.

What the double refuses, and where Elasticsearch defines it:

* ``text_similarity_reranker``: an Enterprise feature, ``TextSimilarityRankBuilder.TEXT_SIMILARITY_RERANKER_FEATURE``
  (``LicensedFeature.momentary(null, "text-similarity-reranker", License.OperationMode.ENTERPRISE)``), checked in
  ``TextSimilarityRankRetrieverBuilder.fromXContent`` (``LicenseUtils.newComplianceException``); ``retriever``,
  ``inference_text`` and ``field`` are constructor args, ``inference_id`` optional (``DEFAULT_RERANK_ID``); unknown
  keys refused; ``min_score`` applied after reranking (``combineInnerRetrieverResults``); an unknown endpoint fails
  (``x-pack/plugin/inference/src/yamlRestTest/.../inference/70_text_similarity_rank_retriever.yml``: "Text
  similarity reranking fails if the inference ID does not exist", "respects min_score").
* ``diversify``: ``server/src/main/java/org/elasticsearch/search/diversification/DiversifyRetrieverBuilder.java``
  (strict parser; ``type``/``field``/``retriever`` required; MMR needs ``lambda`` in [0, 1], ``0 < size <=
  rank_window_size``; not both ``query_vector`` and ``query_vector_builder``) and ``mmr/MMRResultDiversification.java``
  (hits kept in the inner order); node feature ``retriever.result_diversification_mmr`` (9.3, preview).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from es_rag.elasticsearch.bodies import search_requests
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.corpus import DIMS, OverlapReranker, RandomEmbedder, WordTokenizer, check_no_leak, random_corpus
from tests.support.double.cluster import StrictCluster
from tests.support.double.errors import EsError
from tests.support.double.ingest import InferenceEndpoint
from tests.support.double.search import Searcher
from tests.support.es_cluster import cluster_backend

RERANK_ID = "my-rerank"
ENDPOINTS = (
    InferenceEndpoint(".elser-2-elasticsearch", task_type="sparse_embedding"),
    InferenceEndpoint(RERANK_ID, task_type="rerank"),
)
S = Settings(
    vector_dims=DIMS,
    candidate_k=8,
    num_candidates=16,
    rerank_k=6,
    context_k=3,
    token_budget=400,
    rerank_inference_id=RERANK_ID,
)
FLT = SearchFilter("acme", ("support",))
QUERIES = ("sync error", "reset password", "device wipe")


def _loaded(settings: Settings = S, license_type: str = "trial", version: str = "9.5.0") -> tuple[Any, Any, Any, Any]:
    corpus = random_corpus(random.Random(3), n_children=20)
    backend, node, cluster = cluster_backend(settings, license_type=license_type, version=version)
    cluster.endpoints = {e.inference_id: e for e in ENDPOINTS}
    assert backend.index(corpus.children, corpus.parents).failed == []
    cluster.refresh_all()
    backend.probe(refresh=True)
    node.reset()
    return backend, node, cluster, corpus


def _pipe(backend: Any, settings: Settings = S, reranker: Any = None) -> RagPipeline:
    return RagPipeline(
        backend, embedder=RandomEmbedder(), settings=settings, tokenizer=WordTokenizer(), reranker=reranker
    )


def _searches(node: Any) -> list[Any]:
    """The retrieval searches sent (not the size-0 aggregation that reads the index's embedding versions)."""
    return [r for r in node.calls("POST", ".*/_search") if "retriever" in (r.body or {})]


def _retrievers(node: Any) -> list[str]:
    return [next(iter(r.body["retriever"])) for r in _searches(node)]


def _flat(settings: Settings) -> dict[str, Any]:
    return {
        "vector_dims": DIMS,
        "candidate_k": settings.retrieve.candidate_k,
        "num_candidates": settings.retrieve.num_candidates,
        "rerank_k": settings.rerank.k,
        "context_k": settings.select.context_k,
        "token_budget": settings.pack.token_budget,
        "rerank_inference_id": settings.rerank.inference_id,
    }


# ------------------------------------------------------------------------------ text_similarity_reranker
def test_trial_licence_reranks_in_elasticsearch_and_skips_the_local_cross_encoder() -> None:
    backend, node, cluster, corpus = _loaded()
    local = OverlapReranker()
    for q in QUERIES:
        result = _pipe(backend, reranker=local).search(q, FLT)
        check_no_leak(result, corpus, "acme", ("support",))
        assert result.trace.paths["rerank"] == f"Elasticsearch text_similarity_reranker {RERANK_ID}"
        assert result.candidates and all(h.reranker_model == f"es:{RERANK_ID}" for h in result.candidates)
        scores = [h.rerank_score for h in result.candidates]
        assert all(s is not None for s in scores)
        assert scores == sorted(scores, reverse=True)  # the endpoint's order, as Elasticsearch returned it
        # the endpoint's own scores, recomputed from the stored text
        endpoint = cluster.endpoints[RERANK_ID]
        by_id = {c.chunk_id: c for c in corpus.children}
        for h in result.candidates:
            assert h.rerank_score == pytest.approx(endpoint.rerank(q, by_id[h.chunk_id].text))
        assert len(result.candidates) <= S.rerank.k
    assert local.calls == 0  # the local cross-encoder never ran
    assert _retrievers(node) == ["text_similarity_reranker"] * len(QUERIES)
    sent = _searches(node)[0].body["retriever"]["text_similarity_reranker"]
    assert (sent["inference_id"], sent["field"], sent["rank_window_size"]) == (RERANK_ID, "text", S.rerank.k)
    assert next(iter(sent["retriever"])) == "rrf"


def test_min_score_is_applied_by_elasticsearch_after_reranking() -> None:
    settings = Settings(**{**_flat(S), "rerank_min_score": 0.5})
    backend, _node, _cluster, _corpus = _loaded(settings)
    result = _pipe(backend, settings).search("sync error", FLT)
    assert result.candidates
    assert all(h.rerank_score is not None and h.rerank_score >= 0.5 for h in result.candidates)


def test_basic_licence_403_falls_back_to_the_local_cross_encoder_and_sticks() -> None:
    backend, node, cluster, _corpus = _loaded()  # probed on trial: native fusion and rerank on offer
    cluster.license_type = "basic"  # the trial ended: both rrf and text_similarity_reranker answer a 403
    local = OverlapReranker()
    paths = []
    for q in QUERIES:
        result = _pipe(backend, reranker=local).search(q, FLT)
        paths.append(result.trace.paths["rerank"])
        assert all(h.reranker_model == local.name for h in result.candidates)
        notes = next(s for s in result.trace.stages if s.name == "retrieve").info.get("notes", [])
        if q == QUERIES[0]:
            assert any("refused text_similarity_reranker" in n and "licence" in n for n in notes)
    assert all(p.startswith(f"cross-encoder {local.name}") for p in paths)
    assert "Elasticsearch rerank not used" in paths[0]
    assert local.calls == len(QUERIES)
    # one 403 for the reranker, one for rrf, then the client path only: both switches stick
    assert _retrievers(node) == ["text_similarity_reranker", "rrf"]
    assert "non-compliant for [text_similarity_reranker]" in str(backend.probe().es_rerank_refused)


def test_basic_licence_from_the_probe_never_sends_the_reranker() -> None:
    backend, node, _cluster, _corpus = _loaded(license_type="basic")
    local = OverlapReranker()
    result = _pipe(backend, reranker=local).search("sync error", FLT)
    assert result.trace.paths["retrieval"] == "client-rrf"
    assert "Elasticsearch rerank not used: client fusion path" in result.trace.paths["rerank"]
    assert _retrievers(node) == []


def test_a_cluster_without_the_retriever_falls_back() -> None:
    backend, node, _cluster, _corpus = _loaded(version="8.13.4")  # rrf is unknown too: client path from the probe
    result = _pipe(backend, reranker=OverlapReranker()).search("sync error", FLT)
    assert "Elasticsearch rerank not used" in result.trace.paths["rerank"]
    assert _retrievers(node) == []


def test_an_endpoint_that_is_not_a_rerank_endpoint_is_not_sent() -> None:
    settings = Settings(**{**_flat(S), "rerank_inference_id": ".elser-2-elasticsearch"})
    backend, node, _cluster, _corpus = _loaded(settings)
    result = _pipe(backend, settings, reranker=OverlapReranker()).search("sync error", FLT)
    assert "task type sparse_embedding, not rerank" in result.trace.paths["rerank"]
    assert _retrievers(node) == ["rrf"]


# ------------------------------------------------------------------------------ the double refuses what ES refuses
def _searcher(cluster: StrictCluster, license_type: str = "trial", version: tuple[int, ...] = (9, 5, 0)) -> Searcher:
    return Searcher(
        [cluster._view("es-rag-chunks")],
        version=version,
        license_type=license_type,
        license_active=True,
        lookup=cluster._lookup,
        embed=cluster._embed,
        rerank=cluster._rerank,
    )


def _native_body(settings: Settings, **kw: Any) -> dict[str, Any]:
    vec = RandomEmbedder().embed_query("sync error")
    (req,) = search_requests("sync error", vec, FLT, settings, native=True, **kw)
    body: dict[str, Any] = req.body
    return body


def _tsr(body: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = body["retriever"]["text_similarity_reranker"]
    return spec


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.pop("field"), "Required [field]"),
        (lambda s: s.pop("inference_text"), "Required [inference_text]"),
        (lambda s: s.update(inference_id="i-dont-exist"), "Inference endpoint not found [i-dont-exist]"),
        (lambda s: s.pop("inference_id"), "Inference endpoint not found [.rerank-v1-elasticsearch]"),
        (lambda s: s.update(window_size=5), "[text_similarity_reranker] unknown field [window_size]"),
        (lambda s: s.update(rank_window_size=2), "be greater than or equal to [size: 6]"),
    ],
)
def test_the_double_refuses_invalid_reranker_bodies(mutate: Any, message: str) -> None:
    _backend, _node, cluster, _corpus = _loaded()
    body = _native_body(S, es_rerank=True)
    mutate(_tsr(body))
    with pytest.raises(EsError) as err:
        _searcher(cluster).search(body)
    assert message in f"{err.value} {err.value.caused_by}"


def test_the_double_refuses_the_reranker_on_basic_and_before_8_14() -> None:
    _backend, _node, cluster, _corpus = _loaded()
    body = _native_body(S, es_rerank=True)
    with pytest.raises(EsError, match=r"non-compliant for \[text_similarity_reranker\]") as err:
        _searcher(cluster, license_type="basic").search(body)
    assert err.value.status == 403
    body["_source"].pop("exclude_vectors")  # 9.2+
    with pytest.raises(EsError, match=r"unknown retriever \[text_similarity_reranker\]"):
        _searcher(cluster, version=(8, 13, 0)).search(body)


# ------------------------------------------------------------------------------ diversify
MMR = Settings(**{**_flat(S), "mmr_path": "native", "rerank_model": "none", "mmr_lambda": 0.5})


def test_native_mmr_on_9_3_wraps_the_reranked_retriever_and_keeps_its_order() -> None:
    backend, node, _cluster, corpus = _loaded(MMR)
    result = _pipe(backend, MMR).search("sync error", FLT)
    check_no_leak(result, corpus, "acme", ("support",))
    assert result.trace.paths["select"].startswith("Elasticsearch diversify (mmr, lambda=0.5, size=3 of 6)")
    (sent,) = _searches(node)
    div = sent.body["retriever"]["diversify"]
    assert (div["type"], div["field"], div["lambda"], div["size"], div["rank_window_size"]) == (
        "mmr",
        "vector",
        0.5,
        3,
        6,
    )
    assert next(iter(div["retriever"])) == "text_similarity_reranker"
    scores = [h.rerank_score for h in result.candidates]
    assert scores == sorted(scores, reverse=True)  # diversify keeps the reranked order
    assert len(result.candidates) <= 3


def test_native_mmr_before_9_3_and_with_a_local_reranker_is_client_mmr_with_the_reason() -> None:
    backend, node, _cluster, _corpus = _loaded(MMR, version="9.2.0")
    result = _pipe(backend, MMR).search("sync error", FLT)
    assert "client MMR: the diversify retriever needs Elasticsearch >= 9.3" in result.trace.paths["select"]
    assert _retrievers(node) == ["text_similarity_reranker"]
    local = Settings(**{**_flat(MMR), "mmr_path": "auto", "rerank_inference_id": None})
    backend, node, _cluster, _corpus = _loaded(local)
    result = _pipe(backend, local, reranker=OverlapReranker()).search("sync error", FLT)
    assert "client MMR: the local cross-encoder reranks after retrieval" in result.trace.paths["select"]
    assert _retrievers(node) == ["rrf"]


def test_the_double_selects_as_mmr_result_diversification() -> None:
    _backend, _node, cluster, _corpus = _loaded()
    plain = _native_body(S)
    inner = _searcher(cluster).search(
        {**plain, "size": 6, "retriever": {"rrf": {**plain["retriever"]["rrf"], "rank_window_size": 8}}}
    )
    ids = [h["_id"] for h in inner["hits"]["hits"]]
    vec = [float(x) for x in RandomEmbedder().embed_query("sync error")]
    body = {
        **plain,
        "size": 3,
        "retriever": {
            "diversify": {
                "type": "mmr",
                "retriever": {"rrf": {**plain["retriever"]["rrf"], "rank_window_size": 8}},
                "field": "vector",
                "query_vector": vec,
                "lambda": 1.0,  # pure relevance: the three hits most similar to the query vector
                "rank_window_size": 6,
                "size": 3,
            }
        },
    }
    got = [h["_id"] for h in _searcher(cluster).search(body)["hits"]["hits"]]
    docs = cluster._view("es-rag-chunks").docs
    sims = {i: sum(a * b for a, b in zip(docs[i]["vector"], vec, strict=True)) for i in ids}
    expected = sorted(sorted(ids, key=lambda i: -sims[i])[:3], key=ids.index)
    assert got == expected  # chosen by similarity, returned in the inner order


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("lambda"), "must have a [lambda] between 0.0 and 1.0. The value provided was null"),
        (lambda d: d.update({"lambda": 1.5}), "must have a [lambda] between 0.0 and 1.0"),
        (lambda d: d.update(size=0), "[size] of 0 must be greater than zero"),
        (lambda d: d.update(size=9), "[size] of 9 cannot be greater than the [rank_window_size] of 6"),
        (lambda d: d.pop("field"), "Required [field]"),
        (lambda d: d.pop("type"), "Required [type]"),
        (lambda d: d.update(k=3), "[diversify] unknown field [k]"),
        (lambda d: d.update(query_vector_builder={}), "can have one of [query_vector] or [query_vector_builder]"),
        (lambda d: d.update(field="text"), "Is it a [dense_vector] field?"),
    ],
)
def test_the_double_refuses_invalid_diversify_bodies(mutate: Any, message: str) -> None:
    _backend, _node, cluster, _corpus = _loaded(MMR)
    body = _native_body(MMR, es_rerank=True, diversify=True)
    body["size"] = 3
    mutate(body["retriever"]["diversify"])
    with pytest.raises(EsError) as err:
        _searcher(cluster).search(body)
    assert message in f"{err.value} {err.value.caused_by}"


def test_the_double_knows_no_diversify_before_9_3() -> None:
    _backend, _node, cluster, _corpus = _loaded(MMR)
    with pytest.raises(EsError, match=r"unknown retriever \[diversify\]"):
        _searcher(cluster, version=(9, 2, 0)).search(_native_body(MMR, es_rerank=True, diversify=True))


def test_the_embedded_backend_says_why_the_local_cross_encoder_reranks() -> None:
    from es_rag.embedded.backend import EmbeddedBackend

    corpus = random_corpus(random.Random(9), n_children=20)
    backend = EmbeddedBackend(dims=DIMS)
    backend.index(corpus.children, corpus.parents)
    local = OverlapReranker()
    result = _pipe(backend, reranker=local).search("sync error", SearchFilter("acme", ("support", "eng")))
    assert result.trace.paths["rerank"].startswith(f"cross-encoder {local.name}")
    assert (
        "Elasticsearch rerank not used: the embedded backend has no text_similarity_reranker"
        in (result.trace.paths["rerank"])
    )


@pytest.mark.parametrize("raw", [-7.5, -0.3, 0.0, 0.42, 3.0])
def test_the_trace_shows_the_endpoints_score_not_elasticsearchs_normalised_one(raw: float) -> None:
    """Elasticsearch returns ``max(s, 0) + min(exp(s), 1)`` of the endpoint's score (PR #120930, 8.16.4+;
    ``TextSimilarityRankFeaturePhaseRankCoordinatorContext.normalizeScore``): a positive score one higher."""
    from es_rag.elasticsearch.wrappers import endpoint_score

    returned = max(raw, 0.0) + min(math.exp(raw), 1.0)
    assert endpoint_score(returned) == pytest.approx(raw, abs=1e-12)
