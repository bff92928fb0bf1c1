"""``es-rag serve``: keep an embedded index's models loaded and answer the ``es-rag search`` calls made on it."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from es_rag.cli.flags import DEFAULT_INDEX_DIR, index_dir_path
from es_rag.cli.options import SEARCH_SCOPE, add_mmr_preset, add_settings, existing_index_dir, settings_from_args
from es_rag.errors import ConfigError

HELP = "keep an embedded index's models loaded: es-rag search on that index then answers in about a second"
WARM_UP_TENANT = "es-rag-serve-warm-up"
"""The tenant of the search that loads everything before the first real one (it matches no chunk)."""


def register(sub: Any) -> None:
    """Add the ``serve`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser(
        "serve",
        help=HELP,
        description=HELP + ". Runs until Ctrl-C. Each es-rag search on the same --index-dir, from this user, hands "
        "its command line to it over a private Unix socket and prints its answer (the same output, errors and exit "
        "code); with no server, or ES_RAG_NO_SERVER=1, a search runs in its own process. The settings flags are "
        "those of the pipeline it loads before it listens; a search with other settings gets its own pipeline at its "
        "first call (the two most recent are kept), and the index is opened again after each new commit.",
    )
    p.add_argument(
        "--index-dir",
        metavar="DIR",
        default=None,
        type=index_dir_path,
        help=f"the embedded index whose searches it answers (default {DEFAULT_INDEX_DIR})",
    )
    sections = add_settings(p, SEARCH_SCOPE)
    add_mmr_preset(sections["select"])


def _load_lazy_parts() -> None:
    """What a search loads only when a query needs it, and a warm-up search on no chunks never reaches: the query
    language detector's model and the english analyzer's Porter stemmer (nltk)."""
    from es_rag.embedded.token_filters import porter_stem
    from es_rag.languages import language_scores

    language_scores("es-rag serve loads the language detector")
    porter_stem("loading")


def run(args: argparse.Namespace) -> int:
    """Run ``serve``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.cli import resident

    settings_from_args(args)  # a bad flag or settings file fails here, before any model loads
    index_dir = existing_index_dir(args)
    if index_dir is None:
        raise ConfigError("es-rag serve answers searches of an embedded index (--index-dir); a cluster is not served")
    print(f"es-rag serve: loading the models for {index_dir}", file=sys.stderr, flush=True)
    flags = args.command_line[2:]  # serve's own flags are the search's settings (and --index-dir)
    target = ["--index-dir", str(Path(index_dir).resolve())]
    warm = resident.answer_locally(["search", "es-rag serve warm-up", "--tenant", WARM_UP_TENANT, *flags, *target])
    if warm.get("rc") != 0:
        sys.stderr.write(str(warm.get("stderr") or warm.get("fallback") or ""))
        return int(warm.get("rc") or 2)
    _load_lazy_parts()

    def ready(path: Path) -> None:
        print(
            f"es-rag serve: answering the searches of {index_dir} (pid {os.getpid()}, {path}); Ctrl-C stops", flush=True
        )

    try:
        resident.serve(index_dir, ready=ready)
    except KeyboardInterrupt:
        print("es-rag serve: stopped", file=sys.stderr)
    return 0
