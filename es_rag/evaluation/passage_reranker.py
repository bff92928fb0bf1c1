"""``es-rag train-reranker --squad FILE``: train a cross-encoder on question -> passage data (SQuAD JSON or golden
sets with spans), measured within articles while it trains.

1. Read the data (:mod:`es_rag.evaluation.passages`) and hold apart a seeded share of its articles.
2. Mine each training question's hard negatives with es_rag's own retrieval (:mod:`es_rag.evaluation.rerank_groups`)
   over an in-memory index of every passage, and write them to ``<out>/groups.jsonl`` (a resumed run reads them).
3. Train listwise within a time budget, with checkpoints (:mod:`es_rag.evaluation.group_trainer`), measuring the
   within-article top-1 of the held-apart questions (and of an evaluation golden set, when given) as it goes.
4. Save the model and ``es_rag_training.json`` (data, settings, the learning curve) in ``<out>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from es_rag.errors import InputError
from es_rag.evaluation.group_trainer import GroupTrainConfig, epochs_of, train_groups
from es_rag.evaluation.passages import PassageSet, golden_articles, load_golden, load_squad, sample, split_holdout
from es_rag.evaluation.rerank_groups import (
    Scorer,
    channel_first_stage,
    mine_groups,
    mining_corpus,
    read_groups,
    within_article,
    write_groups,
)
from es_rag.settings import Settings

GROUPS_FILE = "groups.jsonl"
REPORT_FILE = "es_rag_training.json"


def load_training_data(
    squad: Sequence[str | Path],
    golden: Sequence[tuple[str | Path, str | Path]] = (),
    *,
    exclude_golden: Sequence[str | Path] = (),
) -> PassageSet:
    """Every SQuAD file and golden set (with its docs folder) as one :class:`PassageSet`, without the articles of the
    ``exclude_golden`` files' questions (so a set measured later is not trained on).

    Raises:
        InputError: No data given, or a file is unreadable.
    """
    if not squad and not golden:
        raise InputError("train-reranker", "--squad", "give at least one SQuAD file or golden set to train on")
    banned: set[str] = set()
    for g in exclude_golden:
        banned |= golden_articles(g)
    data = PassageSet()
    for path in squad:
        data.extend(load_squad(path, exclude_titles=banned, exclude_ids=banned))
    for file, docs in golden:
        part = load_golden(file, docs)
        if banned:
            keep = {i for i, a in enumerate(part.articles) if Path(a.origin).stem not in banned}
            part.skipped["excluded article"] = len(part.articles) - len(keep)
            part.questions = [q for q in part.questions if q.article in keep]
        data.extend(part)
    if not data.questions:
        raise InputError("train-reranker", "--squad", "no answerable question in the training data")
    return data


def train_passage_reranker(
    data: PassageSet,
    output_dir: str | Path,
    config: GroupTrainConfig,
    *,
    settings: Settings | None = None,
    negatives: int = 7,
    mining_depth: int = 30,
    holdout: float = 0.05,
    train_questions: int | None = None,
    eval_questions: int | None = 300,
    eval_sets: Sequence[tuple[str, PassageSet]] = (),
    resume: bool = True,
    cache_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Mine, train and measure (see the module doc); returns the report written to ``es_rag_training.json``.

    Args:
        data: Training data (:func:`load_training_data`).
        output_dir: Model directory.
        config: Trainer settings (time budget, steps, learning rate, ...).
        settings: The retrieval negatives are mined with (embedding model, analyzer, BM25 fields, fusion).
        negatives: Hard negatives per question.
        mining_depth: Fused candidates per question looked at for negatives.
        holdout: Share of the articles held apart for measurement (0: none).
        train_questions: Mine and train on at most this many training questions (seeded sample; None: all). An hour
            on 2 CPU cores trains on about 3,000; mining costs about 30 ms a question.
        eval_questions: Questions measured per set at each point (seeded sample; None: all).
        eval_sets: Further sets to measure, ``(name, data)`` (e.g. a golden set with its documents).
        resume: Continue from a checkpoint and mined groups in ``output_dir`` when present.
        cache_dir: Embedding cache root of the mining index.
        log: Progress lines.
        progress: Progress bars.
    """
    from es_rag.evaluation.index import EVAL_TENANT, build_index

    settings = settings or Settings()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, held = split_holdout(data, holdout, config.seed)
    forbidden = {(q.article, q.passage) for q in held.questions}
    held_articles = {q.article for q in held.questions}
    forbidden |= {
        (a, p)
        for a in held_articles
        if len(data.articles[a].passages) <= 50
        for p in range(len(data.articles[a].passages))
    }
    groups_path = out / GROUPS_FILE
    if resume and groups_path.is_file():
        groups = read_groups(groups_path)
        if log:
            log(f"{len(groups)} mined groups read from {groups_path}")
    else:
        index = build_index(mining_corpus(data), settings, cache_dir=cache_dir, progress=progress)
        first_stage = channel_first_stage(index, settings, EVAL_TENANT, mining_depth)
        groups = mine_groups(
            data,
            sample(train.questions, train_questions, config.seed),
            first_stage,
            negatives=negatives,
            depth=mining_depth,
            forbidden=forbidden,
            seed=config.seed,
            progress=progress,
        )
        write_groups(groups, groups_path)
    origins: dict[str, int] = {}
    for g in groups:
        for o in g.origins:
            kind = o.split("@")[0]
            origins[kind] = origins.get(kind, 0) + 1
    if log:
        log(f"{len(train.questions)} training questions -> {len(groups)} groups; negatives: {origins}")
    measured: list[tuple[str, PassageSet, list[Any], int | None]] = []
    if held.questions:
        measured.append(("held_apart", data, sample(held.questions, eval_questions, config.seed), 10))
    for name, extra in eval_sets:
        measured.append((name, extra, sample(extra.questions, eval_questions, config.seed), None))

    def evaluate(score: Scorer) -> dict[str, Any]:
        point: dict[str, Any] = {}
        for name, part, questions, cap in measured:
            result = within_article(score, part, questions, max_passages=cap)
            point[f"{name}_top1"] = result["top1"]
            point[f"{name}_mrr"] = result["mrr"]
            point[f"{name}_chance"] = result["chance"]
        return point

    state = train_groups(
        groups, config, out, evaluate=evaluate if measured else None, resume=resume, log=log, progress=progress
    )
    report = {
        "output_dir": str(out),
        "base_model": config.base_model,
        "data": {
            **data.summary(),
            "sources": sorted({a.origin for a in data.articles}),
            "training_questions": len(train.questions),
            "held_apart_questions": len(held.questions),
            "groups": len(groups),
            "negatives_by_origin": origins,
        },
        "measured": {name: {"questions": len(qs), "max_passages": cap} for name, _, qs, cap in measured},
        "config": {
            **asdict(config),
            "negatives": negatives,
            "mining_depth": mining_depth,
            "holdout": holdout,
            "train_questions": train_questions,
        },
        "steps": state.step,
        "epochs": epochs_of(state, config, len(groups)),
        "seconds": round(state.seconds, 1),
        "resumed_from_step": state.resumed_from,
        "loss_first": _mean((state.losses or [])[:50]),
        "loss_last": _mean((state.losses or [])[-50:]),
        "curve": state.curve,
    }
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None
