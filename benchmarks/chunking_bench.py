"""Chunking throughput, side by side in one run: es_rag's strategies and LangChain's
``RecursiveCharacterTextSplitter`` (sized with the same Hugging Face tokenizer) on the same corpus.

    .venv/bin/python benchmarks/chunking_bench.py [--copies N] [--max-tokens 200] [--overlap 30]

The corpus is the bundled sample Markdown (``es_rag/data/sample/*.md``) repeated ``--copies`` times,
each copy a separate document. Prints MB/s (UTF-8 bytes) and chunks/s per splitter, and the ratio to
LangChain. Only ratios from one run on one machine are meaningful.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from es_rag.chunking import make_chunker
from es_rag.encoders.embedder import tokenizer_for
from es_rag.wiring import SAMPLE_DIR


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--overlap", type=int, default=30)
    args = ap.parse_args()
    docs = [p.read_text(encoding="utf-8") for p in sorted(Path(SAMPLE_DIR).glob("*.md"))] * args.copies
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    tok = tokenizer_for("sentence-transformers/all-MiniLM-L6-v2")

    from langchain_text_splitters import RecursiveCharacterTextSplitter

    lc = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        tok._tok, chunk_size=args.max_tokens, chunk_overlap=args.overlap
    )
    rows = []
    t0 = time.perf_counter()
    n = sum(len(lc.split_text(d)) for d in docs)
    rows.append(("langchain RecursiveCharacterTextSplitter", n, time.perf_counter() - t0))
    for strategy in ("fixed", "recursive", "structure", "parent-child"):
        ch = make_chunker(tok, strategy=strategy, max_tokens=args.max_tokens, overlap=args.overlap)
        t0 = time.perf_counter()
        n = 0
        for i, d in enumerate(docs):
            n += len(ch.chunk(d, source_id=f"d{i}", source_version="1", tenant_id="t", acl=()))
        rows.append((f"es_rag {strategy}", n, time.perf_counter() - t0))
    base = rows[0][2]
    print(f"corpus: {len(docs)} documents, {mb:.3f} MB; L={args.max_tokens} O={args.overlap} tokens (MiniLM tokenizer)")
    print(f"{'splitter':<44} {'chunks':>7} {'s':>8} {'MB/s':>8} {'chunks/s':>9} {'time vs langchain':>18}")
    for name, n, secs in rows:
        print(f"{name:<44} {n:>7} {secs:>8.3f} {mb / secs:>8.3f} {n / secs:>9.1f} {secs / base:>17.2f}x")


if __name__ == "__main__":
    main()
