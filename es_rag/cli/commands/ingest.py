"""``es-rag ingest``: chunk, embed and index files into Elasticsearch or the embedded index."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from es_rag.cli.options import (
    DEFAULT_INDEX_DIR,
    add_chunker,
    add_json,
    add_owner,
    add_settings,
    add_sources,
    add_target,
    connection_kwargs,
    owner_acl,
    settings_from_args,
    source_kwargs,
    uses_cluster,
)
from es_rag.cli.render import print_report, print_sources_problems, progress, waiting

HELP = (
    "chunk, embed and index Markdown / reStructuredText / HTML / text / PDF / Word / OpenDocument / JSONL files, "
    "source code (Python, JS/TS, Java, Go) and folders"
)
SCOPE = {
    "index": ("prefix", "analyzer", "language", "languages", "bm25_k1", "bm25_b", "similarity", "metadata_fields"),
    "encoder": (
        "model",
        "dims",
        "inference_id",
        "vector_mode",
        "device",
        "precision",
        "encode_workers",
        "late_chunking",
        "query_runtime",
    ),
    "chunking": None,
    "ingest": None,
    "connection": None,
}


def register(sub: Any) -> None:
    """Add the ``ingest`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("ingest", help=HELP, description=HELP)
    add_sources(p)
    p.add_argument(
        "--sync",
        action="store_true",
        help="the index follows the folders given: after a run with no failed document, delete the tenant's "
        "sources the folders no longer yield (deleted, ignored or unsupported files; with --base-dir, only ids under "
        "each folder; without it, every source of the tenant) and list them",
    )
    add_json(p, "print the report as JSON")
    add_owner(p)
    add_target(p)
    add_chunker(p, semantic=True)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``ingest``.

    Args:
        args: Parsed arguments.
    """
    import itertools

    from es_rag.ingest import IngestReport, iter_files

    settings = settings_from_args(args)
    report = IngestReport()
    on_cluster = uses_cluster(args)
    scopes = None
    if args.sync:
        from es_rag.ingest.sync import sync_scopes

        scopes = sync_scopes(args.paths, args.base_dir)  # a file or stdin is refused before anything is read
    index_dir = args.index_dir or (None if on_cluster else DEFAULT_INDEX_DIR)
    if index_dir is not None:
        from es_rag.wiring import index_settings

        settings = index_settings(settings, index_dir)  # more documents for an index keep its embedding model
    stream = iter_files(  # read lazily: one file at a time is held, not the corpus
        args.paths,
        tenant_id=args.tenant,
        acl=owner_acl(args),
        report=report,
        exclude_dirs=[index_dir] if index_dir else [],
        **source_kwargs(args, settings),
    )
    first = next(stream, None)  # reads up to the first good document
    docs = itertools.chain([] if first is None else [first], stream)
    if first is None and scopes is None:  # before any model or index is touched
        if args.json:
            print_report(report, True)
        else:
            print_sources_problems(report)
        print(
            f"es-rag ingest: nothing to ingest ({len(report.failed)} failed, {len(report.skipped)} skipped)",
            file=sys.stderr,
        )
        return 1
    from es_rag.embedded.backend import write_lock

    # one writer per embedded index: a second ingest waits for the first, then fails clearly
    lock = (
        write_lock(index_dir, on_wait=lambda: waiting("ingest", index_dir)) if index_dir else contextlib.nullcontext()
    )
    with lock:
        return _ingest(args, settings, docs, report, on_cluster, index_dir, scopes)


def _ingest(
    args: argparse.Namespace,
    settings: Any,
    docs: Any,
    report: Any,
    on_cluster: bool,
    index_dir: str | None,
    scopes: list[Any] | None,
) -> int:
    from es_rag.wiring import build_backend

    backend = build_backend(
        settings, es_url=args.es, index_dir=index_dir, **(connection_kwargs(args) if on_cluster else {})
    )
    try:
        _run_ingest(args, settings, docs, report, on_cluster, scopes, backend)
    except KeyboardInterrupt:
        print(interrupted_message(report, on_cluster), file=sys.stderr)
        return 130
    if not on_cluster:
        backend.prepare_search()  # the analysed BM25 fields saved with the commit: the first search is not slowed
        print(f"embedded index: {index_dir}", file=sys.stderr)
    print_report(report, args.json)
    left = [r["source_id"] for r in report.removed if any(r["remaining"].values())]
    if left:
        print(f"es-rag ingest: --sync: documents of {', '.join(left)} remain; run the ingest again", file=sys.stderr)
    if scopes is not None:
        return 1 if report.failed or left else 0
    return 1 if report.failed or not report.sources else 0


def interrupted_message(report: Any, on_cluster: bool) -> str:
    """What an ingest stopped by Ctrl-C kept, and how to go on (issue 46: it said only ``interrupted``).

    Args:
        report: The run's report so far (the sources its checkpoints switched, those found unchanged).
        on_cluster: Whether it wrote to Elasticsearch (else the embedded index).
    """
    kept = len({s["source_id"] for s in report.switched}) + len(report.unchanged)
    where = "in Elasticsearch" if on_cluster else "in the embedded index (its last checkpoint's commit)"
    return (
        f"es-rag ingest: interrupted: {kept} source{'s' * (kept != 1)} kept {where}, each whole (new or unchanged); "
        "a source cut by the interruption stays hidden, never served half. Run the same command again to resume: "
        "the sources kept are not embedded again"
    )


def _run_ingest(
    args: argparse.Namespace,
    settings: Any,
    docs: Any,
    report: Any,
    on_cluster: bool,
    scopes: list[Any] | None,
    backend: Any,
) -> None:
    from es_rag.ingest import ingest_sources
    from es_rag.wiring import build_embedder, cluster_settings

    ingest_sources(
        docs,
        backend=backend,
        settings=settings,
        # the ingest's own "embed+index" bar counts the embedding too; more documents for a cluster's index are
        # embedded with its model unless one was given (asked after the probe)
        embedder=lambda: build_embedder(cluster_settings(settings, backend) if on_cluster else settings),
        report=report,
        tenant_id=args.tenant,
        chunking={
            "strategy": args.strategy,
            "contextual": args.contextual,
            "parent_max_tokens": args.parent_max_tokens,
            "breakpoint_percentile": args.breakpoint_percentile,
        },
        sync_scopes=scopes,
        on_cluster=on_cluster,
        progress=progress(),
    )
    backend.flush()
