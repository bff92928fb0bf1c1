"""The version switch of an ingest (:mod:`es_rag.versions.registry`), run at each checkpoint for the sources whose
chunks are all written, and at the end for the rest: one registry write per tenant serves them (and records their
digests), then the versions they retire are purged and the listeners told.

A checkpoint makes an interrupted run resumable: what it switched is served and recorded, so the next run skips those
sources (:func:`es_rag.ingest.digest.source_digest`) and embeds only the rest.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from es_rag.ingest.report import IngestReport
from es_rag.versions.registry import LineageListener
from es_rag.versions.store import Pair, VersionStore

Done = tuple[str, str, str, str | None]
"""A source whose chunks are all written: ``(tenant_id, source_id, source_version, digest or None)``."""


class Switcher:
    """Switches finished sources to their new version.

    Args:
        store: The backend's version store.
        report: Receives ``switched`` rows and warnings (under ``lock``).
        lock: The ingest's report lock.
        listeners: Told about every retired version.
        supersedes: ``tenant -> source_id -> superseded ids`` (each source's ``meta.supersedes``).
        broken: Returns the ``(tenant, source_id)`` any of whose documents failed so far.
    """

    def __init__(
        self,
        store: VersionStore,
        report: IngestReport,
        lock: threading.Lock,
        listeners: Sequence[LineageListener],
        supersedes: Mapping[str, Mapping[str, list[str]]],
        broken: Callable[[], set[tuple[str, str]]],
    ) -> None:
        self.store = store
        self.report = report
        self.lock = lock
        self.listeners = listeners
        self.supersedes = supersedes
        self.broken = broken

    def switch(self, done: Sequence[Done], started: Mapping[str, Sequence[Pair]]) -> None:
        """Refresh, then per tenant one registry write: serve the sources of ``done`` that ``started`` (those whose
        version needed a switch) and that did not fail, abandon those that failed, record the digests of the good
        ones; then purge what that write retired.

        Args:
            done: Sources whose chunks are all written.
            started: ``tenant -> pairs`` whose write began a new version (:meth:`VersionStore.begin`).
        """
        if not done:
            return
        t0 = time.perf_counter()
        self.store.refresh()
        broken = self.broken()
        by_tenant: dict[str, list[Done]] = defaultdict(list)
        for item in done:
            by_tenant[item[0]].append(item)
        for tenant, items in by_tenant.items():
            began = set(started.get(tenant, ()))
            ok = [(s, v) for _, s, v, _ in items if (tenant, s) not in broken and (s, v) in began]
            bad = [(s, v) for _, s, v, _ in items if (tenant, s) in broken and (s, v) in began]
            digests = {s: d for _, s, _, d in items if d and (tenant, s) not in broken}
            stale = [s for _, s, _, _ in items if (tenant, s) in broken]
            if not (ok or bad or digests or stale):
                continue
            # one registry write serves `ok` and lists what is to be deleted (the retired versions and `bad`): a run
            # killed before the purge below ends leaves that list, and the next ingest of the tenant purges it
            retired = self.store.commit(
                tenant, ok, supersedes=self.supersedes.get(tenant), abandoned=bad, digests=digests, stale=stale
            )
            with self.lock:
                for source_id, version in ok:
                    old = next((v for s, v in retired if s == source_id), None)
                    self.report.switched.append(
                        {"tenant_id": tenant, "source_id": source_id, "version": version, "retired": old or ""}
                    )
            purged = self.store.purge_retired(tenant, also=[*retired, *bad])
            if not purged.clean:
                with self.lock:
                    for source_id, version in [*retired, *bad]:
                        self.report.warnings.append(
                            {
                                "document": source_id,
                                "field": "source_version",
                                "reason": f"old version {version} not fully deleted ({purged.describe()}); it stays "
                                "hidden and is never served; re-ingest or run delete-source to remove it",
                            }
                        )
            for source_id, old in retired:
                for listener in self.listeners:
                    listener.on_retired(tenant, source_id, old)
        with self.lock:
            self.report.timings["index"] += time.perf_counter() - t0
