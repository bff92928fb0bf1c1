"""The rerank stage: the cross-encoder scores the first ``rerank_k`` fused candidates (through the result
cache, under a timeout), the scores are calibrated per model, and the list is re-sorted by the reranker alone
(``replace``) or by its fusion with the fused order (``rrf``, ``interpolate``: :mod:`es_rag.cross_encoder.fusion`).
When the model cannot load, fails, times out, or its safety check says it hurts the fused order, the fused order is
kept and the path says why; nothing is lost."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from es_rag.cross_encoder.fusion import OVERRIDE, FusionPlan, fuse, load_fusion, load_safety, refusal, verdict_for
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
from es_rag.encoders.fit import language_misfit
from es_rag.errors import EsRagError, ModelLoadError
from es_rag.records import Hit
from es_rag.redact import get_logger
from es_rag.settings import RerankSettings
from es_rag.stages.base import StageOutput
from es_rag.stages.pack import PROMPT_VERSION

log = get_logger(__name__)


class RerankStage:
    """Cross-encoder reranking with its calibration, result cache and timeout.

    ``info["reranked"]`` of each output says whether the cross-encoder ordered the hits (the gate decides
    only on a reranked list).

    Args:
        reranker: The cross-encoder; None disables reranking (the fused order is kept).
        settings: ``rerank_k``, calibration, fusion, timeout, ``allow_harmful``.
        cache: Result cache; None: no cache.
    """

    def __init__(
        self, reranker: CrossEncoderReranker | None, settings: RerankSettings, cache: ResultCache | None
    ) -> None:
        self.reranker = reranker
        self.settings = settings
        self.cache = cache
        self._error: str | None = None
        self._calibration: Calibration | None = None
        self._fusion: FusionPlan | None = None
        self._safety: tuple[dict[str, Any] | None] | None = None
        self._warned = False
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    def warm_up(self) -> None:
        """Load the cross-encoder now, or record why it cannot load (every later run keeps the fused order and says
        why); safe to call twice."""
        if self.reranker is None or self._error is not None:
            return
        try:
            self.reranker.warm_up()
        except ModelLoadError as exc:
            self._error = str(exc)
            return
        if getattr(self.reranker, "substituted", None):  # the shipped model: its own files decide
            self._calibration = self._fusion = None
            self._safety = None

    def close(self) -> None:
        """Stop the timeout worker thread, if one was started."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def calibration(self) -> Calibration:
        """The reranker's calibration: the settings, else the model directory's calibration file."""
        if self._calibration is None:
            s = self.settings
            self._calibration = load_calibration(
                self._model_dir(),
                method=s.calibration,
                temperature=s.temperature,
                bias=s.bias,
                threshold=s.threshold,
            )
        return self._calibration

    def _model_dir(self) -> str | None:
        if self.reranker is None:
            return None
        folder = getattr(self.reranker, "model_dir", None)  # a test double may have none
        if folder is not None:
            return str(folder)
        name = self.reranker.name
        return name if name and Path(name).is_dir() else None

    def fusion(self) -> FusionPlan:
        """How the reranker meets the fused order: the settings, else the model directory's fusion file, else
        ``replace``."""
        if self._fusion is None:
            s = self.settings
            method = s.fusion.value if s.fusion is not None else None
            self._fusion = load_fusion(self._model_dir(), method=method, weight=s.fusion_weight)
        return self._fusion

    def safety(self) -> dict[str, Any] | None:
        """The model directory's safety checks (``es_rag_safety.json``), or None."""
        if self._safety is None:
            self._safety = (load_safety(self._model_dir()),)
        return self._safety[0]

    def _score(self, query: str, passages: list[tuple[str, str]]) -> RerankOutput:
        assert self.reranker is not None
        timeout = self.settings.timeout
        if timeout is None:
            return self.reranker.score(query, passages)
        with self._executor_lock:  # concurrent searches share one worker
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="es-rag-rerank")
            future = self._executor.submit(self.reranker.score, query, passages)
        return future.result(timeout=timeout)

    def _misfit(self, language: str | None, query: str) -> dict[str, Any] | None:
        """The fit check's verdict when the cross-encoder's tokenizer clearly misfits ``language``, else None."""
        if not language or self.reranker is None or not hasattr(self.reranker, "tokenizer"):
            return None
        verdict = language_misfit(self.reranker, language, sample=query)
        if verdict is None or verdict[0] is None:
            return None
        reason, fit = verdict
        return {"language": language, "model": self.reranker.name, "reason": reason, "fit": fit.to_dict()}

    def _cache_key(self, query: str, head: list[Hit]) -> str:
        assert self.reranker is not None
        rr = self.reranker
        options = {"long_text": rr.long_text, "aggregation": rr.aggregation, "top_m": rr.top_m}
        return cache_key(
            query,
            [h.chunk_id for h in head],
            model=rr.name,
            model_version=rr.version,
            ranking_text_version=RANKING_TEXT_VERSION,
            prompt_version=PROMPT_VERSION,
            options={**options, "max_length": rr.max_length},
        )

    def run(self, query: str, hits: list[Hit], *, language: str | None = None) -> StageOutput:
        """Rerank the first ``rerank_k`` hits; the rest are dropped (``beyond rerank_k``).

        Args:
            query: The user's query.
            hits: Deduplicated candidates in fused order.
            language: The query's language (ISO 639-1); given, a cross-encoder whose tokenizer clearly misfits it
                (:func:`es_rag.encoders.fit.language_misfit`: the shipped English model on Japanese) is not run and
                the fused order is kept.
        """
        k = self.settings.k
        head = hits[:k]
        dropped = [(h.chunk_id, f"beyond rerank_k={k}") for h in hits[k:]]
        info: dict[str, Any] = {"rerank_k": k, "reranked": False}

        def kept(path: str, **more: Any) -> StageOutput:
            return StageOutput(hits=head, dropped=dropped, info={**info, **more}, path=path)

        if self.reranker is None:
            return kept("disabled: fused order kept")
        if getattr(self.reranker, "may_substitute", False):
            self.warm_up()  # which model runs (the configured default or the shipped one) decides its files
        try:
            plan, safety = self.fusion(), self.safety()
        except EsRagError as exc:
            return kept(f"fallback: fused order (reranker settings unusable: {exc})", fallback=True)
        if safety is not None:
            verdict, reason = verdict_for(safety, plan)
            info["safety"] = {"verdict": verdict, "reason": reason, "file": safety.get("path")}
            why = refusal(safety, plan)
            if why is not None and not self.settings.allow_harmful:
                message = (
                    f"reranker {self.reranker.name} not used: its safety check says it hurts the fused order ({why}); "
                    f"{OVERRIDE}"
                )
                if not self._warned:
                    self._warned = True
                    log.warning("%s", message)
                info["safety"]["refused"] = True
                return kept(f"fallback: fused order ({message})", fallback=True, warning=message)
            if why is not None:
                info["safety"]["refused"] = False
                info["safety"]["allowed_by"] = "allow_harmful_reranker"
        self.warm_up()
        if self._error is not None:
            return kept(f"fallback: fused order (reranker unavailable: {self._error})", fallback=True)
        if not head:
            return kept(f"cross-encoder {self.reranker.name} (no candidates)")
        misfit = self._misfit(language, query)
        if misfit is not None:
            info["fit_check"] = misfit
            return kept(
                f"skipped: fused order kept (the cross-encoder {self.reranker.name} misfits query language {language}: "
                f"{misfit['reason']}; --dense-fit-check off runs it anyway)",
            )
        key = self._cache_key(query, head) if self.cache is not None else None
        output = self.cache.get(key) if self.cache is not None and key is not None else None
        if self.cache is not None:
            info["cache"] = "hit" if output is not None else "miss"
        if output is None:
            try:
                output = self._score(query, [ranking_text(h) for h in head])
            except FutureTimeout:
                return kept(f"fallback: fused order (reranker timed out after {self.settings.timeout}s)", fallback=True)
            except (EsRagError, RuntimeError, ValueError, OSError) as exc:
                return kept(f"fallback: fused order (reranker failed: {type(exc).__name__}: {exc})", fallback=True)
            if self.cache is not None and key is not None:
                self.cache.put(key, output, sources=[(h.tenant_id, h.source_id, h.source_version) for h in head])
        cal = self.calibration()
        scored = order_by_scores(head, output, self.reranker.name)  # best first by raw score
        by_id = {h.chunk_id: h for h in scored}
        in_fused = [by_id[h.chunk_id] for h in head]
        raw = [float(h.rerank_score or 0.0) for h in in_fused]
        calibrated = [cal.apply(x) for x in raw]
        fused_scores = [h.fused_score for h in head]
        mixed = fuse(plan, raw, calibrated, fused_scores)
        out = [in_fused[i].replace(calibrated_score=calibrated[i], final_score=mixed.combined[i]) for i in mixed.order]
        position = {i: r for r, i in enumerate(mixed.order, start=1)}
        device = getattr(self.reranker, "device_plan", None)  # a test double may have none
        if device is not None:
            info["device"] = device.describe()
        info.update(
            reranked=True,
            model_version=self.reranker.version,
            ranking_text_version=RANKING_TEXT_VERSION,
            pairs=output.pairs,
            calibration=cal.to_dict(),
            fusion={**plan.to_dict(), "inputs": mixed.inputs},
            scores=[
                {
                    "id": head[i].chunk_id,
                    "rank": position[i],
                    "fused_rank": i + 1,
                    "fused_score": fused_scores[i],
                    "rerank_rank": mixed.rerank_rank[i],
                    "raw": raw[i],
                    "calibrated": calibrated[i],
                    "method": plan.method,
                    "weight": plan.weight,
                    "combined": mixed.combined[i],
                }
                for i in mixed.order
            ],
            truncation={head[i].chunk_id: t.to_dict() for i, t in enumerate(output.truncation) if t.strategy != "none"},
            truncated=[h.chunk_id for h in out if h.truncated],
        )
        cached = " (cache hit)" if info.get("cache") == "hit" else ""
        fused_with = "" if plan.method == "replace" else f" fused with the first stage ({plan.describe()})"
        harmful = (
            " (marked hurts; allowed by allow_harmful_reranker)" if info.get("safety", {}).get("allowed_by") else ""
        )
        substituted = getattr(self.reranker, "substituted", None)
        if substituted:
            info["substituted"] = substituted
        shipped = f" (shipped with es_rag, {substituted})" if substituted else ""
        path = f"cross-encoder {self.reranker.name}{shipped}{fused_with}{cached}{harmful}"
        return StageOutput(hits=out, dropped=dropped, info=info, path=path)
