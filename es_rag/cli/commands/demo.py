"""``es-rag demo``: ingest the bundled sample corpus into a temporary embedded index and run its queries."""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

from es_rag.cli.options import POST_RETRIEVAL, add_json, add_settings, settings_from_args
from es_rag.cli.render import print_json, print_result, progress
from es_rag.progress import terminal

GOLDEN_FILE = "golden.jsonl"
"""The sample corpus's golden set (the manifest's queries and expected sources in the golden format)."""
HELP = (
    "ingest the bundled sample corpus into a temporary embedded index, run its queries and score them as a golden set"
)
SCOPE = {
    "index": ("analyzer", "language", "languages", "bm25_k1", "bm25_b", "similarity"),
    "encoder": ("model", "dims", "device", "precision"),
    "chunking": None,
    "retrieve": None,
    "fusion": ("method", "normalizer", "rank_constant", "channel_weights"),
    **{g: None for g in POST_RETRIEVAL},
}


def register(sub: Any) -> None:
    """Add the ``demo`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("demo", help=HELP, description=HELP)
    add_json(p, "print results as JSON")
    p.add_argument("--index-dir", default=None, help="keep the demo index here instead of a temporary folder")
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``demo``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.evaluation.golden import load_golden
    from es_rag.evaluation.golden_eval import evaluate_golden, format_golden
    from es_rag.filters import SearchFilter
    from es_rag.ingest import IngestReport, ingest_documents
    from es_rag.wiring import SAMPLE_DIR, build_backend, build_chunker, build_embedder, build_pipeline, load_manifest

    settings = settings_from_args(args)
    tmp = None
    index_dir = args.index_dir
    if index_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="es-rag-demo-")
        index_dir = tmp.name
    try:
        report = IngestReport()
        docs, queries = load_manifest(SAMPLE_DIR, report)
        say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
        say(f"es-rag demo: {len(docs)} sample documents -> embedded index {index_dir}")
        embedder = build_embedder(settings, show_progress=terminal())
        say(f"embedding model: {embedder.version} ({embedder.dims} dims)")
        backend = build_backend(settings, index_dir=index_dir)
        ingest_documents(
            docs,
            chunker=build_chunker(settings, embedder),
            embedder=embedder,
            backend=backend,
            report=report,
            progress=progress(),
            corpus_language=settings.index.language,
        )
        backend.flush()
        say(
            f"ingested: {report.sources} sources, {report.chunks} chunks, {report.parents} parents, "
            f"{len(report.failed)} failed"
        )
        pipeline = build_pipeline(settings, backend, embedder)
        results = []
        for q in queries:
            flt = SearchFilter(q["tenant_id"], tuple(q.get("acl") or ()))
            result = pipeline.search(q["query"], flt)
            results.append((q, result))
            if not args.json:
                print(f"\n##### tenant={flt.tenant_id} acl={list(flt.groups)}")
                print_result(result)
                expected = set(q.get("expect_source_ids") or [])
                got = {h.source_id for h in result.hits}
                if expected:
                    print(f"expected source(s) {sorted(expected)}: {'found' if expected & got else 'NOT found'}")
                leaks = [h.chunk_id for h in result.candidates if h.tenant_id != flt.tenant_id]
                print(f"tenant isolation: {len(leaks)} candidates from other tenants")
        golden = evaluate_golden(load_golden(SAMPLE_DIR / GOLDEN_FILE), pipeline)
        table = f"\ngolden set {GOLDEN_FILE} ({golden['questions']} questions):\n" + format_golden(golden)
        if args.json:
            print(table, file=sys.stderr)
            print_json([{"case": q, **r.to_dict()} for q, r in results])
        else:
            print(table)
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()
