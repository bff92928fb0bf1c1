"""The learning curve of ``es-rag train-reranker``: a held-out probe of nDCG@10 after each epoch, beside the first
stage's order, and its plot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from es_rag.cross_encoder.model import ranking_text
from es_rag.records import Hit


def passage_text(hit: Hit) -> str:
    """What the cross-encoder reads of a hit, header and content in one string (``ranking_text``)."""
    header, content = ranking_text(hit)
    return header + content


def curve_evaluator(
    first_stage: Callable[[str], list[str]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    docs: dict[str, Hit],
    *,
    depth: int,
) -> Callable[[Callable[[Sequence[tuple[str, str]]], list[float]]], dict[str, Any]] | None:
    """The learning-curve probe of :func:`train_cross_encoder`: each judged held-out query's first-stage head (the
    top ``depth`` of ``first_stage``) is found once; every call scores the heads with the model being trained and
    returns the mean nDCG@10 of the reranked heads beside that of the first-stage order.

    Returns None when no query is judged.

    Args:
        first_stage: A query's fused chunk ids, best first (:func:`pipeline_first_stage`: the candidates the rerank
            stage scores).
        queries: Held-out query id -> text.
        qrels: Query id -> doc id -> grade.
        docs: Doc id -> hit (passage text).
        depth: Head size (the rerank depth).
    """
    from es_rag.evaluation.metrics import ndcg_at

    heads: list[tuple[str, list[str], dict[str, int]]] = []
    for qid, text in queries.items():
        grades = qrels.get(qid, {})
        if not any(g > 0 for g in grades.values()):
            continue
        heads.append((text, [d for d in first_stage(text) if d in docs][:depth], dict(grades)))
    if not heads:
        return None
    first = sum(ndcg_at(head, grades, 10) for _, head, grades in heads) / len(heads)
    passages = {d: passage_text(docs[d]) for _, head, _ in heads for d in head}

    def evaluate(score: Callable[[Sequence[tuple[str, str]]], list[float]]) -> dict[str, Any]:
        total = 0.0
        for text, head, grades in heads:
            scores = score([(text, passages[d]) for d in head])
            ranked = [d for _, d in sorted(zip(scores, head, strict=True), key=lambda x: -x[0])]
            total += ndcg_at(ranked, grades, 10)
        return {
            "queries": len(heads),
            "ndcg@10_first_stage": round(first, 4),
            "ndcg@10_reranked": round(total / len(heads), 4),
        }

    return evaluate


def plot_curve(curve: Sequence[dict[str, Any]], path: str | Path) -> bool:
    """Draw the learning curve (held-out nDCG@10 per epoch against the first stage, and the training loss) as a PNG;
    False when matplotlib (extra ``report``) is missing or there is nothing to draw."""
    points = [c for c in curve if c.get("ndcg@10_reranked") is not None]
    if not points:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.8))
    xs = [c["epoch"] for c in points]
    ax.plot(xs, [c["ndcg@10_reranked"] for c in points], marker="o", label="reranked (held-out nDCG@10)")
    ax.axhline(points[0]["ndcg@10_first_stage"], color="grey", linestyle="--", label="first stage (fused order)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("nDCG@10")
    ax.grid(alpha=0.3)
    losses = [(c["epoch"], c["train_loss"]) for c in points if c.get("train_loss") is not None]
    if losses:
        twin = ax.twinx()
        twin.plot([x for x, _ in losses], [y for _, y in losses], color="tab:red", marker=".", alpha=0.6)
        twin.set_ylabel("training loss (epoch mean)", color="tab:red")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"Learning curve ({points[0]['queries']} held-out queries)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
