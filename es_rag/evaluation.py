"""Stage-wise retrieval evaluation on BEIR-layout datasets.

Layout: ``corpus*.jsonl`` (read in name order; ``{"_id", "title", "text"}``), ``queries.jsonl``
(``{"_id", "text"}``), ``qrels/<split>.tsv`` (``query-id corpus-id score``, graded, header optional).
Each corpus document is one retrieval unit (BEIR protocol); its vector embeds ``title + " " + text``.
Metrics come from ``ir_measures``: nDCG@10, Recall@10, Recall@100, MRR@10 (RR@10) for the BM25,
dense, hybrid (client RRF) and rerank stages, plus per-stage latency percentiles.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from es_rag.backends.embedded import EmbeddedBackend
from es_rag.cache import EmbeddingCache, default_cache_dir
from es_rag.config import Settings
from es_rag.errors import InputError, ModelLoadError
from es_rag.filters import SearchFilter
from es_rag.fusion import reciprocal_rank_fusion
from es_rag.models import Chunk, Hit

EVAL_TENANT = "eval"
DEPTH = 100


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{n}", "json", f"malformed JSON: {exc.msg}") from None
            if not isinstance(row, dict) or "_id" not in row:
                raise InputError(f"{path}:{n}", "_id", "missing")
            rows.append(row)
    return rows


def load_beir(
    directory: str | Path, split: str
) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    """Corpus, the split's queries and its graded qrels.

    Args:
        directory: Dataset folder.
        split: Qrels split name (``qrels/<split>.tsv``).
    """
    root = Path(directory)
    files = sorted(root.glob("corpus*.jsonl"))
    if not files:
        raise InputError(str(root), "corpus", "no corpus*.jsonl file")
    corpus = {}
    for f in files:
        for row in _read_jsonl(f):
            corpus[str(row["_id"])] = {"title": str(row.get("title") or ""), "text": str(row.get("text") or "")}
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise InputError(str(qrels_path), "split", f"no qrels for split {split!r}")
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate(qrels_path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split("\t")
        if not line.strip() or (n == 1 and not parts[-1].strip().lstrip("-").isdigit()):
            continue
        if len(parts) < 3:
            raise InputError(f"{qrels_path}:{n}", "qrels", "expected query-id, corpus-id, score")
        qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    all_queries = {str(r["_id"]): str(r.get("text", "")) for r in _read_jsonl(root / "queries.jsonl")}
    missing = [q for q in qrels if q not in all_queries]
    if missing:
        raise InputError(str(root / "queries.jsonl"), "_id", f"{len(missing)} qrels queries missing, e.g. {missing[0]}")
    queries = {q: all_queries[q] for q in qrels}
    return corpus, queries, qrels


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0}
    arr = np.asarray(values)
    return {"p50": round(float(np.percentile(arr, 50)), 3), "p95": round(float(np.percentile(arr, 95)), 3)}


def _metrics(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    import ir_measures
    from ir_measures import RR, R, nDCG

    measures = [nDCG @ 10, R @ 10, R @ 100, RR @ 10]
    agg = ir_measures.calc_aggregate(measures, qrels, run)
    names = {str(nDCG @ 10): "ndcg@10", str(R @ 10): "recall@10", str(R @ 100): "recall@100", str(RR @ 10): "mrr@10"}
    return {names[str(m)]: round(float(agg[m]), 4) for m in measures}


def _run_from(hits: Sequence[Hit]) -> dict[str, float]:
    # Rank-derived scores: ir_measures sorts by score, so strictly decreasing values keep our order.
    n = len(hits)
    return {h.source_id: float(n - i) for i, h in enumerate(hits)}


def evaluate(
    dataset: str | Path,
    *,
    split: str = "test",
    settings: Settings | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Run every stage over the split's queries and score each stage.

    Args:
        dataset: BEIR folder.
        split: Qrels split.
        settings: Model names, rank constant, rerank_k.
        cache_dir: Embedding cache root (default: ``~/.cache/es_rag``).
        max_queries: Evaluate only the first N queries (in qrels order).
        progress: Show progress bars.
    """
    from es_rag.embedding import SentenceTransformerEmbedder
    from es_rag.rerank import CrossEncoderReranker

    settings = settings or Settings()
    corpus, queries, qrels = load_beir(dataset, split)
    if max_queries is not None:
        keep = list(queries)[:max_queries]
        queries = {q: queries[q] for q in keep}
        qrels = {q: qrels[q] for q in keep}
    embedder = SentenceTransformerEmbedder(settings.embedding_model, batch_size=64, show_progress=progress)
    embedder.warm_up()
    cache = EmbeddingCache(Path(cache_dir) if cache_dir else default_cache_dir() / "embeddings", embedder.version)
    ids = list(corpus)
    texts = [(corpus[d]["title"] + " " + corpus[d]["text"]).strip() for d in ids]
    t0 = time.perf_counter()
    matrix, encoded = cache.embed(texts, embedder.embed_documents)
    embed_s = time.perf_counter() - t0
    backend = EmbeddedBackend(None, dims=matrix.shape[1])
    chunks = [
        Chunk(
            chunk_id=d,
            source_id=d,
            source_version="1",
            parent_id=None,
            heading_path=(),
            start_offset=0,
            end_offset=len(corpus[d]["text"]),
            chunker_version="whole-doc",
            tenant_id=EVAL_TENANT,
            acl=("public",),
            title=corpus[d]["title"],
            text=corpus[d]["text"] or corpus[d]["title"] or " ",
            token_count=0,
            vector=matrix[i],
        )
        for i, d in enumerate(ids)
    ]
    report = backend.index(chunks)
    flt = SearchFilter(EVAL_TENANT)
    reranker = CrossEncoderReranker(settings.reranker_model) if settings.reranker_model else None
    paths: dict[str, str] = {
        "backend": "embedded",
        "fusion": f"client-rrf (rank_constant={settings.rank_constant}, rank_window_size={DEPTH})",
        "embedding": embedder.version,
        "embedding_cache": f"{encoded} encoded, {len(ids) - encoded} from cache ({cache.root})",
    }
    if report.failed:
        paths["index_failures"] = f"{len(report.failed)} documents failed: {report.failed[:3]}"
    rerank_error = None
    if reranker is None:
        rerank_error = "disabled"
    else:
        try:
            reranker.warm_up()
            paths["rerank"] = f"cross-encoder {reranker.name} over the top {settings.rerank_k} hybrid candidates"
        except ModelLoadError as exc:
            rerank_error = f"unavailable: {exc}"
    if rerank_error:
        paths["rerank"] = rerank_error
    runs: dict[str, dict[str, dict[str, float]]] = {"bm25": {}, "dense": {}, "hybrid": {}, "rerank": {}}
    lat: dict[str, list[float]] = {k: [] for k in ("embed_query", "bm25", "dense", "fusion", "rerank")}
    for qid, qtext in tqdm(queries.items(), desc="eval", unit="q", disable=not progress):
        t = time.perf_counter()
        qvec = embedder.embed_query(qtext)
        lat["embed_query"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        bm25 = backend.bm25(qtext, flt, DEPTH)
        lat["bm25"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        dense = backend.knn(qvec, flt, DEPTH)
        lat["dense"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        by_id = {h.chunk_id: h for h in [*dense, *bm25]}
        fused = reciprocal_rank_fusion(
            [[h.chunk_id for h in bm25], [h.chunk_id for h in dense]],
            rank_constant=settings.rank_constant,
            rank_window_size=DEPTH,
        )
        hybrid = [by_id[f.id].replace(rrf_score=f.score) for f in fused]
        lat["fusion"].append((time.perf_counter() - t) * 1000)
        runs["bm25"][qid] = _run_from(bm25)
        runs["dense"][qid] = _run_from(dense)
        runs["hybrid"][qid] = _run_from(hybrid)
        if reranker is not None and rerank_error is None:
            t = time.perf_counter()
            head = reranker.rerank(qtext, hybrid[: settings.rerank_k])
            lat["rerank"].append((time.perf_counter() - t) * 1000)
            runs["rerank"][qid] = _run_from([*head, *hybrid[settings.rerank_k :]])
    stages: dict[str, Any] = {name: _metrics(qrels, run) for name, run in runs.items() if run}
    if "rerank" not in stages:
        stages["rerank"] = None
    return {
        "dataset": str(dataset),
        "split": split,
        "queries": len(queries),
        "documents": len(ids),
        "stages": stages,
        "paths": paths,
        "latency_ms": {k: _percentiles(v) for k, v in lat.items() if v},
        "timing_s": {"embed_corpus": round(embed_s, 2)},
        "settings": {
            "embedding_model": settings.embedding_model,
            "reranker_model": settings.reranker_model,
            "rank_constant": settings.rank_constant,
            "rerank_k": settings.rerank_k,
            "depth": DEPTH,
        },
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
        f"{'stage':<8} {'nDCG@10':>8} {'R@10':>8} {'R@100':>8} {'MRR@10':>8}",
    ]
    for name, m in result["stages"].items():
        if m is None:
            lines.append(f"{name:<8} {'(not run: see paths.rerank)':>35}")
            continue
        lines.append(
            f"{name:<8} {m['ndcg@10']:>8.4f} {m['recall@10']:>8.4f} {m['recall@100']:>8.4f} {m['mrr@10']:>8.4f}"
        )
    lines.append("")
    lines.append(
        "latency per query (ms):  "
        + "  ".join(f"{k} p50={v['p50']:.1f} p95={v['p95']:.1f}" for k, v in result["latency_ms"].items())
    )
    lines.append("paths:")
    lines.extend(f"  {k}: {v}" for k, v in result["paths"].items())
    return "\n".join(lines)
