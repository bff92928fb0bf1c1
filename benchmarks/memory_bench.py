"""Peak memory of chunking one large file: the resident-memory growth per megabyte of text.

    nice -n 10 .venv/bin/python benchmarks/memory_bench.py --mb 1,4,16 --kind log

Each size runs in a fresh subprocess (its peak resident memory is its own): a synthetic text of ``--kind`` ``log``
(12-word lines, no blank line: one section, the worst case) or ``prose`` (60-word paragraphs), chunked with the
default model's tokenizer and the default strategy (``parent-child``, 200 tokens). Printed: chunks, seconds, the
peak resident memory above the process's footprint after loading the tokenizer, and that growth per MB of text.
Issue 31 measured 200 MB of growth per MB (a 48 MB file reached 9.2 GB): one tokenizer call on the whole section.

``--ingest`` runs the whole ``es-rag ingest`` instead (read, chunk, embed, index, commit to an embedded index folder)
of a file of that size, in a fresh process, and prints that process's peak resident memory (not a growth: the
model and the libraries are in it). ``--fast-embed`` replaces the model's ``encode`` by a hash projection of the
same dimension (the model's own memory is per batch, not per file; a real run of 48 MB takes about 50 minutes on 2
cores, 61 chunks/s):

    nice -n 10 .venv/bin/python benchmarks/memory_bench.py --ingest --fast-embed --mb 4,48 --kind prose
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


def synthetic(kind: str, mb: float) -> str:
    """``mb`` megabytes of text: 12-word lines (``log``) or 60-word paragraphs (``prose``)."""
    rng = random.Random(1)
    words = [f"w{rng.randrange(5000)}" for _ in range(200)]
    parts, n, target = [], 0, int(mb * 2**20)
    while n < target:
        length = 12 if kind == "log" else 60
        line = " ".join(rng.choice(words) for _ in range(length)) + ("\n" if kind == "log" else ".\n\n")
        parts.append(line)
        n += len(line)
    return "".join(parts)


def one(kind: str, mb: float) -> dict[str, float]:
    from es_rag.chunking import make_chunker
    from es_rag.settings import Settings
    from es_rag.wiring import build_embedder

    text = synthetic(kind, mb)
    tokenizer = build_embedder(Settings()).tokenizer()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    chunker = make_chunker(tokenizer, strategy="parent-child", max_tokens=200, overlap=0)
    t0 = time.perf_counter()
    chunks = chunker.chunk(text, source_id="big.txt", source_version="v", tenant_id="t", acl=("p",), fmt="plain")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mb": mb, "chunks": len(chunks), "seconds": time.perf_counter() - t0, "growth_mb": peak - base}


def ingest(kind: str, mb: float, fast: bool) -> dict[str, float]:
    """Peak RSS of ``es-rag ingest`` of one ``mb`` file into a fresh embedded index folder (this process)."""
    import tempfile

    import numpy as np

    from es_rag.cli import main as cli
    from es_rag.encoders.embedder import SentenceTransformerEmbedder

    if fast:

        def encode(self: SentenceTransformerEmbedder, texts: list[str], progress: bool, **_: object) -> np.ndarray:
            out = np.zeros((len(texts), self.dims), dtype=np.float32)
            for i, t in enumerate(texts):
                out[i, hash(t) % self.dims] = 1.0
            return out

        SentenceTransformerEmbedder._encode = encode  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.txt"
        path.write_text(synthetic(kind, mb), encoding="utf-8")
        t0 = time.perf_counter()
        rc = cli(["ingest", str(path), "--index-dir", str(Path(tmp) / "idx"), "--tenant", "t", "--json"])
        seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mb": mb, "rc": rc, "seconds": seconds, "peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="1,4")
    parser.add_argument("--kind", choices=("log", "prose"), default="log")
    parser.add_argument("--ingest", action="store_true", help="run the whole es-rag ingest; print its peak RSS")
    parser.add_argument("--fast-embed", action="store_true", help="a hash projection instead of the model's encode")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        r = ingest(args.kind, float(args.mb), args.fast_embed) if args.ingest else one(args.kind, float(args.mb))
        print(json.dumps(r))
        return
    if args.ingest:
        print(f"{'MB':>6} {'rc':>3} {'s':>7} {'peak RSS MB':>12}")
        for mb in (float(x) for x in args.mb.split(",")):
            cmd = [sys.executable, __file__, "--one", "--ingest", "--mb", str(mb), "--kind", args.kind]
            out = subprocess.run([*cmd, *(["--fast-embed"] if args.fast_embed else [])], capture_output=True,
                                 text=True, check=True).stdout  # fmt: skip
            r = json.loads(out.strip().splitlines()[-1])
            print(f"{mb:6.1f} {r['rc']:3.0f} {r['seconds']:7.1f} {r['peak_mb']:12.0f}")
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
