"""``es-rag search``: hybrid retrieval, rerank, selection and the packed context for one query."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from es_rag.cli.options import (
    SEARCH_SCOPE,
    add_filters,
    add_json,
    add_mmr_preset,
    add_principal,
    add_settings,
    add_target,
    existing_index_dir,
    mmr_preset,
    non_empty_query,
    reading_backend,
    search_filter,
    settings_from_args,
)
from es_rag.cli.render import print_json, print_result

HELP = "hybrid search + rerank + selection + packed context"


def register(sub: Any) -> None:
    """Add the ``search`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("search", help=HELP, description=HELP)
    p.add_argument("query", type=non_empty_query)
    add_json(p, "print hits, context and trace as JSON")
    add_principal(p)
    add_filters(p)
    add_target(p)
    sections = add_settings(p, SEARCH_SCOPE)
    add_mmr_preset(sections["select"])


def run(args: argparse.Namespace) -> int:
    """Run ``search``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.cli import resident
    from es_rag.wiring import build_embedder, build_pipeline, cluster_settings, index_settings

    settings = settings_from_args(args, presets=[mmr_preset(args)])
    flt = search_filter(args, settings)
    index_dir = existing_index_dir(args)
    if index_dir is not None and not resident.serving():  # es-rag serve holds this index's models: it answers
        answer = resident.forward(index_dir, args.command_line[1:])
        if answer is not None:
            sys.stdout.write(str(answer.get("stdout", "")))
            sys.stderr.write(str(answer.get("stderr", "")))
            return int(answer["rc"])
    settings = index_settings(settings, index_dir)  # the index's own embedding model unless one was given
    if index_dir is not None and resident.serving():
        ready = settings

        def build() -> Any:
            backend = reading_backend(args, ready, index_dir)
            pipeline = build_pipeline(ready, backend, build_embedder(ready))
            resident.prime(pipeline, backend)  # a served search never waits for a model or a first run
            return pipeline

        result = resident.WARM.get(repr(settings), index_dir, build).search(args.query, flt)
        result.trace.paths["resident"] = f"es-rag serve (pid {os.getpid()})"
    else:
        backend = reading_backend(args, settings, index_dir)
        if index_dir is None:
            settings = cluster_settings(settings, backend)  # the index's own embedding model unless one was given
        embedder = build_embedder(settings)
        result = build_pipeline(settings, backend, embedder).search(args.query, flt)
    if args.json:
        print_json(result.to_dict())
    else:
        print_result(result)
    return 0
