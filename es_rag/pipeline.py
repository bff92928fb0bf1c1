"""The retrieval pipeline: embed -> retrieve (BM25 + kNN, same filters) -> fuse -> dedup -> rerank
-> select (MMR + per-source cap) -> pack, with a trace of every stage."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from es_rag.backends.base import Retrieval, SearchBackend
from es_rag.config import Settings
from es_rag.errors import EsRagError, ModelLoadError
from es_rag.filters import SearchFilter
from es_rag.fusion import reciprocal_rank_fusion
from es_rag.models import Hit, Trace
from es_rag.packing import PackedContext, pack_context
from es_rag.rerank import CrossEncoderReranker
from es_rag.selection import mmr
from es_rag.tokenization import Tokenizer

log = logging.getLogger(__name__)
CHANNEL_SCORE = {"bm25": "bm25_score", "dense": "dense_score"}


@dataclass
class SearchResult:
    """Selected hits (best first), the packed context and the trace."""

    query: str
    hits: list[Hit]
    context: PackedContext
    trace: Trace
    candidates: list[Hit]

    def to_dict(self) -> dict[str, Any]:
        """The JSON printed by ``es-rag search --json``."""
        return {
            "query": self.query,
            "hits": [hit_to_dict(h) for h in self.hits],
            "context": self.context.to_dict(),
            "trace": self.trace.to_dict(),
        }


def hit_to_dict(hit: Hit) -> dict[str, Any]:
    """JSON form of a hit with every stage's score.

    Args:
        hit: The hit.
    """
    return {
        "chunk_id": hit.chunk_id,
        "source_id": hit.source_id,
        "source_version": hit.source_version,
        "parent_id": hit.parent_id,
        "tenant_id": hit.tenant_id,
        "heading_path": list(hit.heading_path),
        "start_offset": hit.start_offset,
        "end_offset": hit.end_offset,
        "text": hit.text,
        "scores": hit.scores(),
        "ranks": dict(hit.ranks),
        "sources": list(hit.retrieval_sources),
        "truncated": hit.truncated,
    }


def fuse_channels(channels: dict[str, list[Hit]], settings: Settings) -> list[Hit]:
    """Client-side RRF over the channel lists with the same parameters as the native retriever.

    Args:
        channels: Per channel, hits best first.
        settings: rank_constant, candidate_k (rank_window_size) and channel weights.
    """
    names = list(channels)
    lists = [[h.chunk_id for h in channels[n]] for n in names]
    weights = [settings.channel_weights.get(n, 1.0) for n in names]
    fused = reciprocal_rank_fusion(
        lists, rank_constant=settings.rank_constant, rank_window_size=settings.candidate_k, weights=weights
    )
    by_id: dict[str, Hit] = {}
    for name in names:
        for h in channels[name]:
            base = by_id.get(h.chunk_id, h)
            attr = CHANNEL_SCORE.get(name)
            by_id[h.chunk_id] = base.replace(**{attr: getattr(h, attr)}) if attr else base
    out = []
    for item in fused:
        ranks = {names[i]: r for i, r in enumerate(item.ranks) if r is not None}
        out.append(
            by_id[item.id].replace(
                rrf_score=item.score, ranks=ranks, retrieval_sources=tuple(ranks), final_score=item.score
            )
        )
    return out


class RagPipeline:
    """Runs every stage for one query against one backend.

    Args:
        backend: Where candidates come from.
        embedder: Query embedder (anything with ``embed_query``); None = BM25 only.
        settings: Candidate counts and stage parameters.
        tokenizer: Counts tokens for the context budget.
        reranker: Cross-encoder; None disables reranking (fused order is kept).
    """

    def __init__(
        self,
        backend: SearchBackend,
        *,
        embedder: Any,
        settings: Settings,
        tokenizer: Tokenizer,
        reranker: CrossEncoderReranker | None = None,
    ) -> None:
        self.backend = backend
        self.embedder = embedder
        self.settings = settings
        self.tokenizer = tokenizer
        self.reranker = reranker
        self._reranker_error: str | None = None

    # -- stages ----------------------------------------------------------------------------
    def _embed(self, query: str, trace: Trace) -> np.ndarray | None:
        with trace.stage("embed_query") as st:
            if self.embedder is None:
                trace.paths["dense"] = "disabled: no embedder"
                return None
            try:
                vec = np.asarray(self.embedder.embed_query(query), dtype=np.float32)
                st.out_count = 1
                trace.paths["dense"] = "client-embedding"
                return vec
            except (EsRagError, RuntimeError, ValueError, OSError) as exc:
                trace.paths["dense"] = f"fallback: bm25 only (query embedding failed: {exc})"
                st.info["error"] = str(exc)
                return None

    def _retrieve(self, query: str, vec: np.ndarray | None, flt: SearchFilter, trace: Trace) -> Retrieval:
        with trace.stage("retrieve") as st:
            ret = self.backend.retrieve(query, vec, flt, self.settings)
            st.out_count = sum(len(v) for v in ret.channels.values()) if ret.fused is None else len(ret.fused)
            st.info["channels"] = {
                name: [
                    {"id": h.chunk_id, "rank": r, "score": getattr(h, CHANNEL_SCORE.get(name, "final_score"))}
                    for r, h in enumerate(hits, start=1)
                ]
                for name, hits in ret.channels.items()
            }
            st.info["took_ms"] = ret.took_ms
            if ret.notes:
                st.info["notes"] = ret.notes
        trace.paths["retrieval"] = ret.path
        return ret

    def _fuse(self, ret: Retrieval, trace: Trace) -> list[Hit]:
        with trace.stage("fusion", in_count=sum(len(v) for v in ret.channels.values())) as st:
            if ret.fused is not None:
                fused = ret.fused
                trace.paths["fusion"] = "native-rrf (Elasticsearch rrf retriever)"
            else:
                fused = fuse_channels(ret.channels, self.settings)
                trace.paths["fusion"] = (
                    f"client-rrf (rank_constant={self.settings.rank_constant}, "
                    f"rank_window_size={self.settings.candidate_k})"
                )
            st.out_count = len(fused)
            st.info["fused"] = [
                {"id": h.chunk_id, "rank": i, "score": h.rrf_score} for i, h in enumerate(fused, start=1)
            ]
        return fused

    def _dedup(self, hits: list[Hit], trace: Trace) -> list[Hit]:
        with trace.stage("dedup", in_count=len(hits)) as st:
            seen_ids: set[str] = set()
            seen_hash: dict[str, str] = {}
            out = []
            for h in hits:
                if h.chunk_id in seen_ids:
                    st.drop(h.chunk_id, "same chunk_id")
                    continue
                key = h.content_hash
                if key and key in seen_hash:
                    st.drop(h.chunk_id, f"same content_hash as {seen_hash[key]}")
                    continue
                seen_ids.add(h.chunk_id)
                if key:
                    seen_hash[key] = h.chunk_id
                out.append(h)
            st.out_count = len(out)
        return out

    def _rerank(self, query: str, hits: list[Hit], trace: Trace) -> list[Hit]:
        k = self.settings.rerank_k
        with trace.stage("rerank", in_count=len(hits)) as st:
            head, tail = hits[:k], hits[k:]
            for h in tail:
                st.drop(h.chunk_id, f"beyond rerank_k={k}")
            if self.reranker is None:
                trace.paths["rerank"] = "disabled: fused order kept"
                st.out_count = len(head)
                return head
            if self._reranker_error is None:
                try:
                    self.reranker.warm_up()
                except ModelLoadError as exc:
                    self._reranker_error = str(exc)
            if self._reranker_error is not None:
                trace.paths["rerank"] = f"fallback: fused order (reranker unavailable: {self._reranker_error})"
                st.info["fallback"] = True
                st.out_count = len(head)
                return head
            ranked = self.reranker.rerank(query, head)
            ranked = [h.replace(final_score=h.semantic_score) for h in ranked]
            trace.paths["rerank"] = f"cross-encoder {self.reranker.name}"
            st.info["truncated"] = [h.chunk_id for h in ranked if h.truncated]
            st.out_count = len(ranked)
            return ranked

    def _select(self, query_vec: np.ndarray | None, hits: list[Hit], trace: Trace) -> list[Hit]:
        s = self.settings
        with trace.stage("select", in_count=len(hits)) as st:
            if not hits:
                return []
            rel = np.asarray([h.final_score if h.final_score is not None else 0.0 for h in hits], dtype=np.float64)
            span = rel.max() - rel.min()
            rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
            vectors = [h.vector for h in hits if h.vector is not None]
            if len(vectors) == len(hits):
                order = mmr(
                    query_vec if query_vec is not None else np.zeros(len(vectors[0])),
                    np.stack(vectors),
                    lambda_mult=s.mmr_lambda,
                    k=len(hits),
                    relevance=rel,
                )
                trace.paths["select"] = f"mmr(lambda={s.mmr_lambda}) + max {s.max_chunks_per_source}/source"
            else:
                order = list(range(len(hits)))
                trace.paths["select"] = f"relevance order (no stored vectors) + max {s.max_chunks_per_source}/source"
            per_source: dict[str, int] = {}
            chosen: list[int] = []
            for i in order:
                h = hits[i]
                if len(chosen) >= s.context_k:
                    st.drop(h.chunk_id, f"not selected (context_k={s.context_k})")
                    continue
                if per_source.get(h.source_id, 0) >= s.max_chunks_per_source:
                    st.drop(h.chunk_id, f"per-source cap ({s.max_chunks_per_source}) for {h.source_id}")
                    continue
                per_source[h.source_id] = per_source.get(h.source_id, 0) + 1
                chosen.append(i)
            # Keep relevance order in the output; MMR decided membership.
            chosen.sort(key=lambda i: -rel[i])
            st.out_count = len(chosen)
            return [hits[i] for i in chosen]

    def _pack(self, hits: list[Hit], trace: Trace) -> PackedContext:
        with trace.stage("pack", in_count=len(hits)) as st:
            ctx = pack_context(hits, self.tokenizer, budget=self.settings.token_budget)
            for o in ctx.omitted:
                st.drop(o["id"], o["reason"])
            st.out_count = len(ctx.citations)
            st.info["tokens"] = ctx.tokens
            st.info["budget"] = self.settings.token_budget
        return ctx

    # -- entry point -----------------------------------------------------------------------
    def search(self, query: str, flt: SearchFilter) -> SearchResult:
        """Run every stage for ``query`` under the hard filter ``flt``.

        Args:
            query: The user's query (non-empty).
            flt: Tenant, ACL groups and metadata filter.
        """
        if not query or not query.strip():
            raise EsRagError("query: empty query")
        trace = Trace()
        vec = self._embed(query, trace)
        ret = self._retrieve(query, vec, flt, trace)
        fused = self._fuse(ret, trace)
        deduped = self._dedup(fused, trace)
        ranked = self._rerank(query, deduped, trace)
        selected = self._select(vec, ranked, trace)
        ctx = self._pack(selected, trace)
        packed_ids = {c.chunk_id for c in ctx.citations}
        final = [h for h in selected if h.chunk_id in packed_ids]
        return SearchResult(query=query, hits=final, context=ctx, trace=trace, candidates=ranked)


def format_trace(result: SearchResult) -> str:
    """A readable, fixed-width trace of every stage.

    Args:
        result: A search result.
    """
    lines = [f"{'stage':<12} {'in':>5} {'out':>5} {'dropped':>8} {'ms':>9}"]
    for st in result.trace.stages:
        lines.append(f"{st.name:<12} {st.in_count:>5} {st.out_count:>5} {len(st.dropped):>8} {st.ms:>9.1f}")
    lines.append("paths:")
    for key, value in result.trace.paths.items():
        lines.append(f"  {key:<10} {value}")
    return "\n".join(lines)


def summarize_hits(hits: Sequence[Hit]) -> list[str]:
    """One line per hit with its scores, for the human-readable output.

    Args:
        hits: Hits to summarize.
    """
    rows = []
    for i, h in enumerate(hits, start=1):
        sc = h.scores()
        fmt = " ".join(f"{k}={v:.4f}" for k, v in sc.items() if v is not None)
        rows.append(f"{i:>2}. {h.source_id} § {' > '.join(h.heading_path) or '-'}  [{fmt}]")
    return rows
