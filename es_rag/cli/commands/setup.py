"""``es-rag setup``: install ingest pipelines, index templates and the stored search template."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from es_rag.cli.options import add_settings, add_target, connect, settings_from_args, uses_cluster
from es_rag.errors import EsRagError

HELP = "install ingest pipelines, index templates and the stored search template (idempotent)"
SCOPE = {"index": None, "encoder": ("dims", "inference_id", "vector_mode", "semantic_chunking",
         "semantic_max_chunk_size", "semantic_overlap"), "connection": ("request_timeout",)}  # fmt: skip
DEFAULTS = {"analyzer": "auto"}
"""setup resolves ``analyzer=auto`` against the cluster's plugins (doctor and selftest do too)."""


def register(sub: Any) -> None:
    """Add the ``setup`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("setup", help=HELP, description=HELP)
    p.add_argument("--dry-run", action="store_true", help="print the requests instead of sending them")
    p.add_argument("--format", choices=["console", "json"], default="console", help="--dry-run output (%(default)s)")
    p.add_argument("--no-create-indices", action="store_true", help="only install templates and pipelines")
    add_target(p, embedded=False)
    add_settings(p, SCOPE, defaults=DEFAULTS)


def run(args: argparse.Namespace) -> int:
    """Run ``setup``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.elasticsearch.assets import index_creation_requests, resolve_analyzer, setup_requests
    from es_rag.es_request import render
    from es_rag.languages import resolve_languages

    settings = settings_from_args(args, resolve=False)
    backend = connect(args, settings) if uses_cluster(args) else None
    if not args.dry_run and backend is None:
        raise EsRagError("setup needs --es URL (or --dry-run to print the requests)")
    # --analyzer auto: probe the cluster's plugins (read-only GETs), or without one take the no-plugin branch
    plugins = backend.probe().analysis_plugins if backend is not None else None
    choice = resolve_analyzer(settings.index.analyzer, plugins=plugins, language=settings.index.language)
    languages = resolve_languages(settings.index.languages, plugins=plugins)
    note = f"analyzer {choice.analyzer.value}: {choice.reason}"
    if languages:
        note += f"; language subfields {', '.join(languages)}"
    settings = settings.replace(analyzer=choice.analyzer, languages=languages)
    if args.dry_run:
        # with a cluster, rendered for its version; without one, for the newest
        version = backend.version() if backend is not None and settings.index.vector_rescore() is not None else None
        reqs = setup_requests(settings, version=version) + (
            [] if args.no_create_indices else index_creation_requests(settings)
        )
        if args.format == "console":
            print(f"# {note}")
            print(render(reqs, "console"), end="")
        else:
            print(f"es-rag setup: {note}", file=sys.stderr)
            print(render(reqs, "json"))
        return 0
    assert backend is not None
    backend.settings = settings
    print(note)
    for row in backend.setup(create_indices=not args.no_create_indices):
        print(f"{row['request']}: {row['acknowledged']}")
    return 0
