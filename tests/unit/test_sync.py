"""``ingest DIR --sync`` (seed 004: "re-index or auto-sync"): sources gone from the folder are deleted and
reported; nothing is deleted outside the folder's scope or when the run could not read every document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.cli import main
from es_rag.errors import ConfigError
from es_rag.ingest.sync import SyncScope, stale_sources, sync_scopes


def test_stale_sources_are_listed_ids_in_scope_the_run_did_not_read(tmp_path: Path) -> None:
    listed = ["a.md", "x/b.md", "x/c.md", "y/d.md", "xa/e.md"]
    every, x, y = SyncScope(tmp_path, ""), SyncScope(tmp_path / "x", "x/"), SyncScope(tmp_path / "y", "y/")
    assert stale_sources(listed, ["a.md", "x/b.md"], [every], {}) == ["x/c.md", "xa/e.md", "y/d.md"]
    assert stale_sources(listed, ["x/b.md"], [x], {}) == ["x/c.md"]  # not xa/e.md: "x/" is a folder prefix
    assert stale_sources(listed, [], [x, y], {}) == ["x/b.md", "x/c.md", "y/d.md"]
    assert stale_sources(listed, listed, [every], {}) == []
    assert stale_sources([], ["a.md"], [every], {}) == []


def test_without_base_dir_the_stored_path_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids are relative to each folder, so ``a.md`` of X and ``b.md`` of Y look alike: where each was read from
    decides (issue 31: ``ingest X`` then ``ingest Y --sync`` deleted all of X)."""
    monkeypatch.chdir(tmp_path)
    y = SyncScope((tmp_path / "sync" / "Y").resolve())
    paths = {
        "a.md": ["sync/X/a.md"],  # relative to the folder the ingest ran in
        "b.md": [str(tmp_path / "sync" / "Y" / "b.md")],
        "c.md": [str(tmp_path / "sync" / "Y" / "sub" / "c.md")],
        "d.md": ["sync/Y/d.jsonl:3"],  # a JSONL record
        "e.md": [],  # written by another tool: never deleted by a sync
        "f.md": ["sync/YY/f.md"],  # a sibling folder whose name starts the same
    }
    assert stale_sources(list(paths), [], [y], paths) == ["b.md", "c.md", "d.md"]
    assert stale_sources(list(paths), ["b.md"], [y], paths) == ["c.md", "d.md"]


def test_scopes_are_folder_prefixes_under_base_dir(tmp_path: Path) -> None:
    (tmp_path / "x" / "deep").mkdir(parents=True)
    (tmp_path / "y").mkdir()
    x, y = (tmp_path / "x").resolve(), (tmp_path / "y").resolve()
    assert sync_scopes([tmp_path / "x"], None) == [SyncScope(x)]  # ids relative to the folder: its stored paths
    assert sync_scopes([tmp_path / "x", tmp_path / "y"], tmp_path) == [SyncScope(x, "x/"), SyncScope(y, "y/")]
    assert [s.prefix for s in sync_scopes([tmp_path / "x" / "deep"], tmp_path)] == ["x/deep/"]
    assert [s.prefix for s in sync_scopes([tmp_path], tmp_path)] == [""]


