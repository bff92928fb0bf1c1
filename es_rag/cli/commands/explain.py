"""``es-rag explain``: print the Elasticsearch request(s) a search sends, ready for Kibana Dev Tools."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from es_rag.cli.options import (
    add_filters,
    add_principal,
    add_settings,
    add_target,
    connect,
    non_empty_query,
    search_filter,
    settings_from_args,
    uses_cluster,
)

HELP = "print the Elasticsearch request(s) a search sends (no cluster needed)"
SCOPE = {
    "index": ("prefix", "language", "languages", "metadata_fields"),
    "encoder": ("model", "dims", "inference_id", "vector_mode", "fit_check"),
    "retrieve": None,
    "fusion": None,
    "rerank": ("model", "k", "inference_id", "min_score"),
    "select": ("context_k", "mmr_lambda", "mmr_path"),
    "connection": ("request_timeout",),
}


def register(sub: Any) -> None:
    """Add the ``explain`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("explain", help=HELP, description=HELP)
    p.add_argument("query", type=non_empty_query)
    p.add_argument(
        "--format", choices=["console", "json"], default="console", help="Dev Tools console or JSON (%(default)s)"
    )
    p.add_argument(
        "--no-vector",
        action="store_true",
        help="do not load the embedding model; use a unit-vector placeholder of --vector-dims",
    )
    p.add_argument(
        "--template",
        action="store_true",
        help="print the _search/template call of the stored hybrid template (with its params) instead",
    )
    add_principal(p)
    add_filters(p)
    add_target(p, embedded=False)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``explain``. Without ``--es`` and with ``--fusion-path auto`` both fusion paths are printed.

    Args:
        args: Parsed arguments.
    """
    from es_rag.explain import explain_text

    settings = settings_from_args(args)
    flt = search_filter(args, settings)
    backend = connect(args, settings) if uses_cluster(args) else None
    if args.no_vector:
        # A unit vector: valid for cosine (no zero magnitude) and dot_product (unit length) alike.
        vector: Any = [1.0] + [0.0] * (settings.encoder.dims - 1)
    else:
        from es_rag.encoders.fit import language_misfit
        from es_rag.query import bm25_route
        from es_rag.settings import DenseFitCheck
        from es_rag.wiring import build_embedder

        embedder = build_embedder(settings)
        vector = embedder.embed_query(args.query).tolist()
        language = bm25_route(args.query, settings).language.code
        if settings.encoder.fit_check is DenseFitCheck.AUTO and language:
            verdict = language_misfit(embedder, language, sample=args.query)
            if verdict is not None and verdict[0] is not None and args.template:
                # the stored template has no way to leave its kNN child out: a caller sends the vector regardless
                print(
                    f"es-rag explain: the embedding model misfits query language {language} ({verdict[0]}): "
                    "es-rag search leaves the dense channel out for it, the stored template cannot and runs it",
                    file=sys.stderr,
                )
            elif verdict is not None and verdict[0] is not None:
                # what search does (RagPipeline._language_misfit): no dense channel for this query's language
                vector = None
                print(
                    f"es-rag explain: no dense channel: weight 0 for query language {language}, the embedding "
                    f"model misfits it ({verdict[0]}); --dense-fit-check off prints it",
                    file=sys.stderr,
                )
    text = explain_text(args.query, vector, flt, settings, backend=backend, template=args.template, fmt=args.format)
    print(text, end="" if args.format == "console" else "\n")
    return 0
