"""``es-rag sources``: a tenant's sources, with the version served and the chunks and parents stored."""

from __future__ import annotations

import argparse
from typing import Any

from es_rag.cli.options import (
    add_json,
    add_settings,
    add_target,
    connection_kwargs,
    existing_index_dir,
    settings_from_args,
)
from es_rag.cli.render import print_json

HELP = "list a tenant's sources: the version served, chunks and parents stored, a PDF's pages"
SCOPE = {"index": ("prefix",), "connection": ("request_timeout",)}


def register(sub: Any) -> None:
    """Add the ``sources`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("sources", help=HELP, description=HELP)
    p.add_argument("--tenant", required=True, help="tenant whose sources are listed")
    add_json(p, "print the list as JSON")
    add_target(p)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``sources``: exit 0 (also when the tenant has none, which it says).

    Args:
        args: Parsed arguments.
    """
    from es_rag.embedded.backend import EmbeddedBackend
    from es_rag.wiring import build_backend

    settings = settings_from_args(args)
    index_dir = existing_index_dir(args)
    if index_dir is None:
        backend: Any = build_backend(settings, es_url=args.es, **connection_kwargs(args))
    else:
        backend = EmbeddedBackend(index_dir)  # listing needs no model
    listing = backend.version_store().sources(args.tenant)
    if args.json:
        print_json({"tenant_id": args.tenant, "sources": [s.to_dict() for s in listing]})
        return 0
    if not listing:
        print(f"tenant {args.tenant} has no sources")
        return 0
    width = max(len("source"), *(len(s.source_id) for s in listing))
    paged = any(s.pages is not None for s in listing)  # a pages column only when some source has pages (a PDF)
    pages_head = f"  {'pages':>5}" if paged else ""
    print(f"{'source':<{width}}  {'active version':<24}  {'chunks':>6}  {'parents':>7}{pages_head}  other versions")
    for s in listing:
        others = ", ".join(f"{v} ({n} chunks, hidden)" for v, n in s.versions.items() if v != s.active_version)
        pages = f"  {s.pages if s.pages is not None else '-':>5}" if paged else ""
        print(
            f"{s.source_id:<{width}}  {s.active_version or '-':<24}  {s.chunks:>6}  {s.parents:>7}{pages}  "
            f"{others or '-'}"
        )
    print(f"{len(listing)} sources, {sum(s.chunks for s in listing)} chunks served")
    return 0
