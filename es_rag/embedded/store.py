"""The on-disk commit of an embedded index: immutable data files named by a checksummed manifest.

One save (:func:`write`) is one commit::

    chunks-000007.jsonl     the child chunks (one JSON document per line, without vectors)
    vectors-000007.npy      their vectors, row i for line i (float32, ``numpy.lib.format``)
    parents-000007.jsonl    the parent sections
    versions-000007.json    the version registry (tenant -> registry document)
    meta.json               the manifest: format, dims, similarity, counts, and each file's name, size and CRC-32
    meta.bak.json           a copy of the manifest, written once the switch is durable

The data files are written under new names and fsynced, then the manifest is written to ``meta.json.tmp``, fsynced
and renamed over ``meta.json`` (``os.replace``: atomic), and the folder is fsynced: that rename is the switch. Only
then are the files of the previous commit removed. A kill or a full disk at any byte therefore leaves the previous
commit or the new one, never a mix; a full disk also removes the new files before it is reported (one line that names
the disk). The files are never changed once written, so a reader that opens the files a manifest names reads one
commit: if a concurrent save removed one of them in between, the reader reads the new manifest and starts again
(:func:`read`). Readers take no lock and never block a writer; one writer at a time is
:func:`write_lock`'s job.

Every file is checked against the manifest's size and CRC-32 when it is read, and the manifest against its own
CRC-32: a truncated, emptied, overwritten or deleted file is :class:`DamagedIndex`, one line that names the file and
the way to rebuild, never a traceback and never a silently wrong answer. ``meta.bak.json`` tells a deleted manifest
from a first save that was killed before its switch (its files are left over, and the next save removes them).

Format 1 (fixed names ``chunks.jsonl``, ``vectors.npy``, ``parents.jsonl``, ``versions.json``, no checksums: es_rag
before this module) is still read; the next save writes format 2 and removes the old files.

Why not SQLite or LMDB: the backend holds the whole index in memory (BM25 and exact kNN over every row), so a save
rewrites everything and a read loads everything; immutable files and one rename give the same atomicity with no new
dependency, and keep the files readable with ``jq`` and ``numpy.load`` (docs/operations.md, "Crash safety").
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from es_rag.embedded.caches import CACHE_FILE
from es_rag.errors import EsRagError

FORMAT = 2
"""The manifest format :func:`write` writes (1: the fixed file names before manifests, still read)."""
MANIFEST = "meta.json"
BACKUP = "meta.bak.json"
ROLES = {"chunks": ".jsonl", "vectors": ".npy", "parents": ".jsonl", "versions": ".json"}
"""Each data file of a commit and its suffix."""
LEGACY_NAMES = {
    "chunks": "chunks.jsonl",
    "vectors": "vectors.npy",
    "parents": "parents.jsonl",
    "versions": "versions.json",
}
"""The data files of format 1."""
_DATA_FILE = re.compile(r"^(chunks|vectors|parents|versions)-\d+\.(jsonl|npy|json)$")
_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
"""Write errors that mean "no room": the disk or quota is full, or the file-size limit is reached."""
_RETRIES = 20


class DamagedIndex(EsRagError):
    """A file of an embedded index is missing, truncated or altered; the message names it and the way to rebuild.

    Args:
        path: The damaged file.
        reason: What is wrong with it.
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"{path}: {reason}: the embedded index in {path.parent} is damaged. Rebuild it: move the folder aside and "
            f"run es-rag ingest with the same sources into it (or es-rag reindex into a new generation)"
        )


class DiskFull(EsRagError):
    """A save found no room; nothing was changed (the previous commit is still served) and no file was left."""


@dataclass
class Snapshot:
    """One commit of an embedded index, as read by :func:`read`."""

    meta: dict[str, Any]
    """The manifest (format, dims, similarity, counts; ``files`` for format 2)."""
    children: list[dict[str, Any]] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    parents: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)


