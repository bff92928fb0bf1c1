"""Regression tests of the first-contact review (issue 11): what a real 9.5 node refused or got wrong, checked
against the strict double (:mod:`tests.double`), whose rules cite the Elasticsearch source that defines them.
Each test fails on the code before the fix (the commit message of each fix says how it was observed)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest

from es_rag.backend import content_hash
from es_rag.elasticsearch.assets import render_asset, setup_requests
from es_rag.embedded.backend import EmbeddedBackend, knn_scores
from es_rag.errors import ConfigError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.ingest import ingest_documents
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings, Similarity
from es_rag.versions.registry import VersionSnapshot, registry_index
from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer, random_corpus
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster
from tests.support.double.ingest import InferenceEndpoint

E5 = ".multilingual-e5-small-elasticsearch"
MODES = {
    "client": Settings(vector_dims=DIMS),
    "inference": Settings(vector_dims=DIMS, inference_id=E5),
    "semantic_text": Settings(vector_dims=DIMS, inference_id=E5, vector_mode="semantic_text"),
}


def _cluster(version: str = "9.5.0", **kw: Any) -> StrictCluster:
    return StrictCluster(version=version, endpoints=[InferenceEndpoint(E5, dims=DIMS)], **kw)


# ---------------------------------------------------------------------------------------------- finding 1
@pytest.mark.parametrize("version", ["9.5.0", "9.1.0", "8.18.0"])
@pytest.mark.parametrize("mode", list(MODES))
def test_setup_is_accepted_request_by_request(mode: str, version: str) -> None:
    backend, node, cluster = strict_backend(MODES[mode], _cluster(version))
    if mode == "semantic_text" and version == "8.18.0":
        # field-level chunking_settings exist from 8.19 / 9.1: refused before anything is written
        with pytest.raises(ConfigError, match=r"nothing was sent: vector_mode semantic_text: .*chunking_settings"):
            backend.setup()
        assert not node.calls("PUT")
        return
    rows = backend.setup()
    assert [r["acknowledged"] for r in rows] == [True] * len(rows), rows
    assert {MODES[mode].chunk_index, MODES[mode].parent_index} <= set(cluster.indices)


def test_a_mapping_component_without_its_own_analysis_is_refused() -> None:
    """The layout before the fix: analysis in one component, the mappings naming it in another."""
    s = Settings()
    chunks = render_asset("index_templates", "component-chunks", s)
    settings_only = {"template": {"settings": chunks["template"]["settings"]}}
    mappings_only = {"template": {"mappings": chunks["template"]["mappings"]}}
    cluster = _cluster()
    assert cluster.handle("PUT", "_component_template/a", "", settings_only, {})[0] == 200
    status, body = cluster.handle("PUT", "_component_template/b", "", mappings_only, {})
    assert status == 400
    assert (
        body["error"]["reason"] == "Failed to parse mapping: analyzer [es_rag_text] has not been configured in mappings"
    )


# ---------------------------------------------------------------------------------------------- finding 2
def test_inference_mode_documents_land_with_their_server_side_vector() -> None:
    s = MODES["inference"]
    backend, _, cluster = strict_backend(s, _cluster(), setup=True)
    corpus = random_corpus(random.Random(1), n_children=6)
    # as ingest hands them over in inference mode: no client vector, no embedding version (the pipeline sets it)
    children = [dataclasses.replace(c, vector=None, embedding_version=None) for c in corpus.children]
    report = backend.index(children, corpus.parents)
    assert report.failed == [], report.failed
    assert report.indexed == len(corpus.children) + len(corpus.parents)
    stored = cluster.docs(s.chunk_index)
    assert set(stored) == {c.chunk_id for c in corpus.children}
    for doc in stored.values():
        assert len(doc["vector"]) == DIMS and "model_id" not in doc and "_es_rag_embed_input" not in doc
        assert doc["embedding_version"] == f"inference:{E5}"
    assert len(cluster.endpoints[E5].calls) == len(corpus.children)


def test_the_inference_pipeline_without_its_cleanup_is_refused_by_the_strict_mapping() -> None:
    """What the review found: InferenceProcessor's model_id at the root meets ``dynamic: strict``."""
    s = MODES["inference"]
    cluster = _cluster()
    backend, _, _ = strict_backend(s, cluster, setup=True)
    body = render_asset("ingest_pipelines", "chunks-inference", s)
    for proc in body["processors"]:  # as before the fix: only the temporary input field was removed
        if "remove" in proc:
            proc["remove"]["field"] = "_es_rag_embed_input"
    assert cluster.handle("PUT", f"_ingest/pipeline/{s.pipeline_id}", "", body, {})[0] == 200
    corpus = random_corpus(random.Random(1), n_children=3)
    report = backend.index(corpus.children)
    assert report.indexed == 0 and len(report.failed) == 3
    assert all("dynamic introduction of [model_id] within [_doc]" in f["reason"] for f in report.failed)


