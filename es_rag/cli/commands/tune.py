"""``es-rag tune``: search the documented knobs on a dev or train split with optuna, print the trials and write the
best settings as a ``--settings`` file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from es_rag.cli.commands.eval import SCOPE
from es_rag.cli.options import (
    add_bm25_protocol,
    add_json,
    add_mmr_preset,
    add_settings,
    bm25_preset,
    comma_list,
    index_dir_path,
    mmr_preset,
    settings_from_args,
)
from es_rag.cli.render import print_json

HELP = "search settings on a dataset's dev/train split (optuna) and write the best as a --settings file"


def register(sub: Any) -> None:
    """Add the ``tune`` parser.

    Args:
        sub: The subparsers of ``es-rag``.
    """
    from es_rag.evaluation.tune import DEV_FRACTION, KNOBS, SEED, STAGES

    described = "; ".join(f"{k.name}{' (index-time)' if k.index_time else ''}: {k.help}" for k in KNOBS)
    p = sub.add_parser(
        "tune",
        help=HELP,
        description=HELP + ". Runs on the embedded backend with the eval machinery: the corpus is embedded once "
        "(embedding cache) and indexed once per index-time set-up; each trial runs the split's queries through "
        "the pipeline and scores one stage. The test split is refused.",
    )
    p.add_argument(
        "--dataset", required=True, metavar="DIR", help="BEIR folder: corpus*.jsonl, queries.jsonl, qrels/SPLIT.tsv"
    )
    p.add_argument(
        "--split",
        default="dev",
        metavar="dev|train",
        help=f"queries to tune on: dev = qrels/dev.tsv, or (none there) a seeded --dev-fraction of train; train = "
        f"every train query; test is refused (default: %(default)s, fraction {DEV_FRACTION})",
    )
    p.add_argument(
        "--dev-fraction",
        type=float,
        default=DEV_FRACTION,
        metavar="F",
        help="share of the train queries forming the dev split when the dataset has no qrels/dev.tsv "
        "(default: %(default)s)",
    )
    p.add_argument("--max-queries", type=int, default=None, metavar="N", help="use only the first N queries")
    g = p.add_argument_group("search")
    g.add_argument("--trials", type=int, default=30, metavar="N", help="trial budget, trial 0 = the base settings "
                   "(default: %(default)s)")  # fmt: skip
    g.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="stop starting trials after this")
    g.add_argument(
        "--sampler",
        choices=["tpe", "grid"],
        default="tpe",
        help="tpe = optuna's Bayesian TPE; grid = every combination of each knob's grid values, up to --trials "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--seed", type=int, default=SEED, help="seed of the sampler and the dev split (default: %(default)s)"
    )
    g.add_argument(
        "--stage",
        choices=list(STAGES),
        default="final",
        help="stage whose metric is maximised; final = rerank when a reranker runs, else hybrid (the reranker is "
        "off unless --stage rerank) (default: %(default)s)",
    )
    g.add_argument(
        "--metric",
        default="ndcg@10",
        help="metric of that stage (ndcg@10, mrr@10, recall@100, ...; context_recall for selection) "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--knobs",
        type=comma_list,
        default=None,
        metavar="K,...",
        help=f"knobs to search (default: the query-time knobs that change --stage). Catalogue: {described}",
    )
    g.add_argument(
        "--index-time",
        action="store_true",
        help="also search the index-time knobs (BM25 k1/b): on Elasticsearch they need a new index, here one "
        "embedded BM25 index per trial's k1/b (the embeddings come from the cache)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--out",
        default="es-rag.toml",
        metavar="FILE",
        help="settings file of the best trial, with its provenance (default: %(default)s)",
    )
    o.add_argument("--show", type=int, default=20, metavar="N", help="table rows (default: %(default)s)")
    add_json(o, "print the result as JSON")
    p.add_argument(
        "--index-dir",
        metavar="DIR",
        default=None,
        type=index_dir_path,
        help="embedding cache root (default: ~/.cache/es_rag/embeddings)",
    )
    add_bm25_protocol(p)
    sections = add_settings(p, SCOPE)
    add_mmr_preset(sections["select"])


def run(args: argparse.Namespace) -> int:
    """Run ``tune``.

    Args:
        args: Parsed arguments.
    """
    from es_rag import __version__
    from es_rag.evaluation.tune import (
        check_split,
        format_trials,
        profile_header,
        profile_values,
        select_knobs,
        tune,
    )
    from es_rag.settings.file import dump_settings

    check_split(args.split)
    knobs = select_knobs(args.stage, names=args.knobs, index_time=args.index_time)
    settings = settings_from_args(args, presets=[bm25_preset(args), mmr_preset(args)])

    def show(row: dict[str, Any]) -> None:
        print(f"es-rag tune: trial {row['trial']}: {row['score']:.4f} ({row['seconds']}s)", file=sys.stderr)

    result = tune(
        args.dataset,
        settings=settings,
        split=args.split,
        stage=args.stage,
        metric=args.metric,
        knobs=knobs,
        trials=args.trials,
        timeout=args.timeout,
        sampler=args.sampler,
        seed=args.seed,
        dev_fraction=args.dev_fraction,
        max_queries=args.max_queries,
        cache_dir=args.index_dir,
        progress=show,
    )
    values = profile_values(result)
    out = Path(args.out)
    header = profile_header(result, tool=f"es-rag tune {__version__}")
    out.write_text(dump_settings(values, header=header), encoding="utf-8")
    if args.json:
        print_json(
            {k: v for k, v in result.items() if k not in ("best_settings", "base_settings")}
            | {"profile": values, "out": str(out)}
        )
        return 0
    print(f"tuned on {result['dataset']}, {result['split']}: {result['stage']} {result['metric']}")
    print(format_trials(result, limit=args.show))
    delta = result["best_score"] - result["defaults_score"]
    print(
        f"\nbest: trial {result['best_trial']} {result['best_score']:.4f} vs defaults {result['defaults_score']:.4f} "
        f"({delta:+.4f}); written to {out} (read it back with --settings {out})"
    )
    return 0
