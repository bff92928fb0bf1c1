"""``es-rag calibrate``: fit a cross-encoder's temperature, bias and no-answer threshold on labelled queries and
write its calibration file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from es_rag.cli.options import (
    QUERY_ENCODER,
    SEARCH_INDEX,
    acl_groups,
    add_bm25_protocol,
    add_json,
    add_principal,
    add_settings,
    add_target,
    bm25_preset,
    existing_index_dir,
    reading_backend,
    settings_from_args,
    uses_cluster,
)
from es_rag.cli.render import print_json, progress
from es_rag.errors import ConfigError

FLOOR_FILE = "es_rag_gate.toml"
"""Where ``--gate-floor`` writes its settings file by default."""
HELP = "fit a cross-encoder's calibration (temperature, bias, no-answer threshold) on labelled queries"
DESCRIPTION = (
    HELP + ". The model is --rerank-model; labels come from a BEIR folder's split (--dataset, indexed on the "
    "embedded backend) or a golden JSONL file (--golden) run against your own index (--index-dir or --es). "
    "Temperature and bias: Platt scaling of the raw logit; threshold: the one of the best no-answer accuracy "
    "(a query is answerable when a relevant candidate reaches the gate). Writes es_rag_calibration.json into "
    "--out (default: the model directory), where search, eval and the gate read it. With --dataset it also learns "
    "the reranker's fusion with the fused order (es_rag_fusion.json: rrf or interpolate and the weight) and runs the "
    "safety check (es_rag_safety.json: nDCG@10 against the fused order with a paired bootstrap CI; a model marked "
    "hurts is not used by search). --split dev on a dataset without qrels/dev.tsv uses the training queries "
    "train-reranker held out of training this model. With --gate-floor no cross-encoder is needed: it fits the "
    "gate's dense floor (gate_min_dense: no answer when no candidate's kNN score reaches it) on a --golden file "
    'holding questions whose answer is not in the index ("gold": []) beside answerable ones, and writes it as a '
    "settings file (--out FILE, default es_rag_gate.toml) for --settings."
)


SCOPE = {
    "index": SEARCH_INDEX,
    "encoder": QUERY_ENCODER,
    "retrieve": None,
    "fusion": None,
    "dedup": None,
    "rerank": ("model", "k", "batch_size", "max_length", "long_text", "aggregation", "top_m", "backend"),
    "connection": ("request_timeout",),
}
"""Everything up to the reranker's raw scores (the gate, selection and packing do not change what is fitted)."""


def register(sub: Any) -> None:
    """Add the ``calibrate`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("calibrate", help=HELP, description=DESCRIPTION)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", metavar="DIR", help="BEIR folder: corpus*.jsonl, queries.jsonl, qrels/SPLIT.tsv")
    src.add_argument("--golden", metavar="FILE", help="golden JSONL file (docs/evaluation.md), run on your index")
    p.add_argument("--split", default="dev", help="qrels split of --dataset; test is refused (%(default)s)")
    p.add_argument("--max-queries", type=int, default=None, help="fit on the first N queries only")
    p.add_argument(
        "--gate-floor",
        action="store_true",
        help="with --golden: fit the gate's dense floor (gate_min_dense) instead of a cross-encoder's calibration, "
        'on answerable questions and questions whose answer is not in the index ("gold": []); writes a '
        "settings file",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="directory the calibration file is written to (default: --rerank-model when it is a directory); "
        f"with --gate-floor: the settings file written (default {FLOOR_FILE})",
    )
    p.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    add_json(p, "print the fit as JSON")
    add_principal(p, tenant_required=False)
    add_target(
        p,
        es_help="--golden: run the questions on this cluster (default: the embedded index)",
        index_dir_help="--golden: the embedded index (default .es_rag/index); --dataset: the embedding cache root",
    )
    add_bm25_protocol(p)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``calibrate``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.evaluation.calibrate import calibrate_beir, calibrate_golden, format_fit, write_calibration
    from es_rag.evaluation.rerank_safety import format_check

    settings = settings_from_args(args, presets=[bm25_preset(args)])
    if args.gate_floor:
        return _gate_floor(args, settings)
    model = settings.rerank.model
    if model is None:
        raise ConfigError("--rerank-model: calibrate needs a cross-encoder, not none")
    out = args.out or (model if Path(model).is_dir() else None)
    if out is None and not args.dry_run:
        raise ConfigError(f"--out: {model!r} is not a local directory; say where the calibration file goes")
    if args.dataset and (uses_cluster(args) or args.tenant or args.acl):
        raise ConfigError(
            "--es/--cloud-id/--tenant/--acl apply to --golden only (--dataset indexes the BEIR corpus on the embedded "
            "backend under its own tenant)"
        )
    if args.dataset:
        check = calibrate_beir(
            args.dataset,
            model,
            split=args.split,
            settings=settings,
            cache_dir=args.index_dir,
            max_queries=args.max_queries,
            progress=progress(),
        )
        paths = [] if args.dry_run else check.written(str(out))
        if args.json:
            print_json({**check.summary(), "written": [str(p) for p in paths]})
            return 0
        if check.calibration is not None:
            print(format_fit(check.calibration))
        else:
            print(f"calibration not fitted: {check.calibration_error}")
        print(format_check(check.fusion))
        print("written: " + ", ".join(str(p) for p in paths) if paths else "dry run: nothing written")
        return 0
    from es_rag.wiring import build_embedder

    fit = calibrate_golden(
        args.golden,
        model,
        backend=reading_backend(args, settings, existing_index_dir(args)),
        embedder=build_embedder(settings),
        settings=settings,
        tenant=args.tenant,
        groups=acl_groups(args.acl),
        progress=progress(),
    )
    path = None if args.dry_run else write_calibration(fit, str(out))
    if args.json:
        print_json({**fit.to_file(), "written": str(path) if path else None})
    else:
        print(format_fit(fit))
        print(f"written: {path}" if path else "dry run: nothing written")
    return 0


def _gate_floor(args: argparse.Namespace, settings: Any) -> int:
    """``calibrate --gate-floor``: fit ``gate_min_dense`` on a golden file and write it as a settings file."""
    from es_rag.evaluation.floor import calibrate_floor, floor_file, format_floor
    from es_rag.wiring import build_embedder

    if not args.golden:
        raise ConfigError("--gate-floor fits on your own questions: give --golden FILE, not --dataset")
    out = Path(args.out or FLOOR_FILE)
    if out.is_dir():
        raise ConfigError(f"--out {out}: a folder; with --gate-floor give the settings file to write")
    fit = calibrate_floor(
        args.golden,
        backend=reading_backend(args, settings, existing_index_dir(args)),
        embedder=build_embedder(settings),
        settings=settings,
        tenant=args.tenant,
        groups=acl_groups(args.acl),
        progress=progress(),
    )
    written = None
    if not args.dry_run:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(floor_file(fit), encoding="utf-8")
        written = str(out)
    if args.json:
        print_json({**fit.to_dict(), "written": written})
    else:
        print(format_floor(fit))
        print(f"written: {written} (search, eval: --settings {written})" if written else "dry run: nothing written")
    return 0
