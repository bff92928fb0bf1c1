"""``es-rag`` command line. :func:`build_parser` gives each command only its own options (settings
flags come from the settings groups' metadata, :mod:`es_rag.cli.options`); each command lives in
:mod:`es_rag.cli.commands`. Exit codes: 0 ok, 1 the command ran and found a problem (failed documents,
failed checks), 2 bad input or configuration (usage errors included), 3 cluster errors, 130 interrupted."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from es_rag import __version__
from es_rag.cli.commands import COMMANDS
from es_rag.cli.parser import Parser
from es_rag.errors import ClusterError, EsRagError
from es_rag.redact import redact


def build_parser() -> Parser:
    """The ``es-rag`` argument parser."""
    parser = Parser(
        prog="es-rag",
        description="RAG retrieval on Elasticsearch: hybrid BM25 + kNN with hard filters, RRF, rerank, MMR, packing.",
    )
    parser.add_argument("--version", action="version", version=f"es-rag {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        module.register(sub)
    return parser


class _StderrWarnings(logging.Handler):
    """Prints the package's log records (warnings and above) as ``es-rag: warning: ...`` on the current stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"es-rag: {record.levelname.lower()}: {redact(record.getMessage())}", file=sys.stderr)


def _show_warnings() -> None:
    """Route the library's warnings (``logging.getLogger("es_rag")``, e.g. the settings' budget warning) to stderr,
    once per process; records still propagate to any handler the caller installed."""
    logger = logging.getLogger("es_rag")
    if not any(isinstance(h, _StderrWarnings) for h in logger.handlers):
        handler = _StderrWarnings(logging.WARNING)
        logger.addHandler(handler)


def _target_from_environment(args: argparse.Namespace) -> None:
    """``--es`` defaults to ``ES_URL`` (what the examples and the FastAPI app read), unless ``--index-dir`` or an
    Elastic Cloud id (``--cloud-id``, ``ES_CLOUD_ID``) says otherwise: a user who exported ``ES_URL`` was searching the
    empty embedded index without a word (issue 31). ``eval`` and ``calibrate`` are left out: ``eval --dataset`` would
    write a benchmark corpus into that cluster."""
    if args.command in ("eval", "calibrate"):
        return
    if getattr(args, "es", "") is not None or getattr(args, "index_dir", None) or getattr(args, "cloud_id", None):
        return
    url = os.environ.get("ES_URL", "").strip()
    if url and not os.environ.get("ES_CLOUD_ID"):
        args.es = url


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``es-rag``.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _show_warnings()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors and --help/--version exit through argparse
        return int(exc.code or 0)
    _target_from_environment(args)
    args.command_line = ["es-rag", *(sys.argv[1:] if argv is None else argv)]  # what a model card records
    try:
        return int(COMMANDS[args.command].run(args))
    except ClusterError as exc:
        print(f"es-rag {args.command}: error: {redact(str(exc))}", file=sys.stderr)
        if exc.response is not None and os.environ.get("ES_RAG_DEBUG"):
            print(redact(json.dumps(exc.response, ensure_ascii=False, default=str)[:4000]), file=sys.stderr)
        return 3
    except EsRagError as exc:
        print(f"es-rag {args.command}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"es-rag {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
