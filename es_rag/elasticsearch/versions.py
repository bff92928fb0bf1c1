"""The version store of an Elasticsearch backend: registry GET/PUT with optimistic concurrency (retried
on 409), the refresh, and the ``_delete_by_query`` tasks and ``_count`` requests built by
:mod:`es_rag.versions.registry`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from es_rag.errors import ClusterError
from es_rag.es_request import EsRequest
from es_rag.redact import get_logger
from es_rag.versions.registry import (
    DIGESTS_FIELD,
    RETIRED_FIELD,
    SOURCES_PAGE,
    WRITING_FIELD,
    RegistryState,
    lineage_count_requests,
    purge_requests,
    refresh_request,
    registry_get_request,
    registry_put_request,
    source_listing_request,
    task_request,
    version_key,
)
from es_rag.versions.store import Pair, PurgeResult, RegistryOps, SourceSummary, summarize_sources

log = get_logger(__name__)

PURGE_ATTEMPTS = 3
"""``_delete_by_query`` rounds before giving up on documents that keep conflicting (each after a refresh)."""
TASK_TIMEOUT_S = 600.0
"""How long a delete-by-query task may run before es_rag stops waiting (the task itself goes on)."""
TASK_POLL_S = 30.0
"""Server-side wait of one ``GET _tasks/<id>`` poll."""
TASK_IDLE_S = 1.0
"""Pause before the next poll when a poll came back without waiting (a full queue, or no server-side wait)."""


class EsVersionStore(RegistryOps):
    """Registry and lineage operations over an :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend`.

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
                f"version registry {self.settings.index.prefix}-versions is unreadable (run `es-rag setup`)",
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
                self._put(state, seq_no, term)
                return result
            except ClusterError as exc:
                if exc.status != 409 or attempt + 1 == self.max_attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _put(self, state: RegistryState, seq_no: int | None, term: int | None) -> None:
        """Write the registry document. A registry index created before asset version 10 has no ``retired`` field,
        one created before 11 no ``digests``, and its ``dynamic: strict`` mapping refuses them
        (``StrictDynamicMappingException``): the document is then written without them, as before, and ``es-rag
        setup`` is named once (it adds the fields to the index)."""
        for _ in range(3):
            self._drop_unmapped(state)
            try:
                self.backend.send(registry_put_request(self.settings, state, seq_no=seq_no, primary_term=term))
                return
            except ClusterError as exc:
                said = str(exc.response or exc)
                if not (exc.status == 400 and "strict_dynamic_mapping_exception" in said):
                    raise
                if RETIRED_FIELD in said or WRITING_FIELD in said:
                    self.backend.registry_without_retired = True
                    what = f"no '{RETIRED_FIELD}' field): a purge a crash interrupts cannot be resumed"
                    version = 10
                elif DIGESTS_FIELD in said:
                    self.backend.registry_without_digests = True
                    what = f"no '{DIGESTS_FIELD}' field): every ingest embeds unchanged sources again"
                    version = 11
                else:
                    raise
                log.warning(
                    "%s",
                    f"version registry {self.settings.index_name('versions')} predates asset version {version} ("
                    f"{what}; run `es-rag setup` once",
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop_unmapped(self, state: RegistryState) -> None:
        """Leave out the fields this registry's mapping was found to lack (learned once per backend)."""
        if getattr(self.backend, "registry_without_retired", False):
            state.retired, state.writing = [], {}
        if getattr(self.backend, "registry_without_digests", False):
            state.digests = {}

    def state(self, tenant_id: str) -> RegistryState:
        """The tenant's registry.

        Args:
            tenant_id: The tenant.
        """
        return self._read(tenant_id)[0]

    def refresh(self) -> None:
        """Refresh the chunk and parent indices."""
        self.backend.send(refresh_request(self.settings))

    def _delete(self, request: EsRequest) -> PurgeResult:
        """Run one ``_delete_by_query`` as a task and wait for its result. Without the ``monitor`` privilege
        (``GET _tasks`` answers 403) the same delete runs again in the foreground: deleting by query twice is
        harmless."""
        started = self.backend.send(request)
        if not (isinstance(started, dict) and "task" in started):
            return _purge_result(started)
        task = str(started["task"])
        deadline = time.monotonic() + TASK_TIMEOUT_S
        while True:
            try:
                # 429 and 500 come back as bodies: a task still running when the poll's wait ends fails with
                # ElasticsearchTimeoutException (TransportGetTaskAction), 429 since 9.0 and 500 before; that
                # means "poll again", never "give up" (the delete goes on in the cluster either way).
                got = self.backend.send(
                    task_request(task, wait_s=TASK_POLL_S), timeout=TASK_POLL_S + 30, ignore=(429, 500)
                )
            except ClusterError as exc:
                if exc.status != 403:
                    raise
                return self._delete_in_foreground(request)
            running = _still_running(task, got)
            if not running and got.get("completed"):
                if got.get("error"):
                    raise ClusterError(
                        f"delete-by-query task {task} failed: {got['error'].get('reason', got['error'])}",
                        response=got,
                    )
                if not isinstance(got.get("response"), dict):
                    # TransportGetTaskAction.waitedForCompletion: when the task's result was not stored, the answer
                    # is a snapshot of the finished task, "completed": true with neither "response" nor "error".
                    # Its deletes and failures are unknown: reading it as a clean purge would un-hide documents
                    # that may still be there. The same delete runs again, and its own answer decides.
                    log.warning(
                        "%s",
                        f"delete-by-query task {task} finished without a stored result; running the same delete "
                        "again in the foreground to learn its outcome",
                    )
                    return self._delete_in_foreground(request)
                return _purge_result(got["response"])
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"delete-by-query task {task} still running after {TASK_TIMEOUT_S:.0f} s; it goes on in the "
                    "cluster (GET _tasks/<id>); what it deletes stays hidden, and running the same command again "
                    "finishes it"
                )
            if running != "timeout":  # the poll did not wait in the cluster: pause here
                time.sleep(TASK_IDLE_S)

    def _delete_in_foreground(self, request: EsRequest) -> PurgeResult:
        """``request`` (a background ``_delete_by_query``) again, waiting for its answer: deleting by query twice is
        harmless, and this answer is the delete's own."""
        foreground = EsRequest(
            request.method,
            request.path.replace("wait_for_completion=false", "wait_for_completion=true"),
            request.body,
        )
        return _purge_result(self.backend.send(foreground, timeout=TASK_TIMEOUT_S))

    def _delete_all(self, requests: Callable[[], list[EsRequest]]) -> PurgeResult:
        """Rounds of deletes until none conflicts (a refresh before each retry), at most ``PURGE_ATTEMPTS``."""
        total = PurgeResult()
        for attempt in range(PURGE_ATTEMPTS):
            if attempt:
                self.refresh()
            rnd = PurgeResult()
            for req in requests():
                one = self._delete(req)
                rnd.deleted += one.deleted
                rnd.conflicts += one.conflicts
                rnd.failures.extend(one.failures)
            total.deleted += rnd.deleted
            total.conflicts, total.failures = rnd.conflicts, rnd.failures
            if rnd.clean:
                break
        return total

    def purge(self, tenant_id: str, pairs: Sequence[Pair]) -> PurgeResult:
        """Delete these versions' documents; drop their keys from ``hidden`` only after a clean delete (a
        conflicting document would otherwise be served again), else keep them hidden and say so.

        Args:
            tenant_id: The tenant.
            pairs: ``(source_id, version)`` to delete.
        """
        if not pairs:
            return PurgeResult()
        keys = [version_key(s, v) for s, v in pairs]
        result = self._delete_all(lambda: purge_requests(self.settings, tenant_id, keys=keys))
        if result.clean:
            self._update(tenant_id, lambda st: st.forget(keys))
        else:
            result.kept_hidden = keys
        return result

    def sources(self, tenant_id: str) -> list[SourceSummary]:
        """The tenant's sources: the registry, and chunks / parents per version counted by a paged composite
        aggregation on each index.

        Args:
            tenant_id: The tenant.
        """

        pages: dict[Pair, int] = {}

        def counts(index: str, *, with_pages: bool = False) -> dict[Pair, int]:
            out: dict[Pair, int] = {}
            after = None
            while True:
                resp = self.backend.send(source_listing_request(tenant_id, index, after=after, pages=with_pages))
                agg = (resp.get("aggregations") or {}).get("sources") or {}
                buckets = agg.get("buckets") or []
                for b in buckets:
                    key = (str(b["key"]["source_id"]), str(b["key"]["source_version"]))
                    out[key] = int(b["doc_count"])
                    last = (b.get("pages") or {}).get("value")
                    if last is not None:
                        pages[key] = int(last)
                after = agg.get("after_key")
                if len(buckets) < SOURCES_PAGE or not after:
                    return out

        state, _, _ = self._read(tenant_id)
        chunks = counts(self.settings.chunk_index, with_pages=True)
        return summarize_sources(state, chunks, counts(self.settings.parent_index), pages)

    def source_paths(self, tenant_id: str) -> dict[str, set[str]]:
        """Where each of the tenant's sources was read from: ``source_id`` -> the ``source_path`` values its chunks
        carry (a source written without one is absent), by a paged composite aggregation on the chunk index.

        Args:
            tenant_id: The tenant.
        """
        out: dict[str, set[str]] = {}
        after = None
        fields = ("source_id", "source_path")
        while True:
            req = source_listing_request(tenant_id, self.settings.chunk_index, after=after, fields=fields)
            agg = (self.backend.send(req).get("aggregations") or {}).get("sources") or {}
            buckets = agg.get("buckets") or []
            for b in buckets:
                out.setdefault(str(b["key"]["source_id"]), set()).add(str(b["key"]["source_path"]))
            after = agg.get("after_key")
            if len(buckets) < SOURCES_PAGE or not after:
                return out

    def delete_source(self, tenant_id: str, source_id: str) -> dict[str, Any]:
        """Delete every child and parent of a source (all versions) and count what remains. After a clean delete
        the source leaves the registry. Its active version joins ``hidden`` before the delete starts, so a delete
        that fails, times out or is interrupted never leaves a half-deleted source served; it stays hidden until
        a clean delete drops it.

        Args:
            tenant_id: The tenant.
            source_id: The source.
        """
        self._update(tenant_id, lambda st: st.hide_source(source_id))
        result = self._delete_all(lambda: purge_requests(self.settings, tenant_id, source_id=source_id))
        if result.clean:
            self._update(tenant_id, lambda st: st.drop_source(source_id))
        chunks_req, parents_req = lineage_count_requests(self.settings, tenant_id, source_id)
        remaining = {
            "chunks": int(self.backend.send(chunks_req).get("count", 0)),
            "parents": int(self.backend.send(parents_req).get("count", 0)),
        }
        return {
            "deleted": result.deleted,
            "remaining": remaining,
            "conflicts": result.conflicts,
            "failures": result.failures,
        }


def _still_running(task: str, got: Any) -> str:
    """Why a ``GET _tasks/<id>`` poll that came back as an error body means "poll again": ``"timeout"`` (the
    task outlived the poll's wait), ``"rejected"`` (a full queue, 429); ``""`` for a task result. Any other error
    raises."""
    error = got.get("error") if isinstance(got, dict) and "status" in got else None
    if not isinstance(error, dict):
        return ""
    if error.get("type") == "elasticsearch_timeout_exception":
        return "timeout"
    if got.get("status") == 429:
        return "rejected"
    raise ClusterError(
        f"GET _tasks/{task}: {error.get('type', '?')}: {error.get('reason', error)}",
        status=int(got.get("status") or 500),
        response=got,
    )


def _purge_result(resp: Any) -> PurgeResult:
    """A ``_delete_by_query`` response (``BulkByScrollResponse``) as a :class:`PurgeResult`."""
    resp = resp if isinstance(resp, dict) else {}
    failures = []
    for f in resp.get("failures") or []:
        cause = f.get("cause") or f.get("reason") or {}
        failures.append(
            f"{f.get('id', f.get('index', '?'))}: {cause.get('reason', cause) if isinstance(cause, dict) else cause}"
        )
    return PurgeResult(
        deleted=int(resp.get("deleted", 0)), conflicts=int(resp.get("version_conflicts", 0)), failures=failures
    )
