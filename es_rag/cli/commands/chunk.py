"""``es-rag chunk``: print the chunk documents ingest would write, without indexing."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from es_rag.cli.options import (
    add_chunker,
    add_json,
    add_owner,
    add_settings,
    add_sources,
    owner_acl,
    settings_from_args,
    source_kwargs,
)
from es_rag.cli.render import print_json, print_sources_problems

HELP = "print the chunk documents ingest would write, without indexing"
SCOPE = {"encoder": ("model",), "chunking": None}


def register(sub: Any) -> None:
    """Add the ``chunk`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("chunk", help=HELP, description=HELP)
    add_sources(p)
    add_json(p, "JSON array (default: one summary line per chunk)")
    add_owner(p, tenant_default="-")
    add_chunker(p)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``chunk``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.chunking import make_chunker
    from es_rag.encoders.embedder import tokenizer_for
    from es_rag.ingest import IngestReport, chunk_documents, load_files

    settings = settings_from_args(args)
    report = IngestReport()
    docs = load_files(args.paths, tenant_id=args.tenant, acl=owner_acl(args), report=report, **source_kwargs(args))
    if not docs:  # nothing to chunk: say why before loading a tokenizer
        print_sources_problems(report)
        return 1
    tok = tokenizer_for(settings.encoder.model)
    chunker = make_chunker(
        tok,
        strategy=args.strategy,
        max_tokens=settings.chunking.max_tokens,
        overlap=settings.chunking.overlap,
        contextual=args.contextual,
        parent_max_tokens=args.parent_max_tokens,
    )
    children, parents = chunk_documents(docs, chunker, report)
    rows = []
    for c in [*parents, *children]:
        row = c.to_source(include_vector=False)
        row.update({"kind": c.kind, "source_path": c.source_path, "max_tokens": tok.max_tokens})
        rows.append(row)
    if args.json:
        print_json(rows)
    else:
        for r in rows:
            print(
                f"{r['kind']:<6} {r['chunk_id'][:12]} {r['source_path']}:{r['start_offset']}-{r['end_offset']} "
                f"{r['token_count']:>4} tok  {' > '.join(r['heading_path'])}"
            )
    print_sources_problems(report)
    for w in report.warnings:
        print(f"WARNING {w['document']}: field '{w['field']}': {w['reason']}", file=sys.stderr)
    return 1 if report.failed else 0
