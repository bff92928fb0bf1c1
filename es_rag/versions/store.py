"""What a backend's version store does (the state machine is :mod:`es_rag.versions.registry`): the
:class:`VersionStore` protocol, the transitions every store shares (:class:`RegistryOps`) and the result
of a purge. The stores live with their backends: :class:`es_rag.elasticsearch.versions.EsVersionStore`
(registry GET/PUT with optimistic concurrency, refresh, ``_delete_by_query``) and
:class:`es_rag.embedded.versions.EmbeddedVersionStore`; ``backend.version_store()`` returns its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from es_rag.versions.registry import RegistryState, key_pair, version_key


@dataclass
class PurgeResult:
    """What a purge or a source delete did.

    Attributes:
        deleted: Documents deleted.
        conflicts: Documents ``_delete_by_query`` could not delete (changed since its search) in the last round.
        failures: Reasons of bulk or search failures of the last round.
        kept_hidden: Version keys left in ``hidden`` because some of their documents remain.
    """

    deleted: int = 0
    conflicts: int = 0
    failures: list[str] = field(default_factory=list)
    kept_hidden: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Whether every matching document was deleted."""
        return not self.conflicts and not self.failures

    def describe(self) -> str:
        """One line for reports."""
        parts = [f"{self.deleted} deleted"]
        if self.conflicts:
            parts.append(f"{self.conflicts} kept by version conflicts (written concurrently)")
        if self.failures:
            parts.append(f"{len(self.failures)} failures: {'; '.join(self.failures[:3])}")
        if self.kept_hidden:
            parts.append(f"still hidden: {', '.join(self.kept_hidden)}")
        return ", ".join(parts)


Pair = tuple[str, str]
"""``(source_id, source_version)``."""


@dataclass(frozen=True)
class SourceSummary:
    """One source of a tenant as ``es-rag sources`` lists it.

    Attributes:
        source_id: The source.
        active_version: The version the registry serves (None: no committed version, e.g. a write that failed).
        versions: Chunks stored per version (an old version still listed is one a purge left behind, hidden).
        parents: Parent sections stored, all versions.
        pages: The active version's last page (a PDF's page count), None for a source without pages.
    """

    source_id: str
    active_version: str | None
    versions: dict[str, int]
    parents: int
    pages: int | None = None

    @property
    def chunks(self) -> int:
        """Chunks of the active version (what searches can return)."""
        return self.versions.get(self.active_version or "", 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "source_id": self.source_id,
            "active_version": self.active_version,
            "chunks": self.chunks,
            "parents": self.parents,
            "pages": self.pages,
            "versions": dict(self.versions),
        }


def summarize_sources(
    state: RegistryState,
    chunk_counts: dict[Pair, int],
    parent_counts: dict[Pair, int],
    pages: Mapping[Pair, int] | None = None,
) -> list[SourceSummary]:
    """A tenant's sources from its registry and per-version document counts, by source id.

    Args:
        state: The tenant's registry.
        chunk_counts: Chunks per ``(source_id, version)``.
        parent_counts: Parents per ``(source_id, version)``.
        pages: The last page of each ``(source_id, version)`` that has pages (a PDF).
    """
    ids = {s for s, _ in chunk_counts} | {s for s, _ in parent_counts} | set(state.active)
    out = []
    for sid in sorted(ids):
        versions = {v: n for (s, v), n in sorted(chunk_counts.items()) if s == sid}
        parents = sum(n for (s, _), n in parent_counts.items() if s == sid)
        active = state.active.get(sid)
        out.append(SourceSummary(sid, active, versions, parents, (pages or {}).get((sid, active or ""))))
    return out


class VersionStore(Protocol):
    """Version switching and lineage deletion on one backend."""

    def begin(self, tenant_id: str, pairs: Sequence[Pair]) -> list[Pair]:
        """Hide the versions about to be written; returns those that need a switch."""
        ...

    def refresh(self) -> None:
        """Make written documents searchable."""
        ...

    def commit(
        self,
        tenant_id: str,
        pairs: Sequence[Pair],
        supersedes: Mapping[str, Sequence[str]] | None = None,
        abandoned: Sequence[Pair] = (),
        digests: Mapping[str, str] | None = None,
        stale: Sequence[str] = (),
    ) -> list[Pair]:
        """Serve ``pairs`` (and record what they supersede, what is to be deleted, and the digests of what is served)
        in one registry write; returns the retired ``(source_id, old_version)``."""
        ...

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> PurgeResult:
        """Delete the documents of these versions; forget their keys only when none remains."""
        ...

    def purge_retired(self, tenant_id: str, also: Sequence[Pair] = ()) -> PurgeResult:
        """Purge every version the registry lists as retired (pending, possibly from a killed run) and ``also``."""
        ...

    def delete_source(self, tenant_id: str, source_id: str) -> dict[str, Any]:
        """Delete every version of a source; returns ``{"deleted": n, "remaining": {"chunks": 0, "parents": 0},
        "conflicts": n, "failures": [...]}``; what remains stays hidden."""
        ...

    def sources(self, tenant_id: str) -> list[SourceSummary]:
        """The tenant's sources: active version, chunks per version, parents."""
        ...

    def state(self, tenant_id: str) -> RegistryState:
        """The tenant's registry."""
        ...

    def source_paths(self, tenant_id: str) -> dict[str, set[str]]:
        """``source_id`` -> the ``source_path`` values its chunks carry (for ``ingest --sync``)."""
        ...


