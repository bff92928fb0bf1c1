"""One rule for tenant ids and group names (issue 43, item 7): whitespace around a name is refused, with the same
message on the CLI and in the API, at search and at ingest. Before, ``--acl ' finance'`` was stripped and matched
``finance`` while ``RagClient.search(acl=[" finance"])`` was not, and no path stripped tenants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_rag import RagClient
from es_rag.chunking.chunkers import StructureChunker
from es_rag.cli import main
from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.golden import load_golden
from es_rag.filters import SearchFilter
from es_rag.ingest.report import IngestReport
from es_rag.ingest.sources import load_files
from es_rag.principals import check_name, name_problem

REFUSED = "http://127.0.0.1:9"  # the check comes before any connection: a refused one proves it


@pytest.mark.parametrize("name", [" finance", "finance ", "\tfinance", "fin\n"])
def test_whitespace_around_a_name_is_refused(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None and "whitespace around it" in problem and repr(name.strip()) in problem
    with pytest.raises(ConfigError, match=r"^acl: "):
        check_name(name, "acl")


@pytest.mark.parametrize("name", ["finance", "fin ance", "財務", "a-b_c.d"])
def test_a_name_with_inner_spaces_or_any_script_is_kept(name: str) -> None:
    assert check_name(name, "acl") == name


def test_empty_and_non_string_names_are_refused() -> None:
    assert name_problem("") is not None and name_problem("  ") is not None and name_problem(3) is not None
    with pytest.raises(ConfigError, match="acl group: missing or empty"):
        SearchFilter("t", ("",))


def test_search_filter_refuses_both() -> None:
    with pytest.raises(ConfigError, match="acl group: ' finance' has whitespace around it"):
        SearchFilter("t", (" finance",))
    with pytest.raises(ConfigError, match="tenant_id: ' acme' has whitespace around it"):
        SearchFilter(" acme", ())


def test_cli_and_api_give_the_same_answer(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["search", "q", "--tenant", "t", "--acl", " finance", "--es", REFUSED])
    err = capsys.readouterr().err
    assert code == 2 and "' finance' has whitespace around it" in err, err
    code = main(["search", "q", "--tenant", "t", "--acl", "finance, hr", "--es", REFUSED])
    err = capsys.readouterr().err
    assert code == 2 and "' hr' has whitespace around it" in err and "write 'hr'" in err, err
    code = main(["search", "q", "--tenant", " acme", "--es", REFUSED])
    assert code == 2 and "' acme' has whitespace around it" in capsys.readouterr().err
    rag = RagClient.from_url(REFUSED)
    try:
        with pytest.raises(ConfigError, match="' finance' has whitespace around it"):
            rag.search("q", tenant="t", acl=[" finance"])
        with pytest.raises(ConfigError, match="' acme' has whitespace around it"):
            rag.search("q", tenant=" acme")
    finally:
        rag.close()


def test_ingest_refuses_them_naming_the_document(tmp_path: Path, minilm_tokenizer: Any) -> None:
    chunker = StructureChunker(minilm_tokenizer)
    with pytest.raises(InputError) as info:
        chunker.chunk("# A\n\ntext", source_id="a.md", source_version="1", tenant_id="acme ", acl=["public"])
    assert info.value.field == "tenant_id" and "whitespace around it" in str(info.value)
    with pytest.raises(InputError) as info:
        chunker.chunk("# A\n\ntext", source_id="a.md", source_version="1", tenant_id="acme", acl=[" hr"])
    assert info.value.field == "acl"
    lines = tmp_path / "docs.jsonl"
    lines.write_text(json.dumps({"id": "d1", "text": "hello", "acl": ["hr "]}) + "\n", encoding="utf-8")
    report = IngestReport()
    assert load_files([lines], tenant_id="acme", acl=("public",), report=report) == []
    assert len(report.failed) == 1 and "acl" in str(report.failed[0]) and "whitespace around it" in str(report.failed)


def test_golden_lines_are_held_to_it(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"question": "q?", "gold": ["a"], "groups": ["hr "]}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="groups"):
        load_golden(path)
