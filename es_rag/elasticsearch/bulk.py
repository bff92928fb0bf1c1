"""Bulk indexing with bounded 429 retries, several workers, a stop at the first refusal no retry can fix, and a count
of what the cluster acknowledged that stays true however the run ends.

``helpers.streaming_bulk`` resends 429s (whole request or single documents) after a jittered, doubling wait; the
client it gets resends only 502/503/504 itself. ``helpers.parallel_bulk`` is not used because it sends each chunk
once (``_process_bulk_chunk`` without the retry loop of ``streaming_bulk``, elasticsearch-py ``helpers/actions.py``),
so a 429 would fail its documents instead of resending them.

The documents are cut into requests of at most :data:`BULK_CHUNK_SIZE` (smaller when there are fewer than
``concurrency`` full requests, so the workers share them). The first request is sent alone: a 401, 403 or 413
(credentials, privileges, request size: :data:`BULK_FATAL_STATUSES`) on it stops the run after that one response.
The rest go to the workers, each request through its own ``streaming_bulk``; a worker checks a shared stop flag
before each request, so after a refusal no new request is sent (those already in flight finish). Every worker's
acknowledgements are counted, also when another one was refused or lost the connection, and the per-document
failures are reported in request order, the same as with one worker.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from es_rag.elasticsearch.responses import error_reason, failed_field, fatal_bulk_reason
from es_rag.errors import BulkStopped, BulkUnreachable

BULK_MAX_RETRIES = 3


BULK_INITIAL_BACKOFF = 1.0


BULK_MAX_BACKOFF = 30.0


BULK_BACKOFF_JITTER = 0.5
"""Bulk 429 retries: at most ``BULK_MAX_RETRIES``, waiting ``b * 2**n`` seconds (capped at ``BULK_MAX_BACKOFF``)
where ``b`` is drawn per bulk call from ``[(1 - BULK_BACKOFF_JITTER) * BULK_INITIAL_BACKOFF,
BULK_INITIAL_BACKOFF]``: writers rejected by the same full queue do not all retry at the same instant."""

BULK_CHUNK_SIZE = 200
"""Documents per ``_bulk`` request (``streaming_bulk``'s ``chunk_size``)."""

BULK_FATAL_STATUSES = (401, 403, 413)
"""Statuses after which a bulk run stops: resending or going on cannot help (credentials, privileges, size)."""


def bulk_initial_backoff() -> float:
    """The first 429 retry wait of one bulk call, with jitter (see ``BULK_BACKOFF_JITTER``)."""
    return BULK_INITIAL_BACKOFF * (1.0 - BULK_BACKOFF_JITTER * random.random())


@dataclass
class _Outcome:
    """What one request's ``streaming_bulk`` came back with."""

    indexed: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    fatal: tuple[int, dict[str, Any]] | None = None
    transport: BaseException | None = None
    sent: bool = True


def _requests(actions: list[dict[str, Any]], concurrency: int) -> list[list[dict[str, Any]]]:
    size = max(1, min(BULK_CHUNK_SIZE, -(-len(actions) // max(1, concurrency))))
    return [actions[i : i + size] for i in range(0, len(actions), size)]


def bulk_index(
    client: Any,
    actions: list[dict[str, Any]],
    *,
    index: str,
    concurrency: int,
    document_of: Callable[[str], str],
    url: str,
) -> tuple[int, list[dict[str, str]]]:
    """Send ``actions`` to ``index``; returns (documents acknowledged, per-document failures).

    Args:
        client: The ``Elasticsearch`` client (with the bulk timeout and retry statuses set).
        actions: Bulk actions (``_op_type``, ``_index``, ``_id``, ``_source``).
        index: The target, for messages.
        concurrency: Worker threads (``settings.ingest.bulk_concurrency``).
        document_of: The document (path or source id) of a ``_id``, for the failure report.
        url: The cluster's (redacted) URL, for messages.

    Raises:
        BulkStopped: A 401, 403 or 413; ``indexed`` is what the cluster acknowledged before (every worker's).
        BulkUnreachable: The transport failed; ``indexed`` as above.
    """
    from elasticsearch import TransportError, helpers

    stop = threading.Event()

    def send(part: Sequence[dict[str, Any]]) -> _Outcome:
        out = _Outcome()
        if stop.is_set():
            out.sent = False
            return out
        try:
            for ok, item in helpers.streaming_bulk(
                client,
                part,
                raise_on_error=False,
                raise_on_exception=False,
                max_retries=BULK_MAX_RETRIES,
                initial_backoff=bulk_initial_backoff(),
                max_backoff=BULK_MAX_BACKOFF,
                chunk_size=BULK_CHUNK_SIZE,
            ):
                info = next(iter(item.values()))
                if ok:
                    out.indexed += 1
                    continue
                status = info.get("status")
                if status in BULK_FATAL_STATUSES:
                    out.fatal = (int(status), info)
                    stop.set()
                    break
                error = info.get("error", {})
                doc_id = str(info.get("_id"))
                out.failed.append(
                    {
                        "document": document_of(doc_id),
                        "field": failed_field(error),
                        "reason": f"chunk {doc_id}: {error_reason(error)}",
                    }
                )
        except TransportError as exc:
            out.transport = exc
            stop.set()
        return out

    requests = _requests(actions, concurrency)
    outcomes = [send(requests[0])] if requests else []
    rest = requests[1:]
    if rest and not stop.is_set():
        if concurrency > 1:
            with ThreadPoolExecutor(concurrency, thread_name_prefix="es-rag-bulk") as pool:
                outcomes.extend(pool.map(send, rest))
        else:
            outcomes.extend(send(part) for part in rest)  # lazily: nothing is sent after a stop
    indexed = sum(o.indexed for o in outcomes)
    failed = [f for o in outcomes for f in o.failed]
    for o in outcomes:
        if o.fatal is not None:
            status, info = o.fatal
            error = info.get("error", {})
            raise BulkStopped(
                f"bulk indexing into {index} stopped: {fatal_bulk_reason(status, info)}",
                indexed=indexed,
                status=status,
                response=error if isinstance(error, dict) else str(error),
            )
    for o in outcomes:
        if o.transport is not None:
            from es_rag.elasticsearch.cluster import exception_cause

            raise BulkUnreachable(
                f"bulk indexing into {index} failed: cluster unreachable at {url}: {exception_cause(o.transport)}",
                indexed=indexed,
            ) from o.transport
    return indexed, failed
