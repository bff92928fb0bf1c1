"""Fitting the gate's dense floor (``gate_min_dense``) on the user's own questions: no answer from retrieval alone.

A question whose answer is not in the index still gets candidates, but from other documents, and the best of them
is further from the question: the best dense (kNN) score among the fused candidates separates the two kinds (on
rag-en-train's seeded split, ROC AUC 0.93 on one part and 0.96 on the other; docs/evaluation.md). The fit needs a
golden file with both kinds: questions with a gold source, and questions whose answer is absent (``"gold": []``).
Each runs through the user's pipeline (no cross-encoder, no floor); the floor is the score between two neighbouring
best scores that gives the highest F1 of abstention (abstain when no candidate reaches it), ties to the lower floor
(fewer answerable questions lose their context). The score is Elasticsearch's kNN score, ``(1 + cosine) / 2`` for
cosine, on both backends, so a floor belongs to one embedding model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from es_rag.cross_encoder.calibration import best_midpoint
from es_rag.errors import ConfigError
from es_rag.progress import tqdm
from es_rag.settings import Settings


@dataclass(frozen=True)
class FloorFit:
    """A fitted dense floor and how it does on the questions it was fitted on."""

    threshold: float
    """``gate_min_dense``: abstain when no candidate's dense score reaches it."""
    auc: float
    """ROC AUC of the best dense score for "the answer is in the index"."""
    precision: float | None
    """Unanswerable questions among those the floor abstains on (None: it abstains on none)."""
    recall: float
    """Unanswerable questions the floor abstains on, among all unanswerable ones."""
    answerable: int
    unanswerable: int
    answerable_abstained: int
    """Answerable questions under the floor: they lose their context."""
    without_dense: int
    """Questions left out of the fit: no candidate had a dense score (the floor does not apply to them either)."""
    embedding_model: str
    golden: str

    def to_dict(self) -> dict[str, Any]:
        """The fit as JSON-ready values."""
        return asdict(self)


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """ROC AUC of ``scores`` for ``positive`` (ties count half).

    Args:
        scores: One score per item.
        positive: Whether each item is positive.
    """
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        raise ValueError("AUC needs positive and negative items")
    wins = 0.0
    for p in pos:
        below = sum(1 for n in neg if n < p)
        ties = sum(1 for n in neg if n == p)
        wins += below + 0.5 * ties
    return wins / (len(pos) * len(neg))


def abstention(best: Sequence[float], answerable: Sequence[bool], floor: float) -> tuple[float | None, float, int]:
    """``(precision, recall, answerable abstained)`` of abstaining when the best score is below ``floor``.

    Args:
        best: Each question's best dense score.
        answerable: Whether each question's answer is in the index.
        floor: The floor.
    """
    abstained = [a for s, a in zip(best, answerable, strict=True) if s < floor]
    right = sum(1 for a in abstained if not a)
    unanswerable = sum(1 for a in answerable if not a)
    precision = right / len(abstained) if abstained else None
    return precision, (right / unanswerable if unanswerable else 0.0), len(abstained) - right


def fit_threshold(best: Sequence[float], answerable: Sequence[bool]) -> float:
    """The floor of the highest abstention F1: a midpoint between two neighbouring distinct best scores (so a
    question's own score never sits on the floor), ties to the lower floor.

    Args:
        best: Each question's best dense score.
        answerable: Whether each question's answer is in the index.
    """

    def f1(cut: float) -> float:
        p, r, _ = abstention(best, answerable, cut)
        return 2 * p * r / (p + r) if p and r else 0.0

    return best_midpoint(best, f1)


def best_dense(result: Any) -> float | None:
    """The best dense score among a search's fused candidates; None when none has one (native fusion returns fused
    scores only, or the dense channel did not run)."""
    hits = result.stage_hits.get("retrieved") or result.candidates
    scores = [h.dense_score for h in hits if h.dense_score is not None]
    return max(scores) if scores else None


def floor_settings(settings: Settings) -> Settings:
    """``settings`` for measuring the retrieval scores: no cross-encoder, no escalation, no floor."""
    return settings.replace(rerank_model=None, escalate_model=None, gate_min_dense=None)