class _Sink(io.RawIOBase):
    """A write-only file that counts bytes and computes their CRC-32 as they pass."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.size = 0
        self.crc = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.fh.write(view)
        self.size += len(view)
        self.crc = zlib.crc32(view, self.crc)
        return len(view)


def _manifest_crc(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "crc32"}
    return f"{zlib.crc32(json.dumps(body, sort_keys=True).encode()):08x}"


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":  # Windows cannot open a folder for fsync; its renames are journalled by NTFS
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mount_of(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path.parent != path:
        path = path.parent
    return path


def _jsonl(docs: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    batch: list[str] = []
    for doc in docs:
        batch.append(json.dumps(doc, ensure_ascii=False) + "\n")
        if len(batch) >= 1024:
            yield "".join(batch).encode("utf-8")
            batch = []
    if batch:
        yield "".join(batch).encode("utf-8")


def _write_file(path: Path, content: Iterable[bytes] | np.ndarray) -> dict[str, Any]:
    with open(path, "xb") as fh:
        sink = _Sink(fh)
        if isinstance(content, np.ndarray):
            np.lib.format.write_array(sink, content, allow_pickle=False)
        else:
            for part in content:
                sink.write(part)
        fh.flush()
        os.fsync(fh.fileno())
    return {"name": path.name, "bytes": sink.size, "crc32": f"{sink.crc:08x}"}


def _stale_files(folder: Path, keep: set[str], keep_commit: int | None = None) -> list[Path]:
    """Data files of other commits (and of format 1) in ``folder``, left-over temporary files, and the caches of
    every commit but ``keep_commit``."""
    if not folder.is_dir():
        return []
    out = []
    for path in folder.iterdir():
        name = path.name
        cache = CACHE_FILE.match(name)
        if cache is not None and keep_commit is not None and int(cache["commit"]) == keep_commit:
            continue
        stale = _DATA_FILE.match(name) or cache or name in LEGACY_NAMES.values() or name.endswith(".tmp")
        if stale and name not in keep and path.is_file():
            out.append(path)
    return out


def _unlink(paths: Iterable[Path]) -> None:
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:  # a reader still holds it open (Windows): the next save removes it
            pass


def write(
    folder: str | Path,
    *,
    meta: dict[str, Any],
    children: Iterable[dict[str, Any]],
    vectors: np.ndarray,
    parents: Iterable[dict[str, Any]],
    versions: dict[str, Any],
) -> dict[str, Any]:
    """Commit a whole index to ``folder`` atomically (module docstring); returns the manifest written.

    The caller holds the folder's write lock (:func:`write_lock`) or is its only writer.

    Args:
        folder: The generation's folder (created if missing).
        meta: Format-independent manifest fields (dims, similarity, counts).
        children: Child documents, in the row order of ``vectors``.
        vectors: One float32 row per child.
        parents: Parent documents.
        versions: The version registry.

    Raises:
        DiskFull: No room on the disk (or quota, or file-size limit); nothing was changed and no file is left.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    previous = _peek_manifest(folder)
    seq = int((previous or {}).get("commit", 0)) + 1
    written: list[Path] = []
    try:
        # a killed save's files (never named by a manifest); the live commit's caches stay until the new one stands:
        # a full disk below must leave the index as it was, its cold searches included
        _unlink(_stale_files(folder, keep=_names(previous), keep_commit=(previous or {}).get("commit")))
        files = {}
        contents: dict[str, Iterable[bytes] | np.ndarray] = {
            "chunks": _jsonl(children),
            "vectors": np.ascontiguousarray(vectors, dtype=np.float32),
            "parents": _jsonl(parents),
            "versions": [(json.dumps(versions, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8")],
        }
        for role, suffix in ROLES.items():
            path = folder / f"{role}-{seq:06d}{suffix}"
            written.append(path)
            files[role] = _write_file(path, contents[role])
        manifest = {**meta, "format": FORMAT, "commit": seq, "files": files}
        manifest["crc32"] = _manifest_crc(manifest)
        text = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")
        tmp = folder / (MANIFEST + ".tmp")
        written.append(tmp)
        _write_file(tmp, [text])
        os.replace(tmp, folder / MANIFEST)  # the switch
        written.clear()  # from here on the new commit is the index: nothing of it is removed on a failure
        _fsync_dir(folder)
    except OSError as err:
        _unlink(written)
        if err.errno in _FULL:
            mount = _mount_of(folder)
            free = shutil.disk_usage(mount).free / 2**20
            raise DiskFull(
                f"{folder}: no room to save the embedded index on {mount} ({free:.1f} MiB free: "
                f"{os.strerror(err.errno or errno.ENOSPC)}); nothing was changed, the index still serves its previous "
                f"save. Free some space and run the command again"
            ) from None
        raise
    except BaseException:  # Ctrl-C while writing: the previous commit stays, its files untouched
        _unlink(written)
        raise
    backup = folder / (BACKUP + ".tmp")
    try:
        _write_file(backup, [text])
        os.replace(backup, folder / BACKUP)
    except OSError:  # the commit stands; the backup only tells a deleted manifest from a killed first save
        _unlink([backup])
    _unlink(_stale_files(folder, keep=_names(manifest)))
    return manifest


def _names(manifest: dict[str, Any] | None) -> set[str]:
    if not manifest:
        return set()
    if manifest.get("format") == 1:
        return set(LEGACY_NAMES.values())
    return {f["name"] for f in manifest.get("files", {}).values()}


def _peek_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest if it reads and checks, else None (a writer starts a fresh commit over a damaged one)."""
    try:
        return _parse_manifest(folder / MANIFEST, (folder / MANIFEST).read_bytes())
    except (OSError, DamagedIndex):
        return None


def _parse_manifest(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DamagedIndex(path, "not a JSON manifest" if raw.strip() else "empty") from None
    if not isinstance(manifest, dict):
        raise DamagedIndex(path, "not a JSON object")
    fmt = manifest.get("format")
    if fmt == 1:
        return manifest
    if fmt != FORMAT:
        raise EsRagError(f"{path}: unsupported embedded index format {fmt!r} (this es_rag reads 1 and {FORMAT})")
    if manifest.get("crc32") != _manifest_crc(manifest):
        raise DamagedIndex(path, "its CRC-32 does not match its content")
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != set(ROLES):
        raise DamagedIndex(path, f"it must name the files {', '.join(ROLES)}")
    return manifest


def peek(folder: str | Path) -> dict[str, Any] | None:
    """The manifest of the committed index in ``folder`` (dims, similarity, counts, ``embedding_model``), without
    reading its data files; None when there is none or it is damaged (opening the index then says what is wrong).

    Args:
        folder: A generation's folder.
    """
    return _peek_manifest(Path(folder))


def has_manifest(folder: str | Path) -> bool:
    """Whether ``folder`` holds a committed index (its manifest, or a backup of a manifest deleted since).

    Args:
        folder: A generation's folder.
    """
    folder = Path(folder)
    return (folder / MANIFEST).is_file() or (folder / BACKUP).is_file()


def read(folder: str | Path, *, vectors: bool = True) -> Snapshot | None:
    """Read the committed index in ``folder``, every file checked; None when the folder holds none.

    Args:
        folder: A generation's folder.
        vectors: Read the vectors too (False: ``Snapshot.vectors`` stays empty).

    Raises:
        DamagedIndex: A file is missing, truncated or altered (the message names it).
    """
    folder = Path(folder)
    last: bytes | None = None
    for _ in range(_RETRIES):
        path = folder / MANIFEST
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            if (folder / BACKUP).is_file():
                raise DamagedIndex(path, f"missing (its copy {BACKUP} says a save was committed here)") from None
            return None  # never committed (a killed first save's files are not an index)
        manifest = _parse_manifest(path, raw)
        try:
            return _read_commit(folder, manifest, vectors=vectors)
        except FileNotFoundError as err:
            if raw == last:  # the same manifest twice, a file still missing: deleted, not replaced by a save
                raise DamagedIndex(Path(err.filename or path), "missing (named by meta.json)") from None
            last = raw  # a save replaced the commit while it was read: read the new one
    raise EsRagError(f"{folder}: the index changed {_RETRIES} times while it was read; run the command again")


def _load_bytes(folder: Path, manifest: dict[str, Any], role: str) -> bytes:
    if manifest.get("format") == 1:
        path = folder / LEGACY_NAMES[role]
        if role == "versions" and not path.is_file():
            return b"{}"
        return path.read_bytes()
    entry = manifest["files"][role]
    path = folder / str(entry["name"])
    data = path.read_bytes()
    if len(data) != entry["bytes"]:
        raise DamagedIndex(path, f"{len(data)} bytes, the manifest says {entry['bytes']} (truncated or overwritten)")
    if f"{zlib.crc32(data):08x}" != entry["crc32"]:
        raise DamagedIndex(path, "its CRC-32 does not match the manifest (altered)")
    return data


def _json_lines(path: Path, data: bytes) -> list[dict[str, Any]]:
    try:
        docs = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, ValueError) as err:
        raise DamagedIndex(path, f"not JSON lines ({err})") from None
    if not all(isinstance(d, dict) and "chunk_id" in d for d in docs):
        raise DamagedIndex(path, "a line is not a chunk document")
    return docs


def _read_commit(folder: Path, manifest: dict[str, Any], *, vectors: bool) -> Snapshot:
    def where(role: str) -> Path:
        if manifest.get("format") == 1:
            return folder / LEGACY_NAMES[role]
        return folder / str(manifest["files"][role]["name"])

    snap = Snapshot(meta=manifest)
    snap.children = _json_lines(where("chunks"), _load_bytes(folder, manifest, "chunks"))
    snap.parents = _json_lines(where("parents"), _load_bytes(folder, manifest, "parents"))
    raw = _load_bytes(folder, manifest, "versions")
    try:
        snap.versions = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DamagedIndex(where("versions"), "not a JSON registry") from None
    if not isinstance(snap.versions, dict):
        raise DamagedIndex(where("versions"), "not a JSON object")
    if manifest.get("format") == 1 and len(snap.children) != manifest.get("chunks", len(snap.children)):
        raise DamagedIndex(where("chunks"), f"{len(snap.children)} chunks, meta.json says {manifest.get('chunks')}")
    if vectors and snap.children:
        data = _load_bytes(folder, manifest, "vectors")
        try:
            matrix = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise DamagedIndex(where("vectors"), f"not a NumPy array ({err})") from None
        if matrix.ndim != 2 or matrix.shape[0] != len(snap.children):
            raise DamagedIndex(
                where("vectors"), f"{matrix.shape[0] if matrix.ndim else 0} vectors for {len(snap.children)} chunks"
            )
        snap.vectors = matrix.astype(np.float32, copy=False)
    return snap


def files(folder: str | Path) -> list[Path]:
    """Every file of the index in ``folder`` (manifest, backup, data files of any commit or format, temporaries);
    not the sub-folders, the ``CURRENT`` pointer or the write lock.

    Args:
        folder: A generation's folder.
    """
    folder = Path(folder)
    extra = [folder / BACKUP, folder / MANIFEST]  # the backup first: a manifest alone is still a whole index
    return [p for p in extra if p.is_file()] + _stale_files(folder, keep=set())


def remove(folder: str | Path) -> None:
    """Delete the index files of ``folder`` (:func:`files`): the manifests first, so that no reader takes a
    half-deleted commit for an index.

    Args:
        folder: A generation's folder.
    """
    _unlink(files(folder))


#: Seconds a second writer waits for the first before giving up (``ES_RAG_LOCK_TIMEOUT`` overrides it).
LOCK_TIMEOUT_S = 600.0


@contextmanager
def write_lock(
    directory: str | Path, *, timeout: float | None = None, on_wait: Callable[[], None] | None = None
) -> Iterator[None]:
    """Hold ``<directory>/write.lock`` (``filelock``) for a whole read-modify-write of an embedded index: two
    ingests into one index used to both report success while the last writer's files dropped the other's
    documents. A second writer waits (``on_wait`` is told once), then fails clearly after ``timeout`` seconds.

    Args:
        directory: The index folder (created if missing).
        timeout: Seconds to wait (default :data:`LOCK_TIMEOUT_S`, or ``ES_RAG_LOCK_TIMEOUT``).
        on_wait: Called once when the lock is held by another process.

    Raises:
        EsRagError: The lock was not released within ``timeout``.
    """
    from filelock import FileLock, Timeout

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "write.lock"
    lock = FileLock(str(path))
    wait = float(os.environ.get("ES_RAG_LOCK_TIMEOUT", LOCK_TIMEOUT_S)) if timeout is None else timeout
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if on_wait is not None:
            on_wait()
        try:
            lock.acquire(timeout=wait)
        except Timeout:
            raise EsRagError(
                f"{folder}: another es-rag process is still writing to this index after {wait:g} s "
                f"(lock {path}); run again when it has finished"
            ) from None
    try:
        yield
    finally:
        lock.release()
