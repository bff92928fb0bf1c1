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

from es_rag.errors import ConfigError
from es_rag.integrations._common import RetrievalScope, check_client, check_top_k, missing, retrieve

try:
    from haystack import Document, component
except ImportError as exc:  # pragma: no cover - tested in a subprocess without the package
    raise missing("haystack-ai", "haystack", exc) from exc

__all__ = ["EsRagRetriever", "haystack_filters"]


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
        filters: Metadata conditions: Haystack's filter dictionary (``{"field": "meta.doc_type", "operator": "==",
            "value": "policy"}``, ``AND`` of such conditions; :func:`haystack_filters`), or ``es-rag search --filter``
            expressions (``doc_type=policy``, ``published>=2023``); all applied in every retriever.
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
        filters: Mapping[str, Any] | Sequence[str] | str = (),
        top_k: int | None = None,
    ) -> None:
        exprs = haystack_filters(filters) if isinstance(filters, Mapping) else filters
        self.scope = RetrievalScope.of(tenant, acl, metadata_filter, exprs)
        self.client = check_client(client)
        self.top_k = check_top_k(top_k)

    def _documents(
        self,
        query: str,
        metadata_filter: Mapping[str, str | Sequence[str]] | None,
        top_k: int | None,
        filters: Mapping[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        scope = self.scope.narrowed(metadata_filter).with_filters(haystack_filters(filters) if filters else [])
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
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve the packed evidence for ``query``.

        Args:
            query: The query; an empty one returns no documents.
            filters: Haystack's filter dictionary for this call (:func:`haystack_filters`), applied with the
                retriever's own conditions (a call only narrows).
            top_k: Most documents returned by this call (default: the retriever's).
            metadata_filter: More exact-match conditions for this call, on fields the retriever does not constrain.

        Raises:
            ConfigError: A condition on a field the retriever already constrains, a bad ``top_k``, a filter
                es_rag cannot apply (``OR``, ``NOT``).
        """
        return self._documents(query, metadata_filter, top_k, filters)

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """:meth:`run` in a worker thread.

        Args:
            query: The query; an empty one returns no documents.
            filters: Haystack's filter dictionary for this call.
            top_k: Most documents returned by this call (default: the retriever's).
            metadata_filter: More exact-match conditions for this call, on fields the retriever does not constrain.
        """
        return await asyncio.to_thread(self._documents, query, metadata_filter, top_k, filters)


_COMPARISONS = {"==": "=", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<="}


def haystack_filters(spec: Mapping[str, Any]) -> list[str]:
    """Haystack's metadata filter dictionary (``haystack.utils.filters``: a comparison ``{"field", "operator",
    "value"}`` or a logical ``{"operator", "conditions"}``) as ``es-rag search --filter`` expressions. ``meta.x`` and
    ``x`` name the metadata field ``x``; ``==``, ``!=``, ``>``, ``>=``, ``<``, ``<=``, ``in`` and ``not in`` map to
    ``=``, ``!=``, ..., ``=a,b`` and ``!=a,b``; ``AND`` applies every condition.

    Args:
        spec: The filter dictionary.

    Raises:
        ConfigError: ``OR`` or ``NOT`` (es_rag's hard filter is a conjunction), an unknown operator, a value with
            a comma in an ``in`` list.
    """
    if "conditions" in spec:
        logical = str(spec.get("operator", "")).upper()
        if logical != "AND":
            raise ConfigError(
                f"filters: Haystack's {logical or 'missing'} operator cannot be applied: es_rag's filters are a "
                "conjunction (AND) of conditions; an OR of values of one field is the 'in' operator"
            )
        return [e for cond in spec["conditions"] for e in haystack_filters(cond)]
    name = str(spec.get("field", "")).removeprefix("meta.")
    op, value = spec.get("operator"), spec.get("value")
    if not name:
        raise ConfigError(f"filters: a comparison needs a field, got {dict(spec)!r}")
    if op in ("in", "not in"):
        values = [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        if any("," in v for v in values):
            raise ConfigError(f"filters: {name} {op} {values!r}: a value with a comma cannot be listed")
        return [f"{name}{'=' if op == 'in' else '!='}{','.join(values)}"]
    if op not in _COMPARISONS:
        raise ConfigError(
            f"filters: operator {op!r} on {name}: use one of {', '.join([*_COMPARISONS, 'in', 'not in'])}"
        )
    return [f"{name}{_COMPARISONS[op]}{value}"]
