"""Version switches and lineage deletes on each backend (the state machine is :mod:`es_rag.versioning`).

:class:`EsVersionStore` sends the registry GET/PUT (optimistic concurrency, retried on 409), the
refresh, and the ``_delete_by_query`` / ``_count`` requests built by :mod:`es_rag.versioning`;
:class:`EmbeddedVersionStore` applies the same transitions to the embedded backend's registry
(persisted in ``versions.json`` by ``save()``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from es_rag.errors import ClusterError
from es_rag.versioning import (
    RegistryState,
    lineage_count_requests,
    purge_requests,
    refresh_request,
    registry_get_request,
    registry_put_request,
    version_key,
)

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

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> int:
        """Delete the documents of these versions and drop them from the hidden list; returns how many went."""
        ...

    def delete_source(self, tenant_id: str, source_id: str) -> dict[str, Any]:
        """Delete every version of a source; returns ``{"deleted": n, "remaining": {"chunks": 0, "parents": 0}}``."""
        ...

    def state(self, tenant_id: str) -> RegistryState:
        """The tenant's registry."""
        ...


class _RegistryOps:
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

        def change(st: RegistryState) -> list[Pair]:
            retired = []
            for source_id, version in pairs:
                old = st.active.get(source_id)
                if st.commit(source_id, version) is not None and old is not None:
                    retired.append((source_id, old))
            return retired

        return list(self._update(tenant_id, change))


class EsVersionStore(_RegistryOps):
    """Registry and lineage operations over an :class:`~es_rag.backends.elasticsearch.ElasticsearchBackend`.

    Args:
        backend: The backend (its ``send`` and ``settings`` are used).
        max_attempts: Registry writes retried on a version conflict (HTTP 409) this many times.
    """

    def __init__(self, backend: Any, *, max_attempts: int = 5) -> None:
        self.backend = backend
        self.settings = backend.settings
        self.max_attempts = max_attempts

    def _read(self, tenant_id: str) -> tuple[RegistryState, int | None, int | None]:
        resp = self.backend.send(registry_get_request(self.settings, tenant_id), ignore=(404,))
        if isinstance(resp, dict) and "error" in resp:
            raise ClusterError(
                f"version registry {self.settings.index_prefix}-versions is unreadable (run `es-rag setup`)",
                status=404,
                response=resp,
            )
        if not isinstance(resp, dict) or not resp.get("found"):
            return RegistryState(tenant_id), None, None
        return RegistryState.from_doc(tenant_id, resp.get("_source")), resp.get("_seq_no"), resp.get("_primary_term")

    def _update(self, tenant_id: str, change: Callable[[RegistryState], Any]) -> Any:
        for attempt in range(self.max_attempts):
            state, seq_no, term = self._read(tenant_id)
            result = change(state)
            try:
                self.backend.send(registry_put_request(self.settings, state, seq_no=seq_no, primary_term=term))
                return result
            except ClusterError as exc:
                if exc.status != 409 or attempt + 1 == self.max_attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def state(self, tenant_id: str) -> RegistryState:
        """The tenant's registry.

        Args:
            tenant_id: The tenant.
        """
        return self._read(tenant_id)[0]

    def refresh(self) -> None:
        """Refresh the chunk and parent indices."""
        self.backend.send(refresh_request(self.settings))

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> int:
        """Delete these versions' documents, then drop their keys from ``hidden``.

        Args:
            tenant_id: The tenant.
            pairs: ``(source_id, version)`` to delete.
        """
        if not pairs:
            return 0
        keys = [version_key(s, v) for s, v in pairs]
        deleted = 0
        for req in purge_requests(self.settings, tenant_id, keys=keys):
            deleted += int(self.backend.send(req).get("deleted", 0))
        self._update(tenant_id, lambda st: st.forget(keys))
        return deleted

    def delete_source(self, tenant_id: str, source_id: str) -> dict[str, Any]:
        """Delete every child and parent of a source (all versions), forget it in the registry and count
        what remains.

        Args:
            tenant_id: The tenant.
            source_id: The source.
        """
        deleted = 0
        for req in purge_requests(self.settings, tenant_id, source_id=source_id):
            deleted += int(self.backend.send(req).get("deleted", 0))
        self._update(tenant_id, lambda st: st.drop_source(source_id))
        chunks_req, parents_req = lineage_count_requests(self.settings, tenant_id, source_id)
        remaining = {
            "chunks": int(self.backend.send(chunks_req).get("count", 0)),
            "parents": int(self.backend.send(parents_req).get("count", 0)),
        }
        return {"deleted": deleted, "remaining": remaining}


class EmbeddedVersionStore(_RegistryOps):
    """The same transitions on an :class:`~es_rag.backends.embedded.EmbeddedBackend` (single process:
    each transition is applied under the GIL in one assignment of the tenant's registry).

    Args:
        backend: The embedded backend.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def state(self, tenant_id: str) -> RegistryState:
        """The tenant's registry.

        Args:
            tenant_id: The tenant.
        """
        return RegistryState.from_doc(tenant_id, self.backend.versions.get(tenant_id))

    def _update(self, tenant_id: str, change: Callable[[RegistryState], Any]) -> Any:
        st = self.state(tenant_id)
        result = change(st)
        self.backend.versions[tenant_id] = st.to_doc()
        return result

    def refresh(self) -> None:
        """Nothing to do: embedded writes are visible at once."""

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> int:
        """Delete these versions' documents and drop their keys from ``hidden``.

        Args:
            tenant_id: The tenant.
            pairs: ``(source_id, version)``.
        """
        if not pairs:
            return 0
        keys = [version_key(s, v) for s, v in pairs]
        deleted = int(self.backend.delete_source(None, tenant_id=tenant_id, version_keys=set(keys)))
        self._update(tenant_id, lambda st: st.forget(keys))
        return deleted

    def delete_source(self, tenant_id: str, source_id: str) -> dict[str, Any]:
        """Delete every child and parent of a source and count what remains.

        Args:
            tenant_id: The tenant.
            source_id: The source.
        """
        deleted = int(self.backend.delete_source(source_id, tenant_id=tenant_id))
        self._update(tenant_id, lambda st: st.drop_source(source_id))
        return {"deleted": deleted, "remaining": self.backend.lineage_counts(tenant_id, source_id)}


def version_store(backend: Any) -> VersionStore | None:
    """The version store of ``backend``, or None for a backend without version support.

    Args:
        backend: An Elasticsearch or embedded backend.
    """
    from es_rag.backends.elasticsearch import ElasticsearchBackend
    from es_rag.backends.embedded import EmbeddedBackend

    if isinstance(backend, ElasticsearchBackend):
        return EsVersionStore(backend)
    if isinstance(backend, EmbeddedBackend):
        return EmbeddedVersionStore(backend)
    return None
