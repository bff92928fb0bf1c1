"""Save and open of a whole embedded index: the manifest commit (:mod:`es_rag.embedded.store`) beside SQLite in WAL
mode, the transactional alternative issue 33 names, measured side by side in one run.

    nice -n 10 .venv/bin/python benchmarks/store_bench.py --chunks 20000 --dims 384

Both hold the same documents (JSON chunk and parent documents as ingest writes them, 24 words of text each) and the
same float32 vectors. The SQLite layout is one table per kind (chunk_id, JSON document, vector blob), written in one
transaction with ``synchronous=FULL`` (durable as the manifest commit's fsyncs are) and read back whole, as the
embedded backend loads its index at open. Printed: seconds per save and per open, the ratio SQLite / manifest, and
the bytes on disk. Timings are noisy on a loaded machine; the ratios of one run are what to compare.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from es_rag.embedded import store


def corpus(n: int, dims: int) -> tuple[list[dict[str, Any]], np.ndarray, list[dict[str, Any]]]:
    rng = random.Random(7)
    words = [f"w{i}" for i in range(20000)]
    docs = []
    for i in range(n):
        docs.append(
            {
                "chunk_id": f"c{i}",
                "source_id": f"s{i // 20}",
                "source_version": "v1",
                "tenant_id": f"t{i % 4}",
                "acl": ["public"],
                "heading_path": ["Guide", f"Part {i % 7}"],
                "text": " ".join(rng.choice(words) for _ in range(24)),
                "start_offset": i * 100,
                "end_offset": i * 100 + 99,
            }
        )
    parents = [{"chunk_id": f"p{i}", "source_id": f"s{i}", "text": "parent " * 200} for i in range(n // 20)]
    vectors = np.random.default_rng(7).standard_normal((n, dims)).astype(np.float32)
    return docs, vectors, parents


def save_manifest(folder: Path, docs: list[dict[str, Any]], vectors: np.ndarray, parents: list[dict[str, Any]]) -> None:
    store.write(folder, meta={"dims": vectors.shape[1]}, children=docs, vectors=vectors, parents=parents, versions={})


def open_manifest(folder: Path) -> int:
    snap = store.read(folder)
    assert snap is not None
    return len(snap.children)


def save_sqlite(path: Path, docs: list[dict[str, Any]], vectors: np.ndarray, parents: list[dict[str, Any]]) -> None:
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE IF NOT EXISTS chunks (id TEXT PRIMARY KEY, doc TEXT, vec BLOB)")
    con.execute("CREATE TABLE IF NOT EXISTS parents (id TEXT PRIMARY KEY, doc TEXT)")
    with con:
        con.execute("DELETE FROM chunks")
        con.execute("DELETE FROM parents")
        con.executemany(
            "INSERT INTO chunks VALUES (?, ?, ?)",
            (
                (d["chunk_id"], json.dumps(d, ensure_ascii=False), v.tobytes())
                for d, v in zip(docs, vectors, strict=True)
            ),
        )
        con.executemany("INSERT INTO parents VALUES (?, ?)", ((p["chunk_id"], json.dumps(p)) for p in parents))
    con.close()


def open_sqlite(path: Path, dims: int) -> int:
    con = sqlite3.connect(path)
    rows = con.execute("SELECT doc, vec FROM chunks").fetchall()
    docs = [json.loads(d) for d, _ in rows]
    matrix = np.frombuffer(b"".join(v for _, v in rows), dtype=np.float32).reshape(len(rows), dims)
    [json.loads(d) for (d,) in con.execute("SELECT doc FROM parents")]
    con.close()
    return len(docs) + 0 * int(matrix.shape[0])


def best(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    docs, vectors, parents = corpus(args.chunks, args.dims)
    tmp = Path(tempfile.mkdtemp(prefix="store-bench-"))
    try:
        folder, db = tmp / "manifest", tmp / "index.sqlite"
        rows = []
        save_m = best(lambda: save_manifest(folder, docs, vectors, parents), args.repeat)
        save_s = best(lambda: save_sqlite(db, docs, vectors, parents), args.repeat)
        open_m = best(lambda: open_manifest(folder), args.repeat)
        open_s = best(lambda: open_sqlite(db, args.dims), args.repeat)
        size_m = sum(p.stat().st_size for p in folder.iterdir())
        size_s = sum(p.stat().st_size for p in tmp.iterdir() if p.name.startswith("index.sqlite"))
        rows.append(("save", save_m, save_s))
        rows.append(("open", open_m, open_s))
        print(f"{args.chunks} chunks x {args.dims} dims, best of {args.repeat}")
        print(f"{'':6} {'manifest s':>11} {'sqlite s':>9} {'sqlite/manifest':>16}")
        for name, m, s in rows:
            print(f"{name:6} {m:11.3f} {s:9.3f} {s / m:16.2f}")
        print(f"{'disk':6} {size_m / 2**20:10.1f}M {size_s / 2**20:8.1f}M {size_s / size_m:16.2f}")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
