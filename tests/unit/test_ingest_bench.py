"""``benchmarks/ingest_bench.py`` cannot rot: it runs end to end on a tiny model and a six-document corpus."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ingest_bench_runs_and_prints_its_table(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("ingest_bench", ROOT / "benchmarks" / "ingest_bench.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"_id": f"d{i}", "title": f"Title {i}", "text": "alpha beta gamma delta " * (5 + i)} for i in range(6)]
    corpus.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    args = ["--docs", "6", "--corpus", str(corpus), "--model", str(tiny_bi_encoder), "--device", "cpu"]
    out = bench.main([*args, "--workers", "0", "--latency-ms", "5", "--batch", "2"])
    printed = capsys.readouterr().out
    assert "6 documents -> " in printed and "SIMULATED bulk sink 5 ms/write" in printed
    assert "of raw" in printed and "speed-up" in printed
    assert out["ratio"] > 0 and out["sequential_s"] > 0 and out["pipelined_s"] > 0
