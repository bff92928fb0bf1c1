"""``es-rag delete-source``: delete every chunk, parent and registry entry of one source."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from es_rag.cli.options import (
    add_json,
    add_settings,
    add_target,
    connection_kwargs,
    existing_index_dir,
    settings_from_args,
)
from es_rag.cli.render import print_json, waiting

HELP = "delete every chunk, parent and registry entry of a source"
SCOPE = {"index": ("prefix",), "connection": ("request_timeout",)}


def register(sub: Any) -> None:
    """Add the ``delete-source`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("delete-source", help=HELP, description=HELP)
    p.add_argument("source_id", metavar="ID")
    p.add_argument("--tenant", required=True, help="tenant owning the source")
    add_json(p)
    add_target(p)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``delete-source``: exit 0 when nothing of the source remains, 1 when some documents do or the
    tenant has no such source.

    Args:
        args: Parsed arguments.
    """
    from es_rag.embedded.backend import EmbeddedBackend, write_lock
    from es_rag.ingest import delete_source
    from es_rag.wiring import build_backend

    settings = settings_from_args(args)
    index_dir = existing_index_dir(args)
    if index_dir is None:
        backend: Any = build_backend(settings, es_url=args.es, **connection_kwargs(args))
        result = delete_source(backend, args.tenant, args.source_id)
        return _report(args, result)
    with write_lock(index_dir, on_wait=lambda: waiting("delete-source", index_dir)):
        # the embedded store is opened with whatever vector size it holds: deleting needs no model
        backend = EmbeddedBackend(index_dir)
        result = delete_source(backend, args.tenant, args.source_id)
        backend.flush()
    return _report(args, result)


def _report(args: argparse.Namespace, result: dict[str, Any]) -> int:
    remaining = result["remaining"]
    unknown = not result["deleted"] and not any(remaining.values())
    if unknown:
        print(
            f"es-rag delete-source: warning: tenant {args.tenant} has no source {args.source_id!r} "
            "(nothing deleted; es-rag sources lists them)",
            file=sys.stderr,
        )
    if args.json:
        print_json({"source_id": args.source_id, "tenant_id": args.tenant, **result})
    else:
        print(
            f"deleted {result['deleted']} documents of {args.source_id} (tenant {args.tenant}); "
            f"remaining: {remaining['chunks']} chunks, {remaining['parents']} parents"
        )
        if any(remaining.values()):
            why = (
                f"{result['conflicts']} were written concurrently (version conflicts)"
                if result.get("conflicts")
                else "; ".join(result.get("failures") or []) or "see the counts"
            )
            print(
                f"es-rag delete-source: {sum(remaining.values())} documents remain ({why}); they stay hidden and "
                "are never served: run delete-source again",
                file=sys.stderr,
            )
    return 0 if not any(remaining.values()) and not unknown else 1
