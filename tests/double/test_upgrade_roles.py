"""Upgrades run by the documented roles (issue 43, item 1): a deployment made at each older asset version, then setup
re-run with the setup role (docs/operations.md asks for it at asset versions 10, 11 and 13), then each role's own
operation, on the strict double with security on.

Before, the setup role stopped with 403 at the first ``PUT <index>/_mapping`` (``indices:admin/mapping/put``: of the
named index privileges only ``manage`` grants it, x-pack ``IndexPrivilege``), after the templates, while
``privileges()`` said ``setup: ok``. The role now names that action (``IndexPrivilege.resolve`` accepts an index
action as a privilege), and ``privileges()`` asks ``_has_privileges`` for exactly what each use needs.

Each older asset version is the current deployment with the fields added since taken out of the live mappings:
``retired``/``writing`` in the registry (asset version 10), ``digests`` (11), ``page_start``/``page_end`` in the chunk
and parent indices (13).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from es_rag.chunking import StructureChunker
from es_rag.elasticsearch.assets import PAGE_FIELDS
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.elasticsearch.probe import ROLE_PRIVILEGES
from es_rag.elasticsearch.versions import EsVersionStore
from es_rag.errors import ClusterError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.pipeline import RagPipeline
from es_rag.reindex import EsGenerations
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer, random_corpus
from tests.support.double.client import strict_backend
from tests.support.double.cluster import Role, StrictCluster

S = Settings(vector_dims=DIMS, rerank_model=None, candidate_k=10, num_candidates=20, rerank_k=10, context_k=3)
ADDED_AT = {
    10: {"versions": ("retired", "writing")},
    11: {"versions": ("digests",)},
    13: {"chunks": PAGE_FIELDS, "parents": PAGE_FIELDS},
}
"""The fields each asset version added to an index that exists (``registry_mapping_request``,
``added_fields_request``)."""
OLDER = (9, 10, 11, 12)
PATTERNS = (f"{S.index.prefix}-*",)


def _role(use: str) -> Role:
    need = ROLE_PRIVILEGES[use]
    return Role(cluster=tuple(need["cluster"]), indices=((PATTERNS, tuple(need["index"])),))


def _deployment(asset_version: int) -> StrictCluster:
    """A cluster whose es_rag indices lack every field added after ``asset_version``, with one user per role."""
    uses = ("search", "ingest", "setup", "reindex")
    cluster = StrictCluster(
        version="9.5.0",
        users={"admin": ("pw", ("admin",)), **{use: ("pw", (use,)) for use in uses}},
        roles={"admin": Role(cluster=("all",), indices=((("*",), ("all",)),)), **{use: _role(use) for use in uses}},
    )
    strict_backend(S, cluster, setup=True, basic_auth=("admin", "pw"))
    names = {"chunks": S.chunk_index, "parents": S.parent_index, "versions": S.index_name("versions")}
    for added, kinds in ADDED_AT.items():
        if added <= asset_version:
            continue
        for kind, fields in kinds.items():
            mapping = cluster.indices[names[kind]].mapping
            for name in fields:
                mapping.fields.pop(name, None)
                mapping.raw.get("properties", {}).pop(name, None)
    return cluster


def _as(cluster: StrictCluster, use: str) -> ElasticsearchBackend:
    return strict_backend(S, cluster, basic_auth=(use, "pw"))[0]


def _pdf_doc(version: str = "v1") -> SourceDoc:
    return SourceDoc(
        "manual.pdf",
        "# Manual\n\nThe wipe token expires after one hour.\n\n# Reset\n\nReset from the login page.",
        "acme",
        ("public",),
        source_version=version,
        fmt="pdf",
        pages=(0, 40),
    )


@pytest.mark.parametrize("asset_version", OLDER)
def test_each_role_runs_its_operation_after_setup_by_the_setup_role(asset_version: int) -> None:
    cluster = _deployment(asset_version)
    page_field = cluster.indices[S.chunk_index].mapping.fields.get("page_start")
    assert page_field is None  # the old deployment: a strict index that refuses PDF chunks
    setup = _as(cluster, "setup")
    assert setup.privileges()["setup"] == "ok"
    setup.setup()  # was 403 at the first PUT _mapping
    assert "page_start" in cluster.indices[S.chunk_index].mapping.fields
    assert "digests" in cluster.indices[S.index_name("versions")].mapping.fields

    ingest = _as(cluster, "ingest")
    assert ingest.privileges()["ingest"] == "ok"
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    report = ingest_documents([_pdf_doc()], chunker=chunker, embedder=RandomEmbedder(), backend=ingest)
    assert report.failed == [] and report.chunks > 0
    corpus = random_corpus(random.Random(asset_version), n_children=12)
    assert ingest.index(corpus.children, corpus.parents).failed == []
    cluster.refresh_all()

    search = _as(cluster, "search")
    assert search.privileges()["search"] == "ok"
    pipe = RagPipeline(search, embedder=RandomEmbedder(), settings=S, tokenizer=WordTokenizer())
    hits = pipe.search("wipe token", SearchFilter("acme")).candidates
    assert any(h.source_id == "manual.pdf" and h.page_start is not None for h in hits)

    # purge: a new version retires v1, whose chunks are deleted by query under the ingest role
    report = ingest_documents([_pdf_doc("v2")], chunker=chunker, embedder=RandomEmbedder(), backend=ingest)
    assert report.failed == []
    state = EsVersionStore(ingest).state("acme")
    assert state.active.get("manual.pdf") == "v2" and not [k for k in state.hidden if k.startswith("manual.pdf@")]
    left = [d for d in cluster.docs(S.chunk_index).values() if d["source_id"] == "manual.pdf"]
    assert left and all(d["source_version"] == "v2" for d in left)
    assert EsVersionStore(ingest).delete_source("acme", "manual.pdf")["remaining"] == {"chunks": 0, "parents": 0}

    reindex = _as(cluster, "reindex")
    assert reindex.privileges()["reindex"] == "ok"
    generations = EsGenerations(reindex)
    generations.preflight()
    new = generations.open_new(S, "g1")  # setup of the new generation, then its ingest, then the swap
    report = ingest_documents([_pdf_doc("v3")], chunker=chunker, embedder=RandomEmbedder(), backend=new)
    assert report.failed == []
    generations.swap("g1", migrate=True)
    cluster.refresh_all()
    hits = RagPipeline(search, embedder=RandomEmbedder(), settings=S, tokenizer=WordTokenizer()).search(
        "wipe token", SearchFilter("acme")
    )
    assert {h.source_version for h in hits.candidates if h.source_id == "manual.pdf"} == {"v3"}


def test_privileges_predict_the_setup_outcome_for_a_role_without_the_mapping_action() -> None:
    """The old documented role: ``privileges()`` names the missing action, and setup's 403 names it too."""
    cluster = _deployment(12)
    cluster.roles["setup"] = Role(cluster=("manage",), indices=((PATTERNS, ("create_index", "view_index_metadata")),))
    setup = _as(cluster, "setup")
    said = setup.privileges()["setup"]
    assert said.startswith("missing:") and "indices:admin/mapping/put" in said
    with pytest.raises(ClusterError, match=r"indices:admin/mapping/put") as info:
        setup.setup()
    assert info.value.status == 403


