"""LlamaIndex adapter: :class:`EsRagRetriever`, a ``llama_index.core`` ``BaseRetriever`` over a
:class:`~es_rag.client.RagClient` (``pip install 'es-rag[llamaindex]'``).

.. code-block:: python

    from es_rag import RagClient
    from es_rag.integrations.llamaindex import EsRagRetriever

    rag = RagClient.open("./idx")
    retriever = EsRagRetriever(rag, tenant="acme", acl=["support"])
    nodes = retriever.retrieve("reset password")  # NodeWithScore: the packed evidence, best first
    nodes[0].node.metadata["citation"], nodes[0].node.source_node.node_id, nodes[0].score

It plugs into LlamaIndex's query engines (``RetrieverQueryEngine.from_args(retriever, llm=...)``). A retriever
serves one caller's scope (tenant, ACL groups, metadata), fixed when it is built; building one is cheap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from es_rag.integrations._common import RetrievalScope, check_client, check_top_k, missing, retrieve

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
except ImportError as exc:  # pragma: no cover - tested in a subprocess without the package
    raise missing("llama-index-core", "llamaindex", exc) from exc

__all__ = ["LLM_METADATA_KEYS", "EsRagRetriever"]

LLM_METADATA_KEYS = ("citation", "source_id", "source_version", "title", "heading_path")
"""The metadata LlamaIndex shows the LLM next to a node's text (``MetadataMode.LLM``); the rest (scores, ranks,
versions) stays in ``node.metadata`` for the app. No metadata goes into embeddings."""


class EsRagRetriever(BaseRetriever):
    """Run the es_rag search for a query and return its packed evidence as ``NodeWithScore``, best first.

    Each node is a ``TextNode`` whose ``id_`` is the chunk id, ``text`` the block's text,
    ``start_char_idx``/``end_char_idx`` its offsets in the source, ``metadata``
    :func:`es_rag.integrations.hit_metadata` (``citation`` as ``result.context`` labels the block, lineage,
    every stage's ``scores``), with relationships ``SOURCE`` (the source document: ``source_id``, its version) and
    ``PARENT`` (the parent section, when the chunk has one). The score is the pipeline's ``final_score``. An empty
    query returns no nodes.

    ``aretrieve`` runs the synchronous search in a worker thread (``asyncio.to_thread``).

    Args:
        client: The :class:`~es_rag.client.RagClient` to search with (shared, not closed by the retriever).
        tenant: The caller's tenant; required (there is no all-tenants retriever).
        acl: The caller's ACL groups (``public`` is always added; none = public documents only).
        metadata_filter: Exact-match conditions on keyword fields: field -> value or allowed values.
        filters: Metadata conditions in ``es-rag search --filter`` syntax (``doc_type=policy``,
            ``published>=2023``), all applied in every retriever.
        top_k: Most nodes returned; None = every packed block (at most ``context_k``).
        callback_manager: LlamaIndex's callback manager.
        verbose: LlamaIndex's verbose flag.

    Raises:
        ConfigError: No tenant or an empty one, ``client`` is not a RagClient, a bad ACL, metadata or ``top_k``.
    """

    def __init__(
        self,
        client: Any,
        *,
        tenant: str | None = None,
        acl: Sequence[str] | str | None = (),
        metadata_filter: Mapping[str, str | Sequence[str]] | None = None,
        filters: Sequence[Any] | str | Any = (),
        top_k: int | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self._scope = RetrievalScope.of(tenant, acl, metadata_filter, filters)
        self._client = check_client(client)
        self._top_k = check_top_k(top_k)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def scope(self) -> RetrievalScope:
        """Who this retriever searches for."""
        return self._scope

    def _nodes(self, query: str) -> list[NodeWithScore]:
        out = []
        for hit, meta in retrieve(self._client, self._scope, query, self._top_k):
            relationships = {
                NodeRelationship.SOURCE: RelatedNodeInfo(
                    node_id=hit.source_id, metadata={"source_version": hit.source_version, "title": hit.title}
                )
            }
            if hit.parent_id is not None:
                relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id=hit.parent_id)
            node = TextNode(
                id_=hit.chunk_id,
                text=hit.display_text,  # the chunk text (an index written before one clean text: its visible text)
                metadata=meta,
                start_char_idx=hit.start_offset,
                end_char_idx=hit.end_offset,
                relationships=relationships,
                excluded_embed_metadata_keys=list(meta),
                excluded_llm_metadata_keys=[k for k in meta if k not in LLM_METADATA_KEYS],
            )
            out.append(NodeWithScore(node=node, score=hit.final_score))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._nodes, query_bundle.query_str)
