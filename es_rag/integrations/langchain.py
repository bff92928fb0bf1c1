"""LangChain adapter: :class:`EsRagRetriever`, a ``langchain_core`` ``BaseRetriever`` over a
:class:`~es_rag.client.RagClient` (``pip install 'es-rag[langchain]'``).

.. code-block:: python

    from es_rag import RagClient
    from es_rag.integrations.langchain import EsRagRetriever

    rag = RagClient.open("./idx")
    retriever = EsRagRetriever(client=rag, tenant="acme", acl=["support"])
    docs = retriever.invoke("reset password")  # Documents: the packed evidence, best first
    docs[0].metadata["citation"], docs[0].metadata["source_id"], docs[0].metadata["scores"]["final"]

A retriever serves one caller's scope (tenant, ACL groups, metadata), fixed when it is built; building one is cheap
(it stores settings and shares the client), so an app builds one per request from the request's auth.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from es_rag.errors import ConfigError
from es_rag.integrations._common import RetrievalScope, check_client, check_top_k, missing, retrieve
from es_rag.query_filters import is_query

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - tested in a subprocess without the package
    raise missing("langchain-core", "langchain", exc) from exc

__all__ = ["EsRagRetriever"]


class EsRagRetriever(BaseRetriever):
    """Run the es_rag search for a query and return its packed evidence as LangChain ``Document``\\ s, best first.

    ``page_content`` is the block's text; ``metadata`` is :func:`es_rag.integrations.hit_metadata`: ``citation``
    (the block's id in ``result.context``: ``S1``, ``S2``, ...), ``chunk_id``, ``source_id``, ``source_version``,
    ``parent_id``, ``heading_path``, ``start_offset``/``end_offset``, ``scores`` (every stage's), ``ranks``,
    ``retrieval_sources``, ``expanded_from`` and the gate's ``evidence_status``. An empty query returns no documents.

    ``ainvoke`` runs the synchronous search in a worker thread (``asyncio.to_thread``): the event loop is not
    blocked, and the client's thread safety covers concurrent calls.

    Args:
        client: The :class:`~es_rag.client.RagClient` to search with (shared, not closed by the retriever).
        tenant: The caller's tenant; required (there is no all-tenants retriever).
        acl: The caller's ACL groups (``public`` is always added; none = public documents only).
        metadata_filter: Exact-match conditions on keyword fields: field -> value or allowed values.
        filters: Metadata conditions in ``es-rag search --filter`` syntax (``doc_type=policy``,
            ``published>=2023``) and ``elasticsearch.dsl`` queries or their dicts (``Q("range", ...)``), all applied
            in every retriever.
        top_k: Most documents returned; None = every packed block (at most ``context_k``).
        k: LangChain's name for ``top_k`` (``as_retriever``'s convention); give one of the two.
        search_kwargs: LangChain's ``VectorStoreRetriever`` dict: ``k`` (= ``top_k``) and ``filter`` (an exact-match
            ``metadata_filter``, or Elasticsearch queries as ``ElasticsearchStore`` takes them); any other key is
            refused by name.
        **kwargs: ``BaseRetriever``'s own fields (``tags``, ``metadata``: LangChain's tracing metadata).

    Raises:
        ConfigError: No tenant or an empty one, ``client`` is not a RagClient, a bad ACL, metadata, ``top_k`` or
            ``search_kwargs``, or the same limit or filter given twice with different values.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Any
    scope: RetrievalScope
    top_k: int | None = None

    def __init__(
        self,
        *,
        client: Any,
        tenant: str | None = None,
        acl: Sequence[str] | str | None = (),
        metadata_filter: Mapping[str, str | Sequence[str]] | None = None,
        filters: Sequence[Any] | str | Any = (),
        top_k: int | None = None,
        k: int | None = None,
        search_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        top_k, metadata_filter, queries = _langchain_conventions(top_k, k, metadata_filter, search_kwargs)
        if queries:
            filters = [*([filters] if isinstance(filters, str) or is_query(filters) else filters), *queries]
        fields: dict[str, Any] = {
            "scope": RetrievalScope.of(tenant, acl, metadata_filter, filters),
            "client": check_client(client),
            "top_k": check_top_k(top_k),
        }
        super().__init__(**fields, **kwargs)

    def _documents(self, query: str) -> list[Document]:
        return [
            Document(page_content=hit.display_text, metadata=meta, id=hit.chunk_id)
            for hit, meta in retrieve(self.client, self.scope, query, self.top_k)
        ]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(query)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await asyncio.to_thread(self._documents, query)


def _same(name: str, a: Any, b: Any, other: str) -> Any:
    """``a`` or ``b``, whichever is given; both given and different is an error naming both."""
    if a is not None and b is not None and a != b:
        raise ConfigError(f"{name}: given twice with different values ({a!r} and {other} {b!r}); give one")
    return a if a is not None else b


def _langchain_conventions(
    top_k: int | None, k: int | None, metadata_filter: Any, search_kwargs: Mapping[str, Any] | None
) -> tuple[int | None, Any, list[Any]]:
    """``top_k``, ``metadata_filter`` and query filters with LangChain's names folded in: ``k`` and ``search_kwargs``
    (``k``, ``filter``). Before they were read, ``k=2`` and ``search_kwargs={"k": 2}`` were silently ignored (issue 31).
    ``filter`` is an exact-match mapping, or, as ``ElasticsearchStore`` takes it, an Elasticsearch query (an
    ``elasticsearch.dsl`` object or its dict) or a list of them: those are query filters
    (:mod:`es_rag.query_filters`)."""
    top_k = _same("top_k", top_k, k, "k")
    if search_kwargs is None:
        return top_k, metadata_filter, []
    if not isinstance(search_kwargs, Mapping):
        raise ConfigError(f"search_kwargs: expected a dict like {{'k': 4}}, got {type(search_kwargs).__name__}")
    unknown = sorted(set(search_kwargs) - {"k", "filter"})
    if unknown:
        raise ConfigError(
            f"search_kwargs: unknown key(s) {', '.join(map(repr, unknown))}; es_rag reads 'k' (= top_k) and 'filter' "
            "(= metadata_filter); use filters= for ranges"
        )
    top_k = _same("top_k", top_k, search_kwargs.get("k"), "search_kwargs['k']")
    given = search_kwargs.get("filter")
    if is_query(given) or (isinstance(given, list) and given and all(is_query(q) for q in given)):
        return top_k, metadata_filter, list(given) if isinstance(given, list) else [given]
    metadata_filter = _same("metadata_filter", metadata_filter, given, "search_kwargs['filter']")
    return top_k, metadata_filter, []