def test_the_double_takes_an_index_action_as_a_privilege_as_elasticsearch_does() -> None:
    cluster = _deployment(13)
    privileges = ["indices:admin/mapping/put", "indices:admin/delete", "manage"]
    body = {"index": [{"names": [S.chunk_index], "privileges": privileges}]}
    got: Any = _as(cluster, "setup").send(EsRequest("POST", "_security/user/_has_privileges", body))
    assert got["index"][S.chunk_index] == {
        "indices:admin/mapping/put": True,
        "indices:admin/delete": False,
        "manage": False,
    }


def test_setup_updates_the_generation_a_rollback_serves_too() -> None:
    """Item 3: setup added the page fields only to the indices behind the names; a generation kept for
    ``reindex --rollback`` kept its old strict mapping and refused PDF chunks once served again."""
    cluster = _deployment(13)
    admin = strict_backend(S, cluster, basic_auth=("admin", "pw"))[0]
    generations = EsGenerations(admin)
    for generation in ("g1", "g2"):
        generations.open_new(S, generation)
        generations.swap(generation, migrate=True)
    for generation in ("g1", "g2"):  # both made before asset version 13
        for role in ("chunks", "parents"):
            mapping = cluster.indices[f"{S.index.prefix}-{role}-{generation}"].mapping
            for name in PAGE_FIELDS:
                mapping.fields.pop(name, None)
                mapping.raw.get("properties", {}).pop(name, None)
    done = [r["request"] for r in _as(cluster, "setup").setup()]
    assert f"PUT {S.index.prefix}-chunks-g1/_mapping" in done and f"PUT {S.index.prefix}-parents-g1/_mapping" in done
    generations.swap("g1")  # the rollback
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    report = ingest_documents([_pdf_doc()], chunker=chunker, embedder=RandomEmbedder(), backend=_as(cluster, "ingest"))
    assert report.failed == [] and report.chunks > 0
    assert any(d.get("page_start") is not None for d in cluster.docs(f"{S.index.prefix}-chunks-g1").values())
