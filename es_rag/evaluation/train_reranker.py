"""Cross-encoder reranker fine-tuning with hard negatives mined by es_rag's own retrieval (seed 002 §23).

For every query of the training split the embedded index is searched through the search pipeline with the
reranker off (:func:`pipeline_first_stage`); the top non-relevant documents of that fused head, the candidates the
rerank stage will be given, become the negatives, never random documents (:func:`mine_pairs` without a first stage
falls back to a round-robin over the backend's BM25, dense and their RRF lists). Positives are the judged
documents; graded qrels become soft labels ``grade / max_grade``, documents judged 0 are negatives. Passages are
the same ``ranking_text`` the reranker sees at query time.

The model starts from any local or hub checkpoint (default: the offline all-MiniLM-L6-v2 weights) with a
fresh single-logit head and is trained for a bounded number of steps, listwise by default (softmax
cross-entropy of each positive against its query's hard negatives, which ranks rather than classifies)
or pointwise (binary cross-entropy on single pairs), then saved where
:class:`~es_rag.cross_encoder.model.CrossEncoderReranker` (``--rerank-model DIR``) loads it.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from es_rag.cross_encoder.model import RANKING_TEXT_VERSION
from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.calibrate import TRAINING_META as TRAINING_META  # re-exported
from es_rag.evaluation.calibrate import check_queries
from es_rag.evaluation.curve import curve_evaluator as curve_evaluator  # re-exported
from es_rag.evaluation.curve import passage_text as _passage
from es_rag.evaluation.curve import plot_curve
from es_rag.evaluation.group_trainer import load_base, pair_logits
from es_rag.filters import SearchFilter
from es_rag.records import Hit
from es_rag.settings import Settings
from es_rag.stages.fusion import reciprocal_rank_fusion

CURVE_PLOT = "learning_curve.png"


@dataclass(frozen=True)
class TrainingPair:
    """One (query, passage, label) example and where its passage came from.

    Args:
        query_id: Query id.
        doc_id: Document id.
        query: Query text.
        passage: ``ranking_text`` of the document.
        label: Target in [0, 1] (graded relevance / max grade; 0 for negatives).
        origin: ``qrels`` for positives, else the channel and rank that surfaced it (``hybrid@3``).
        fused_rank: 1-based rank of the document in the query's fused mining list (the pipeline's head, else the
            BM25 + dense RRF list), None when it is not in that list (the teacher of ``distill``).
    """

    query_id: str
    doc_id: str
    query: str
    passage: str
    label: float
    origin: str
    fused_rank: int | None = None


@dataclass
class TrainingConfig:
    """Training hyper-parameters.

    Args:
        base_model: Checkpoint (dir or hub name) to start from; its head is replaced by one logit.
        negatives_per_query: Hard negatives kept per query.
        mining_depth: Candidates per channel searched for negatives.
        max_steps: Optimizer steps (training stops there even mid-epoch).
        epochs: Passes over the pairs (bounded by max_steps).
        batch_size: Pairs per step.
        learning_rate: AdamW peak learning rate (linear warm-up over 10% of the steps, then linear decay).
        max_length: Token limit of one (query, passage) pair.
        seed: Shuffling and head initialisation seed.
        loss: ``listwise`` (default): softmax cross-entropy over groups of one positive and its query's
            hard negatives (localized contrastive estimation, Gao et al. 2021), each group weighted by the
            positive's graded label, ``batch_size // group size`` groups per step; ``pointwise``: binary
            cross-entropy on single pairs against their graded labels, ``batch_size`` pairs per step.
        device: Torch device to train on (:func:`~es_rag.encoders.device.resolve_device`: ``auto`` = cuda, else
            mps, else cpu).
        distill: Weight of the fused order as a teacher in the listwise target (0 = labels alone): each group's
            target is ``(1 - distill) * one-hot(positive) + distill * teacher``, the teacher giving each document a
            share proportional to ``1 / fused rank`` (rank ``mining_depth + 1`` when the fused list does not hold
            it), so the order of the hard negatives is learned too, not only that the positive beats them.
    """

    base_model: str
    negatives_per_query: int = 7
    mining_depth: int = 30
    max_steps: int = 300
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 3e-5
    max_length: int = 256
    seed: int = 13
    loss: str = "listwise"
    device: str = "auto"
    distill: float = 0.0

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"loss: invalid value {self.loss!r}; valid values: {', '.join(LOSSES)}")
        if not 0.0 <= self.distill <= 1.0:
            raise ConfigError(f"distill: must be within [0, 1], got {self.distill}")
        if self.distill > 0 and self.loss != "listwise":
            raise ConfigError(f"distill: the fused-order teacher needs --loss listwise, not {self.loss}")


@dataclass
class TrainingReport:
    """What a training run did (also written to ``es_rag_training.json`` in the output directory)."""

    output_dir: str
    base_model: str
    dataset: str
    split: str
    queries: int
    pairs: int
    positives: int
    negatives_by_channel: dict[str, int]
    steps: int
    seconds: float
    loss_first: float
    loss_last: float
    config: dict[str, Any]
    ranking_text_version: str = RANKING_TEXT_VERSION
    calibration: dict[str, Any] | None = None
    """The calibration fitted after training (``es_rag_calibration.json``), the error that stopped it, or None when
    calibration was off."""
    fusion: dict[str, Any] | None = None
    """The fusion with the first stage learned on the calibration queries (``es_rag_fusion.json``), or None."""
    safety: dict[str, Any] | None = None
    """The safety check on the calibration queries (``es_rag_safety.json``): does the reranker beat the fused order."""
    losses: list[float] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)
    """Learning curve: held-out nDCG@10 of the reranked first-stage head before training and after every epoch
    (:func:`curve_evaluator`), with the training loss of each epoch; empty when no query was held out."""
    held_out: list[str] = field(default_factory=list)
    """Ids of the judged training queries kept out of training (calibration, fusion weight and safety check data when
    the dataset has no ``calibration_split``); ``es-rag calibrate --split dev`` reuses them for this model."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


