"""Rerank benchmark: every number from one run on the same (query, passage) pairs, printed side by side as ratios.

Data: the SciFact *dev subset*, i.e. the judged train queries that ``es-rag train-reranker`` holds out of training
for its calibration (the last 20 % of them in file order; never trained on, and never the test split), each with
its BM25 top ``--rerank-k`` (40, the ``rerank_k`` default) candidates from bm25s over title + text.

Prints, for the same pairs:
1. ``long_text`` options (torch fp32): ``truncate`` (head of the passage), ``windows`` + ``max`` and ``windows`` +
   ``mean_top_m`` (m=2; the same forward passes as ``max``, so the same time): passages over the limit, pairs
   scored, seconds, time as a multiple of raw ``CrossEncoder.predict`` and nDCG@10;
2. es_rag's default configuration (``Settings()``: its ``rerank_long_text`` and ``rerank_backend``) vs raw
   ``CrossEncoder.predict`` (torch fp32, head truncation at the same limit): the ratio the issue bounds at 1.1, and
   es_rag torch ``truncate`` vs predict (the same work: the cost of es_rag's own code);
3. backends (``truncate``): ``int8`` and ``onnx`` speed-up over ``torch`` and their nDCG@10 change;
4. post-retrieval overhead outside model calls as a share of model time.

Timings are noisy on a shared machine: the configurations run round-robin ``--repeats`` times and the fastest round
of each counts. Usage (the numbers in docs/post_retrieval.md)::

    nice -n 10 .venv/bin/python benchmarks/rerank_bench.py --model DIR --queries 40 --repeats 2

Without ``--model`` (or when it does not load) a tiny untrained cross-encoder is built and used; the output says so,
and its nDCG numbers then only show that the code paths agree, not model quality.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag.cross_encoder.model import CrossEncoderReranker, aggregate, ranking_text  # noqa: E402
from es_rag.encoders.embedder import tokenizer_for  # noqa: E402
from es_rag.evaluation.beir import load_beir  # noqa: E402
from es_rag.records import Hit  # noqa: E402
from es_rag.settings import Settings  # noqa: E402
from es_rag.stages.dedup import dedup_hits  # noqa: E402
from es_rag.stages.gate import apply_gate  # noqa: E402
from es_rag.stages.pack import pack_context  # noqa: E402
from es_rag.stages.select import select_context  # noqa: E402

HOLDOUT = 0.2
"""Share of judged train queries train-reranker keeps out of training (its calibration_holdout default)."""


def ndcg_at_10(ranked: list[str], qrels: dict[str, int]) -> float:
    """nDCG@10 with graded gains (2^rel - 1)."""
    dcg = sum((2 ** qrels.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(qrels.values(), reverse=True)[:10]
    idcg = sum((2**r - 1) / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def dev_subset(dataset: Path, n_queries: int | None) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """Corpus, the held-out dev queries (first ``n_queries`` of them) and their qrels.

    The same rule as es_rag.evaluation.train_reranker's calibration holdout: the last ``HOLDOUT`` share of the
    train queries with a positive judgement.
    """
    corpus, queries, qrels = load_beir(dataset, "train")
    judged = [q for q in queries if any(g > 0 for g in qrels.get(q, {}).values())]
    held = judged[len(judged) - max(1, int(len(judged) * HOLDOUT)) :]
    if n_queries is not None:
        held = held[:n_queries]
    return corpus, {q: queries[q] for q in held}, {q: qrels[q] for q in held}


def candidates(corpus: dict[str, Any], queries: dict[str, str], depth: int) -> list[tuple[str, str, list[Hit]]]:
    """``(query id, query, BM25 top depth hits)`` per query."""
    import bm25s

    ids = list(corpus)
    model = bm25s.BM25()
    model.index(
        bm25s.tokenize([corpus[d]["title"] + " " + corpus[d]["text"] for d in ids], show_progress=False),
        show_progress=False,
    )
    rng = np.random.default_rng(0)
    out = []
    for qid, text in queries.items():
        res, _ = model.retrieve(bm25s.tokenize([text], show_progress=False), k=depth, show_progress=False)
        hits = []
        for rank, i in enumerate(res[0]):
            d = ids[int(i)]
            hits.append(
                Hit(
                    chunk_id=d,
                    source_id=d,
                    text=corpus[d]["text"],
                    tenant_id="bench",
                    title=corpus[d]["title"],
                    fused_score=1.0 / (60 + rank + 1),
                    final_score=1.0 / (60 + rank + 1),
                    vector=rng.normal(size=384).astype(np.float32),  # stored-vector stand-in: MMR cost only
                )
            )
        out.append((qid, text, hits))
    return out


@dataclass
class Run:
    """One configuration's fastest round: seconds, seconds in forward passes, and its outputs per query."""

    label: str
    seconds: float = math.inf
    forward: float = 0.0
    scores: list[list[float]] = field(default_factory=list)
    windows: list[list[list[float]]] = field(default_factory=list)
    pairs: int = 0
    over_limit: int = 0


