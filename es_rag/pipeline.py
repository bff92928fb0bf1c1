"""The retrieval pipeline: embed -> retrieve (BM25 + kNN, same filters) -> fuse -> dedup -> rerank
-> gate (dynamic top-k, no-answer) -> business rules -> select (MMR + caps) -> expand (parent /
neighbours) -> pack, with a trace of every stage. Every stage takes and returns :class:`Hit` lists,
writes its own score and records each dropped hit with its reason (see docs/post_retrieval.md)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.backend import Retrieval, SearchBackend
from es_rag.cross_encoder.model import (
    RANKING_TEXT_VERSION,
    Calibration,
    CrossEncoderReranker,
    RerankOutput,
    load_calibration,
    order_by_scores,
    ranking_text,
)
from es_rag.cross_encoder.result_cache import ResultCache, cache_key
from es_rag.encoders.tokenizer import HFTokenizer, Tokenizer
from es_rag.errors import EsRagError, ModelLoadError
from es_rag.filters import SearchFilter
from es_rag.records import Hit, Trace
from es_rag.settings import Settings, VectorMode
from es_rag.stages.boost import BusinessRules, business_rank
from es_rag.stages.dedup import dedup_hits
from es_rag.stages.expand import expand_neighbors, expand_parents
from es_rag.stages.fusion import linear_fusion, reciprocal_rank_fusion
from es_rag.stages.gate import NO_SUFFICIENT_EVIDENCE, GateDecision, apply_gate
from es_rag.stages.pack import PROMPT_VERSION, PackedContext, pack_context
from es_rag.stages.select import select_context

log = logging.getLogger(__name__)
CHANNEL_SCORE = {"bm25": "bm25_score", "dense": "dense_score", "exact": "exact_score"}


@dataclass
class SearchResult:
    """Selected hits (best first), the packed context and the trace."""

    query: str
    hits: list[Hit]
    context: PackedContext
    trace: Trace
    candidates: list[Hit]
    status: str = "undecided"
    status_basis: str = ""

    @property
    def no_sufficient_evidence(self) -> bool:
        """True when the calibrated gate found no hit good enough to answer from."""
        return self.status == NO_SUFFICIENT_EVIDENCE

    def to_dict(self) -> dict[str, Any]:
        """The JSON printed by ``es-rag search --json``."""
        return {
            "query": self.query,
            "status": self.status,
            "status_basis": self.status_basis,
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
        "expanded_from": list(hit.expanded_from),
    }


def fuse_channels(channels: dict[str, list[Hit]], settings: Settings) -> list[Hit]:
    """Client-side RRF over the channel lists with the same parameters as the native retriever.

    Args:
        channels: Per channel, hits best first.
        settings: rank_constant, candidate_k (rank_window_size) and channel weights.
    """
    names = list(channels)
    lists = [[h.chunk_id for h in channels[n]] for n in names]
    weights = [settings.fusion.channel_weights.get(n, 1.0) for n in names]
    if settings.fusion.method == "linear":
        scored = [
            [(h.chunk_id, float(getattr(h, CHANNEL_SCORE.get(n, "final_score")) or 0.0)) for h in channels[n]]
            for n in names
        ]
        fused = linear_fusion(
            scored,
            rank_window_size=settings.retrieve.candidate_k,
            weights=weights,
            normalizer=settings.fusion.normalizer,
        )
    else:
        fused = reciprocal_rank_fusion(
            lists,
            rank_constant=settings.fusion.rank_constant,
            rank_window_size=settings.retrieve.candidate_k,
            weights=weights,
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
        tokenizer: Counts tokens for the context budget (unless ``settings.pack.tokenizer`` names the
            target LLM's tokenizer).
        reranker: Cross-encoder; None disables reranking (fused order is kept).
        business_rules: Soft ranking rules; None = built from the settings.
        cache: Rerank result cache; None = an in-memory LRU of ``settings.rerank.cache_size`` entries
            (no cache when that is 0).
    """

    def __init__(
        self,
        backend: SearchBackend,
        *,
        embedder: Any,
        settings: Settings,
        tokenizer: Tokenizer,
        reranker: CrossEncoderReranker | None = None,
        business_rules: BusinessRules | None = None,
        cache: ResultCache | None = None,
    ) -> None:
        self.backend = backend
        self.embedder = embedder
        self.settings = settings
        self.tokenizer = tokenizer
        self.reranker = reranker
        self.business_rules = business_rules or BusinessRules(
            source_tiers=dict(settings.boost.source_tiers),
            freshness_weight=settings.boost.freshness_weight,
            half_life_days=settings.boost.freshness_half_life_days,
            latest_version_boost=settings.boost.latest_version_boost,
        )
        self.cache = (
            cache
            if cache is not None
            else (ResultCache(settings.rerank.cache_size) if settings.rerank.cache_size > 0 else None)
        )
        self._reranker_error: str | None = None
        self._calibration: Calibration | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pack_tok: Tokenizer | None = None
        self._pack_tok_error: str | None = None

    # -- stages ----------------------------------------------------------------------------
    def _embed(self, query: str, trace: Trace) -> np.ndarray | None:
        with trace.stage("embed_query") as st:
            if self.settings.encoder.vectors is VectorMode.SEMANTIC_TEXT:
                trace.paths["dense"] = (
                    f"elasticsearch semantic query: the cluster embeds the query ({self.settings.encoder.inference_id})"
                )
                return None
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
                trace.paths["fusion"] = f"{ret.path} (Elasticsearch retriever)"
            else:
                fused = fuse_channels(ret.channels, self.settings)
                trace.paths["fusion"] = (
                    f"client-linear (normalizer={self.settings.fusion.normalizer}, "
                    f"rank_window_size={self.settings.retrieve.candidate_k})"
                    if self.settings.fusion.method == "linear"
                    else f"client-rrf (rank_constant={self.settings.fusion.rank_constant}, "
                    f"rank_window_size={self.settings.retrieve.candidate_k})"
                )
            st.out_count = len(fused)
            st.info["fused"] = [
                {"id": h.chunk_id, "rank": i, "score": h.rrf_score} for i, h in enumerate(fused, start=1)
            ]
        return fused

    def _dedup(self, hits: list[Hit], trace: Trace) -> list[Hit]:
        s = self.settings
        with trace.stage("dedup", in_count=len(hits)) as st:
            result = dedup_hits(hits, adjacent_overlap=s.dedup.adjacent_overlap, near_threshold=s.dedup.near_threshold)
            for cid, reason in result.dropped:
                st.drop(cid, reason)
            st.info["rules"] = {
                "chunk_id": True,
                "content_hash": True,
                "formatting": True,
                "adjacent_overlap": s.dedup.adjacent_overlap,
                "near_threshold": s.dedup.near_threshold,
            }
            st.out_count = len(result.kept)
        return result.kept

    # -- rerank ----------------------------------------------------------------------------
    def calibration(self) -> Calibration:
        """The reranker's calibration: settings, else the model directory's calibration file."""
        if self._calibration is None:
            s = self.settings
            name = self.reranker.name if self.reranker is not None else None
            self._calibration = load_calibration(
                name if name and Path(name).is_dir() else None,
                method=s.rerank.calibration,
                temperature=s.rerank.temperature,
                bias=s.rerank.bias,
                threshold=s.rerank.threshold,
            )
        return self._calibration

    def _score_with_timeout(self, query: str, passages: list[tuple[str, str]]) -> RerankOutput:
        assert self.reranker is not None
        timeout = self.settings.rerank.timeout
        if timeout is None:
            return self.reranker.score(query, passages)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="es-rag-rerank")
        future = self._executor.submit(self.reranker.score, query, passages)
        return future.result(timeout=timeout)

    def _rerank(self, query: str, hits: list[Hit], trace: Trace) -> tuple[list[Hit], bool]:
        k = self.settings.rerank.k
        with trace.stage("rerank", in_count=len(hits)) as st:
            head, tail = hits[:k], hits[k:]
            for h in tail:
                st.drop(h.chunk_id, f"beyond rerank_k={k}")
            st.out_count = len(head)
            st.info["rerank_k"] = k
            if self.reranker is None:
                trace.paths["rerank"] = "disabled: fused order kept"
                return head, False
            if self._reranker_error is None:
                try:
                    self.reranker.warm_up()
                except ModelLoadError as exc:
                    self._reranker_error = str(exc)
            if self._reranker_error is not None:
                trace.paths["rerank"] = f"fallback: fused order (reranker unavailable: {self._reranker_error})"
                st.info["fallback"] = True
                return head, False
            if not head:
                trace.paths["rerank"] = f"cross-encoder {self.reranker.name} (no candidates)"
                return head, False
            passages = [ranking_text(h) for h in head]
            key = None
            output: RerankOutput | None = None
            if self.cache is not None:
                key = cache_key(
                    query,
                    [h.chunk_id for h in head],
                    model=self.reranker.name,
                    model_version=self.reranker.version,
                    ranking_text_version=RANKING_TEXT_VERSION,
                    prompt_version=PROMPT_VERSION,
                    options={
                        "long_text": self.reranker.long_text,
                        "aggregation": self.reranker.aggregation,
                        "top_m": self.reranker.top_m,
                        "max_length": self.reranker.max_length,
                    },
                )
                output = self.cache.get(key)
                st.info["cache"] = "hit" if output is not None else "miss"
            if output is None:
                try:
                    output = self._score_with_timeout(query, passages)
                except FutureTimeout:
                    trace.paths["rerank"] = (
                        f"fallback: fused order (reranker timed out after {self.settings.rerank.timeout}s)"
                    )
                    st.info["fallback"] = True
                    return head, False
                except (EsRagError, RuntimeError, ValueError, OSError) as exc:
                    trace.paths["rerank"] = f"fallback: fused order (reranker failed: {type(exc).__name__}: {exc})"
                    st.info["fallback"] = True
                    return head, False
                if self.cache is not None and key is not None:
                    self.cache.put(key, output, sources=[(h.tenant_id, h.source_id, h.source_version) for h in head])
            cal = self.calibration()
            ranked = order_by_scores(head, output, self.reranker.name)
            out = []
            for h in ranked:
                assert h.semantic_score is not None
                c = cal.apply(h.semantic_score)
                out.append(h.replace(calibrated_score=c, final_score=h.semantic_score))
            trace.paths["rerank"] = f"cross-encoder {self.reranker.name}" + (
                " (cache hit)" if st.info.get("cache") == "hit" else ""
            )
            by_id = {h.chunk_id: i for i, h in enumerate(head)}
            st.info["model_version"] = self.reranker.version
            st.info["ranking_text_version"] = RANKING_TEXT_VERSION
            st.info["pairs"] = output.pairs
            st.info["calibration"] = cal.to_dict()
            st.info["scores"] = [
                {
                    "id": h.chunk_id,
                    "fused_rank": by_id[h.chunk_id] + 1,
                    "raw": h.semantic_score,
                    "calibrated": h.calibrated_score,
                }
                for h in out
            ]
            st.info["truncation"] = {
                head[i].chunk_id: t.to_dict() for i, t in enumerate(output.truncation) if t.strategy != "none"
            }
            st.info["truncated"] = [h.chunk_id for h in out if h.truncated]
            return out, True

    def _gate(self, hits: list[Hit], reranked: bool, trace: Trace) -> GateDecision:
        s = self.settings
        with trace.stage("gate", in_count=len(hits)) as st:
            if reranked:
                cal = self.calibration()
                calibrated = cal.method != "none"
                scores = [
                    float(h.calibrated_score if calibrated else h.semantic_score)  # type: ignore[arg-type]
                    for h in hits
                ]
                decision = apply_gate(
                    hits,
                    scores,
                    threshold=cal.threshold,
                    cliff=s.gate.cliff,
                    margin=s.gate.margin,
                    scale="calibrated" if calibrated else "raw",
                )
            else:
                decision = apply_gate(hits, None, threshold=None, cliff=None, margin=None, scale="fused")
            for cid, reason in decision.dropped:
                st.drop(cid, reason)
            st.info.update(decision.info)
            st.info["status"] = decision.status
            trace.paths["gate"] = f"{decision.status}: {decision.basis}"
            st.out_count = len(decision.kept)
        return decision

    def _business(self, hits: list[Hit], trace: Trace) -> list[Hit]:
        with trace.stage("business", in_count=len(hits)) as st:
            st.out_count = len(hits)
            if not self.business_rules.active:
                trace.paths["business"] = "no rules configured: order unchanged"
                return hits
            ranked, rows = business_rank(hits, self.business_rules)
            st.info["rows"] = rows
            trace.paths["business"] = (
                "final = base + business * |base| ("
                + ", ".join(sorted({k for r in rows for k in r["contributions"]}))
                + ")"
            )
            return ranked

    def _select(self, query_vec: np.ndarray | None, hits: list[Hit], trace: Trace) -> list[Hit]:
        s = self.settings
        with trace.stage("select", in_count=len(hits)) as st:
            if not hits:
                return []
            rel = np.asarray([h.final_score if h.final_score is not None else 0.0 for h in hits], dtype=np.float64)
            span = rel.max() - rel.min()
            rel = (rel - rel.min()) / span if span > 0 else np.ones_like(rel)
            sel = select_context(
                hits,
                query_vec,
                lambda_mult=s.select.mmr_lambda,
                k=s.select.context_k,
                max_per_source=s.select.max_chunks_per_source,
                max_per_parent=s.select.max_chunks_per_parent,
                relevance=rel,
            )
            caps = f"max {s.select.max_chunks_per_source}/source" + (
                f", {s.select.max_chunks_per_parent}/parent" if s.select.max_chunks_per_parent is not None else ""
            )
            if sel.method == "mmr":
                trace.paths["select"] = f"mmr(lambda={s.select.mmr_lambda}) + {caps}"
            else:
                trace.paths["select"] = f"relevance order (no stored vectors) + {caps}"
            for cid, reason in sel.dropped:
                st.drop(cid, reason)
            st.info["mmr_order"] = [hits[i].chunk_id for i in sel.chosen]
            # Keep relevance order in the output; MMR decided membership.
            chosen = sorted(sel.chosen, key=lambda i: (-rel[i], i))
            st.out_count = len(chosen)
            return [hits[i] for i in chosen]

    def _expand(self, hits: list[Hit], flt: SearchFilter, trace: Trace) -> list[Hit]:
        s = self.settings
        with trace.stage("expand", in_count=len(hits)) as st:
            st.out_count = len(hits)
            if s.expand.mode == "none" or not hits:
                trace.paths["expand"] = "none"
                return hits
            try:
                if s.expand.mode == "parent":
                    res = expand_parents(hits, self.backend, flt, max_parent_tokens=s.expand.max_parent_tokens)
                    trace.paths["expand"] = "parent sections (dedup by parent_id, score = max of its children)"
                else:
                    res = expand_neighbors(hits, self.backend, flt, window=s.expand.neighbors)
                    trace.paths["expand"] = f"neighbours +/-{s.expand.neighbors} within the parent section"
            except (EsRagError, OSError) as exc:
                trace.paths["expand"] = f"fallback: selected chunks kept (expansion failed: {exc})"
                st.info["fallback"] = True
                return hits
            for cid, reason in res.dropped:
                st.drop(cid, reason)
            st.info.update(res.info)
            st.out_count = len(res.hits)
            return res.hits

    def pack_tokenizer(self, trace: Trace | None = None) -> Tokenizer:
        """The tokenizer counting the context budget: ``settings.pack.tokenizer`` (the target LLM's),
        else the one given to the pipeline (the embedding model's).

        Args:
            trace: Where to note a fallback when the configured tokenizer cannot be loaded.
        """
        name = self.settings.pack.tokenizer
        if name is None:
            return self.tokenizer
        if self._pack_tok is None and self._pack_tok_error is None:
            try:
                self._pack_tok = HFTokenizer.from_pretrained(name)
            except ModelLoadError as exc:
                self._pack_tok_error = str(exc)
        if self._pack_tok is not None:
            return self._pack_tok
        if trace is not None:
            trace.paths["pack"] = (
                f"fallback: budget counted with {self.tokenizer.name} "
                f"(pack tokenizer unavailable: {self._pack_tok_error})"
            )
        return self.tokenizer

    def _pack(self, hits: list[Hit], trace: Trace) -> PackedContext:
        with trace.stage("pack", in_count=len(hits)) as st:
            tok = self.pack_tokenizer(trace)
            ctx = pack_context(hits, tok, budget=self.settings.pack.token_budget)
            for o in ctx.omitted:
                st.drop(o["id"], o["reason"])
            st.out_count = len(ctx.citations)
            st.info["tokens"] = ctx.tokens
            st.info["budget"] = self.settings.pack.token_budget
            st.info["tokenizer"] = tok.name
            trace.paths.setdefault(
                "pack", f"lost-in-the-middle order, {tok.name} tokens, budget {self.settings.pack.token_budget}"
            )
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
        # Active-version gate (es_rag.versions.registry): every backend call below, in every retriever, serves only
        # the committed version of each source.
        flt = self.backend.gated(flt)
        vec = self._embed(query, trace)
        ret = self._retrieve(query, vec, flt, trace)
        fused = self._fuse(ret, trace)
        deduped = self._dedup(fused, trace)
        ranked, reranked = self._rerank(query, deduped, trace)
        decision = self._gate(ranked, reranked, trace)
        boosted = self._business(decision.kept, trace)
        selected = self._select(vec, boosted, trace)
        expanded = self._expand(selected, flt, trace)
        ctx = self._pack(expanded, trace)
        packed_ids = {c.chunk_id for c in ctx.citations}
        final = [h for h in expanded if h.chunk_id in packed_ids]
        return SearchResult(
            query=query,
            hits=final,
            context=ctx,
            trace=trace,
            candidates=ranked,
            status=decision.status,
            status_basis=decision.basis,
        )


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