LOSSES = ("listwise", "pointwise")


def listwise_groups(pairs: Sequence[TrainingPair]) -> list[list[TrainingPair]]:
    """One group per positive: the positive first, then every hard negative of the same query.

    Other positives of the query are left out of the group (they are not negatives); a query without
    negatives gives no group.

    Args:
        pairs: Mined pairs (:func:`mine_pairs`).
    """
    positives: dict[str, list[TrainingPair]] = {}
    negatives: dict[str, list[TrainingPair]] = {}
    for p in pairs:
        (positives if p.label > 0 else negatives).setdefault(p.query_id, []).append(p)
    return [[pos, *negatives[q]] for q, group in positives.items() if negatives.get(q) for pos in group]


def _channel_lists(
    backend: Any, embedder: Any, text: str, flt: SearchFilter, depth: int, rank_constant: int
) -> dict[str, list[str]]:
    """The backend's BM25 and dense top ``depth`` chunk ids of ``text`` and their RRF list (``hybrid`` first)."""
    bm25 = [h.chunk_id for h in backend.bm25(text, flt, depth)]
    dense = [h.chunk_id for h in backend.knn(embedder.embed_query(text), flt, depth)]
    hybrid = [f.id for f in reciprocal_rank_fusion([bm25, dense], rank_constant=rank_constant)]
    return {"hybrid": hybrid, "bm25": bm25, "dense": dense}


