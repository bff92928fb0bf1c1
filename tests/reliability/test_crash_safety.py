"""Crash safety of the embedded index (issue 33): a kill at every write point of a save, a full disk at any byte, a
reader beside a writer, and each single-file corruption, checked against what a reader is served afterwards.

The commit under test is :mod:`es_rag.embedded.store` (immutable data files named by a checksummed manifest).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.cli import main
from es_rag.embedded import store
from es_rag.embedded.backend import EmbeddedBackend
from tests.support.crash import KILLED, fingerprint, state_a, state_b
from tests.support.forker import Forker

ROOT = Path(__file__).resolve().parents[2]
EMPTY = {"chunks": {}, "parents": {}, "versions": {}}


@dataclasses.dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def forks() -> Iterator[Forker]:
    with Forker("tests.support.crash") as forker:
        yield forker


def run_job(forks: Forker, folder: Path, job: str, kill_at: int = 0, fsize: int | None = None) -> Run:
    """One save of ``job`` into ``folder`` in a forked process (killed at write point ``kill_at``, 0: none)."""
    argv = [str(folder), job, str(kill_at), *([str(fsize)] if fsize is not None else [])]
    return Run(*forks.run(argv))


def committed(job: Callable[[EmbeddedBackend], None], folder: Path) -> dict[str, Any]:
    backend = EmbeddedBackend(folder)
    job(backend)
    backend.flush()
    return fingerprint(folder)


def listing(folder: Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in folder.iterdir() if p.is_file() and p.name != "write.lock")


def only_live_files(folder: Path) -> None:
    """No orphan: the folder holds the manifest, its copy and exactly the files the manifest names."""
    manifest = store.read(folder)
    assert manifest is not None
    named = {f["name"] for f in manifest.meta["files"].values()}
    assert {p.name for p in folder.iterdir()} - {"write.lock"} == named | {store.MANIFEST, store.BACKUP}


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("states")
    a = committed(state_a, base / "x")
    b = committed(state_b, base / "x")
    shutil.rmtree(base / "x")
    committed(state_a, base / "a")
    return {"a": a, "b": b, "folder_a": base / "a"}


@pytest.mark.parametrize("start, job", [("empty", "a"), ("a", "b")])
def test_a_kill_at_every_write_point_leaves_the_old_commit_or_the_new_one(
    states: dict[str, Any], tmp_path: Path, start: str, job: str, forks: Forker
) -> None:
    def fresh(name: str) -> Path:
        folder = tmp_path / name
        if start == "a":
            shutil.copytree(states["folder_a"], folder)
        return folder

    full = run_job(forks, fresh("full"), job)
    assert full.returncode == 0, full.stderr
    points = int(full.stdout.split(":")[1].strip(" }\n"))
    assert points >= 12  # 4 data files + manifest + copy: writes, fsyncs, renames, removals
    old, new = (EMPTY if start == "empty" else states["a"]), states[job]
    seen = []
    for kill_at in range(1, points + 1):
        folder = fresh(f"k{kill_at}")
        proc = run_job(forks, folder, job, kill_at)
        assert proc.returncode == KILLED, (kill_at, proc.stderr)
        served = fingerprint(folder)  # readable: no DamagedIndex, no traceback
        assert served in (old, new), f"kill at write point {kill_at} of {points} served a mix"
        seen.append("new" if served == new else "old")
        rerun = run_job(forks, folder, job)  # the same save again converges, and leaves no orphan
        assert rerun.returncode == 0, (kill_at, rerun.stderr)
        assert fingerprint(folder) == new
        only_live_files(folder)
    # the switch is one point: every kill before it serves the old commit, every kill after it the new one
    assert seen == sorted(seen, key=lambda s: s == "new") and "old" in seen and "new" in seen


def test_a_full_disk_at_any_byte_changes_nothing_and_names_the_disk(
    states: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "idx"
    shutil.copytree(states["folder_a"], folder)
    before = listing(folder)
    written = {"n": 0, "room": 0}
    real = store._Sink.write

    def write(self: store._Sink, data: Any) -> int:  # as the kernel does: a short write, then ENOSPC
        view = memoryview(data).cast("B")
        room = written["room"] - written["n"]
        if len(view) > room:
            real(self, view[: max(room, 0)])
            written["n"] += max(room, 0)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written["n"] += len(view)
        return real(self, view)

    monkeypatch.setattr(store._Sink, "write", write)
    sizes = []
    backend = EmbeddedBackend(folder)
    state_b(backend)
    written["room"] = 10**9
    backend.flush()  # measure the bytes of the whole save, then undo it
    total = written["n"] - (folder / store.BACKUP).stat().st_size  # the copy is written after the switch
    shutil.rmtree(folder)
    shutil.copytree(states["folder_a"], folder)
    assert total > 2000
    for room in sorted({0, 1, *range(7, total, 97), total - 1}):
        backend = EmbeddedBackend(folder)  # commit a (still on disk), then the same change to b
        state_b(backend)
        written.update(n=0, room=room)
        with pytest.raises(store.DiskFull) as info:
            backend.flush()
        message = str(info.value)
        assert "\n" not in message and "no room" in message and "nothing was changed" in message
        assert str(store._mount_of(folder)) in message
        sizes.append(room)
        assert listing(folder) == before, f"a full disk after {room} bytes left a file behind"
        assert fingerprint(folder) == states["a"]
    assert len(sizes) > 20


def test_the_kernel_file_size_limit_is_reported_as_a_full_disk(states: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    shutil.copytree(states["folder_a"], folder)
    before = listing(folder)
    # a process of its own, its stderr a pipe: the limit applies to every file the process writes, the forker's
    # output files included
    argv = [sys.executable, "-m", "tests.support.crash", str(folder), "b", "0", "300"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)  # chunks file > 300 bytes
    assert proc.returncode != 0 and "DiskFull" in proc.stderr and "nothing was changed" in proc.stderr
    assert listing(folder) == before and fingerprint(folder) == states["a"]


def test_searches_beside_a_writer_always_open_one_commit(states: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    shutil.copytree(states["folder_a"], folder)
    stop = threading.Event()
    commits = {"n": 0}

    def writer() -> None:
        backend = EmbeddedBackend(folder)
        while not stop.is_set():
            (state_b if commits["n"] % 2 == 0 else state_a)(backend)
            backend.flush()
            commits["n"] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        counts = set()
        for _ in range(10_000):
            snap = store.read(folder)
            assert snap is not None and len(snap.children) == snap.meta["chunks"] == snap.vectors.shape[0]
            counts.add(len(snap.children))
    finally:
        stop.set()
        thread.join()
    assert commits["n"] > 10 and len(counts) >= 2  # the reads saw several commits, each whole (checksums and counts)


def test_searches_in_one_process_beside_commits_in_another_open_one_commit(
    states: dict[str, Any], tmp_path: Path
) -> None:
    """The same across processes: a writer process commits in a loop (``tests.support.crash FOLDER loop S``) while
    this one opens the index 10,000 times; every open reads one whole commit (checksums, counts)."""
    folder = tmp_path / "idx"
    shutil.copytree(states["folder_a"], folder)
    argv = [sys.executable, "-m", "tests.support.crash", str(folder), "loop", "60"]
    writer = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = set()
        for _ in range(10_000):
            snap = store.read(folder)
            assert snap is not None and len(snap.children) == snap.meta["chunks"] == snap.vectors.shape[0]
            seen.add(snap.meta["commit"])
    finally:
        writer.terminate()
        writer.wait(timeout=30)
    assert len(seen) > 5, f"the writer committed only {len(seen)} times while the reader ran"


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "garbage": lambda p: p.write_bytes(b"\x00\xff garbage \x89PNG" * 3),
    "empty": lambda p: p.write_bytes(b""),
    "deleted": lambda p: p.unlink(),
}


def _role_file(folder: Path, role: str) -> Path:
    if role == "manifest":
        return folder / store.MANIFEST
    return folder / store.read(folder).meta["files"][role]["name"]  # type: ignore[union-attr]


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
@pytest.mark.parametrize("role", ["manifest", "chunks", "vectors", "parents", "versions"])
def test_each_damaged_file_is_named_in_one_line_never_a_traceback_or_a_wrong_answer(
    states: dict[str, Any], tmp_path: Path, role: str, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "idx"
    shutil.copytree(states["folder_a"], folder)
    target = _role_file(folder, role)
    CORRUPTIONS[how](target)
    with pytest.raises(store.DamagedIndex) as info:
        EmbeddedBackend(folder)
    assert info.value.path.name == target.name and "es-rag ingest" in str(info.value)
    code = main(["sources", "--tenant", "acme", "--index-dir", str(folder), "--json"])
    err = capsys.readouterr().err
    assert code != 0 and target.name in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def _format_1(tmp_path: Path, chunks: str, *, rows: int, meta: str, versions: str | None = None) -> Path:
    """An index as es_rag wrote it before manifests: fixed file names, no checksums; ``rows`` vectors."""
    folder = tmp_path / "idx"
    folder.mkdir()
    (folder / "chunks.jsonl").write_text(chunks)
    np.save(folder / "vectors.npy", np.ones((rows, 4), np.float32))
    (folder / "parents.jsonl").write_text("")
    if versions is not None:
        (folder / "versions.json").write_text(versions)
    (folder / "meta.json").write_text(meta)
    return folder


def test_a_format_1_index_is_read_and_its_next_save_upgrades_it(tmp_path: Path) -> None:
    folder = _format_1(
        tmp_path,
        '{"chunk_id": "c1", "text": "hello", "source_id": "s"}\n',
        rows=1,
        meta='{"format": 1, "dims": 4, "similarity": "cosine", "chunks": 1, "parents": 0}',
        versions='{"acme": {"active": {"s": "v1"}}}',
    )
    backend = EmbeddedBackend(folder)
    assert list(backend._children) == ["c1"] and backend.versions == {"acme": {"active": {"s": "v1"}}}
    backend.flush()
    only_live_files(folder)  # the format-1 files are gone, the new commit names its own
    assert fingerprint(folder)["versions"] == {"acme": {"active": {"s": "v1"}}}


def test_a_format_1_index_with_fewer_vectors_than_chunks_is_named(tmp_path: Path) -> None:
    chunks = '{"chunk_id": "c1"}\n{"chunk_id": "c2"}\n'
    folder = _format_1(tmp_path, chunks, rows=1, meta='{"format": 1, "dims": 4, "chunks": 2, "parents": 0}')
    with pytest.raises(store.DamagedIndex, match=r"vectors.npy: 1 vectors for 2 chunks"):
        EmbeddedBackend(folder)


def test_a_killed_first_save_is_no_index_and_the_next_save_removes_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    folder.mkdir()
    (folder / "chunks-000001.jsonl").write_text('{"chunk_id": "half')  # killed before its manifest
    assert store.read(folder) is None and EmbeddedBackend(folder).count() == 0
    committed(state_a, folder)
    only_live_files(folder)


def test_a_deleted_manifest_is_damage_not_an_empty_index(states: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    shutil.copytree(states["folder_a"], folder)
    (folder / store.MANIFEST).unlink()
    with pytest.raises(store.DamagedIndex, match=r"meta\.json: missing"):
        EmbeddedBackend(folder)


# ----------------------------------------------------------------------------- the Elasticsearch ingest, killed
def _served(cluster: Any) -> dict[str, Any]:
    """What a search of tenant acme can be served: the searchable (refreshed) chunks and parents whose version the
    registry does not hide, by source; also checks that no source is served in two versions."""
    from tests.support.crash_es import SETTINGS

    registry = cluster.docs(SETTINGS.index_name("versions")).get("acme") or {}
    hidden = set(registry.get("hidden") or [])
    out: dict[str, Any] = {}
    for index in (SETTINGS.chunk_index, SETTINGS.parent_index):
        state = cluster.indices[cluster._single(index)]
        for doc_id, doc in sorted(state.searchable.items()):
            src = doc.source
            if src.get("tenant_id") != "acme" or src.get("version_key") in hidden:
                continue
            out.setdefault(src["source_id"], {}).setdefault(src["source_version"], []).append((doc_id, src["text"]))
    for source, versions in out.items():
        assert len(versions) == 1, f"{source} is served in versions {sorted(versions)}"
    return out


def _stored_versions(cluster: Any) -> set[tuple[str, str]]:
    from tests.support.crash_es import SETTINGS

    return {
        (d["source_id"], d["source_version"])
        for index in (SETTINGS.chunk_index, SETTINGS.parent_index)
        for d in cluster.docs(index).values()
    }


_JOB_A: list[Any] = []


@contextlib.contextmanager
def _cluster_with_job_a() -> Iterator[tuple[Any, str]]:
    """A strict double served over HTTP by this process, set up, holding job ``a`` (built once, then copied)."""
    from es_rag.elasticsearch.backend import ElasticsearchBackend
    from tests.support.crash_es import SETTINGS, run
    from tests.support.double.cluster import StrictCluster
    from tests.support.double.http import serve

    if not _JOB_A:
        cluster = StrictCluster()
        with serve(cluster) as url:
            ElasticsearchBackend.connect(url, SETTINGS).setup()
            run(url, "a")
        _JOB_A.append(cluster)
    cluster = copy.deepcopy(_JOB_A[0])
    with serve(cluster) as url:
        yield cluster, url


def test_an_elasticsearch_ingest_killed_at_every_write_request_serves_one_version_and_converges() -> None:
    """Issue 33: the strict double is served over HTTP by this process; the ingest runs in a subprocess killed
    before each write request reaches the cluster, and after each one was applied but its answer not read. After
    every kill a search serves each source in exactly one version, whole (the old one or the new one); running
    the ingest again converges to the new version alone, with nothing hidden, nothing retired and no document of
    another version stored."""
    from tests.support.crash_es import run

    def run_es_job(forker: Forker, url: str, job: str, kill_at: int = 0, when: str = "before") -> Run:
        return Run(*forker.run([url, job, str(kill_at), when]))

    es = Forker("tests.support.crash_es")
    with _cluster_with_job_a() as (cluster, url):
        old = _served(cluster)
        full = run_es_job(es, url, "b")
        assert full.returncode == 0, full.stderr
        writes = json.loads(full.stdout)["writes"]
        new = _served(cluster)
    assert old["guide"].keys() == {"v1"} and new["guide"].keys() == {"v2"} and writes >= 6
    outcomes = []
    for when in ("before", "after"):
        for kill_at in range(1, writes + 1):
            with _cluster_with_job_a() as (cluster, url):
                proc = run_es_job(es, url, "b", kill_at, when)
                assert proc.returncode == KILLED, (when, kill_at, proc.stderr[-2000:])
                served = _served(cluster)
                assert served in (old, new), f"killed {when} write {kill_at}: a mixed or partial version is served"
                outcomes.append("new" if served == new else "old")
                run(url, "b")  # the same ingest again
                assert _served(cluster) == new
                registry = cluster.docs("es-rag-versions")["acme"]
                assert registry["hidden"] == [] and not registry.get("retired"), (when, kill_at, registry)
                assert _stored_versions(cluster) == {("guide", "v2"), ("policy", "p1")}, (when, kill_at)
    es.close()
    assert "old" in outcomes and "new" in outcomes
