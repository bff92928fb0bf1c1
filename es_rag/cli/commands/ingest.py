"""``es-rag ingest``: chunk, embed and index files into Elasticsearch or the embedded index."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from es_rag.cli.options import (
    DEFAULT_INDEX_DIR,
    add_chunker,
    add_json,
    add_owner,
    add_settings,
    add_target,
    connection_kwargs,
    owner_acl,
    settings_from_args,
    uses_cluster,
)
from es_rag.cli.render import print_report, progress

HELP = "chunk, embed and index Markdown / HTML / text / JSONL files"
SCOPE = {
    "index": ("prefix", "analyzer", "language", "bm25_k1", "bm25_b", "similarity"),
    "encoder": ("model", "dims", "inference_id", "vector_mode"),
    "chunking": None,
    "connection": None,
}


def register(sub: Any) -> None:
    """Add the ``ingest`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("ingest", help=HELP, description=HELP)
    p.add_argument("paths", nargs="+", metavar="PATH")
    add_json(p, "print the report as JSON")
    add_owner(p)
    add_target(p)
    add_chunker(p)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``ingest``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.chunking import make_chunker
    from es_rag.ingest import IngestReport, ingest_documents, load_files
    from es_rag.settings import VectorMode
    from es_rag.wiring import build_backend, build_embedder

    settings = settings_from_args(args)
    report = IngestReport()
    docs = load_files(args.paths, tenant_id=args.tenant, acl=owner_acl(args), report=report)
    on_cluster = uses_cluster(args)
    index_dir = args.index_dir or (None if on_cluster else DEFAULT_INDEX_DIR)
    backend = build_backend(
        settings, es_url=args.es, index_dir=index_dir, **(connection_kwargs(args) if on_cluster else {})
    )
    if on_cluster:
        backend.probe()  # a cluster that is down or refuses us fails here, before a model is loaded
    embedder = build_embedder(settings, show_progress=progress())
    client_vectors = settings.encoder.vectors is VectorMode.CLIENT
    chunker = make_chunker(
        embedder.tokenizer(),
        strategy=args.strategy,
        max_tokens=min(settings.chunking.max_tokens, embedder.max_tokens),
        overlap=settings.chunking.overlap,
        contextual=args.contextual,
        parent_max_tokens=args.parent_max_tokens,
    )
    ingest_documents(
        docs,
        chunker=chunker,
        embedder=embedder if (client_vectors or not on_cluster) else None,
        backend=backend,
        report=report,
        progress=progress(),
        server_chunking=settings.encoder.vectors is VectorMode.SEMANTIC_TEXT,
    )
    backend.flush()
    if not on_cluster:
        print(f"embedded index: {index_dir}", file=sys.stderr)
    print_report(report, args.json)
    return 1 if report.failed else 0
