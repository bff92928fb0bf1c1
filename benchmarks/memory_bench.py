"""Peak memory of chunking one large file: the resident-memory growth per megabyte of text.

    nice -n 10 .venv/bin/python benchmarks/memory_bench.py --mb 1,4,16 --kind log

Each size runs in a fresh subprocess (its peak resident memory is its own): a synthetic text of ``--kind`` ``log``
(12-word lines, no blank line: one section, the worst case) or ``prose`` (60-word paragraphs), chunked with the
default model's tokenizer and the default strategy (``parent-child``, 200 tokens). Printed: chunks, seconds, the
peak resident memory above the process's footprint after loading the tokenizer, and that growth per MB of text.
Issue 31 measured 200 MB of growth per MB (a 48 MB file reached 9.2 GB): one tokenizer call on the whole section.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def one(kind: str, mb: float) -> dict[str, float]:
    from es_rag.chunking import make_chunker
    from es_rag.settings import Settings
    from es_rag.wiring import build_embedder

    rng = random.Random(1)
    words = [f"w{rng.randrange(5000)}" for _ in range(200)]
    parts, n, target = [], 0, int(mb * 2**20)
    while n < target:
        length = 12 if kind == "log" else 60
        line = " ".join(rng.choice(words) for _ in range(length)) + ("\n" if kind == "log" else ".\n\n")
        parts.append(line)
        n += len(line)
    text = "".join(parts)
    tokenizer = build_embedder(Settings()).tokenizer()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    chunker = make_chunker(tokenizer, strategy="parent-child", max_tokens=200, overlap=0)
    t0 = time.perf_counter()
    chunks = chunker.chunk(text, source_id="big.txt", source_version="v", tenant_id="t", acl=("p",), fmt="plain")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mb": mb, "chunks": len(chunks), "seconds": time.perf_counter() - t0, "growth_mb": peak - base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="1,4")
    parser.add_argument("--kind", choices=("log", "prose"), default="log")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.kind, float(args.mb))))
        return
    print(f"{'MB':>6} {'chunks':>8} {'s':>7} {'RSS growth MB':>14} {'per MB':>7}")
    for mb in (float(x) for x in args.mb.split(",")):
        out = subprocess.run(
            [sys.executable, __file__, "--one", "--mb", str(mb), "--kind", args.kind],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{mb:6.1f} {r['chunks']:8d} {r['seconds']:7.1f} {r['growth_mb']:14.0f} {r['growth_mb'] / mb:7.1f}")


if __name__ == "__main__":
    main()
