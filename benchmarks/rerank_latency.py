"""What reranking adds to a search: the cross-encoder's time for ``--candidates`` passages of a real index (issue 42:
"Reranking 40 candidates adds at most 150 ms at p50 on these 2 cores").

Each query of a golden file is scored against ``--candidates`` chunks of the embedded index it was asked of (drawn
with a fixed seed: es_rag's chunks, with the header ``ranking_text`` gives them), through the product's
:class:`~es_rag.cross_encoder.model.CrossEncoderReranker` (``score``: tokenisation, windows, the forward passes). The
configurations run round-robin, one query at a time, so a load that comes and goes falls on all of them alike;
p50/p95 are per query. Usage::

    python benchmarks/rerank_latency.py --index-dir .es_rag/rag-en \
        --golden ../shared/eval/rag-en-train/golden.jsonl --queries 60 --max-lengths 256,192,128

A timing is only comparable to another of the same run: the machine's load is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from es_rag.cross_encoder.model import CrossEncoderReranker, ranking_text
    from es_rag.cross_encoder.shipped import SHIPPED_EN, shipped_path
    from es_rag.embedded.backend import EmbeddedBackend
    from es_rag.records import Hit

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index-dir", required=True, help="an embedded index (es-rag ingest --index-dir)")
    ap.add_argument("--golden", required=True, help="golden JSONL: its questions are the queries")
    ap.add_argument("--model", default=None, help="cross-encoder (default: the shipped English model)")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--candidates", type=int, default=40, help="passages per query (rerank_k)")
    ap.add_argument("--max-lengths", default="256", help="comma-separated pair token limits to compare")
    ap.add_argument("--long-text", default="windows", choices=("windows", "truncate"), help="rerank_long_text")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    backend = EmbeddedBackend(args.index_dir)
    chunks = [c for c in backend._children.values() if c.get("kind", "child") == "child"]
    questions = [json.loads(line)["question"] for line in Path(args.golden).read_text().splitlines() if line.strip()]
    rng = random.Random(args.seed)
    queries = rng.sample(questions, min(args.queries, len(questions)))
    fields = set(Hit.__dataclass_fields__)
    sets = []
    for _ in queries:
        picked = rng.sample(chunks, min(args.candidates, len(chunks)))
        hits = [Hit(**{k: v for k, v in c.items() if k in fields}) for c in picked]
        sets.append([ranking_text(h) for h in hits])
    model = args.model or str(shipped_path(SHIPPED_EN))
    rerankers = {}
    for raw in args.max_lengths.split(","):
        length = int(raw)
        rr = CrossEncoderReranker(model, max_length=length, backend="auto", long_text=args.long_text)
        rr.score(queries[0], sets[0][:2])  # load and warm up outside the timing
        rerankers[length] = rr
    times: dict[int, list[float]] = {n: [] for n in rerankers}
    for query, passages in zip(queries, sets, strict=True):
        for length, rr in rerankers.items():
            t0 = time.perf_counter()
            rr.score(query, passages)
            times[length].append((time.perf_counter() - t0) * 1000)
    load = os.getloadavg()[0]
    print(
        f"model {model}: {len(queries)} queries x {args.candidates} candidates, long_text {args.long_text}, "
        f"load average {load:.2f}"
    )
    print("| max_length | p50 ms | p95 ms | pairs/s |")
    print("|---|---|---|---|")
    for length, ms in times.items():
        p50 = statistics.median(ms)
        p95 = sorted(ms)[int(0.95 * (len(ms) - 1))]
        print(f"| {length} | {p50:.0f} | {p95:.0f} | {args.candidates / (p50 / 1000):.0f} |")


if __name__ == "__main__":
    main()
