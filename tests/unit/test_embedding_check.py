"""Enforcing ``embedding_version`` (issue 19 item 8, seed audit row 19): a query encoder of another model than the
index's vectors is refused with both versions and the command to fix; a match passes; chunks with no recorded version
give a warning, not a refusal (other tools' documents); several versions in one index are refused. The state is read
once per backend (one ``size: 0`` aggregation on Elasticsearch) and again only after a write or when hits come from an
index not checked yet. Both backends; the end-to-end swap cases are in ``tests/e2e/test_reindex.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from es_rag.backend import EmbeddingState, check_embedding, model_key
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.errors import EmbeddingMismatch
from es_rag.filters import SearchFilter
from es_rag.ingest import refuse_mixed_models
from es_rag.pipeline import RagPipeline
from es_rag.records import Chunk
from es_rag.settings import Settings
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster
from tests.support.double.ingest import InferenceEndpoint

DIMS = 8
S = Settings(vector_dims=DIMS, analyzer="standard", rerank_model=None)


class Encoder:
    """A query encoder with a version, as :class:`~es_rag.encoders.embedder.SentenceTransformerEmbedder` has."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.name = version

    def embed_query(self, text: str) -> np.ndarray:
        return np.eye(DIMS, dtype=np.float32)[len(text) % DIMS]


class Words:
    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def truncate(self, text: str, n: int) -> str:
        return " ".join(text.split()[:n])


def chunk(i: int, version: str | None) -> Chunk:
    """A child with a vector; ``version`` None leaves ``embedding_version`` unset (the inference pipeline sets it)."""
    return Chunk(
        chunk_id=f"c{i}",
        source_id=f"s{i}",
        source_version="v1",
        tenant_id="acme",
        acl=("public",),
        parent_id=None,
        heading_path=("H",),
        title="T",
        text=f"alpha beta {i}",
        token_count=3,
        start_offset=0,
        end_offset=12,
        chunker_version="t",
        embedding_version=version,
        vector=np.eye(DIMS, dtype=np.float32)[i % DIMS],
    )


def pipeline(backend: Any, version: str, settings: Settings = S) -> RagPipeline:
    return RagPipeline(backend, embedder=Encoder(version), settings=settings, tokenizer=Words())  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ the rule
def test_the_rule_for_client_vectors() -> None:
    ok = EmbeddingState({"m@1": 5}, 0, ("idx",))
    assert check_embedding(ok, S, "m@1") is None
    with pytest.raises(EmbeddingMismatch, match=r"idx holds vectors of embedding_version m@1, but queries are embedded "
                       r"by m@2: rebuild the index .*es-rag reindex"):  # fmt: skip
        check_embedding(ok, S, "m@2")
    with pytest.raises(EmbeddingMismatch, match=r"several embedding models \(m@1 \(5 chunks\), m@2 \(1 chunks\)\)"):
        check_embedding(EmbeddingState({"m@1": 5, "m@2": 1}, 0, ("idx",)), S, "m@1")
    warning = check_embedding(EmbeddingState({}, 3, ("idx",)), S, "m@1")
    assert warning is not None and "3 chunks carry no embedding_version" in warning
    assert check_embedding(EmbeddingState({}, 0, ("idx",)), S, "m@1") is None  # an empty index
    semantic = Settings(vector_mode="semantic_text", inference_id=".elser-2-elasticsearch")
    assert check_embedding(EmbeddingState({"x": 1}), semantic, "m@1") is None  # one endpoint embeds both sides


def test_the_rule_for_inference_vectors() -> None:
    """The ingest pipeline writes ``inference:<id>``; the client embeds queries with ``embedding_model``: the endpoint
    must be the configured one and run the same model (eland's ``__`` naming, a leading dot and the platform suffix of
    Elasticsearch's built-in models compare equal)."""
    inf = Settings(inference_id="e5", embedding_model="intfloat/multilingual-e5-small", vector_dims=384)
    stored = {"inference:e5": 4}
    assert check_embedding(EmbeddingState(stored, 0, ("i",), ".multilingual-e5-small_linux-x86_64"), inf, "v") is None
    with pytest.raises(
        EmbeddingMismatch, match=r"model all-minilm.*client-side by intfloat/multilingual-e5-small \(v\)"
    ):
        check_embedding(EmbeddingState(stored, 0, ("i",), "all-minilm"), inf, "v")
    with pytest.raises(EmbeddingMismatch, match=r"expects inference:e5"):
        check_embedding(EmbeddingState({"inference:other": 4}, 0, ("i",), "multilingual-e5-small"), inf, "v")
    with pytest.raises(EmbeddingMismatch, match=r"monitor_inference"):
        check_embedding(EmbeddingState(stored, 0, ("i",), None), inf, "v")
    assert model_key("sentence-transformers__all-minilm-l6-v2") == model_key("sentence-transformers/all-MiniLM-L6-v2")


