"""Bounded load on the Python layer: N concurrent searches on the embedded backend, no errors, the same
results as sequential runs; memory stays bounded over a long run; the rerank result cache is bounded."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from benchmarks.load_bench import build_pipeline, run_load
from es_rag.filters import SearchFilter
from tests.support.corpus import TENANTS, random_groups, random_query


def test_concurrent_searches_complete_without_errors_and_match_sequential_results() -> None:
    pipe, _corpus = build_pipeline(n_children=200, seed=11, cache_size=32)
    rng = random.Random(3)
    queries = [
        (random_query(rng, identifier=i % 3 == 0), SearchFilter(rng.choice(TENANTS), random_groups(rng)))
        for i in range(120)
    ]
    sequential = [[h.chunk_id for h in pipe.search(q, f).hits] for q, f in queries]
    stats = run_load(pipe, queries, workers=8)
    assert stats.errors == [] and stats.completed == len(queries)
    assert stats.results == sequential  # concurrency changes nothing
    assert stats.throughput_qps > 0 and 0 < stats.p50_ms <= stats.p95_ms <= stats.max_ms
    assert stats.p95_ms < 2000


@pytest.mark.slow
def test_memory_and_cache_stay_bounded_over_a_long_run() -> None:
    pipe, _ = build_pipeline(n_children=120, seed=12, cache_size=64)
    rng = random.Random(4)

    def batch(n: int) -> None:
        for i in range(n):
            q = f"{random_query(rng, identifier=i % 4 == 0)} q{rng.randrange(10**9)}"  # every query distinct
            pipe.search(q, SearchFilter(rng.choice(TENANTS), random_groups(rng)))

    batch(200)  # warm-up: caches, bm25 index, template compilation
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        batch(500)
        gc.collect()
        mid, _ = tracemalloc.get_traced_memory()
        batch(500)
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pipe.cache is not None and len(pipe.cache) == 64  # full, never beyond its bound
    assert pipe.cache.misses >= 1200 - 64
    # the second 500 searches add at most half of what the first added (no per-search leak), < 8 MiB
    assert mid - base < 8 * 2**20, (base, mid, end)
    assert end - mid < max(1 * 2**20, (mid - base) * 0.5), (base, mid, end)
