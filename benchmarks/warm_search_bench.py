"""Warm API searches (issue 31's aim: p50 under 100 ms) and the torch thread count of query embedding, quiet and under
load, side by side in one run.

    nice -n 10 .venv/bin/python benchmarks/warm_search_bench.py --chunks 10000 --queries 40

Builds the synthetic index of ``benchmarks/cold_search_bench.py`` (``--chunks`` chunks, 4 tenants), opens it with
``RagClient.open`` once, and times ``rag.search`` for ``--queries`` different queries after two warm-up searches:

- ``search, no rerank``: ``rerank_model="none"`` (retrieval, fusion, selection, packing);
- ``search, default``: the default settings, the cross-encoder reranking ``rerank_k`` candidates (where the default
  cross-encoder cannot load -- no model hub, no local copy -- the search falls back to the fused order, and the row
  says so).

Then one query's embedding (``embed_query``) at each torch thread count from 1 to the machine's cores, first on a quiet
machine, then with one busy process per core beside it (what a loaded CI machine or a busy app server does to it):
issue 31 saw 1 s per query embedding under load with the default threads against 90 ms with one thread.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _spin(stop: float) -> None:
    while time.time() < stop:
        pass


def _p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    import torch
    from cold_search_bench import build

    from es_rag import RagClient

    queries = [f"w{i} w{i * 7 % 500} w{i * 13 % 2000}" for i in range(1, args.queries + 1)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="warm-bench-") as tmp:
        folder = Path(tmp) / "idx"
        build(folder, args.chunks, prepare=True)
        for name, overrides in (("search, no rerank", {"rerank_model": "none"}), ("search, default", {})):
            with RagClient.open(folder, **overrides) as rag:
                for q in queries[:2]:
                    warm = rag.search(q, tenant="t1", acl="public")
                took = []
                for q in queries:
                    t0 = time.perf_counter()
                    rag.search(q, tenant="t1", acl="public")
                    took.append(time.perf_counter() - t0)
            rerank = next(st for st in warm.to_dict()["trace"]["stages"] if st["name"] == "rerank")["info"]
            if overrides or rerank.get("reranked"):
                rows.append((name, _p50(took), max(took) * 1000))
            else:
                rows.append((name + " (reranker not installed: fell back)", _p50(took), max(took) * 1000))
        with RagClient.open(folder) as rag:
            embedder = rag._loaded_embedder()
    print(f"{args.chunks} chunks, {args.queries} queries, torch {torch.__version__}, {os.cpu_count()} cores")
    print(f"{'':52} {'p50 ms':>8} {'max ms':>8}")
    for name, p50, worst in rows:
        print(f"{name:52} {p50:8.1f} {worst:8.1f}")
    default_threads = torch.get_num_threads()
    cores = os.cpu_count() or 1
    print(f"\nembed_query p50 ms by torch threads (default here: {default_threads})")
    print(f"{'threads':>8} {'quiet':>8} {'loaded':>8}")
    for threads in range(1, cores + 1):
        torch.set_num_threads(threads)
        quiet = []
        for q in queries:
            t0 = time.perf_counter()
            embedder.embed_query(q)
            quiet.append(time.perf_counter() - t0)
        busy = [multiprocessing.Process(target=_spin, args=(time.time() + 60,)) for _ in range(cores)]
        for p in busy:
            p.start()
        loaded = []
        try:
            for q in queries:
                t0 = time.perf_counter()
                embedder.embed_query(q)
                loaded.append(time.perf_counter() - t0)
        finally:
            for p in busy:
                p.terminate()
                p.join()
        print(f"{threads:8d} {_p50(quiet):8.1f} {_p50(loaded):8.1f}")
    torch.set_num_threads(default_threads)


if __name__ == "__main__":
    main()
