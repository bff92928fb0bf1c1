"""Growth curve of the embedded backend: filter mask, kNN and hybrid query latency, build time and memory.

    nice -n 10 .venv/bin/python benchmarks/embedded_growth_bench.py --sizes 10000,100000,1000000

Each size runs in a fresh subprocess (so its resident memory is its own) and builds a synthetic index through the
public write API, ``EmbeddedBackend.index`` (validation, content hash, vector checks, as an ingest does; no model:
the vectors are random 384-dim float32), then one warm-up search (``_refresh``: the vector matrix, the filter
columns and the BM25 index of title, heading_path and text). The corpus: 4 tenants, 8 ACL groups (each chunk holds
1-2 of them, a fifth also ``public``), one source per 20 chunks with versions v1/v2, 2% of the (source, version)
pairs of each tenant hidden in the registry (``version_store().begin``), 24-word texts over a Zipf vocabulary of
20,000 words. Above ``--bm25-max`` chunks the index is built without BM25 fields (``bm25_fields=()``) and only the
kNN channel is measured.

Queries: a random tenant, 0-2 groups, a third of them also a ``source_id`` metadata filter (5 sources), the tenant's
registry snapshot; kNN = ``backend.knn`` top 50, hybrid = ``backend.retrieve`` (BM25 + kNN; the words hold no
identifier, so the exact channel does not run) and client-side RRF. The mask and both query kinds are timed on the same
queries with the filter columns (now) and with the per-chunk ``SearchFilter.matches`` mask the backend used before
(:func:`old_mask`, kept here as the reference), back to back; every mask and every result list is checked identical.
"kNN scoring" times :func:`~es_rag.embedded.backend.knn_scores` alone over the whole matrix: the floor of a kNN
query.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from es_rag.embedded.backend import EmbeddedBackend, knn_scores
from es_rag.filters import SearchFilter
from es_rag.records import Chunk
from es_rag.settings import Settings
from es_rag.stages.fusion import fuse_channels

DIMS = 384
TENANTS = tuple(f"tenant{i}" for i in range(4))
GROUPS = tuple(f"group{i}" for i in range(8))
VOCAB = 20_000
WORDS_PER_CHUNK = 24
BATCH = 50_000


def old_mask(backend: EmbeddedBackend, flt: SearchFilter) -> np.ndarray:
    """The mask as the backend built it before the filter columns: ``SearchFilter.matches`` on every chunk."""
    children = backend._children
    return np.fromiter((flt.matches(children[c]) for c in backend._ids), dtype=bool, count=len(backend._ids))


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _word(i: int) -> str:
    """The ``i``-th vocabulary word: letters only (a word with digits would be an identifier for the exact channel,
    which this benchmark leaves out)."""
    i += 26 * 26
    out = ""
    while i:
        out = chr(97 + i % 26) + out
        i //= 26
    return out


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` word ids, Zipf-distributed over the vocabulary."""
    return (rng.zipf(1.2, n) - 1) % VOCAB


