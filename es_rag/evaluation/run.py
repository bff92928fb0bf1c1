"""Stage-wise retrieval evaluation of a BEIR-layout dataset (:func:`evaluate`) and its text report.

Every query runs through the real :class:`~es_rag.pipeline.RagPipeline` (retrieve -> fusion -> dedup ->
rerank -> select -> pack) with ``candidate_k = depth`` so Recall@200 is measurable; the stages are scored
from its trace with ``ir_measures``:

- ``bm25``, ``dense``: each channel's list; ``union``: recall of the union of both channels' top N;
- ``hybrid``: the fused (RRF) list; ``rerank``: the cross-encoder order of the top ``rerank_k`` followed by
  the fused tail (None when no reranker could be loaded, with the reason in ``paths.rerank``);
- ``selection``: context recall (share of the judged documents that reach the packed context), duplicate
  rate and context tokens; ``chunking``: gold-span coverage when the dataset gives spans;
- latency per stage (p50/p95, ms) from the trace.

With a chunked :class:`~es_rag.evaluation.index.ChunkUnit` the ranked chunks are mapped to documents, a document
at its best chunk's rank (:func:`~es_rag.evaluation.metrics.documents_from_chunks`), before the document-level
qrels score any stage. The dataset is read by :mod:`es_rag.evaluation.beir`, indexed by
:mod:`es_rag.evaluation.index` and scored by :mod:`es_rag.evaluation.metrics`;
:func:`es_rag.evaluation.ablation.ablate` evaluates variants that change one setting at a time on the same corpus
and queries; :func:`es_rag.evaluation.ladder.ladder` runs the eight cumulative steps from fixed chunks to context
selection.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.errors import ClusterTimeout, ClusterUnreachable, ConfigError, EsRagError
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.index import (
    CHUNKER_VERSION,
    EVAL_TENANT,
    SOURCE_VERSION,
    ChunkedEvalIndex,
    ChunkUnit,
    EvalIndex,
    build_chunk_index,
    build_es_index,
    build_index,
)
from es_rag.evaluation.metrics import (
    RECALL_DEPTHS,
    documents_from_chunks,
    metrics,
    paired_bootstrap,
    per_query,
    percentiles,
    recall_at,
    run_from_ids,
)
from es_rag.evaluation.native_check import native_vs_client
from es_rag.filters import SearchFilter
from es_rag.progress import tqdm
from es_rag.settings import Settings

DEPTH = 200


def _chunking_stage(
    index: ChunkedEvalIndex,
    qrels: dict[str, dict[str, int]],
    dense_run: dict[str, dict[str, float]],
    channel_ids: dict[str, dict[str, list[str]]],
    depth: int,
) -> dict[str, Any]:
    """``stages.chunking`` of a chunked run: the unit, its sizes and cost, top-10 redundancy per channel and
    dense metrics on the queries whose judged documents were all split (the boundary-query proxy)."""
    unit = index.unit
    dup: dict[str, float] = {}
    for ch, lists in channel_ids.items():
        rates = [1.0 - len({index.source_of[c] for c in ids[:10]}) / len(ids[:10]) for ids in lists.values() if ids]
        dup[ch] = round(float(np.mean(rates)) if rates else 0.0, 4)
    per_doc = Counter(index.source_of.values())
    split = {
        q: judged
        for q, judged in qrels.items()
        if any(g > 0 for g in judged.values()) and all(per_doc.get(d, 0) >= 2 for d, g in judged.items() if g > 0)
    }
    boundary: dict[str, Any] = {
        "definition": "queries whose every relevant document is split into >= 2 chunks (the evidence may cross "
        "a chunk boundary); the qrels have no spans, so the queries that really straddle one are unknown",
        "queries": len(split),
        "dense": metrics(split, {q: dense_run.get(q, {}) for q in split}, depths=(10, 100)) if split else None,
    }
    return {
        "unit": f"{unit.label} ({index.chunker_version})",
        "strategy": unit.strategy,
        "max_tokens": unit.max_tokens,
        "overlap": unit.overlap,
        "chunker_version": index.chunker_version,
        **{k: v for k, v in index.stats.items() if k != "chunk_seconds"},
        "duplicate_rate@10": dup,
        "boundary_proxy": boundary,
        "scoring": f"chunks ranked (depth {depth} chunks per channel), mapped to documents; a document keeps "
        "its best chunk's rank (max-pooling), so Recall@N counts the first N distinct documents",
        "gold_span_coverage": None,
        "note": "the dataset gives document-level qrels, no gold spans: coverage of answer spans by chunks "
        "cannot be measured",
    }


def _safety(
    qrels: dict[str, dict[str, int]], runs: dict[str, dict[str, dict[str, float]]], split: str, pipeline: Any
) -> dict[str, Any]:
    """``stages.safety``: does the rerank stage beat the fused order on this split (paired bootstrap of per-query
    nDCG@10 over the queries it reranked), and the model directory's recorded verdict."""
    stage = pipeline.rerank_stage
    try:
        stored = stage.safety()
        recorded = None if stored is None else {k: stored.get(k) for k in ("verdict", "reason", "date", "data", "path")}
    except EsRagError as exc:
        recorded = {"error": str(exc)}
    out: dict[str, Any] = {"split": split, "recorded": recorded, "check": None}
    reranked = {q: qrels[q] for q in runs["rerank"] if q in qrels}
    if reranked:
        a = per_query(reranked, runs["rerank"])
        b = per_query(reranked, {q: runs["hybrid"].get(q, {}) for q in reranked})
        ids = sorted(a)
        if ids:
            out["check"] = paired_bootstrap([a[q] for q in ids], [b[q] for q in ids])
            out["check"]["metric"] = "ndcg@10, rerank stage minus hybrid (fused order)"
    return out


