"""Fitting a cross-encoder's calibration on labelled data: temperature, bias and the no-answer threshold.

The reranker's calibration (:class:`~es_rag.cross_encoder.model.Calibration`) maps a raw logit ``x`` to
``sigmoid((x - bias) / temperature)``. :func:`fit_calibration` fits it on labelled queries:

* **temperature and bias**: Platt scaling, i.e. a one-feature logistic regression of relevance on the raw logit,
  ``p = sigmoid(a * x + c)`` (``temperature = 1 / a``, ``bias = -c / a``), fitted by L-BFGS (scipy) on the
  negative log-likelihood written with ``logaddexp`` (no overflow at large logits), against Platt's smoothed
  targets ``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)`` (Platt 1999), which keep a separable set from driving the
  slope to infinity. A slope ``a <= 0`` (higher logits are less often relevant) is refused: the model does not rank.
* **no-answer threshold**: a query is *answerable* when at least one of the candidates the gate sees is relevant.
  The gate answers when its best calibrated score reaches the threshold. The threshold maximises **no-answer
  accuracy**, the share of queries where "answered" equals "answerable", over the midpoints between neighbouring
  best scores (with 0 and 1 as the outer ends); ties go to the lowest threshold (fewest answerable queries
  refused). Without both kinds of query no threshold can be chosen, and the fit says so (``threshold`` None).

Brier score and expected calibration error (10 equal-width bins) are reported before (the default calibration,
``sigmoid(x)``) and after the fit, on the same pairs the fit used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from es_rag.cross_encoder.model import Calibration
from es_rag.errors import InputError

ECE_BINS = 10
CRITERION = (
    "no-answer accuracy: share of queries where (best calibrated score >= threshold) equals (a relevant candidate "
    "exists); midpoints between neighbouring best scores, ties to the lowest"
)


@dataclass(frozen=True)
class ScoredQuery:
    """The raw reranker scores of one query's candidates (those the gate sees) and which of them are relevant.

    Args:
        query_id: Query id.
        raw: Raw cross-encoder score (logit) per candidate.
        relevant: Per candidate, whether it is relevant.
    """

    query_id: str
    raw: tuple[float, ...]
    relevant: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.raw) != len(self.relevant):
            raise InputError(self.query_id, "relevant", f"{len(self.relevant)} labels for {len(self.raw)} scores")

    @property
    def answerable(self) -> bool:
        """Whether any candidate is relevant."""
        return any(self.relevant)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function without overflow.

    Args:
        z: Logits.
    """
    out: np.ndarray = np.exp(-np.logaddexp(0.0, -z))
    return out


