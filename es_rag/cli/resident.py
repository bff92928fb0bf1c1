"""A resident search process: ``es-rag serve`` keeps an embedded index's models loaded, and ``es-rag search`` hands
its command line to it when it runs (issue 46: every CLI call loaded the models again).

* **Where.** One Unix socket per index folder: ``<dir>/es_rag-<uid>/<digest of the folder's absolute path>.sock``,
  ``<dir>`` being ``$ES_RAG_SOCKET_DIR``, else ``$XDG_RUNTIME_DIR``, else the system's temporary folder. The folder is
  created ``0700`` and must be this user's with no access for others; the socket is ``0600``. Nobody else can send
  a query, and a search never talks to another user's process.
* **What travels.** The search's own command line (with the index folder made absolute), the client's working
  folder and es_rag's version; back come the exit code, stdout and stderr that ``es-rag search`` would have printed.
  The server runs the same :func:`es_rag.cli.main` on it, so output, errors and exit codes are the command's own.
  Only embedded indexes are served (a cluster's credentials never pass through the socket).
* **Fresh answers.** Pipelines are kept per settings (the two most recent); before each search the index's commit
  (its generation pointer and manifest) is compared with the one the pipeline read, and a changed index is opened
  again. A search's trace says ``resident: es-rag serve (pid N)``.
* **Fallback.** No socket, nobody listening, another es_rag version, or any error on the way: the search runs in its
  own process as before, without a word (a server that crashed mid-answer makes the search run again locally).
  ``ES_RAG_NO_SERVER=1`` never asks a server.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import socket
import stat
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from es_rag import __version__
from es_rag.errors import EsRagError

SOCKET_DIR_ENV = "ES_RAG_SOCKET_DIR"
NO_SERVER_ENV = "ES_RAG_NO_SERVER"
MAX_MESSAGE = 1 << 20
"""The largest request a server reads (a command line)."""
CONNECT_TIMEOUT_S = 2.0
ANSWER_TIMEOUT_S = 600.0
"""How long a search waits for a server's answer before it runs the search itself."""
WARM_PIPELINES = 2

_local = threading.local()
_answering = threading.Lock()


def serving() -> bool:
    """True in the thread of a server that is answering a forwarded search."""
    return bool(getattr(_local, "serving", False))


def _socket_dir() -> Path:
    base = os.environ.get(SOCKET_DIR_ENV) or os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"es_rag-{os.getuid()}"


def socket_path(index_dir: str | Path) -> Path:
    """The socket of the server of an index folder.

    Args:
        index_dir: The ``--index-dir`` folder.
    """
    digest = hashlib.sha256(str(Path(index_dir).resolve()).encode()).hexdigest()[:20]
    return _socket_dir() / f"{digest}.sock"


def _private(folder: Path) -> bool:
    """Whether ``folder`` is a directory of this user that nobody else may enter."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def index_state(index_dir: str | Path) -> tuple[Any, ...]:
    """What changes when an index gets a new commit: its generation pointer and its manifest's identity."""
    from es_rag.embedded.generations import current_generation, live_directory
    from es_rag.embedded.store import MANIFEST

    try:
        st = (live_directory(index_dir) / MANIFEST).stat()
        return current_generation(index_dir), st.st_ino, st.st_mtime_ns, st.st_size
    except (OSError, EsRagError):
        return ("unreadable",)


# -- client ------------------------------------------------------------------------------------------------------


