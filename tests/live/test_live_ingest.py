"""Live-cluster ingestion tests (skipped unless ``ES_URL`` is set): the real chunks pipeline on chunks
from the real chunker (``_simulate``), the atomic version switch through the registry terms lookup, and
lineage delete with 0 remaining."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from es_rag.chunking import StructureChunker, visible_text
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.elasticsearch.versions import EsVersionStore
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, delete_source, ingest_documents

pytestmark = pytest.mark.live


class HashEmbedder:
    """Deterministic 4-dimensional vectors (the live indices use ``vector_dims=4``); the vectors are not
    under test here, the lineage is."""

    version = "hash-4d"

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for t in texts:
            digest = hashlib.sha256(t.encode("utf-8")).digest()
            v = np.frombuffer(digest[:16], dtype=np.uint32).astype(np.float32) + 1.0
            out.append(v / np.linalg.norm(v))
        return np.stack(out)


def _doc(version: str, body: str) -> SourceDoc:
    return SourceDoc("live-guide", f"# Guide\n\n{body}\n", "acme", ("public",), version)


def _served_versions(backend: ElasticsearchBackend) -> set[str]:
    flt = backend.snapshot_versions(SearchFilter("acme"))
    body = {"size": 100, "query": {"bool": {"filter": flt.to_es()}}, "_source": ["source_version"]}
    resp = backend.send(EsRequest("POST", f"{backend.settings.chunk_index}/_search", body))
    return {h["_source"]["source_version"] for h in resp["hits"]["hits"]}


def test_simulate_real_pipeline_on_real_chunks(installed: ElasticsearchBackend, minilm_tokenizer: Any) -> None:
    html = "<h1>Guide</h1><p>Remote wipe is available.</p>"
    chunker = StructureChunker(minilm_tokenizer, max_tokens=64, contextual=True)
    child = next(
        c
        for c in chunker.chunk(html, source_id="s", source_version="v1", tenant_id="acme", acl=["public"], fmt="html")
        if c.kind == "child"
    )
    body = {"docs": [{"_index": installed.settings.chunk_index, "_id": "x", "_source": child.to_source()}]}
    resp = installed.send(EsRequest("POST", f"_ingest/pipeline/{installed.settings.pipeline_id}/_simulate", body))
    (item,) = resp["docs"]
    doc = item["doc"]
    assert doc["_id"] == child.chunk_id
    assert doc["_source"]["version_key"] == "s@v1"
    assert doc["_source"]["contextual_text"].startswith("Guide\nGuide\n\n")
    assert doc["_source"]["text"] == visible_text(html)[child.start_offset : child.end_offset]  # one clean text
    assert doc["_source"]["content_hash"]


def test_version_switch_is_one_registry_write(installed: ElasticsearchBackend, minilm_tokenizer: Any) -> None:
    chunker = StructureChunker(minilm_tokenizer, max_tokens=64)
    emb = HashEmbedder()
    ingest_documents([_doc("v1", "Old text.")], chunker=chunker, embedder=emb, backend=installed)
    assert _served_versions(installed) == {"v1"}

    # step by step: v2 written and refreshed but not committed -> still only v1 served
    store = EsVersionStore(installed)
    store.begin("acme", [("live-guide", "v2")])
    chunks = chunker.chunk(
        "# Guide\n\nNew text.\n", source_id="live-guide", source_version="v2", tenant_id="acme", acl=["public"]
    )
    kids = [c for c in chunks if c.kind == "child"]
    vecs = emb.embed_documents([c.text for c in kids])
    installed.index(
        [c.with_vector(v, emb.version) for c, v in zip(kids, vecs, strict=True)],
        [c for c in chunks if c.kind == "parent"],
    )
    store.refresh()
    assert _served_versions(installed) == {"v1"}
    retired = store.commit("acme", [("live-guide", "v2")])
    assert retired == [("live-guide", "v1")]
    assert _served_versions(installed) == {"v2"}  # real-time GET of the registry: no refresh needed
    store.purge("acme", retired)
    assert store.state("acme").hidden == []


def test_delete_source_leaves_nothing(installed: ElasticsearchBackend, minilm_tokenizer: Any) -> None:
    chunker = StructureChunker(minilm_tokenizer, max_tokens=64)
    ingest_documents([_doc("v9", "To delete.")], chunker=chunker, embedder=HashEmbedder(), backend=installed)
    result = delete_source(installed, "acme", "live-guide")
    assert result["deleted"] > 0
    assert result["remaining"] == {"chunks": 0, "parents": 0}
    assert "live-guide" not in EsVersionStore(installed).state("acme").active


def test_embedding_input_processors_pick_contextual_text_else_text(installed: ElasticsearchBackend) -> None:
    """The chunks-inference pipeline's embedding-input processors (everything before the ``inference``
    processor, which needs an endpoint) simulated on the real cluster: the input is ``Chunk.embed_text``."""
    from es_rag.elasticsearch.assets import render_asset

    settings = installed.settings.replace(inference_id="es-rag-live-missing-endpoint")
    processors = render_asset("ingest_pipelines", "chunks-inference", settings)["processors"]
    kinds = [next(iter(p)) for p in processors]
    pipeline = {"processors": processors[: kinds.index("inference")]}
    base = {"chunk_id": "c", "tenant_id": "acme", "source_id": "s", "text": "raw <b>span</b>"}
    docs = [{"_source": base}, {"_source": {**base, "contextual_text": "visible span"}}]
    resp = installed.send(EsRequest("POST", "_ingest/pipeline/_simulate", {"pipeline": pipeline, "docs": docs}))
    got = [d["doc"]["_source"]["_es_rag_embed_input"] for d in resp["docs"]]
    assert got == ["raw <b>span</b>", "visible span"]


def test_semantic_text_mode_end_to_end(live_backend: ElasticsearchBackend, minilm_tokenizer: Any) -> None:
    """vector_mode semantic_text on a cluster with a usable endpoint (skipped otherwise): sections are
    written, the semantic query finds them under the tenant filter, highlights name a server chunk."""
    import os

    from es_rag.elasticsearch.assets import setup_requests
    from es_rag.settings import Settings

    inference_id = os.environ.get("ES_RAG_LIVE_INFERENCE_ID", ".multilingual-e5-small-elasticsearch")
    settings = Settings(
        index_prefix=f"{live_backend.settings.index.prefix}-sem", inference_id=inference_id, vector_mode="semantic_text"
    )
    backend = ElasticsearchBackend(live_backend.client, settings)
    support = backend.doctor()["semantic_text"]
    if not support["usable"]:
        pytest.skip(f"semantic_text not usable here: {support['reason']}")
    try:
        backend.setup()
        chunker = StructureChunker(minilm_tokenizer, max_tokens=64)
        doc = _doc("v1", "Remote wipe erases a lost laptop. Keys rotate every 90 days.")
        report = ingest_documents([doc], chunker=chunker, embedder=None, backend=backend, server_chunking=True)
        assert not report.failed and report.indexed >= 1
        ret = backend.retrieve(
            "how often do keys rotate", None, backend.snapshot_versions(SearchFilter("acme")), settings
        )
        hits = ret.fused if ret.fused is not None else ret.channels.get("dense", [])
        assert hits and all(h.tenant_id == "acme" for h in hits)
    finally:
        for index in (settings.chunk_index, settings.parent_index, f"{settings.index.prefix}-versions"):
            backend.send(EsRequest("DELETE", index), ignore=(404,))
        for req in reversed(setup_requests(settings)):
            backend.send(EsRequest("DELETE", req.path), ignore=(404,))