def evaluate(
    dataset: str | Path,
    *,
    split: str = "test",
    settings: Settings | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    query_ids: Collection[str] | None = None,
    progress: bool = False,
    depth: int = DEPTH,
    records_path: str | Path | None = None,
    index: EvalIndex | None = None,
    unit: ChunkUnit | None = None,
    es_backend: Any = None,
    compare_native: bool = True,
) -> dict[str, Any]:
    """Run every stage over the split's queries and score each stage.

    With a chunked ``unit`` (or a :class:`~es_rag.evaluation.index.ChunkedEvalIndex`) the corpus is indexed as
    chunks; every ranked list is mapped to documents by :func:`~es_rag.evaluation.metrics.documents_from_chunks`
    (a document keeps its best chunk's rank) before the document-level qrels score it, and ``stages.chunking``
    reports the unit's sizes and cost.

    Args:
        dataset: BEIR folder.
        split: Qrels split.
        settings: Model names, analyzer/BM25 fields, rank constant, rerank_k, context_k, token budget.
        cache_dir: Embedding cache root (default: ``~/.cache/es_rag``).
        max_queries: Evaluate only the first N queries (in qrels order).
        query_ids: Evaluate only these queries of the split (``es-rag tune``'s dev share of a train split); before
            ``max_queries``.
        progress: Show progress bars.
        depth: Candidates per channel (= ``candidate_k`` and RRF window of the evaluated pipeline).
        records_path: When set, one JSON run record per query is written there (JSON Lines).
        index: A prebuilt index of the same corpus (ablations reuse it when the BM25 setup is unchanged).
        unit: Retrieval unit (default: the whole document, BEIR protocol); must match ``index`` when both
            are given.
        es_backend: A connected Elasticsearch backend: the corpus (cut into ``unit``) is written to it
            (:func:`~es_rag.evaluation.index.build_es_index`) and every query runs against the cluster, with
            client-side fusion so each channel's list is scored (Elasticsearch's native rrf returns only the fused
            list; the client RRF equals it).
        compare_native: With ``es_backend``, also run every query on the native fusion path and compare the fused
            lists (:func:`~es_rag.evaluation.native_check.native_vs_client`; doubles the queries sent).
    """
    from es_rag.pipeline import RagPipeline
    from es_rag.wiring import build_reranker

    settings = settings or Settings()
    settings = settings.replace(
        candidate_k=max(depth, settings.rerank.k),
        num_candidates=max(depth, settings.retrieve.num_candidates, settings.rerank.k),
    )
    corpus, queries, qrels = load_beir(dataset, split)
    if query_ids is not None:
        wanted = set(query_ids)
        queries = {q: t for q, t in queries.items() if q in wanted}
        qrels = {q: qrels[q] for q in queries}
    if max_queries is not None:
        keep = list(queries)[:max_queries]
        queries = {q: queries[q] for q in keep}
        qrels = {q: qrels[q] for q in keep}
    if es_backend is not None:
        settings = settings.replace(fusion_path="client")
    if index is None and es_backend is not None:
        index = build_es_index(corpus, settings, es_backend, unit=unit, cache_dir=cache_dir, progress=progress)
    elif index is None:
        if unit is not None and unit.chunked:
            index = build_chunk_index(corpus, settings, unit, cache_dir=cache_dir, progress=progress)
        else:
            index = build_index(corpus, settings, cache_dir=cache_dir, progress=progress)
    elif unit is not None and unit != (index.unit if isinstance(index, ChunkedEvalIndex) else ChunkUnit()):
        have = index.unit.label if isinstance(index, ChunkedEvalIndex) else "document"
        raise ConfigError(f"unit: the given index holds {have} units, not {unit.label}")
    chunked = index if isinstance(index, ChunkedEvalIndex) else None
    source_of: dict[str, str] = chunked.source_of if chunked is not None else {}

    def docs(ids: Sequence[str]) -> list[str]:
        return documents_from_chunks(ids, source_of) if chunked is not None else list(ids)

    def src(cid: str) -> str:
        return source_of[cid] if chunked is not None else cid

    embedder = index.embedder
    reranker = build_reranker(settings)
    pipeline = RagPipeline(
        index.backend, embedder=embedder, settings=settings, tokenizer=embedder.tokenizer(), reranker=reranker
    )
    flt = SearchFilter(EVAL_TENANT)
    versions = {
        "source_version": SOURCE_VERSION,
        "chunker_version": chunked.chunker_version if chunked is not None else CHUNKER_VERSION,
        "embedding_version": embedder.version,
        "sparse_index_version": index.paths["bm25"],
        "dense_index_version": f"{embedder.version} flat-{settings.index.similarity.value}",
        "reranker": settings.rerank.model or "none",
    }
    runs: dict[str, dict[str, dict[str, float]]] = {k: {} for k in ("bm25", "dense", "hybrid", "rerank", "context")}
    channel_ids: dict[str, dict[str, list[str]]] = {"bm25": {}, "dense": {}}
    client_fused: dict[str, list[tuple[str, float | None]]] = {}
    lat: dict[str, list[float]] = {}
    tokens: list[int] = []
    dup_rates: list[float] = []
    rerank_path = "disabled"
    failures: list[dict[str, str]] = []
    gate_rows: list[tuple[bool, bool]] = []  # (answered, answerable) of reranked queries under a threshold
    threshold = pipeline.calibration().threshold if reranker is not None else None

    def relevant(qid: str) -> list[str]:
        return sorted(d for d, g in qrels[qid].items() if g > 0)

    records = open(records_path, "w", encoding="utf-8") if records_path else None
    try:
        for qid, qtext in tqdm(queries.items(), desc="eval", unit="q", disable=not progress):
            try:
                result = pipeline.search(qtext, flt)
            except (ClusterUnreachable, ClusterTimeout):
                raise  # every later query would fail the same way: stop, not a thousand failure records
            except Exception as exc:  # one bad query must not throw the run away: record it, score it as 0
                error = f"{type(exc).__name__}: {exc}"
                failures.append({"query_id": qid, "query": qtext, "error": error})
                for ch in ("bm25", "dense"):
                    channel_ids[ch][qid] = []
                for name in runs:
                    if name != "rerank" or reranker is not None:
                        runs[name][qid] = {}
                if records is not None:
                    failed = {"query_id": qid, "versions": versions, "error": error, "relevant": relevant(qid)}
                    records.write(json.dumps(failed, ensure_ascii=False) + "\n")
                continue
            trace = result.trace
            for st in trace.stages:
                lat.setdefault(st.name, []).append(st.ms)
            retrieve = trace.record("retrieve")
            for ch, took in (retrieve.info.get("took_ms", {}) if retrieve else {}).items():
                lat.setdefault(f"retrieve.{ch}", []).append(float(took))
            channels = result.channels
            for ch in ("bm25", "dense"):
                ids = channels.get(ch, [])
                channel_ids[ch][qid] = ids
                runs[ch][qid] = run_from_ids(docs(ids))
            fused = result.fused
            runs["hybrid"][qid] = run_from_ids(docs(fused))
            client_fused[qid] = [(h.chunk_id, h.fused_score) for h in result.stage_hits.get("retrieved", [])]
            rerank_path = trace.paths.get("rerank", rerank_path)
            reranked = result.reranked
            head = [h.chunk_id for h in result.candidates]
            if reranked:
                runs["rerank"][qid] = run_from_ids(docs([*head, *fused]))
            if reranked and threshold is not None:
                answerable = any(qrels[qid].get(src(h.chunk_id), 0) > 0 for h in result.candidates)
                gate_rows.append((not result.no_sufficient_evidence, answerable))
            packed = [c.chunk_id for c in result.context.citations]
            runs["context"][qid] = run_from_ids(docs(packed))
            tokens.append(result.context.tokens)
            sources = [c.source_id for c in result.context.citations]
            dup_rates.append(1.0 - len(set(sources)) / len(sources) if sources else 0.0)
            if records is not None:
                record = {
                    "query_id": qid,
                    "versions": versions,
                    "channels": {
                        ch: [{"id": d, "rank": r, "source_id": src(d)} for r, d in enumerate(ids, 1)]
                        for ch, ids in channels.items()
                    },
                    "fused": [{"id": d, "rank": r, "source_id": src(d)} for r, d in enumerate(fused, 1)],
                    "reranker_scores": (
                        [
                            {"id": h.chunk_id, "source_id": h.source_id, "score": h.rerank_score}
                            for h in result.candidates
                        ]
                        if reranked
                        else None
                    ),
                    "selected": packed,
                    "selected_sources": sources,
                    "excluded": [
                        {"stage": st.name, **d} for st in trace.stages for d in st.dropped if st.name != "rerank"
                    ],
                    "paths": dict(trace.paths),
                    "relevant": relevant(qid),
                }
                records.write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        if records is not None:
            records.close()
    stages: dict[str, Any] = {}
    for name in ("bm25", "dense"):
        stages[name] = metrics(qrels, runs[name])
    stages["union"] = {
        f"recall@{n}": recall_at(
            qrels,
            {q: run_from_ids([*docs(channel_ids["bm25"][q][:n]), *docs(channel_ids["dense"][q][:n])]) for q in queries},
            2 * n,
        )
        for n in RECALL_DEPTHS
    }
    stages["hybrid"] = metrics(qrels, runs["hybrid"])
    stages["rerank"] = metrics(qrels, runs["rerank"]) if runs["rerank"] else None
    stages["safety"] = _safety(qrels, runs, split, pipeline) if reranker is not None else None
    stages["selection"] = {
        "context_recall": recall_at(qrels, runs["context"], max(1, settings.select.context_k)),
        "duplicate_rate": round(float(np.mean(dup_rates)) if dup_rates else 0.0, 4),
        "context_tokens": {"mean": round(float(np.mean(tokens)) if tokens else 0.0, 1), **percentiles(tokens)},
        "context_k": settings.select.context_k,
        "token_budget": settings.pack.token_budget,
    }
    stages["gate"] = (
        {
            "threshold": threshold,
            "calibration_source": pipeline.calibration().source,
            "queries": len(gate_rows),
            "answerable": sum(a for _, a in gate_rows),
            "refused": sum(not ans for ans, _ in gate_rows),
            "no_answer_accuracy": round(sum(ans == a for ans, a in gate_rows) / len(gate_rows), 4)
            if gate_rows
            else None,
            "definition": "a query is answerable when a relevant document is among the reranked candidates; the gate "
            "is right when it answers (some hit >= threshold) exactly those",
        }
        if threshold is not None
        else None
    )
    if chunked is None:
        stages["chunking"] = {
            "unit": "whole document (BEIR protocol)",
            "gold_span_coverage": None,
            "note": "the dataset gives document-level qrels, no gold spans",
        }
    else:
        stages["chunking"] = _chunking_stage(chunked, qrels, runs["dense"], channel_ids, depth)
    if es_backend is not None and compare_native:  # the native bodies, beside the client path (native_check)
        stages["native_vs_client"] = native_vs_client(
            es_backend,
            settings,
            queries,
            client_fused,
            embedder=embedder,
            tokenizer=embedder.tokenizer(),
            flt=flt,
            progress=progress,
        )
    paths = dict(index.paths)
    paths["fusion"] = f"client-rrf (rank_constant={settings.fusion.rank_constant}, rank_window_size={depth})"
    paths["rerank"] = rerank_path if reranker is not None else "disabled"
    return {
        "dataset": str(dataset),
        "split": split,
        "queries": len(queries),
        "failed_queries": failures,
        "documents": chunked.documents if chunked is not None else len(index.ids),
        "stages": stages,
        "paths": paths,
        "versions": versions,
        "latency_ms": {k: percentiles(v) for k, v in lat.items() if v},
        "timing_s": {"embed_corpus": round(index.embed_seconds, 2)}
        | ({"chunk_corpus": chunked.stats["chunk_seconds"]} if chunked is not None else {}),
        "settings": {
            "embedding_model": settings.encoder.model,
            "rerank_model": settings.rerank.model,
            "analyzer": settings.index.analyzer.value,
            "bm25_fields": list(settings.retrieve.bm25_fields),
            "bm25_tie_breaker": settings.retrieve.bm25_tie_breaker,
            "bm25_k1": settings.index.bm25_k1,
            "bm25_b": settings.index.bm25_b,
            "rank_constant": settings.fusion.rank_constant,
            "rerank_k": settings.rerank.k,
            "context_k": settings.select.context_k,
            "token_budget": settings.pack.token_budget,
            "mmr_lambda": settings.select.mmr_lambda,
            "depth": depth,
        },
        "records": str(records_path) if records_path else None,
    }


