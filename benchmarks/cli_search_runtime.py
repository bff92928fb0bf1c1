"""Cold ``es-rag search`` with the query embedded by torch, by the ONNX export, and answered by ``es-rag serve``, side
by side (issue 46).

    python benchmarks/cli_search_runtime.py --index-dir .es_rag/rag-en --tenant t \\
        --golden ../shared/eval/rag-en-train/golden.jsonl --queries 10 --serve

Each question runs in a fresh process (``--json``) with ``--query-runtime torch`` and with ``--query-runtime auto``
(both with ``ES_RAG_NO_SERVER=1``), alternating so both meet the same load, and with ``--serve`` a third time while an
``es-rag serve`` of the index runs (started here, stopped at the end): wall seconds per process, the trace's stage
times, and whether each gave the hits (chunk ids, in order) and the packed context of torch. The ONNX export must
exist (``es-rag ingest`` writes it, or one search with ``--query-runtime onnx``). Extra ``es-rag search`` flags go
after ``--`` (e.g. ``-- --rerank-model none``). Timings on these machines are noisy; compare the columns of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STAGES = ("embed_query", "retrieve", "rerank", "pack")


def run(question: str, runtime: str, args: argparse.Namespace, extra: list[str]) -> tuple[float, dict[str, Any]]:
    served = runtime == "served"
    cmd = [sys.executable, "-m", "es_rag.cli", "search", question, "--tenant", args.tenant, "--json"]
    cmd += ["--index-dir", args.index_dir, "--query-runtime", "auto" if served else runtime, *extra]
    env = {**os.environ, "ES_RAG_NO_SERVER": "0" if served else "1"}
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
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
    ap.add_argument("--serve", action="store_true", help="also time the searches es-rag serve answers")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    questions = []
    for line in args.golden.read_text(encoding="utf-8").splitlines():
        if line.strip():
            questions.append(json.loads(line)["question"].strip())
        if len(questions) == args.queries:
            break
    runtimes = ("torch", "auto", "served") if args.serve else ("torch", "auto")
    walls: dict[str, list[float]] = {r: [] for r in runtimes}
    stages: dict[str, dict[str, list[float]]] = {r: {} for r in runtimes}
    same_hits = same_context = 0
    used = set()
    server = start_server(args) if args.serve else None
    try:
        for i, question in enumerate(questions):
            same = ask(i, question, runtimes, args, extra, walls, stages, used)
            same_hits += same[0]
            same_context += same[1]
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)
    n = len(questions)
    p50 = {r: statistics.median(w) for r, w in walls.items()}
    print(f"\nquestions: {n}; --query-runtime auto ran on: {', '.join(sorted(used))}")
    print(f"| runtime | cold search p50 (s) | {' | '.join(f'{s} p50 (ms)' for s in STAGES)} |")
    print("|---|---|" + "---|" * len(STAGES))
    for runtime in runtimes:
        cells = [f"{statistics.median(stages[runtime].get(s, [0.0])):.0f}" for s in STAGES]
        print(f"| {runtime} | {p50[runtime]:.2f} | {' | '.join(cells)} |")
    ratios = ", ".join(f"{r}/torch {p50[r] / p50['torch']:.2f}" for r in runtimes[1:])
    print(f"\nratios: {ratios}; the same hits as torch {same_hits}/{n * (len(runtimes) - 1)}, context {same_context}")
    return 0 if same_hits == same_context == n * (len(runtimes) - 1) else 1


def start_server(args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "es_rag.cli", "serve", "--index-dir", args.index_dir]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None
    line = server.stdout.readline()  # "es-rag serve: answering the searches of ..." once it listens
    if "answering" not in line:
        server.terminate()
        raise SystemExit(f"es-rag serve did not start: {line!r}")
    return server


def ask(
    i: int,
    question: str,
    runtimes: tuple[str, ...],
    args: argparse.Namespace,
    extra: list[str],
    walls: dict[str, list[float]],
    stages: dict[str, dict[str, list[float]]],
    used: set[str],
) -> tuple[int, int]:
    """One question with every runtime; how many of the others gave torch's hits, and torch's context."""
    results = {}
    for runtime in runtimes if i % 2 == 0 else tuple(reversed(runtimes)):
        wall, result = run(question, runtime, args, extra)
        walls[runtime].append(wall)
        results[runtime] = result
        for name, ms in stage_ms(result).items():
            stages[runtime].setdefault(name, []).append(ms)
    embed = next(s for s in results["auto"]["trace"]["stages"] if s["name"] == "embed_query")
    used.add(str(embed.get("info", {}).get("runtime", "torch")).split(" ")[0])
    ids = {r: [h["chunk_id"] for h in results[r]["hits"]] for r in results}
    hits = sum(ids[r] == ids["torch"] for r in runtimes[1:])
    context = sum(results[r].get("context") == results["torch"].get("context") for r in runtimes[1:])
    times = "  ".join(f"{r} {walls[r][-1]:5.2f} s" for r in runtimes)
    print(f"{i + 1:3d}  {times}  same hits: {hits}/{len(runtimes) - 1}", flush=True)
    return hits, context


if __name__ == "__main__":
    raise SystemExit(main())