def forward(index_dir: str, argv: Sequence[str]) -> dict[str, Any] | None:
    """Hand a search's command line to the server of ``index_dir``: its answer (``rc``, ``stdout``, ``stderr``), or
    None when no server answers (the caller runs the search itself).

    Args:
        index_dir: The index folder the search reads.
        argv: The command line after ``es-rag`` (``search ...``).
    """
    if os.environ.get(NO_SERVER_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    path = socket_path(index_dir)
    if not path.exists() or not _private(path.parent):
        return None
    request = {
        "version": __version__,
        "cwd": os.getcwd(),
        "argv": [*argv, "--index-dir", str(Path(index_dir).resolve())],
    }
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(str(path))
            conn.settimeout(ANSWER_TIMEOUT_S)
            conn.sendall(json.dumps(request).encode() + b"\n")
            conn.shutdown(socket.SHUT_WR)
            answer = json.loads(_read_all(conn, limit=None))
    except (OSError, ValueError):
        return None
    if not isinstance(answer, dict) or "rc" not in answer:
        return None
    return answer


def _read_all(conn: socket.socket, limit: int | None) -> bytes:
    chunks, size = [], 0
    while block := conn.recv(1 << 16):
        chunks.append(block)
        size += len(block)
        if limit is not None and size > limit:
            raise ValueError(f"message over {limit} bytes")
    return b"".join(chunks)


# -- server ------------------------------------------------------------------------------------------------------


class WarmPipelines:
    """The pipelines a server keeps loaded: one per settings (the :data:`WARM_PIPELINES` most recent), each with the
    index state it was built on; a changed index builds it again."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[tuple[Any, ...], Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, index_dir: str, build: Callable[[], Any]) -> Any:
        """The pipeline of ``key`` (the settings), built by ``build`` when missing or when the index changed."""
        state = index_state(index_dir)
        with self._lock:
            held = self._items.get(key)
            if held is not None and held[0] == state:
                self._items.move_to_end(key)
                return held[1]
        pipeline = build()
        with self._lock:
            self._items[key] = (state, pipeline)
            self._items.move_to_end(key)
            while len(self._items) > WARM_PIPELINES:
                self._items.popitem(last=False)
        return pipeline


WARM = WarmPipelines()


def prime(pipeline: Any, backend: Any) -> None:
    """Load everything a search of ``pipeline`` loads lazily before the first query arrives: its models
    (:meth:`~es_rag.pipeline.RagPipeline.warm_up`), then one search as the index's first tenant (unless the index is
    empty) that reaches the stemmer, the language detector and the cross-encoder's first onnxruntime run (about a
    third slower than the next ones). Its result is dropped."""
    from es_rag.filters import SearchFilter

    pipeline.warm_up()
    tenants = sorted(getattr(backend, "tenants", lambda: set())())
    if tenants:
        pipeline.search("es-rag serve warms up: which documents are here?", SearchFilter(tenants[0]))


def answer_locally(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` (``search ...``) as a server answers it, in this process (``es-rag serve`` warms up with it)."""
    return _answer({"version": __version__, "cwd": os.getcwd(), "argv": argv})


def _answer(request: Any) -> dict[str, Any]:
    """Run one forwarded search the way ``es-rag`` would, capturing what it prints."""
    if not isinstance(request, dict) or request.get("version") != __version__:
        return {"fallback": f"es-rag {__version__} serves; the search is another version"}
    argv, cwd = request.get("argv"), request.get("cwd")
    if not isinstance(argv, list) or not argv or argv[0] != "search" or not all(isinstance(a, str) for a in argv):
        return {"fallback": "only es-rag search is served"}
    from es_rag.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _answering:  # one search at a time: the working folder and stdout are the process's
        before = os.getcwd()
        try:
            os.chdir(str(cwd))
            _local.serving = True
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv)
        except Exception as exc:  # a bug or a missing folder: the search runs in its own process, the server goes on
            print(
                f"es-rag serve: a search failed here ({type(exc).__name__}: {exc}); it ran by itself", file=sys.stderr
            )
            return {"fallback": f"cannot answer: {type(exc).__name__}: {exc}"}
        finally:
            _local.serving = False
            os.chdir(before)
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue(), "pid": os.getpid()}


def _handle(conn: socket.socket) -> None:
    with conn:
        conn.settimeout(30.0)
        try:
            request = json.loads(_read_all(conn, limit=MAX_MESSAGE))
        except (OSError, ValueError):
            return
        answer = _answer(request)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(answer).encode())


def serve(index_dir: str, *, ready: Callable[[Path], None], stop: threading.Event | None = None) -> None:
    """Answer forwarded searches of ``index_dir`` until ``stop`` is set (or the process is interrupted).

    Args:
        index_dir: The index folder.
        ready: Called with the socket's path once it listens.
        stop: Ends the loop when set (checked twice a second).

    Raises:
        EsRagError: Another server already answers for this index, or the socket folder is not private.
    """
    path = socket_path(index_dir)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise EsRagError(f"cannot make the socket folder {path.parent}: {exc} (set {SOCKET_DIR_ENV})") from None
    if not _private(path.parent):
        raise EsRagError(
            f"{path.parent}: not a folder of this user closed to others; es-rag serve will not listen there"
        )
    if path.exists():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.settimeout(CONNECT_TIMEOUT_S)
                probe.connect(str(path))
            except OSError:
                path.unlink()  # a server that stopped without removing its socket
            else:
                raise EsRagError(f"a server already answers the searches of {index_dir} ({path})")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ours: int | None = None
    try:
        try:
            server.bind(str(path))
        except OSError as exc:  # e.g. "AF_UNIX path too long": 107 bytes on Linux
            raise EsRagError(
                f"cannot listen on {path}: {exc} (set {SOCKET_DIR_ENV} to a short folder, e.g. /tmp)"
            ) from None
        os.chmod(path, 0o600)
        server.listen(16)
        server.settimeout(0.5)
        ours = path.stat().st_ino
        ready(path)
        while stop is None or not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            _handle(conn)
    finally:
        server.close()
        with contextlib.suppress(OSError):
            if path.stat().st_ino == ours:
                path.unlink()
