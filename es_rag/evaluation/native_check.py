"""``eval --es``: the native fusion path measured beside the client one.

An evaluation on a cluster fuses client-side, so each channel's list can be scored (Elasticsearch's native ``rrf``
returns only the fused list). That left the native request bodies, the path a search takes by default on an
Enterprise or trial licence, unmeasured. This runs every query again with ``fusion_path=native`` and compares the
fused list, rank by rank, with the client path's: identical, identical up to the order among equal fused scores
(Elasticsearch breaks a tie by shard and Lucene doc id, es_rag by chunk id), or different, with the first rank
where they part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from es_rag.filters import SearchFilter
from es_rag.progress import tqdm
from es_rag.settings import Settings

SCORE_TOLERANCE = 1e-6
"""Fused scores closer than this are a tie: Elasticsearch returns its ``rrf`` ``_score`` as a float32."""

EXAMPLES = 10
"""Differing queries listed in the report."""


def _groups(ranked: Sequence[tuple[str, float | None]]) -> list[tuple[float, frozenset[str]]]:
    """Runs of equal fused score, in rank order: ``(score, ids)``."""
    out: list[tuple[float, set[str]]] = []
    for cid, score in ranked:
        value = float(score) if score is not None else float("nan")
        if out and abs(out[-1][0] - value) <= SCORE_TOLERANCE * max(1.0, abs(value)):
            out[-1][1].add(cid)
        else:
            out.append((value, {cid}))
    return [(s, frozenset(ids)) for s, ids in out]


def compare_lists(
    client: Sequence[tuple[str, float | None]], native: Sequence[tuple[str, float | None]]
) -> tuple[str, int | None, float]:
    """How two fused lists of one query agree: ``identical``, ``ties`` (the same runs of equal scores, ordered
    differently inside a run) or ``different``; the first rank (1-based) where the ids part; the largest
    difference between the two paths' scores of one id.

    Args:
        client: ``(chunk id, fused score)`` of the client path, best first.
        native: The same of the native path.
    """
    client_ids = [c for c, _ in client]
    native_ids = [c for c, _ in native]
    first = next((i + 1 for i, (a, b) in enumerate(zip(client_ids, native_ids, strict=False)) if a != b), None)
    if first is None and len(client_ids) != len(native_ids):
        first = min(len(client_ids), len(native_ids)) + 1
    scores = {c: s for c, s in native if s is not None}
    diffs = [abs(float(s) - scores[c]) for c, s in client if s is not None and c in scores]
    max_diff = max(diffs, default=0.0)
    if first is None:
        return "identical", None, max_diff
    same_runs = [ids for _, ids in _groups(client)] == [ids for _, ids in _groups(native)]
    return ("ties" if same_runs else "different"), first, max_diff


def native_vs_client(
    backend: Any,
    settings: Settings,
    queries: Mapping[str, str],
    client_fused: Mapping[str, Sequence[tuple[str, float | None]]],
    *,
    embedder: Any,
    tokenizer: Any,
    flt: SearchFilter,
    progress: bool = False,
) -> dict[str, Any]:
    """Run every query on the native fusion path and compare its fused list with the client path's.

    Args:
        backend: The connected :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend`.
        settings: The evaluated settings (their client fusion path is replaced by ``native``).
        queries: Query id -> text.
        client_fused: Query id -> the client path's fused ``(chunk id, score)``, best first.
        embedder: The query embedder of the evaluation.
        tokenizer: Its tokenizer.
        flt: The evaluation's filter.
        progress: Show a progress bar.
    """
    from es_rag.pipeline import RagPipeline

    native = settings.replace(fusion_path="native", rerank_inference_id=None)
    caps = backend.probe()
    if backend.fusion_path_of(caps, native.replace(fusion_path="auto")) != "native":
        return {"skipped": f"no native fusion on this cluster: {caps.native_rrf_reason}"}
    pipeline = RagPipeline(backend, embedder=embedder, settings=native, tokenizer=tokenizer, reranker=None)
    counts = {"identical": 0, "ties": 0, "different": 0}
    examples: list[dict[str, Any]] = []
    max_diff = 0.0
    paths: set[str] = set()
    for qid, text in tqdm(queries.items(), desc="native", unit="q", disable=not progress):
        if qid not in client_fused:
            continue  # the query failed on the client path
        result = pipeline.search(text, flt)
        paths.add(result.trace.paths.get("retrieval", "?"))
        hits = result.stage_hits.get("retrieved", [])
        ranked = [(h.chunk_id, h.fused_score) for h in hits]
        verdict, first, diff = compare_lists(client_fused[qid], ranked)
        counts[verdict] += 1
        max_diff = max(max_diff, diff)
        if verdict == "different" and len(examples) < EXAMPLES:
            at = (first or 1) - 1
            examples.append(
                {
                    "query_id": qid,
                    "first_differing_rank": first,
                    "client": [c for c, _ in client_fused[qid][at : at + 3]],
                    "native": [c for c, _ in ranked[at : at + 3]],
                }
            )
    return {
        "queries": sum(counts.values()),
        **counts,
        "max_score_difference": max_diff,
        "native_paths": sorted(paths),
        "different_examples": examples,
    }
