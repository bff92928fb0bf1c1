"""What the framework adapters share: the caller's scope, the search, the metadata of a returned document, and the
import of an optional framework. Imports no framework."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from es_rag.errors import ConfigError, EsRagError, MissingDependencyError
from es_rag.principals import check_name, check_names

if TYPE_CHECKING:
    from es_rag.client import RagClient
    from es_rag.records import Hit


def missing(package: str, extra: str, exc: ImportError) -> MissingDependencyError:
    """The error an adapter raises when its framework cannot be imported: it names the extra that installs it.

    Args:
        package: The PyPI package the adapter needs (``langchain-core``).
        extra: The es_rag extra that installs it, also the adapter's module name (``langchain``).
        exc: The import's error (chained by the caller: ``raise missing(...) from exc``).
    """
    return MissingDependencyError(
        f"es_rag.integrations.{extra} needs {package}, which could not be imported ({exc}); "
        f"install it with: pip install 'es-rag[{extra}]'"
    )


def _groups(acl: Sequence[str] | str | None) -> tuple[str, ...]:
    if acl is None:
        return ()
    if isinstance(acl, str):
        acl = [acl]
    elif not isinstance(acl, Sequence):
        raise ConfigError(f"acl: expected a group name or a list of them, got {type(acl).__name__}")
    for group in acl:
        if not isinstance(group, str):
            raise ConfigError(f"acl: group names are strings, got {group!r} ({type(group).__name__})")
    return check_names(acl, "acl")


def _check_mapping(metadata: Any) -> None:
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ConfigError(f"metadata_filter: expected a mapping of field -> value(s), got {type(metadata).__name__}")


@dataclass(frozen=True)
class RetrievalScope:
    """Who a retriever searches for: one tenant (required), the caller's ACL groups (``public`` is always added by
    the search; none given = public documents only) and exact-match metadata conditions. Build it with :meth:`of`.

    Attributes:
        tenant: The caller's tenant.
        acl: The caller's ACL groups, in order, without repeats.
        metadata: Keyword field -> allowed values.
        filters: Metadata conditions as ``es-rag search --filter`` takes them (``doc_type=policy``,
            ``published>=2023``; :mod:`es_rag.metadata`) and query filters (``elasticsearch.dsl`` queries, as dicts;
            :mod:`es_rag.query_filters`), all applied.
    """

    tenant: str
    acl: tuple[str, ...] = ()
    metadata: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    filters: tuple[Any, ...] = ()

    @classmethod
    def of(
        cls,
        tenant: Any,
        acl: Sequence[str] | str | None = (),
        metadata: Mapping[str, str | Sequence[str]] | None = None,
        filters: Sequence[Any] | str | Any = (),
    ) -> RetrievalScope:
        """A validated scope.

        Args:
            tenant: The caller's tenant; required, a non-empty string.
            acl: The caller's ACL groups: a list, or one group as a string.
            metadata: Exact-match conditions on keyword fields: field -> value or allowed values.
            filters: Metadata conditions (``--filter`` syntax); checked when the retriever first searches, against
                the client's metadata fields.

        Raises:
            ConfigError: A missing or empty tenant (there is no all-tenants retriever), an ACL group that is not a
                string, a metadata condition on ``tenant_id``/``acl`` or with no value.
        """
        from es_rag.filters import SearchFilter

        if not isinstance(tenant, str) or not tenant.strip():
            raise ConfigError(
                f"tenant: a retriever needs a non-empty tenant (tenant='acme'), got {tenant!r}; "
                "there is no all-tenants retriever"
            )
        check_name(tenant, "tenant")
        _check_mapping(metadata)
        groups = _groups(acl)
        checked = SearchFilter(tenant, groups, dict(metadata or {}))  # type: ignore[arg-type]
        from es_rag.query_filters import is_query, query_clause

        exprs = (filters,) if isinstance(filters, str) or is_query(filters) else tuple(filters)
        for e in exprs:
            if not isinstance(e, str) and not is_query(e):
                raise ConfigError(
                    "filters: expected expressions like 'doc_type=policy' or 'published>=2023', or elasticsearch.dsl "
                    f"queries (Q('range', ...)) or their dicts, got {e!r}"
                )
        return cls(
            tenant, groups, dict(checked.metadata), tuple(e if isinstance(e, str) else query_clause(e) for e in exprs)
        )

    def narrowed(self, metadata: Mapping[str, str | Sequence[str]] | None) -> RetrievalScope:
        """This scope with more metadata conditions (a per-call filter); it can only narrow the scope.

        Args:
            metadata: Conditions on fields this scope does not constrain yet.

        Raises:
            ConfigError: A condition on a field the scope already constrains (replacing it could widen the scope),
                or an invalid condition.
        """
        if not metadata:
            return self
        _check_mapping(metadata)
        taken = sorted(set(metadata) & set(self.metadata))
        if taken:
            raise ConfigError(
                f"metadata_filter: {', '.join(taken)} already constrained by the retriever "
                f"({', '.join(f'{k}={list(self.metadata[k])}' for k in taken)}); a call may only add conditions"
            )
        return RetrievalScope.of(self.tenant, self.acl, {**self.metadata, **metadata}, self.filters)

    def with_filters(self, exprs: Sequence[str]) -> RetrievalScope:
        """This scope with more ``--filter`` conditions (a per-call filter: every condition applies, so a call can
        only narrow the scope).

        Args:
            exprs: Conditions in ``es-rag search --filter`` syntax.
        """
        return RetrievalScope.of(self.tenant, self.acl, self.metadata, (*self.filters, *exprs)) if exprs else self


def check_client(client: Any) -> RagClient:
    """``client`` if it is an :class:`~es_rag.client.RagClient`.

    Args:
        client: What the adapter was given.

    Raises:
        ConfigError: Anything else.
    """
    from es_rag.client import RagClient

    if not isinstance(client, RagClient):
        raise ConfigError(
            f"client: expected an es_rag.RagClient, got {type(client).__name__} "
            "(RagClient.open(index_dir) / from_url(url) / from_elasticsearch(es))"
        )
    return client


def check_top_k(top_k: Any, name: str = "top_k") -> int | None:
    """``top_k`` if it is None or an int >= 1.

    Args:
        top_k: Most documents returned; None = every packed block.
        name: The parameter's name, for the error.

    Raises:
        ConfigError: Anything else.
    """
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"{name}: must be None or an integer >= 1, got {top_k!r}")
    return top_k


def hit_metadata(hit: Hit, *, citation: str | None, status: str) -> dict[str, Any]:
    """What every adapter's document carries besides its text: lineage, where it sits in its source (offsets; a
    PDF's 1-based ``page_start`` / ``page_end``, else None), every stage's score and the citation id the packed
    context gives it.

    Args:
        hit: A packed hit of a search.
        citation: Its citation id in ``result.context`` (``S1``, ``S2``, ...).
        status: The no-answer gate's verdict of the search (``evidence``, ``no_sufficient_evidence``,
            ``undecided``).
    """
    return {
        "citation": citation,
        "chunk_id": hit.chunk_id,
        "source_id": hit.source_id,
        "source_version": hit.source_version,
        "parent_id": hit.parent_id,
        "tenant_id": hit.tenant_id,
        "title": hit.title,
        "heading_path": list(hit.heading_path),
        "start_offset": hit.start_offset,
        "end_offset": hit.end_offset,
        "page_start": hit.page_start,
        "page_end": hit.page_end,
        "page_label_start": hit.page_label_start,
        "page_label_end": hit.page_label_end,
        "meta": dict(hit.meta),
        "chunker_version": hit.chunker_version,
        "embedding_version": hit.embedding_version,
        "scores": hit.scores(),
        "ranks": dict(hit.ranks),
        "retrieval_sources": list(hit.retrieval_sources),
        "reranker_model": hit.reranker_model,
        "truncated": hit.truncated,
        "expanded_from": list(hit.expanded_from),
        "evidence_status": status,
    }


def retrieve(
    client: RagClient, scope: RetrievalScope, query: Any, top_k: int | None
) -> list[tuple[Hit, dict[str, Any]]]:
    """Search ``query`` in ``scope``: the packed hits, best first (at most ``top_k``), each with its
    :func:`hit_metadata`. An empty query returns ``[]`` without searching.

    Args:
        client: The client.
        scope: The caller's scope.
        query: The query.
        top_k: Most hits returned; None = all packed.

    Raises:
        ConfigError: ``query`` is not a string.
        EsRagError: A hit of another tenant came back (never expected: the filter is in every retriever and
            expansion refuses it again; raised rather than handed on).
    """
    if not isinstance(query, str):
        raise ConfigError(f"query: expected a string, got {type(query).__name__}")
    if not query.strip():
        return []
    result = client.search(query, tenant=scope.tenant, acl=scope.acl, metadata=scope.metadata, filters=scope.filters)
    labels = {c.chunk_id: c.citation_id for c in result.context.citations}
    out = []
    for hit in result.hits[:top_k]:
        if hit.tenant_id != scope.tenant:
            raise EsRagError(
                f"tenant_id: hit {hit.chunk_id!r} belongs to tenant {hit.tenant_id!r}, not to the retriever's "
                f"{scope.tenant!r}; refused"
            )
        out.append((hit, hit_metadata(hit, citation=labels.get(hit.chunk_id), status=result.status)))
    return out
