"""Cold ``es-rag search`` with the query embedded by torch and by the ONNX export, side by side (issue 46).

    python benchmarks/cli_search_runtime.py --index-dir .es_rag/rag-en --tenant t \\
        --golden ../shared/eval/rag-en-train/golden.jsonl --queries 10

Each question runs twice, each time in a fresh process (``--json``), alternating ``--query-runtime torch`` and
``--query-runtime auto`` so both meet the same load: wall seconds per process, the trace's stage times, and whether
both gave the same hits (chunk ids, in order) and the same packed context. The ONNX export must exist (``es-rag
ingest`` writes it, or one search with ``--query-runtime onnx``). Extra ``es-rag search`` flags go after ``--``
(e.g. ``-- --rerank-model none``). Timings on these machines are noisy; compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STAGES = ("embed_query", "retrieve", "rerank", "pack")


def run(question: str, runtime: str, args: argparse.Namespace, extra: list[str]) -> tuple[float, dict[str, Any]]:
    cmd = [sys.executable, "-m", "es_rag.cli", "search", question, "--tenant", args.tenant, "--json"]
    cmd += ["--index-dir", args.index_dir, "--query-runtime", runtime, *extra]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return wall, json.loads(out.stdout)


def stage_ms(result: dict[str, Any]) -> dict[str, float]:
    return {s["name"]: float(s.get("ms") or 0.0) for s in result.get("trace", {}).get("stages", [])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--tenant", required=True)
    ap.add_argument("--golden", required=True, type=Path)
    ap.add_argument("--queries", type=int, default=10)
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    questions = []
    for line in args.golden.read_text(encoding="utf-8").splitlines():
        if line.strip():
            questions.append(json.loads(line)["question"].strip())
        if len(questions) == args.queries:
            break
    walls: dict[str, list[float]] = {"torch": [], "auto": []}
    stages: dict[str, dict[str, list[float]]] = {"torch": {}, "auto": {}}
    same_hits = same_context = 0
    used = set()
    for i, question in enumerate(questions):
        results = {}
        order = ("torch", "auto") if i % 2 == 0 else ("auto", "torch")
        for runtime in order:
            wall, result = run(question, runtime, args, extra)
            walls[runtime].append(wall)
            results[runtime] = result
            for name, ms in stage_ms(result).items():
                stages[runtime].setdefault(name, []).append(ms)
        embed = next(s for s in results["auto"]["trace"]["stages"] if s["name"] == "embed_query")
        used.add(str(embed.get("info", {}).get("runtime", "torch")).split(" ")[0])
        ids = {r: [h["chunk_id"] for h in results[r]["hits"]] for r in results}
        same_hits += ids["torch"] == ids["auto"]
        same_context += results["torch"].get("context") == results["auto"].get("context")
        print(
            f"{i + 1:3d}  torch {walls['torch'][-1]:5.2f} s  auto {walls['auto'][-1]:5.2f} s  same hits: "
            f"{ids['torch'] == ids['auto']}",
            flush=True,
        )
    n = len(questions)
    p50 = {r: statistics.median(w) for r, w in walls.items()}
    print(f"\nquestions: {n}; --query-runtime auto ran on: {', '.join(sorted(used))}")
    print(f"| runtime | cold search p50 (s) | {' | '.join(f'{s} p50 (ms)' for s in STAGES)} |")
    print("|---|---|" + "---|" * len(STAGES))
    for runtime in ("torch", "auto"):
        cells = [f"{statistics.median(stages[runtime].get(s, [0.0])):.0f}" for s in STAGES]
        print(f"| {runtime} | {p50[runtime]:.2f} | {' | '.join(cells)} |")
    ratio = p50["auto"] / p50["torch"]
    print(f"\nratio auto/torch: {ratio:.2f}; same hits {same_hits}/{n}, same context {same_context}/{n}")
    return 0 if same_hits == n and same_context == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