def platt(raw: Sequence[float], relevant: Sequence[bool]) -> tuple[float, float]:
    """Temperature and bias of ``sigmoid((raw - bias) / temperature)`` fitted by Platt scaling.

    Args:
        raw: Raw scores.
        relevant: Labels, one per score.

    Raises:
        InputError: No relevant or no non-relevant pair, or a non-positive slope.
    """
    from scipy.optimize import minimize

    x = np.asarray(raw, dtype=np.float64)
    y = np.asarray(relevant, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise InputError("calibration", "labels", f"needs relevant and non-relevant pairs, got {n_pos} and {n_neg}")
    t = np.where(y, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        a, c = params
        z = a * x + c
        # -[t log p + (1 - t) log(1 - p)] = t * softplus(-z) + (1 - t) * softplus(z)
        value = float(np.sum(t * np.logaddexp(0.0, -z) + (1.0 - t) * np.logaddexp(0.0, z)))
        g = sigmoid(z) - t
        return value, np.array([float(np.sum(g * x)), float(np.sum(g))])

    start = np.array([0.0, math.log((n_pos + 1.0) / (n_neg + 1.0))])
    res = minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": 1000, "gtol": 1e-10, "ftol": 1e-15})
    a, c = (float(v) for v in res.x)
    if not a > 0:
        raise InputError(
            "calibration",
            "scores",
            f"higher reranker scores are not more often relevant (fitted slope {a:.4g} <= 0): the model does not rank "
            "this data; train or choose another cross-encoder",
        )
    return 1.0 / a, -c / a


def brier(p: Sequence[float], relevant: Sequence[bool]) -> float:
    """Mean squared error of probabilities against 0/1 labels.

    Args:
        p: Probabilities.
        relevant: Labels.
    """
    pa, ya = np.asarray(p, dtype=np.float64), np.asarray(relevant, dtype=np.float64)
    return float(np.mean((pa - ya) ** 2)) if len(pa) else 0.0


def ece(p: Sequence[float], relevant: Sequence[bool], bins: int = ECE_BINS) -> float:
    """Expected calibration error: over equal-width bins of ``p`` (the last bin holds 1.0), the share of pairs in a
    bin times the gap between its mean probability and its share of relevant pairs, summed.

    Args:
        p: Probabilities.
        relevant: Labels.
        bins: Number of bins.
    """
    pa, ya = np.asarray(p, dtype=np.float64), np.asarray(relevant, dtype=np.float64)
    if not len(pa):
        return 0.0
    idx = np.minimum((pa * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        mask = idx == b
        if mask.any():
            total += mask.sum() / len(pa) * abs(float(pa[mask].mean()) - float(ya[mask].mean()))
    return float(total)


def no_answer_accuracy(best: Sequence[float], answerable: Sequence[bool], threshold: float) -> float:
    """Share of queries where "answered" (best score >= threshold) equals "answerable".

    Args:
        best: Best calibrated score per query (a query without candidates: 0.0).
        answerable: Per query, whether a relevant candidate exists.
        threshold: The gate's threshold.
    """
    if not best:
        return 0.0
    return sum((b >= threshold) == a for b, a in zip(best, answerable, strict=True)) / len(best)


def choose_threshold(best: Sequence[float], answerable: Sequence[bool]) -> float | None:
    """The threshold of the best no-answer accuracy (:data:`CRITERION`); None without both kinds of query.

    Args:
        best: Best calibrated score per query.
        answerable: Per query, whether a relevant candidate exists.
    """
    if all(answerable) or not any(answerable):
        return None
    return best_midpoint(best, lambda t: no_answer_accuracy(best, answerable, t), bounds=(0.0, 1.0))


def best_midpoint(
    scores: Sequence[float], criterion: Callable[[float], float], *, bounds: Sequence[float] = ()
) -> float:
    """The threshold with the highest ``criterion``, among the midpoints between neighbouring distinct values of
    ``scores`` and ``bounds`` (so no score sits on the threshold), ties to the lowest; the value itself when there is
    only one.

    Args:
        scores: The scores a threshold separates.
        criterion: The quality of a threshold (higher is better, never negative).
        bounds: Values the midpoints also run to (0 and 1 for probabilities).
    """
    values = sorted({*bounds, *scores})
    cuts = [(lo + hi) / 2 for lo, hi in pairwise(values)] or values
    chosen, top = cuts[0], -1.0
    for cut in cuts:
        quality = criterion(cut)
        if quality > top:
            chosen, top = cut, quality
    return chosen


@dataclass
class CalibrationFit:
    """What :func:`fit_calibration` found, with the data it was fitted on described."""

    temperature: float
    bias: float
    threshold: float | None
    queries: int
    answerable: int
    pairs: int
    relevant_pairs: int
    brier_before: float
    brier_after: float
    ece_before: float
    ece_after: float
    no_answer_accuracy: float | None
    criterion: str = CRITERION
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def calibration(self, source: str) -> Calibration:
        """The fit as the reranker's calibration.

        Args:
            source: Where it is said to come from (the calibration file's path).
        """
        return Calibration(temperature=self.temperature, bias=self.bias, threshold=self.threshold, source=source)

    def to_file(self) -> dict[str, Any]:
        """The calibration file's content (``es_rag_calibration.json``): the three values the reranker reads, then
        the fit's description under ``fit``."""
        fit = {k: v for k, v in asdict(self).items() if k not in ("temperature", "bias", "threshold")}
        return {"temperature": self.temperature, "bias": self.bias, "threshold": self.threshold, "fit": fit}


def fit_calibration(scored: Sequence[ScoredQuery], *, data: dict[str, Any] | None = None) -> CalibrationFit:
    """Fit temperature and bias (Platt scaling) on every (query, candidate) pair, then the no-answer threshold on
    the best calibrated score per query (module docstring).

    Args:
        scored: Per query, the candidates' raw scores and labels.
        data: Description of the data (dataset, split, model) kept in the fit.

    Raises:
        InputError: Nothing to fit on, or the scores do not rank (see :func:`platt`).
    """
    raw = [s for q in scored for s in q.raw]
    rel = [r for q in scored for r in q.relevant]
    if not raw:
        raise InputError("calibration", "queries", "no scored candidate to fit on")
    temperature, bias = platt(raw, rel)
    x = np.asarray(raw, dtype=np.float64)
    before = sigmoid(x)
    after = sigmoid((x - bias) / temperature)
    best = [float(sigmoid((np.asarray(q.raw) - bias) / temperature).max()) if q.raw else 0.0 for q in scored]
    answerable = [q.answerable for q in scored]
    threshold = choose_threshold(best, answerable)
    note = ""
    if threshold is None:
        kind = "without" if all(answerable) else "with"
        note = f"no query {kind} a relevant candidate: the no-answer threshold cannot be chosen (left unset)"
    return CalibrationFit(
        temperature=float(f"{temperature:.6g}"),  # significant digits: a near-constant model has a tiny temperature
        bias=float(f"{bias:.6g}"),
        threshold=None if threshold is None else round(threshold, 6),
        queries=len(scored),
        answerable=sum(answerable),
        pairs=len(raw),
        relevant_pairs=sum(rel),
        brier_before=round(brier(before.tolist(), rel), 6),
        brier_after=round(brier(after.tolist(), rel), 6),
        ece_before=round(ece(before.tolist(), rel), 6),
        ece_after=round(ece(after.tolist(), rel), 6),
        no_answer_accuracy=None if threshold is None else round(no_answer_accuracy(best, answerable, threshold), 6),
        note=note,
        data=dict(data or {}),
    )
