"""Async vs threads: throughput and p95 latency of ``await RagClient.asearch`` against ``RagClient.search`` called from
a thread pool, at 1, 8 and 32 concurrent queries, measured side by side in one run.

    nice -n 10 .venv/bin/python benchmarks/async_bench.py                      # tiny models built on the fly
    nice -n 10 .venv/bin/python benchmarks/async_bench.py --queries 96 --latency-ms 20

Two scenarios, each with the same queries through both paths:

* ``embedded``: the embedded backend (BM25 + exact kNN in process) over the sample corpus, with a real
  sentence-transformers bi-encoder and cross-encoder (tiny ones made here unless ``--model`` / ``--rerank-model``
  name others). Threads: ``search`` from a pool of ``c`` threads. Async: ``c`` concurrent ``asearch`` coroutines on
  one event loop, model work and the in-process index in the client's executor (``--async-workers``).
* ``simulated``: Elasticsearch is the test suite's strict double behind a node that waits ``--latency-ms`` before
  every answer -- ``time.sleep`` under a synchronous ``Elasticsearch``, ``asyncio.sleep`` under an
  ``AsyncElasticsearch``. The latency is SIMULATED (no network, no cluster): the scenario shows how the two paths
  overlap waiting, not what a real cluster does.

Printed: queries per second and p95 latency of each path and the ratios async/threads (qps: > 1 = async faster;
p95: < 1 = async lower), and the process's CPU time per query. Each cell runs the two paths alternately
``--repeats`` times and keeps each path's best run, as other jobs on shared cores move wall times a lot. The rerank
result cache is off, so every query runs the cross-encoder. Nothing here is a
test; ``tests/e2e/test_async_bench.py`` runs it once, tiny, so it cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from es_rag import RagClient, Settings
from es_rag.wiring import SAMPLE_DIR

QUERIES = [
    "How do I reset the sync token?",
    "retention period for invoices",
    "escalate a P1 incident",
    "error code E1042",
    "device enrollment policy",
    "slow search performance troubleshooting",
    "Globex records retention",
    "what changed in the 2026 retention policy",
    "sync engine stops after password change",
    "who approves a legal hold",
    "wipe a lost laptop",
    "quota exceeded error",
]
TENANT = "acme"


@dataclass
class Run:
    """One path at one concurrency: queries per second, p95 latency, and the process's CPU time per query (all
    threads; unlike wall time it barely moves when other jobs share the cores)."""

    qps: float
    p95_ms: float
    cpu_ms: float


def _stats(latencies: Sequence[float], wall: float, cpu: float) -> Run:
    return Run(
        qps=len(latencies) / wall if wall > 0 else 0.0,
        p95_ms=float(np.percentile(latencies, 95)),
        cpu_ms=cpu * 1000.0 / len(latencies),
    )


def run_threads(search: Callable[[str], object], queries: Sequence[str], concurrency: int) -> Run:
    """``search`` over ``queries`` from ``concurrency`` threads."""

    def one(q: str) -> float:
        t0 = time.perf_counter()
        search(q)
        return (time.perf_counter() - t0) * 1000.0

    t0, c0 = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = list(pool.map(one, queries))
    return _stats(latencies, time.perf_counter() - t0, time.process_time() - c0)


def run_async(rag: RagClient, queries: Sequence[str], concurrency: int) -> Run:
    """``asearch`` over ``queries`` with at most ``concurrency`` in flight on one event loop."""

    async def main() -> Run:
        gate = asyncio.Semaphore(concurrency)

        async def one(q: str) -> float:
            async with gate:
                t0 = time.perf_counter()
                await rag.asearch(q, tenant=TENANT, acl="public")
                return (time.perf_counter() - t0) * 1000.0

        await rag.asearch(QUERIES[0], tenant=TENANT, acl="public")  # warm: models, probe
        t0, c0 = time.perf_counter(), time.process_time()
        latencies = await asyncio.gather(*(one(q) for q in queries))
        return _stats(latencies, time.perf_counter() - t0, time.process_time() - c0)

    return asyncio.run(main())


def settings_for(model: str, rerank_model: str | None, dims: int) -> Settings:
    return Settings(
        embedding_model=model, vector_dims=dims, rerank_model=rerank_model, rerank_cache_size=0, candidate_k=20,
        num_candidates=40, rerank_k=20, context_k=5,
    )  # fmt: skip


def embedded_clients(settings: Settings, workers: int, corpus: Path) -> tuple[RagClient, RagClient]:
    """One embedded index folder over ``corpus``, searched by two clients: one for the threads, one for async."""
    folder = Path(tempfile.mkdtemp(prefix="es-rag-async-bench-"))
    with RagClient.open(folder, settings) as writer:
        writer.ingest(corpus, tenant=TENANT, acl="public")
    return RagClient.open(folder, settings), RagClient.open(folder, settings, async_workers=workers)


def simulated_clients(settings: Settings, workers: int, latency_s: float, corpus: Path) -> tuple[RagClient, RagClient]:
    """The strict double behind a synchronous and an async client, each waiting ``latency_s`` per request."""
    from tests.support.double.client import strict_backend
    from tests.support.double.cluster import StrictCluster
    from tests.support.es_transport_async import AsyncFakeNode, SlowNode, async_client_on, sync_client_on

    cluster = StrictCluster()
    backend, _, _ = strict_backend(settings, cluster, setup=True)
    with RagClient.from_elasticsearch(backend.client, settings) as writer:
        writer.ingest(corpus, tenant=TENANT, acl="public")
    SlowNode.latency = latency_s
    AsyncFakeNode.latency = latency_s
    es, _ = sync_client_on(cluster)
    aes, _ = async_client_on(cluster)
    return RagClient.from_elasticsearch(es, settings), RagClient.from_elasticsearch(
        aes, settings, async_workers=workers
    )


def bench(
    name: str, clients: tuple[RagClient, RagClient], queries: list[str], levels: Sequence[int], repeats: int
) -> list[tuple[str, int, Run, Run]]:
    """Each level: threads and async alternately, ``repeats`` times; each path's best run (highest qps) is kept."""
    sync_rag, async_rag = clients
    sync_rag.search(QUERIES[0], tenant=TENANT, acl="public")  # warm: models, probe
    rows = []
    for c in levels:
        runs: tuple[list[Run], list[Run]] = ([], [])
        for _ in range(repeats):
            runs[0].append(run_threads(lambda q: sync_rag.search(q, tenant=TENANT, acl="public"), queries, c))
            runs[1].append(run_async(async_rag, queries, c))
        threads, aio = (max(r, key=lambda run: run.qps) for r in runs)
        rows.append((name, c, threads, aio))
        print(_row(name, c, threads, aio), flush=True)
    sync_rag.close()
    asyncio.run(async_rag.aclose())
    return rows


