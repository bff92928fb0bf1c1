"""Crash-and-fault harness for the embedded commit (:mod:`es_rag.embedded.store`).

Run as ``python -m tests.support.crash FOLDER JOB KILL_AT [FSIZE]`` it opens the embedded index in FOLDER, applies
JOB's write (:data:`JOBS`) and saves, counting every write point of the save: each ``write`` into a data file, each
``os.fsync``, ``os.replace`` and ``os.unlink``. At write point KILL_AT (1-based) the process dies with ``os._exit``, as
a SIGKILL would leave it: no ``finally``, no flush of Python buffers. KILL_AT 0 runs to the end and prints the number
of write points. FSIZE sets ``RLIMIT_FSIZE`` (a file may not grow past FSIZE bytes: the kernel's EFBIG, as a full
disk's ENOSPC) before the save.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from es_rag.embedded.backend import EmbeddedBackend
from tests.support.chunks import chunk

KILLED = 86
"""Exit status of a process killed at its write point."""


def state_a(backend: EmbeddedBackend) -> None:
    """The first commit: two sources of tenant acme and one of globex, with parents and a registry."""
    backend.index(
        [
            chunk("a1", "reset the password from the login page", start=0, vector=(1, 0, 0, 0)),
            chunk("a2", "the password reset link expires after one hour", start=40, vector=(0.9, 0.1, 0, 0)),
            chunk("b1", "legal hold keeps the history", source="policy", parent="p-policy", vector=(0, 0, 1, 0)),
            chunk("g1", "reset the password from the login page", tenant="globex", vector=(1, 0, 0, 0)),
        ],
        [
            chunk("p-guide", "reset the password ... one hour", kind="parent"),
            chunk("p-policy", "legal hold keeps the history", source="policy", kind="parent"),
        ],
    )
    backend.versions = {"acme": {"active": {"guide": "v1", "policy": "v1"}}}


def state_b(backend: EmbeddedBackend) -> None:
    """The second commit over the first: guide moves to v2 (new chunks, v1's removed), policy is deleted."""
    backend.delete_source("guide", tenant_id="acme")
    backend.delete_source("policy", tenant_id="acme")
    backend.index(
        [
            chunk("a1-v2", "passwords are reset by the help desk " * 40, version="v2", vector=(0, 1, 0, 0)),
            chunk("a3-v2", "error E1042 means the sync token expired", version="v2", start=400, vector=(0, 0, 0, 1)),
        ],
        [chunk("p-guide", "passwords are reset by the help desk", version="v2", kind="parent")],
    )
    backend.versions = {"acme": {"active": {"guide": "v2"}}}


JOBS: dict[str, Callable[[EmbeddedBackend], None]] = {"a": state_a, "b": state_b}


def fingerprint(folder: str | Path) -> dict[str, Any]:
    """What a reader of FOLDER is served: chunk ids with their text and vector, parents, registry."""
    backend = EmbeddedBackend(folder)
    return {
        "chunks": {c: [d["text"], backend._vectors[c].tolist()] for c, d in sorted(backend._children.items())},
        "parents": {c: d["text"] for c, d in sorted(backend._parents.items())},
        "versions": backend.versions,
    }


def _instrument(kill_at: int) -> Callable[[], int]:
    from es_rag.embedded import store

    count = 0

    def point() -> None:
        nonlocal count
        count += 1
        if count == kill_at:
            os._exit(KILLED)

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            point()
            return fn(*args, **kwargs)

        return inner

    os.fsync = wrap(os.fsync)
    os.replace = wrap(os.replace)
    os.unlink = wrap(os.unlink)
    write = store._Sink.write
    store._Sink.write = lambda self, data: (point(), write(self, data))[1]  # type: ignore[method-assign]
    return lambda: count


def main(argv: list[str]) -> int:
    if argv[1] == "loop":  # FOLDER loop SECONDS: commit states a and b in turn, as an ingest beside searches would
        import time

        backend, until, commits = EmbeddedBackend(argv[0]), time.monotonic() + float(argv[2]), 0
        while time.monotonic() < until:
            (state_b if commits % 2 == 0 else state_a)(backend)
            backend.flush()
            commits += 1
        print(json.dumps({"commits": commits}))
        return 0
    folder, job, kill_at = argv[0], argv[1], int(argv[2])
    backend = EmbeddedBackend(folder)
    JOBS[job](backend)
    if len(argv) > 3:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
        limit = int(argv[3])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    counted = _instrument(kill_at)
    backend.flush()
    print(json.dumps({"points": counted()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
