"""Ablations: evaluations of one-change variants of the base settings on the same corpus and queries.

:func:`ablations_for` derives the default variants (the other analyzer, the BM25 protocols that differ from the
base, then :data:`ABLATIONS`); :func:`ablate` runs :func:`~es_rag.evaluation.run.evaluate` on the base and each
variant, reusing the base index unless the variant changes the BM25 set-up; :func:`ablation_table` and
:func:`format_ablation` give the deltas against the base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from es_rag.evaluation.beir import BM25_PROTOCOLS, apply_bm25_protocol, load_beir
from es_rag.evaluation.index import build_index
from es_rag.evaluation.run import DEPTH, evaluate
from es_rag.settings import Settings

ABLATIONS: dict[str, dict[str, Any]] = {
    "rank_constant=20": {"rank_constant": 20},
    "rerank_k=20": {"rerank_k": 20},
    "no reranker": {"rerank_model": None},
    "mmr_lambda=1.0 (no diversity)": {"mmr_lambda": 1.0},
    "context_k=10": {"context_k": 10},
}
"""One change each against the base settings (the seed's list, steps 5-8) besides the BM25 ones that
:func:`ablations_for` derives from the base."""


def ablations_for(base: Settings) -> dict[str, dict[str, Any]]:
    """The default one-change variants of ``base``: the other analyzer (english <-> standard), every
    :data:`~es_rag.evaluation.beir.BM25_PROTOCOLS` set-up that differs from the base's, then :data:`ABLATIONS`.

    Args:
        base: The settings every variant changes one thing of.
    """
    other = "standard" if base.index.analyzer.value == "english" else "english"
    out: dict[str, dict[str, Any]] = {f"analyzer={other}": {"analyzer": other}}
    for name, values in BM25_PROTOCOLS.items():
        if apply_bm25_protocol(base, name) != base:
            out[f"bm25 protocol {name}"] = dict(values)
    out.update(ABLATIONS)
    return out


_BM25_KEYS = ("analyzer", "bm25_fields", "bm25_tie_breaker", "bm25_k1", "bm25_b")


def ablate(
    dataset: str | Path,
    *,
    split: str = "test",
    settings: Settings | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    depth: int = DEPTH,
    progress: bool = False,
) -> dict[str, Any]:
    """Evaluate the base settings, then each variant changing one setting, on the same corpus and queries.

    Args:
        dataset: BEIR folder.
        split: Qrels split.
        settings: Base settings.
        variants: Name -> settings changes (default :func:`ablations_for` of the base).
        cache_dir: Embedding cache root.
        max_queries: Evaluate only the first N queries.
        depth: Candidates per channel.
        progress: Show progress bars.
    """
    base = settings or Settings()
    variants = ablations_for(base) if variants is None else variants
    corpus, _, _ = load_beir(dataset, split)
    index = build_index(corpus, base, cache_dir=cache_dir, progress=progress)
    common = dict(split=split, cache_dir=cache_dir, max_queries=max_queries, depth=depth, progress=progress)
    results = {"base": evaluate(dataset, settings=base, index=index, **common)}  # type: ignore[arg-type]
    for name, changes in variants.items():
        varied = base.replace(**changes)
        own = index
        if any(k in changes for k in _BM25_KEYS):
            own = build_index(corpus, varied, cache_dir=cache_dir, embedder=index.embedder)
        results[name] = evaluate(dataset, settings=varied, index=own, **common)  # type: ignore[arg-type]
    return {
        "dataset": str(dataset),
        "split": split,
        "variants": variants,
        "table": ablation_table(results),
        "results": results,
    }


def _final_stage(result: dict[str, Any]) -> dict[str, float]:
    stages = result["stages"]
    m = stages["rerank"] or stages["hybrid"]
    return {
        "bm25_ndcg@10": stages["bm25"]["ndcg@10"],
        "hybrid_ndcg@10": stages["hybrid"]["ndcg@10"],
        "final_ndcg@10": m["ndcg@10"],
        "final_mrr@10": m["mrr@10"],
        "union_recall@100": stages["union"]["recall@100"],
        "context_recall": stages["selection"]["context_recall"],
        "context_tokens": stages["selection"]["context_tokens"]["mean"],
    }


def ablation_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of metrics per variant with deltas against ``results["base"]``.

    Args:
        results: Variant name -> :func:`~es_rag.evaluation.run.evaluate` result (must contain ``base``).
    """
    base = _final_stage(results["base"])
    rows = []
    for name, res in results.items():
        vals = _final_stage(res)
        rows.append({"variant": name, **vals, **{f"delta_{k}": round(v - base[k], 4) for k, v in vals.items()}})
    return rows


def format_ablation(table: list[dict[str, Any]]) -> str:
    """Fixed-width table of :func:`ablation_table` rows.

    Args:
        table: Rows with a ``variant`` and metric/delta keys.
    """
    keys = ["final_ndcg@10", "final_mrr@10", "hybrid_ndcg@10", "union_recall@100", "context_recall"]
    lines = [f"{'variant':<40} " + " ".join(f"{k:>18}" for k in keys)]
    for row in table:
        cells = [f"{row[k]:.4f} ({row['delta_' + k]:+.4f})" for k in keys]
        lines.append(f"{row['variant']:<40} " + " ".join(f"{c:>18}" for c in cells))
    return "\n".join(lines)
