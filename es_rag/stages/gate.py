"""Dynamic top-k and the no-answer gate (seed 002 §17).

What the gate uses depends on what the ranking knows:

* **reranked and calibrated with a per-model threshold**: hits below the calibrated threshold are
  dropped; when none passes the result is "no sufficient evidence". Then the score cliff and the
  top-1 / top-2 margin on calibrated scores.
* **reranked, no threshold for this model**: score cliff and margin only; no-answer cannot be decided,
  and the decision says so. There is no universal 0.5.
* **the cliff is off until the model is calibrated**: a drop between neighbours means something only on a
  scale fitted to the model (``es-rag calibrate``, or the calibration file ``train-reranker`` writes, or
  temperature/bias/threshold given in the settings). With the default calibration (``sigmoid`` of the raw
  logit, temperature 1, bias 0: source ``default``) or calibration ``none``, ``gate_cliff`` is not applied
  and the basis says ``cliff off: model not calibrated``: an uncalibrated sigmoid can put a chunk with
  p=0.62 after a "cliff" and drop complementary evidence. The margin, which is off unless set, still applies.
* **fused order** (no reranker, reranker fallback): RRF scores say nothing about relevance, so the
  gate cuts nothing and decides nothing; the token budget and ``context_k`` still bound the context.
* **a dense-score floor** (``gate_min_dense``, off by default, any of the above): when no candidate's dense (kNN)
  score reaches it, "no sufficient evidence" and no hit is kept. On rag-en-train's seeded no-answer split a floor
  fitted on the calibration part (``es-rag calibrate --gate-floor``) abstains on the test part with precision 0.85
  and recall 0.88 (docs/evaluation.md); it also empties the context of the answerable questions below it, so it
  stays opt-in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from es_rag.records import Hit
from es_rag.settings import GateSettings
from es_rag.stages.base import StageOutput

EVIDENCE = "evidence"
NO_SUFFICIENT_EVIDENCE = "no_sufficient_evidence"
UNDECIDED = "undecided"


def _decided(
    kept: list[Hit], dropped: list[tuple[str, str]], status: str, basis: str, info: dict[str, Any]
) -> StageOutput:
    """The gate's :class:`StageOutput`: ``info["status"]`` (``evidence``, ``no_sufficient_evidence`` or
    ``undecided``) and ``info["basis"]`` (what it used, in words) are the verdict."""
    return StageOutput(
        hits=kept, dropped=dropped, info={**info, "status": status, "basis": basis}, path=f"{status}: {basis}"
    )


def status_of(out: StageOutput) -> tuple[str, str]:
    """``(status, basis)`` of a gate output.

    Args:
        out: What :func:`apply_gate` or :func:`run` returned.
    """
    return str(out.info.get("status", UNDECIDED)), str(out.info.get("basis", ""))


def score_cliff(scores: Sequence[float], min_drop: float) -> int | None:
    """Index after which the first drop of at least ``min_drop`` occurs (keep ``scores[: i + 1]``).

    Args:
        scores: Scores, best first.
        min_drop: Smallest drop between neighbours that counts as a cliff.
    """
    for i in range(len(scores) - 1):
        if scores[i] - scores[i + 1] >= min_drop:
            return i
    return None


def apply_gate(
    hits: Sequence[Hit],
    gate_scores: Sequence[float] | None,
    *,
    threshold: float | None,
    cliff: float | None,
    margin: float | None,
    scale: str,
    cliff_off: str | None = None,
    scope: str = "hit",
) -> StageOutput:
    """Cut a reranked list by threshold, cliff and margin, or pass a fused list through untouched.

    The cliff and the margin read the scores, not the list's order: a list blended with the fused order
    (``rerank_fusion`` ``interpolate`` or ``rrf``) is not sorted by the cross-encoder, and a drop between two
    neighbours of that order says nothing. So the cliff cuts every hit scoring below the first drop of the sorted
    scores, and the margin compares the two best scores, wherever those hits stand; the survivors keep the order
    they came in. On a list sorted by these scores (``replace``) this is the cut after the first drop.

    Args:
        hits: Candidates, best first.
        gate_scores: One score per hit on the gate scale (calibrated or raw reranker scores); None
            when the order is the fused order (nothing about relevance is known).
        threshold: Calibrated threshold for this model; None = no absolute threshold.
        cliff: Minimum drop between neighbours that ends the list; None disables it.
        margin: Top-1 minus top-2 at which top-1 is kept alone; None disables it.
        scale: Name of the score scale for the reasons (``calibrated`` or ``raw``).
        cliff_off: Why a configured cliff is not applied (``cliff`` is then None); it ends the basis as
            ``cliff off: <reason>`` and is recorded as ``info["cliff"]``.
        scope: ``hit``: the threshold drops every hit below it; ``query``: it only decides the verdict (every hit
            is dropped when the best is below it, none otherwise).
    """
    if gate_scores is None:
        return _decided(
            list(hits), [], UNDECIDED, "not applied: fused order carries no relevance scores (no no-answer verdict)", {}
        )
    scores = list(gate_scores)
    kept = list(range(len(hits)))
    dropped: list[tuple[str, str]] = []
    info: dict[str, Any] = {"scale": scale, "scores": [round(s, 6) for s in scores[:20]]}
    parts = []
    if threshold is not None and scope == "query":
        parts.append(f"calibrated threshold {threshold} on the best hit")
        top = max(scores, default=0.0)
        if top < threshold:
            reason = f"best {scale} score {top:.4f} < threshold {threshold}"
            dropped.extend((hits[i].chunk_id, reason) for i in kept)
            kept = []
    elif threshold is not None:
        parts.append(f"calibrated threshold {threshold}")
        passing = [i for i in kept if scores[i] >= threshold]
        for i in kept:
            if scores[i] < threshold:
                dropped.append((hits[i].chunk_id, f"{scale} score {scores[i]:.4f} < threshold {threshold}"))
        kept = passing
    if cliff is not None and len(kept) > 1:
        parts.append(f"cliff {cliff}")
        ranked = sorted(kept, key=lambda i: (-scores[i], i))
        cut = score_cliff([scores[i] for i in ranked], cliff)
        if cut is not None:
            info["cliff_after"] = cut + 1
            edge, below = scores[ranked[cut]], scores[ranked[cut + 1]]
            gone = set(ranked[cut + 1 :])
            dropped.extend(
                (hits[i].chunk_id, f"after a score cliff ({edge:.4f} -> {below:.4f})") for i in kept if i in gone
            )
            kept = [i for i in kept if i not in gone]
    if len(kept) > 1:
        best, second = sorted(kept, key=lambda i: (-scores[i], i))[:2]
        gap = scores[best] - scores[second]
        info["top1_top2_margin"] = round(gap, 6)
        if margin is not None:
            parts.append(f"margin {margin}")
            if gap >= margin:
                reason = f"top-1 margin {gap:.4f} >= {margin}: single clear answer"
                dropped.extend((hits[i].chunk_id, reason) for i in kept if i != best)
                kept = [best]
    elif margin is not None:
        parts.append(f"margin {margin}")
    if threshold is None:
        status = UNDECIDED
        basis = (" + ".join(parts) or "nothing") + f" on {scale} scores; no calibrated threshold for this model"
    else:
        status = EVIDENCE if kept else NO_SUFFICIENT_EVIDENCE
        basis = " + ".join(parts) + f" on {scale} scores"
    if cliff_off is not None:
        info["cliff"] = f"off: {cliff_off}"
        basis += f"; cliff off: {cliff_off}"
    return _decided([hits[i] for i in kept], dropped, status, basis, info)


NOT_CALIBRATED = "model not calibrated"
"""Why the cliff is off with the default calibration (or ``none``)."""


def fitted(calibration: Any) -> bool:
    """Whether ``calibration`` was fitted to the model or given on purpose: method ``sigmoid`` with values from the
    model directory's calibration file or the settings (source other than ``default``).

    Args:
        calibration: A :class:`~es_rag.cross_encoder.model.Calibration`.
    """
    return bool(calibration.method != "none" and calibration.source != "default")


def dense_gate(hits: Sequence[Hit], min_dense: float) -> StageOutput | None:
    """The no-answer verdict of the retrieval scores alone (``gate_min_dense``): no sufficient evidence, every hit
    dropped, when no candidate's dense score reaches ``min_dense``; None (no verdict here) when one does, or when
    no candidate has a dense score (native fusion returns fused scores only; the basis of the next step says so).

    Args:
        hits: Candidates, best first.
        min_dense: The lowest best dense score that is evidence.
    """
    scores = [h.dense_score for h in hits if h.dense_score is not None]
    if not scores or max(scores) >= min_dense:
        return None
    best = max(scores)
    reason = f"best dense score {best:.4f} < gate_min_dense {min_dense}"
    info = {"scale": "dense", "best_dense": round(best, 6)}
    return _decided([], [(h.chunk_id, reason) for h in hits], NO_SUFFICIENT_EVIDENCE, reason, info)


def run(hits: Sequence[Hit], *, reranked: bool, calibration: Any, settings: GateSettings) -> StageOutput:
    """The gate stage: with ``min_dense`` set, no sufficient evidence when no candidate's dense score reaches it
    (:func:`dense_gate`); then, on a reranked list, cut by the model's calibrated threshold (else none), the cliff
    (only when the calibration is :func:`fitted`) and the margin on the calibrated scale (raw scores with
    calibration ``none``); on the fused order, nothing.

    Args:
        hits: Candidates, best first (reranked or fused order).
        reranked: Whether the cross-encoder scored them (``rerank_score`` / ``calibrated_score`` set).
        calibration: The reranker's :class:`~es_rag.cross_encoder.model.Calibration` (``method``, ``threshold``,
            ``source``).
        settings: Cliff, margin and the dense-score floor.
    """
    if settings.min_dense is not None:
        verdict = dense_gate(hits, settings.min_dense)
        if verdict is not None:
            return verdict
    out = _ranked_gate(hits, reranked=reranked, calibration=calibration, settings=settings)
    if settings.min_dense is not None and hits and all(h.dense_score is None for h in hits):
        note = "gate_min_dense not applied: no candidate has a dense score (native fusion returns fused ones)"
        out.info["basis"] = f"{out.info.get('basis', '')}; {note}"
        out.info["min_dense"] = "not applied"
    return out


def _ranked_gate(hits: Sequence[Hit], *, reranked: bool, calibration: Any, settings: GateSettings) -> StageOutput:
    """:func:`run` after the dense floor: the reranked list's threshold, cliff and margin; the fused order's nothing."""
    if not reranked:
        return apply_gate(hits, None, threshold=None, cliff=None, margin=None, scale="fused")
    calibrated = calibration.method != "none"
    scores = [float((h.calibrated_score if calibrated else h.rerank_score) or 0.0) for h in hits]
    cliff_on = settings.cliff is not None and fitted(calibration)
    return apply_gate(
        hits,
        scores,
        threshold=calibration.threshold,
        cliff=settings.cliff if cliff_on else None,
        margin=settings.margin,
        scale="calibrated" if calibrated else "raw",
        cliff_off=NOT_CALIBRATED if settings.cliff is not None and not cliff_on else None,
        scope=str(settings.threshold_scope),
    )
