"""OpenTelemetry spans and metrics of every search (the optional extra ``otel``: ``pip install 'es-rag[otel]'``).

Everything is read from the :class:`~es_rag.records.Trace` the pipeline already records -- counts, drops, paths,
timings, model versions -- and nothing is measured twice. Spans are exported when the search has returned, with the
times the trace recorded: one ``es_rag.search`` span (child of the caller's current span) and under it one
``es_rag.<stage>`` span per stage (``embed_query``, ``retrieve``, ``fusion``, ``dedup``, ``rerank``, ``escalate``
when a scorer is configured, ``gate``, ``boost``, ``select``, ``expand``, ``pack``).

Span attributes: ``es_rag.stage``, ``es_rag.hits_in``, ``es_rag.hits_out``, ``es_rag.dropped``, ``es_rag.ms``,
``es_rag.path`` (the stage's line in ``trace.paths``: ``native-rrf``/``client-rrf``, ``client-embedding``,
``cross-encoder <model>``, ``fallback: ...``) and every scalar (or list of scalars) of the stage's ``info`` as
``es_rag.<stage>.<key>`` (``es_rag.embed_query.embedding_version``, ``es_rag.rerank.model_version``,
``es_rag.rerank.cache``, ``es_rag.gate.status``, ``es_rag.pack.tokens``, ...).

Metrics (meter ``es_rag``); a rate is a counter divided by ``es_rag.searches``:

========================================  =========  ==============================================================
``es_rag.stage.duration``                 histogram  ms per stage (attribute ``es_rag.stage``)
``es_rag.search.duration``                histogram  ms per search, first stage start to last stage end
``es_rag.search.candidates``              histogram  distinct candidates per query (the fusion stage's output)
``es_rag.searches``                       counter    searches (attributes ``es_rag.retrieval.path``, ``es_rag.status``)
``es_rag.fallbacks``                      counter    stages that fell back (``es_rag.stage``: ``dense`` for the query
                                                     embedding, ``rerank``, ``expand``, ``pack``)
``es_rag.licence_fallbacks``              counter    native fusion refused by the licence at query time
``es_rag.rerank.cache``                   counter    rerank result-cache lookups (``es_rag.result``: ``hit``/``miss``)
``es_rag.rerank.pairs``                   counter    (query, passage) pairs of reranked lists (cache hits included)
``es_rag.rerank.truncated``               counter    passages the cross-encoder truncated (rate: ``/ pairs``)
``es_rag.no_answer``                      counter    searches the gate answered ``no_sufficient_evidence``
========================================  =========  ==============================================================

Importing this module imports no OpenTelemetry package; :class:`StageTelemetry` imports ``opentelemetry-api`` when it
is built. Providers: the ones given, else the global ones (``opentelemetry.trace.set_tracer_provider``,
``opentelemetry.metrics.set_meter_provider``), as an instrumentation library should.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from es_rag.errors import ConfigError
from es_rag.stages.gate import NO_SUFFICIENT_EVIDENCE

if TYPE_CHECKING:
    from es_rag.records import StageRecord
    from es_rag.result import SearchResult

OTEL_EXTRA = "pip install 'es-rag[otel]'"
"""How to install what :class:`StageTelemetry` needs."""

PATH_KEY = {"embed_query": "dense", "retrieve": "retrieval"}
"""The ``trace.paths`` key of a stage, where it is not the stage's own name."""

FALLBACK_PATH_KEYS = ("dense", "rerank", "expand", "pack")
"""The ``trace.paths`` entries that start with ``fallback`` when their stage fell back (a licence refusal of native
fusion is counted by ``es_rag.licence_fallbacks``)."""


