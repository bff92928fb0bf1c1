"""One filter model for every retriever: tenant, ACL groups, metadata terms and conditions, validity, and the
queries an app adds (``elasticsearch.dsl`` objects or their dicts, :mod:`es_rag.query_filters`).

The same :class:`SearchFilter` renders to Elasticsearch ``filter`` clauses (placed inside every
child retriever, never as a post-filter) and evaluates the identical predicate on the embedded
backend, so both paths hide exactly the same documents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from es_rag.errors import ConfigError
from es_rag.metadata import Condition, Validity, now_ms
from es_rag.principals import check_name, check_names
from es_rag.query_filters import query_clause, query_matches
from es_rag.settings import PUBLIC_GROUP
from es_rag.versions.registry import VersionSnapshot

_RESERVED = {"tenant_id", "acl"}


@dataclass(frozen=True)
class SearchFilter:
    """Hard filter of one search.

    Args:
        tenant_id: Tenant of the caller; required, never empty.
        groups: ACL groups of the caller. The implicit ``public`` group is always added.
        metadata: Extra exact-match conditions, field -> value or tuple of allowed values (keyword fields).
        conditions: Typed conditions on declared metadata (``meta.*``; :func:`es_rag.metadata.parse_filter`).
        validity: Hide documents whose ``valid_from`` / ``valid_to`` exclude the query's day
            (:class:`es_rag.metadata.Validity`, ``now`` by default); None serves every date.
        versions: Active-version snapshot (:class:`~es_rag.versions.registry.VersionSnapshot`); the backends set
            it on every search so only the committed version of each source is served.
        queries: Extra filter clauses an app writes as Elasticsearch queries (``elasticsearch.dsl`` objects, their
            dicts or JSON; :mod:`es_rag.query_filters`), placed beside the others in every retriever's filter.
    """

    tenant_id: str
    groups: tuple[str, ...] = ()
    metadata: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    validity: Validity | None = field(default_factory=Validity)
    # Active-version snapshot (issue 3, es_rag.versions.registry): set by the backends on every search so retired and
    # not-yet-committed source versions are excluded inside every retriever; None = no gate.
    versions: VersionSnapshot | None = None
    queries: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.tenant_id, str) or not self.tenant_id.strip():
            raise ConfigError("tenant_id: a search needs a non-empty tenant; pass --tenant or tenant_id=")
        check_name(self.tenant_id, "tenant_id")
        groups = tuple(dict.fromkeys([*check_names(self.groups, "acl group"), PUBLIC_GROUP]))
        object.__setattr__(self, "groups", groups)
        normalised: dict[str, tuple[str, ...]] = {}
        for key, value in dict(self.metadata).items():
            if key in _RESERVED:
                raise ConfigError(f"metadata filter: {key!r} is set by tenant_id/groups, not by metadata")
            values = (value,) if isinstance(value, str) else tuple(str(v) for v in value)
            if not values:
                raise ConfigError(f"metadata filter {key!r}: needs at least one value")
            normalised[key] = values
        object.__setattr__(self, "metadata", normalised)
        object.__setattr__(self, "conditions", tuple(self.conditions))
        object.__setattr__(self, "queries", tuple(query_clause(q) for q in self.queries))

    def with_versions(self, snapshot: VersionSnapshot | None) -> SearchFilter:
        """This filter with the tenant's active-version ``snapshot`` (see :mod:`es_rag.versions.registry`).

        Args:
            snapshot: The tenant's snapshot; None removes it.
        """
        if snapshot is not None and snapshot.tenant_id != self.tenant_id:
            raise ConfigError(
                f"version snapshot of tenant {snapshot.tenant_id!r} on a filter of tenant {self.tenant_id!r}"
            )
        return dataclasses.replace(self, versions=snapshot)

    def to_es(self) -> list[dict[str, Any]]:
        """Elasticsearch filter clauses (for a bool ``filter``, a retriever ``filter`` or a kNN ``filter``)."""
        clauses: list[dict[str, Any]] = [
            {"term": {"tenant_id": self.tenant_id}},
            {"terms": {"acl": list(self.groups)}},
        ]
        for key, values in self.metadata.items():
            clauses.append({"terms": {key: list(values)}})
        clauses.extend(c.to_es() for c in self.conditions)
        clauses.extend(self.queries)
        if self.validity is not None:
            clauses.append(self.validity.to_es())
        if self.versions is not None and self.versions.restricts:
            clauses.append(self.versions.to_es())
        return clauses

    def matches(self, source: Mapping[str, Any], *, now: int | None = None) -> bool:
        """Evaluate the same predicate as :meth:`to_es` on a stored document's source.

        Args:
            source: The document as stored (keyword fields may be a string or a list of strings).
            now: The request's ``now`` in epoch milliseconds (None: the current time).
        """
        if source.get("tenant_id") != self.tenant_id:
            return False
        if not set(keyword_values(source.get("acl"))) & set(self.groups):
            return False
        if self.versions is not None and not self.versions.allows(source):
            return False
        if not all(set(keyword_values(source.get(key))) & set(values) for key, values in self.metadata.items()):
            return False
        return self.meta_matches(source, now=now)

    def meta_matches(self, source: Mapping[str, Any], *, now: int | None = None) -> bool:
        """The typed conditions and the validity alone (the part of :meth:`matches` on ``meta``).

        Args:
            source: The document as stored.
            now: The request's ``now`` in epoch milliseconds (None: the current time).
        """
        if not self.conditions and self.validity is None and not self.queries:
            return True
        at = now_ms() if now is None else now
        if self.validity is not None and not self.validity.matches(source, now_ms=at):
            return False
        if not all(c.matches(source, now_ms=at) for c in self.conditions):
            return False
        return all(query_matches(q, source, now_ms=at) for q in self.queries)


def keyword_values(value: Any) -> list[str]:
    """The keywords a stored field holds, as :meth:`SearchFilter.matches` compares them: none for a missing
    field or None, ``str`` of each element of a list, else ``str`` of the value.

    Args:
        value: The stored value.
    """
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]
