"""Requests whose validity depends on the cluster's version (issue 29, second review), each checked against the
version gate in Elasticsearch's source on the strict double, where the double refuses what that version refuses.

* ``index_options.rescore_vector`` in a ``dense_vector`` mapping: 9.1+ and 8.19 only
  (``DenseVectorFieldMapper.hasRescoreIndexVersion``: ``IndexVersions.ADD_RESCORE_PARAMS_TO_QUANTIZED_VECTORS``
  9_015_0_00 and ``..._BACKPORT_8_X`` 8_528_0_00). es_rag wrote ``oversample: 3.0`` for ``bbq_*`` on every version,
  so ``setup`` failed on 9.0 and 8.18. The search-time ``rescore_vector`` of a kNN search exists from 8.18
  (``RescoreVectorBuilder``; oversample >= 1, or 0 from 9.1 / 8.19), so es_rag now carries the oversample there.
* ``_source.exclude_vectors``: parsed from 9.1 and 8.19 (``FetchSourceContext.EXCLUDE_VECTORS_FIELD``, transport
  version ``search_source_exclude_vectors_param`` 9092000 / 8841046), not 9.2.
"""

from __future__ import annotations

from typing import Any

import pytest

from es_rag.chunking import StructureChunker
from es_rag.elasticsearch.assets import render_asset
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.corpus import RandomEmbedder, WordTokenizer
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster

DIMS = 64  # bbq_* needs at least 64 dims
BBQ = Settings(
    vector_dims=DIMS,
    vector_index_type="bbq_hnsw",
    rerank_model=None,
    candidate_k=10,
    num_candidates=20,
    rerank_k=10,
    context_k=3,
)
ALL = ("8.18.0", "8.19.0", "9.0.0", "9.1.0", "9.5.0")
MAPPING_RESCORE = {"8.18.0": False, "8.19.0": True, "9.0.0": False, "9.1.0": True, "9.5.0": True}


def _mapping_vector(cluster: StrictCluster) -> dict[str, Any]:
    status, body = cluster.handle("GET", f"{BBQ.chunk_index}/_mapping", "", None, {})
    assert status == 200, body
    ((_, index),) = body.items()
    spec: dict[str, Any] = index["mappings"]["properties"]["vector"]
    return spec


@pytest.mark.parametrize("version", ALL)
def test_a_bbq_index_sets_up_and_rescores_on_every_supported_version(version: str) -> None:
    backend, node, cluster = strict_backend(BBQ, StrictCluster(version=version), setup=True)
    options = _mapping_vector(cluster)["index_options"]
    assert options["type"] == "bbq_hnsw"
    assert ("rescore_vector" in options) is MAPPING_RESCORE[version]
    doc = SourceDoc("guide.md", "# A\n\nAlpha one.\n\n# B\n\nBeta two.", "acme", ("public",), source_version="v1")
    embedder = RandomEmbedder(DIMS)
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    assert ingest_documents([doc], chunker=chunker, embedder=embedder, backend=backend).failed == []
    cluster.refresh_all()
    node.reset()
    pipe = RagPipeline(backend, embedder=embedder, settings=BBQ, tokenizer=WordTokenizer())
    result = pipe.search("alpha", SearchFilter("acme", ("public",)))
    assert result.candidates
    sent = str([r.body for r in node.calls("POST", ".*/_(m)?search")])
    assert "'rescore_vector': {'oversample': 3.0}" in sent  # the search-time oversample, on every version


@pytest.mark.parametrize(
    ("version", "accepted"), [("8.18.0", False), ("9.0.0", False), ("8.19.0", True), ("9.1.0", True)]
)
def test_the_double_gates_the_mapping_rescore_vector_by_version(version: str, accepted: bool) -> None:
    cluster = StrictCluster(version=version)
    body = render_asset("index_templates", "component-chunks", BBQ)  # rendered for the newest: carries it
    assert "rescore_vector" in body["template"]["mappings"]["properties"]["vector"]["index_options"]
    status, answer = cluster.handle("PUT", "_component_template/x-chunks", "", body, {})
    if accepted:
        assert status == 200, answer
    else:
        assert status == 400
        assert "has unsupported parameters" in answer["error"]["reason"]
        assert "rescore_vector" in answer["error"]["reason"]


def test_rendered_for_an_old_version_the_mapping_leaves_rescore_vector_out() -> None:
    for version, kept in ((9, 0, 3), False), ((8, 18, 0), False), ((8, 19, 1), True), ((9, 1, 0), True):
        opts = BBQ.index.vector_index_options(version)
        assert ("rescore_vector" in opts) is kept, version


@pytest.mark.parametrize(
    ("version", "oversample", "reason"),
    [
        ("9.5.0", 0.5, "[oversample] must be >= 1.0 or 0"),
        ("9.0.0", 0.0, "[oversample] must be >= 1.0"),
        ("9.1.0", 0.0, None),
        ("8.18.0", 2.0, None),
    ],
)
def test_the_double_checks_the_search_time_rescore_vector(version: str, oversample: float, reason: str | None) -> None:
    _backend, _node, cluster = strict_backend(BBQ, StrictCluster(version=version), setup=True)
    knn = {"field": "vector", "query_vector": [0.1] * DIMS, "k": 3, "num_candidates": 5}
    body = {"knn": {**knn, "rescore_vector": {"oversample": oversample}}}
    status, answer = cluster.handle("POST", f"{BBQ.chunk_index}/_search", "", body, {})
    if reason is None:
        assert status == 200, answer
    else:
        assert status == 400
        assert answer["error"]["caused_by"]["reason"] == reason


@pytest.mark.parametrize(
    ("version", "accepted"), [("9.0.0", False), ("8.18.0", False), ("9.1.0", True), ("8.19.0", True)]
)
def test_exclude_vectors_parses_from_9_1_and_8_19(version: str, accepted: bool) -> None:
    backend, _node, cluster = strict_backend(BBQ, StrictCluster(version=version), setup=True)
    assert backend.probe().vectors_in_source_param is accepted
    body = {"_source": {"includes": ["chunk_id"], "exclude_vectors": False}, "query": {"match_all": {}}}
    status, answer = cluster.handle("POST", f"{BBQ.chunk_index}/_search", "", body, {})
    assert (status == 200) is accepted, answer


@pytest.mark.parametrize(("version", "kept"), [("9.0.0", False), ("9.1.0", True)])
def test_setup_dry_run_renders_an_oversample_of_0_for_the_clusters_version(
    version: str, kept: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """``oversample: 0`` (rescoring off) is a mapping value only 9.1 / 8.19 accept: ``setup --dry-run`` against a
    cluster probes its version for it as for any other oversample (it once probed only a non-zero one)."""
    from es_rag.cli import main
    from tests.support.double.http import serve

    with serve(StrictCluster(version=version)) as url:
        argv = ["setup", "--es", url, "--dry-run", "--format", "json", "--vector-dims", "64"]
        assert main([*argv, "--vector-index-type", "int8_hnsw", "--vector-rescore-oversample", "0"]) == 0
    out = capsys.readouterr().out
    assert ('"rescore_vector"' in out) is kept