def _scalar(value: Any) -> Any:
    """``value`` as an OpenTelemetry attribute value, or None when it is not one (dicts, lists of dicts)."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and value:
        kinds = {type(v) for v in value}
        if len(kinds) == 1 and kinds <= {str, bool, int, float}:
            return list(value)
    return None


def stage_attributes(record: StageRecord, paths: Mapping[str, str]) -> dict[str, Any]:
    """The span attributes of one stage, read from its trace record and the trace's paths.

    Args:
        record: The stage's record.
        paths: ``trace.paths``.
    """
    attrs: dict[str, Any] = {
        "es_rag.stage": record.name,
        "es_rag.hits_in": record.in_count,
        "es_rag.hits_out": record.out_count,
        "es_rag.dropped": len(record.dropped),
        "es_rag.ms": round(record.ms, 3),
    }
    path = paths.get(PATH_KEY.get(record.name, record.name))
    if path:
        attrs["es_rag.path"] = path
    for key, value in record.info.items():
        scalar = _scalar(value)
        if scalar is not None:
            attrs[f"es_rag.{record.name}.{key}"] = scalar
    return attrs


class StageTelemetry:
    """Exports one span per stage and the stage metrics of each search (see the module docstring).

    Args:
        tracer_provider: Where spans go (default: the global tracer provider).
        meter_provider: Where metrics go (default: the global meter provider).

    Raises:
        ConfigError: OpenTelemetry is not installed (the message names the extra).
    """

    def __init__(self, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        try:
            from opentelemetry import metrics, trace
        except ImportError as exc:
            raise ConfigError(
                f"telemetry: OpenTelemetry is not installed; install the otel extra: {OTEL_EXTRA}"
            ) from exc
        from importlib.metadata import PackageNotFoundError, version

        try:
            ours = version("es-rag")
        except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
            ours = "unknown"
        self._trace = trace
        self._tracer = trace.get_tracer("es_rag", ours, tracer_provider=tracer_provider)
        meter = metrics.get_meter("es_rag", ours, meter_provider=meter_provider)
        self._stage_ms = meter.create_histogram("es_rag.stage.duration", unit="ms", description="Time per stage")
        self._search_ms = meter.create_histogram("es_rag.search.duration", unit="ms", description="Time per search")
        self._candidates = meter.create_histogram(
            "es_rag.search.candidates", unit="{candidate}", description="Distinct candidates per query (after fusion)"
        )
        self._searches = meter.create_counter("es_rag.searches", unit="{search}", description="Searches")
        self._fallbacks = meter.create_counter("es_rag.fallbacks", unit="{fallback}", description="Stage fallbacks")
        self._licence = meter.create_counter(
            "es_rag.licence_fallbacks", unit="{search}", description="Native fusion refused by the licence"
        )
        self._cache = meter.create_counter("es_rag.rerank.cache", unit="{lookup}", description="Rerank cache lookups")
        self._pairs = meter.create_counter("es_rag.rerank.pairs", unit="{pair}", description="Pairs reranked")
        self._truncated = meter.create_counter(
            "es_rag.rerank.truncated", unit="{passage}", description="Passages the cross-encoder truncated"
        )
        self._no_answer = meter.create_counter(
            "es_rag.no_answer", unit="{search}", description="Searches without sufficient evidence"
        )

    def record(self, result: SearchResult) -> None:
        """Export the spans and metrics of one search.

        Args:
            result: The search's result (its trace is read, nothing is recomputed).
        """
        trace = result.trace
        stages = [st for st in trace.stages if st.start_ns]
        if not stages:
            return
        start = min(st.start_ns for st in stages)
        end = max(st.start_ns + int(st.ms * 1e6) for st in stages)
        retrieval = trace.paths.get("retrieval", "none")
        search_attrs: dict[str, Any] = {
            "es_rag.status": result.status,
            "es_rag.retrieval.path": retrieval,
            "es_rag.hits": len(result.hits),
            "es_rag.reranked": result.reranked,
        }
        span = self._tracer.start_span("es_rag.search", start_time=start, attributes=search_attrs)
        parent = self._trace.set_span_in_context(span)
        for st in stages:
            child = self._tracer.start_span(
                f"es_rag.{st.name}",
                context=parent,
                start_time=st.start_ns,
                attributes=stage_attributes(st, trace.paths),
            )
            child.end(end_time=st.start_ns + int(st.ms * 1e6))
            self._stage_ms.record(st.ms, {"es_rag.stage": st.name})
        span.end(end_time=end)

        self._searches.add(1, {"es_rag.retrieval.path": retrieval, "es_rag.status": result.status})
        self._search_ms.record((end - start) / 1e6)
        fusion = trace.record("fusion")
        if fusion is not None:
            self._candidates.record(fusion.out_count, {"es_rag.retrieval.path": retrieval})
        for key in FALLBACK_PATH_KEYS:
            if trace.paths.get(key, "").startswith("fallback"):
                self._fallbacks.add(1, {"es_rag.stage": key})
        retrieve = trace.record("retrieve")
        if retrieve is not None and retrieve.info.get("licence_fallback"):
            self._licence.add(1)
        rerank = trace.record("rerank")
        if rerank is not None and rerank.info.get("reranked"):
            if rerank.info.get("cache") in ("hit", "miss"):
                self._cache.add(1, {"es_rag.result": rerank.info["cache"]})
            pairs = rerank.info.get("pairs")
            if isinstance(pairs, int) and pairs:
                self._pairs.add(pairs)
            truncated = rerank.info.get("truncated") or []
            if truncated:
                self._truncated.add(len(truncated))
        if result.status == NO_SUFFICIENT_EVIDENCE:
            self._no_answer.add(1)
