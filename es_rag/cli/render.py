"""How commands print: ingest reports, search results, nested reports."""

from __future__ import annotations

import json
import sys
from typing import Any


def progress() -> bool:
    """Whether long commands show their progress: always; a bar on a terminal, elsewhere a line every 30 s once a
    run has lasted 30 s (:mod:`es_rag.progress`)."""
    return True


def print_json(obj: Any) -> None:
    """Pretty JSON on stdout, non-ASCII kept.

    Args:
        obj: A JSON-able object.
    """
    print(json.dumps(obj, ensure_ascii=False, indent=2))


def print_report(report: Any, as_json: bool) -> None:
    """An ingest report: one summary line, then every failed document on stderr.

    Args:
        report: :class:`~es_rag.ingest.IngestReport`.
        as_json: Print its JSON instead.
    """
    if as_json:
        print_json(report.to_dict())
        return
    print(
        f"sources: {report.sources}  chunks: {report.chunks}  parents: {report.parents}  "
        f"indexed: {report.indexed}  failed: {len(report.failed)}  skipped: {len(report.skipped)}"
        + (f"  unchanged: {len(report.unchanged)}" if report.unchanged else "")
    )
    for r in report.removed:
        where = f" (read from {r['source_path']})" if r.get("source_path") else ""
        print(f"  removed {r['source_id']}{where}: gone from the folder ({r['deleted']} documents deleted)")
    if "sync" in report.extra:
        print(f"sync: {report.extra['sync']}", file=sys.stderr if report.failed else sys.stdout)
    query = report.extra.get("query_encoder")
    if query and "exported" in query:
        print(f"query encoder: exported to ONNX once ({query['seconds']} s), searches embed without torch")
    elif query:
        print(f"query encoder: searches embed with torch: {query['reason']}", file=sys.stderr)
    print_sources_problems(report)


def print_sources_problems(report: Any) -> None:
    """Every failed document, warning and skipped path of an ingest report, with a count per skip reason, on stderr
    (the warnings were shown only with ``--json``: issue 31).

    Args:
        report: :class:`~es_rag.ingest.IngestReport`.
    """
    for f in report.failed:
        print(f"  FAILED {f['document']}: field '{f['field']}': {f['reason']}", file=sys.stderr)
    for w in getattr(report, "warnings", ()):  # ignored front matter, chunks over the model's limit, ...
        print(f"  warning {w['document']}: field '{w['field']}': {w['reason']}", file=sys.stderr)
    if report.skipped:
        reasons = ", ".join(f"{why}: {n}" for why, n in report.skipped_by_reason().items())
        print(f"  skipped {len(report.skipped)} paths ({reasons}):", file=sys.stderr)
        for s in report.skipped:
            print(f"    {s['path']}: {s['reason']}", file=sys.stderr)


_SAID = {"undecided": False}
"""Explanations printed once a process (the demo prints several results)."""


def print_result(result: Any) -> None:
    """A search result: status, hits, packed context, citations and the trace.

    Args:
        result: :class:`~es_rag.pipeline.SearchResult`.
    """
    from es_rag.result import format_trace, summarize_hits

    print(f"\n=== query: {result.query}")
    print(f"status: {result.status}")
    print(f"gate decision: {result.status_basis or result.trace.paths.get('gate', '-')}")
    if result.no_sufficient_evidence:
        print("(the calibrated gate found no hit good enough to answer from: answer 'not found', do not guess)")
    elif result.status == "undecided" and not _SAID["undecided"]:  # issue 31: say why; issue 46: once a process
        _SAID["undecided"] = True
        print(
            "(undecided: the no-answer gate judges calibrated cross-encoder scores only; with no calibrated reranker "
            "the hits below are the best found, not a verdict that they answer. A reranker calibrated on your "
            "questions (es-rag calibrate --golden FILE) lets it say 'evidence' or 'no sufficient evidence')"
        )
    if not result.hits:
        print("(no evidence selected)")
    for line in summarize_hits(result.hits):
        print(line)
    print(f"\n--- packed context ({result.context.tokens} tokens, {len(result.context.citations)} citations)")
    print(result.context.text.rstrip())
    print("\n--- citations")
    for c in result.context.citations:
        print(
            f"[{c.label}] {c.source_id} v{c.source_version} § {' > '.join(c.heading_path) or '-'} "
            f"chars {c.start_offset}-{c.end_offset}"
        )
    print("\n--- trace")
    print(format_trace(result))


def print_tree(obj: Any, indent: int = 0) -> None:
    """A nested dict/list as an indented outline.

    Args:
        obj: The report.
        indent: Current depth.
    """
    pad = "  " * indent
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                print(f"{pad}{k}:")
                print_tree(v, indent + 1)
            else:
                print(f"{pad}{k}: {v}")
    elif isinstance(obj, list):
        for v in obj:
            print(f"{pad}- {v}")
    else:
        print(f"{pad}{obj}")


def waiting(command: str, index_dir: str) -> None:
    """Tell the user a command waits for another process's write lock on an embedded index.

    Args:
        command: The command waiting.
        index_dir: The index.
    """
    print(f"es-rag {command}: waiting for another es-rag process writing to {index_dir} ...", file=sys.stderr)
