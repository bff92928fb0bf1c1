"""The README's demo on the real offline MiniLM model, and the wheel carrying the ES assets."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from es_rag.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_json_on_the_offline_minilm(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["demo", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) >= 6
    for r in results:
        tenant = r["case"]["tenant_id"]
        assert all(h["tenant_id"] == tenant for h in r["hits"])
        assert r["context"]["citations"] and r["context"]["tokens"] > 0
        # No model hub here: the default cross-encoder cannot load, and the shipped one reranks in its place, named
        # (a Japanese query keeps the fused order: the English model misfits it, and the trace says so)
        rerank_path = r["trace"]["paths"]["rerank"]
        if r["case"]["query"].isascii():
            assert rerank_path.startswith(
                "cross-encoder es-rag-reranker-en (shipped with es_rag, in place of "
                "cross-encoder/ms-marco-MiniLM-L6-v2, which cannot be loaded: "
            ), rerank_path
            assert all(isinstance(h["scores"]["rerank"], float) for h in r["hits"])
        else:
            assert rerank_path.startswith(
                "skipped: fused order kept (the cross-encoder es-rag-reranker-en misfits query language ja"
            ), rerank_path
            assert all(h["scores"]["rerank"] is None for h in r["hits"])
    by_query = {r["case"]["query"]: r for r in results}
    paraphrase = by_query["my laptop gets hot while syncing"]
    assert "acme-nimbus-performance" in {h["source_id"] for h in paraphrase["hits"]}


@pytest.mark.slow
def test_wheel_ships_the_assets(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("es_rag-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("index_templates", "ingest_pipelines"):
        for asset in (ROOT / folder).iterdir():
            assert f"es_rag/assets/{folder}/{asset.name}" in names
    assert "es_rag/templates/context.j2" in names
    assert "es_rag/data/sample/manifest.json" in names
    assert "es_rag/data/sample/golden.jsonl" in names  # es-rag demo scores it
    assert "es_rag/py.typed" in names
    assert "es_rag/models/reranker-en/model.onnx" in names  # the shipped cross-encoder
    assert "es_rag/models/reranker-en/tokenizer.json" in names