def calibrate_floor(
    golden: str | Path,
    *,
    backend: Any,
    embedder: Any,
    settings: Settings,
    tenant: str | None = None,
    groups: tuple[str, ...] = (),
    progress: bool = False,
) -> FloorFit:
    """Fit ``gate_min_dense`` on a golden file run against the user's index.

    Args:
        golden: Golden JSONL file with answerable questions and questions whose answer is absent (``"gold": []``).
        backend: The user's backend.
        embedder: Query embedder.
        settings: The user's settings (the floor is fitted for their retrieval and embedding model).
        tenant: Default tenant of questions that name none.
        groups: Default ACL groups.
        progress: Progress bar.

    Raises:
        ConfigError: The file lacks one of the two kinds of question, or only one kind got a dense score (native
            fusion returns none: the floor needs ``fusion_path client``).
    """
    from es_rag.evaluation.golden import load_golden, question_filter
    from es_rag.wiring import build_pipeline

    questions = load_golden(golden)
    unanswerable = sum(1 for q in questions if not q.gold)
    if not unanswerable or unanswerable == len(questions):
        raise ConfigError(
            f"--gate-floor: {golden} has {unanswerable} of {len(questions)} questions without a gold source; the "
            'floor is fitted on both kinds: add questions whose answer is not in the index ("gold": []), or leave '
            "some documents out of a copy of the index (docs/evaluation.md, no-answer)"
        )
    settings = floor_settings(settings)
    pipeline = build_pipeline(settings, backend, embedder)
    best: list[float] = []
    answerable: list[bool] = []
    for q in tqdm(questions, desc="gate floor", unit="q", disable=not progress):
        score = best_dense(pipeline.search(q.question, question_filter(q, tenant, groups)))
        if score is None:
            continue
        best.append(score)
        answerable.append(bool(q.gold))
    if all(answerable) or not any(answerable):
        raise ConfigError(
            f"--gate-floor: {len(questions) - len(best)} of {len(questions)} questions got no dense score, and the "
            "rest are of one kind; the floor reads the channel scores of client-side fusion (--fusion-path client, "
            "also when you search) and needs a dense channel"
        )
    threshold = fit_threshold(best, answerable)
    p, r, lost = abstention(best, answerable, threshold)
    return FloorFit(
        threshold=round(threshold, 4),
        auc=round(auc(best, answerable), 4),
        precision=None if p is None else round(p, 4),
        recall=round(r, 4),
        answerable=sum(answerable),
        unanswerable=len(answerable) - sum(answerable),
        answerable_abstained=lost,
        without_dense=len(questions) - len(best),
        embedding_model=settings.encoder.model,
        golden=str(golden),
    )


def floor_file(fit: FloorFit) -> str:
    """A settings file (``--settings FILE``) holding the floor, with where it came from in its header.

    Args:
        fit: The fit.
    """
    from es_rag.settings.file import dump_settings

    return dump_settings(
        {"gate_min_dense": fit.threshold},
        header=[
            f"es-rag calibrate --gate-floor on {fit.golden}: {fit.answerable} answerable and {fit.unanswerable} "
            "unanswerable questions",
            f"fitted for embedding model {fit.embedding_model}: a floor is a score of that model, refit it after a "
            "model change",
            f"on those questions: precision {fit.precision}, recall {fit.recall} of abstention; "
            f"{fit.answerable_abstained} answerable questions lose their context",
        ],
    )


def format_floor(fit: FloorFit) -> str:
    """The fit in a few lines.

    Args:
        fit: The fit.
    """
    precision = "-" if fit.precision is None else f"{fit.precision:.4f}"
    return "\n".join(
        [
            f"gate_min_dense {fit.threshold}  (embedding model {fit.embedding_model})",
            f"data: {fit.answerable} answerable, {fit.unanswerable} unanswerable questions; best dense score "
            f"ROC AUC {fit.auc:.4f}",
            f"abstention on these questions: precision {precision}, recall {fit.recall:.4f}; "
            f"{fit.answerable_abstained} answerable questions under the floor lose their context",
            *(
                [f"{fit.without_dense} questions left out: no candidate had a dense score (the floor skips them too)"]
                if fit.without_dense
                else []
            ),
            "measure it on other questions (es-rag eval --golden ... --settings FILE) before you rely on it",
        ]
    )
