"""The version store of the embedded backend: the registry transitions applied in one process (persisted in
``versions.json`` by ``flush()``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from es_rag.versions.registry import RegistryState, version_key
from es_rag.versions.store import Pair, PurgeResult, RegistryOps


class EmbeddedVersionStore(RegistryOps):
    """The same transitions on an :class:`~es_rag.embedded.backend.EmbeddedBackend` (single process:
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

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> PurgeResult:
        """Delete these versions' documents and drop their keys from ``hidden`` (nothing conflicts in one process).

        Args:
            tenant_id: The tenant.
            pairs: ``(source_id, version)``.
        """
        if not pairs:
            return PurgeResult()
        keys = [version_key(s, v) for s, v in pairs]
        deleted = int(self.backend.delete_source(None, tenant_id=tenant_id, version_keys=set(keys)))
        self._update(tenant_id, lambda st: st.forget(keys))
        return PurgeResult(deleted=deleted)

    def delete_source(self, tenant_id: str, source_id: str) -> dict[str, Any]:
        """Delete every child and parent of a source and count what remains.

        Args:
            tenant_id: The tenant.
            source_id: The source.
        """
        deleted = int(self.backend.delete_source(source_id, tenant_id=tenant_id))
        self._update(tenant_id, lambda st: st.drop_source(source_id))
        remaining = self.backend.lineage_counts(tenant_id, source_id)
        return {"deleted": deleted, "remaining": remaining, "conflicts": 0, "failures": []}
