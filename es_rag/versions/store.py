"""What a backend's version store does (the state machine is :mod:`es_rag.versions.registry`): the
:class:`VersionStore` protocol, the transitions every store shares (:class:`RegistryOps`) and the result
of a purge. The stores live with their backends: :class:`es_rag.elasticsearch.versions.EsVersionStore`
(registry GET/PUT with optimistic concurrency, refresh, ``_delete_by_query``) and
:class:`es_rag.embedded.versions.EmbeddedVersionStore`; ``backend.version_store()`` returns its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from es_rag.versions.registry import RegistryState, version_key


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


class VersionStore(Protocol):
    """Version switching and lineage deletion on one backend."""

    def begin(self, tenant_id: str, pairs: Sequence[Pair]) -> list[Pair]:
        """Hide the versions about to be written; returns those that need a switch."""
        ...

    def refresh(self) -> None:
        """Make written documents searchable."""
        ...

    def commit(self, tenant_id: str, pairs: Sequence[Pair]) -> list[Pair]:
        """Serve ``pairs`` in one registry write; returns the retired ``(source_id, old_version)``."""
        ...

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> PurgeResult:
        """Delete the documents of these versions; forget their keys only when none remains."""
        ...

    def delete_source(self, tenant_id: str, source_id: str) -> dict[str, Any]:
        """Delete every version of a source; returns ``{"deleted": n, "remaining": {"chunks": 0, "parents": 0},
        "conflicts": n, "failures": [...]}``; what remains stays hidden."""
        ...

    def state(self, tenant_id: str) -> RegistryState:
        """The tenant's registry."""
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

    def commit(self, tenant_id: str, pairs: Sequence[Pair]) -> list[Pair]:
        """The atomic switch: one registry update serves ``pairs`` and hides their previous versions.

        Args:
            tenant_id: The tenant.
            pairs: ``(source_id, new_version)`` fully written and refreshed.
        """

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
            return sorted(retired)

        return list(self._update(tenant_id, change))
