"""``es-rag serve`` and the searches it answers (issue 46: every CLI call loaded the models again): the same output
and exit code as a search in its own process, fresh after a new commit, private to the user, and a search that runs
by itself whenever no server answers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_rag.cli import main, resident
from es_rag.errors import EsRagError

DEADLINE_S = 120  # hang-only: a server that never starts fails the test instead of blocking the run


@pytest.fixture
def index(tmp_path: Path, tiny_bi_encoder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    run_dir = tempfile.mkdtemp(prefix="esr-", dir="/tmp")  # a socket's path holds at most 107 bytes
    monkeypatch.setenv(resident.SOCKET_DIR_ENV, run_dir)
    monkeypatch.delenv(resident.NO_SERVER_ENV, raising=False)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "alpha.md").write_text("# Alpha\n\nalpha beta gamma delta epsilon.\n")
    (docs / "beta.md").write_text("# Beta\n\nbeta gamma zeta eta theta.\n")
    flags = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    idx = str(tmp_path / "idx")
    assert main(["ingest", str(docs), "--tenant", "t", "--index-dir", idx, *flags]) == 0
    yield {"dir": idx, "docs": docs, "flags": flags}
    shutil.rmtree(run_dir, ignore_errors=True)


def start(index_dir: str, stop: threading.Event) -> tuple[threading.Thread, Path]:
    """A server of ``index_dir`` in a thread, once it listens (its exception, if it fails, is raised here)."""
    up, where, failed = threading.Event(), [], []

    def target() -> None:
        try:
            resident.serve(index_dir, ready=lambda p: (where.append(p), up.set()), stop=stop)
        except BaseException as exc:
            failed.append(exc)
            up.set()

    thread = threading.Thread(target=target)
    thread.start()
    assert up.wait(DEADLINE_S), "es-rag serve did not start listening"
    if failed:
        raise failed[0]
    return thread, where[0]


@pytest.fixture
def server(index: dict[str, object]) -> Iterator[Path]:
    stop = threading.Event()
    thread, path = start(str(index["dir"]), stop)
    try:
        yield path
    finally:
        stop.set()
        thread.join(DEADLINE_S)
    assert not thread.is_alive() and not path.exists()  # a stopped server removes its socket


def search(index: dict[str, object], query: str, *extra: str) -> list[str]:
    return ["search", query, "--tenant", "t", "--index-dir", str(index["dir"]), *index["flags"], "--json", *extra]  # type: ignore[misc]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, object] | str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    try:
        return code, json.loads(out), err
    except ValueError:
        return code, out, err


def test_a_served_search_prints_what_a_search_alone_prints(
    index: dict[str, object], server: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, served, _ = run(capsys, search(index, "gamma delta"))
    monkeypatch.setenv(resident.NO_SERVER_ENV, "1")
    code_alone, alone, _ = run(capsys, search(index, "gamma delta"))
    assert code == code_alone == 0 and isinstance(served, dict) and isinstance(alone, dict)
    assert served["hits"] == alone["hits"] and served["context"] == alone["context"]
    assert served["trace"]["paths"]["resident"] == f"es-rag serve (pid {os.getpid()})"  # type: ignore[index]
    assert "resident" not in alone["trace"]["paths"]  # type: ignore[index,operator]
    # errors too: the server's exit code and message are the command's own
    monkeypatch.delenv(resident.NO_SERVER_ENV)
    code, _, err = run(capsys, search(index, "q", "--filter", "{not json"))
    monkeypatch.setenv(resident.NO_SERVER_ENV, "1")
    code_alone, _, err_alone = run(capsys, search(index, "q", "--filter", "{not json"))
    assert code == code_alone == 2 and err == err_alone and "filter" in err


def test_other_settings_and_a_new_commit_are_served_fresh(
    index: dict[str, object], server: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, first, _ = run(capsys, search(index, "theta"))
    assert code == 0 and isinstance(first, dict)
    assert {h["source_id"] for h in first["hits"]} <= {"alpha.md", "beta.md"}  # type: ignore[union-attr]
    code, k1, _ = run(capsys, search(index, "theta", "--context-k", "1"))
    assert code == 0 and isinstance(k1, dict) and len(k1["hits"]) == 1  # type: ignore[arg-type]
    docs = index["docs"]
    assert isinstance(docs, Path)
    (docs / "theta.md").write_text("# Theta\n\ntheta theta theta iota kappa.\n")
    assert main(["ingest", str(docs), "--tenant", "t", "--index-dir", str(index["dir"]), *index["flags"]]) == 0  # type: ignore[list-item]
    capsys.readouterr()
    code, after, _ = run(capsys, search(index, "theta"))
    assert code == 0 and isinstance(after, dict)
    assert "theta.md" in {h["source_id"] for h in after["hits"]}  # type: ignore[union-attr]
    assert after["trace"]["paths"]["resident"].startswith("es-rag serve")  # type: ignore[index]


def test_without_a_listening_server_a_search_runs_by_itself(
    index: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    path = resident.socket_path(str(index["dir"]))
    path.parent.mkdir(mode=0o700, parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # bound, never listening: what a killed server leaves
    code, out, _ = run(capsys, search(index, "alpha"))
    assert code == 0 and isinstance(out, dict) and "resident" not in out["trace"]["paths"]  # type: ignore[operator]
    # a server starting there removes the stale socket and listens
    stop = threading.Event()
    thread, _ = start(str(index["dir"]), stop)
    try:
        with pytest.raises(EsRagError, match="already answers"):  # and a second server is refused
            resident.serve(str(index["dir"]), ready=lambda p: None, stop=threading.Event())
    finally:
        stop.set()
        thread.join(DEADLINE_S)


def test_the_socket_is_private_and_another_version_is_not_answered(
    index: dict[str, object], server: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert server.stat().st_mode & 0o777 == 0o600 and server.parent.stat().st_mode & 0o777 == 0o700
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(server))
        conn.sendall(json.dumps({"version": "0.0.0", "cwd": "/", "argv": ["search", "q"]}).encode())
        conn.shutdown(socket.SHUT_WR)
        answer = json.loads(resident._read_all(conn, limit=None))
    assert "fallback" in answer and "rc" not in answer
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(server))
        request = {"version": resident.__version__, "cwd": "/", "argv": ["ingest", "/", "--tenant", "t"]}
        conn.sendall(json.dumps(request).encode())
        conn.shutdown(socket.SHUT_WR)
        assert "fallback" in json.loads(resident._read_all(conn, limit=None))  # only searches are served


def test_a_search_that_breaks_the_server_runs_by_itself_and_the_server_goes_on(
    index: dict[str, object], server: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = resident.WARM.get

    def broken(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in the served path")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(resident.WARM, "get", broken)
    code, out, err = run(capsys, search(index, "gamma"))
    assert code == 0 and isinstance(out, dict) and "resident" not in out["trace"]["paths"]  # type: ignore[operator]
    assert "a bug in the served path" in err  # the server said so (its stderr is this test's)
    code, out, _ = run(capsys, search(index, "gamma"))
    assert code == 0 and isinstance(out, dict) and "resident" in out["trace"]["paths"]  # type: ignore[operator]


def test_a_socket_folder_open_to_others_is_never_used(
    index: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = resident.socket_path(str(index["dir"])).parent
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    with pytest.raises(EsRagError, match="closed to others"):
        resident.serve(str(index["dir"]), ready=lambda p: None, stop=threading.Event())
    assert resident.forward(str(index["dir"]), ["search", "q", "--tenant", "t"]) is None


def test_a_socket_path_too_long_is_a_clear_error(index: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    deep = Path(str(os.environ[resident.SOCKET_DIR_ENV])) / ("d" * 100)
    monkeypatch.setenv(resident.SOCKET_DIR_ENV, str(deep))
    with pytest.raises(EsRagError, match="set ES_RAG_SOCKET_DIR to a short folder"):
        resident.serve(str(index["dir"]), ready=lambda p: None, stop=threading.Event())


def test_a_socket_folder_that_cannot_be_made_is_a_clear_error(
    index: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(resident.SOCKET_DIR_ENV, str(blocked))
    with pytest.raises(EsRagError, match="cannot make the socket folder"):
        resident.serve(str(index["dir"]), ready=lambda p: None, stop=threading.Event())
    assert resident.forward(str(index["dir"]), ["search", "q", "--tenant", "t"]) is None


def test_serve_refuses_a_cluster(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["serve", "--es", "http://127.0.0.1:9"]) == 2  # no such option: a cluster's searches are not served
    monkeypatch.setenv("ES_CLOUD_ID", "deployment:abc")
    assert main(["serve"]) == 2
    assert "embedded index" in capsys.readouterr().err
