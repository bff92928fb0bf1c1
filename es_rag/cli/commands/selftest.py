"""``es-rag selftest``: every es_rag request on a cluster under a throwaway prefix, checked, then deleted."""

from __future__ import annotations

import argparse
from typing import Any

from es_rag.cli.options import add_json, add_settings, add_target, connect, settings_from_args, uses_cluster
from es_rag.cli.render import print_json
from es_rag.errors import ConfigError, EsRagError

HELP = "run every es_rag request on a cluster under a throwaway prefix, check the results, delete everything"
DESCRIPTION = (
    "The first command to run on a cluster: setup, ingest of a built-in corpus through the pipeline, every "
    "retrieval path the cluster supports (client RRF, native rrf/linear when licensed, exact channel, stored "
    "template, inference/semantic_text when configured), lineage and content_hash, tenant and ACL isolation, a "
    "version switch and delete-source, all under es-rag-selftest-<random>; then deletes it all (also after a "
    "failure or Ctrl-C). Exit 0 when every check passes."
)
SCOPE = {
    "index": ("analyzer", "language", "languages", "bm25_k1", "bm25_b", "similarity", "vector_index_type",
              "vector_rescore_oversample"),
    "encoder": ("dims", "inference_id", "vector_mode", "semantic_chunking", "semantic_max_chunk_size",
                "semantic_overlap"),
    "chunking": ("max_tokens",),
    "connection": None,
}  # fmt: skip


def register(sub: Any) -> None:
    """Add the ``selftest`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("selftest", help=HELP, description=DESCRIPTION)
    add_json(p, "print the checks as JSON")
    p.add_argument("--keep", action="store_true", help="leave the throwaway indices and assets for inspection")
    p.add_argument(
        "--cleanup",
        metavar="PREFIX",
        default=None,
        help="only delete what a --keep run left under this es-rag-selftest-* prefix",
    )
    add_target(p, embedded=False)
    add_settings(p, SCOPE, defaults={"analyzer": "auto"})


def run(args: argparse.Namespace) -> int:
    """Run ``selftest``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.selftest import SELFTEST_PREFIX, cleanup, run_selftest, throwaway_settings

    if not uses_cluster(args):
        raise EsRagError("selftest needs --es URL (or --cloud-id): it checks a cluster")
    settings = settings_from_args(args, resolve=False)
    if args.cleanup:
        if not args.cleanup.startswith(SELFTEST_PREFIX):
            raise ConfigError(f"--cleanup takes a {SELFTEST_PREFIX}* prefix, got {args.cleanup!r}")
        with connect(args, settings.replace(index_prefix=args.cleanup)) as backend:
            print(cleanup(backend))
        return 0
    with connect(args, throwaway_settings(settings)) as backend:
        report = run_selftest(backend, keep=args.keep)
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.table())
    return 0 if report.ok else 1