def test_sync_refuses_files_and_stdin(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("# A\n")
    with pytest.raises(ConfigError, match=r"--sync follows folders; not a folder: .*a\.md, -"):
        sync_scopes([f, "-"], None)


@pytest.fixture
def cli(tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*argv, *idx, *(model if argv[0] == "ingest" else [])])
        out = capsys.readouterr()
        return code, out.out, out.err

    def sources(tenant: str = "acme") -> list[str]:
        code, out, _ = run("sources", "--tenant", tenant, "--json")
        assert code == 0
        return [s["source_id"] for s in json.loads(out)["sources"]]

    run.sources = sources  # type: ignore[attr-defined]
    return run


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_removed_file_is_deleted_and_reported(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    docs = tmp_path / "docs"
    _write(docs, {"a.md": "# A\n\nAlpha text.\n", "b.md": "# B\n\nBeta text.\n", "sub/c.md": "# C\n\nGamma.\n"})
    assert cli("ingest", str(docs), "--tenant", "acme")[0] == 0
    assert cli("ingest", str(docs), "--tenant", "globex")[0] == 0
    (docs / "b.md").unlink()
    code, out, _ = cli("ingest", str(docs), "--tenant", "acme", "--sync")
    assert code == 0
    assert f"removed b.md (read from {docs / 'b.md'}): gone from the folder" in out and "sync: 1 sources removed" in out
    assert cli.sources() == ["a.md", "sub/c.md"]
    assert cli.sources("globex") == ["a.md", "b.md", "sub/c.md"]  # another tenant is never touched
    # an ignored file counts as gone; the JSON report lists the removal
    (docs / ".es-ragignore").write_text("sub/\n")
    code, out, _ = cli("ingest", str(docs), "--tenant", "acme", "--sync", "--json")
    assert code == 0
    report = json.loads(out)
    assert [r["source_id"] for r in report["removed"]] == ["sub/c.md"]
    assert report["removed"][0]["remaining"] == {"chunks": 0, "parents": 0}
    assert cli.sources() == ["a.md"]
    # without --sync nothing is deleted
    (docs / "a.md").unlink()
    (docs / "d.md").write_text("# D\n\nDelta.\n")
    assert cli("ingest", str(docs), "--tenant", "acme")[0] == 0
    assert cli.sources() == ["a.md", "d.md"]


def test_sync_deletes_nothing_when_a_document_failed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    docs = tmp_path / "docs"
    _write(docs, {"a.md": "# A\n\nAlpha.\n", "b.md": "# B\n\nBeta.\n"})
    assert cli("ingest", str(docs), "--tenant", "acme")[0] == 0
    (docs / "a.md").unlink()
    (docs / "b.md").write_bytes(b"# B\n\n\xff\xfe broken \xc3\x28\n")  # now invalid UTF-8
    code, _, err = cli("ingest", str(docs), "--tenant", "acme", "--sync")
    assert code == 1
    assert "FAILED" in err and "sync: skipped: 1 documents failed" in err
    assert cli.sources() == ["a.md", "b.md"]  # b.md keeps its indexed version, a.md is not deleted either


def test_sync_with_base_dir_touches_only_the_folder_given(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "kb"
    _write(root, {"x/a.md": "# A\n\nAlpha.\n", "x/b.md": "# B\n\nBeta.\n", "y/c.md": "# C\n\nGamma.\n"})
    assert cli("ingest", str(root / "x"), str(root / "y"), "--base-dir", str(root), "--tenant", "acme")[0] == 0
    assert cli.sources() == ["x/a.md", "x/b.md", "y/c.md"]
    (root / "x" / "b.md").unlink()
    (root / "y" / "c.md").unlink()
    assert cli("ingest", str(root / "x"), "--base-dir", str(root), "--tenant", "acme", "--sync")[0] == 0
    assert cli.sources() == ["x/a.md", "y/c.md"]  # y/ was not synced


def test_sync_of_an_emptied_folder_deletes_its_sources_without_loading_a_model(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    _write(docs, {"a.md": "# A\n\nAlpha.\n"})
    assert cli("ingest", str(docs), "--tenant", "acme")[0] == 0
    (docs / "a.md").unlink()

    def no_model(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("es_rag.wiring.build_embedder", no_model)
    code, out, _ = cli("ingest", str(docs), "--tenant", "acme", "--sync")
    assert code == 0 and "removed a.md" in out
    assert cli.sources() == []


def test_sync_of_one_folder_leaves_another_folders_sources(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 31: ``ingest sync/X`` then ``ingest sync/Y --sync`` removed X's files, saying "gone from the folder"."""
    _write(tmp_path / "sync", {"X/a.md": "# A\n\nAlpha.\n", "Y/b.md": "# B\n\nBeta.\n", "Y/c.md": "# C\n\nGamma.\n"})
    assert cli("ingest", str(tmp_path / "sync" / "X"), "--tenant", "acme")[0] == 0
    code, out, _ = cli("ingest", str(tmp_path / "sync" / "Y"), "--tenant", "acme", "--sync")
    assert code == 0 and "sync: 0 sources removed" in out and "removed a.md" not in out
    assert cli.sources() == ["a.md", "b.md", "c.md"]
    (tmp_path / "sync" / "Y" / "c.md").unlink()
    code, out, _ = cli("ingest", str(tmp_path / "sync" / "Y"), "--tenant", "acme", "--sync")
    assert code == 0 and "removed c.md" in out and "removed a.md" not in out
    assert cli.sources() == ["a.md", "b.md"]