class RegistryOps:
    """The registry transitions both stores share; each store supplies ``_update`` (read, change, write
    back: one registry document write on Elasticsearch, one assignment on the embedded backend)."""

    def _update(self, tenant_id: str, change: Callable[[RegistryState], Any]) -> Any:
        raise NotImplementedError

    def begin(self, tenant_id: str, pairs: Sequence[Pair]) -> list[Pair]:
        """Hide the versions about to be written (one registry write); returns those that need a switch.

        Args:
            tenant_id: The tenant.
            pairs: ``(source_id, new_version)`` about to be written.
        """
        return list(self._update(tenant_id, lambda st: [p for p in pairs if st.begin(*p)]))

    def commit(
        self,
        tenant_id: str,
        pairs: Sequence[Pair],
        supersedes: Mapping[str, Sequence[str]] | None = None,
        abandoned: Sequence[Pair] = (),
        digests: Mapping[str, str] | None = None,
        stale: Sequence[str] = (),
    ) -> list[Pair]:
        """The atomic switch: one registry update serves ``pairs``, hides their previous versions and records them
        as ``retired`` (the pending purge, :meth:`purge_retired`), records the sources each of them supersedes
        (hidden from the same snapshot on), and marks ``abandoned`` versions for deletion too.

        Args:
            tenant_id: The tenant.
            pairs: ``(source_id, new_version)`` fully written and refreshed.
            supersedes: ``source_id -> superseded source ids`` of the committed sources (their
                ``meta.supersedes``; a committed source missing here keeps none).
            abandoned: ``(source_id, version)`` begun and partly written that will never be committed (a document
                of the source failed).
            digests: ``source_id -> digest`` of the sources now served whole
                (:func:`es_rag.ingest.digest.source_digest`; committed here or rewritten in place): the next ingest
                skips a source whose digest is unchanged.
            stale: Sources whose recorded digest no longer describes what is stored (a document failed): forgotten.
        """
        declared = dict(supersedes or {})
        dropped = [version_key(s, v) for s, v in abandoned]

        first_read: list[dict[str, str | None]] = []  # the active versions at the first read (one entry)

        def change(st: RegistryState) -> list[Pair]:
            # What this call retires is decided by the FIRST read: when a write is applied but its answer lost, the
            # transport resends it, the server answers 409 and the re-read already shows the new version active --
            # judged from that read alone, nothing would be retired, never purged, and no listener told.
            if not first_read:
                first_read.append({s: st.active.get(s) for s, _ in pairs})
            retired: set[Pair] = set()
            for source_id, version in pairs:
                old = st.active.get(source_id)
                if st.commit(source_id, version) is not None and old is not None:
                    retired.add((source_id, old))
                before = first_read[0].get(source_id)
                if before is not None and before != version and version_key(source_id, before) in st.hidden:
                    retired.add((source_id, before))
                st.supersede(source_id, declared.get(source_id, ()))
            st.abandon(dropped)
            for source_id in stale:
                st.digests.pop(source_id, None)
            st.digests.update(digests or {})
            return sorted(retired)

        return list(self._update(tenant_id, change))

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> PurgeResult:
        raise NotImplementedError

    def state(self, tenant_id: str) -> RegistryState:
        raise NotImplementedError

    def purge_retired(self, tenant_id: str, also: Sequence[Pair] = ()) -> PurgeResult:
        """Delete the documents of every version the registry lists as ``retired`` (committed away, or abandoned)
        and of ``also``, and forget them when the delete is clean: the end of each ingest, and the resumption at the
        start of the next one of a purge that a killed run left unfinished.

        Args:
            tenant_id: The tenant.
            also: Versions this run retired (purged even where the registry cannot list them: an index of asset
                version 9 has no ``retired`` field).
        """
        pairs = sorted({*also, *(key_pair(k) for k in self.state(tenant_id).retired)})
        return self.purge(tenant_id, pairs) if pairs else PurgeResult()
