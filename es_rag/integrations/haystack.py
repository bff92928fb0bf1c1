"""Haystack adapter: :class:`EsRagRetriever`, a Haystack 2 ``@component`` over a :class:`~es_rag.client.RagClient`
(``pip install 'es-rag[haystack]'``).

.. code-block:: python

    from haystack import Pipeline
    from es_rag import RagClient
    from es_rag.integrations.haystack import EsRagRetriever

    rag = RagClient.open("./idx")
    pipe = Pipeline()
    pipe.add_component("retriever", EsRagRetriever(rag, tenant="acme", acl=["support"]))
    docs = pipe.run({"retriever": {"query": "reset password"}})["retriever"]["documents"]

A retriever serves one caller's scope (tenant, ACL groups, metadata), fixed when it is built; a call may narrow it
(``metadata_filter`` on fields the retriever does not constrain) but never widen it. The component holds a live
client, so a pipeline holding it is not serialisable to YAML.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from es_rag.integrations._common import RetrievalScope, check_client, check_top_k, missing, retrieve

try:
    from haystack import Document, component
except ImportError as exc:  # pragma: no cover - tested in a subprocess without the package
    raise missing("haystack-ai", "haystack", exc) from exc

__all__ = ["EsRagRetriever"]


@component
class EsRagRetriever:
    """Run the es_rag search for a query and return its packed evidence as Haystack ``Document``\\ s, best first.

    ``id`` is the chunk id, ``content`` the block's text, ``score`` the pipeline's ``final_score`` and ``meta``
    :func:`es_rag.integrations.hit_metadata` (``citation`` as ``result.context`` labels the block, lineage,
    every stage's ``scores``). An empty query returns no documents.

    ``run_async`` (Haystack's ``AsyncPipeline``) runs the synchronous search in a worker thread.

    Args:
        client: The :class:`~es_rag.client.RagClient` to search with (shared, not closed by the component).
        tenant: The caller's tenant; required (there is no all-tenants retriever).
        acl: The caller's ACL groups (``public`` is always added; none = public documents only).
        metadata_filter: Exact-match conditions on keyword fields: field -> value or allowed values.
        filters: Metadata conditions in ``es-rag search --filter`` syntax (``doc_type=policy``,
            ``published>=2023``), all applied in every retriever.
        top_k: Most documents returned; None = every packed block (at most ``context_k``).

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
        filters: Sequence[str] | str = (),
        top_k: int | None = None,
    ) -> None:
        self.scope = RetrievalScope.of(tenant, acl, metadata_filter, filters)
        self.client = check_client(client)
        self.top_k = check_top_k(top_k)

    def _documents(
        self, query: str, metadata_filter: Mapping[str, str | Sequence[str]] | None, top_k: int | None
    ) -> dict[str, list[Document]]:
        scope = self.scope.narrowed(metadata_filter)
        k = check_top_k(top_k) if top_k is not None else self.top_k
        docs = [
            Document(id=hit.chunk_id, content=hit.display_text, meta=meta, score=hit.final_score)
            for hit, meta in retrieve(self.client, scope, query, k)
        ]
        return {"documents": docs}

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        metadata_filter: dict[str, Any] | None = None,
        top_k: int | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve the packed evidence for ``query``.

        Args:
            query: The query; an empty one returns no documents.
            metadata_filter: More exact-match conditions for this call, on fields the retriever does not constrain.
            top_k: Most documents returned by this call (default: the retriever's).

        Raises:
            ConfigError: A condition on a field the retriever already constrains, a bad ``top_k``.
        """
        return self._documents(query, metadata_filter, top_k)

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        metadata_filter: dict[str, Any] | None = None,
        top_k: int | None = None,
    ) -> dict[str, list[Document]]:
        """:meth:`run` in a worker thread.

        Args:
            query: The query; an empty one returns no documents.
            metadata_filter: More exact-match conditions for this call, on fields the retriever does not constrain.
            top_k: Most documents returned by this call (default: the retriever's).
        """
        return await asyncio.to_thread(self._documents, query, metadata_filter, top_k)
