"""``es_rag.integrations.llamaindex.EsRagRetriever`` with the real ``llama-index-core``: ``NodeWithScore`` of the
packed evidence, TextNodes with lineage, offsets, citation ids and relationships to their source; a tenant is
required and no other tenant's node comes back, by ``retrieve`` or ``aretrieve``."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore, TextNode

from es_rag import RagClient
from es_rag.errors import ConfigError
from es_rag.integrations.llamaindex import EsRagRetriever
from tests.support.apps import GLOBEX_WORD

GLOBEX_QUERY = "Globex password phone hotline"


def test_it_is_a_llamaindex_retriever_returning_nodes_with_lineage_and_citations(two_tenant_rag: RagClient) -> None:
    retriever = EsRagRetriever(two_tenant_rag, tenant="acme", acl=["support"])
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve("password reset")
    result = two_tenant_rag.search("password reset", tenant="acme", acl=["support"])
    assert nodes and all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    assert [n.node.node_id for n in nodes] == [h.chunk_id for h in result.hits]
    labels = {c.chunk_id: c.citation_id for c in result.context.citations}
    for nws, hit in zip(nodes, result.hits, strict=True):
        node = nws.node
        assert isinstance(node, TextNode)
        assert node.text == hit.display_text and nws.score == hit.final_score
        assert (node.start_char_idx, node.end_char_idx) == (hit.start_offset, hit.end_offset)
        meta = node.metadata
        assert meta["citation"] == labels[hit.chunk_id] and meta["scores"] == hit.scores()
        assert (meta["source_id"], meta["source_version"], meta["heading_path"]) == (
            hit.source_id, hit.source_version, list(hit.heading_path)
        )  # fmt: skip
        source = node.relationships[NodeRelationship.SOURCE]
        assert node.source_node is not None and node.source_node.node_id == hit.source_id
        assert source.metadata["source_version"] == hit.source_version  # type: ignore[union-attr]
        if hit.parent_id is None:
            assert NodeRelationship.PARENT not in node.relationships
        else:
            assert node.parent_node is not None and node.parent_node.node_id == hit.parent_id
        # what the LLM sees: the text with its citation id and source; scores stay out; embeddings see no metadata
        shown = node.get_content(metadata_mode=MetadataMode.LLM)
        assert f"citation: {meta['citation']}" in shown and f"source_id: {hit.source_id}" in shown
        assert "scores" not in shown and hit.text in shown
        assert node.get_content(metadata_mode=MetadataMode.EMBED) == hit.text


def test_a_retriever_without_a_tenant_is_an_error_not_all_tenants(two_tenant_rag: RagClient) -> None:
    for bad in (None, "", " "):
        with pytest.raises(ConfigError, match="tenant: a retriever needs a non-empty tenant"):
            EsRagRetriever(two_tenant_rag, tenant=bad)
    with pytest.raises(ConfigError, match="tenant: a retriever needs a non-empty tenant"):
        EsRagRetriever(two_tenant_rag)
    with pytest.raises(ConfigError, match=r"client: expected an es_rag\.RagClient, got NoneType"):
        EsRagRetriever(None, tenant="acme")


def test_no_node_of_another_tenant_or_group_comes_back(two_tenant_rag: RagClient) -> None:
    nodes = EsRagRetriever(two_tenant_rag, tenant="acme", acl=["support", "legal"]).retrieve(GLOBEX_QUERY)
    assert nodes and {n.node.metadata["tenant_id"] for n in nodes} == {"acme"}
    assert not any(GLOBEX_WORD in n.node.get_content() for n in nodes)
    globex = EsRagRetriever(two_tenant_rag, tenant="globex").retrieve("password")
    assert globex and {n.node.metadata["tenant_id"] for n in globex} == {"globex"}
    support = EsRagRetriever(two_tenant_rag, tenant="acme", acl="support").retrieve("legal hold password history")
    assert "policy.md" not in {n.node.metadata["source_id"] for n in support}
    assert EsRagRetriever(two_tenant_rag, tenant="initech").retrieve("password") == []


def test_aretrieve_returns_what_retrieve_returns(two_tenant_rag: RagClient) -> None:
    retriever = EsRagRetriever(two_tenant_rag, tenant="acme", acl="support", top_k=2)
    sync = retriever.retrieve(GLOBEX_QUERY)
    got = asyncio.run(retriever.aretrieve(GLOBEX_QUERY))
    assert len(sync) == 2 and [n.node.node_id for n in got] == [n.node.node_id for n in sync]
    assert {n.node.metadata["tenant_id"] for n in got} == {"acme"}
    assert asyncio.run(retriever.aretrieve("")) == []
