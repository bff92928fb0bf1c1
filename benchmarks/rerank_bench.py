"""Rerank benchmark, all numbers from one run on the same pairs (ratios, never absolute claims).

Prints:
1. raw ``CrossEncoder.predict`` time for N (query, passage) pairs vs es_rag's rerank time on the same
   pairs (same ranking_text, same batch size, one call per query in both): the ratio;
2. post-retrieval overhead excluding model calls (es_rag's tokenise/window/collate work outside the
   forward passes, plus dedup, gate, business rules, MMR selection and packing on the same candidates)
   as a share of model time;
3. the int8 (and, when installed, ONNX) backend's speed-up over torch fp32 and its nDCG@10 change on
   SciFact test queries (BM25 candidates from the corpus, graded qrels).

Usage::

    nice -n 10 .venv/bin/python benchmarks/rerank_bench.py --model DIR --queries 30 --depth 10

Without ``--model`` (or when it does not load) a tiny untrained cross-encoder is built and used; the
output says so, and its nDCG numbers then only show that the code paths agree, not model quality.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag.cross_encoder.model import CrossEncoderReranker, ranking_text  # noqa: E402
from es_rag.encoders.embedder import tokenizer_for  # noqa: E402
from es_rag.evaluation.beir import load_beir  # noqa: E402
from es_rag.records import Hit  # noqa: E402
from es_rag.stages.dedup import dedup_hits  # noqa: E402
from es_rag.stages.gate import apply_gate  # noqa: E402
from es_rag.stages.pack import pack_context  # noqa: E402
from es_rag.stages.select import select_context  # noqa: E402


def ndcg_at_10(ranked: list[str], qrels: dict[str, int]) -> float:
    """nDCG@10 with graded gains (2^rel - 1)."""
    dcg = sum((2 ** qrels.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(qrels.values(), reverse=True)[:10]
    idcg = sum((2**r - 1) / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def candidates(dataset: Path, n_queries: int, depth: int) -> tuple[list[tuple[str, list[Hit]]], dict[str, Any]]:
    """BM25 top ``depth`` for the first ``n_queries`` test queries that have qrels."""
    import bm25s

    corpus, queries, qrels = load_beir(dataset, "test")
    ids = list(corpus)
    model = bm25s.BM25()
    model.index(
        bm25s.tokenize([corpus[d]["title"] + " " + corpus[d]["text"] for d in ids], show_progress=False),
        show_progress=False,
    )
    rng = np.random.default_rng(0)
    out = []
    for qid in [q for q in queries if q in qrels][:n_queries]:
        res, _ = model.retrieve(bm25s.tokenize([queries[qid]], show_progress=False), k=depth, show_progress=False)
        hits = []
        for rank, i in enumerate(res[0]):
            d = ids[int(i)]
            vec = rng.normal(size=384).astype(np.float32)  # stored-vector stand-in: MMR cost only
            hits.append(
                Hit(
                    chunk_id=d,
                    source_id=d,
                    text=corpus[d]["text"],
                    tenant_id="bench",
                    title=corpus[d]["title"],
                    fused_score=1.0 / (60 + rank + 1),
                    final_score=1.0 / (60 + rank + 1),
                    vector=vec,
                )
            )
        out.append((queries[qid], hits))
    return out, {q: qrels[q] for q in qrels}


def timed_score(rr: CrossEncoderReranker, work: list[tuple[str, list[Hit]]]) -> tuple[float, float, list[list[float]]]:
    """Total seconds, seconds inside the model forward passes, scores per query."""
    forward = 0.0
    original = rr._forward

    def wrapped(inputs: Any) -> list[float]:
        nonlocal forward
        t = time.perf_counter()
        out = original(inputs)
        forward += time.perf_counter() - t
        return out

    rr._forward = wrapped  # type: ignore[method-assign]
    t0 = time.perf_counter()
    scores = [rr.score(q, [ranking_text(h) for h in hits]).scores for q, hits in work]
    total = time.perf_counter() - t0
    rr._forward = original  # type: ignore[method-assign]
    return total, forward, scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="cross-encoder directory (e.g. from es-rag train-reranker)")
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "eval" / "scifact"))
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=None, help="pair token limit (default: the model's)")
    args = ap.parse_args()

    import torch

    torch.manual_seed(0)
    model_dir = args.model
    note = ""
    if model_dir:
        try:
            CrossEncoderReranker(model_dir).warm_up()
        except Exception as exc:  # report and fall back, never silently
            note = f"--model {model_dir} did not load ({exc}); "
            model_dir = None
    if not model_dir:
        from tests.support.models_factory import build_tiny_cross_encoder

        model_dir = str(build_tiny_cross_encoder(Path(tempfile.mkdtemp(prefix="bench-ce-"))))
        note += "using a TINY UNTRAINED cross-encoder (no trained model given): nDCG shows path agreement only"
    print(f"model: {model_dir}" + (f"\nnote: {note}" if note else ""))

    work, qrels = candidates(Path(args.dataset), args.queries, args.depth)
    n_pairs = sum(len(h) for _, h in work)
    print(
        f"pairs: {n_pairs} ({len(work)} SciFact test queries x BM25 top {args.depth}), "
        f"batch {args.batch_size}, max_length {args.max_length}, torch threads {torch.get_num_threads()}"
    )

    # Same work as predict: head truncation of long passages. Windows are reported separately below.
    rr = CrossEncoderReranker(model_dir, batch_size=args.batch_size, max_length=args.max_length, long_text="truncate")
    ce = rr.model
    ce.max_seq_length = rr.limit()  # both paths truncate at the same limit
    texts = [[h + c for h, c in (ranking_text(x) for x in hits)] for _, hits in work]
    # Warm both paths once (first-call allocations), then time them.
    ce.predict([(work[0][0], t) for t in texts[0]], batch_size=args.batch_size, activation_fn=torch.nn.Identity())
    rr.score(work[0][0], [ranking_text(h) for h in work[0][1]])

    t0 = time.perf_counter()
    raw = [
        ce.predict(
            [(q, t) for t in ts], batch_size=args.batch_size, activation_fn=torch.nn.Identity(), show_progress_bar=False
        )
        for (q, _), ts in zip(work, texts, strict=True)
    ]
    t_predict = time.perf_counter() - t0
    t_es, t_fwd, ours = timed_score(rr, work)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(raw, ours, strict=True))
    print("\n1. raw CrossEncoder.predict vs es_rag rerank (same pairs)")
    print(
        f"   predict {t_predict:.3f}s   es_rag {t_es:.3f}s   ratio es_rag/predict = {t_es / t_predict:.3f}"
        f"   max |score diff| = {diff:.2e}"
    )

    win = CrossEncoderReranker(model_dir, batch_size=args.batch_size, max_length=args.max_length)
    t_win, _, win_scores = timed_score(win, work)
    n_win = sum(win.score(q, [ranking_text(h) for h in hits]).pairs for q, hits in work[:3])
    print(
        f"   windows strategy (long passages scored whole, max over windows): {t_win:.3f}s, "
        f"x{t_win / t_predict:.2f} predict's time ({n_win} windows for the first 3 queries' "
        f"{sum(len(h) for _, h in work[:3])} pairs)"
    )

    tok = tokenizer_for("sentence-transformers/all-MiniLM-L6-v2")
    t0 = time.perf_counter()
    for (_q, hits), scores in zip(work, ours, strict=True):
        kept = dedup_hits(hits).hits
        scored = sorted(
            (h.replace(rerank_score=s, final_score=s) for h, s in zip(kept, scores, strict=True)),
            key=lambda h: -(h.final_score or 0.0),
        )
        gate = apply_gate(
            scored, [h.rerank_score or 0.0 for h in scored], threshold=None, cliff=0.3, margin=None, scale="raw"
        )
        rel = np.asarray([h.final_score or 0.0 for h in gate.hits])
        span = float(rel.max() - rel.min()) if len(rel) else 0.0
        rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
        sel = select_context(gate.hits, None, lambda_mult=0.7, k=5, max_per_source=2, relevance=rel)
        pack_context([gate.hits[i] for i in sel.chosen], tok, budget=1500)
    t_post = time.perf_counter() - t0
    overhead = (t_es - t_fwd) + t_post
    print("\n2. post-retrieval overhead excluding model calls")
    print(
        f"   model forward {t_fwd:.3f}s; es_rag rerank outside forward {t_es - t_fwd:.3f}s; "
        f"dedup+gate+select+pack {t_post:.3f}s"
    )
    print(f"   overhead / model time = {overhead / t_fwd:.1%}")

    def ndcg(score_lists: list[list[float]]) -> float:
        vals = []
        for (q, hits), scores in zip(work, score_lists, strict=True):
            qid = next(k for k, v in queries_by_text.items() if v == q)
            order = [hits[i].chunk_id for i in np.argsort(-np.asarray(scores), kind="stable")]
            vals.append(ndcg_at_10(order, qrels[qid]))
        return float(np.mean(vals))

    _, queries_all, _ = load_beir(Path(args.dataset), "test")
    queries_by_text = {k: v for k, v in queries_all.items() if k in qrels}
    bm25_order = [[-float(i) for i in range(len(h))] for _, h in work]
    base_ndcg = ndcg(ours)
    print(f"   windows nDCG@10 = {ndcg(win_scores):.4f}")
    print("\n3. backends (es_rag rerank, same pairs)")
    print(f"   BM25 order nDCG@10 = {ndcg(bm25_order):.4f}; torch fp32 rerank nDCG@10 = {base_ndcg:.4f} ({t_es:.3f}s)")
    for backend in ("int8", "onnx"):
        alt = CrossEncoderReranker(
            model_dir, batch_size=args.batch_size, max_length=args.max_length, long_text="truncate", backend=backend
        )
        try:
            alt.warm_up()
        except Exception as exc:
            print(f"   {backend}: not run ({exc})")
            continue
        alt.score(work[0][0], [ranking_text(h) for h in work[0][1]])
        t_alt, _, alt_scores = timed_score(alt, work)
        alt_ndcg = ndcg(alt_scores)
        print(
            f"   {backend}: {t_alt:.3f}s, speed-up x{t_es / t_alt:.2f}; nDCG@10 = {alt_ndcg:.4f} "
            f"(change {alt_ndcg - base_ndcg:+.4f})"
        )


if __name__ == "__main__":
    main()
