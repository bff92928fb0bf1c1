"""Source versions: exactly one version of each source is served, switched atomically.

Every chunk and parent stores ``version_key = source_id@source_version``. One small document per
tenant in the registry index ``<prefix>-versions`` (``_id`` = tenant id) lists the ``active`` version of
each source and the ``hidden`` keys: versions being written but not yet committed, and retired versions
not yet deleted.

**One snapshot per call.** :meth:`es_rag.pipeline.RagPipeline.search` reads the tenant's registry document
once (a real-time GET, ``ElasticsearchBackend.gated``) and every request of that call -- each channel of the
native retriever or the ``_msearch``, parents, neighbours -- carries the same inline clause

    {"bool": {"must_not": [{"terms": {"version_key": ["<hidden key>", ...]}}]}}

through :meth:`es_rag.filters.SearchFilter.to_es` (left out when nothing is hidden). A terms *lookup*
(:class:`VersionSnapshot` with ``index``) would be fetched again for every clause that uses it
(``TermsQueryBuilder.doRewrite`` registers one GET per clause): a registry write between those GETs would
serve the old version on one channel and the new one on another. The lookup form stays available for
requests pasted into Kibana and the stored search template.

The switch is **one document write** (new key leaves ``hidden``, old key enters it). Before that write the
new chunks are written and the chunk and parent indices refreshed, so a snapshot taken before it serves the
old version completely and one taken after serves the new version completely. Retired chunks are removed
with ``_delete_by_query`` only after the switch and their key dropped from ``hidden`` afterwards. Documents
without ``version_key`` (written by other tools) are never hidden.

Limits: the ``hidden`` list holds only in-flight and not-yet-purged keys (normally a handful); a terms
query accepts at most ``index.max_terms_count`` terms (65,536 by default) -- the bound on keys being
switched or purged at once for one tenant. A missing registry document hides nothing; a missing
registry *index* fails the search (``es-rag setup`` creates it; ``doctor`` reports it).

What one call guarantees (``docs/ingestion.md``): every request of the call applies the same snapshot --
never two versions of a source, never one version on one channel and another on the next. The snapshot is
the one at the start of the call: a switch committed during the call is seen by the next call, and if the
purge of the old version also completes during the call, that source has no chunks in that one call.

The embedded backend keeps the same registry in ``versions.json`` and evaluates the same predicate
through :meth:`es_rag.filters.SearchFilter.matches`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from es_rag.es_request import EsRequest
from es_rag.settings import Settings

VERSION_KEY_FIELD = "version_key"
SUPERSEDED_FIELD = "superseded"
"""Registry field listing the tenant's superseded source ids (every retriever excludes them)."""
RETIRED_FIELD = "retired"
"""Registry field listing the hidden keys whose documents are to be deleted (the pending purge; asset version 10)."""
WRITING_FIELD = "writing"
"""Registry field: key -> when its write began (asset version 10; an object Elasticsearch stores, never indexes)."""
DIGESTS_FIELD = "digests"
"""Registry field: source id -> the digest of what its active version's chunks hold (asset version 11; an object
Elasticsearch stores, never indexes): an ingest that reads the same source with the same settings and model skips it
(:func:`es_rag.ingest.digest.source_digest`)."""
SNAPSHOT_FIELDS = ("hidden", SUPERSEDED_FIELD)
"""What a search reads of the registry (:class:`VersionSnapshot`): its GET fetches only these fields."""
ABANDONED_AFTER_S = 24 * 3600
"""A version whose write began this long ago and never committed belongs to a killed run: the next commit of the same
source retires it (a slower ingest of one source by another process would lose its version; none takes a day)."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _parse(stamp: str) -> datetime:
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return datetime.now(timezone.utc)  # unreadable: treated as just begun, never retired by age
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def version_key(source_id: str, source_version: str) -> str:
    """The key every chunk of ``source_id`` at ``source_version`` carries.

    Args:
        source_id: Source id.
        source_version: Source version.
    """
    return f"{source_id}@{source_version}"


def key_pair(key: str) -> tuple[str, str]:
    """``(source_id, source_version)`` of a version key.

    Args:
        key: ``source_id@source_version``.
    """
    source, _, version = key.rpartition("@")
    return source, version


def registry_index(settings: Settings) -> str:
    """Name of the version registry index.

    Args:
        settings: Gives the index prefix.
    """
    return settings.index_name("versions")


@dataclass(frozen=True)
class VersionSnapshot:
    """The active-version predicate of one tenant.

    Args:
        tenant_id: Tenant whose registry document applies.
        index: Registry index for the Elasticsearch terms lookup; None renders the ``hidden`` keys inline.
        hidden: Keys not served (used by :meth:`allows` and by the inline rendering).
    """

    tenant_id: str
    index: str | None = None
    hidden: frozenset[str] = field(default_factory=frozenset)
    superseded: frozenset[str] = field(default_factory=frozenset)

    @property
    def restricts(self) -> bool:
        """Whether :meth:`to_es` can hide anything (a lookup always may; an inline snapshot only with keys or
        superseded sources)."""
        return self.index is not None or bool(self.hidden) or bool(self.superseded)

    def to_es(self) -> dict[str, Any]:
        """Filter clause excluding hidden versions and superseded sources (terms lookups on the registry document,
        or inline)."""
        if self.index is not None:
            lookup = {"index": self.index, "id": self.tenant_id}
            return {
                "bool": {
                    "must_not": [
                        {"terms": {VERSION_KEY_FIELD: {**lookup, "path": "hidden"}}},
                        {"terms": {"source_id": {**lookup, "path": SUPERSEDED_FIELD}}},
                    ]
                }
            }
        must_not: list[dict[str, Any]] = [{"terms": {VERSION_KEY_FIELD: sorted(self.hidden)}}]
        if self.superseded:
            must_not.append({"terms": {"source_id": sorted(self.superseded)}})
        return {"bool": {"must_not": must_not}}

    def allows(self, source: Any) -> bool:
        """Whether a stored document is served (documents without ``version_key`` always are, unless their source
        is superseded).

        Args:
            source: The stored document.
        """
        if self.superseded and str(source.get("source_id")) in self.superseded:
            return False
        key = source.get(VERSION_KEY_FIELD)
        return key is None or str(key) not in self.hidden

    @classmethod
    def from_doc(cls, tenant_id: str, doc: dict[str, Any] | None) -> VersionSnapshot:
        """The inline snapshot of a stored registry document (None: nothing hidden).

        Args:
            tenant_id: The tenant.
            doc: ``_source`` of the registry document.
        """
        doc = doc or {}
        return cls(
            tenant_id,
            hidden=frozenset(str(k) for k in doc.get("hidden") or []),
            superseded=frozenset(str(k) for k in doc.get(SUPERSEDED_FIELD) or []),
        )


@dataclass
class RegistryState:
    """One tenant's registry document: active version per source, the hidden keys, and the ``retired`` keys among
    them whose documents are still to be deleted.

    ``retired`` is the pending purge (issue 33): a switch records the versions it retires in the same write, and
    only a clean delete of their documents removes them (:meth:`forget`). A run killed between the switch and the
    end of the purge leaves them listed, and the next ingest of the tenant purges them
    (:meth:`es_rag.versions.store.RegistryOps.purge_retired`): nothing is stored forever. Keys still being written
    are hidden but never retired, so a purge never deletes what another ingest is writing.
    """

    tenant_id: str
    active: dict[str, str] = field(default_factory=dict)
    hidden: list[str] = field(default_factory=list)
    superseded_by: dict[str, str] = field(default_factory=dict)
    retired: list[str] = field(default_factory=list)
    writing: dict[str, str] = field(default_factory=dict)
    """Keys being written -> when their write began (ISO 8601, UTC). A write that never committed (its run was
    killed) is told from one still running by its age: the next commit of the same source retires a version whose
    write began more than :data:`ABANDONED_AFTER_S` ago."""
    digests: dict[str, str] = field(default_factory=dict)
    """Source id -> the digest of its active version's chunks (:data:`DIGESTS_FIELD`); absent: not known (written
    before asset version 11, or failed since), so the next ingest of the source embeds it again."""

    @classmethod
    def from_doc(cls, tenant_id: str, doc: dict[str, Any] | None) -> RegistryState:
        """Parse a stored registry document (None: empty registry).

        Args:
            tenant_id: The tenant.
            doc: ``_source`` of the registry document.
        """
        doc = doc or {}
        return cls(
            tenant_id,
            dict(doc.get("active") or {}),
            list(doc.get("hidden") or []),
            {str(k): str(v) for k, v in (doc.get("superseded_by") or {}).items()},
            [str(k) for k in doc.get(RETIRED_FIELD) or []],
            {str(k): str(v) for k, v in (doc.get(WRITING_FIELD) or {}).items()},
            {str(k): str(v) for k, v in (doc.get(DIGESTS_FIELD) or {}).items()},
        )

    def to_doc(self) -> dict[str, Any]:
        """The registry document body."""
        doc: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "active": dict(sorted(self.active.items())),
            "hidden": sorted(self.hidden),
        }
        if self.superseded_by:
            doc["superseded_by"] = dict(sorted(self.superseded_by.items()))
            doc[SUPERSEDED_FIELD] = sorted(self.superseded_by)
        if self.retired:  # absent when empty: a registry index of asset version 9 has no such field
            doc[RETIRED_FIELD] = sorted(self.retired)
        if self.writing:
            doc[WRITING_FIELD] = dict(sorted(self.writing.items()))
        if self.digests:  # absent when empty: a registry index before asset version 11 has no such field
            doc[DIGESTS_FIELD] = dict(sorted(self.digests.items()))
        return doc

    def supersede(self, source_id: str, targets: Sequence[str]) -> None:
        """Record that ``source_id`` replaces ``targets`` (its ``meta.supersedes``), replacing what it declared
        before: every version of a target is hidden from then on, whenever it is (re-)ingested, until the
        superseding source is deleted or stops declaring it.

        Args:
            source_id: The superseding source, just committed.
            targets: The source ids it supersedes (itself is ignored).
        """
        self.superseded_by = {k: v for k, v in self.superseded_by.items() if v != source_id}
        for target in targets:
            if target != source_id:
                self.superseded_by[target] = source_id

    def begin(self, source_id: str, source_version: str, at: str | None = None) -> bool:
        """Hide ``source_version`` while it is written, noting when the write began; False when it is already the
        active version (re-ingesting the same version rewrites the same ids in place, no switch needed).

        Args:
            source_id: Source id.
            source_version: Version about to be written.
            at: The time the write begins (ISO 8601; None: now).
        """
        if self.active.get(source_id) == source_version:
            return False
        key = version_key(source_id, source_version)
        if key not in self.hidden:
            self.hidden.append(key)
        self.writing[key] = at or _now()
        return True

    def commit(self, source_id: str, source_version: str) -> str | None:
        """Serve ``source_version`` and hide the previous version; returns the retired key.

        Args:
            source_id: Source id.
            source_version: Version now complete and refreshed.
        """
        old = self.active.get(source_id)
        self.active[source_id] = source_version
        new_key = version_key(source_id, source_version)
        self.hidden = [k for k in self.hidden if k != new_key]
        self.retired = [k for k in self.retired if k != new_key]
        self.writing.pop(new_key, None)
        # another version of this source whose write began long ago and never committed: its run was killed
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=ABANDONED_AFTER_S)
        stale = [k for k, t in self.writing.items() if key_pair(k)[0] == source_id and _parse(t) < cutoff]
        for key in stale:
            self.writing.pop(key)
        self._retire(stale)
        if old is None or old == source_version:
            return None
        old_key = version_key(source_id, old)
        if old_key not in self.hidden:
            self.hidden.append(old_key)
        self._retire([old_key])
        return old_key

    def _retire(self, keys: Sequence[str]) -> None:
        for key in keys:
            if key not in self.retired:
                self.retired.append(key)

    def abandon(self, keys: Sequence[str]) -> None:
        """Mark written-but-not-committed versions (their source failed) for deletion: they stay hidden and join
        ``retired``.

        Args:
            keys: Version keys that will never be committed.
        """
        for key in keys:
            if key not in self.hidden:
                self.hidden.append(key)
            self.writing.pop(key, None)
        self._retire(keys)

    def forget(self, keys: Sequence[str]) -> None:
        """Drop purged keys from ``hidden``.

        Args:
            keys: Keys whose documents are deleted.
        """
        gone = set(keys)
        self.hidden = [k for k in self.hidden if k not in gone]
        self.retired = [k for k in self.retired if k not in gone]
        self.writing = {k: t for k, t in self.writing.items() if k not in gone}

    def hide_source(self, source_id: str) -> None:
        """Serve nothing of ``source_id`` while some of its documents are still stored (a delete left them):
        its active version leaves ``active`` and joins ``hidden``; hidden keys of it stay hidden.

        Args:
            source_id: Source id.
        """
        self._release(source_id)
        self.digests.pop(source_id, None)
        version = self.active.pop(source_id, None)
        if version is not None:
            key = version_key(source_id, version)
            if key not in self.hidden:
                self.hidden.append(key)

    def _release(self, source_id: str) -> None:
        """A source leaving: what it superseded is served again, and it is no longer recorded as superseded."""
        self.superseded_by = {k: v for k, v in self.superseded_by.items() if v != source_id and k != source_id}

    def drop_source(self, source_id: str) -> None:
        """Forget a deleted source entirely.

        Args:
            source_id: Source id.
        """
        self._release(source_id)
        self.active.pop(source_id, None)
        self.digests.pop(source_id, None)
        prefix = source_id + "@"
        self.hidden = [k for k in self.hidden if not k.startswith(prefix)]
        self.retired = [k for k in self.retired if not k.startswith(prefix)]
        self.writing = {k: t for k, t in self.writing.items() if not k.startswith(prefix)}


class LineageListener(Protocol):
    """Told when a version is retired or a source deleted, to drop derived state (e.g. a result cache)."""

    def on_retired(self, tenant_id: str, source_id: str, source_version: str) -> None:
        """``source_version`` of ``source_id`` is no longer served."""
        ...

    def on_deleted(self, tenant_id: str, source_id: str) -> None:
        """Every version of ``source_id`` was deleted."""
        ...


# ------------------------------------------------------------------------------ request builders
def _doc_path(settings: Settings, tenant_id: str) -> str:
    return f"{registry_index(settings)}/_doc/{urllib.parse.quote(tenant_id, safe='')}"


def registry_get_request(settings: Settings, tenant_id: str, *, snapshot: bool = False) -> EsRequest:
    """Read a tenant's registry document (real-time GET).

    Args:
        settings: Index prefix.
        tenant_id: The tenant.
        snapshot: Fetch only what a search reads (:data:`SNAPSHOT_FIELDS`, ``_source_includes``: ``RestGetAction``
            parses it with ``FetchSourceContext.parseFromRestRequest``), not ``active`` and ``digests``, which grow
            with the tenant's sources.
    """
    path = _doc_path(settings, tenant_id)
    return EsRequest("GET", f"{path}?_source_includes={','.join(SNAPSHOT_FIELDS)}" if snapshot else path)


def registry_put_request(
    settings: Settings, state: RegistryState, *, seq_no: int | None, primary_term: int | None
) -> EsRequest:
    """Write a tenant's registry document with optimistic concurrency (``if_seq_no``/``if_primary_term``,
    or ``op_type=create`` for a new document), so two writers cannot lose each other's switch.

    Args:
        settings: Index prefix.
        state: The new registry state.
        seq_no: ``_seq_no`` of the version read, None when the document did not exist.
        primary_term: ``_primary_term`` of the version read.
    """
    if seq_no is None or primary_term is None:
        query = "op_type=create"
    else:
        query = f"if_seq_no={seq_no}&if_primary_term={primary_term}"
    return EsRequest("PUT", f"{_doc_path(settings, state.tenant_id)}?{query}", state.to_doc())


def refresh_request(settings: Settings) -> EsRequest:
    """Refresh the chunk and parent indices (new chunks searchable before the switch).

    Args:
        settings: Index names.
    """
    return EsRequest("POST", f"{settings.chunk_index},{settings.parent_index}/_refresh")


def _lineage_query(tenant_id: str, source_id: str | None, keys: Sequence[str] | None) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"term": {"tenant_id": tenant_id}}]
    if source_id is not None:
        clauses.append({"term": {"source_id": source_id}})
    if keys is not None:
        clauses.append({"terms": {VERSION_KEY_FIELD: list(keys)}})
    return {"bool": {"filter": clauses}}


def purge_requests(
    settings: Settings, tenant_id: str, *, source_id: str | None = None, keys: Sequence[str] | None = None
) -> list[EsRequest]:
    """``_delete_by_query`` on the chunk and parent indices for one tenant's source and/or version keys, run as
    tasks (``wait_for_completion=false``; :func:`task_request` reads the result).

    ``conflicts=proceed``: a document changed since the delete's search is not deleted but counted in
    ``version_conflicts`` (the caller retries, and never forgets a key whose documents remain);
    ``refresh=true``: the following ``_count`` sees the result.

    Args:
        settings: Index names.
        tenant_id: Tenant (always part of the query).
        source_id: Delete every version of this source.
        keys: Delete these version keys.
    """
    body = {"query": _lineage_query(tenant_id, source_id, keys)}
    return [
        EsRequest("POST", f"{index}/_delete_by_query?conflicts=proceed&refresh=true&wait_for_completion=false", body)
        for index in (settings.chunk_index, settings.parent_index)
    ]


def task_request(task_id: str, *, wait_s: float) -> EsRequest:
    """``GET _tasks/<id>`` waiting up to ``wait_s`` for completion (``TaskResult``: ``completed``, ``response`` or
    ``error``).

    Args:
        task_id: ``node:number`` as ``wait_for_completion=false`` answered it.
        wait_s: Server-side wait for this poll.
    """
    return EsRequest(
        "GET", f"_tasks/{urllib.parse.quote(task_id, safe=':')}?wait_for_completion=true&timeout={wait_s:g}s"
    )


def lineage_count_requests(settings: Settings, tenant_id: str, source_id: str) -> list[EsRequest]:
    """``_count`` of a tenant's source in the chunk and parent indices (verifies a delete).

    Args:
        settings: Index names.
        tenant_id: Tenant.
        source_id: Source id.
    """
    body = {"query": _lineage_query(tenant_id, source_id, None)}
    return [EsRequest("POST", f"{index}/_count", body) for index in (settings.chunk_index, settings.parent_index)]


#: Buckets per page of the sources listing (the composite aggregation's ``size``).
SOURCES_PAGE = 1000


def source_listing_request(
    tenant_id: str,
    index: str,
    *,
    after: dict[str, str] | None = None,
    size: int = SOURCES_PAGE,
    fields: Sequence[str] = ("source_id", "source_version"),
    pages: bool = False,
) -> EsRequest:
    """One page of a tenant's ``(source_id, source_version)`` pairs with their document counts in ``index``: a
    ``composite`` aggregation of two ``terms`` sources (``CompositeAggregationBuilder``; pages with ``after`` =
    the previous page's ``after_key``), no hits.

    Args:
        tenant_id: Tenant (always the query).
        index: The chunk or the parent index.
        after: ``after_key`` of the previous page.
        size: Buckets per page.
        fields: The keyword fields of the key (``("source_id", "source_path")``: where each source was read from,
            for ``ingest --sync``; ``source_path`` is ``index: false`` but keeps its doc values, which
            aggregations read; a document without it makes no bucket).
        pages: Also the largest ``page_end`` of each bucket (a ``max`` sub-aggregation: a PDF source's page count;
            ``null`` for a source without pages, and on an index whose mapping predates the field).
    """
    composite: dict[str, Any] = {
        "size": size,
        "sources": [{name: {"terms": {"field": name}}} for name in fields],
    }
    if after is not None:
        composite["after"] = dict(after)
    agg: dict[str, Any] = {"composite": composite}
    if pages:
        agg["aggs"] = {"pages": {"max": {"field": "page_end"}}}
    body = {"size": 0, "query": _lineage_query(tenant_id, None, None), "aggs": {"sources": agg}}
    return EsRequest("POST", f"{index}/_search", body)
