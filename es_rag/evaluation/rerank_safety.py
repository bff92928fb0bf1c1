"""Learning how a reranker meets the fused order, and checking on held-out queries that it earns its place.

Both run on labelled queries that the model was not trained on (``es-rag train-reranker`` after training, on its
calibration split or held-out training queries; ``es-rag calibrate`` on a dev split), through the real pipeline:
each query's ``rerank_k`` head is collected once in fused order with its fused scores and raw reranker scores
(:class:`DevQuery`), and every configuration is then scored offline with the same
:func:`~es_rag.cross_encoder.fusion.fuse` the rerank stage runs at query time.

* **Fusion weight** (:func:`fit_fusion`): nDCG@10 (reranked head + fused tail, as ``eval`` scores the rerank stage)
  for ``rrf`` and ``interpolate`` at every weight of :data:`WEIGHTS`; the best mean wins, ties to the lower weight
  (closer to the fused order), then to ``rrf``. ``interpolate`` uses the calibration the model will be served with.
* **Safety check**: the paired bootstrap (:func:`~es_rag.evaluation.metrics.paired_bootstrap`, 1,000 resamples,
  seed 13, 95%) of nDCG@10(configuration) - nDCG@10(fused order) per query, for the reranker alone (``replace``,
  nothing fitted: an honest held-out estimate) and for the learned fusion. The learned fusion's estimate is
  **cross-fitted**: the queries are split in :data:`FOLDS` seeded folds and each fold is scored with the weight
  learned on the other folds, so the weight never sees the queries that judge it.

The result is written beside the model: :data:`~es_rag.cross_encoder.fusion.FUSION_FILE` (method, weight, the grid)
and :data:`~es_rag.cross_encoder.fusion.SAFETY_FILE` (the checks, data, split and date; its ``verdict`` is the one
the rerank stage applies to the learned fusion, :func:`~es_rag.cross_encoder.fusion.verdict_for`).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_rag.cross_encoder.calibration import ScoredQuery
from es_rag.cross_encoder.fusion import (
    FUSION_FILE,
    RANK_CONSTANT,
    SAFETY_FILE,
    FusionPlan,
    fuse,
    verdict_for,
)
from es_rag.cross_encoder.model import Calibration
from es_rag.errors import EsRagError, InputError
from es_rag.evaluation.metrics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    ndcg_at,
    paired_bootstrap,
)
from es_rag.filters import SearchFilter
from es_rag.progress import tqdm

WEIGHTS = tuple(round(i * 0.05, 2) for i in range(21))
"""Reranker weights searched for ``rrf`` and ``interpolate`` (0 = the fused order, 1 = the reranker alone)."""
FOLDS = 5
METRIC = "ndcg@10"
CRITERION = "mean nDCG@10 (reranked head + fused tail) over the held-out queries; ties to the lower weight, then to rrf"

LabelledCase = tuple[str, str, SearchFilter, dict[str, int]]
"""``(query_id, query, filter, graded qrels of the query)``."""


@dataclass(frozen=True)
class DevQuery:
    """One held-out query's ``rerank_k`` head in fused order, with what every fusion needs.

    Args:
        query_id: Query id.
        docs: Document id of each head hit, fused order.
        fused: Fused (first-stage) score of each head hit (None: unknown).
        raw: Raw reranker score of each head hit.
        tail: Document ids after the head, fused order (they follow the head in every ranking).
        grades: The query's graded qrels (doc id -> grade).
    """

    query_id: str
    docs: tuple[str, ...]
    fused: tuple[float | None, ...]
    raw: tuple[float, ...]
    tail: tuple[str, ...]
    grades: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not len(self.docs) == len(self.fused) == len(self.raw):
            raise InputError(self.query_id, "raw", f"{len(self.raw)} scores for {len(self.docs)} head documents")

    def scored(self) -> ScoredQuery:
        """The query as calibration data (raw scores and relevance of the head)."""
        return ScoredQuery(self.query_id, self.raw, tuple(self.grades.get(d, 0) > 0 for d in self.docs))

    def ndcg(self, plan: FusionPlan | None, calibration: Calibration) -> float:
        """nDCG@10 of the head ordered by ``plan`` (None: the fused order), then the tail.

        Args:
            plan: Fusion plan; None keeps the fused order.
            calibration: The calibration ``interpolate`` reads.
        """
        if plan is None:
            order: Sequence[int] = range(len(self.docs))
        else:
            order = fuse(plan, self.raw, [calibration.apply(x) for x in self.raw], self.fused).order
        return ndcg_at([*(self.docs[i] for i in order), *self.tail], self.grades, 10)


def reranked_search(pipeline: Any, qid: str, text: str, flt: SearchFilter, what: str) -> Any:
    """``pipeline.search(text, flt)``, refused unless the cross-encoder scored the candidates (what calibration and
    the rerank check read).

    Args:
        pipeline: A pipeline with a cross-encoder.
        qid: The query's id (named in the error).
        text: The query.
        flt: Its filter.
        what: The caller's name in the error (``calibrate``, ``rerank check``).

    Raises:
        EsRagError: The reranker did not score the query (it failed to load, timed out or fell back).
    """
    result = pipeline.search(text, flt)
    if result.candidates and not result.reranked:
        raise EsRagError(
            f"{what}: query {qid}: the cross-encoder did not score the candidates "
            f"({result.trace.paths.get('rerank', 'no reranker')})"
        )
    return result


def collect(pipeline: Any, cases: Iterable[LabelledCase], *, progress: bool = False) -> list[DevQuery]:
    """Run every labelled query through ``pipeline`` (which must rerank with the raw scores, ``replace`` and no
    safety refusal: :func:`~es_rag.evaluation.calibrate.calibration_settings`) and keep its head in fused order.

    Args:
        pipeline: A pipeline with a cross-encoder.
        cases: The labelled queries.
        progress: Show a progress bar.

    Raises:
        EsRagError: The reranker did not score a query (it failed to load, timed out or fell back).
    """
    out = []
    for qid, text, flt, grades in tqdm(list(cases), desc="rerank check", unit="q", disable=not progress):
        result = reranked_search(pipeline, qid, text, flt, "rerank check")
        position = {cid: i for i, cid in enumerate(result.fused)}
        head = sorted(result.candidates, key=lambda h: position.get(h.chunk_id, len(position)))
        doc_of = {h.chunk_id: (h.source_id if h.source_id in grades else h.chunk_id) for h in head}
        in_head = set(doc_of)
        out.append(
            DevQuery(
                qid,
                tuple(doc_of[h.chunk_id] for h in head),
                tuple(h.fused_score for h in head),
                tuple(float(h.rerank_score or 0.0) for h in head),
                tuple(c for c in result.fused if c not in in_head)[:10],
                dict(grades),
            )
        )
    return out


def beir_labelled(queries: dict[str, str], qrels: dict[str, dict[str, int]], tenant: str) -> list[LabelledCase]:
    """Labelled cases of a BEIR split (judged queries only: nDCG is undefined without a relevant document).

    Args:
        queries: Query id -> text.
        qrels: Query id -> doc id -> grade.
        tenant: Tenant the corpus was indexed under.
    """
    flt = SearchFilter(tenant)
    return [
        (q, t, flt, dict(qrels.get(q, {}))) for q, t in queries.items() if any(g > 0 for g in qrels.get(q, {}).values())
    ]


Table = dict[tuple[str, float], list[float]]


def _table(dev: Sequence[DevQuery], calibration: Calibration, rank_constant: int) -> Table:
    table: Table = {}
    for method in ("rrf", "interpolate"):
        for w in WEIGHTS:
            plan = FusionPlan(method=method, weight=w, rank_constant=rank_constant)
            table[(method, w)] = [q.ndcg(plan, calibration) for q in dev]
    return table


def _best(table: Table, rows: Sequence[int]) -> tuple[str, float, float]:
    """``(method, weight, mean)`` of the best configuration over ``rows`` (ties: lower weight, then rrf)."""
    scored = []
    for (method, w), values in table.items():
        mean = sum(values[i] for i in rows) / len(rows)
        scored.append((-round(mean, 12), w, 0 if method == "rrf" else 1, method))
    best = min(scored)
    return best[3], best[1], -best[0]


@dataclass
class FusionFit:
    """The learned fusion and the safety checks (:func:`fit_fusion`)."""

    method: str
    weight: float
    rank_constant: int
    checks: list[dict[str, Any]]
    grid: dict[str, dict[str, float]]
    queries: int
    folds: int
    data: dict[str, Any]
    date: str
    calibration: dict[str, Any]

    @property
    def plan(self) -> FusionPlan:
        """The learned plan."""
        return FusionPlan(method=self.method, weight=self.weight, rank_constant=self.rank_constant)

    def fusion_file(self) -> dict[str, Any]:
        """Content of the fusion file."""
        return {
            "method": self.method,
            "weight": self.weight,
            "rank_constant": self.rank_constant,
            "fit": {
                "criterion": CRITERION,
                "queries": self.queries,
                "grid_mean_ndcg@10": self.grid,
                "calibration": self.calibration,
                "data": self.data,
                "date": self.date,
            },
        }

    def safety_file(self) -> dict[str, Any]:
        """Content of the safety file; ``verdict`` is the one the rerank stage applies to the learned fusion."""
        body: dict[str, Any] = {
            "metric": METRIC,
            "baseline": "fused (first-stage) order",
            "checks": self.checks,
            "data": {**self.data, "queries": self.queries},
            "date": self.date,
            "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE},
            "rule": "helps: CI lower bound > 0; hurts: CI upper bound < 0; else neutral. The rerank stage refuses a "
            "configuration that hurts, and any configuration of a model that hurts alone unless that configuration "
            "was checked as helps (override: allow_harmful_reranker)",
        }
        verdict, reason = verdict_for(body, self.plan)
        return {"verdict": verdict, "reason": reason, **body}


def fit_fusion(
    dev: Sequence[DevQuery],
    calibration: Calibration,
    *,
    data: dict[str, Any] | None = None,
    folds: int = FOLDS,
    seed: int = BOOTSTRAP_SEED,
    rank_constant: int = RANK_CONSTANT,
    today: dt.date | None = None,
) -> FusionFit:
    """Learn the fusion method and weight and run the safety checks (module docstring).

    Args:
        dev: Held-out queries (:func:`collect`).
        calibration: The calibration the model is served with (``interpolate`` reads it).
        data: Description of the data (dataset, split, model) kept in both files.
        folds: Folds of the cross-fitted estimate (at most one per query).
        seed: Seed of the folds and of the bootstrap.
        rank_constant: ``c`` of the weighted RRF.
        today: Date written in the files (default: today).

    Raises:
        InputError: No judged query to fit on.
    """
    if not dev:
        raise InputError("rerank check", "queries", "no judged held-out query to check the reranker on")
    fused = [q.ndcg(None, calibration) for q in dev]
    alone = [q.ndcg(FusionPlan(), calibration) for q in dev]
    table = _table(dev, calibration, rank_constant)
    method, weight, _ = _best(table, range(len(dev)))
    k = max(1, min(folds, len(dev)))
    ids = list(range(len(dev)))
    random.Random(seed).shuffle(ids)
    fold_of = {i: n % k for n, i in enumerate(ids)}
    crossed = [0.0] * len(dev)
    chosen = []
    for f in range(k):
        train = [i for i in range(len(dev)) if fold_of[i] != f] or list(range(len(dev)))
        m, w, _ = _best(table, train)
        chosen.append(f"{m} w={w:g}")
        for i in range(len(dev)):
            if fold_of[i] == f:
                crossed[i] = table[(m, w)][i]
    learned = table[(method, weight)]
    checks = [
        {
            "method": "replace",
            "weight": 1.0,
            **paired_bootstrap(alone, fused, seed=seed),
            "estimate": "held-out: nothing is fitted on these queries for replace",
        },
        {
            "method": method,
            "weight": weight,
            **paired_bootstrap(crossed, fused, seed=seed),
            "in_sample": round(sum(learned) / len(learned), 4),
            "estimate": f"cross-fitted: {k} seeded folds, each scored with the weight learned on the others "
            f"({', '.join(chosen)})",
        },
    ]
    grid = {m: {f"{w:g}": round(sum(table[(m, w)]) / len(dev), 4) for w in WEIGHTS} for m in ("rrf", "interpolate")}
    return FusionFit(
        method=method,
        weight=weight,
        rank_constant=rank_constant,
        checks=checks,
        grid=grid,
        queries=len(dev),
        folds=k,
        data=dict(data or {}),
        date=(today or dt.date.today()).isoformat(),
        calibration=calibration.to_dict(),
    )


def write_fusion(fit: FusionFit, directory: str | Path) -> list[Path]:
    """Write the fusion and safety files into a model directory.

    Args:
        fit: The fit.
        directory: The cross-encoder's directory (created when missing).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / FUSION_FILE, out / SAFETY_FILE]
    paths[0].write_text(json.dumps(fit.fusion_file(), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(json.dumps(fit.safety_file(), indent=2) + "\n", encoding="utf-8")
    return paths


def format_check(fit: FusionFit) -> str:
    """The learned fusion and the safety checks in a few lines.

    Args:
        fit: The fit.
    """
    safety = fit.safety_file()
    lines = [
        f"fusion: {fit.plan.describe()} (learned on {fit.queries} held-out queries; {CRITERION})",
        f"safety check ({METRIC} minus the fused order, paired bootstrap {BOOTSTRAP_RESAMPLES} resamples, "
        f"{CONFIDENCE:.0%} CI):",
    ]
    for c in fit.checks:
        name = "reranker alone" if c["method"] == "replace" else f"{c['method']} w={c['weight']:g}"
        lines.append(
            f"  {name:<20} {c['candidate']:.4f} vs fused {c['baseline']:.4f}: {c['diff']:+.4f} "
            f"CI [{c['ci'][0]:+.4f}, {c['ci'][1]:+.4f}] -> {c['verdict']}  ({c['estimate']})"
        )
    lines.append(f"verdict for {fit.plan.describe()}: {safety['verdict']} ({safety['reason']})")
    return "\n".join(lines)
