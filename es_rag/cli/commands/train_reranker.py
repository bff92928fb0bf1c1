"""``es-rag train-reranker``: fine-tune a cross-encoder with hard negatives mined by es_rag."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from es_rag.cli.options import add_bm25_protocol, add_settings, bm25_preset, settings_from_args
from es_rag.cli.render import print_json

HELP = "fine-tune a cross-encoder with hard negatives mined by es_rag"
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
    p.add_argument("--dataset", required=True, metavar="DIR", help="BEIR folder with a training split")
    p.add_argument("--split", default="train", help="training split (test is refused) (%(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="where the trained model is saved")
    p.add_argument("--base", default=None, metavar="MODEL_OR_PATH", help="start checkpoint (default: embedding model)")
    p.add_argument("--index-dir", default=None, metavar="DIR", help="embedding cache root")
    p.add_argument("--max-queries", type=int, default=None, help="train on the first N queries only")
    g = p.add_argument_group("training")
    g.add_argument("--max-steps", type=int, default=300, help="optimizer steps (%(default)s)")
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
    g.add_argument("--learning-rate", type=float, default=3e-5, help="(%(default)s)")
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
    config = TrainingConfig(
        base_model=args.base or settings.encoder.model,
        negatives_per_query=args.negatives,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
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
