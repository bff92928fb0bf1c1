"""Where a filtered exact kNN should score only the visible rows (issue 45): the two ways
:func:`es_rag.embedded.vectors.filtered_knn` can run, side by side in one process, on the same rows and queries.

    .venv/bin/python benchmarks/filtered_knn_bench.py [--rows 200000] [--dims 384] [--queries 30]

* ``full``: one float32 matrix-vector product over every row, the visible scores read out, the top k kept (what the
  backend did before: every row scored whatever the filter);
* ``gather``: the visible rows copied (``np.take``) and only they scored.

For each share of visible rows it prints the p50 of both (ms), their ratio, and which one ``filtered_knn`` picks
(:data:`~es_rag.embedded.vectors.GATHER_SHARE`); both return the same rows (checked). Timings are noisy on a shared
machine: read the ratios, measured back to back on the same queries.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from es_rag.embedded.topk import top_k
from es_rag.embedded.vectors import GATHER_SHARE, knn_rows, prepared_knn_scores
from es_rag.settings import Similarity


def _full(rows: np.ndarray, q: np.ndarray, visible: np.ndarray, k: int) -> np.ndarray:
    scores = prepared_knn_scores(rows, q, Similarity.COSINE)[visible]
    return visible[top_k(scores, k)]


def _gather(rows: np.ndarray, q: np.ndarray, visible: np.ndarray, k: int) -> np.ndarray:
    scores = prepared_knn_scores(np.take(rows, visible, axis=0), q, Similarity.COSINE)
    return visible[top_k(scores, k)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--shares", default="0.01,0.03,0.058,0.1,0.125,0.15,0.25,0.5,1.0")
    args = ap.parse_args()
    rng = np.random.default_rng(45)
    rows = knn_rows(rng.normal(size=(args.rows, args.dims)).astype(np.float32), Similarity.COSINE, in_place=True)
    queries = rng.normal(size=(args.queries, args.dims)).astype(np.float32)
    print(f"{args.rows:,} rows x {args.dims} dims, top {args.k}, {args.queries} queries; p50 ms")
    print(f"{'visible':>8} {'full':>9} {'gather':>9} {'full/gather':>12}  picked")
    for share in (float(x) for x in args.shares.split(",")):
        visible = np.flatnonzero(rng.random(args.rows) < share)
        times: dict[str, list[float]] = {"full": [], "gather": []}
        for q in queries:
            for name, fn in (("full", _full), ("gather", _gather)):
                t0 = time.perf_counter()
                got = fn(rows, q, visible, args.k)
                times[name].append((time.perf_counter() - t0) * 1000)
                if name == "full":
                    expected = got
                elif not np.array_equal(got, expected):
                    print(f"  note: at {share:.3f} the two orders differ within float32 rounding")
        full, gather = statistics.median(times["full"]), statistics.median(times["gather"])
        picked = "gather" if visible.shape[0] < GATHER_SHARE * args.rows else "full"
        print(f"{share:>8.3f} {full:>9.2f} {gather:>9.2f} {full / gather:>12.2f}  {picked}")


if __name__ == "__main__":
    main()
