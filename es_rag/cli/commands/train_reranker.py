"""``es-rag train-reranker``: fine-tune a cross-encoder with hard negatives mined by es_rag."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from es_rag.cli.options import add_bm25_protocol, add_settings, bm25_preset, settings_from_args
from es_rag.cli.render import print_json
from es_rag.errors import ConfigError

HELP = "fine-tune a cross-encoder with hard negatives mined by es_rag (BEIR qrels, or SQuAD / golden questions)"
SCOPE = {
    "index": ("analyzer", "language", "languages", "bm25_k1", "bm25_b"),
    "encoder": ("model", "dims", "device"),
    "retrieve": ("bm25_fields", "bm25_tie_breaker", "query_language"),
    "fusion": ("rank_constant",),
    "rerank": ("k", "max_length", "long_text", "aggregation", "top_m", "batch_size"),
}
"""The mining channels, and the reranker set-up the held-out check scores with (calibration, fusion weight and safety
verdict hold for that set-up)."""


def register(sub: Any) -> None:
    """Add the ``train-reranker`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("train-reranker", help=HELP, description=HELP)
    src = p.add_argument_group(
        "training data: a BEIR folder (--dataset), or question -> passage data (--squad / --golden-train), which "
        "trains listwise within a time budget, with checkpoints, measuring within-article top-1 as it goes"
    )
    src.add_argument("--dataset", default=None, metavar="DIR", help="BEIR folder with a training split")
    src.add_argument(
        "--squad",
        action="append",
        default=[],
        metavar="FILE",
        help="SQuAD-format JSON (data[].paragraphs[].context, qas[].question); a paragraph is a passage (repeatable)",
    )
    src.add_argument(
        "--golden-train",
        nargs=2,
        action="append",
        default=[],
        metavar=("GOLDEN", "DOCS"),
        help="a golden file with answer spans and its documents folder; a blank-line paragraph is a passage "
        "(repeatable)",
    )
    src.add_argument(
        "--exclude-golden",
        action="append",
        default=[],
        metavar="GOLDEN",
        help="leave out the articles this golden file's questions come from (by question-id prefix or document "
        "name), so the set can measure the model (repeatable)",
    )
    src.add_argument(
        "--eval-golden",
        nargs=2,
        action="append",
        default=[],
        metavar=("GOLDEN", "DOCS"),
        help="also measure within-article top-1 on this golden set at every measurement (repeatable)",
    )
    q = p.add_argument_group("question -> passage training (--squad / --golden-train)")
    q.add_argument(
        "--time-budget",
        type=float,
        default=60.0,
        metavar="MINUTES",
        help="minutes of training, measurements included; the step count is fitted to it after 10 steps, so the "
        "learning rate's decay ends with it; --max-steps caps it (%(default)s)",
    )
    q.add_argument("--groups-per-step", type=int, default=4, help="questions per optimizer step (%(default)s)")
    q.add_argument(
        "--holdout", type=float, default=0.05, help="share of articles held apart for measurement (%(default)s)"
    )
    q.add_argument(
        "--train-questions",
        type=int,
        default=None,
        metavar="N",
        help="mine and train on a seeded sample of N training questions (default: all; an hour on 2 CPU cores trains "
        "on about 3,000, and mining costs about 30 ms a question)",
    )
    q.add_argument(
        "--eval-questions", type=int, default=300, help="questions measured per set at each point (%(default)s)"
    )
    q.add_argument("--eval-every", type=int, default=200, help="steps between measurements (%(default)s)")
    q.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue from the checkpoint and mined groups in --out when present (%(default)s)",
    )
    q.add_argument("--checkpoint-minutes", type=float, default=5.0, help="minutes between checkpoints (%(default)s)")
    q.add_argument("--seed", type=int, default=13, help="data order, hold-apart and head seed (%(default)s)")
    q.add_argument(
        "--ship",
        default=None,
        metavar="DIR",
        help="after training, write the model to DIR as es_rag ships one: int8 ONNX, tokenizer, config and a model "
        "card (es_rag_model.json) with the data, licence, this command and the last measurement; "
        "--rerank-model DIR loads it (es_rag/models/reranker-en is the shipped English one: make reranker-en)",
    )
    q.add_argument(
        "--licence", default=None, metavar="TEXT", help="the licence statement --ship writes into the model card"
    )
    p.add_argument("--split", default="train", help="training split (test is refused) (%(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="where the trained model is saved")
    p.add_argument("--base", default=None, metavar="MODEL_OR_PATH", help="start checkpoint (default: embedding model)")
    p.add_argument("--index-dir", default=None, metavar="DIR", help="embedding cache root")
    p.add_argument("--max-queries", type=int, default=None, help="train on the first N queries only")
    g = p.add_argument_group("training")
    g.add_argument(
        "--max-steps", type=int, default=None, help="optimizer steps (default: 300; with --squad: the time budget's)"
    )
    g.add_argument("--batch-size", type=int, default=16, help="(query, passage) pairs per step (%(default)s)")
    g.add_argument(
        "--epochs", type=int, default=1, help="passes over the training data, bounded by --max-steps (%(default)s)"
    )
    g.add_argument(
        "--loss",
        choices=["listwise", "pointwise"],
        default="listwise",
        help="listwise: softmax cross-entropy of each positive against its query's hard negatives "
        "(batch-size // group size groups per step); pointwise: binary cross-entropy per pair (%(default)s)",
    )
    g.add_argument("--max-length", type=int, default=256, help="tokens per (query, passage) pair (%(default)s)")
    g.add_argument("--negatives", type=int, default=7, help="hard negatives per query (%(default)s)")
    g.add_argument(
        "--learning-rate", type=float, default=None, help="AdamW peak learning rate (default: 3e-5; with --squad: 1e-4)"
    )
    g.add_argument(
        "--distill",
        type=float,
        default=0.0,
        metavar="WEIGHT",
        help="weight of the fused order as a teacher in the listwise target: (1 - WEIGHT) x the judged positive + "
        "WEIGHT x shares proportional to 1 / fused rank of each group's documents; 0 = labels alone (%(default)s)",
    )
    g.add_argument(
        "--learning-curve",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score the held-out queries' first-stage heads before training and after every epoch: nDCG@10 per epoch "
        "in the report (curve) and learning_curve.png beside the model (%(default)s)",
    )
    c = p.add_argument_group(
        "calibration, fusion and safety check on held-out queries (es_rag_calibration.json, es_rag_fusion.json and "
        "es_rag_safety.json beside the model; see also `es-rag calibrate`)"
    )
    c.add_argument(
        "--calibration-split",
        default="dev",
        metavar="SPLIT|off",
        help="split the temperature, bias, no-answer threshold and fusion weight are fitted on, and the safety check "
        "(nDCG@10 against the fused order, paired bootstrap CI) runs on, after training; when the dataset has no such "
        "qrels, --calibration-holdout of the training queries is kept out of training instead; off = none of them "
        "(%(default)s)",
    )
    c.add_argument(
        "--calibration-holdout",
        type=float,
        default=0.2,
        metavar="SHARE",
        help="share of judged training queries held out for calibration when --calibration-split is absent "
        "(%(default)s)",
    )
    add_bm25_protocol(p)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``train-reranker``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.evaluation.train_reranker import TrainingConfig, train_reranker

    settings = settings_from_args(args, presets=[bm25_preset(args)])
    if (args.dataset is None) == (not args.squad and not args.golden_train):
        raise ConfigError("training data: give either --dataset DIR or --squad FILE / --golden-train GOLDEN DOCS")
    if args.dataset is None:
        return _run_passages(args, settings)
    config = TrainingConfig(
        base_model=args.base or settings.encoder.model,
        negatives_per_query=args.negatives,
        max_steps=args.max_steps if args.max_steps is not None else 300,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate if args.learning_rate is not None else 3e-5,
        max_length=args.max_length,
        loss=args.loss,
        epochs=args.epochs,
        device=settings.encoder.device,
        distill=args.distill,
    )
    report = train_reranker(
        args.dataset,
        args.out,
        split=args.split,
        settings=settings,
        config=config,
        cache_dir=args.index_dir,
        max_queries=args.max_queries,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        calibration_split=None if args.calibration_split.lower() in ("off", "none") else args.calibration_split,
        calibration_holdout=args.calibration_holdout,
        learning_curve=args.learning_curve,
    )
    summary = report.to_dict()
    summary.pop("losses")
    print_json(summary)
    return 0


def _run_passages(args: argparse.Namespace, settings: Any) -> int:
    """``train-reranker --squad`` / ``--golden-train``: listwise training on question -> passage data."""
    from es_rag.evaluation.group_trainer import GroupTrainConfig
    from es_rag.evaluation.passage_reranker import load_training_data, train_passage_reranker
    from es_rag.evaluation.passages import load_golden

    data = load_training_data(args.squad, [tuple(g) for g in args.golden_train], exclude_golden=args.exclude_golden)
    config = GroupTrainConfig(
        base_model=args.base or settings.encoder.model,
        groups_per_step=args.groups_per_step,
        max_steps=args.max_steps if args.max_steps is not None else 100_000,
        time_budget_s=args.time_budget * 60 if args.time_budget > 0 else None,
        learning_rate=args.learning_rate if args.learning_rate is not None else 1e-4,
        max_length=args.max_length,
        seed=args.seed,
        device=settings.encoder.device,
        eval_every=args.eval_every,
        checkpoint_every_s=args.checkpoint_minutes * 60,
    )
    eval_sets = [(Path(g).parent.name or Path(g).stem, load_golden(g, docs)) for g, docs in args.eval_golden]
    report = train_passage_reranker(
        data,
        args.out,
        config,
        settings=settings,
        negatives=args.negatives,
        holdout=args.holdout,
        train_questions=args.train_questions,
        eval_questions=args.eval_questions if args.eval_questions > 0 else None,
        eval_sets=eval_sets,
        resume=args.resume,
        cache_dir=args.index_dir,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        progress=True,
    )
    if args.ship:
        from es_rag.cross_encoder.shipped import export_shipped

        last = report["curve"][-1] if report["curve"] else {}
        shipped = export_shipped(
            args.out,
            args.ship,
            max_length=args.max_length,
            card_fields={
                "base": config.base_model,
                "trained_by": shlex.join(getattr(args, "command_line", ["es-rag", "train-reranker"])),
                "data": report["data"]["sources"],
                "data_sha256": {f: _sha256(f) for f in report["data"]["sources"]},
                "seed": config.seed,
                "groups_mined": report["data"]["groups"],
                "questions_seen": report["steps"] * config.groups_per_step,
                "steps": report["steps"],
                "seconds": report["seconds"],
                "measured": last,
                "licence": args.licence,
            },
        )
        report["shipped"] = str(shipped)
        print(f"shipped: {shipped}", file=sys.stderr, flush=True)
    print_json(report)
    return 0


def _sha256(path: str) -> str:
    """The SHA-256 of a training data file (recorded in the model card)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
