"""Metadata from the command line to every retriever (issue 19 items 1, 2 and 5; seed-audit rows 29, 53, 68, 110,
115): YAML front matter, JSONL fields and ``--meta`` at ingest; ``--filter`` and ``--as-of`` at search; dates for
freshness; the title, location and date of every context block.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from es_rag.cli import main
from es_rag.ingest import IngestReport, load_files
from es_rag.ingest.sources import read_front_matter
from es_rag.metadata import MetadataSchema
from tests.support.context import excerpts

POLICY_2025 = """---
title: Retention policy 2025
doc_type: policy
tags: [retention, eu-regulation]
valid_from: 2025-01-01
valid_to: 2026-02-28
layout: page
---
# Trash

Deleted files stay in the trash for 30 days.
"""
POLICY_2026 = """---
title: Retention policy 2026
type: policy
tags: retention
effective: 2026-03-01
supersedes: [policy-2025.md]
url: https://docs.example/retention
---
# Trash

Deleted files stay in the trash for 60 days.
"""
FAQ = "# Trash FAQ\n\nHow long do deleted files stay in the trash? See the policy.\n"


def test_front_matter_is_read_and_blanked_so_offsets_still_index_the_file() -> None:
    front = read_front_matter(POLICY_2025, document="p.md", schema=MetadataSchema())
    assert front.title == "Retention policy 2025"
    assert front.meta == {
        "doc_type": "policy",
        "tags": ["retention", "eu-regulation"],
        "valid_from": __import__("datetime").date(2025, 1, 1),
        "valid_to": __import__("datetime").date(2026, 2, 28),
    }
    assert front.ignored == ("layout",)
    assert len(front.text) == len(POLICY_2025)
    body = POLICY_2025.index("# Trash")
    assert front.text[body:] == POLICY_2025[body:] and front.text[:body].strip() == ""
    assert front.text.count("\n") == POLICY_2025.count("\n")


def test_bad_front_matter_and_jsonl_fields_name_the_document(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_text("---\ntitle: [unclosed\n---\n# A\n\nText.\n")
    (tmp_path / "rows.jsonl").write_text(
        json.dumps({"id": "a", "text": "Alpha.", "colour": "red"})
        + "\n"
        + json.dumps({"id": "b", "text": "Beta.", "meta": "policy"})
        + "\n"
        + json.dumps({"id": "c", "text": "Gamma.", "doc_type": "faq", "meta": {"tags": ["x"]}})
        + "\n"
    )
    report = IngestReport()
    docs = load_files([tmp_path], tenant_id="acme", acl=["public"], report=report)
    failed = {(Path(f["document"]).name, f["field"]) for f in report.failed}
    assert ("bad.md", "front_matter") in failed
    assert ("rows.jsonl:1", "colour") in failed and ("rows.jsonl:2", "meta") in failed
    assert [(d.source_id, dict(d.meta)) for d in docs] == [("c", {"tags": ["x"], "doc_type": "faq"})]


def test_meta_option_is_under_the_documents_own_values(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("---\ndoc_type: policy\n---\n# A\n\nText.\n")
    (tmp_path / "b.md").write_text("# B\n\nText.\n")
    os.utime(tmp_path / "b.md", (1_767_225_600, 1_767_225_600))  # 2026-01-01T00:00Z
    report = IngestReport()
    docs = load_files(
        [tmp_path],
        tenant_id="acme",
        acl=["public"],
        report=report,
        meta={"type": "faq", "region": "eu"},
        updated_from_mtime=True,
    )
    by_id = {d.source_id: dict(d.meta) for d in docs}
    assert by_id["a.md"]["doc_type"] == "policy" and "type" not in by_id["a.md"]
    assert by_id["a.md"]["region"] == "eu"
    assert by_id["b.md"] == {"type": "faq", "region": "eu", "updated": "2026-01-01"}


@pytest.fixture
def cli(tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        extra = ["--rerank-model", "none"] if argv[0] == "search" else []
        code = main([*argv, *idx, *model, *extra])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def _sources(out: str) -> list[str]:
    return [h["source_id"] for h in json.loads(out)["hits"]]


def test_ingest_and_search_with_metadata_filters_validity_and_supersedes(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "policy-2025.md").write_text(POLICY_2025)
    (docs / "policy-2026.md").write_text(POLICY_2026)
    (docs / "faq.md").write_text(FAQ)
    code, out, err = cli("ingest", str(docs), "--tenant", "acme", "--meta", "region=eu", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["failed"] == []
    assert any("layout" in w["reason"] for w in report["warnings"])
    q = ["search", "how long do deleted files stay in the trash", "--tenant", "acme", "--json"]
    # the 2025 policy is superseded (and expired): never served, whatever the date
    code, out, err = cli(*q)
    assert code == 0, err
    assert set(_sources(out)) == {"policy-2026.md", "faq.md"}
    assert set(_sources(cli(*q, "--as-of", "2025-06-01")[1])) == {"faq.md"}  # 2026 not yet valid, 2025 superseded
    assert _sources(cli(*q, "--filter", "doc_type=policy")[1]) == ["policy-2026.md"]
    assert set(_sources(cli(*q, "--filter", "doc_type!=policy")[1])) == {"faq.md"}
    assert _sources(cli(*q, "--filter", "effective>=2026-03", "--filter", "region=eu")[1]) == ["policy-2026.md"]
    assert _sources(cli(*q, "--filter", "region=us")[1]) == []
    # the context names title, location and date of each block
    result = json.loads(cli(*q, "--filter", "doc_type=policy")[1])
    header = excerpts(result["context"]["text"])[0].header
    assert 'title="Retention policy 2026"' in header
    assert 'url="https://docs.example/retention"' in header and "date=2026-03-01" in header
    assert "version" not in header  # the content digest stays internal
    code, _, err = cli(*q, "--filter", "colour=red")
    assert code != 0 and "unknown metadata field 'colour'" in err