def build(n: int, seed: int, *, bm25: bool) -> tuple[EmbeddedBackend, dict[str, float]]:
    """A synthetic embedded index of ``n`` chunks written through ``EmbeddedBackend.index``, refreshed."""
    rng = np.random.default_rng(seed)
    vocab = [_word(i) for i in range(VOCAB)]
    n_sources = max(n // 20, 1)
    tenant = rng.integers(0, len(TENANTS), n)
    source = rng.integers(0, n_sources, n)
    version = rng.integers(1, 3, n)
    n_groups = rng.integers(1, 3, n)
    group_a = rng.integers(0, len(GROUPS), n)
    group_b = rng.integers(0, len(GROUPS), n)
    public = rng.random(n) < 0.2
    words = _words(rng, n * WORDS_PER_CHUNK).reshape(n, WORDS_PER_CHUNK)
    backend = EmbeddedBackend(dims=DIMS, bm25_fields=None if bm25 else ())
    t0 = time.perf_counter()
    rss0 = _rss_mib()
    for start in range(0, n, BATCH):
        stop = min(start + BATCH, n)
        vectors = rng.standard_normal((stop - start, DIMS), dtype=np.float32)
        chunks = []
        for i in range(start, stop):
            acl = [GROUPS[group_a[i]]] + ([GROUPS[group_b[i]]] if n_groups[i] == 2 else [])
            if public[i]:
                acl.append("public")
            text = " ".join(vocab[w] for w in words[i])
            chunks.append(
                Chunk(
                    chunk_id=f"c{i}",
                    source_id=f"s{source[i]}",
                    source_version=f"v{version[i]}",
                    parent_id=None,
                    heading_path=("Guide", f"Section {source[i] % 50}"),
                    start_offset=0,
                    end_offset=len(text),
                    chunker_version="bench",
                    tenant_id=TENANTS[tenant[i]],
                    acl=tuple(acl),
                    title=" ".join(vocab[w] for w in words[i][:3]),
                    text=text,
                    token_count=WORDS_PER_CHUNK,
                    vector=vectors[i - start],
                    embedding_version="random-384",
                )
            )
        report = backend.index(chunks)
        if report.failed:
            raise RuntimeError(f"synthetic chunks refused: {report.failed[:3]}")
    ingest_s = time.perf_counter() - t0
    store = backend.version_store()
    pairs = sorted({(f"s{s}", f"v{v}") for s, v in zip(source.tolist(), version.tolist(), strict=True)})
    pick = random.Random(seed)
    for t in TENANTS:
        store.begin(t, pick.sample(pairs, max(1, len(pairs) // 50)))
    t1 = time.perf_counter()
    backend.knn(np.ones(DIMS, np.float32), SearchFilter(TENANTS[0]), 1)  # _refresh: matrix, columns, BM25
    refresh_s = time.perf_counter() - t1
    bm25_bytes = sum(
        int(arr.nbytes) for model in backend._bm25.values() for arr in model.scores.values() if hasattr(arr, "nbytes")
    )
    sizes = {
        "ingest_s": ingest_s,
        "refresh_s": refresh_s,
        "rss_delta_mib": _rss_mib() - rss0,
        "matrix_mib": backend._matrix.nbytes / 2**20,
        "vectors_mib": sum(v.nbytes for v in backend._vectors.values()) / 2**20,
        "columns_mib": backend._columns.nbytes / 2**20,
        "bm25_mib": bm25_bytes / 2**20,
    }
    return backend, sizes


def _queries(n_queries: int, n_chunks: int, seed: int) -> list[tuple[str, np.ndarray, SearchFilter]]:
    rng = np.random.default_rng(seed + 1)
    n_sources = max(n_chunks // 20, 1)
    out = []
    for i in range(n_queries):
        groups = tuple(str(g) for g in rng.choice(GROUPS, size=int(rng.integers(0, 3)), replace=False))
        metadata = {"source_id": tuple(f"s{s}" for s in rng.integers(0, n_sources, 5))} if i % 3 == 2 else {}
        flt = SearchFilter(str(rng.choice(TENANTS)), groups, metadata=metadata)
        text = " ".join(_word(int(w)) for w in _words(rng, 3))
        out.append((text, rng.standard_normal(DIMS).astype(np.float32), flt))
    return out


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return (time.perf_counter() - t0) * 1000.0, result


def _pcts(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def measure(n: int, *, queries: int, old_queries: int, seed: int, bm25_max: int) -> dict[str, Any]:
    """Build one size and time the mask, kNN and hybrid queries with the columns and with the old mask.

    The first ``old_queries`` queries run with both masks back to back (order alternating per query, so drift and
    the neighbours' load hit both alike): the old -> new medians are over these same queries. The p95 of the
    columns path is over all ``queries``.
    """
    rss_start = _rss_mib()
    backend, row = build(n, seed, bm25=n <= bm25_max)
    settings = Settings(vector_dims=DIMS, candidate_k=50, num_candidates=100)
    qs = [(text, vec, backend.snapshot_versions(flt)) for text, vec, flt in _queries(queries, n, seed)]
    # The first query filtering on source_id builds its column (once per index state): timed apart.
    row["source_id_column_ms"], _ = _timed(lambda: backend._columns.keyword("source_id"))
    hybrid = bool(backend._bm25)

    def hybrid_query(text: str, vec: np.ndarray, flt: SearchFilter) -> list[str]:
        ret = backend.retrieve(text, vec, flt, settings)
        return [h.chunk_id for h in fuse_channels(ret.channels, settings)]

    def knn_query(text: str, vec: np.ndarray, flt: SearchFilter) -> list[str]:
        return [h.chunk_id for h in backend.knn(vec, flt, 50)]

    kinds: dict[str, Callable[[str, np.ndarray, SearchFilter], Any]] = {
        "mask": lambda text, vec, flt: backend._mask(flt),
        "knn": knn_query,
    }
    if hybrid:
        kinds["hyb"] = hybrid_query
    times: dict[tuple[str, str], list[float]] = {(k, m): [] for k in kinds for m in ("old", "new")}
    selectivity = []
    for i, (text, vec, flt) in enumerate(qs):
        for kind, fn in kinds.items():
            modes = ("new",) if i >= old_queries else ("new", "old") if i % 2 == 0 else ("old", "new")
            results = {}
            for mode in modes:
                if mode == "old":
                    backend._mask = lambda f: old_mask(backend, f)  # type: ignore[method-assign]
                try:
                    ms, results[mode] = _timed(lambda fn=fn, t=text, v=vec, f=flt: fn(t, v, f))
                finally:
                    if mode == "old":
                        del backend._mask
                times[kind, mode].append(ms)
            if "old" in results:
                same = (
                    np.array_equal(results["old"], results["new"])
                    if kind == "mask"
                    else results["old"] == results["new"]
                )
                assert same, f"{kind}: the per-chunk mask and the columns disagree on query {i}"
            if kind == "mask":
                selectivity.append(float(results["new"].mean()))
    scoring = [_timed(lambda v=vec: knn_scores(backend._matrix, v, backend.similarity))[0] for _, vec, _ in qs]
    row["n"] = n
    row["selectivity"] = float(np.mean(selectivity))
    row["scoring_p50"], _ = _pcts(scoring)
    for kind in kinds:
        old, new = times[kind, "old"], times[kind, "new"]
        row[f"{kind}_old_p50"], _ = _pcts(old)
        row[f"{kind}_new_p50"], _ = _pcts(new[: len(old)])  # the same queries as the old median
        _, row[f"{kind}_new_p95"] = _pcts(new)
        row[f"{kind}_ratio"] = float(np.median(np.asarray(old) / np.asarray(new[: len(old)])))
    row["rss_total_mib"] = _rss_mib() - rss_start
    row["peak_rss_mib"] = _peak_mib()
    return row


def _fmt(row: dict[str, Any], key: str, digits: int = 1) -> str:
    return f"{row[key]:,.{digits}f}" if key in row else "n/a"


def table(rows: list[dict[str, Any]]) -> str:
    """The two markdown tables: latency, then build and memory."""
    lines = [
        "| chunks | visible | mask p50 ms old -> new | mask speed-up | kNN scoring p50 ms | kNN p50 ms old -> new | "
        "kNN speed-up | kNN new p95 ms | hybrid p50 ms old -> new | hybrid speed-up | hybrid new p95 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [f"{r['n']:,}", f"{100 * r['selectivity']:.1f}%"]
        for kind in ("mask", "knn", "hyb"):
            digits = 2 if kind == "mask" else 1
            if f"{kind}_old_p50" not in r:
                cells += ["BM25 not built", "", ""]
                continue
            cells.append(f"{_fmt(r, f'{kind}_old_p50')} -> {_fmt(r, f'{kind}_new_p50', digits)}")
            cells.append(f"{r[f'{kind}_ratio']:,.{0 if kind == 'mask' else 1}f}x")
            if kind == "mask":
                cells.append(_fmt(r, "scoring_p50"))
            else:
                cells.append(_fmt(r, f"{kind}_new_p95"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| chunks | ingest s | refresh s | source_id column ms | RSS after build MiB | peak RSS MiB | "
        "matrix MiB | per-chunk vectors MiB | filter columns MiB | BM25 matrices MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {_fmt(r, 'ingest_s')} | {_fmt(r, 'refresh_s')} | {_fmt(r, 'source_id_column_ms')} | "
            f"{_fmt(r, 'rss_delta_mib', 0)} | {_fmt(r, 'peak_rss_mib', 0)} | {_fmt(r, 'matrix_mib', 0)} | "
            f"{_fmt(r, 'vectors_mib', 0)} | {_fmt(r, 'columns_mib')} | {_fmt(r, 'bm25_mib')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated chunk counts")
    ap.add_argument("--queries", type=int, default=30, help="queries timed per size with the filter columns")
    ap.add_argument("--old-queries", type=int, default=10, help="of those, timed again with the per-chunk mask")
    ap.add_argument("--bm25-max", type=int, default=1_000_000, help="largest size with a BM25 index (hybrid)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    args = ap.parse_args(argv)
    if args.one is not None:
        row = measure(
            args.one, queries=args.queries, old_queries=args.old_queries, seed=args.seed, bm25_max=args.bm25_max
        )
        print(json.dumps(row))
        return 0
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(n), "--queries", str(args.queries)]
        cmd += ["--old-queries", str(args.old_queries), "--bm25-max", str(args.bm25_max), "--seed", str(args.seed)]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"{n:,} chunks measured in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
