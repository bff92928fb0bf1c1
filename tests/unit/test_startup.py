"""Commands that need no model start fast (issue 13): they never import torch, transformers or
sentence-transformers (5-10 s), checked in a fresh interpreter per command. Start-up times, as ratios to
``python -c pass``, are measured by ``benchmarks/startup_bench.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.startup import run_command

MODEL_FREE = [
    ["--help"],
    ["search", "--help"],
    ["ingest", "--help"],
    ["setup", "--dry-run"],
    ["explain", "password reset", "--tenant", "acme", "--no-vector"],
    ["delete-source", "a.md", "--tenant", "acme", "--index-dir", "{idx}"],
    ["doctor"],
    ["search", "", "--tenant", "acme"],  # argument errors
    ["search", "q", "--tenant", "acme", "--bogus-flag"],
    ["ingest", "{empty}", "--tenant", "acme"],  # nothing to ingest
    ["search", "q", "--tenant", "acme", "--es", "localhost:9200"],
]


@pytest.mark.parametrize("argv", MODEL_FREE, ids=lambda a: " ".join(a)[:40])
def test_model_free_commands_never_import_a_model_library(argv: list[str], tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / "meta.json").write_text('{"format": 1, "dims": 4, "similarity": "cosine", "chunks": 0, "parents": 0}')
    for name in ("chunks.jsonl", "parents.jsonl"):
        (idx / name).write_text("")
    (tmp_path / "empty").mkdir()
    argv = [a.replace("{idx}", str(idx)).replace("{empty}", str(tmp_path / "empty")) for a in argv]
    result = run_command(argv, cwd=str(tmp_path))
    assert result["heavy"] == [] or set(result["heavy"]) <= {"bm25s"}, result  # type: ignore[arg-type]
    assert not {"torch", "transformers", "sentence_transformers"} & set(result["heavy"])  # type: ignore[arg-type]


def test_doctor_locates_models_without_loading_and_loads_them_on_request(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from es_rag.cli import main

    argv = ["doctor", "--json", "--embedding-model", str(tiny_bi_encoder), "--rerank-model", "nobody/no-such-model"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["embedding_model"]["source"] == f"local folder {tiny_bi_encoder}"
    assert report["embedding_model"]["status"].startswith("not loaded")
    assert report["reranker"]["source"].startswith("model hub")
    assert main([*argv, "--load-models"]) == 0
    loaded = json.loads(capsys.readouterr().out)
    assert loaded["embedding_model"]["status"] == "ok" and loaded["embedding_model"]["dims"] == 32
    assert loaded["reranker"]["status"].startswith("unavailable -> fused order fallback")