def mine_pairs(
    backend: Any,
    embedder: Any,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    docs: dict[str, Hit],
    *,
    tenant: str,
    negatives_per_query: int,
    depth: int,
    rank_constant: int = 60,
    first_stage: Callable[[str], list[str]] | None = None,
) -> list[TrainingPair]:
    """Positives from qrels and hard negatives from the BM25, dense and hybrid candidates, or from the head the
    reranker will be given.

    Args:
        backend: Indexed backend with ``bm25`` and ``knn`` (the embedded backend).
        embedder: Query embedder.
        queries: Query id -> text (training split only).
        qrels: Query id -> doc id -> grade.
        docs: Doc id -> hit (for the passage text).
        tenant: Tenant the corpus was indexed under.
        negatives_per_query: Negatives kept per query.
        depth: Candidates per channel.
        rank_constant: RRF rank constant of the hybrid list.
        first_stage: The query's fused chunk ids as the search pipeline ranks them (:func:`pipeline_first_stage`);
            given, the negatives are the top non-relevant documents of its first ``depth`` (origin ``fused@rank``)
            and the teacher's rank is the rank there, so the model learns to reorder what it will rerank.
    """
    flt = SearchFilter(tenant)
    pairs: list[TrainingPair] = []
    for qid, qtext in queries.items():
        judged = qrels.get(qid, {})
        max_grade = max([g for g in judged.values() if g > 0], default=0)
        if max_grade == 0:
            continue
        lists = (
            {"fused": first_stage(qtext)[:depth]}
            if first_stage is not None
            else _channel_lists(backend, embedder, qtext, flt, depth, rank_constant)
        )
        fused_rank = {did: i + 1 for i, did in enumerate(next(iter(lists.values())))}
        for did, grade in judged.items():
            if grade > 0 and did in docs:
                pairs.append(
                    TrainingPair(qid, did, qtext, _passage(docs[did]), grade / max_grade, "qrels", fused_rank.get(did))
                )
        cursors = dict.fromkeys(lists, 0)
        taken: set[str] = set()
        while len(taken) < negatives_per_query and any(cursors[c] < len(lists[c]) for c in lists):
            for channel, ranked in lists.items():
                while cursors[channel] < len(ranked):
                    did = ranked[cursors[channel]]
                    cursors[channel] += 1
                    if judged.get(did, 0) <= 0 and did not in taken and did in docs:
                        taken.add(did)
                        origin = f"{channel}@{cursors[channel]}"
                        pairs.append(
                            TrainingPair(qid, did, qtext, _passage(docs[did]), 0.0, origin, fused_rank.get(did))
                        )
                        break
                if len(taken) >= negatives_per_query:
                    break
    return pairs


def _listwise_target(group: Sequence[TrainingPair], distill: float, depth: int) -> Any:
    """The listwise target of one group (positive first): one-hot on the positive, mixed with ``distill`` of the
    fused-order teacher (shares proportional to ``1 / fused rank``, rank ``depth + 1`` outside the fused list)."""
    import torch

    onehot = torch.zeros(len(group))
    onehot[0] = 1.0
    if distill <= 0:
        return onehot
    inverse = torch.tensor([1.0 / (p.fused_rank or depth + 1) for p in group])
    return (1.0 - distill) * onehot + distill * inverse / inverse.sum()


def pipeline_first_stage(index: Any, settings: Settings, tenant: str) -> Callable[[str], list[str]]:
    """The fused chunk ids of a query as the search pipeline ranks them before reranking (all its channels, fields,
    fusion and candidate depth): the candidates the rerank stage is given, so the ones to learn from.

    Args:
        index: An :class:`~es_rag.evaluation.index.EvalIndex`.
        settings: The index's settings (the reranker is left out).
        tenant: Tenant the corpus was indexed under.
    """
    from es_rag.pipeline import RagPipeline

    pipeline = RagPipeline(
        index.backend,
        embedder=index.embedder,
        settings=settings.replace(rerank_model=None),
        tokenizer=index.embedder.tokenizer(),
        reranker=None,
    )
    flt = SearchFilter(tenant)
    return lambda text: list(pipeline.search(text, flt).fused)


