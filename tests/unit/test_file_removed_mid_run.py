"""Issue 31: a file deleted while an ingest runs failed the whole run. Files are read one at a time when their turn
comes: one found by the folder walk and gone when read is one failed document, named, and the run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rag.cli import main
from es_rag.ingest import IngestReport, iter_files


def test_a_file_gone_before_its_turn_is_one_failed_document(tmp_path: Path) -> None:
    for name in ("a.md", "b.md", "c.md"):
        (tmp_path / name).write_text(f"# {name}\n\nText of {name}.\n")
    report = IngestReport()
    stream = iter_files([tmp_path], tenant_id="t", acl=("p",), report=report)
    first = next(stream)
    assert first.source_id == "a.md"
    (tmp_path / "b.md").unlink()  # deleted while the run is under way
    rest = [d.source_id for d in stream]
    assert rest == ["c.md"]
    assert report.failed == [{"document": str(tmp_path / "b.md"), "field": "path", "reason": "no such file"}]


def test_the_cli_ingests_the_rest_and_says_which_file_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (docs / name).write_text(f"# {name}\n\nText of {name}.\n")
    import es_rag.ingest.sources as sources
    from es_rag.ingest.formats import SourceText

    real = sources.read_source

    def read_then_delete(name: str, data: bytes, fmt: str, encoding: str = "utf-8") -> SourceText:
        if Path(name).name == "a.md":
            (docs / "b.md").unlink(missing_ok=True)  # b.md goes while a.md is being read
        return real(name, data, fmt, encoding)

    monkeypatch.setattr(sources, "read_source", read_then_delete)
    idx = str(tmp_path / "idx")
    assert main(["ingest", str(docs), "--tenant", "t", "--index-dir", idx, "--json"]) == 1  # a failed document
    out = capsys.readouterr().out
    assert '"sources": 2' in out and "b.md" in out and "no such file" in out
