"""Privileges the second review found missing (issue 29), on the strict double's privilege model.

* ``text_similarity_reranker`` runs ``GetInferenceModelAction`` as the caller
  (``TextSimilarityRankFeaturePhaseRankCoordinatorContext``: ``client.execute(GetInferenceModelAction.INSTANCE, ...)``),
  which needs cluster ``monitor_inference`` (``cluster:monitor/xpack/inference/get``). The documented search role
  lacked it, so every such search sent a request that was refused, then fell back without saying why.
* ``reindex`` needs index ``manage`` (``POST _aliases``) and ``delete_index`` besides setup's and ingest's
  privileges; neither was documented nor checked before hours of embedding.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from es_rag.chunking import StructureChunker
from es_rag.elasticsearch.probe import ROLE_PRIVILEGES
from es_rag.elasticsearch.wrappers import MONITOR_INFERENCE_MISSING, refused_wrapper
from es_rag.errors import ClusterError, ConfigError
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.pipeline import RagPipeline
from es_rag.reindex import EsGenerations
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer, random_corpus
from tests.support.double.client import strict_backend
from tests.support.double.cluster import Role, StrictCluster
from tests.support.double.ingest import InferenceEndpoint

RERANK_ID = "my-rerank"
S = Settings(vector_dims=DIMS, candidate_k=8, num_candidates=16, rerank_k=6, context_k=3, rerank_model=None)
ADMIN = Role(cluster=("all",), indices=((("*",), ("all",)),))


def _cluster(use: str, role: Role | None = None) -> StrictCluster:
    need = ROLE_PRIVILEGES[use]
    names = (f"{S.index.prefix}-*",)
    role = role or Role(cluster=tuple(need["cluster"]), indices=((names, tuple(need["index"])),))
    return StrictCluster(
        users={"admin": ("pw", ("admin",)), "u": ("pw", ("u",))},
        roles={"admin": ADMIN, "u": role},
        endpoints=[InferenceEndpoint(RERANK_ID, task_type="rerank")],
    )


def _search_as(cluster: StrictCluster, *, unreadable_inference: bool = False) -> tuple[Any, Any]:
    settings = S.replace(rerank_inference_id=RERANK_ID)
    admin, _, _ = strict_backend(settings, cluster, setup=True, basic_auth=("admin", "pw"))
    corpus = random_corpus(random.Random(3), n_children=12)
    assert admin.index(corpus.children, corpus.parents).failed == []
    cluster.refresh_all()
    backend, node, _ = strict_backend(settings, cluster, basic_auth=("u", "pw"))
    if unreadable_inference:  # what the probe records when GET _inference/_all answers 403
        backend.probe().unreadable["_inference/_all"] = "HTTP 403: needs cluster privilege monitor_inference"
    pipe = RagPipeline(backend, embedder=RandomEmbedder(), settings=settings, tokenizer=WordTokenizer())
    node.reset()
    return pipe.search("sync error", SearchFilter("acme", ("support",))), node


def _retrievers(node: Any) -> list[str]:
    return [next(iter(r.body["retriever"])) for r in node.calls("POST", ".*/_search") if "retriever" in r.body]


def test_the_documented_rerank_role_reranks_in_elasticsearch() -> None:
    result, node = _search_as(_cluster("es_rerank"))
    assert _retrievers(node) == ["text_similarity_reranker"]
    rerank = result.trace.record("rerank")
    assert rerank is not None and "es_rerank_fallback" not in rerank.info


def test_without_monitor_inference_no_doomed_request_is_sent_and_the_trace_says_why() -> None:
    """The probe records ``GET _inference/_all`` answered 403 (the same action as the reranker's model lookup):
    the first search already leaves ``text_similarity_reranker`` out and says why."""
    result, node = _search_as(_cluster("es_rerank"), unreadable_inference=True)
    assert _retrievers(node) == ["rrf"]
    rerank = result.trace.record("rerank")
    assert rerank is not None and rerank.info["es_rerank_fallback"] == MONITOR_INFERENCE_MISSING


def test_a_refusal_at_search_time_for_monitor_inference_is_named_and_sticky() -> None:
    exc = ClusterError(
        "POST /x/_search: permission denied: action [cluster:monitor/xpack/inference/get] is unauthorized",
        status=403,
    )
    assert refused_wrapper(exc, es_rerank=True, diversify=False) == ("text_similarity_reranker", True)
    assert refused_wrapper(exc, es_rerank=False, diversify=False) is None


def _docs(tag: str) -> list[SourceDoc]:
    return [SourceDoc("g.md", f"# A\n\nalpha {tag}", "acme", ("public",), source_version=tag)]


def test_the_documented_reindex_role_builds_swaps_and_cleans_up() -> None:
    cluster = _cluster("reindex")
    admin, _, _ = strict_backend(S, cluster, setup=True, basic_auth=("admin", "pw"))
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    assert ingest_documents(_docs("1"), chunker=chunker, embedder=RandomEmbedder(), backend=admin).failed == []
    backend, _, _ = strict_backend(S, cluster, basic_auth=("u", "pw"))
    store = EsGenerations(backend)
    store.preflight()
    for generation in ("g1", "g2"):
        new = store.open_new(S, generation)
        report = ingest_documents(_docs(generation), chunker=chunker, embedder=RandomEmbedder(), backend=new)
        assert report.failed == []
        store.swap(generation, migrate=generation == "g1")  # the first swap replaces the concrete indices
    assert store.live() == "g2"
    assert store.delete("g1").startswith("DELETE ")


@pytest.mark.parametrize("lacking", ["delete_index", "manage"])
def test_a_reindex_without_a_needed_privilege_is_refused_before_anything_is_built(lacking: str) -> None:
    # index manage grants delete_index itself, so a role that lacks delete_index lacks manage too
    need = [p for p in ROLE_PRIVILEGES["reindex"]["index"] if p not in (lacking, "manage")]
    role = Role(cluster=("manage",), indices=(((f"{S.index.prefix}-*",), tuple(need)),))
    cluster = _cluster("reindex", role)
    strict_backend(S, cluster, setup=True, basic_auth=("admin", "pw"))
    backend, node, _ = strict_backend(S, cluster, basic_auth=("u", "pw"))
    node.reset()
    with pytest.raises(ConfigError, match=f"index {lacking} on"):
        EsGenerations(backend).preflight()
    assert all(r.method in ("GET", "POST") and "_has_privileges" in r.path for r in node.calls())
