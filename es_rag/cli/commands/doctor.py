"""``es-rag doctor``: what the cluster (or this machine) supports and which path each stage takes."""

from __future__ import annotations

import argparse
from typing import Any

from es_rag.cli.options import add_json, add_settings, add_target, connect, settings_from_args, uses_cluster
from es_rag.cli.render import print_json, print_tree

HELP = "what the cluster (or this machine) supports and which path each stage takes"
SCOPE = {
    "index": ("prefix", "analyzer", "language", "languages"),
    "encoder": ("model", "inference_id", "vector_mode", "semantic_chunking", "device", "precision"),
    "fusion": ("path", "method", "normalizer", "channel_weights"),
    "rerank": ("model",),
    "connection": ("request_timeout",),
}


def register(sub: Any) -> None:
    """Add the ``doctor`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("doctor", help=HELP, description=HELP)
    add_json(p, "print the report as JSON")
    p.add_argument(
        "--load-models",
        action="store_true",
        help="without --es: load the models to prove they work (seconds each; by default they are only located)",
    )
    add_target(p, embedded=False)
    add_settings(p, SCOPE, defaults={"analyzer": "auto"})


def run(args: argparse.Namespace) -> int:
    """Run ``doctor``: on the cluster given, else on this machine (models, embedded paths).

    Args:
        args: Parsed arguments.
    """
    from es_rag.doctor import local_doctor

    report: dict[str, Any]
    if uses_cluster(args):
        with connect(args, settings_from_args(args, resolve=False)) as backend:
            report = backend.doctor()
    else:
        report = local_doctor(settings_from_args(args), load_models=args.load_models)
    if args.json:
        print_json(report)
    else:
        print_tree(report)
    return 0
