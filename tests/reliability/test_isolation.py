"""Tenant / ACL / version isolation on every retrieval path, >= 1,000 random queries per path, zero leaks.

Hypothesis draws the seeds of random corpora (:func:`tests.support.corpus.random_corpus`: three tenants
sharing source ids, versions and parent ids, ACL groups, hidden versions, deleted sources, children that
point at another tenant's parent). Each corpus is indexed, then random queries run through the real
:class:`~es_rag.pipeline.RagPipeline` and every candidate, selected hit, expanded parent/neighbour, citation
and the packed context text are checked against an independent oracle (:func:`corpus.visible`).

Embedded backend paths: client RRF, dense down (query embedding fails), reranker down (model cannot load),
reranked (a deterministic scorer), exact channel, parent expansion, neighbour expansion.
Elasticsearch backend paths (real client, :class:`tests.support.es_cluster.FakeCluster` evaluating the
bodies, so a body that forgets a clause leaks): native rrf, client rrf over ``_msearch`` (Basic licence),
dense down, 403 licence fallback, exact channel, parent and neighbour expansion.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag.chunking import make_chunker
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.ingest import IngestReport, SourceDoc, delete_source, ingest_documents, load_files
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.corpus import (
    DIMS,
    TENANTS,
    BrokenEmbedder,
    Corpus,
    DownReranker,
    OverlapReranker,
    RandomEmbedder,
    WordTokenizer,
    check_no_leak,
    random_corpus,
    random_groups,
    random_query,
    visible,
)
from tests.support.double.cluster import StrictCluster
from tests.support.es_cluster import cluster_backend
from tests.support.es_transport import bulk_actions

MIN_QUERIES = 1000
EXAMPLES = 26
PER_EXAMPLE = 40  # 26 * 40 = 1040 queries per configuration

SEARCH_SETTINGS = dict(
    vector_dims=DIMS,
    candidate_k=8,
    num_candidates=16,
    rerank_k=8,
    context_k=4,
    token_budget=400,
    rerank_calibration="none",
    gate_cliff=None,
)


def _settings(**extra: Any) -> Settings:
    return Settings(**{**SEARCH_SETTINGS, **extra})


def _load_embedded(corpus: Corpus) -> EmbeddedBackend:
    backend = EmbeddedBackend(dims=DIMS)
    report = backend.index(corpus.children, corpus.parents)
    assert report.failed == [] and report.indexed == len(corpus.docs())
    for tenant, keys in corpus.hidden.items():
        backend.versions[tenant] = {"tenant_id": tenant, "active": {}, "hidden": sorted(keys)}
    for tenant, source in corpus.deleted:
        out = delete_source(backend, tenant, source)
        assert out["remaining"] == {"chunks": 0, "parents": 0}
    return backend


def _temptations(corpus: Corpus, query: str, tenant: str, groups: tuple[str, ...]) -> int:
    """Forbidden chunks sharing a word with the query: what an unfiltered search would have served."""
    q = set(query.lower().split())
    return sum(1 for c in corpus.children if not visible(c, tenant, groups, corpus) and q & set(c.text.lower().split()))


def _path_counts(result: Any, counts: Counter[str]) -> None:
    paths = result.trace.paths
    retrieve = next(s for s in result.trace.stages if s.name == "retrieve")
    if "exact" in retrieve.info.get("channels", {}) or any("exact" in n for n in retrieve.info.get("notes", [])):
        counts["exact"] += 1
    if paths.get("dense", "").startswith("fallback"):
        counts["dense-down"] += 1
    rerank = paths.get("rerank", "")
    if rerank.startswith("fallback"):
        counts["reranker-down"] += 1
    elif rerank.startswith("cross-encoder"):
        counts["reranked"] += 1
    expand = paths.get("expand", "")
    if expand.startswith("parent"):
        counts["parent"] += 1
    elif expand.startswith("neighbours"):
        counts["neighbors"] += 1
    retrieval = paths.get("retrieval", "")
    if retrieval in ("embedded", "client-rrf"):
        counts["client-rrf"] += 1
    elif retrieval == "native-rrf":
        counts["native-rrf"] += 1
    elif retrieval == "bm25-only" or retrieval.endswith("-only"):
        counts["single-channel"] += 1


EMBEDDED_CONFIGS = {
    # name: (embedder, reranker factory, settings overrides, queries per corpus). A query counts for a
    # path only when the trace shows that path was taken (expansion does not run on an empty selection).
    "all-up": (RandomEmbedder(), lambda: None, {}, PER_EXAMPLE),
    "models-down+parent": (BrokenEmbedder(), DownReranker, {"expand_mode": "parent"}, 2 * PER_EXAMPLE),
    "reranked+neighbors": (
        RandomEmbedder(),
        OverlapReranker,
        {"expand_mode": "neighbors", "expand_neighbors": 2},
        PER_EXAMPLE + 16,
    ),
}


@pytest.mark.slow
def test_embedded_pipeline_never_leaks_on_any_path() -> None:
    counts: Counter[str] = Counter()
    checked = Counter[str]()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**32 - 1))
    def run(seed: int) -> None:
        rng = random.Random(seed)
        corpus = random_corpus(rng, n_children=rng.randint(12, 30))
        backend = _load_embedded(corpus)
        for name, (embedder, reranker, extra, n_queries) in EMBEDDED_CONFIGS.items():
            pipe = RagPipeline(
                backend, embedder=embedder, settings=_settings(**extra), tokenizer=WordTokenizer(), reranker=reranker()
            )
            for i in range(n_queries):
                tenant, groups = rng.choice(TENANTS), random_groups(rng)
                query = random_query(rng, identifier=i % 2 == 0)
                result = pipe.search(query, SearchFilter(tenant, groups))
                checked["hits"] += check_no_leak(result, corpus, tenant, groups)
                checked["temptations"] += _temptations(corpus, query, tenant, groups)
                counts[f"config:{name}"] += 1
                _path_counts(result, counts)
                info = next(s for s in result.trace.stages if s.name == "expand").info
                checked["refused_other_tenant"] += len(info.get("refused_other_tenant", []))
                checked["kept_as_child"] += sum(
                    1 for r in info.get("kept_as_child", {}).values() if "not available" in r
                )

    run()
    print("embedded isolation:", dict(counts), dict(checked))
    for path in ("client-rrf", "dense-down", "reranker-down", "reranked", "exact", "parent", "neighbors"):
        assert counts[path] >= MIN_QUERIES, (path, dict(counts))
    # The adversarial material was really there: forbidden chunks matched the queries' words, and
    # hostile parent references (child -> another tenant's parent) were refused under the filter.
    assert checked["temptations"] >= MIN_QUERIES, dict(checked)
    assert checked["kept_as_child"] > 0, dict(checked)
    assert checked["hits"] > 10 * MIN_QUERIES, dict(checked)


def _load_cluster(corpus: Corpus, s: Settings, license_type: str) -> tuple[Any, Any, StrictCluster]:
    backend, node, cluster = cluster_backend(s, license_type=license_type)
    report = backend.index(corpus.children, corpus.parents)
    assert report.failed == [] and report.indexed == len(corpus.docs())
    cluster.refresh_all()
    for tenant, keys in corpus.hidden.items():
        doc = {"tenant_id": tenant, "active": {}, "hidden": sorted(keys)}
        backend.send(EsRequest("PUT", f"{s.index.prefix}-versions/_doc/{tenant}", doc))
    for tenant, source in corpus.deleted:
        out = delete_source(backend, tenant, source)
        assert out["remaining"] == {"chunks": 0, "parents": 0}
    return backend, node, cluster


ES_CONFIGS = {
    # name: (licence, embedder, settings overrides, answer native searches with a 403 licence error,
    #        queries per corpus). Half the queries carry an identifier (exact channel); a dense-down query
    #        without one is the single-channel (bm25-only) path, hence twice the queries there.
    "native+parent": ("trial", RandomEmbedder(), {"expand_mode": "parent"}, False, 116),
    "native+neighbors": ("trial", RandomEmbedder(), {"expand_mode": "neighbors"}, False, 116),
    "basic-client": ("basic", RandomEmbedder(), {}, False, 80),
    "dense-down": ("trial", BrokenEmbedder(), {}, False, 160),
    "licence-403": ("trial", RandomEmbedder(), {}, True, 80),
}
ES_EXAMPLES = 13


@pytest.mark.slow
def test_elasticsearch_bodies_never_leak_on_any_path() -> None:
    counts: Counter[str] = Counter()
    checked = Counter[str]()

    @settings(max_examples=ES_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**32 - 1))
    def run(seed: int) -> None:
        rng = random.Random(seed)
        corpus = random_corpus(rng, n_children=rng.randint(12, 30))
        for _name, (licence, embedder, extra, refuse_native, n_queries) in ES_CONFIGS.items():
            s = _settings(**extra)
            backend, _node, cluster = _load_cluster(corpus, s, licence)
            if refuse_native:
                backend.probe()  # the probe saw a trial licence; the cluster now refuses rrf with its 403
                cluster.license_type = "basic"
            pipe = RagPipeline(backend, embedder=embedder, settings=s, tokenizer=WordTokenizer())
            for i in range(n_queries):
                if refuse_native:
                    backend.probe().native_rrf = True  # re-enter the native path: every query meets the 403
                tenant, groups = rng.choice(TENANTS), random_groups(rng)
                query = random_query(rng, identifier=i % 2 == 0)
                result = pipe.search(query, SearchFilter(tenant, groups))
                checked["hits"] += check_no_leak(result, corpus, tenant, groups)
                checked["temptations"] += _temptations(corpus, query, tenant, groups)
                _path_counts(result, counts)
                notes = next(s for s in result.trace.stages if s.name == "retrieve").info.get("notes", [])
                if any("refused by licence" in n for n in notes):
                    counts["licence-403-fallback"] += 1
                if licence == "basic":
                    counts["basic-client"] += 1
            if refuse_native:  # native searches the double answered with the licence 403
                checked["403-answered"] += sum(
                    1 for r in _node.requests if r.path.endswith("/_search") and "retriever" in (r.body or {})
                )

    run()
    print("elasticsearch isolation:", dict(counts), dict(checked))
    for path in ("native-rrf", "client-rrf", "single-channel", "exact", "parent", "neighbors", "licence-403-fallback"):
        assert counts[path] >= MIN_QUERIES, (path, dict(counts))
    assert counts["basic-client"] >= MIN_QUERIES and checked["403-answered"] >= MIN_QUERIES, dict(checked)
    assert checked["temptations"] >= MIN_QUERIES and checked["hits"] > 10 * MIN_QUERIES, dict(checked)


def test_the_evaluator_catches_a_body_that_forgets_the_tenant_clause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ES isolation test can fail: drop the tenant clause from every rendered filter and it leaks."""
    rng = random.Random(7)
    corpus = random_corpus(rng, n_children=30)
    s = _settings(expand_mode="parent")
    backend, _, _ = _load_cluster(corpus, s, "trial")
    original = SearchFilter.to_es

    def forgetful(self: SearchFilter) -> list[dict[str, Any]]:
        return [c for c in original(self) if "term" not in c or "tenant_id" not in c["term"]]

    monkeypatch.setattr(SearchFilter, "to_es", forgetful)
    pipe = RagPipeline(backend, embedder=RandomEmbedder(), settings=s, tokenizer=WordTokenizer())
    leaks = 0
    for i in range(60):
        tenant, groups = TENANTS[i % 3], ("support", "eng", "hr", "legal")
        try:
            check_no_leak(
                pipe.search(random_query(rng, identifier=False), SearchFilter(tenant, groups)), corpus, tenant, groups
            )
        except AssertionError:
            leaks += 1
    assert leaks > 0


