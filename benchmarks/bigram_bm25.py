"""A plain character-bigram BM25 baseline on a BEIR dataset: the bar es_rag must clear on Japanese (issue 14).

Text is NFKC-normalised and lowercased, split on whitespace, and every whitespace-free run becomes its
overlapping character bigrams (a one-character run stays a unigram), with no dictionary, stop words or
stemming. Title and text are one field. Scoring is ``bm25s`` (Lucene BM25, k1 0.9, b 0.4 by default);
the metrics are ``ir_measures`` nDCG@10, RR@10 and R@100 over the top ``--depth`` documents.

    .venv/bin/python benchmarks/bigram_bm25.py --dataset eval/ja-debian-docs --split test
"""

from __future__ import annotations

import argparse
import json
import unicodedata

import bm25s
import ir_measures
import numpy as np
from ir_measures import RR, R, nDCG

from es_rag.evaluation.beir import load_beir

MEASURES = (nDCG @ 10, RR @ 10, R @ 100)


def bigrams(text: str) -> list[str]:
    """Character bigrams of each whitespace-separated run of the NFKC-normalised, lowercased text."""
    grams: list[str] = []
    for run in unicodedata.normalize("NFKC", text).lower().split():
        grams.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
    return grams


def run(dataset: str, split: str, k1: float, b: float, depth: int) -> dict[str, float]:
    """Index the corpus, rank every query of ``split`` and score the run against its qrels."""
    corpus, queries, qrels = load_beir(dataset, split)
    doc_ids = list(corpus)
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index([bigrams(f"{d['title']} {d['text']}") for d in corpus.values()], show_progress=False)
    vocab = model.vocab_dict
    k = min(depth, len(doc_ids))
    ranked: dict[str, dict[str, float]] = {}
    for qid, text in queries.items():
        ids = [vocab[g] for g in bigrams(text) if g in vocab]
        if not ids:
            ranked[qid] = {}
            continue
        scores = model.get_scores(ids)
        top = np.argsort(-scores, kind="stable")[:k]
        ranked[qid] = {doc_ids[i]: float(scores[i]) for i in top if scores[i] > 0}
    result = ir_measures.calc_aggregate(MEASURES, qrels, ranked)
    return {str(m): float(v) for m, v in result.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="BEIR folder (corpus*.jsonl, queries.jsonl, qrels/)")
    parser.add_argument("--split", default="test", help="qrels split (test)")
    parser.add_argument("--k1", type=float, default=0.9)
    parser.add_argument("--b", type=float, default=0.4)
    parser.add_argument("--depth", type=int, default=100, help="documents ranked per query (100)")
    args = parser.parse_args()
    scores = run(args.dataset, args.split, args.k1, args.b, args.depth)
    print(json.dumps({"dataset": args.dataset, "split": args.split, "k1": args.k1, "b": args.b, **scores}))


if __name__ == "__main__":
    main()