def format_report(result: dict[str, Any]) -> str:
    """Human-readable table of an :func:`evaluate` result.

    Args:
        result: Output of :func:`evaluate`.
    """
    lines = [
        f"dataset {result['dataset']} split {result['split']}: {result['queries']} queries, "
        f"{result['documents']} documents",
        "",
        f"{'stage':<9} {'nDCG@10':>8} {'MRR@10':>8} " + " ".join(f"{'R@' + str(n):>7}" for n in RECALL_DEPTHS),
    ]
    for name in ("bm25", "dense", "union", "hybrid", "rerank"):
        m = result["stages"].get(name)
        if m is None:
            lines.append(f"{name:<9} (not run: {result['paths'].get('rerank', 'disabled')})")
            continue
        head = f"{m['ndcg@10']:>8.4f} {m['mrr@10']:>8.4f}" if "ndcg@10" in m else f"{'-':>8} {'-':>8}"
        lines.append(f"{name:<9} {head} " + " ".join(f"{m[f'recall@{n}']:>7.4f}" for n in RECALL_DEPTHS))
    sel = result["stages"]["selection"]
    lines.append(
        f"selection context_recall={sel['context_recall']:.4f} duplicate_rate={sel['duplicate_rate']:.4f} "
        f"context_tokens mean={sel['context_tokens']['mean']} p95={sel['context_tokens']['p95']} "
        f"(context_k={sel['context_k']}, budget={sel['token_budget']})"
    )
    gate = result["stages"].get("gate")
    if gate is not None:
        acc = "-" if gate["no_answer_accuracy"] is None else f"{gate['no_answer_accuracy']:.4f}"
        lines.append(
            f"gate      no_answer_accuracy={acc} threshold={gate['threshold']} ({gate['queries']} reranked queries, "
            f"{gate['answerable']} answerable, {gate['refused']} refused; calibration {gate['calibration_source']})"
        )
    safety = result["stages"].get("safety")
    if safety is not None:
        c = safety["check"]
        if c is not None:
            lines.append(
                f"safety    rerank - hybrid nDCG@10 {c['diff']:+.4f}, {c['confidence']:.0%} CI "
                f"[{c['ci'][0]:+.4f}, {c['ci'][1]:+.4f}] over {c['queries']} {safety['split']} queries "
                f"(paired bootstrap, {c['resamples']} resamples, seed {c['seed']}) -> {c['verdict']}"
            )
        rec = safety.get("recorded")
        if rec is not None:
            lines.append(f"          recorded in the model directory: {rec.get('verdict', rec.get('error'))}")
    ck = result["stages"]["chunking"]
    lines.append(f"chunking  {ck['unit']}: {ck['note']}")
    if "chunks" in ck:
        lines.append(
            f"          {ck['chunks']} chunks ({ck['chunks_per_document']['mean']}/doc, max "
            f"{ck['chunks_per_document']['max']}), tokens/chunk mean={ck['tokens_per_chunk']['mean']} "
            f"p95={ck['tokens_per_chunk']['p95']}, vectors {ck['index']['vector_bytes']} bytes, "
            f"embedded {ck['embed_tokens']} tokens in {ck['embed_seconds']} s ({ck['from_cache']} from cache)"
        )
    native = result["stages"].get("native_vs_client")
    if native is not None:
        lines.append("")
        if "skipped" in native:
            lines.append(f"native fusion path: not compared ({native['skipped']})")
        else:
            lines.append(
                f"native fusion path vs client, fused lists of {native['queries']} queries: {native['identical']} "
                f"identical, {native['ties']} equal up to the order of tied scores, {native['different']} different "
                f"(max score difference {native['max_score_difference']:.2g})"
            )
    lines.append("")
    lines.append("latency per query (ms):")
    lines.extend(f"  {k:<16} p50={v['p50']:>8.1f} p95={v['p95']:>8.1f}" for k, v in result["latency_ms"].items())
    lines.append("paths:")
    lines.extend(f"  {k}: {v}" for k, v in result["paths"].items())
    failed = result.get("failed_queries") or []
    if failed:
        lines.append(f"FAILED: {len(failed)} of {result['queries']} queries raised an error (scored as no result):")
        lines.extend(f"  {f['query_id']}: {f['error']}" for f in failed[:10])
        if len(failed) > 10:
            lines.append(f"  ... and {len(failed) - 10} more (all in --json / --records)")
    return "\n".join(lines)