def train_cross_encoder(
    pairs: Sequence[TrainingPair],
    config: TrainingConfig,
    output_dir: str | Path,
    *,
    log: Callable[[str], None] | None = None,
    evaluate: Callable[[Callable[[Sequence[tuple[str, str]]], list[float]]], dict[str, Any]] | None = None,
    curve: list[dict[str, Any]] | None = None,
) -> tuple[int, list[float], float]:
    """Fine-tune a single-logit cross-encoder on ``pairs`` and save it; returns ``(steps, losses, seconds)``.

    Args:
        pairs: Training examples.
        config: Hyper-parameters.
        output_dir: Where the model is saved (a directory ``CrossEncoder`` can load).
        log: Receives a progress line every 10 steps.
        evaluate: Called before training and after every epoch (and after the last step when ``max_steps`` ends
            training mid-epoch) with a scorer of ``(query, passage)`` pairs (the model in eval mode, pairs truncated
            as in training); what it returns becomes one point of the learning curve.
        curve: Receives the learning-curve points (``epoch``, ``step``, ``train_loss`` of the steps since the last
            point, and what ``evaluate`` returned).

    Raises:
        ModelLoadError: When the base model cannot be loaded.
        InputError: When there is nothing to train on.
    """
    import torch

    if not pairs:
        raise InputError("train-reranker", "pairs", "no training pairs (no judged query found in the split)")
    ce = load_base(config.base_model, max_length=config.max_length, device=config.device, seed=config.seed)
    model, tok = ce.model, ce.tokenizer
    model.train()
    rng = random.Random(config.seed)
    if config.loss == "listwise":
        groups = listwise_groups(pairs)
        if not groups:
            raise InputError("train-reranker", "pairs", "no query has both a positive and a hard negative")
        per_step = max(1, config.batch_size // max(len(g) for g in groups))
    else:
        groups = [[p] for p in pairs]
        per_step = config.batch_size
    order: list[int] = []
    for _ in range(config.epochs):
        epoch = list(range(len(groups)))
        rng.shuffle(epoch)
        order.extend(epoch)
    steps = min(config.max_steps, math.ceil(len(order) / per_step))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.01)
    warmup = max(1, steps // 10)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (steps - step) / max(1, steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    bce = torch.nn.BCEWithLogitsLoss()
    losses: list[float] = []
    t0 = time.perf_counter()
    ends = {math.ceil(e * len(groups) / per_step): float(e) for e in range(1, config.epochs + 1)}
    epoch_ends = {s: e for s, e in ends.items() if s <= steps}
    epoch_ends.setdefault(steps, min(float(config.epochs), steps * per_step / len(groups)))

    def score_pairs(batch_pairs: Sequence[tuple[str, str]]) -> list[float]:
        return pair_logits(model, tok, batch_pairs, max_length=config.max_length, batch=32, truncation="only_second")

    def curve_point(step: int, epoch: float) -> None:
        if evaluate is None:
            return
        model.eval()
        metrics = evaluate(score_pairs)
        model.train()
        since = losses[len(losses) - (step - (curve[-1]["step"] if curve else 0)) :] if step else []
        point = {
            "epoch": round(epoch, 3),
            "step": step,
            "train_loss": round(sum(since) / len(since), 4) if since else None,
            **metrics,
        }
        if curve is not None:
            curve.append(point)
        if log:
            shown = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in point.items())
            log(f"learning curve: {shown} ({time.perf_counter() - t0:.0f}s)")

    curve_point(0, 0.0)
    for step in range(steps):
        chosen = [groups[i] for i in order[step * per_step : (step + 1) * per_step]]
        batch = [p for g in chosen for p in g]
        features = tok(
            [p.query for p in batch],
            [p.passage for p in batch],
            padding=True,
            truncation="only_second",
            max_length=config.max_length,
            return_tensors="pt",
        )
        logits = model(**features.to(model.device)).logits.view(-1)
        loss: Any
        if config.loss == "listwise":
            parts, weights, start = [], [], 0
            for g in chosen:
                log_p = torch.log_softmax(logits[start : start + len(g)], dim=0)
                target = _listwise_target(g, config.distill, config.mining_depth).to(log_p.device)
                parts.append(-(target * log_p).sum())  # the positive is first in its group
                weights.append(g[0].label)
                start += len(g)
            w = torch.tensor(weights, dtype=torch.float32)
            loss = (torch.stack(parts) * w).sum() / w.sum()
        else:
            loss = bce(logits, torch.tensor([p.label for p in batch], dtype=torch.float32))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(round(float(loss.item()), 5))
        if log and (step + 1) % 10 == 0:
            recent = losses[-10:]
            log(f"step {step + 1}/{steps} loss {sum(recent) / len(recent):.4f} ({time.perf_counter() - t0:.0f}s)")
        if step + 1 in epoch_ends:
            curve_point(step + 1, float(epoch_ends[step + 1]))
    model.eval()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    ce.save(str(out))
    return steps, losses, time.perf_counter() - t0


