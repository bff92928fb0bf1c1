"""Bounded load test of the Python layer: N concurrent searches on the embedded backend.

    nice -n 10 .venv/bin/python benchmarks/load_bench.py --workers 8 --queries 2000 --chunks 2000

Builds a random multi-tenant corpus with tiny random vectors (no model: the cost measured is es_rag's
own -- BM25, exact kNN, fusion, dedup, rerank bookkeeping with a deterministic scorer, MMR, packing),
runs the queries through one shared :class:`~es_rag.pipeline.RagPipeline` from a ThreadPoolExecutor and
prints throughput, p50/p95/max latency, errors and the resident memory before and after.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.corpus import (
    DIMS,
    TENANTS,
    Corpus,
    OverlapReranker,
    RandomEmbedder,
    WordTokenizer,
    random_corpus,
    random_groups,
    random_query,
)


@dataclass
class LoadStats:
    """What one load run measured."""

    completed: int
    errors: list[str]
    wall_s: float
    latencies_ms: list[float]
    results: list[list[str]] = field(default_factory=list)

    @property
    def throughput_qps(self) -> float:
        return self.completed / self.wall_s if self.wall_s > 0 else 0.0

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else 0.0

    @property
    def p50_ms(self) -> float:
        return self.pct(50)

    @property
    def p95_ms(self) -> float:
        return self.pct(95)

    @property
    def max_ms(self) -> float:
        return max(self.latencies_ms, default=0.0)


def build_pipeline(*, n_children: int, seed: int, cache_size: int = 256) -> tuple[RagPipeline, Corpus]:
    """An embedded backend over a random corpus and a pipeline with a deterministic reranker."""
    corpus = random_corpus(random.Random(seed), n_children=n_children)
    corpus.hidden.clear()
    corpus.deleted.clear()
    backend = EmbeddedBackend(dims=DIMS)
    report = backend.index(corpus.children, corpus.parents)
    if report.failed:
        raise RuntimeError(f"corpus failed to index: {report.failed[:3]}")
    settings = Settings(
        vector_dims=DIMS,
        candidate_k=20,
        num_candidates=40,
        rerank_k=20,
        context_k=5,
        token_budget=600,
        rerank_cache_size=cache_size,
        expand_mode="parent",
    )
    pipe = RagPipeline(
        backend, embedder=RandomEmbedder(), settings=settings, tokenizer=WordTokenizer(), reranker=OverlapReranker()
    )
    pipe.search("warm up", SearchFilter(TENANTS[0]))  # builds the BM25 index once, before the threads start
    return pipe, corpus


def run_load(pipe: RagPipeline, queries: list[tuple[str, SearchFilter]], *, workers: int) -> LoadStats:
    """Run every query through ``pipe`` from ``workers`` threads; results keep the input order."""

    def one(item: tuple[str, SearchFilter]) -> tuple[float, list[str] | None, str | None]:
        q, f = item
        t0 = time.perf_counter()
        try:
            ids = [h.chunk_id for h in pipe.search(q, f).hits]
            return (time.perf_counter() - t0) * 1000.0, ids, None
        except Exception as exc:
            return (time.perf_counter() - t0) * 1000.0, None, f"{type(exc).__name__}: {exc}"

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        out: list[Any] = list(pool.map(one, queries))
    wall = time.perf_counter() - t0
    return LoadStats(
        completed=sum(1 for _, ids, _ in out if ids is not None),
        errors=[e for _, _, e in out if e is not None],
        wall_s=wall,
        latencies_ms=[ms for ms, _, _ in out],
        results=[ids or [] for _, ids, _ in out],
    )


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    pipe, corpus = build_pipeline(n_children=args.chunks, seed=args.seed)
    rng = random.Random(args.seed + 1)
    queries = [
        (random_query(rng, identifier=i % 3 == 0), SearchFilter(rng.choice(TENANTS), random_groups(rng)))
        for i in range(args.queries)
    ]
    rss0 = _rss_mib()
    stats = run_load(pipe, queries, workers=args.workers)
    print(f"corpus: {len(corpus.children)} children, {len(corpus.parents)} parents; workers={args.workers}")
    print(f"completed {stats.completed}/{len(queries)}  errors {len(stats.errors)}")
    print(
        f"throughput {stats.throughput_qps:.1f} q/s  p50 {stats.p50_ms:.1f} ms  p95 {stats.p95_ms:.1f} ms  "
        f"max {stats.max_ms:.1f} ms"
    )
    cache = pipe.cache
    print(f"max RSS {rss0:.0f} -> {_rss_mib():.0f} MiB; rerank cache {len(cache) if cache else 0} entries")
    for err in stats.errors[:5]:
        print("error:", err)
    return 1 if stats.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
