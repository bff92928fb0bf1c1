"""A cold CLI search on an embedded index beside loading the embedding model alone, as a ratio (issue 31's aim:
within 1.5x).

    nice -n 10 .venv/bin/python benchmarks/cold_search_bench.py --chunks 10000

Builds an index of ``--chunks`` synthetic chunks (60 words from a Zipf vocabulary of 20,000, 4 tenants, random
unit vectors tagged with the default model's ``embedding_version`` so the embedding check passes) through
``EmbeddedBackend.index`` and ``flush``, then times, each in a fresh process:

- ``model``: import es_rag, load the default embedding model, embed one query (the floor of any cold search);
- ``search (first)``: ``es-rag search`` right after the commit, before any search ran (analyses every BM25 field
  and saves the tokens with the commit, unless ``prepare_search`` already did);
- ``search (cold)``: the same command again: a new process, nothing in memory, the saved tokens read.

Run with ``--no-prepare`` to skip ``prepare_search`` (what ``es-rag ingest`` does after saving), so the first search
shows the analysis it pays. Timings are noisy; the ratios of one run are what to compare.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(folder: Path, n: int, prepare: bool) -> None:
    from es_rag.embedded.backend import EmbeddedBackend
    from es_rag.records import Chunk
    from es_rag.settings import Settings
    from es_rag.wiring import build_embedder

    settings = Settings()
    version = str(build_embedder(settings).version)
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(20000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    vectors = np.random.default_rng(7).standard_normal((n, settings.encoder.dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    chunks = []
    for i in range(n):
        text = " ".join(rng.choices(vocab, weights, k=60))
        chunk = Chunk(
            chunk_id=f"c{i}",
            source_id=f"s{i // 20}.md",
            source_version="v1",
            parent_id=None,
            heading_path=("Guide", f"Part {i % 7}"),
            start_offset=0,
            end_offset=len(text),
            chunker_version="bench",
            tenant_id=f"t{i % 4}",
            acl=("public",),
            title=f"Source {i // 20}",
            text=text,
            token_count=60,
        )
        chunks.append(chunk.with_vector(vectors[i], version))
    backend = EmbeddedBackend(folder, dims=settings.encoder.dims)
    backend.index(chunks)
    backend.versions = {f"t{t}": {"active": {f"s{j}.md": "v1" for j in range(n // 20 + 1)}} for t in range(4)}
    backend.flush()
    if prepare:
        backend.prepare_search()


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10000)
    parser.add_argument("--no-prepare", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cold-bench-") as tmp:
        folder = Path(tmp) / "idx"
        build(folder, args.chunks, prepare=not args.no_prepare)
        py = sys.executable
        model = timed(
            [py, "-c", "from es_rag.settings import Settings; from es_rag.wiring import build_embedder; "
             "build_embedder(Settings()).embed_query('w1 w2 w3')"]
        )  # fmt: skip
        search = [py, "-m", "es_rag.cli", "search", "w12 w7 w300", "--tenant", "t1", "--index-dir", str(folder)]
        search += ["--rerank-model", "none"]
        first = timed(search)
        cold = timed(search)
    print(f"{args.chunks} chunks{' (no prepare_search)' if args.no_prepare else ''}")
    print(f"{'':16} {'s':>7} {'x model':>8}")
    for name, t in (("model", model), ("search (first)", first), ("search (cold)", cold)):
        print(f"{name:16} {t:7.2f} {t / model:8.2f}")


if __name__ == "__main__":
    main()