def train_reranker(
    dataset: str | Path,
    output_dir: str | Path,
    *,
    split: str = "train",
    settings: Settings | None = None,
    config: TrainingConfig | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    log: Callable[[str], None] | None = None,
    calibration_split: str | None = "dev",
    calibration_holdout: float = 0.2,
    learning_curve: bool = True,
) -> TrainingReport:
    """Mine hard negatives on ``split`` with es_rag's channels, fine-tune a cross-encoder, save it, then, on held-out
    queries, fit its calibration (:mod:`es_rag.evaluation.calibrate`), learn its fusion with the fused order and run
    the safety check (:mod:`es_rag.evaluation.rerank_safety`), and write ``es_rag_calibration.json``,
    ``es_rag_fusion.json`` and ``es_rag_safety.json`` beside it.

    Calibration data: ``calibration_split`` when the dataset has its qrels; otherwise the last
    ``calibration_holdout`` share of the judged training queries (at least one) is kept out of training and used.
    A calibration that cannot be fitted (e.g. the model does not rank yet) is reported and no calibration file is
    written; the fusion and the safety check then use the default calibration (the one the model is served with).

    Args:
        dataset: BEIR-layout folder.
        output_dir: Model output directory.
        split: Qrels split to train on; ``test`` is refused (it is for evaluation only).
        settings: Embedding model, analyzer and BM25 fields of the mining channels.
        config: Training hyper-parameters (default base model: the embedding model's weights).
        cache_dir: Embedding cache root.
        max_queries: Use only the first N training queries.
        log: Progress lines.
        calibration_split: Split to calibrate on when present; None = no calibration.
        calibration_holdout: Share of judged training queries held out for calibration when that split is absent
            (0 = no calibration then).
        learning_curve: Score the calibration queries' first-stage heads before training and after every epoch
            (:func:`curve_evaluator`; ``curve`` of the report and ``learning_curve.png`` beside the model).

    Raises:
        InputError: When ``split`` is ``test``, or ``calibration_split`` is ``test`` or the training split.
    """
    from es_rag.evaluation.beir import load_beir
    from es_rag.evaluation.index import EVAL_TENANT, build_index

    if split == "test":
        raise InputError(str(dataset), "split", "the test split is for evaluation only; train on train (or dev)")
    if calibration_split in ("test", split):
        raise InputError(
            str(dataset),
            "calibration_split",
            f"{calibration_split!r}: calibrate on a held-out split, not test or the training split",
        )
    if not 0.0 <= calibration_holdout < 1.0:
        raise ConfigError(f"calibration_holdout: must be within [0, 1), got {calibration_holdout}")
    settings = settings or Settings()
    config = config or TrainingConfig(base_model=settings.encoder.model)
    corpus, queries, qrels = load_beir(dataset, split)
    if max_queries is not None:
        keep = list(queries)[:max_queries]
        queries = {q: queries[q] for q in keep}
    held: dict[str, str] = {}
    cal_qrels: dict[str, dict[str, int]] = qrels
    has_split = calibration_split is not None and (Path(dataset) / "qrels" / f"{calibration_split}.tsv").is_file()
    if calibration_split is not None and not has_split and calibration_holdout > 0:
        judged = [q for q in queries if any(g > 0 for g in qrels.get(q, {}).values())]
        n_held = max(1, int(len(judged) * calibration_holdout)) if len(judged) >= 2 else 0
        held = {q: queries[q] for q in judged[len(judged) - n_held :]}
        queries = {q: t for q, t in queries.items() if q not in held}
    index = build_index(corpus, settings, cache_dir=cache_dir)
    docs = {h.chunk_id: h for h in index.hits()}
    first_stage = pipeline_first_stage(index, settings, EVAL_TENANT)
    pairs = mine_pairs(
        index.backend,
        index.embedder,
        queries,
        qrels,
        docs,
        tenant=EVAL_TENANT,
        negatives_per_query=config.negatives_per_query,
        depth=config.mining_depth,
        rank_constant=settings.fusion.rank_constant,
        first_stage=first_stage,
    )
    by_channel: dict[str, int] = {}
    for p in pairs:
        if p.origin != "qrels":
            channel = p.origin.split("@")[0]
            by_channel[channel] = by_channel.get(channel, 0) + 1
    if log:
        log(f"{len(queries)} queries -> {len(pairs)} pairs ({sum(by_channel.values())} hard negatives: {by_channel})")
    cal_queries: dict[str, str] = held
    cal_data: dict[str, Any] = {"dataset": str(dataset), "split": f"{split} (held out: {len(held)} queries)"}
    if has_split:
        assert calibration_split is not None
        _, cal_queries, cal_qrels = load_beir(dataset, calibration_split)
        cal_data = {"dataset": str(dataset), "split": calibration_split}
    evaluate = None
    if learning_curve and cal_queries:
        evaluate = curve_evaluator(first_stage, cal_queries, cal_qrels, docs, depth=settings.rerank.k)
    curve: list[dict[str, Any]] = []
    steps, losses, seconds = train_cross_encoder(pairs, config, output_dir, log=log, evaluate=evaluate, curve=curve)
    if plot_curve(curve, Path(output_dir) / CURVE_PLOT) and log:
        log(f"learning curve plot: {Path(output_dir) / CURVE_PLOT}")
    report = TrainingReport(
        output_dir=str(output_dir),
        base_model=config.base_model,
        dataset=str(dataset),
        split=split,
        queries=len(queries),
        pairs=len(pairs),
        positives=sum(1 for p in pairs if p.origin == "qrels"),
        negatives_by_channel=by_channel,
        steps=steps,
        seconds=round(seconds, 1),
        loss_first=round(sum(losses[:10]) / max(1, len(losses[:10])), 4),
        loss_last=round(sum(losses[-10:]) / max(1, len(losses[-10:])), 4),
        config=asdict(config),
        losses=losses,
        curve=curve,
        held_out=list(held),
    )
    if cal_queries:
        try:
            check = check_queries(index, cal_queries, cal_qrels, str(output_dir), settings=settings, data=cal_data)
        except InputError as exc:
            report.calibration = {"error": str(exc), "written": None}
        else:
            written = [str(p) for p in check.written(output_dir)]
            report.calibration = (
                {**check.calibration.to_file(), "written": written[0]}
                if check.calibration is not None
                else {"error": check.calibration_error, "written": None}
            )
            report.fusion = {**check.fusion.fusion_file(), "written": written[-2]}
            report.safety = {**check.fusion.safety_file(), "written": written[-1]}
        if log:
            log(f"calibration: {report.calibration}")
            if report.safety is not None:
                from es_rag.evaluation.rerank_safety import format_check

                log(format_check(check.fusion))
    (Path(output_dir) / TRAINING_META).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return report
