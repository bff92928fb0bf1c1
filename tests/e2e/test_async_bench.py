"""``benchmarks/async_bench.py`` runs end to end on a tiny configuration (so it cannot rot); nothing is timed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.async_bench import main


def test_the_async_benchmark_runs_both_scenarios_and_prints_the_ratios(
    tiny_bi_encoder: Path, tiny_cross_encoder: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "guide.md").write_text("# Sync\n\nReset the sync token from the settings page.\n", encoding="utf-8")
    (tmp_path / "policy.md").write_text("# Retention\n\nInvoices are kept for seven years.\n", encoding="utf-8")
    argv = [
        "--queries",
        "3",
        "--repeats",
        "1",
        "--concurrency",
        "1",
        "2",
        "--latency-ms",
        "1",
        "--corpus",
        str(tmp_path),
    ]
    assert main([*argv, "--model", str(tiny_bi_encoder), "--rerank-model", str(tiny_cross_encoder)]) == 0
    out = capsys.readouterr().out
    number, ms = r"\d+\.\d+", r"\d+\.\d+ms"
    cells = rf"\s+{number}\s+{number}\s+{number}\s+{ms}\s+{ms}\s+{number}\s+{ms}\s+{ms}$"
    rows = re.findall(rf"^(embedded|simulated 1ms rtt)\s+(\d+){cells}", out, re.MULTILINE)
    assert rows == [("embedded", "1"), ("embedded", "2"), ("simulated 1ms rtt", "1"), ("simulated 1ms rtt", "2")]
    assert "simulated = the strict test double" in out
