"""The version store of the embedded backend: the registry transitions applied in one process (persisted in
``versions.json`` by ``flush()``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from es_rag.versions.registry import RegistryState, version_key
from es_rag.versions.store import Pair, PurgeResult, RegistryOps, SourceSummary, summarize_sources


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

    def sources(self, tenant_id: str) -> list[SourceSummary]:
        """The tenant's sources: active version, chunks per version, parents, pages.

        Args:
            tenant_id: The tenant.
        """
        pages: dict[Pair, int] = {}

        def counts(docs: dict[str, dict[str, Any]], *, with_pages: bool = False) -> dict[Pair, int]:
            out: dict[Pair, int] = {}
            for d in docs.values():
                if d.get("tenant_id") == tenant_id:
                    key = (str(d["source_id"]), str(d["source_version"]))
                    out[key] = out.get(key, 0) + 1
                    if with_pages and d.get("page_end") is not None:
                        pages[key] = max(pages.get(key, 0), int(d["page_end"]))
            return out

        chunks = counts(self.backend._children, with_pages=True)
        return summarize_sources(self.state(tenant_id), chunks, counts(self.backend._parents), pages)

    def source_paths(self, tenant_id: str) -> dict[str, set[str]]:
        """Where each of the tenant's sources was read from: ``source_id`` -> its chunks' ``source_path`` values.

        Args:
            tenant_id: The tenant.
        """
        out: dict[str, set[str]] = {}
        for d in self.backend._children.values():
            if d.get("tenant_id") == tenant_id and d.get("source_path"):
                out.setdefault(str(d["source_id"]), set()).add(str(d["source_path"]))
        return out
