"""Collecting a cross-encoder's scores on labelled queries and fitting its calibration file, and (BEIR labels) its
fusion with the first stage and its safety check (:mod:`es_rag.evaluation.rerank_safety`).

The queries run through the real :class:`~es_rag.pipeline.RagPipeline` (retrieve -> fusion -> dedup -> rerank), so
the fit sees exactly the candidates the gate will see at query time (``rerank_k`` of them); their raw scores and
labels go to :func:`~es_rag.cross_encoder.calibration.fit_calibration`. Sources of labels: a BEIR folder's split
(a candidate is relevant when its qrels grade is > 0) or a golden file run against the user's own index
(:mod:`es_rag.evaluation.golden`'s relevance rule).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.cross_encoder.calibration import CalibrationFit, ScoredQuery, fit_calibration
from es_rag.cross_encoder.model import CALIBRATION_FILE, Calibration
from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.rerank_safety import (
    FusionFit,
    beir_labelled,
    collect,
    fit_fusion,
    reranked_search,
    write_fusion,
)
from es_rag.filters import SearchFilter
from es_rag.progress import tqdm
from es_rag.records import Hit
from es_rag.settings import Settings

TRAINING_META = "es_rag_training.json"
"""What ``es-rag train-reranker`` writes beside a fine-tuned cross-encoder (its report, and the split its queries came
from: calibration refuses to fit on training queries)."""

Case = tuple[str, str, SearchFilter, Callable[[Hit], bool]]
"""``(query_id, query, filter, is_relevant)``."""


def scored_queries(pipeline: Any, cases: Iterable[Case], *, progress: bool = False) -> list[ScoredQuery]:
    """The raw reranker score and the label of every candidate the gate sees, per query.

    Args:
        pipeline: A pipeline with a cross-encoder.
        cases: The labelled queries.
        progress: Show a progress bar.

    Raises:
        EsRagError: The reranker did not score a query (it failed to load, timed out or fell back).
    """
    out = []
    for qid, text, flt, is_relevant in tqdm(list(cases), desc="calibrate", unit="q", disable=not progress):
        result = reranked_search(pipeline, qid, text, flt, "calibrate")
        out.append(
            ScoredQuery(
                qid,
                tuple(float(h.rerank_score or 0.0) for h in result.candidates),
                tuple(bool(is_relevant(h)) for h in result.candidates),
            )
        )
    return out


def beir_cases(queries: dict[str, str], qrels: dict[str, dict[str, int]], tenant: str) -> list[Case]:
    """Labelled cases of a BEIR split: a candidate (one document) is relevant when its grade is > 0.

    Args:
        queries: Query id -> text.
        qrels: Query id -> doc id -> grade.
        tenant: Tenant the corpus was indexed under.
    """
    flt = SearchFilter(tenant)

    def judge(qid: str) -> Callable[[Hit], bool]:
        judged = qrels.get(qid, {})
        return lambda h: judged.get(h.source_id, judged.get(h.chunk_id, 0)) > 0

    return [(qid, text, flt, judge(qid)) for qid, text in queries.items()]


def calibration_settings(settings: Settings, model: str) -> Settings:
    """``settings`` for scoring with ``model``: its raw scores in its own order (``replace``, a stored safety verdict
    does not stop the check), no result cache, no timeout, no escalation (the escalate stage moves first-stage scores
    by position, which would pair a label with another hit's score).

    Args:
        settings: Base settings.
        model: Cross-encoder directory or name.
    """
    return settings.replace(
        rerank_model=model,
        rerank_calibration="none",
        rerank_temperature=None,
        rerank_bias=None,
        rerank_threshold=None,
        rerank_timeout=None,
        rerank_cache_size=0,
        escalate_model=None,
        rerank_fusion="replace",
        rerank_fusion_weight=None,
        allow_harmful_reranker=True,
    )


@dataclass
class RerankCheck:
    """What :func:`check_queries` fitted: the calibration (or why it could not be fitted) and the fusion with its
    safety checks."""

    calibration: CalibrationFit | None
    calibration_error: str | None
    fusion: FusionFit

    def written(self, directory: str | Path) -> list[Path]:
        """Write the calibration (when fitted), fusion and safety files into a model directory.

        Args:
            directory: The cross-encoder's directory.
        """
        paths = [write_calibration(self.calibration, directory)] if self.calibration is not None else []
        return [*paths, *write_fusion(self.fusion, directory)]

    def summary(self) -> dict[str, Any]:
        """JSON form: the calibration file, the fusion file and the safety file's content."""
        return {
            "calibration": self.calibration.to_file() if self.calibration is not None else None,
            "calibration_error": self.calibration_error,
            "fusion": self.fusion.fusion_file(),
            "safety": self.fusion.safety_file(),
        }


def held_out_queries(model: str, split: str) -> list[str] | None:
    """The query ids ``es-rag train-reranker`` kept out of training ``model`` on ``split`` (its
    ``es_rag_training.json``), or None when the model records none for that split.

    Args:
        model: Cross-encoder directory.
        split: The split the ids must come from.
    """
    path = Path(model) / TRAINING_META
    if not path.is_file():
        return None
    meta = json.loads(path.read_text(encoding="utf-8"))
    ids = meta.get("held_out") or []
    return [str(q) for q in ids] if ids and meta.get("split") == split else None


def calibrate_beir(
    dataset: str | Path,
    model: str,
    *,
    split: str = "dev",
    settings: Settings | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    progress: bool = False,
    index: Any = None,
) -> RerankCheck:
    """Fit ``model``'s calibration, fusion weight and safety check on a BEIR split, the corpus indexed on the embedded
    backend (:func:`check_queries`).

    ``dev`` on a dataset without ``qrels/dev.tsv`` (SciFact) means the training queries ``es-rag train-reranker`` kept
    out of training this model (``held_out`` in its ``es_rag_training.json``).

    Args:
        dataset: BEIR folder.
        model: Cross-encoder directory or name.
        split: Qrels split (``test`` is refused: a threshold or weight fitted there would be measured on its own
            data).
        settings: Embedding model, BM25 set-up, ``candidate_k`` and ``rerank_k``.
        cache_dir: Embedding cache root.
        max_queries: Only the first N queries.
        progress: Progress bars.
        index: An :class:`~es_rag.evaluation.index.EvalIndex` of the same corpus (train-reranker passes its own).

    Raises:
        ConfigError: ``split`` is ``test``.
    """
    from es_rag.evaluation.beir import load_beir
    from es_rag.evaluation.index import build_index

    if split == "test":
        raise ConfigError("calibrate --split: the test split is for evaluation only; fit on dev (or train)")
    settings = calibration_settings(settings or Settings(), model)
    described = split
    if split == "dev" and not (Path(dataset) / "qrels" / "dev.tsv").is_file():
        held = held_out_queries(model, "train")
        if held is None:
            raise ConfigError(
                f"calibrate --split dev: {dataset} has no qrels/dev.tsv and {model} records no held-out training "
                "queries (es_rag_training.json from es-rag train-reranker); name a split the model was not trained on"
            )
        corpus, queries, qrels = load_beir(dataset, "train")
        wanted = set(held)
        queries = {q: t for q, t in queries.items() if q in wanted}
        described = f"train queries held out of training ({len(queries)}, es_rag_training.json)"
    else:
        corpus, queries, qrels = load_beir(dataset, split)
    if max_queries is not None:
        queries = {q: queries[q] for q in list(queries)[:max_queries]}
    if index is None:
        index = build_index(corpus, settings, cache_dir=cache_dir, progress=progress)
    data = {"dataset": str(dataset), "split": described}
    return check_queries(index, queries, qrels, model, settings=settings, data=data, progress=progress)


def _scoring_pipeline(index: Any, settings: Settings) -> Any:
    """A pipeline over an evaluation index that reranks with ``settings`` (from :func:`calibration_settings`)."""
    from es_rag.pipeline import RagPipeline
    from es_rag.wiring import build_reranker

    return RagPipeline(
        index.backend,
        embedder=index.embedder,
        settings=settings,
        tokenizer=index.embedder.tokenizer(),
        reranker=build_reranker(settings),
    )


def check_queries(
    index: Any,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    model: str,
    *,
    settings: Settings,
    data: dict[str, Any] | None = None,
    progress: bool = False,
) -> RerankCheck:
    """Score ``queries`` once with ``model`` and fit its calibration, then its fusion weight and safety check (with
    the fitted calibration, or the default one when the calibration cannot be fitted, as the model is then served).

    Args:
        index: An :class:`~es_rag.evaluation.index.EvalIndex`.
        queries: Query id -> text (held out of the model's training).
        qrels: Query id -> doc id -> grade.
        model: Cross-encoder directory or name.
        settings: Settings of the index (the model and raw scores are set here).
        data: Description of the data kept in the files.
        progress: Progress bar.

    Raises:
        InputError: No judged query among ``queries``.
    """
    from es_rag.evaluation.index import EVAL_TENANT

    settings = calibration_settings(settings, model)
    pipeline = _scoring_pipeline(index, settings)
    dev = collect(pipeline, beir_labelled(queries, qrels, EVAL_TENANT), progress=progress)
    described = {**(data or {}), "model": model, "rerank_k": settings.rerank.k}
    fit: CalibrationFit | None = None
    error: str | None = None
    try:
        fit = fit_calibration([q.scored() for q in dev], data=described)
    except InputError as exc:
        error = str(exc)
    calibration = fit.calibration(str(Path(model) / CALIBRATION_FILE)) if fit is not None else Calibration()
    return RerankCheck(fit, error, fit_fusion(dev, calibration, data=described))


def calibrate_queries(
    index: Any,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    model: str,
    *,
    settings: Settings,
    data: dict[str, Any] | None = None,
    progress: bool = False,
) -> CalibrationFit:
    """Fit ``model``'s calibration on ``queries`` searched in an indexed BEIR corpus.

    Args:
        index: An :class:`~es_rag.evaluation.index.EvalIndex`.
        queries: Query id -> text.
        qrels: Query id -> doc id -> grade.
        model: Cross-encoder directory or name.
        settings: Settings of the index (the model and raw scores are set here).
        data: Description of the data kept in the fit.
        progress: Progress bar.
    """
    from es_rag.evaluation.index import EVAL_TENANT

    settings = calibration_settings(settings, model)
    pipeline = _scoring_pipeline(index, settings)
    scored = scored_queries(pipeline, beir_cases(queries, qrels, EVAL_TENANT), progress=progress)
    return fit_calibration(scored, data={**(data or {}), "model": model, "rerank_k": settings.rerank.k})


def calibrate_golden(
    golden: str | Path,
    model: str,
    *,
    backend: Any,
    embedder: Any,
    settings: Settings,
    tenant: str | None = None,
    groups: tuple[str, ...] = (),
    progress: bool = False,
) -> CalibrationFit:
    """Fit ``model``'s calibration on a golden file run against the user's index. A candidate is relevant when it
    holds an answer span (:meth:`~es_rag.evaluation.golden.GoldenQuestion.holds_answer`; any chunk of a gold source
    for a question without spans).

    Args:
        golden: Golden JSONL file (:mod:`es_rag.evaluation.golden`).
        model: Cross-encoder directory or name.
        backend: The user's backend (embedded index or Elasticsearch).
        embedder: Query embedder.
        settings: The user's settings.
        tenant: Default tenant of questions that name none.
        groups: Default ACL groups.
        progress: Progress bar.
    """
    from es_rag.evaluation.golden import load_golden, question_filter
    from es_rag.wiring import build_pipeline

    questions = load_golden(golden)
    settings = calibration_settings(settings, model)
    pipeline = build_pipeline(settings, backend, embedder)
    cases = [(q.id, q.question, question_filter(q, tenant, groups), q.holds_answer) for q in questions]
    scored = scored_queries(pipeline, cases, progress=progress)
    return fit_calibration(scored, data={"golden": str(golden), "model": model, "rerank_k": settings.rerank.k})


def write_calibration(fit: CalibrationFit, directory: str | Path) -> Path:
    """Write ``fit`` as the calibration file of a model directory (where the reranker reads it).

    Args:
        fit: The fit.
        directory: The cross-encoder's directory (created when missing).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / CALIBRATION_FILE
    path.write_text(json.dumps(fit.to_file(), indent=2) + "\n", encoding="utf-8")
    return path


def format_fit(fit: CalibrationFit) -> str:
    """The fit in a few lines.

    Args:
        fit: The fit.
    """
    acc = "-" if fit.no_answer_accuracy is None else f"{fit.no_answer_accuracy:.4f}"
    lines = [
        f"temperature {fit.temperature:.4f}  bias {fit.bias:.4f}  threshold {fit.threshold}",
        f"data: {fit.queries} queries ({fit.answerable} with a relevant candidate), {fit.pairs} pairs "
        f"({fit.relevant_pairs} relevant)",
        f"Brier {fit.brier_before:.4f} -> {fit.brier_after:.4f}   ECE {fit.ece_before:.4f} -> {fit.ece_after:.4f}"
        "   (before: sigmoid of the raw logit; same pairs)",
        f"no-answer accuracy {acc}  ({fit.criterion})",
    ]
    if fit.note:
        lines.append(f"note: {fit.note}")
    return "\n".join(lines)