# ------------------------------------------------------------------------------------------------ embedded
def test_embedded_search_refuses_another_model_and_counts_once() -> None:
    backend = EmbeddedBackend(None, dims=DIMS)
    backend.index([chunk(i, "m@1") for i in range(3)])
    flt = SearchFilter("acme")
    result = pipeline(backend, "m@1").search("alpha", flt)
    record = result.trace.record("embed_query")
    assert record is not None and record.info["embedding_check"] == "ok: m@1"
    with pytest.raises(EmbeddingMismatch, match="but queries are embedded by m@2"):
        pipeline(backend, "m@2").search("alpha", flt)
    # the count is cached per backend: searches do not walk the chunks again ...
    first = backend._embedding
    assert first is not None
    pipeline(backend, "m@1").search("alpha", flt)
    assert backend._embedding is first
    # ... until a write changes what the index holds
    backend.index([chunk(9, "m@1")])
    assert backend._embedding is None and backend.embedding_state().versions == {"m@1": 4}


def test_embedded_unversioned_chunks_warn() -> None:
    backend = EmbeddedBackend(None, dims=DIMS)
    backend.index([chunk(1, "m@1")])
    backend._children["c1"].pop("embedding_version")
    backend._embedding = None
    result = pipeline(backend, "m@1").search("alpha", SearchFilter("acme"))
    record = result.trace.record("embed_query")
    assert record is not None and record.info["embedding_check"].startswith("warning: ")
    assert "1 chunks carry no embedding_version" in record.info["embedding_check"]


def test_ingest_refuses_to_mix_models() -> None:
    backend = EmbeddedBackend(None, dims=DIMS)
    refuse_mixed_models(backend, S, "m@2")  # an empty index takes any model
    backend.index([chunk(1, "m@1")])
    refuse_mixed_models(backend, S, "m@1")
    refused = r"ingest refused: .*holds vectors of embedding_version m@1; this ingest would add vectors of m@2"
    with pytest.raises(EmbeddingMismatch, match=refused):
        refuse_mixed_models(backend, S, "m@2")


# ------------------------------------------------------------------------------------------------ Elasticsearch
def test_elasticsearch_reads_the_state_once_per_backend() -> None:
    """One ``size: 0`` aggregation on the first search; none on the next; a bulk write drops the cache."""
    backend, _node, cluster = strict_backend(S, setup=True)
    backend.index([chunk(i, "m@1") for i in range(3)])
    cluster.refresh_all()
    pipe = pipeline(backend, "m@1")
    flt = SearchFilter("acme")
    searches = []
    for _ in range(3):
        before = len(cluster.log)
        pipe.search("alpha", flt)
        searches.append(sum(1 for line in cluster.log[before:] if line == "POST /es-rag-chunks/_search"))
    assert searches[0] == searches[1] + 1 == searches[2] + 1  # the aggregation, on the first search only
    with pytest.raises(EmbeddingMismatch, match="es-rag-chunks holds vectors of embedding_version m@1, but queries are "
                       "embedded by m@2"):  # fmt: skip
        pipeline(backend, "m@2").search("alpha", flt)
    backend.index([chunk(7, "m@1")])
    assert backend._embedding is None


def test_elasticsearch_inference_mode_needs_the_endpoints_model() -> None:
    """Vector mode inference: the ingest pipeline embeds documents with the endpoint, the client embeds queries. The
    endpoint's ``model_id`` comes from the probe (``GET _inference/_all``)."""
    cluster = StrictCluster(endpoints=[InferenceEndpoint("minilm", dims=DIMS, model_id="sentence-transformers__m1")])
    settings = S.replace(inference_id="minilm", embedding_model="sentence-transformers/m1")
    backend, _node, cluster = strict_backend(settings, cluster, setup=True)
    backend.index([chunk(i, None) for i in range(2)])
    cluster.refresh_all()
    assert backend.embedding_state().versions == {"inference:minilm": 2}
    assert backend.embedding_state().endpoint_model == "sentence-transformers__m1"
    pipeline(backend, "sentence-transformers/m1@local", settings).search("alpha", SearchFilter("acme"))
    other = S.replace(inference_id="minilm", embedding_model="intfloat/e5")
    with pytest.raises(EmbeddingMismatch, match=r"model sentence-transformers__m1.*client-side by intfloat/e5"):
        RagPipeline(backend, embedder=Encoder("e5@1"), settings=other, tokenizer=Words()).search(  # type: ignore[arg-type]
            "alpha", SearchFilter("acme")
        )
