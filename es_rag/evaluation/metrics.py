"""Retrieval metrics of an evaluation run: ir_measures scores of ranked lists and the helpers that make them.

:func:`metrics` gives nDCG@10, MRR@10 and Recall@N (:data:`RECALL_DEPTHS`) averaged over every judged query;
:func:`run_from_ids` turns a ranked id list into the run ir_measures scores; :func:`documents_from_chunks` maps
a ranked chunk list to documents (max-pooling by rank) so document-level qrels can score it;
:func:`recall_at` and :func:`percentiles` are the single-cutoff recall and the p50/p95 summaries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from es_rag.errors import InputError

RECALL_DEPTHS = (10, 50, 100, 200)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50 and p95 of ``values``, rounded to 3 decimals (both 0.0 when empty).

    Args:
        values: Samples (latencies in ms, token counts).
    """
    if not values:
        return {"p50": 0.0, "p95": 0.0}
    arr = np.asarray(values)
    return {"p50": round(float(np.percentile(arr, 50)), 3), "p95": round(float(np.percentile(arr, 95)), 3)}


def _measures(depths: Sequence[int]) -> dict[str, Any]:
    from ir_measures import RR, R, nDCG

    out: dict[str, Any] = {"ndcg@10": nDCG @ 10, "mrr@10": RR @ 10}
    for n in depths:
        out[f"recall@{n}"] = R @ n
    return out


def metrics(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], depths: Sequence[int] = RECALL_DEPTHS
) -> dict[str, float]:
    """nDCG@10, MRR@10 (RR@10) and Recall@N of ``run``, averaged over every judged query (ir_measures).

    Queries without any retrieved document count as 0 (they are added to the run as empty).

    Args:
        qrels: Query id -> doc id -> grade.
        run: Query id -> doc id -> score (higher = better).
        depths: Recall cut-offs.
    """
    import ir_measures

    named = _measures(depths)
    per_query: dict[str, dict[str, float]] = {name: {} for name in named}
    inverse = {str(m): name for name, m in named.items()}
    for row in ir_measures.iter_calc(list(named.values()), qrels, run):
        per_query[inverse[str(row.measure)]][row.query_id] = float(row.value)
    n = len([q for q in qrels if any(g > 0 for g in qrels[q].values())]) or 1
    return {name: round(sum(vals.values()) / n, 4) for name, vals in per_query.items()}


def recall_at(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], cutoff: int) -> float:
    """Recall@``cutoff`` of ``run`` averaged over every judged query (ir_measures).

    Args:
        qrels: Query id -> doc id -> grade.
        run: Query id -> doc id -> score (higher = better).
        cutoff: Rank cut-off.
    """
    import ir_measures
    from ir_measures import R

    n = len([q for q in qrels if any(g > 0 for g in qrels[q].values())]) or 1
    return round(sum(float(r.value) for r in ir_measures.iter_calc([R @ cutoff], qrels, run)) / n, 4)


def run_from_ids(ids: Sequence[str]) -> dict[str, float]:
    """Rank-derived scores (first occurrence of an id wins), so ir_measures keeps this order.

    Args:
        ids: Document ids, best first (duplicates allowed; later ones are ignored).
    """
    out: dict[str, float] = {}
    for i, d in enumerate(ids):
        if d not in out:
            out[d] = float(len(ids) - i)
    return out


def documents_from_chunks(ids: Sequence[str], source_of: Mapping[str, str]) -> list[str]:
    """Document ids of a ranked chunk list, each document at the rank of its best (first) chunk.

    This is max-pooling by rank: a document is as good as its best chunk, later chunks of the same
    document are dropped, so document-level qrels score a chunk ranking.

    Args:
        ids: Chunk ids, best first.
        source_of: Chunk id -> document id.
    """
    out: list[str] = []
    seen: set[str] = set()
    for cid in ids:
        try:
            doc = source_of[cid]
        except KeyError:
            raise InputError(cid, "source_id", "chunk id is not in the evaluated index") from None
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out


def per_query(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], measure: str = "ndcg@10"
) -> dict[str, float]:
    """One measure (``ndcg@10``, ``mrr@10``, ``recall@N``) per judged query of ``run`` (0 for a query the run lacks).

    Args:
        qrels: Query id -> doc id -> grade.
        run: Query id -> doc id -> score (higher = better).
        measure: Measure name as :func:`metrics` keys it.
    """
    import ir_measures

    depth = int(measure.split("@")[1]) if measure.startswith("recall@") else 10
    m = _measures((depth,))[measure]
    judged = [q for q in qrels if any(g > 0 for g in qrels[q].values())]
    out = dict.fromkeys(judged, 0.0)
    for row in ir_measures.iter_calc([m], {q: qrels[q] for q in judged}, run):
        out[row.query_id] = float(row.value)
    return out


def ndcg_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k of one ranked document list, as trec_eval (and ir_measures' ``nDCG@k``) computes it: gain = the
    grade, discount ``log2(rank + 1)``, the ideal list from every judged document; a repeated document counts once.

    Args:
        ranked: Document ids, best first.
        grades: Doc id -> grade (graded qrels of the query).
        k: Cut-off.
    """
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    seen: set[str] = set()
    dcg, rank = 0.0, 0
    for d in ranked:
        if d in seen:
            continue
        seen.add(d)
        rank += 1
        if rank > k:
            break
        g = grades.get(d, 0)
        if g > 0:
            dcg += g / np.log2(rank + 1)
    idcg = sum(g / np.log2(i + 2) for i, g in enumerate(ideal))
    return float(dcg / idcg)


BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 13
CONFIDENCE = 0.95


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """Paired bootstrap of the mean difference ``a - b`` over queries: the queries are resampled with replacement
    ``resamples`` times (numpy ``default_rng(seed)``), and the percentile interval of the resampled mean differences
    at ``confidence`` is the confidence interval. The verdict: ``helps`` when the lower bound is > 0, ``hurts`` when
    the upper bound is < 0, else ``neutral``.

    Args:
        a: Per-query metric of the candidate (e.g. the reranked list).
        b: Per-query metric of the baseline (the fused order), same queries in the same order.
        resamples: Bootstrap resamples.
        seed: Random seed.
        confidence: Two-sided confidence level.

    Raises:
        InputError: The lists differ in length or are empty.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or not len(x):
        raise InputError("bootstrap", "queries", f"needs two equally long non-empty lists, got {len(x)} and {len(y)}")
    d = x - y
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    lo, hi = (float(v) for v in np.quantile(means, [tail, 1.0 - tail]))
    verdict = "helps" if lo > 0 else ("hurts" if hi < 0 else "neutral")
    return {
        "queries": len(d),
        "candidate": round(float(x.mean()), 4),
        "baseline": round(float(y.mean()), 4),
        "diff": round(float(d.mean()), 4),
        "ci": [round(lo, 4), round(hi, 4)],
        "confidence": confidence,
        "resamples": resamples,
        "seed": seed,
        "wins": int((d > 0).sum()),
        "losses": int((d < 0).sum()),
        "verdict": verdict,
    }
