"""The ladder ablation: eight cumulative steps, each changing exactly one thing from the step before.

1. fixed-size chunks, no overlap (baseline);
2. only the chunk length changes;
3. only overlap is added;
4. only the splitter changes to a structure-aware one (same length and overlap);
5. BM25 is added next to the dense channel: union recall of both top N;
6. fusion (RRF, or score fusion when ``fusion_method`` is ``linear``) orders the union;
7. the cross-encoder reranks the fused head (skipped, with the reason, when no reranker loads);
8. context selection (dedup, MMR, per-source caps, ``context_k``, token budget) packs the context.

Steps 1-4 are scored on the dense channel alone (the retriever stays the same, only the unit changes), so
each needs its own chunked index and one :func:`~es_rag.evaluation.run.evaluate` run; steps 5-8 read the
stages of the step-4 run (one evaluate gives every channel and stage). Steps 1-3 run without the reranker
(their dense numbers do not depend on it), step 4 with the configured one.

Every row carries its metrics and, for each metric, the delta against the nearest earlier step that
reports the same metric (``delta_vs`` names that step; a metric that appears for the first time has no
delta). Recall@N at steps 5/6 compares with the dense (4) and union (5) lists at the same N.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.index import ChunkUnit, build_chunk_index
from es_rag.evaluation.run import DEPTH, evaluate
from es_rag.progress import terminal
from es_rag.settings import Settings

STRUCTURE_STRATEGIES = ("recursive", "structure")
"""Splitters step 4 may switch to: ``recursive`` (paragraph / line / sentence / word separators, overlap
kept as trailing pieces) or ``structure`` (Markdown/plain-text blocks, overlap only inside a sentence that
alone exceeds the limit)."""

CHUNK_STEPS = (1, 2, 3, 4)


def _clip(tokens: int, limit: int | None, name: str, notes: list[str]) -> int:
    if limit is not None and tokens > limit:
        notes.append(f"{name} {tokens} exceeds the embedding model's input limit ({limit} tokens): {limit} used")
        return limit
    return tokens


def _dense_row(result: dict[str, Any]) -> dict[str, Any]:
    stages = result["stages"]
    dense, ck = stages["dense"], stages["chunking"]
    boundary = ck["boundary_proxy"]["dense"]
    return {
        "recall@10": dense["recall@10"],
        "recall@100": dense["recall@100"],
        "ndcg@10": dense["ndcg@10"],
        "mrr@10": dense["mrr@10"],
        "chunks": ck["chunks"],
        "tokens_per_chunk": ck["tokens_per_chunk"]["mean"],
        "tokens_per_chunk_p95": ck["tokens_per_chunk"]["p95"],
        "indexed_token_ratio": ck["indexed_token_ratio"],
        "embed_tokens": ck["embed_tokens"],
        "embed_s": ck["embed_seconds"],
        "vector_bytes": ck["index"]["vector_bytes"],
        "duplicate_rate@10": ck["duplicate_rate@10"]["dense"],
        "split_queries": ck["boundary_proxy"]["queries"],
        "split_recall@10": boundary["recall@10"] if boundary else None,
    }


def _deltas(rows: list[dict[str, Any]]) -> None:
    for i, row in enumerate(rows):
        row["delta"], row["delta_vs"] = {}, {}
        for key, value in row["metrics"].items():
            ref = next((p for p in reversed(rows[:i]) if p["metrics"].get(key) is not None and value is not None), None)
            if ref is None:
                row["delta"][key], row["delta_vs"][key] = None, None
                continue
            diff = value - ref["metrics"][key]
            row["delta"][key] = diff if isinstance(diff, int) else round(diff, 4)
            row["delta_vs"][key] = ref["step"]


def ladder_table(
    results: dict[int, dict[str, Any]], units: dict[int, ChunkUnit], *, fusion_method: str = "rrf"
) -> list[dict[str, Any]]:
    """The eight rows from the evaluate results of the four chunk steps.

    Args:
        results: Step (1-4) -> :func:`~es_rag.evaluation.run.evaluate` result of that step's unit.
        units: Step (1-4) -> the unit it evaluated.
        fusion_method: ``rrf`` or ``linear`` (how step 6 is named).
    """
    missing = [s for s in CHUNK_STEPS if s not in results or s not in units]
    if missing:
        raise ConfigError(f"ladder: results and units are needed for steps 1-4; missing step(s) {missing}")
    u1, u2, u3, u4 = (units[s] for s in CHUNK_STEPS)
    top = results[4]
    stages = top["stages"]
    rows: list[dict[str, Any]] = [
        {
            "step": 1,
            "change": f"baseline: {u1.strategy} chunks of {u1.max_tokens} tokens, overlap {u1.overlap}",
            "scored": "dense",
            "unit": u1.label,
            "metrics": _dense_row(results[1]),
        },
        {
            "step": 2,
            "change": f"chunk length {u1.max_tokens} -> {u2.max_tokens} tokens",
            "scored": "dense",
            "unit": u2.label,
            "metrics": _dense_row(results[2]),
        },
        {
            "step": 3,
            "change": f"overlap {u2.overlap} -> {u3.overlap} tokens",
            "scored": "dense",
            "unit": u3.label,
            "metrics": _dense_row(results[3]),
        },
        {
            "step": 4,
            "change": f"splitter {u3.strategy} -> {u4.strategy} (same length and overlap)",
            "scored": "dense",
            "unit": u4.label,
            "metrics": _dense_row(results[4]),
        },
        {
            "step": 5,
            "change": "add BM25 next to dense",
            "scored": "union (bm25 top N + dense top N, before fusion)",
            "unit": u4.label,
            "metrics": {
                "recall@10": stages["union"]["recall@10"],
                "recall@100": stages["union"]["recall@100"],
                "bm25_recall@100": stages["bm25"]["recall@100"],
            },
        },
        {
            "step": 6,
            "change": f"add {'RRF' if fusion_method == 'rrf' else 'score (linear) fusion'} of both channels",
            "scored": "hybrid (fused list)",
            "unit": u4.label,
            "metrics": {
                "recall@10": stages["hybrid"]["recall@10"],
                "recall@100": stages["hybrid"]["recall@100"],
                "ndcg@10": stages["hybrid"]["ndcg@10"],
                "mrr@10": stages["hybrid"]["mrr@10"],
            },
        },
    ]
    rerank = stages["rerank"]
    row7: dict[str, Any] = {
        "step": 7,
        "change": "add the cross-encoder reranker",
        "scored": f"rerank (top rerank_k={top['settings']['rerank_k']} reordered, fused tail)",
        "unit": u4.label,
    }
    if rerank is None:
        reason = top["paths"].get("rerank", "disabled")
        row7["metrics"] = {}
        row7["skipped"] = (
            f"skipped: no reranker ({reason})" if top["settings"]["rerank_model"] is None else f"skipped: {reason}"
        )
    else:
        lat = top["latency_ms"].get("rerank", {})
        row7["metrics"] = {
            "recall@10": rerank["recall@10"],
            "ndcg@10": rerank["ndcg@10"],
            "mrr@10": rerank["mrr@10"],
            "rerank_ms_p50": lat.get("p50"),
            "rerank_ms_p95": lat.get("p95"),
        }
    rows.append(row7)
    sel = stages["selection"]
    rows.append(
        {
            "step": 8,
            "change": "add context selection (dedup, MMR, per-source cap, context_k, token budget)",
            "scored": f"packed context (context_k={sel['context_k']}, budget {sel['token_budget']})",
            "unit": u4.label,
            "metrics": {
                "context_recall": sel["context_recall"],
                "context_tokens": sel["context_tokens"]["mean"],
                "context_tokens_p95": sel["context_tokens"]["p95"],
                "duplicate_rate": sel["duplicate_rate"],
            },
        }
    )
    for row in rows:
        row.setdefault("skipped", None)
        row["result"] = min(row["step"], 4)
    _deltas(rows)
    return rows


def ladder(
    dataset: str | Path,
    *,
    split: str = "test",
    settings: Settings | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    depth: int = DEPTH,
    progress: bool = False,
    short_tokens: int = 128,
    long_tokens: int = 256,
    overlap: int = 32,
    structure: str = "recursive",
    embedder: Any = None,
) -> dict[str, Any]:
    """Run the eight-step ladder on one corpus and query set; returns the table and the four runs.

    Sizes above the embedding model's input limit are clipped to it (and the clipping is listed in
    ``notes``); a step whose unit equals the previous one reuses its run.

    Args:
        dataset: BEIR folder.
        split: Qrels split.
        settings: Model names, BM25 set-up, fusion, reranker, selection settings (one set for every step).
        cache_dir: Embedding cache root (default: ``~/.cache/es_rag``).
        max_queries: Evaluate only the first N queries.
        depth: Candidates per channel, in chunks.
        progress: Show progress bars.
        short_tokens: Chunk length of step 1 (fixed, no overlap).
        long_tokens: Chunk length of steps 2-8.
        overlap: Overlap in tokens added at step 3 (kept by steps 4-8).
        structure: Splitter of step 4: ``recursive`` or ``structure``.
        embedder: A ready embedder (default: the settings' sentence-transformers model).
    """
    base = settings or Settings()
    if structure not in STRUCTURE_STRATEGIES:
        raise ConfigError(
            f"ladder structure: invalid value {structure!r}; valid values: {', '.join(STRUCTURE_STRATEGIES)}"
        )
    if embedder is None:
        from es_rag.encoders.embedder import make_embedder

        embedder = make_embedder(
            base.encoder.model,
            batch_size=64,
            device=base.encoder.device,
            precision=base.encoder.precision,
            show_progress=progress and terminal(),  # its own bar redraws with \r: a terminal only
        )
        embedder.warm_up()
    notes: list[str] = []
    limit = embedder.tokenizer().max_tokens
    short = _clip(short_tokens, limit, "short_tokens", notes)
    long = _clip(long_tokens, limit, "long_tokens", notes)
    units = {
        1: ChunkUnit("fixed", short, 0),
        2: ChunkUnit("fixed", long, 0),
        3: ChunkUnit("fixed", long, overlap),
        4: ChunkUnit(structure, long, overlap),
    }
    corpus, _, _ = load_beir(dataset, split)
    no_rerank = base.replace(rerank_model=None)
    results: dict[int, dict[str, Any]] = {}
    for step, unit in units.items():
        previous = units.get(step - 1)
        if previous == unit and step != 4:
            notes.append(f"step {step}: same unit as step {step - 1} ({unit.label}), its run is reused")
            results[step] = results[step - 1]
            continue
        run_settings = base if step == 4 else no_rerank
        index = build_chunk_index(corpus, run_settings, unit, cache_dir=cache_dir, progress=progress, embedder=embedder)
        results[step] = evaluate(
            dataset,
            split=split,
            settings=run_settings,
            cache_dir=cache_dir,
            max_queries=max_queries,
            progress=progress,
            depth=depth,
            index=index,
        )
    table = ladder_table(results, units, fusion_method=base.fusion.method)
    return {
        "dataset": str(dataset),
        "split": split,
        "queries": results[4]["queries"],
        "params": {
            "short_tokens": short,
            "long_tokens": long,
            "overlap": overlap,
            "structure": structure,
            "depth": depth,
            "max_queries": max_queries,
            "units": {str(s): u.label for s, u in units.items()},
        },
        "notes": notes,
        "table": table,
        "results": {str(s): r for s, r in results.items()},
    }


_RATES = ("recall", "ndcg", "mrr", "duplicate_rate", "ratio")


def _cell(row: dict[str, Any], key: str) -> str:
    value = row["metrics"].get(key)
    if value is None:
        return "-"
    places = 4 if any(r in key for r in _RATES) else 1
    text = f"{value:.{places}f}" if isinstance(value, float) else f"{value:,}"
    delta = row["delta"].get(key)
    if delta is None:
        return text
    shown = f"{delta:+.{places}f}" if isinstance(delta, float) else f"{delta:+,}"
    vs = row["delta_vs"][key]
    return f"{text} ({shown}{'' if vs == row['step'] - 1 else f' vs {vs}'})"


_MAIN = ("recall@10", "recall@100", "ndcg@10", "mrr@10")
_OTHER_NAMES = {
    "chunks": "chunks",
    "tokens_per_chunk": "tokens/chunk",
    "indexed_token_ratio": "indexed/corpus tokens",
    "embed_tokens": "embedded tokens",
    "embed_s": "embed s",
    "duplicate_rate@10": "dup@10",
    "split_queries": "split-doc queries",
    "split_recall@10": "their R@10",
    "bm25_recall@100": "bm25 R@100",
    "rerank_ms_p50": "rerank ms p50",
    "rerank_ms_p95": "rerank ms p95",
    "context_recall": "context recall",
    "context_tokens": "context tokens",
    "duplicate_rate": "duplicate rate",
}


def format_ladder(table: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`ladder_table` rows: ``value (delta)``, with ``vs N`` when the delta is taken
    against a step other than the previous one.

    Args:
        table: Ladder rows.
    """
    lines = [
        "| step | change | scored list | Recall@10 | Recall@100 | nDCG@10 | MRR@10 | other |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table:
        main = [_cell(row, k) for k in _MAIN]
        if row["skipped"]:
            other = row["skipped"]
        else:
            other = "; ".join(
                f"{name} {_cell(row, key)}" for key, name in _OTHER_NAMES.items() if key in row["metrics"]
            )
        lines.append(f"| {row['step']} | {row['change']} | {row['scored']} | " + " | ".join(main) + f" | {other} |")
    return "\n".join(lines)
