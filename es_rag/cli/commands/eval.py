"""``es-rag eval``: per-stage retrieval metrics on a BEIR-layout dataset, with ablations and the ladder."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from es_rag.cli.options import (
    POST_RETRIEVAL,
    acl_groups,
    add_bm25_protocol,
    add_json,
    add_mmr_preset,
    add_principal,
    add_settings,
    add_target,
    bm25_preset,
    connect,
    existing_index_dir,
    given_settings,
    mmr_preset,
    reading_backend,
    settings_from_args,
    uses_cluster,
)
from es_rag.cli.render import print_json, progress
from es_rag.errors import ConfigError
from es_rag.evaluation.evidence import BUDGETS

HELP = "per-stage retrieval metrics on a BEIR-layout dataset, or your golden questions on your own index"
EVAL_ES_PREFIX = "es-rag-eval"
"""Index prefix ``eval --es`` uses unless ``--index-prefix`` is given."""
SCOPE = {
    "index": None,
    "encoder": ("model", "dims", "inference_id", "vector_mode", "device", "precision"),
    "chunking": None,
    "retrieve": None,
    "fusion": None,
    **{g: None for g in POST_RETRIEVAL},
    "connection": None,
}


def budget_list(value: str) -> tuple[int, ...]:
    """argparse type of ``--budgets``: ``500,1500`` -> ``(500, 1500)``; ``none`` -> no curve.

    Args:
        value: The option's text.
    """
    if value.strip().lower() in ("none", "off"):
        return ()
    try:
        budgets = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected token budgets like 500,1500 or none, got {value!r}") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"token budgets must be >= 1, got {value!r}")
    return budgets


def register(sub: Any) -> None:
    """Add the ``eval`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    p = sub.add_parser("eval", help=HELP, description=HELP)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--dataset",
        metavar="DIR",
        help="BEIR folder: corpus*.jsonl, queries.jsonl, qrels/SPLIT.tsv (indexed for the run)",
    )
    src.add_argument(
        "--golden",
        metavar="FILE",
        help="golden JSONL file (docs/evaluation.md: question, gold source ids, optional spans, category, tenant) "
        "run against your own index (--index-dir, default .es_rag/index, or --es) with your settings: Recall@5/10/20, "
        "MRR, nDCG@10, MAP, P@5/10, span coverage and context recall per category",
    )
    p.add_argument("--split", default="test", help="qrels split to evaluate (%(default)s)")
    p.add_argument("--max-queries", type=int, default=None, help="evaluate only the first N queries")
    p.add_argument("--depth", type=int, default=200, help="candidates per channel = RRF window in eval (%(default)s)")
    p.add_argument(
        "--unit",
        choices=["document", "fixed", "recursive", "structure"],
        default="document",
        help="retrieval unit: document = one unit per corpus document (BEIR protocol); fixed / recursive / "
        "structure = each document cut by that es_rag chunker into chunks of --chunk-max-tokens tokens with "
        "--chunk-overlap, each embedded as title + chunk, a document scored at its best chunk's rank (%(default)s)",
    )
    add_json(p, "print the result (and any ablation table) as JSON")
    p.add_argument("--records", metavar="FILE", default=None, help="write one run record per query (JSON Lines)")
    p.add_argument("--report", metavar="DIR", default=None, help="write report.md, result.json and PNG plots here")
    p.add_argument(
        "--ablate",
        nargs="?",
        const="one-change",
        choices=["one-change", "ladder"],
        default=None,
        help="also run an ablation: one-change (the default when the flag has no value) = base settings, then "
        "one setting changed at a time; ladder = the 8 cumulative steps (fixed chunks, chunk length, overlap, "
        "structure-aware splitter, + BM25, + fusion, + reranker, + context selection), printed with deltas; both "
        "choose their own units (a chunked --unit is refused) and ladder refuses --records",
    )
    add_bm25_protocol(p)
    g = p.add_argument_group("ladder (--ablate ladder)")
    g.add_argument(
        "--ladder-short-tokens", type=int, default=128, help="step 1: fixed chunk length, no overlap (%(default)s)"
    )
    g.add_argument(
        "--ladder-long-tokens",
        type=int,
        default=256,
        help="step 2 onwards: chunk length; clipped to the embedding model's input limit (%(default)s)",
    )
    g.add_argument("--ladder-overlap", type=int, default=32, help="step 3 onwards: overlap in tokens (%(default)s)")
    g.add_argument(
        "--ladder-structure",
        choices=["recursive", "structure"],
        default="recursive",
        help="step 4: structure-aware splitter replacing fixed windows; recursive keeps the overlap as trailing "
        "sentences, structure overlaps only inside an over-long sentence (%(default)s)",
    )
    v = p.add_argument_group("golden sets (--golden): what reaches the LLM")
    v.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="after the run, the same questions again with one setting changed per value (repeatable; retrieval is "
        "memoised, so a variant costs the stages after it): answer coverage per stage, whole answers, tokens and "
        "duplicates per variant, e.g. --vary context_k=8,16 --vary expand_mode=neighbors",
    )
    v.add_argument(
        "--budgets",
        type=budget_list,
        default=BUDGETS,
        metavar="N,...|none",
        help=f"token budgets of the answer coverage curve (default: {','.join(map(str, BUDGETS))}); none: no curve",
    )
    v.add_argument(
        "--plot",
        metavar="PNG",
        default=None,
        help="draw the answer coverage curve (coverage and whole answers against the token budget) into this file "
        "(needs matplotlib: pip install 'es-rag[report]')",
    )
    r = p.add_argument_group("recipes (--golden): what reaches the LLM, es_rag beside the usual RAG recipes")
    r.add_argument(
        "--recipes",
        metavar="NAME,...",
        default=None,
        help="after the golden run, the same questions through other recipes under the same token budget, embedder "
        "and tenant, scored alike (answer coverage, tokens, duplicates, latency, each as a ratio to es_rag's): "
        "langchain (RecursiveCharacterTextSplitter 1000/200 + InMemoryVectorStore, k=50 stuffed to the budget), "
        "langchain-k4 (k=4), llamaindex (SentenceSplitter 1024/20 + VectorStoreIndex, top-2), bm25 (BM25 alone over "
        "your index); all = every one; needs --docs and pip install 'es-rag[recipes]'",
    )
    r.add_argument(
        "--docs",
        metavar="DIR",
        default=None,
        help="with --recipes: the folder your index was ingested from (the recipes split the same texts; source ids "
        "are paths relative to it)",
    )
    add_principal(p, tenant_required=False)
    add_target(
        p,
        es_help="--dataset: evaluate on a live cluster: the corpus is written there (setup, ingest pipeline, version "
        f"registry; index prefix {EVAL_ES_PREFIX} unless --index-prefix is given); default: embedded. --golden: the "
        "cluster holding your index (your --index-prefix)",
        index_dir_help="--dataset: persist the embedded index and the embedding cache here; --golden: your embedded "
        "index (default .es_rag/index)",
    )
    sections = add_settings(p, SCOPE)
    add_mmr_preset(sections["select"])


def eval_settings(args: argparse.Namespace) -> Any:
    """The settings of an eval run: defaults, ``--bm25-protocol``, ``--mmr-preset``, then the flags given; on a
    cluster the index prefix is :data:`EVAL_ES_PREFIX` unless ``--index-prefix`` is given.

    Args:
        args: Parsed arguments.
    """
    overrides: dict[str, Any] = {}
    if uses_cluster(args) and not args.golden and "index_prefix" not in given_settings(args):
        overrides["index_prefix"] = EVAL_ES_PREFIX  # never write a benchmark corpus into the product's indices
    return settings_from_args(args, presets=[bm25_preset(args), mmr_preset(args)], **overrides)


def run(args: argparse.Namespace) -> int:
    """Run ``eval``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.evaluation.ablation import ablate, format_ablation
    from es_rag.evaluation.index import ChunkUnit
    from es_rag.evaluation.ladder import format_ladder, ladder
    from es_rag.evaluation.run import evaluate, format_report

    settings = eval_settings(args)
    if args.golden:
        return run_golden(args, settings)
    if args.recipes or args.docs or args.vary or args.plot:
        raise ConfigError("--recipes/--docs/--vary/--plot apply to --golden: add --golden FILE")
    if args.tenant or args.acl:
        raise ConfigError("--tenant/--acl apply to --golden only (a BEIR corpus is indexed under its own tenant)")
    common: dict[str, Any] = dict(
        split=args.split, settings=settings, cache_dir=args.index_dir, max_queries=args.max_queries, depth=args.depth
    )
    unit = ChunkUnit(args.unit, settings.chunking.max_tokens, settings.chunking.overlap)
    if args.ablate and unit.chunked:
        raise ConfigError(
            f"--unit {args.unit} with --ablate {args.ablate}: the ablations choose their own units "
            "(one-change runs whole documents, ladder its chunk steps); drop --unit"
        )
    if args.ablate and uses_cluster(args):
        raise ConfigError(
            "--ablate runs on the embedded backend only (an analyzer, BM25 or chunking change needs a new "
            "Elasticsearch index per variant); run `eval --es` once per set-up with its own --index-prefix"
        )
    if args.ablate == "ladder" and args.records:
        raise ConfigError("--records with --ablate ladder: run records are written per run; drop one of them")
    ablation: dict[str, Any] | None = None
    steps: dict[str, Any] | None = None
    if args.ablate == "ladder":
        steps = ladder(
            args.dataset,
            progress=progress(),
            short_tokens=args.ladder_short_tokens,
            long_tokens=args.ladder_long_tokens,
            overlap=args.ladder_overlap,
            structure=args.ladder_structure,
            **common,
        )
        result = steps["results"]["4"]
    elif args.ablate:
        ablation = ablate(args.dataset, progress=progress(), **common)
        result = ablation["results"]["base"]
    else:
        es_backend = connect(args, settings) if uses_cluster(args) else None
        result = evaluate(
            args.dataset, progress=progress(), records_path=args.records, unit=unit, es_backend=es_backend, **common
        )
    if args.report:
        from es_rag.evaluation.report import write_report

        result["report"] = str(write_report(result, args.report, ablation=ablation, ladder=steps))
    if args.json:
        out = dict(result)
        if ablation is not None:
            out["ablation"] = ablation["table"]
        if steps is not None:
            out["ladder"] = {k: v for k, v in steps.items() if k != "results"}
            out["ladder_runs"] = steps["results"]
        print_json(out)
    else:
        print(format_report(result))
        if ablation is not None:
            print("\nablations (one change each; delta vs base):")
            print(format_ablation(ablation["table"]))
        if steps is not None:
            print("\nladder (one change per step; delta vs the previous step, or the step named by 'vs'):")
            print(format_ladder(steps["table"]))
            for note in steps["notes"]:
                print(f"note: {note}")
    every = (ablation or steps or {"results": {"run": result}})["results"]
    failed = {name: len(r.get("failed_queries") or []) for name, r in every.items() if r.get("failed_queries")}
    if failed:
        runs = ", ".join(f"{name}: {n}" for name, n in failed.items())
        print(f"es-rag eval: queries failed ({runs}); each is listed in the report and scored as no result",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def run_golden(args: argparse.Namespace, settings: Any) -> int:
    """``eval --golden``: the golden questions on the user's own index and settings.

    Args:
        args: Parsed arguments.
        settings: Settings of the run.
    """
    import json
    import os

    from es_rag.evaluation.golden import load_golden
    from es_rag.evaluation.golden_eval import evaluate_golden, format_golden
    from es_rag.wiring import build_embedder, build_pipeline

    for flag, given in (("--ablate", args.ablate), ("--report", args.report), ("--unit", args.unit != "document")):
        if given:
            raise ConfigError(f"{flag} with --golden: golden sets run on your index as it is; drop {flag}")
    recipes = None
    if args.recipes or args.docs:
        from es_rag.integrations.recipes import parse_recipes

        if not args.docs:
            raise ConfigError("--recipes needs --docs DIR: the folder your index was ingested from")
        if not args.recipes:
            raise ConfigError("--docs is the corpus of --recipes: add --recipes NAME,... (or all)")
        recipes = parse_recipes(args.recipes)
        if not os.path.isdir(args.docs):
            raise ConfigError(f"--docs {args.docs}: not a folder; give the folder your index was ingested from")
    if args.plot and not args.budgets:
        raise ConfigError("--plot draws the coverage curve: drop --budgets none")
    from es_rag.cli.vary import parse_vary

    variants = parse_vary(args.vary)  # a bad --vary fails before a model or index is opened too
    for _, change in variants:
        settings.replace(**change)  # and a value the settings refuse (context_k above rerank_k)
    questions = load_golden(args.golden)  # a bad line fails before a model or index is opened
    index_dir = existing_index_dir(args)
    backend = reading_backend(args, settings, index_dir)
    from es_rag.evaluation.evidence import memoised

    # one memo for the run, the coverage curve, the variants and the recipes: a question is embedded and searched once
    pipeline = memoised(build_pipeline(settings, backend, build_embedder(settings)))
    result = evaluate_golden(
        questions, pipeline, tenant=args.tenant, groups=acl_groups(args.acl), progress=progress(), budgets=args.budgets
    )
    result["golden"] = str(args.golden)
    if variants:
        from es_rag.evaluation.sweep import sweep

        result["variants"] = sweep(
            questions,
            pipeline,
            variants,
            tenant=args.tenant,
            groups=acl_groups(args.acl),
            base={**result["overall"], "latency_ms": result["latency_ms"].get("total")},
            progress=progress(),
        )
    if args.plot:
        from es_rag.evaluation.evidence import plot_budget_curve

        result["plot"] = str(plot_budget_curve(result["budget_curve"], args.plot, title=str(args.golden)))
    if recipes is not None:
        from es_rag.encoders.cache import default_cache_dir
        from es_rag.integrations.recipes import compare_recipes

        result["recipes"] = compare_recipes(
            questions,
            pipeline,
            docs=args.docs,
            tenant=args.tenant,
            groups=acl_groups(args.acl),
            recipes=recipes,
            es_rag_result=result,
            exclude_dirs=[index_dir] if index_dir else [],
            progress=progress(),
            cache_dir=default_cache_dir() / "embeddings",
        )
    if args.records:
        with open(args.records, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in result["per_question"])
    if args.json:
        print_json(result)
    else:
        print(f"golden {args.golden}: {result['questions']} questions")
        print(format_golden(result))
        if variants:
            from es_rag.evaluation.sweep import format_sweep

            print("\none change at a time (answer coverage per stage; delta = packed coverage minus the base run's)")
            print(format_sweep(result["variants"]))
        if recipes is not None:
            from es_rag.integrations.recipes import format_recipes

            print()
            print(format_recipes(result["recipes"]))
    return 0
