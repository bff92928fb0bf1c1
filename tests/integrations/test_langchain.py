"""``es_rag.integrations.langchain.EsRagRetriever`` with the real ``langchain-core``: the documents are the
search's packed evidence with lineage, scores and the packed context's citation ids; a tenant is required and
no other tenant's document comes back, by ``invoke`` or ``ainvoke``."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from es_rag import RagClient
from es_rag.errors import ConfigError
from es_rag.integrations.langchain import EsRagRetriever
from tests.support.apps import ACME_LEGAL, GLOBEX_WORD
from tests.support.context import excerpts

GLOBEX_QUERY = "Globex password phone hotline"


def test_it_is_a_langchain_retriever_returning_the_packed_evidence_with_citations(two_tenant_rag: RagClient) -> None:
    retriever = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support"])
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("password reset")
    result = two_tenant_rag.search("password reset", tenant="acme", acl=["support"])
    assert docs and all(isinstance(d, Document) for d in docs)
    assert [d.id for d in docs] == [h.chunk_id for h in result.hits]
    labels = {c.chunk_id: c.citation_id for c in result.context.citations}
    for doc, hit in zip(docs, result.hits, strict=True):
        meta = doc.metadata
        assert doc.page_content == hit.display_text
        assert meta["citation"] == labels[hit.chunk_id]
        # the label is the one the packed context shows the LLM for this very text
        shown = {e.citation_id: e for e in excerpts(result.context.text)}[meta["citation"]]
        assert f" source={hit.source_id}" in shown.header and shown.text == hit.display_text
        assert (meta["chunk_id"], meta["source_id"], meta["source_version"], meta["parent_id"]) == (
            hit.chunk_id, hit.source_id, hit.source_version, hit.parent_id
        )  # fmt: skip
        assert (meta["heading_path"], meta["start_offset"], meta["end_offset"]) == (
            list(hit.heading_path), hit.start_offset, hit.end_offset
        )  # fmt: skip
        assert meta["scores"] == hit.scores() and meta["scores"]["final"] == hit.final_score
        assert meta["retrieval_sources"] == list(hit.retrieval_sources) and meta["tenant_id"] == "acme"
        assert meta["evidence_status"] == result.status
    assert [d.metadata["citation"] for d in docs] == [f"S{i}" for i in range(1, len(docs) + 1)]


def test_a_retriever_without_a_tenant_is_an_error_not_all_tenants(two_tenant_rag: RagClient) -> None:
    for bad in (None, "", "   ", 7):
        with pytest.raises(ConfigError, match="tenant: a retriever needs a non-empty tenant"):
            EsRagRetriever(client=two_tenant_rag, tenant=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tenant: a retriever needs a non-empty tenant"):
        EsRagRetriever(client=two_tenant_rag)
    with pytest.raises(ConfigError, match=r"client: expected an es_rag\.RagClient, got str"):
        EsRagRetriever(client="./idx", tenant="acme")
    with pytest.raises(ConfigError, match=r"client: expected an es_rag\.RagClient, got NoneType"):
        EsRagRetriever(client=None, tenant="acme")
    with pytest.raises(ConfigError, match="top_k: must be None or an integer >= 1, got 0"):
        EsRagRetriever(client=two_tenant_rag, tenant="acme", top_k=0)
    with pytest.raises(ConfigError, match="'tenant_id' is set by tenant_id/groups"):
        EsRagRetriever(client=two_tenant_rag, tenant="acme", metadata_filter={"tenant_id": "globex"})
    with pytest.raises(ConfigError, match="acl: group names are strings, got 3"):
        EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support", 3])  # type: ignore[list-item]


def test_no_document_of_another_tenant_or_group_comes_back(two_tenant_rag: RagClient) -> None:
    acme = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support", "legal"])
    docs = acme.invoke(GLOBEX_QUERY)  # globex's document matches best; acme's match too
    assert docs and {d.metadata["tenant_id"] for d in docs} == {"acme"}
    assert not any(GLOBEX_WORD in d.page_content for d in docs)
    globex = EsRagRetriever(client=two_tenant_rag, tenant="globex").invoke("password")
    assert globex and {d.metadata["source_id"] for d in globex} == {"guide.md"}
    assert all(d.metadata["tenant_id"] == "globex" for d in globex)
    assert any(GLOBEX_WORD in d.page_content for d in globex)
    # an ACL group the caller lacks hides the document inside its own tenant
    support = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl="support").invoke("legal hold password history")
    assert "policy.md" not in {d.metadata["source_id"] for d in support}
    legal = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl="legal").invoke("legal hold password history")
    assert {d.metadata["source_id"] for d in legal} == {"policy.md"}
    assert legal[0].page_content in ACME_LEGAL["policy.md"]
    # a tenant that has nothing gets nothing (not someone else's)
    assert EsRagRetriever(client=two_tenant_rag, tenant="initech", acl=["support"]).invoke("password") == []


def test_ainvoke_returns_what_invoke_returns_and_keeps_the_tenant(two_tenant_rag: RagClient) -> None:
    retriever = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl="support")

    async def both() -> list[list[Document]]:
        return list(await asyncio.gather(retriever.ainvoke("password"), retriever.ainvoke(GLOBEX_QUERY)))

    sync = [retriever.invoke("password"), retriever.invoke(GLOBEX_QUERY)]
    got = asyncio.run(both())
    assert [[d.id for d in r] for r in got] == [[d.id for d in r] for r in sync]
    assert all(d.metadata["tenant_id"] == "acme" for r in got for d in r)


def test_top_k_metadata_filter_and_an_empty_query(two_tenant_rag: RagClient) -> None:
    full = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl="support").invoke("password")
    top1 = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl="support", top_k=1).invoke("password")
    assert len(full) > 1 and [d.id for d in top1] == [full[0].id]
    only_sync = EsRagRetriever(
        client=two_tenant_rag, tenant="acme", acl="support", metadata_filter={"source_id": "sync.md"}
    ).invoke("password")
    assert only_sync and {d.metadata["source_id"] for d in only_sync} == {"sync.md"}
    assert EsRagRetriever(client=two_tenant_rag, tenant="acme").invoke("   ") == []


def test_metadata_filters_reach_the_search(two_tenant_rag: RagClient) -> None:
    """``filters`` (``es-rag search --filter`` syntax) narrow the retriever's scope in every retriever: only the
    legal hold policy is declared ``doc_type: policy``."""
    both = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support", "legal"])
    policies = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support", "legal"], filters="doc_type=policy")
    unfiltered = {d.metadata["source_id"] for d in both.invoke("password")}
    assert "policy.md" in unfiltered and len(unfiltered) > 1
    docs = policies.invoke("password")
    assert {d.metadata["source_id"] for d in docs} == {"policy.md"}
    assert docs[0].metadata["meta"] == {"doc_type": ["policy"]}
    with pytest.raises(ConfigError, match="unknown metadata field 'colour'"):
        EsRagRetriever(client=two_tenant_rag, tenant="acme", filters=["colour=red"]).invoke("password")


def test_langchain_s_k_and_search_kwargs_limit_the_documents(two_tenant_rag: RagClient) -> None:
    """LangChain's own names: ``k`` (as_retriever) and ``search_kwargs={"k": .., "filter": ..}`` were ignored before
    (issue 31); now they mean top_k and metadata_filter, and a conflict or an unknown key is an error."""
    every = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support", "legal"]).invoke("password")
    assert len(every) > 1
    for kwargs in ({"k": 1}, {"search_kwargs": {"k": 1}}, {"top_k": 1, "k": 1}):
        docs = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support", "legal"], **kwargs).invoke(
            "password"
        )
        assert [d.id for d in docs] == [every[0].id], kwargs
    source = every[-1].metadata["source_id"]
    narrowed = EsRagRetriever(
        client=two_tenant_rag, tenant="acme", acl=["support", "legal"], search_kwargs={"filter": {"source_id": source}}
    ).invoke("password")
    assert narrowed and {d.metadata["source_id"] for d in narrowed} == {source}
    with pytest.raises(ConfigError, match=r"top_k: given twice with different values \(1 and k 2\)"):
        EsRagRetriever(client=two_tenant_rag, tenant="acme", top_k=1, k=2)
    with pytest.raises(ConfigError, match="search_kwargs: unknown key\\(s\\) 'score_threshold'"):
        EsRagRetriever(client=two_tenant_rag, tenant="acme", search_kwargs={"score_threshold": 0.5})
    with pytest.raises(ConfigError, match="k: must be None or an integer >= 1, got 0"):
        EsRagRetriever(client=two_tenant_rag, tenant="acme", k=0)
