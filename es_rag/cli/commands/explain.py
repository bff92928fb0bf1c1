"""``es-rag explain``: print the Elasticsearch request(s) a search sends, ready for Kibana Dev Tools."""

from __future__ import annotations

import argparse
from typing import Any

from es_rag.cli.options import (
    acl_groups,
    add_principal,
    add_settings,
    add_target,
    connect,
    non_empty_query,
    settings_from_args,
    uses_cluster,
)

HELP = "print the Elasticsearch request(s) a search sends (no cluster needed)"
SCOPE = {
    "index": ("prefix",),
    "encoder": ("model", "dims", "inference_id", "vector_mode"),
    "retrieve": None,
    "fusion": None,
    "connection": ("request_timeout",),
}


def register(sub: Any) -> None:
    """Add the ``explain`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("explain", help=HELP, description=HELP)
    p.add_argument("query", type=non_empty_query)
    p.add_argument(
        "--format", choices=["console", "json"], default="console", help="Dev Tools console or JSON (%(default)s)"
    )
    p.add_argument(
        "--no-vector",
        action="store_true",
        help="do not load the embedding model; use a unit-vector placeholder of --vector-dims",
    )
    p.add_argument(
        "--template",
        action="store_true",
        help="print the _search/template call of the stored hybrid template (with its params) instead",
    )
    add_principal(p)
    add_target(p, embedded=False)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``explain``. Without ``--es`` and with ``--fusion-path auto`` both fusion paths are printed.

    Args:
        args: Parsed arguments.
    """
    from es_rag.es_request import render
    from es_rag.explain import explain_sections, template_section, version_of
    from es_rag.filters import SearchFilter
    from es_rag.settings import FusionPath
    from es_rag.versions.registry import registry_index

    settings = settings_from_args(args)
    # exactly what a search sends: the caller's filter plus the tenant's version-registry snapshot, read once per
    # call and inlined (es_rag.versions.registry); without a cluster no key is known to be hidden
    flt = SearchFilter(args.tenant, acl_groups(args.acl))
    backend = None
    if uses_cluster(args):
        backend = connect(args, settings)
        flt = backend.snapshot_versions(flt)
        hidden = sorted(flt.versions.hidden) if flt.versions is not None else []
        gate_note = (
            f"version gate: {len(hidden)} hidden key(s) read from {registry_index(settings)}/_doc/{flt.tenant_id}"
        )
    else:
        gate_note = (
            f"version gate: a search reads {registry_index(settings)}/_doc/{flt.tenant_id} once and adds "
            '{"bool": {"must_not": [{"terms": {"version_key": [<hidden keys>]}}]}} to every retriever '
            "(none shown: no cluster; pass --es to read them)"
        )
    if args.no_vector:
        # A unit vector: valid for cosine (no zero magnitude) and dot_product (unit length) alike.
        vector: Any = [1.0] + [0.0] * (settings.encoder.dims - 1)
    else:
        from es_rag.wiring import build_embedder

        vector = build_embedder(settings).embed_query(args.query).tolist()
    if args.template:
        vectors_param = backend is None or backend.probe().vectors_in_source_param is not False
        sections = [template_section(args.query, vector, flt, settings, vectors_param=vectors_param)]
    else:
        vectors_param = True
        version: tuple[int, ...] | None = None
        paths: list[bool]
        if backend is not None:
            caps = backend.probe()
            vectors_param = caps.vectors_in_source_param is not False
            version = version_of(caps.version)
            paths = [backend.fusion_path() == "native"]
        elif settings.fusion.path is FusionPath.AUTO:
            paths = [True, False]
        else:
            paths = [settings.fusion.path is FusionPath.NATIVE]
        sections = explain_sections(
            args.query, vector, flt, settings, paths=paths, vectors_param=vectors_param, version=version
        )
    sections[0] = ([gate_note, *sections[0][0]], sections[0][1])
    if args.format == "json":
        print(render([r for _, reqs in sections for r in reqs], "json"))
    else:
        blocks = ["".join(f"# {c}\n" for c in comments) + render(reqs, "console") for comments, reqs in sections]
        print("\n".join(blocks), end="")
    return 0
