"""``es-rag reindex``: blue-green rebuild of the index from the sources, evaluation, atomic swap, rollback, cleanup."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from es_rag.cli.options import (
    DEFAULT_INDEX_DIR,
    acl_groups,
    add_chunker,
    add_json,
    add_settings,
    add_target,
    connect,
    group_list,
    settings_from_args,
    uses_cluster,
)
from es_rag.cli.render import print_json, waiting
from es_rag.errors import EsRagError
from es_rag.progress import terminal

HELP = "blue-green reindex: build a new generation from the sources, evaluate it, swap atomically; roll back; clean up"
DESCRIPTION = (
    HELP + ". Searches address fixed names (Elasticsearch aliases <prefix>-chunks/-parents/-versions; the embedded "
    "folder's CURRENT pointer), so the swap is invisible to them. Without an action flag: build (PATH... --tenant), "
    "evaluate, then swap unless refused. Runbook: docs/operations.md."
)
SCOPE = {
    "index": (
        "prefix",
        "generation",
        "analyzer",
        "language",
        "languages",
        "bm25_k1",
        "bm25_b",
        "similarity",
        "vector_index_type",
    ),
    "encoder": ("model", "dims", "inference_id", "vector_mode"),
    "chunking": None,
    "connection": None,
}


def register(sub: Any) -> None:
    """Add the ``reindex`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("reindex", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files and folders to rebuild from (a build needs them); one folder with a manifest.json (the demo's "
        "sample) is read as the manifest lists it: source ids, titles, versions, ACLs",
    )
    act = p.add_argument_group("action (one; default: build, evaluate, swap)").add_mutually_exclusive_group()
    act.add_argument("--status", action="store_true", help="list the generations and which one is live")
    act.add_argument(
        "--swap", action="store_true", help="serve a built generation (--index-generation, default newest)"
    )
    act.add_argument("--rollback", action="store_true", help="serve the previous generation again")
    act.add_argument(
        "--cleanup", action="store_true", help="delete retired generations (older than the live one), after confirming"
    )
    g = p.add_argument_group("build and swap")
    g.add_argument("--tenant", help="tenant whose sources are read (a build needs it)")
    g.add_argument(
        "--acl", action="append", type=group_list, metavar="G[,G...]", help="groups allowed to read the documents"
    )
    g.add_argument("--base-dir", metavar="DIR", help="source ids are paths relative to this folder")
    g.add_argument(
        "--queries",
        metavar="FILE",
        help="golden JSONL, the format of eval --golden (question, gold source ids, tenant; the demo's golden.jsonl "
        "is one): recall@10 of both generations on the build tenant's questions (default: one smoke query)",
    )
    g.add_argument("--no-swap", action="store_true", help="build and evaluate only; --swap later")
    g.add_argument("--force", action="store_true", help="swap although the evaluation refused it")
    g.add_argument(
        "--migrate",
        action="store_true",
        help="Elasticsearch, first swap: delete the concrete <prefix>-chunks/-parents/-versions indices in the same "
        "atomic request (an alias cannot take an index's name); that swap cannot be rolled back",
    )
    g.add_argument("--keep", type=int, default=1, help="--cleanup keeps this many retired generations (%(default)s)")
    g.add_argument("--yes", action="store_true", help="--cleanup without asking")
    add_json(p, "print the result as JSON")
    add_target(p)
    add_chunker(p)
    add_settings(p, SCOPE)


def run(args: argparse.Namespace) -> int:
    """Run ``reindex``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.embedded.backend import write_lock
    from es_rag.reindex import EmbeddedGenerations, EsGenerations

    settings = settings_from_args(args)
    if uses_cluster(args):
        backend = connect(args, settings.replace(index_generation=None))
        with backend:
            return _act(args, settings, EsGenerations(backend), on_cluster=True)
    root = args.index_dir or DEFAULT_INDEX_DIR
    lock = write_lock(root, on_wait=lambda: waiting("reindex", root)) if not args.status else contextlib.nullcontext()
    with lock:
        return _act(args, settings, EmbeddedGenerations(root), on_cluster=False)


def _act(args: argparse.Namespace, settings: Any, store: Any, *, on_cluster: bool) -> int:
    from es_rag.reindex import previous_generation, retired_generations

    if args.status:
        live = store.live()
        rows = []
        for g in store.generations():
            complete = store.complete(g)
            versions = store.embedding_versions(g) if complete else {}
            rows.append({"generation": g, "live": g == live, "complete": complete, "embedding_versions": versions})
        if args.json:
            print_json({"live": live, "generations": rows})
        else:
            for r in rows:
                mark = "live" if r["live"] else ("" if r["complete"] else "incomplete")
                shown = ", ".join(f"{v} ({n} chunks)" for v, n in r["embedding_versions"].items()) or "-"
                print(f"{r['generation']}  {shown}  {mark}".rstrip())
            print(f"live: {live or 'nothing set up'}")
        return 0
    if args.rollback:
        target = previous_generation(store)
        print(f"rollback: {store.swap(target)}")
        return 0
    if args.swap:
        target = settings.index.generation or _newest_staged(store)
        print(f"swap: {store.swap(target, migrate=args.migrate)}")
        return 0
    if args.cleanup:
        doomed = retired_generations(store, args.keep)
        if not doomed:
            print(f"cleanup: nothing to delete (live: {store.live()}, keeping {args.keep} retired)")
            return 0
        print("cleanup would delete: " + ", ".join(doomed))
        if not args.yes:
            if not sys.stdin.isatty():
                raise EsRagError("cleanup deletes indices: confirm with --yes (stdin is not a terminal)")
            if input("delete them? [y/N] ").strip().lower() not in ("y", "yes"):
                print("cleanup: nothing deleted")
                return 1
        for g in doomed:
            print(f"cleanup: {store.delete(g)}")
        return 0
    if on_cluster:
        store.preflight()
    return _build(args, settings, store, on_cluster=on_cluster)


def _newest_staged(store: Any) -> str:
    live = store.live()
    gens = store.generations()
    newer = [g for g in gens[gens.index(live) + 1 if live in gens else 0 :] if store.complete(g)]
    if not newer:
        raise EsRagError(
            "no built generation newer than the live one: build one first (es-rag reindex PATH --tenant T)"
        )
    return str(newer[-1])


def _build(args: argparse.Namespace, settings: Any, store: Any, *, on_cluster: bool) -> int:
    from es_rag.ingest import IngestReport, load_files
    from es_rag.reindex import build_generation
    from es_rag.settings import Analyzer
    from es_rag.wiring import build_embedder

    if not args.paths or not args.tenant:
        raise EsRagError(
            "reindex builds from the sources: give PATH... and --tenant (or --status/--swap/--rollback/--cleanup)"
        )
    if on_cluster and settings.index.analyzer is Analyzer.AUTO:
        settings = settings.replace(analyzer=store.backend.resolve_analyzer().analyzer)
    from es_rag.elasticsearch.aliases import new_generation

    if on_cluster and not args.no_swap and not args.migrate:
        from es_rag.elasticsearch.aliases import legacy_refusal

        refusal = legacy_refusal(settings, store.layout())
        if refusal:  # said before an hour of embedding, not after
            raise EsRagError(f"reindex: {refusal}")
    generation = settings.index.generation or new_generation(settings, existing=store.generations())
    base = settings.replace(index_generation=None)
    queries, left_out = load_queries(args.queries, args.tenant) if args.queries else ([], [])
    report = IngestReport()
    acl = acl_groups(args.acl) or ("public",)
    exclude = [] if on_cluster else [store.root]
    manifest = Path(args.paths[0]) / "manifest.json" if len(args.paths) == 1 else None
    if manifest is not None and manifest.is_file():  # a corpus folder that names its documents (the demo's sample)
        from es_rag.wiring import load_manifest

        docs = [d for d in load_manifest(manifest.parent, report)[0] if d.tenant_id == args.tenant]
    else:
        docs = load_files(
            args.paths, tenant_id=args.tenant, acl=acl, report=report, base_dir=args.base_dir, exclude_dirs=exclude
        )
    live = store.live()
    new_backend = store.open_new(base, generation)
    live_backend = store.open_live(base)
    model: list[Any] = []

    def embedder() -> Any:
        if not model:
            model.append(build_embedder(base, show_progress=terminal()))
        return model[0]

    result = build_generation(
        settings=new_backend.settings if on_cluster else base,
        generation=generation,
        live_generation=live,
        new_backend=new_backend,
        live_backend=live_backend,
        docs=docs,
        report=report,
        embedder=embedder,
        tenant_id=args.tenant,
        acl=acl,
        chunking={
            "strategy": args.strategy,
            "contextual": args.contextual,
            "parent_max_tokens": args.parent_max_tokens,
        },
        queries=queries,
        on_cluster=on_cluster,
    )
    result.evaluation.notes.extend(left_out)
    out = result.to_dict()
    swapped = None
    if not args.no_swap and (result.refusal is None or args.force):
        swapped = store.swap(generation, migrate=args.migrate)
    out["swapped"] = swapped
    if args.json:
        print_json(out)
    else:
        _print_build(out)
    if result.refusal and not args.force and not args.no_swap:
        print(f"es-rag reindex: swap refused: {result.refusal} (--force swaps anyway)", file=sys.stderr)
        return 1
    return 1 if report.failed else 0


def _print_build(out: dict[str, Any]) -> None:
    ev = out["evaluation"]
    ing = out["ingest"]
    print(f"generation {out['generation']} built (live before: {out['live_before'] or 'none'})")
    print(f"  ingest: {ing.get('sources')} sources, {ing.get('chunks')} chunks, {len(ing.get('failed', []))} failed")
    for side, counts in ev["counts"].items():
        print(f"  {side}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for q in ev["queries"]:
        shown = "; ".join(f"{side}: {', '.join(q[side][:3]) or '-'}" for side in ("live", "new") if side in q)
        print(f"  query {q['query']!r}: {shown}")
    if any(v is not None for v in ev["recall"].values()):
        print("  recall@10: " + ", ".join(f"{k} {v}" for k, v in ev["recall"].items()))
    for note in ev["notes"]:
        print(f"  note: {note}")
    if out["swapped"]:
        print(f"swapped: {out['swapped']}")
    elif out["swap_refused"]:
        print(f"not swapped: {out['swap_refused']}")
    else:
        print("not swapped (--no-swap): es-rag reindex --swap serves it")


def load_queries(path: str | Path, tenant: str | None = None) -> tuple[list[Any], list[str]]:
    """The questions of a golden JSONL file (:func:`es_rag.evaluation.golden.load_golden`, the format ``eval --golden``
    and ``calibrate --golden`` read) that a build of ``tenant`` can answer, and a note per question left out (another
    tenant's).

    Args:
        path: The file.
        tenant: The tenant the generation is built for (None: every question).

    Raises:
        InputError: A bad line (``FILE:LINE`` and the field named).
    """
    from es_rag.evaluation.golden import load_golden
    from es_rag.reindex import EvalQuery

    out, notes = [], []
    for q in load_golden(path):
        if tenant is not None and q.tenant is not None and q.tenant != tenant:
            notes.append(f"question {q.id} is tenant {q.tenant}'s, not {tenant}'s: left out")
            continue
        out.append(EvalQuery(q.question, tuple(q.gold)))
    return out, notes