# ---------------------------------------------------------------------------------------------- finding 3
def test_content_hash_is_the_fingerprint_processor_output_on_every_backend() -> None:
    s = MODES["client"]
    backend, _, cluster = strict_backend(s, _cluster(), setup=True)
    corpus = random_corpus(random.Random(2), n_children=8)
    assert backend.index(corpus.children, corpus.parents).failed == []
    embedded = EmbeddedBackend(dims=DIMS)
    assert embedded.index(corpus.children, corpus.parents).failed == []
    for index in (s.chunk_index, s.parent_index):
        for doc in cluster.docs(index).values():
            assert doc["content_hash"] == content_hash(doc["text"])
    for c in corpus.children:
        assert embedded._children[c.chunk_id]["content_hash"] == cluster.docs(s.chunk_index)[c.chunk_id]["content_hash"]


def test_content_hash_byte_layout_matches_elasticsearch_test_vectors() -> None:
    """FingerprintProcessorTests.testIgnoreMissing: one present field ``foo`` = "foo", SHA-1."""
    assert content_hash("foo", method="SHA-1") == "WoyqQDn9vALAGmScjA9Z2yg7sos="


# ---------------------------------------------------------------------------------------------- finding 4
def _switching_cluster() -> tuple[Any, Any, StrictCluster, Settings]:
    s = Settings(vector_dims=DIMS, rerank_model=None, candidate_k=10, num_candidates=20, rerank_k=10, context_k=3)
    backend, node, cluster = strict_backend(s, _cluster(), setup=True)
    return backend, node, cluster, s


def _doc(version: str) -> Any:
    from es_rag.ingest import SourceDoc

    text = "# Sync\n\nThe sync engine retries uploads ({v}).\n\n## Wipe\n\nA device wipe removes tokens ({v})."
    text = text.format(v=version)
    return SourceDoc(source_id="guide.md", text=text, tenant_id="acme", acl=("public",), source_version=version)


