"""Markdown report with PNG plots of an evaluation (and optional ablation) result.

Writes ``result.json``, ``report.md`` and, when matplotlib is installed (extra ``report``), three plots:
``recall_at_n.png`` (Recall@N of each channel, their union, the fused and reranked lists, N = candidate
depth), ``ndcg_per_stage.png`` and ``latency_per_stage.png`` (p50/p95 per pipeline stage); with a ladder
ablation also ``ladder.png`` (Recall@100 and nDCG@10 of the list each step scores).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from es_rag.evaluation.metrics import RECALL_DEPTHS

RANKED_STAGES = ("bm25", "dense", "hybrid", "rerank")


def _plots(result: dict[str, Any], out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    stages = result["stages"]
    names = []

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in ("bm25", "dense", "union", "hybrid", "rerank"):
        m = stages.get(name)
        if m:
            ax.plot(RECALL_DEPTHS, [m[f"recall@{n}"] for n in RECALL_DEPTHS], marker="o", label=name)
    ax.set_xlabel("N (candidates per channel; union: top N of each)")
    ax.set_ylabel("Recall@N")
    ax.set_title(f"Recall@N vs candidate depth ({Path(result['dataset']).name} {result['split']})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "recall_at_n.png", dpi=90)
    plt.close(fig)
    names.append("recall_at_n.png")

    ranked = [s for s in RANKED_STAGES if stages.get(s)]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ndcg = [stages[s]["ndcg@10"] for s in ranked]
    mrr = [stages[s]["mrr@10"] for s in ranked]
    xs = range(len(ranked))
    ax.bar([x - 0.2 for x in xs], ndcg, width=0.4, label="nDCG@10")
    ax.bar([x + 0.2 for x in xs], mrr, width=0.4, label="MRR@10")
    for x, v in zip(xs, ndcg, strict=True):
        ax.text(x - 0.2, v + 0.01, f"{v:.3f}", ha="center", fontsize=8)
    ax.set_xticks(list(xs), ranked)
    ax.set_ylim(0, 1)
    ax.set_title("nDCG@10 / MRR@10 per stage")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ndcg_per_stage.png", dpi=90)
    plt.close(fig)
    names.append("ndcg_per_stage.png")

    lat = result["latency_ms"]
    keys = list(lat)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = range(len(keys))
    ax.bar([x - 0.2 for x in xs], [lat[k]["p50"] for k in keys], width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [lat[k]["p95"] for k in keys], width=0.4, label="p95")
    ax.set_xticks(list(xs), keys, rotation=30, ha="right")
    ax.set_ylabel("ms per query")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_title("Latency per stage")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "latency_per_stage.png", dpi=90)
    plt.close(fig)
    names.append("latency_per_stage.png")
    return names


def _ladder_plot(ladder: dict[str, Any], out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    rows = ladder["table"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for key, label in (("recall@100", "Recall@100"), ("ndcg@10", "nDCG@10")):
        points = [(r["step"], r["metrics"][key]) for r in rows if r["metrics"].get(key) is not None]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
            for x, y in points:
                ax.annotate(f"{y:.3f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax.set_xticks([r["step"] for r in rows])
    ax.set_xlabel("ladder step (1-4 dense on chunk units, 5 union, 6 fused, 7 reranked)")
    ax.margins(y=0.15)  # the steps differ by hundredths: a 0-1 axis would flatten them
    ax.grid(alpha=0.3)
    ax.set_title(f"Ladder ablation ({Path(ladder['dataset']).name} {ladder['split']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ladder.png", dpi=90)
    plt.close(fig)
    return ["ladder.png"]


def markdown(
    result: dict[str, Any],
    *,
    plots: list[str] | None = None,
    ablation: dict[str, Any] | None = None,
    ladder: dict[str, Any] | None = None,
) -> str:
    """Markdown text of an evaluation result.

    Args:
        result: :func:`es_rag.evaluation.run.evaluate` output.
        plots: PNG file names (relative to the report) to embed.
        ablation: :func:`es_rag.evaluation.ablation.ablate` output, for the deltas table.
        ladder: :func:`es_rag.evaluation.ladder.ladder` output, for the ladder table.
    """
    stages = result["stages"]
    lines = [
        f"# Evaluation: {Path(result['dataset']).name} ({result['split']})",
        "",
        f"{result['queries']} queries, {result['documents']} documents. Settings: "
        + ", ".join(f"`{k}={v}`" for k, v in result["settings"].items()),
        "",
        "## Retrieval and rerank stages",
        "",
        "| stage | nDCG@10 | MRR@10 | " + " | ".join(f"R@{n}" for n in RECALL_DEPTHS) + " |",
        "|---|---|---|" + "---|" * len(RECALL_DEPTHS),
    ]
    for name in ("bm25", "dense", "union", "hybrid", "rerank"):
        m = stages.get(name)
        if m is None:
            lines.append(f"| {name} | not run: {result['paths'].get('rerank', 'disabled')} |" + " |" * 5)
            continue
        head = f"{m['ndcg@10']:.4f} | {m['mrr@10']:.4f}" if "ndcg@10" in m else "- | -"
        lines.append(f"| {name} | {head} | " + " | ".join(f"{m[f'recall@{n}']:.4f}" for n in RECALL_DEPTHS) + " |")
    sel = stages["selection"]
    lines += [
        "",
        "`union` is the recall of the union of the BM25 and dense top N (no order, so no nDCG).",
        "",
        "## Selection and packing",
        "",
        "| context recall | duplicate rate | context tokens mean | p50 | p95 | context_k | token budget |",
        "|---|---|---|---|---|---|---|",
        f"| {sel['context_recall']:.4f} | {sel['duplicate_rate']:.4f} | {sel['context_tokens']['mean']} | "
        f"{sel['context_tokens']['p50']} | {sel['context_tokens']['p95']} | {sel['context_k']} | "
        f"{sel['token_budget']} |",
        "",
        f"Chunking: {stages['chunking']['unit']}; gold-span coverage: "
        f"{stages['chunking']['gold_span_coverage'] or 'n/a'} ({stages['chunking']['note']}).",
        "",
    ]
    ck = stages["chunking"]
    if "chunks" in ck:
        lines += [
            "| chunks | per doc mean / max | tokens/chunk mean / p95 | indexed / corpus tokens | vector bytes "
            "| embedded tokens | embed s (from cache) |",
            "|---|---|---|---|---|---|---|",
            f"| {ck['chunks']} | {ck['chunks_per_document']['mean']} / {ck['chunks_per_document']['max']} | "
            f"{ck['tokens_per_chunk']['mean']} / {ck['tokens_per_chunk']['p95']} | {ck['indexed_token_ratio']} | "
            f"{ck['index']['vector_bytes']} | {ck['embed_tokens']} | {ck['embed_seconds']} ({ck['from_cache']}) |",
            "",
            f"Scoring: {ck['scoring']}.",
            "",
        ]
    lines += [
        "## Latency per stage (ms per query)",
        "",
        "| stage | p50 | p95 |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {v['p50']:.1f} | {v['p95']:.1f} |" for k, v in result["latency_ms"].items()]
    if ablation is not None:
        keys = ["final_ndcg@10", "final_mrr@10", "hybrid_ndcg@10", "union_recall@100", "context_recall"]
        lines += [
            "",
            "## Ablations (one change each; delta vs base)",
            "",
            "| variant | " + " | ".join(keys) + " |",
            "|---|" + "---|" * len(keys),
        ]
        for row in ablation["table"]:
            cells = [f"{row[k]:.4f} ({row['delta_' + k]:+.4f})" for k in keys]
            lines.append(f"| {row['variant']} | " + " | ".join(cells) + " |")
    if ladder is not None:
        from es_rag.evaluation.ladder import format_ladder

        lines += [
            "",
            "## Ladder ablation (one change per step)",
            "",
            f"{ladder['queries']} queries; units: "
            + ", ".join(f"step {k}: `{v}`" for k, v in ladder["params"]["units"].items())
            + ". Steps 1-4 score the dense channel on each unit; 5-8 read the step-4 run. A delta is against "
            "the previous step, or the step named by `vs` (the nearest earlier step reporting that metric).",
            "",
            format_ladder(ladder["table"]),
        ]
        if ladder["notes"]:
            lines += ["", *[f"- note: {n}" for n in ladder["notes"]]]
    lines += ["", "## Paths", ""]
    lines += [f"- **{k}**: {v}" for k, v in result["paths"].items()]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{p[:-4]}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def write_report(
    result: dict[str, Any],
    directory: str | Path,
    *,
    ablation: dict[str, Any] | None = None,
    ladder: dict[str, Any] | None = None,
) -> Path:
    """Write ``result.json``, the PNG plots and ``report.md`` into ``directory``; returns the Markdown path.

    Args:
        result: :func:`es_rag.evaluation.run.evaluate` output.
        directory: Output folder (created).
        ablation: Optional :func:`es_rag.evaluation.ablation.ablate` output.
        ladder: Optional :func:`es_rag.evaluation.ladder.ladder` output (its table, notes and a ``ladder.png`` plot).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    payload = dict(result)
    if ablation is not None:
        payload["ablation"] = ablation["table"]
    if ladder is not None:
        payload["ladder"] = {k: v for k, v in ladder.items() if k != "results"}
    (out / "result.json").write_text(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    plots = _plots(result, out)
    if ladder is not None and plots:
        plots += _ladder_plot(ladder, out)
    md = out / "report.md"
    md.write_text(markdown(result, plots=plots, ablation=ablation, ladder=ladder), encoding="utf-8")
    return md
