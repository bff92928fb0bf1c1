"""Within-article top-1 of a cross-encoder on a golden set with answer spans (issue 42's reranker bar).

For every question, the model scores every paragraph of the question's article (the header the rerank stage gives a
hit, ``Title: ...``, then the paragraph); top-1 is the share of questions whose answer paragraph scores highest. BM25
over the same paragraphs (bm25s, English stop words) is printed beside it.

    .venv/bin/python scripts/within_article.py --golden ../shared/eval/rag-en-train/golden.jsonl \
        --docs ../shared/eval/rag-en-train/docs [--model es-rag-reranker-en] [--questions N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from es_rag.cross_encoder.model import CrossEncoderReranker
from es_rag.evaluation.passages import load_golden, sample
from es_rag.evaluation.rerank_groups import within_article


def bm25_top1(data, questions) -> float:  # type: ignore[no-untyped-def]
    import bm25s

    hits = 0
    by_article: dict[int, list] = {}  # type: ignore[type-arg]
    for q in questions:
        by_article.setdefault(q.article, []).append(q)
    for article, qs in by_article.items():
        passages = list(data.articles[article].passages)
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(passages, stopwords="en", show_progress=False), show_progress=False)
        tokens = bm25s.tokenize([q.text for q in qs], stopwords="en", show_progress=False)
        ranked, _ = retriever.retrieve(tokens, k=1, show_progress=False)
        hits += sum(int(ranked[i, 0] == q.passage) for i, q in enumerate(qs))
    return round(hits / len(questions), 4)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden", required=True)
    ap.add_argument("--docs", required=True)
    ap.add_argument("--model", default="es-rag-reranker-en", help="cross-encoder name or folder (%(default)s)")
    ap.add_argument("--questions", type=int, default=None, help="seeded sample of N questions (default: all)")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args(argv)
    data = load_golden(args.golden, args.docs)
    questions = sample(data.questions, args.questions, args.seed)
    reranker = CrossEncoderReranker(args.model)
    reranker.warm_up()

    def score(pairs: Sequence[tuple[str, str]]) -> list[float]:
        query = pairs[0][0]
        split = [p.split("Content:\n", 1) for _, p in pairs]
        return reranker.score(query, [(head + "Content:\n", body) for head, body in split]).scores

    t0 = time.perf_counter()
    result = within_article(score, data, questions)
    result.update(
        model=reranker.name,
        backend=reranker.backend,
        seconds=round(time.perf_counter() - t0, 1),
        bm25_top1=bm25_top1(data, questions),
        golden=args.golden,
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
