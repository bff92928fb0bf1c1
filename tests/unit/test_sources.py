"""What a new user meets when ingesting folders (issue 13): safe folder walking, stable source ids, every skip
reported, nothing ingested is an error, a JSONL line cannot switch tenants, deleting an unknown source warns.

Each test names the behaviour it replaced: run twice on ``.``, ingest read its own index back in as 14 extra
JSONL sources; ``.git/``, ``node_modules/`` and ``.venv/`` were walked; ``.rst`` files vanished without a word and
the run exited 0; ids were paths as typed, so an absolute path made a second source.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from es_rag.cli import main
from es_rag.errors import ConfigError
from es_rag.ingest import IngestReport, load_files


def _tree(root: Path) -> Path:
    files = {
        "guide.md": "# Guide\n\nHow to reset a password.\n",
        "faq/sync.md": "# Sync\n\nSync stops when the token expires.\n",
        "notes.txt": "Plain notes about devices.\n",
        "manual.rst": "Title\n=====\n\nText.\n",
        "slides.pptx": "PK\x03\x04",
        ".hidden.md": "# Hidden\n",
        ".git/HEAD.md": "# not docs\n",
        "node_modules/pkg/README.md": "# vendored\n",
        ".venv/lib/site.md": "# vendored\n",
        "build/out.md": "# generated\n",
        "drafts/wip.md": "# draft\n",
        ".gitignore": "build/\n",
        ".es-ragignore": "drafts/\n*.tmp.md\n",
        "x.tmp.md": "# temp\n",
        # an embedded index another run wrote inside the folder
        "idx/meta.json": "{}", "idx/chunks.jsonl": '{"text": "x", "id": "y"}\n',
    }  # fmt: skip
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def _load(paths, **kw):  # type: ignore[no-untyped-def]
    report = IngestReport()
    docs = load_files(paths, tenant_id="acme", acl=["public"], report=report, **kw)
    return docs, report


def test_a_folder_walk_reads_the_docs_and_skips_the_rest_with_reasons(tmp_path: Path) -> None:
    root = _tree(tmp_path / "docs")
    docs, report = _load([root])
    assert sorted(d.source_id for d in docs) == ["faq/sync.md", "guide.md", "manual.rst", "notes.txt"]
    assert {d.source_id: d.fmt for d in docs}["manual.rst"] == "rst"
    reasons = {Path(s["path"]).relative_to(root).as_posix(): s["reason"] for s in report.skipped}
    assert reasons == {
        ".git": "hidden folder",
        ".venv": "hidden folder",
        "node_modules": "vendor folder",
        "idx": "es_rag index folder",
        "build": "ignored by .gitignore",
        "drafts": "ignored by .es-ragignore",
        ".hidden.md": "hidden file",
        ".gitignore": "hidden file",
        ".es-ragignore": "hidden file",
        "x.tmp.md": "ignored by .es-ragignore",
        "slides.pptx": reasons["slides.pptx"],
    }
    assert reasons["slides.pptx"].startswith("unsupported file type: .pptx (PowerPoint)")
    assert "save it as .docx, .odt, PDF, Markdown or text first" in reasons["slides.pptx"]
    assert report.failed == []
    assert report.skipped_by_reason()["unsupported file type"] == 1


def test_ids_are_stable_however_the_folder_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path / "docs")
    by_abs = sorted(d.source_id for d in _load([root])[0])
    monkeypatch.chdir(tmp_path)
    by_rel = sorted(d.source_id for d in _load(["docs"])[0])
    monkeypatch.chdir(root)
    by_dot = sorted(d.source_id for d in _load(["."])[0])
    assert by_abs == by_rel == by_dot == ["faq/sync.md", "guide.md", "manual.rst", "notes.txt"]
    # a single file gets the id it has in its folder's walk; --base-dir moves the root
    assert [d.source_id for d in _load([root / "faq" / "sync.md"])[0]] == ["sync.md"]
    assert [d.source_id for d in _load([root / "faq" / "sync.md"], base_dir=root)[0]] == ["faq/sync.md"]
    assert sorted(d.source_id for d in _load([root / "faq"], base_dir=tmp_path)[0]) == ["docs/faq/sync.md"]


def test_source_id_names_a_single_file_or_stdin(tmp_path: Path) -> None:
    root = _tree(tmp_path / "docs")
    docs, _ = _load([root / "guide.md"], source_id="handbook/guide")
    assert [d.source_id for d in docs] == ["handbook/guide"]
    docs, _ = _load(["-"], source_id="pasted.md", stdin=io.BytesIO(b"# Pasted\n\nText from stdin.\n"))
    assert [(d.source_id, d.fmt, d.source_path) for d in docs] == [("pasted.md", "markdown", "<stdin>")]
    with pytest.raises(ConfigError, match="--source-id"):
        _load(["-"])
    with pytest.raises(ConfigError, match="exactly one file"):
        _load([root], source_id="x")
    with pytest.raises(ConfigError, match="--base-dir"):
        _load([root], base_dir=tmp_path / "nope")


def test_two_sources_with_one_id_are_refused_not_merged(tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "README.md").write_text(f"# {d}\n\ntext {d}\n")
    docs, report = _load([tmp_path / "a" / "README.md", tmp_path / "b" / "README.md"])
    assert [d.text for d in docs] == ["# a\n\ntext a\n"]
    assert report.failed[0]["field"] == "source_id" and "--base-dir" in report.failed[0]["reason"]
    docs, report = _load([tmp_path / "a" / "README.md", tmp_path / "b" / "README.md"], base_dir=tmp_path)
    assert sorted(d.source_id for d in docs) == ["a/README.md", "b/README.md"] and not report.failed


def test_a_file_outside_base_dir_is_a_failure_naming_it(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "out.md").write_text("# Out\n\nx\n")
    docs, report = _load([tmp_path / "out.md"], base_dir=tmp_path / "in")
    assert docs == [] and report.failed[0]["document"].endswith("out.md")
    assert "outside the base folder" in report.failed[0]["reason"]


def test_a_jsonl_line_cannot_move_a_document_to_another_tenant(tmp_path: Path) -> None:
    rows = [{"id": "ok", "text": "mine"}, {"id": "same", "text": "x", "tenant_id": "acme"},
            {"id": "theirs", "text": "y", "tenant_id": "globex"}]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs, report = _load([tmp_path / "rows.jsonl"])
    assert [d.source_id for d in docs] == ["ok", "same"] and {d.tenant_id for d in docs} == {"acme"}
    assert report.failed == [
        {
            "document": f"{tmp_path / 'rows.jsonl'}:3",
            "field": "tenant_id",
            "reason": "'globex' conflicts with --tenant 'acme'; ingest each tenant separately",
        }
    ]


def test_ingesting_twice_from_the_index_folder_does_not_read_the_index_back(
    tiny_bi_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported case: ``es-rag ingest . --tenant acme`` twice gave 18 sources instead of 4."""
    root = _tree(tmp_path / "proj")
    monkeypatch.chdir(root)
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32", "--json"]
    for _ in range(2):
        assert main(["ingest", ".", "--tenant", "acme", *model]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["sources"] == 4 and report["failed"] == []
    # the second run also skipped the index the first one wrote (.es_rag is hidden; a visible --index-dir too)
    assert main(["ingest", ".", "--tenant", "acme", "--index-dir", "idx2", *model]) == 0
    capsys.readouterr()
    assert main(["ingest", ".", "--tenant", "acme", "--index-dir", "idx2", *model]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sources"] == 4
    assert {"path": str(root / "idx2"), "reason": "es_rag index folder"} in report["skipped"]


def test_nothing_to_ingest_is_an_error_before_any_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.docx").write_bytes(b"PK\x03\x04")  # a truncated Word file, a truncated PDF: read, and refused
    (tmp_path / "b.pdf").write_bytes(b"%PDF-1.7")
    (tmp_path / "c.doc").write_bytes(b"\xd0\xcf\x11\xe0")  # Word 97-2003: not read
    (tmp_path / "empty.md").write_text("")
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02")
    # no such model on the hub (unreachable here): reaching the model load would fail differently
    model = ["--embedding-model", "nobody/no-such-model"]
    assert main(["ingest", str(tmp_path), "--tenant", "acme", *model]) == 1
    err = capsys.readouterr().err
    assert "nothing to ingest (3 failed, 2 skipped)" in err
    assert "c.doc: unsupported file type: .doc (Word 97-2003)" in err
    assert "a.docx: field " in err and "b.pdf: field " in err
    assert "empty.md: empty file: nothing to index" in err and "binary.txt: field 'encoding'" in err  # skipped
    assert main(["ingest", str(tmp_path / "missing.md"), "--tenant", "acme", *model]) == 1
    assert "missing.md: field 'path': no such file" in capsys.readouterr().err


def test_delete_of_an_unknown_source_warns_and_exits_1(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("# A\n\nSome text.\n")
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert main(["ingest", str(doc), "--tenant", "acme", *model, *idx]) == 0
    capsys.readouterr()
    assert main(["delete-source", "nope.md", "--tenant", "acme", *idx]) == 1
    assert "tenant acme has no source 'nope.md'" in capsys.readouterr().err
    assert main(["delete-source", "a.md", "--tenant", "acme", *idx]) == 0


def test_walk_order_and_ids_do_not_depend_on_the_working_folder(tmp_path: Path) -> None:
    root = _tree(tmp_path / "docs")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        rel = [(d.source_id, d.text) for d in _load(["docs"])[0]]
    finally:
        os.chdir(cwd)
    assert rel == [(d.source_id, d.text) for d in _load([root])[0]]


# -- fail fast, never a traceback -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "", "--tenant", "a"], "argument query: empty query"),
        (["search", "   ", "--tenant", "a"], "argument query: empty query"),
        (["explain", " ", "--tenant", "a"], "argument query: empty query"),
        (["ingest", "x.md", "--tenant", "a", "--index-dir", "{file}"], "is a file, not a folder"),
        (["search", "q", "--tenant", "a", "--index-dir", "{file}"], "is a file, not a folder"),
        (["search", "q", "--tenant", "a", "--rerank-model", "/nonexistent/dir"], "--rerank-model /nonexistent/dir: no"),
        (["ingest", "x.md", "--tenant", "a", "--embedding-model", "./no/model"], "--embedding-model ./no/model: no"),
        (["search", "q", "--tenant", "a", "--es", "localhost:9200"], "needs a scheme"),
    ],
)  # fmt: skip
def test_bad_arguments_fail_in_one_line_before_any_model_loads(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of these used to load a model first (5-10 s) and/or end in a traceback."""
    import sys

    (tmp_path / "file").write_text("not a folder")
    argv = [a.replace("{file}", str(tmp_path / "file")) for a in argv]
    before = set(sys.modules)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not {"torch", "sentence_transformers", "transformers"} & (set(sys.modules) - before)


def test_ctrl_c_exits_130_in_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from es_rag.cli.commands import COMMANDS

    def interrupted(args):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(COMMANDS["search"], "run", interrupted)
    assert main(["search", "q", "--tenant", "a"]) == 130
    assert capsys.readouterr().err.strip() == "es-rag search: interrupted"


# -- one writer per embedded index ------------------------------------------------------------------------------
def test_a_second_writer_waits_then_fails_clearly(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from es_rag.embedded.backend import write_lock

    doc = tmp_path / "a.md"
    doc.write_text("# A\n\nSome text.\n")
    idx = tmp_path / "idx"
    argv = ["ingest", str(doc), "--tenant", "acme", "--index-dir", str(idx),
            "--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]  # fmt: skip
    monkeypatch.setenv("ES_RAG_LOCK_TIMEOUT", "0.2")
    with write_lock(idx):
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "waiting for another es-rag process writing to" in err
    assert "another es-rag process is still writing to this index after 0.2 s" in err
    assert main(argv) == 0


def test_concurrent_ingests_into_one_index_lose_nothing(tiny_bi_encoder: Path, tmp_path: Path) -> None:
    """Two ingests at once both reported success and one document was lost (last writer wins)."""
    import threading

    from es_rag.embedded.backend import EmbeddedBackend

    idx = tmp_path / "idx"
    results: list[int] = []

    def ingest(name: str) -> None:
        doc = tmp_path / name
        doc.write_text(f"# {name}\n\nText of {name}.\n")
        argv = ["ingest", str(doc), "--tenant", "acme", "--index-dir", str(idx), "--json",
                "--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]  # fmt: skip
        results.append(main(argv))

    threads = [threading.Thread(target=ingest, args=(f"doc{i}.md",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0, 0, 0]
    stored = {d["source_id"] for d in EmbeddedBackend(idx)._children.values()}
    assert stored == {"doc0.md", "doc1.md", "doc2.md"}


def test_sources_lists_a_tenants_sources(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree(tmp_path / "docs")
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert main(["ingest", str(root), "--tenant", "acme", *model, *idx]) == 0
    capsys.readouterr()
    assert main(["sources", "--tenant", "acme", "--json", *idx]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [s["source_id"] for s in listing["sources"]] == ["faq/sync.md", "guide.md", "manual.rst", "notes.txt"]
    assert all(s["chunks"] >= 1 and s["active_version"].startswith("sha256:") for s in listing["sources"])
    assert main(["sources", "--tenant", "acme", *idx]) == 0
    out = capsys.readouterr().out
    assert "guide.md" in out and out.strip().endswith("chunks served")
    assert main(["sources", "--tenant", "globex", *idx]) == 0
    assert capsys.readouterr().out.strip() == "tenant globex has no sources"


def test_suffixless_readme_and_copyright_files_are_plain_text(tmp_path: Path) -> None:
    """Issue 31: README/copyright-style text files without a suffix could not be included (a Debian package's
    /usr/share/doc/<pkg>/copyright)."""
    from es_rag.ingest import IngestReport, iter_files
    from es_rag.ingest.sources import path_format

    root = tmp_path / "doc"
    root.mkdir()
    (root / "copyright").write_text("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
    (root / "README").write_text("Read me first.\n")
    (root / "Makefile").write_text("all:\n")  # not a known text file name: skipped, with the reason
    report = IngestReport()
    docs = list(iter_files([root], tenant_id="t", acl=("public",), report=report))
    assert sorted((d.source_id, d.fmt) for d in docs) == [("README", "plain"), ("copyright", "plain")]
    assert [s["path"].rsplit("/", 1)[-1] for s in report.skipped] == ["Makefile"]
    assert "README, COPYING, copyright" in report.skipped[0]["reason"]
    assert (path_format(Path("NEWS")), path_format(Path("notes.md")), path_format(Path("run"))) == (
        "plain",
        "markdown",
        "",
    )


def test_latin_1_files_are_read_with_encoding_and_named_without(tmp_path: Path) -> None:
    """Issue 31: Latin-1 files were refused with no way to read them."""
    from es_rag.ingest import IngestReport, iter_files

    (tmp_path / "café.txt").write_bytes("Le café est prêt à 8 h.\n".encode("latin-1"))
    report = IngestReport()
    assert list(iter_files([tmp_path], tenant_id="t", acl=("public",), report=report)) == []
    reason = report.failed[0]["reason"]
    assert reason.startswith("not valid UTF-8 (byte 6: b'\\xe9')") and "--encoding latin-1" in reason
    report = IngestReport()
    (doc,) = iter_files([tmp_path], tenant_id="t", acl=("public",), report=report, encoding="latin-1")
    assert doc.text == "Le café est prêt à 8 h.\n" and report.failed == []
    report = IngestReport()
    assert list(iter_files([tmp_path], tenant_id="t", acl=("public",), report=report, encoding="klingon")) == []
    assert report.failed[0]["reason"] == "unknown encoding 'klingon'"


def test_an_empty_file_is_skipped_and_sync_still_knows_the_folder(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 46, item 3: an empty ``__init__.py`` (26 of 201 under Debian's Python) made ingest exit 1, and
    ``--sync`` then deleted nothing ("the folder's content is not known"). It is a skipped file now."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text('def wipe(token):\n    """Wipe the device with a token."""\n    return token\n')
    (pkg / "old.py").write_text('def legacy():\n    """An old helper."""\n    return 1\n')
    index = tmp_path / "idx"
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    args = ["ingest", str(pkg), "--tenant", "acme", "--index-dir", str(index), *model]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (
        report["failed"] == []
        and {"path": str(pkg / "__init__.py"), "reason": "empty file: nothing to index"} in (report["skipped"])
    )
    (pkg / "old.py").unlink()
    assert main([*args, "--sync", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["source_id"] for r in report["removed"]] == ["old.py"]
