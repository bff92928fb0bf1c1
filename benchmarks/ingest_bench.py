"""Ingest throughput split into parse (read + decode), chunk, embed and index time, one run.

    .venv/bin/python benchmarks/ingest_bench.py [--copies N] [--strategy parent-child]

Ingests the bundled sample Markdown ``--copies`` times (distinct source ids via a temporary folder)
into a temporary embedded index with the offline all-MiniLM-L6-v2, then prints each phase's seconds and
share, MB/s and chunks/s.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from es_rag.chunking import make_chunker
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.ingest import IngestReport, ingest_documents, load_files
from es_rag.settings import Settings
from es_rag.wiring import SAMPLE_DIR, build_embedder


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--strategy", default="parent-child")
    args = ap.parse_args()
    settings = Settings()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        for i in range(args.copies):
            shutil.copytree(SAMPLE_DIR, corpus / f"copy{i}", ignore=shutil.ignore_patterns("*.json"))
        mb = sum(p.stat().st_size for p in corpus.rglob("*.md")) / 1e6
        embedder = build_embedder(settings)
        chunker = make_chunker(
            embedder.tokenizer(), strategy=args.strategy, max_tokens=settings.chunking.max_tokens, overlap=30
        )
        report = IngestReport()
        docs = load_files([corpus], tenant_id="bench", acl=["public"], report=report)
        backend = EmbeddedBackend(Path(tmp) / "idx", dims=embedder.dims)
        ingest_documents(docs, chunker=chunker, embedder=embedder, backend=backend, report=report)
        total = sum(report.timings.values())
        print(f"corpus: {len(docs)} documents, {mb:.3f} MB -> {report.chunks} chunks, {report.parents} parents")
        for phase, secs in report.timings.items():
            print(f"{phase:<6} {secs:>8.3f} s  {100 * secs / total:>5.1f}%")
        print(f"total  {total:>8.3f} s  {mb / total:.4f} MB/s  {report.chunks / total:.1f} chunks/s")


if __name__ == "__main__":
    main()