HEADER = (
    f"{'scenario':<22} {'conc':>4} {'threads qps':>11} {'async qps':>10} {'qps ratio':>9} "
    f"{'threads p95':>11} {'async p95':>10} {'p95 ratio':>9} {'threads cpu/q':>13} {'async cpu/q':>11}"
)


def _row(name: str, c: int, t: Run, a: Run) -> str:
    return (
        f"{name:<22} {c:>4} {t.qps:>11.1f} {a.qps:>10.1f} {a.qps / t.qps:>9.2f} "
        f"{t.p95_ms:>9.1f}ms {a.p95_ms:>8.1f}ms {a.p95_ms / t.p95_ms:>9.2f} {t.cpu_ms:>11.1f}ms {a.cpu_ms:>9.1f}ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--queries", type=int, default=64, help="queries per path and concurrency level")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32], help="concurrent queries")
    ap.add_argument("--repeats", type=int, default=2, help="alternating runs per cell; the best of each path is kept")
    ap.add_argument("--async-workers", type=int, default=4, help="RagClient(async_workers=...) of the async path")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="SIMULATED round trip of the simulated scenario")
    ap.add_argument("--model", help="embedding model (default: a tiny one made here)")
    ap.add_argument("--dims", type=int, default=32, help="its dimension")
    ap.add_argument("--rerank-model", help="cross-encoder (default: a tiny one made here)")
    ap.add_argument("--corpus", type=Path, default=SAMPLE_DIR, help="folder ingested (default: the sample corpus)")
    ap.add_argument("--scenario", choices=["embedded", "simulated", "both"], default="both")
    args = ap.parse_args(argv)

    model, rerank = args.model, args.rerank_model
    if model is None or rerank is None:
        from tests.support.models_factory import build_tiny_bi_encoder, build_tiny_cross_encoder

        tmp = Path(tempfile.mkdtemp(prefix="es-rag-async-bench-models-"))
        model = model or str(build_tiny_bi_encoder(tmp / "bi"))
        rerank = rerank or str(build_tiny_cross_encoder(tmp / "ce"))
    settings = settings_for(model, rerank, args.dims)
    queries = [QUERIES[i % len(QUERIES)] for i in range(args.queries)]
    print(
        f"{args.queries} queries per cell, best of {args.repeats} alternating runs; "
        f"async_workers={args.async_workers}; rerank cache off"
    )
    print(HEADER)
    if args.scenario in ("embedded", "both"):
        bench(
            "embedded",
            embedded_clients(settings, args.async_workers, args.corpus),
            queries,
            args.concurrency,
            args.repeats,
        )
    if args.scenario in ("simulated", "both"):
        name = f"simulated {args.latency_ms:g}ms rtt"
        clients = simulated_clients(settings, args.async_workers, args.latency_ms / 1000.0, args.corpus)
        bench(name, clients, queries, args.concurrency, args.repeats)
    print("qps ratio = async / threads (> 1: async faster); p95 ratio = async / threads (< 1: async lower)")
    print("cpu/q = the process's CPU time per query, all threads (what the cores spent; insensitive to other jobs)")
    print("simulated = the strict test double behind a node that sleeps per request; not a real cluster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
