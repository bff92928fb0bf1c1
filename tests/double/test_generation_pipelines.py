"""Blue-green in inference mode (issue 29, second review): each generation has its own chunk pipeline.

An index names its ingest pipeline in ``index.default_pipeline`` and Elasticsearch resolves that name on every
write (``IngestService.resolvePipelines``; ``IndexSettings.DEFAULT_PIPELINE``). The pipeline id was per prefix and
mode, so ``reindex --inference-id B`` overwrote the pipeline the live generation names, and every later write into
the live index (or into the old one after ``--rollback``) was embedded by endpoint B.
"""

from __future__ import annotations

from es_rag.chunking import StructureChunker
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.reindex import EsGenerations
from es_rag.settings import Settings
from tests.support.corpus import RandomEmbedder, WordTokenizer
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster
from tests.support.double.ingest import InferenceEndpoint

DIMS = 4
S = Settings(vector_dims=DIMS, inference_id="e5-a", rerank_model=None)


def _doc(name: str) -> SourceDoc:
    return SourceDoc(name, f"# {name}\n\nAlpha text of {name}.", "acme", ("public",), source_version="v1")


def _ingest(backend: object, name: str) -> None:
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    report = ingest_documents([_doc(name)], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    assert report.failed == []


def test_a_new_generation_with_another_endpoint_leaves_the_live_pipeline_alone() -> None:
    a, b = InferenceEndpoint("e5-a", dims=DIMS), InferenceEndpoint("e5-b", dims=DIMS)
    backend, _node, cluster = strict_backend(S, StrictCluster(endpoints=[a, b]), setup=True)
    live_pipeline = cluster.indices[S.chunk_index].settings["index.default_pipeline"]
    generations = EsGenerations(backend)
    new = generations.open_new(S.replace(inference_id="e5-b"), "g2")
    new_pipeline = cluster.indices[new.settings.chunk_index].settings["index.default_pipeline"]
    assert new_pipeline != live_pipeline
    _ingest(new, "new.md")
    assert b.calls and not a.calls
    b.calls.clear()
    _ingest(backend, "live.md")  # a write into the live generation, after the new one was built
    assert a.calls and not b.calls, "the live index's writes must keep the endpoint it was built with"


def test_deleting_a_generation_deletes_its_pipeline_and_keeps_the_live_one() -> None:
    a = InferenceEndpoint("e5-a", dims=DIMS)
    backend, _node, cluster = strict_backend(S, StrictCluster(endpoints=[a]), setup=True)
    generations = EsGenerations(backend)
    new = generations.open_new(S, "g2")
    assert new.settings.pipeline_id in cluster.pipelines
    done = generations.delete("g2")
    assert f"DELETE _ingest/pipeline/{new.settings.pipeline_id}" in done
    assert new.settings.pipeline_id not in cluster.pipelines
    assert S.pipeline_id in cluster.pipelines


def test_the_double_refuses_deleting_a_pipeline_an_index_writes_through() -> None:
    """``IngestService.innerDelete``: "pipeline [x] cannot be deleted because it is the default pipeline for N
    index(es) including [...]", which is why a generation's pipeline is deleted after its indices."""
    a = InferenceEndpoint("e5-a", dims=DIMS)
    _backend, _node, cluster = strict_backend(S, StrictCluster(endpoints=[a]), setup=True)
    status, body = cluster.handle("DELETE", f"_ingest/pipeline/{S.pipeline_id}", "", None, {})
    assert status == 400
    assert body["error"]["reason"] == (
        f"pipeline [{S.pipeline_id}] cannot be deleted because it is the default pipeline for 1 index(es) including "
        f"[{S.chunk_index}]"
    )
