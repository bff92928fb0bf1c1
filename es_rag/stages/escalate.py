"""Escalation, the dynamic routing of seed 002 (§20, §22 ``should_use_deep_reranker``, §27 step 6): when the first
ranking is unsure, its top ``escalate_top_n`` hits go to a second, stronger scorer -- a bigger cross-encoder or any
``(query, passages) -> scores`` callable (an LLM listwise ranker) -- and come back in its order. Off unless a scorer is
given (``escalate_model``, or ``escalation_scorer=`` in Python).

Triggers (``escalate_on``), judged on the gate's scale (calibrated scores, raw with calibration ``none``):

* ``low_top1``: top-1 scores below ``escalate_min_top1`` (no default: a low score depends on the model's scale);
* ``tie``: top-1 beats top-2 by less than ``escalate_margin`` (seed 002 appendix E: a small margin = an uncertain
  order);
* ``conflict``: two hits among the top ``escalate_top_n`` carry one ``source_id`` with different ``source_version``
  (seed 002 §9: "旧版 F と新版 G" is what a listwise model can compare). The version registry serves one version per
  source and hides superseded sources, so this fires for chunks it does not govern (written without
  ``version_key`` by another tool);
* ``always``: every search (to measure the scorer).

``low_top1`` and ``tie`` need relevance scores: on the fused order (no reranker, or its fallback) they are not judged;
``conflict`` and ``always`` still are.

**What comes back.** The top ``escalate_top_n`` hits in the scorer's order (ties keep the first order); the hits
below are untouched. The gate, the business rules and selection read the first model's scale (its calibrated
threshold, cliff and margin, the boost's base, MMR's relevance), so the re-ordered head takes over the first
ranking's scores *by position*: the hit the scorer ranks first gets the best first-stage scores, and the list stays
sorted on that scale. The escalation scores, each hit's own first-stage score and old and new rank are in the trace
(stage ``escalate``, ``info["rows"]``).

**Timeout and fallback** (seed 002 §25: "Listwise LLM がタイムアウト → Cross-Encoder 順位へ Fallback"): the scorer runs
in a worker thread of the stage; after ``escalate_timeout`` seconds, or when it raises or returns anything but one
finite number per passage, the first ranking is kept and the trace says why. A thread cannot be stopped: a timed-out
call finishes in the background (at most :data:`WORKERS` run at once; a call queued behind them spends its wait in
its own timeout). In :meth:`~es_rag.pipeline.RagPipeline.asearch` the stage runs in the executor like every model
step, so the event loop never waits for the scorer.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from es_rag.cross_encoder.model import Calibration, CrossEncoderReranker, ranking_text
from es_rag.errors import ModelLoadError
from es_rag.records import Hit
from es_rag.settings import EscalateSettings, Settings
from es_rag.stages.base import StageOutput

EscalationScorer = Callable[[str, Sequence[str]], Sequence[float]]
"""The Python form of an escalation scorer: ``scorer(query, passages) -> scores``, one number per passage, higher =
more relevant (any scale). A passage is the hit's ranking text (title, section, type and version header, then the
content: :func:`~es_rag.cross_encoder.model.ranking_text`). A ``name`` attribute, when it has one, names it in the
trace."""

WORKERS = 4
"""Escalation calls one stage runs at once (timed-out calls still running count)."""


class HitScorer(Protocol):
    """What the stage calls: scores for hits."""

    name: str

    def warm_up(self) -> None:
        """Load what scoring needs; safe to call twice."""

    def score_hits(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """One score per hit, in input order.

        Args:
            query: The user's query.
            hits: The head of the ranking.
        """


class CallableScorer:
    """An :data:`EscalationScorer` callable, given each hit's ranking text.

    Args:
        fn: The callable.
        name: Its name in the trace; default: its ``name`` attribute, else its qualified name.
    """

    def __init__(self, fn: EscalationScorer, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"escalation scorer: expected a (query, passages) -> scores callable, got {fn!r}")
        self.fn = fn
        own = getattr(fn, "name", None)
        self.name = name or (own if isinstance(own, str) else None) or _qualname(fn)

    def warm_up(self) -> None:
        """Call the callable's own ``warm_up`` when it has one."""
        warm = getattr(self.fn, "warm_up", None)
        if callable(warm):
            warm()

    def score_hits(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """The callable's scores for the hits' ranking texts.

        Args:
            query: The user's query.
            hits: The head of the ranking.
        """
        passages = ["".join(ranking_text(h)) for h in hits]
        return list(self.fn(query, passages))


class CrossEncoderScorer:
    """A (bigger) cross-encoder as the escalation scorer, loaded by the project's cross-encoder code (same ranking
    text, windows and truncation as the rerank stage); its raw scores.

    Args:
        reranker: The cross-encoder.
    """

    def __init__(self, reranker: CrossEncoderReranker) -> None:
        self.reranker = reranker
        self.name = f"cross-encoder {reranker.name}"

    def warm_up(self) -> None:
        """Load the model."""
        self.reranker.warm_up()

    def score_hits(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Raw cross-encoder scores.

        Args:
            query: The user's query.
            hits: The head of the ranking.
        """
        return list(self.reranker.score(query, [ranking_text(h) for h in hits]).scores)


def _qualname(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return str(name)


def build_scorer(settings: Settings, scorer: EscalationScorer | HitScorer | None = None) -> HitScorer | None:
    """The escalation scorer: ``scorer`` when given (a callable, or an object with ``score_hits``), else a
    cross-encoder for ``escalate_model`` with the rerank stage's batch, length, long-text, aggregation and backend
    options on the encoder's device; None when neither (escalation off).

    Args:
        settings: The settings.
        scorer: A scorer given in Python.
    """
    if scorer is not None:
        if hasattr(scorer, "score_hits"):
            return scorer  # type: ignore[return-value]
        return CallableScorer(scorer)
    model = settings.escalate.model
    if model is None:
        return None
    r = settings.rerank
    return CrossEncoderScorer(
        CrossEncoderReranker(
            model,
            batch_size=r.batch_size,
            max_length=r.max_length,
            device=settings.encoder.device,
            precision=settings.encoder.precision,
            long_text=r.long_text,
            aggregation=r.aggregation,
            top_m=r.top_m,
            backend=r.backend,
        )
    )


def gate_scores(hits: Sequence[Hit], *, reranked: bool, calibration: Calibration) -> list[float] | None:
    """The scores the gate reads (calibrated, raw with calibration ``none``); None on the fused order.

    Args:
        hits: The ranking, best first.
        reranked: Whether the cross-encoder ordered it.
        calibration: The reranker's calibration.
    """
    if not reranked:
        return None
    calibrated = calibration.method != "none"
    return [float((h.calibrated_score if calibrated else h.rerank_score) or 0.0) for h in hits]


def version_conflicts(hits: Sequence[Hit]) -> dict[str, list[str]]:
    """``source_id`` -> its versions, for every source with more than one ``source_version`` among ``hits``.

    Args:
        hits: The hits to look at.
    """
    versions: dict[tuple[str, str], list[str]] = {}
    for h in hits:
        if h.source_version is None:
            continue
        seen = versions.setdefault((h.tenant_id, h.source_id), [])
        if h.source_version not in seen:
            seen.append(h.source_version)
    return {source: vs for (_, source), vs in versions.items() if len(vs) > 1}


def judge(
    hits: Sequence[Hit], scores: Sequence[float] | None, settings: EscalateSettings
) -> tuple[list[str], dict[str, Any]]:
    """Which of the configured triggers fire: ``(fired, per-trigger record)``.

    Args:
        hits: The ranking, best first.
        scores: The gate's scores of ``hits``; None on the fused order.
        settings: The triggers and their thresholds.
    """
    fired: list[str] = []
    record: dict[str, Any] = {}
    for trigger in settings.on:
        row: dict[str, Any]
        if trigger == "always":
            row = {"fired": True}
        elif trigger == "conflict":
            conflicts = version_conflicts(hits[: settings.top_n])
            row = {"fired": bool(conflicts), "sources": conflicts}
        elif scores is None:
            row = {"fired": False, "why": "not judged: the fused order carries no relevance scores"}
        elif trigger == "low_top1":
            assert settings.min_top1 is not None  # EscalateSettings refuses low_top1 without it
            top1 = scores[0] if scores else None
            row = {"fired": top1 is not None and top1 < settings.min_top1, "top1": top1, "min_top1": settings.min_top1}
        else:  # tie
            gap = scores[0] - scores[1] if len(scores) > 1 else None
            row = {"fired": gap is not None and gap < settings.margin, "gap": gap, "margin": settings.margin}
        for key in ("top1", "gap"):
            if isinstance(row.get(key), float):
                row[key] = round(row[key], 6)
        record[trigger] = row
        if row["fired"]:
            fired.append(trigger)
    return fired, record


def reorder(head: Sequence[Hit], scores: Sequence[float], *, reranked: bool) -> tuple[list[Hit], list[int]]:
    """``head`` sorted by ``scores`` (ties keep the first order), each hit taking the first ranking's scores of the
    position it lands on; and the new order as indices into ``head``.

    Args:
        head: The top of the first ranking, best first.
        scores: The escalation scorer's score per hit of ``head``.
        reranked: Whether the first ranking is the cross-encoder's (its raw, calibrated and final scores move) or the
            fused order (fused and final scores move).
    """
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    fields = ("rerank_score", "calibrated_score", "final_score") if reranked else ("fused_score", "final_score")
    out = [head[j].replace(**{f: getattr(head[pos], f) for f in fields}) for pos, j in enumerate(order)]
    return out, order


class EscalateStage:
    """The escalate stage: judges the triggers on the ranking and, when one fires, re-orders its top ``top_n`` with the
    scorer under the timeout.

    Args:
        scorer: The escalation scorer (:func:`build_scorer`); None: escalation off.
        settings: Triggers, ``top_n`` and timeout.
    """

    def __init__(self, scorer: HitScorer | None, settings: EscalateSettings) -> None:
        self.scorer = scorer
        self.settings = settings
        self._error: str | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether a scorer is configured (the pipeline runs the stage, and records it, only then)."""
        return self.scorer is not None

    def warm_up(self) -> None:
        """Load the scorer now, or record why it cannot load (every later escalation keeps the first ranking and says
        why); safe to call twice."""
        if self.scorer is None or self._error is not None:
            return
        try:
            self.scorer.warm_up()
        except ModelLoadError as exc:
            self._error = str(exc)

    def close(self) -> None:
        """Stop the worker threads (a running call finishes in the background)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def _call(self, query: str, head: list[Hit]) -> list[float]:
        assert self.scorer is not None
        timeout = self.settings.timeout
        if timeout is None:
            return self.scorer.score_hits(query, head)
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="es-rag-escalate")
            future = self._executor.submit(self.scorer.score_hits, query, head)
        return future.result(timeout=timeout)

    def run(self, query: str, hits: list[Hit], *, reranked: bool, calibration: Calibration) -> StageOutput:
        """Escalate when a trigger fires; else, or when the scorer fails, pass ``hits`` on unchanged.

        Args:
            query: The user's query.
            hits: The ranking (the rerank stage's output), best first.
            reranked: Whether the cross-encoder ordered it.
            calibration: The reranker's calibration (the gate's scale).
        """
        s = self.settings
        if self.scorer is None:
            return StageOutput(hits=list(hits), info={"escalated": False}, path="off: no escalation scorer")
        fired, triggers = judge(hits, gate_scores(hits, reranked=reranked, calibration=calibration), s)
        head = list(hits[: s.top_n])
        info: dict[str, Any] = {
            "escalated": False,
            "scorer": self.scorer.name,
            "top_n": len(head),
            "triggers": triggers,
            "fired": fired,
        }
        if not fired:
            return StageOutput(hits=list(hits), info=info, path=f"not escalated: no trigger fired ({', '.join(s.on)})")
        why = ", ".join(fired)
        old = [h.chunk_id for h in head]
        info["old_order"] = old

        def kept(reason: str, **more: Any) -> StageOutput:
            info.update({"fallback": reason, "timed_out": False, "failed": None, **more})
            return StageOutput(
                hits=list(hits), info=info, path=f"fallback: first ranking kept ({reason}; fired: {why})"
            )

        self.warm_up()
        if self._error is not None:
            return kept(f"escalation scorer unavailable: {self._error}", failed=self._error)
        if len(head) < 2:
            return kept("fewer than 2 hits to re-order")
        start = time.perf_counter()
        try:
            scores = self._call(query, head)
        except FutureTimeout:
            info["ms"] = round((time.perf_counter() - start) * 1000.0, 3)
            return kept(f"{self.scorer.name} timed out after {s.timeout}s", timed_out=True)
        except Exception as exc:  # any scorer, any error (an LLM client's own): the first ranking stays
            info["ms"] = round((time.perf_counter() - start) * 1000.0, 3)
            failed = f"{type(exc).__name__}: {exc}"
            return kept(f"{self.scorer.name} failed: {failed}", failed=failed)
        info["ms"] = round((time.perf_counter() - start) * 1000.0, 3)
        bad = _invalid(scores, len(head))
        if bad is not None:
            return kept(f"{self.scorer.name} {bad}", failed=bad)
        values = [float(x) for x in scores]
        out, order = reorder(head, values, reranked=reranked)
        new = [h.chunk_id for h in out]
        own = gate_scores(head, reranked=reranked, calibration=calibration)
        first = own if own is not None else [h.fused_score for h in head]
        info.update(
            escalated=True,
            timed_out=False,
            failed=None,
            new_order=new,
            changed=new != old,
            rows=[
                {
                    "id": head[j].chunk_id,
                    "old_rank": j + 1,
                    "new_rank": pos + 1,
                    "escalate": values[j],
                    "first": first[j],
                }
                for pos, j in enumerate(order)
            ],
        )
        moved = "order changed" if new != old else "order kept"
        return StageOutput(
            hits=[*out, *hits[s.top_n :]], info=info, path=f"escalated ({why}) to {self.scorer.name}: {moved}"
        )


def _invalid(scores: Any, n: int) -> str | None:
    """Why ``scores`` is not one finite number per passage (None when it is)."""
    try:
        values = list(scores)
    except TypeError:
        return f"returned {type(scores).__name__}, not a sequence of scores"
    if len(values) != n:
        return f"returned {len(values)} scores for {n} passages"
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            return f"returned a score that is not a finite number at position {i}: {v!r}"
    return None