def test_ingest_refuses_a_chunk_without_tenant(minilm_tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No tenant, no chunk -- at every layer: a JSONL line, a source document, a chunk record on both
    backends (before the bulk request), and the Elasticsearch ingest pipeline's ``fail`` processor for a
    writer that skips the client-side check."""
    corpus = random_corpus(random.Random(1), n_children=6)
    good = corpus.children[:5]
    bad = dataclasses.replace(good[0], tenant_id=" ", chunk_id="no-tenant")

    emb = EmbeddedBackend(dims=DIMS)
    report = emb.index([*good, bad])
    assert report.indexed == 5 and [(f["field"], f["reason"]) for f in report.failed] == [
        ("tenant_id", "missing required field")
    ]
    assert emb.count() == 5

    backend, node, cluster = cluster_backend(_settings())
    report = backend.index([*good, bad])
    assert report.indexed == 5 and [f["field"] for f in report.failed] == ["tenant_id"]
    sent = [meta["_id"] for req in node.calls(None, "_bulk") for _, meta, _ in bulk_actions(req)]
    assert "no-tenant" not in sent and len(sent) == 5

    resp = backend.client.bulk(
        operations=[
            {"index": {"_index": backend.settings.chunk_index, "_id": "x"}},
            {"chunk_id": "x", "source_id": "s", "text": "t"},
        ]
    )
    item = resp["items"][0]["index"]
    assert resp["errors"] is True and item["status"] == 500
    assert "missing required field 'tenant_id'" in item["error"]["reason"]
    assert "x" not in cluster.docs(backend.settings.chunk_index)

    p = tmp_path / "docs.jsonl"
    rows = [{"id": "a", "text": "alpha text", "tenant_id": ""}, {"id": "b", "text": "beta text"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = IngestReport()
    docs = load_files([p], tenant_id="acme", acl=("public",), report=rep)
    assert [d.source_id for d in docs] == ["b"]
    assert rep.failed == [
        {"document": f"{p}:1", "field": "tenant_id", "reason": "missing or empty: every chunk needs a tenant"}
    ]

    chunker = make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=50, overlap=5)
    source = SourceDoc(source_id="s", text="# T\n\nbody text\n", tenant_id="", acl=("public",), source_version="v1")
    target = EmbeddedBackend(dims=DIMS)
    out = ingest_documents([source], chunker=chunker, embedder=RandomEmbedder(), backend=target)
    assert out.indexed == 0 and target.count() == 0 and target._parents == {}
    assert out.failed and {f["field"] for f in out.failed} == {"tenant_id"}
    assert all(f["document"] == "s" for f in out.failed)