def test_terms_lookup_per_clause_could_serve_two_versions_in_one_search() -> None:
    """Why the gate is a snapshot: with the lookup form, a registry write between the per-clause GETs of one
    search (TermsQueryBuilder.doRewrite registers one GET per clause) hides the old version from one channel and
    the new one from the other."""
    from es_rag.chunking import StructureChunker
    from es_rag.ingest import IngestReport, chunk_documents

    backend, _node, cluster, s = _switching_cluster()
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    ingest_documents([_doc("v1")], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    # v2 written but not yet switched (the state between begin and commit of a re-ingest)
    children, _ = chunk_documents([_doc("v2")], chunker, IngestReport())
    vectors = RandomEmbedder().embed_documents([c.embed_text for c in children])
    assert backend.index([c.with_vector(v, "random") for c, v in zip(children, vectors, strict=True)]).failed == []
    cluster.refresh_all()
    registry = f"{registry_index(s)}/_doc/acme"
    before = {"tenant_id": "acme", "active": {"guide.md": "v1"}, "hidden": ["guide.md@v2"]}
    after = {"tenant_id": "acme", "active": {"guide.md": "v2"}, "hidden": ["guide.md@v1"]}
    cluster.handle("PUT", registry, "", before, {})
    lookups: list[str] = []

    def switch_between_lookups(index: str, doc_id: str) -> None:
        lookups.append(doc_id)
        if len(lookups) == 2:  # the commit lands after the first channel's lookup, before the second's
            cluster.handle("PUT", registry, "", after, {})

    cluster.before_lookup.append(switch_between_lookups)
    lookup_flt = SearchFilter("acme").with_versions(VersionSnapshot("acme", index=registry_index(s)))
    vec = RandomEmbedder().embed_query("sync engine retries")
    ret = backend.retrieve("sync engine retries", vec, lookup_flt, s.replace(fusion_path="client"))
    versions = {name: {h.source_version for h in hits} for name, hits in ret.channels.items()}
    assert lookups == ["acme"] * 4  # per channel: the hidden keys and the superseded sources
    assert versions == {"bm25": {"v1"}, "dense": {"v2"}}  # two versions served by one search


def test_a_search_reads_the_registry_once_and_inlines_it_everywhere() -> None:
    from es_rag.chunking import StructureChunker

    backend, node, cluster, s = _switching_cluster()
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    for version in ("v1", "v2"):
        ingest_documents([_doc(version)], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    node.reset()
    lookups_before = cluster.lookups
    pipe = RagPipeline(
        backend, embedder=RandomEmbedder(), settings=s.replace(expand_mode="neighbors"), tokenizer=WordTokenizer()
    )
    result = pipe.search("sync engine retries wipe", SearchFilter("acme"))
    assert {h.source_version for h in result.candidates} == {"v2"}
    assert cluster.lookups == lookups_before  # no terms lookup left in any request
    reads = node.calls("GET", f"{registry_index(s)}/_doc/acme")
    assert len(reads) == 1 and node.requests.index(reads[0]) < min(
        node.requests.index(r) for r in node.requests if r.path.endswith(("_search", "_msearch"))
    )


# ---------------------------------------------------------------------------------------------- finding 6
def test_index_options_are_explicit_so_9_1_does_not_pick_bbq() -> None:
    s = Settings()  # 384 dims: a 9.1+ node would default to bbq_hnsw (1-bit)
    _, _, cluster = strict_backend(s, _cluster(), setup=True)
    mapping = cluster.handle("GET", f"{s.chunk_index}/_mapping", "", None, {})[1]
    assert mapping[s.chunk_index]["mappings"]["properties"]["vector"]["index_options"] == {"type": "hnsw"}
    bbq = Settings(vector_index_type="bbq_hnsw")
    (component,) = [
        r for r in setup_requests(bbq) if r.path.endswith(f"{bbq.index.prefix}-chunks") and "component" in r.path
    ]
    assert component.body["template"]["mappings"]["properties"]["vector"]["index_options"] == {
        "type": "bbq_hnsw",
        "rescore_vector": {"oversample": 3.0},
    }


@pytest.mark.parametrize("similarity", list(Similarity))
def test_embedded_knn_scores_equal_the_cluster_scores(similarity: Similarity) -> None:
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(6, DIMS)).astype(np.float32)
    if similarity is Similarity.DOT_PRODUCT:
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[0] * 0.5 + vectors[1] * 0.5
    if similarity is Similarity.DOT_PRODUCT:
        query /= np.linalg.norm(query)
    cluster = _cluster()
    props = {
        "v": {"type": "dense_vector", "dims": DIMS, "similarity": similarity.value, "index_options": {"type": "hnsw"}}
    }
    cluster.handle("PUT", "v", "", {"mappings": {"properties": props}}, {})
    lines: list[dict[str, Any]] = []
    for i, vec in enumerate(vectors):
        lines += [{"index": {"_index": "v", "_id": str(i)}}, {"v": [float(x) for x in vec]}]
    assert cluster.handle("POST", "_bulk", "refresh=true", lines, {})[1]["errors"] is False
    knn = {"field": "v", "query_vector": [float(x) for x in query], "k": 6, "num_candidates": 6}
    hits = cluster.handle("POST", "v/_search", "", {"knn": knn, "size": 6}, {})[1]["hits"]["hits"]
    ours = knn_scores(vectors, query, similarity)
    for h in hits:
        assert h["_score"] == pytest.approx(float(ours[int(h["_id"])]), rel=1e-5), similarity


def test_the_embedded_backend_refuses_what_the_mapping_refuses() -> None:
    from es_rag.records import Chunk

    backend = EmbeddedBackend(dims=2, similarity="dot_product")
    chunk = Chunk(
        chunk_id="c",
        source_id="s",
        source_version="1",
        parent_id=None,
        heading_path=(),
        start_offset=0,
        end_offset=1,
        chunker_version="x",
        tenant_id="t",
        acl=("public",),
        title="",
        text="x",
        token_count=1,
        vector=np.array([0.5, 0.5], dtype=np.float32),
    )
    report = backend.index([chunk])
    assert report.indexed == 0 and "unit-length" in report.failed[0]["reason"]
    zero = dataclasses.replace(chunk, vector=np.zeros(2, np.float32))
    refused = EmbeddedBackend(dims=2).index([zero]).failed
    assert refused[0]["reason"].startswith("The [cosine] similarity does not support vectors with zero magnitude")


def test_request_of_setup_paths_are_all_rendered() -> None:
    """Sanity: the requests a strict node accepted are exactly what ``setup --dry-run`` prints."""
    s = MODES["client"]
    _, node, _ = strict_backend(s, _cluster(), setup=True)
    puts = [r.line for r in node.requests if r.method == "PUT" and not r.path.startswith(f"/{s.index.prefix}")]
    assert puts == [f"PUT /{r.path}" for r in setup_requests(s)]
    assert isinstance(EsRequest("GET", "x"), EsRequest)
