"""An independent BM25 check: Lucene's formula written out over es_rag's analyzer mirror, on a BEIR dataset.

It does not use bm25s or the embedded backend: per field, postings, document frequencies and lengths are
built here, each term scores ``idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` (the ``(k1 + 1)`` factor
of Elasticsearch's LegacyBM25Similarity does not change rankings), and title and text are combined as
``best_fields`` with a tie_breaker (``1.0`` = summed, ``most_fields``) or as one concatenated field
(``flat``). Compare its nDCG@10 with ``es-rag eval --bm25-protocol ...``'s bm25 stage; ``--norms lucene``
applies Lucene's 1-byte length quantisation (``SmallFloat.intToByte4``) the way an index stores it.

    .venv/bin/python benchmarks/bm25_reference.py --dataset ../shared/eval/scifact --split test
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

import ir_measures
import numpy as np
from ir_measures import nDCG

from es_rag.embedded.analyzers import get_analyzer
from es_rag.evaluation.beir import load_beir


def _long_to_int4(i: int) -> int:
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_FREE = 255 - _long_to_int4(2**31 - 1)


def lucene_length(n: int) -> int:
    """A field length after Lucene's 1-byte norm encoding and decoding."""
    b = n if n < _FREE else _FREE + _long_to_int4(n - _FREE)
    return b if b < _FREE else _FREE + _int4_to_long(b - _FREE)


Index = dict[str, tuple[dict[str, list[tuple[int, int]]], np.ndarray, float]]


def score(index: Index, n: int, fld: str, tokens: list[str], k1: float, b: float) -> np.ndarray:
    """BM25 of every document's field ``fld`` for the query ``tokens`` (Lucene's formula, without (k1 + 1))."""
    postings, lengths, avg = index[fld]
    s = np.zeros(n)
    for w in tokens:
        rows = postings.get(w)
        if not rows:
            continue
        idf = math.log(1 + (n - len(rows) + 0.5) / (len(rows) + 0.5))
        for i, f in rows:
            s[i] += idf * f / (f + k1 * (1 - b + b * lengths[i] / avg))
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--analyzers", default="english,standard")
    ap.add_argument("--norms", choices=["exact", "lucene"], default="exact")
    args = ap.parse_args()
    corpus, queries, qrels = load_beir(args.dataset, args.split)
    ids = list(corpus)
    n = len(ids)
    setups = [
        ("k1 1.2 b 0.75 best_fields tie 0.5 (beir-es)", 1.2, 0.75, 0.5),
        ("k1 0.9 b 0.4 summed (beir-multifield)", 0.9, 0.4, 1.0),
        ("k1 0.9 b 0.4 flat (one field)", 0.9, 0.4, None),
    ]
    for name in args.analyzers.split(","):
        analyze = get_analyzer(name)
        title = [analyze(corpus[d]["title"]) for d in ids]
        text = [analyze(corpus[d]["text"]) for d in ids]
        fields = {"title": title, "text": text, "flat": [a + b for a, b in zip(title, text, strict=True)]}
        index: Index = {}
        for fld, docs in fields.items():
            tfs = [Counter(t) for t in docs]
            lengths = np.array([len(t) for t in docs], dtype=np.float64)
            avg = lengths.sum() / max(1, np.count_nonzero(lengths))
            if args.norms == "lucene":
                lengths = np.array([lucene_length(int(x)) for x in lengths], dtype=np.float64)
            postings: dict[str, list[tuple[int, int]]] = {}
            for i, c in enumerate(tfs):
                for w, f in c.items():
                    postings.setdefault(w, []).append((i, f))
            index[fld] = (postings, lengths, avg)
        qtokens = {q: analyze(t) for q, t in queries.items()}

        for label, k1, b, tie in setups:
            run = {}
            for q, tokens in qtokens.items():
                if tie is None:
                    total = score(index, n, "flat", tokens, k1, b)
                else:
                    per = np.stack([score(index, n, f, tokens, k1, b) for f in ("title", "text")])
                    best = per.max(0)
                    total = best + tie * (per.sum(0) - best)
                top = np.argsort(-total, kind="stable")[:100]
                run[q] = {ids[i]: float(total[i]) for i in top if total[i] > 0}
            value = ir_measures.calc_aggregate([nDCG @ 10], qrels, run)[nDCG @ 10]
            print(f"{name:<9} {label:<46} norms={args.norms:<6} nDCG@10 {value:.4f}", flush=True)


if __name__ == "__main__":
    main()
