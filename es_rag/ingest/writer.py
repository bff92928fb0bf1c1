"""The indexing side of an ingest: embedded batches written in order, inline or by one background thread with
backpressure, each batch beginning the versions of the sources it introduces (:mod:`es_rag.versions.registry`), and a
checkpoint now and then that switches the sources finished so far (:mod:`es_rag.ingest.switch`) and makes them
durable."""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from es_rag.backend import SearchBackend
from es_rag.errors import BulkStopped
from es_rag.ingest.report import IngestReport
from es_rag.ingest.switch import Done
from es_rag.records import Chunk
from es_rag.versions.store import Pair


class IndexWriter:
    """Writes embedded batches in the order given: inline (``queue_size`` 0), or in one background thread fed by a
    queue of at most ``queue_size`` batches, so the caller embeds batch N+1 while batch N is being indexed. A full
    queue blocks the caller (backpressure: a cluster answering 429 slows the embedding down instead of letting
    batches pile up in memory). The first error of the writer stops it and is raised in the caller at its next
    :meth:`put` or at :meth:`close`; nothing after a failed batch is written.

    Each batch begins (hides) the versions of the sources it introduces before it writes their first document, and
    names the sources whose last document it holds. After a batch is written, once ``every_s`` seconds have passed
    since the last checkpoint (and at least ten times what that one took, so checkpoints cost at most about a tenth of
    the run), ``checkpoint`` gets the sources finished since: the ingest switches them and makes them durable.

    Args:
        backend: Destination.
        report: The run's report.
        lock: Guards the report.
        queue_size: Batches that may wait (0: inline).
        checkpoint: Called with the sources finished since the last call (None: none until the end).
        every_s: Seconds between checkpoints.
    """

    def __init__(
        self,
        backend: SearchBackend,
        report: IngestReport,
        lock: threading.Lock,
        queue_size: int,
        *,
        checkpoint: Callable[[Sequence[Done]], None] | None = None,
        every_s: float = 30.0,
    ) -> None:
        self.backend = backend
        self.store = backend.version_store()
        self.report = report
        self.lock = lock
        self.switching: dict[str, list[Pair]] = defaultdict(list)
        self.ready: list[Done] = []
        """Sources written whole and not yet switched."""
        self.checkpoints = 0
        self._checkpoint = checkpoint
        self._every_s = every_s
        self._due = time.monotonic() + every_s
        self._error: BaseException | None = None
        self._queue: queue.Queue[Batch | None] | None = None
        self._thread: threading.Thread | None = None
        if queue_size > 0:
            self._queue = queue.Queue(maxsize=queue_size)
            self._thread = threading.Thread(target=self._run, name="es-rag-indexer", daemon=True)
            self._thread.start()

    def put(self, batch: Batch) -> None:
        """Write ``batch`` (inline) or queue it, waiting while the queue is full.

        Args:
            batch: ``(tenant -> pairs to begin, children, parents, sources finished with it)``.
        """
        if self._queue is None:
            self._write(batch)
            return
        while True:
            self._raise()
            try:
                self._queue.put(batch, timeout=0.05)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Wait until every queued batch is written; raise the writer's error, if any."""
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)  # the writer drains the queue (skipping batches after an error), then stops
            self._thread.join()
            self._thread = None
        self._raise()

    def shutdown(self) -> None:
        """Stop the writer after the caller failed: let it finish the batch in hand, drop its error (the caller's
        is the one raised)."""
        if self._thread is not None and self._queue is not None:
            self._error = self._error or RuntimeError("ingest stopped")  # skip what is still queued
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        self._error = None

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            if self._error is not None:
                continue
            try:
                self._write(batch)
            except BaseException as exc:  # handed to the caller's thread
                self._error = exc

    def _write(self, batch: Batch) -> None:
        pairs, children, parents, done = batch
        t0 = time.perf_counter()
        for tenant, todo in pairs.items():
            started = self.store.begin(tenant, todo)
            self.switching[tenant].extend(started)
        try:
            written = self.backend.index(children, parents) if (children or parents) else None
        except BulkStopped as exc:  # count what landed of this batch, and say the whole run's count
            with self.lock:
                self.report.indexed += exc.indexed
                total = self.report.indexed
            raise exc.with_total(total) from exc.__cause__
        with self.lock:
            if written is not None:
                self.report.merge(written)
            self.report.timings["index"] += time.perf_counter() - t0
        self.ready.extend(done)
        if self._checkpoint is not None and self.ready and time.monotonic() >= self._due:
            began = time.monotonic()
            ready, self.ready = self.ready, []
            self._checkpoint(ready)
            self.checkpoints += 1
            took = time.monotonic() - began
            self._due = time.monotonic() + max(self._every_s, 10 * took)


Batch = tuple[dict[str, list[Pair]], list[Chunk], list[Chunk], list[Done]]
"""One embedding + indexing batch: the ``(source_id, version)`` pairs per tenant it begins, its children, its
parents, and the sources whose last document it holds."""
