"""``es_rag.integrations.haystack.EsRagRetriever`` with the real ``haystack-ai``: a component whose
``run(query)`` returns ``{"documents": [...]}`` of the packed evidence, alone and in a ``Pipeline``; a tenant is
required, a call can narrow the scope but not widen it, and no other tenant's document comes back."""

from __future__ import annotations

import asyncio

import pytest
from haystack import Document, Pipeline

from es_rag import RagClient
from es_rag.errors import ConfigError
from es_rag.integrations.haystack import EsRagRetriever
from tests.support.apps import GLOBEX_WORD

GLOBEX_QUERY = "Globex password phone hotline"


def test_run_returns_the_packed_evidence_as_documents_with_citations(two_tenant_rag: RagClient) -> None:
    retriever = EsRagRetriever(two_tenant_rag, tenant="acme", acl=["support"])
    out = retriever.run(query="password reset")
    assert list(out) == ["documents"]
    docs = out["documents"]
    result = two_tenant_rag.search("password reset", tenant="acme", acl=["support"])
    labels = {c.chunk_id: c.citation_id for c in result.context.citations}
    assert docs and [d.id for d in docs] == [h.chunk_id for h in result.hits]
    for doc, hit in zip(docs, result.hits, strict=True):
        assert isinstance(doc, Document) and doc.content == hit.display_text and doc.score == hit.final_score
        assert doc.meta["citation"] == labels[hit.chunk_id] and doc.meta["scores"] == hit.scores()
        assert (doc.meta["source_id"], doc.meta["start_offset"], doc.meta["end_offset"]) == (
            hit.source_id, hit.start_offset, hit.end_offset
        )  # fmt: skip


def test_it_runs_in_a_pipeline(two_tenant_rag: RagClient) -> None:
    pipe = Pipeline()
    pipe.add_component("retriever", EsRagRetriever(two_tenant_rag, tenant="globex"))
    docs = pipe.run({"retriever": {"query": "password"}})["retriever"]["documents"]
    assert docs and {d.meta["tenant_id"] for d in docs} == {"globex"}
    assert any(GLOBEX_WORD in (d.content or "") for d in docs)


def test_a_retriever_without_a_tenant_is_an_error_not_all_tenants(two_tenant_rag: RagClient) -> None:
    for bad in (None, "", "\t"):
        with pytest.raises(ConfigError, match="tenant: a retriever needs a non-empty tenant"):
            EsRagRetriever(two_tenant_rag, tenant=bad)
    with pytest.raises(ConfigError, match="tenant: a retriever needs a non-empty tenant"):
        EsRagRetriever(two_tenant_rag)


def test_no_document_of_another_tenant_or_group_comes_back(two_tenant_rag: RagClient) -> None:
    docs = EsRagRetriever(two_tenant_rag, tenant="acme", acl=["support", "legal"]).run(GLOBEX_QUERY)["documents"]
    assert docs and {d.meta["tenant_id"] for d in docs} == {"acme"}
    assert not any(GLOBEX_WORD in (d.content or "") for d in docs)
    support = EsRagRetriever(two_tenant_rag, tenant="acme", acl="support").run("legal hold password history")
    assert "policy.md" not in {d.meta["source_id"] for d in support["documents"]}
    assert EsRagRetriever(two_tenant_rag, tenant="initech").run("password") == {"documents": []}


def test_a_call_narrows_the_scope_but_cannot_widen_it(two_tenant_rag: RagClient) -> None:
    retriever = EsRagRetriever(two_tenant_rag, tenant="acme", acl="support", metadata_filter={"source_id": "sync.md"})
    assert {d.meta["source_id"] for d in retriever.run("password")["documents"]} == {"sync.md"}
    with pytest.raises(ConfigError, match=r"metadata_filter: source_id already constrained by the retriever"):
        retriever.run("password", metadata_filter={"source_id": ["sync.md", "guide.md"]})
    with pytest.raises(ConfigError, match="'tenant_id' is set by tenant_id/groups"):
        retriever.run("password", metadata_filter={"tenant_id": "globex"})
    with pytest.raises(ConfigError, match="'acl' is set by tenant_id/groups"):
        retriever.run("password", metadata_filter={"acl": "legal"})
    wide = EsRagRetriever(two_tenant_rag, tenant="acme", acl="support")
    narrowed = wide.run("password", metadata_filter={"source_id": "guide.md"}, top_k=1)["documents"]
    assert len(narrowed) == 1 and narrowed[0].meta["source_id"] == "guide.md"
    with pytest.raises(ConfigError, match="top_k: must be None or an integer >= 1, got -1"):
        wide.run("password", top_k=-1)


def test_run_async_returns_what_run_returns(two_tenant_rag: RagClient) -> None:
    retriever = EsRagRetriever(two_tenant_rag, tenant="acme", acl="support")
    got = asyncio.run(retriever.run_async(GLOBEX_QUERY))["documents"]
    assert [d.id for d in got] == [d.id for d in retriever.run(GLOBEX_QUERY)["documents"]]
    assert {d.meta["tenant_id"] for d in got} == {"acme"}


def test_haystack_filter_dictionaries_are_applied(two_tenant_rag: RagClient) -> None:
    """Issue 31: Haystack's standard ``filters=`` (its filter dictionary) was refused; es_rag called it
    ``metadata_filter``. Both the retriever's and a call's filters apply, each call narrowing."""
    from es_rag.errors import ConfigError
    from es_rag.integrations.haystack import haystack_filters

    assert haystack_filters({"field": "meta.doc_type", "operator": "==", "value": "policy"}) == ["doc_type=policy"]
    assert haystack_filters(
        {
            "operator": "AND",
            "conditions": [
                {"field": "meta.source_id", "operator": "in", "value": ["a.md", "b.md"]},
                {"field": "published", "operator": ">=", "value": 2023},
                {"field": "meta.lang", "operator": "not in", "value": ["ja"]},
            ],
        }
    ) == ["source_id=a.md,b.md", "published>=2023", "lang!=ja"]
    with pytest.raises(ConfigError, match="OR operator cannot be applied"):
        haystack_filters({"operator": "OR", "conditions": []})
    with pytest.raises(ConfigError, match="operator 'like'"):
        haystack_filters({"field": "x", "operator": "like", "value": "y"})
    policy = {"field": "meta.doc_type", "operator": "==", "value": "policy"}
    retriever = EsRagRetriever(two_tenant_rag, tenant="acme", acl=["support", "legal"], filters=policy)
    docs = retriever.run("password history")["documents"]
    assert docs and {d.meta["source_id"] for d in docs} == {"policy.md"}
    wide = EsRagRetriever(two_tenant_rag, tenant="acme", acl=["support", "legal"])
    assert {d.meta["source_id"] for d in wide.run("password history", filters=policy)["documents"]} == {"policy.md"}
    assert len({d.meta["source_id"] for d in wide.run("password history")["documents"]}) > 1