def time_reranker(rr: CrossEncoderReranker, work: list[tuple[str, str, list[Hit]]], run: Run) -> None:
    """One round of ``rr.score`` per query (ranking_text included, as the rerank stage does); keeps the fastest."""
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
    outs = [rr.score(q, [ranking_text(h) for h in hits]) for _, q, hits in work]
    seconds = time.perf_counter() - t0
    rr._forward = original  # type: ignore[method-assign]
    if seconds < run.seconds:
        run.seconds, run.forward = seconds, forward
        run.scores = [o.scores for o in outs]
        run.windows = [o.window_scores for o in outs]
        run.pairs = sum(o.pairs for o in outs)
        run.over_limit = sum(1 for o in outs for t in o.truncation if t.strategy != "none")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="cross-encoder directory (e.g. from es-rag train-reranker)")
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "eval" / "scifact"))
    ap.add_argument("--queries", type=int, default=None, help="first N dev queries (default: all held-out ones)")
    ap.add_argument("--rerank-k", type=int, default=40, help="BM25 candidates per query (rerank_k)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=None, help="pair token limit (default: the model's)")
    ap.add_argument("--repeats", type=int, default=1, help="round-robin rounds; the fastest of each counts")
    ap.add_argument("--backends", default="int8,onnx", help="comma-separated backends compared with torch")
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

    corpus, queries, qrels = dev_subset(Path(args.dataset), args.queries)
    work = candidates(corpus, queries, args.rerank_k)
    n_pairs = sum(len(h) for _, _, h in work)
    defaults = Settings(rerank_model=model_dir).rerank
    common = {"batch_size": args.batch_size, "max_length": args.max_length}

    def reranker(**kw: Any) -> CrossEncoderReranker:
        rr = CrossEncoderReranker(model_dir, **common, **kw)
        rr.warm_up()
        rr.score(work[0][1], [ranking_text(h) for h in work[0][2]])  # first-call allocations
        return rr

    configs: dict[str, CrossEncoderReranker] = {
        "torch truncate": reranker(long_text="truncate"),
        "torch windows": reranker(long_text="windows", aggregation="max"),
    }
    backends = [b for b in args.backends.split(",") if b and b != "torch"]
    skipped: dict[str, str] = {}
    for backend in backends:
        try:
            configs[f"{backend} truncate"] = reranker(long_text="truncate", backend=backend)
        except Exception as exc:
            skipped[backend] = f"{type(exc).__name__}: {exc}"
    default_label = f"{defaults.backend.value} {defaults.long_text.value}"
    if defaults.backend.value == "auto":
        resolved = CrossEncoderReranker.from_settings(Settings(rerank_model=model_dir))
        default_label = f"{resolved.backend} {defaults.long_text.value}"
    if default_label not in configs:
        configs[default_label] = reranker(long_text=defaults.long_text.value, backend=defaults.backend.value)
    rr0 = configs["torch truncate"]
    limit = rr0.limit()
    print(
        f"pairs: {n_pairs} ({len(work)} SciFact dev queries (train-reranker's held-out train queries) x BM25 top "
        f"{args.rerank_k}), batch {args.batch_size}, pair limit {limit} tokens, torch threads "
        f"{torch.get_num_threads()}, repeats {args.repeats}"
    )

    ce = rr0.model
    ce.max_seq_length = limit  # predict truncates at the same limit as es_rag
    texts = [[h + c for h, c in (ranking_text(x) for x in hits)] for _, _, hits in work]
    identity = torch.nn.Identity()
    ce.predict([(work[0][1], t) for t in texts[0]], batch_size=args.batch_size, activation_fn=identity)
    predict = Run("predict")
    runs = {label: Run(label) for label in configs}
    for _ in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        raw = [
            ce.predict(
                [(q, t) for t in ts], batch_size=args.batch_size, activation_fn=identity, show_progress_bar=False
            )
            for (_, q, _), ts in zip(work, texts, strict=True)
        ]
        seconds = time.perf_counter() - t0
        if seconds < predict.seconds:
            predict.seconds, predict.scores = seconds, [list(map(float, r)) for r in raw]
        for label, rr in configs.items():
            time_reranker(rr, work, runs[label])

    def ndcg(score_lists: list[list[float]]) -> float:
        vals = []
        for (qid, _, hits), scores in zip(work, score_lists, strict=True):
            order = [hits[i].chunk_id for i in np.argsort(-np.asarray(scores), kind="stable")]
            vals.append(ndcg_at_10(order, qrels[qid]))
        return float(np.mean(vals))

    base = runs["torch truncate"]
    win = runs["torch windows"]
    mean_top_m = [[aggregate(w, "mean_top_m", 2) for w in per_q] for per_q in win.windows]
    bm25 = ndcg([[-float(i) for i in range(len(h))] for _, _, h in work])
    tp = predict.seconds
    print(f"\nBM25 order (no rerank) nDCG@10 = {bm25:.4f}")
    print("\n1. long_text (torch fp32, same candidates)")
    print(f"   passages over the limit: {base.over_limit} of {n_pairs}")
    print(f"   {'option':<24}{'pairs':>7}{'seconds':>10}{'x predict':>11}{'nDCG@10':>10}")
    for name, run, scores in (
        ("truncate", base, base.scores),
        ("windows max", win, win.scores),
        ("windows mean_top_m=2", win, mean_top_m),
    ):
        print(f"   {name:<24}{run.pairs:>7}{run.seconds:>10.3f}{run.seconds / tp:>11.3f}{ndcg(scores):>10.4f}")

    diff = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(predict.scores, base.scores, strict=True)
    )
    default = runs[default_label]
    print("\n2. es_rag rerank vs raw CrossEncoder.predict (same pairs, rerank_k candidates per call)")
    print(f"   predict (torch fp32, head truncation) {tp:.3f}s")
    print(
        f"   es_rag torch truncate {base.seconds:.3f}s: ratio es_rag/predict = {base.seconds / tp:.3f}"
        f" (max |score diff| {diff:.2e})"
    )
    print(
        f"   es_rag default ({default_label}: rerank_backend={defaults.backend.value}, "
        f"rerank_long_text={defaults.long_text.value}) {default.seconds:.3f}s: ratio es_rag/predict = "
        f"{default.seconds / tp:.3f}"
    )

    print("\n3. backends (truncate; speed-up over torch fp32, nDCG@10 change)")
    base_ndcg = ndcg(base.scores)
    print(f"   torch: {base.seconds:.3f}s, nDCG@10 = {base_ndcg:.4f}")
    for backend in backends:
        if backend in skipped:
            print(f"   {backend}: not run ({skipped[backend]})")
            continue
        run = runs[f"{backend} truncate"]
        alt = ndcg(run.scores)
        print(
            f"   {backend}: {run.seconds:.3f}s, speed-up x{base.seconds / run.seconds:.2f}, "
            f"x predict {run.seconds / tp:.3f}; nDCG@10 = {alt:.4f} (change {alt - base_ndcg:+.4f})"
        )

    tok = tokenizer_for("sentence-transformers/all-MiniLM-L6-v2")
    t0 = time.perf_counter()
    for (_, _q, hits), scores in zip(work, base.scores, strict=True):
        kept = dedup_hits(hits).hits
        by_id = dict(zip([h.chunk_id for h in hits], scores, strict=True))
        scored = sorted(
            (h.replace(rerank_score=by_id[h.chunk_id], final_score=by_id[h.chunk_id]) for h in kept),
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
    overhead = (base.seconds - base.forward) + t_post
    print("\n4. post-retrieval overhead excluding model calls (torch truncate)")
    print(
        f"   model forward {base.forward:.3f}s; es_rag rerank outside forward {base.seconds - base.forward:.3f}s; "
        f"dedup+gate+select+pack {t_post:.3f}s; overhead / model time = {overhead / base.forward:.1%}"
    )


if __name__ == "__main__":
    main()
