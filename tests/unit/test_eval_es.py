"""``es-rag eval --es``: the corpus goes through setup, the ingest pipeline and the version registry of a
(fake) cluster, every query runs there, and the stage metrics equal the embedded mirror's.

The fake node (``tests/support/es_transport.py``: the real ``elasticsearch`` client over a routed fake node) answers
each ``_msearch`` search with the embedded backend's results for the same query, so what is tested is the
plumbing es_rag owns: what is written, which requests are sent (client fusion, filters), how hits come
back and are scored. What only a real cluster proves (Lucene's BM25, HNSW recall) is in ``tests/live``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from es_rag.elasticsearch.assets import render_asset
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.errors import ConfigError
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.index import EVAL_TENANT, ChunkUnit, build_chunk_index, build_index
from es_rag.evaluation.run import evaluate
from es_rag.filters import SearchFilter
from es_rag.settings import Settings
from tests.support.beir import write_beir
from tests.support.es_transport import (
    RecordedRequest,
    acknowledged,
    bulk_actions,
    bulk_responder,
    cluster_routes,
    hit,
    index_created,
    make_client,
    msearch_response,
    search_response,
)


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir-es"))


@pytest.fixture(scope="module")
def settings(tiny_bi_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=None, candidate_k=20,
        num_candidates=40, rerank_k=8, context_k=3, token_budget=400, analyzer="english",
        bm25_fields=("title", "text"), bm25_tie_breaker=1.0, bm25_k1=0.9, bm25_b=0.4, index_prefix="es-rag-eval",
    )  # fmt: skip


def _fake_cluster(settings: Settings, mirror: Any, *, installed: Settings | None = None) -> tuple[Any, Any]:
    """A 9.x trial cluster whose searches are answered by ``mirror`` (an EvalIndex of the same corpus)."""
    client, node = make_client()
    node.routes(cluster_routes(settings))
    p = settings.index.prefix
    registry: dict[str, Any] = {"doc": None, "seq": 0}
    chunks = {c.chunk_id: c for c in mirror.chunks}
    flt = SearchFilter(EVAL_TENANT)

    def registry_route(req: RecordedRequest) -> tuple[int, Any]:
        if req.method == "PUT":
            registry["doc"], registry["seq"] = req.body, registry["seq"] + 1
            return 200, {"result": "updated", "_seq_no": registry["seq"], "_primary_term": 1}
        if registry["doc"] is None:
            return 404, {"_index": f"{p}-versions", "_id": EVAL_TENANT, "found": False}
        return 200, {"found": True, "_source": registry["doc"], "_seq_no": registry["seq"], "_primary_term": 1}

    def msearch(req: RecordedRequest) -> tuple[int, Any]:
        items = []
        for body in req.body[1::2]:
            if "knn" in body:
                knn = body["knn"]
                import numpy as np

                found = mirror.backend.knn(np.asarray(knn["query_vector"], dtype=np.float32), flt, knn["k"])
                scored = [(h.chunk_id, h.dense_score) for h in found]
            else:
                text = json.dumps(body["query"])
                query = re.search(r'"multi_match": \{"query": "((?:[^"\\]|\\.)*)"', text)
                assert query is not None, f"unexpected search body {body}"
                found = mirror.backend.bm25(json.loads(f'"{query.group(1)}"'), flt, body["size"])
                scored = [(h.chunk_id, h.bm25_score) for h in found]
            hits = [hit(chunks[c].to_source(include_vector=True), s, index=f"{p}-chunks") for c, s in scored]
            items.append(search_response(hits))
        return 200, msearch_response(items)

    shown = installed or settings
    index_settings = render_asset("index_templates", "component-chunks", shown)["template"]["settings"]
    as_strings = json.loads(json.dumps(index_settings), parse_float=str)  # _settings answers numbers as strings
    node.routes(
        {
            ("PUT", r"_(ingest/pipeline|component_template|index_template|scripts)/.*"): (200, acknowledged()),
            ("HEAD", rf"{p}-(chunks|parents|versions)"): (404, None),
            ("PUT", rf"{p}-(chunks|parents|versions)"): lambda req: (200, index_created(req.path.strip("/"))),
            ("GET", rf"{p}-chunks/_settings"): (200, {f"{p}-chunks": {"settings": as_strings}}),
            ("GET", rf"{p}-versions/_doc/{EVAL_TENANT}"): registry_route,
            ("PUT", rf"{p}-versions/_doc/{EVAL_TENANT}"): registry_route,
            ("PUT", r".*_bulk"): bulk_responder(),
            ("POST", r".*_bulk"): bulk_responder(),
            ("POST", r".*_refresh"): (200, {"_shards": {"total": 2, "successful": 2, "failed": 0}}),
            ("POST", rf"{p}-chunks/_msearch"): msearch,
        }
    )
    return ElasticsearchBackend(client, settings), node


def test_eval_on_a_cluster_writes_the_corpus_and_scores_like_the_embedded_mirror(
    beir: Path, settings: Settings, tmp_path: Path
) -> None:
    reference = evaluate(beir, settings=settings, cache_dir=tmp_path, depth=20)
    corpus, _, _ = load_beir(beir, "test")
    mirror = build_index(corpus, settings, cache_dir=tmp_path)
    backend, node = _fake_cluster(settings, mirror)
    # the fake node answers _msearch from the mirror; the native comparison runs on the strict double
    # (tests/double/test_eval_native_path.py)
    result = evaluate(beir, settings=settings, cache_dir=tmp_path, depth=20, es_backend=backend, compare_native=False)

    for stage in ("bm25", "dense", "union", "hybrid"):
        assert result["stages"][stage] == reference["stages"][stage], stage
    assert result["stages"]["selection"]["context_recall"] == reference["stages"]["selection"]["context_recall"]
    assert result["paths"]["backend"].startswith("elasticsearch (index es-rag-eval-chunks, 24 chunks written)")
    assert "client-rrf" in result["paths"]["fusion"]

    lines = [r.line for r in node.requests]
    bulk = [a for r in node.requests if r.path.endswith("_bulk") for a in bulk_actions(r)]
    assert sorted(meta["_id"] for _, meta, _ in bulk) == sorted(corpus)
    assert all(src and src["tenant_id"] == EVAL_TENANT and len(src["vector"]) == 32 for _, _, src in bulk)
    # registry: the versions are hidden before the bulk and served after the refresh
    first_bulk = next(i for i, line in enumerate(lines) if line.endswith("_bulk"))
    registry_puts = [i for i, line in enumerate(lines) if line == f"PUT /es-rag-eval-versions/_doc/{EVAL_TENANT}"]
    refresh = next(i for i, line in enumerate(lines) if line.endswith("_refresh"))
    assert registry_puts[0] < first_bulk < refresh < registry_puts[-1]
    assert set(json.loads(json.dumps(node.requests[registry_puts[-1]].body))["active"]) == set(corpus)
    # every search is client-side (one _msearch per query, no native rrf) and carries the tenant; the version
    # gate is read once per query (a registry GET before each _msearch) and inlined (nothing hidden here: omitted)
    searches = [r for r in node.requests if r.path.endswith("_msearch")]
    # the only _search is the embedding check's aggregation (es_rag.backend.check_embedding), before the first query
    # -- once, not once per query
    checks = [r for r in node.requests if r.path.endswith("/_search")]
    assert len(searches) == result["queries"] and len(checks) == 1
    assert all(r.body["size"] == 0 and "embedding_version" in json.dumps(r.body["aggs"]) for r in checks)
    body = json.dumps(searches[0].body)
    assert '"tenant_id": "eval"' in body and "version_key" not in body
    gate_reads = [i for i, line in enumerate(lines) if line == f"GET /es-rag-eval-versions/_doc/{EVAL_TENANT}"]
    msearches = [i for i, line in enumerate(lines) if line.endswith("_msearch")]
    previous = registry_puts[-1]  # after the ingest's own registry reads and writes
    for m in msearches:  # exactly one registry read since the previous query's _msearch
        assert len([g for g in gate_reads if previous < g < m]) == 1, lines[previous + 1 : m + 1]
        previous = m


def test_eval_refuses_an_index_created_with_other_bm25_parameters(
    beir: Path, settings: Settings, tmp_path: Path
) -> None:
    corpus, _, _ = load_beir(beir, "test")
    mirror = build_index(corpus, settings, cache_dir=tmp_path)
    backend, node = _fake_cluster(settings, mirror, installed=settings.replace(bm25_k1=1.2, bm25_b=0.75))
    with pytest.raises(ConfigError, match=r"created with analyzer=english k1=1.2 b=0.75.*another --index-prefix"):
        evaluate(beir, settings=settings, cache_dir=tmp_path, depth=20, es_backend=backend)
    assert not any(r.path.endswith("_bulk") for r in node.requests)


def test_cli_eval_es_uses_its_own_prefix_and_refuses_ablate(
    beir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import es_rag.evaluation.run
    from es_rag.cli import main

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake_evaluate(dataset: Any, **kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(es_rag.evaluation.run, "evaluate", fake_evaluate)
    with pytest.raises(Stop):
        main(["eval", "--dataset", str(beir), "--es", "http://localhost:9200"])
    assert seen["settings"].index.prefix == "es-rag-eval"
    assert (
        seen["es_backend"].url == "http://localhost:9200" and seen["es_backend"].settings.index.prefix == "es-rag-eval"
    )
    with pytest.raises(Stop):
        main(["eval", "--dataset", str(beir), "--es", "http://x:9200", "--index-prefix", "bench-scifact"])
    assert seen["settings"].index.prefix == "bench-scifact"

    assert main(["eval", "--dataset", str(beir), "--es", "http://localhost:9200", "--ablate"]) != 0
    assert "--ablate runs on the embedded backend only" in capsys.readouterr().err


def test_eval_on_a_cluster_with_chunked_units_scores_documents_like_the_mirror(
    beir: Path, settings: Settings, tmp_path: Path
) -> None:
    unit = ChunkUnit("fixed", 8, 2)
    reference = evaluate(beir, settings=settings, cache_dir=tmp_path, depth=20, unit=unit)
    corpus, _, _ = load_beir(beir, "test")
    mirror = build_chunk_index(corpus, settings, unit, cache_dir=tmp_path)
    assert len(mirror.chunks) > len(corpus)
    backend, node = _fake_cluster(settings, mirror)
    result = evaluate(
        beir, settings=settings, cache_dir=tmp_path, depth=20, unit=unit, es_backend=backend, compare_native=False
    )
    for stage in ("bm25", "dense", "union", "hybrid"):
        assert result["stages"][stage] == reference["stages"][stage], stage
    assert result["stages"]["chunking"]["unit"] == reference["stages"]["chunking"]["unit"]
    bulk = [a for r in node.requests if r.path.endswith("_bulk") for a in bulk_actions(r)]
    assert sorted(meta["_id"] for _, meta, _ in bulk) == sorted(c.chunk_id for c in mirror.chunks)
