"""OpenTelemetry export (``RagClient(telemetry=...)``): one span per stage and the stage metrics, read from the trace of
real searches on the embedded backend, checked with the SDK's in-memory span exporter and metric reader; and without
the extra, nothing of OpenTelemetry is imported."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# the otel extra is in the dev extra: a missing SDK fails here rather than skipping
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from es_rag import RagClient, SearchResult, Settings
from es_rag.errors import ConfigError
from es_rag.telemetry import StageTelemetry

DOCS = {
    "guide.md": "# Passwords\n\nReset the password from the login page. The reset link expires after one hour.\n",
    "sync.md": "# Sync\n\nSync stops when the token expires; sign in again to renew the token.\n",
}


@pytest.fixture(scope="module")
def settings(tiny_bi_encoder: Path, tiny_cross_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=str(tiny_cross_encoder), candidate_k=10,
        num_candidates=20, rerank_k=8, context_k=3, chunk_max_tokens=40, chunk_overlap=0,
    )  # fmt: skip


class Otel:
    """An SDK tracer provider with an in-memory exporter and a meter provider with an in-memory reader."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = StageTelemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            p
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == name
            for p in m.data.data_points
        ]

    def total(self, name: str, **attrs: Any) -> float:
        want = {f"es_rag.{k}": v for k, v in attrs.items()}
        return sum(p.value for p in self.points(name) if all(p.attributes.get(k) == v for k, v in want.items()))


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.tracer_provider.shutdown()
    o.meter_provider.shutdown()


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    out = {s.name: s for s in spans}
    assert len(out) == len(spans)  # one span per stage
    return out


def test_one_span_per_stage_with_the_traces_counts_paths_and_versions(settings: Settings, otel: Otel) -> None:
    with RagClient.open(None, settings, telemetry=otel.telemetry) as rag:
        rag.ingest_texts(DOCS, tenant="acme")
        result = rag.search("password reset", tenant="acme")
        pipeline = rag._pipeline
        assert pipeline is not None and pipeline.reranker is not None
        versions = {"embedding": pipeline.embedder.version, "reranker": pipeline.reranker.version}
    trace = result.trace
    assert result.reranked  # the cross-encoder ran, so its span carries its versions
    spans = by_name(otel.spans.get_finished_spans())
    assert set(spans) == {"es_rag.search"} | {f"es_rag.{st.name}" for st in trace.stages}
    assert {st.name for st in trace.stages} >= {
        "embed_query", "retrieve", "fusion", "dedup", "rerank", "gate", "boost", "select", "expand", "pack"
    }  # fmt: skip
    root = spans["es_rag.search"]
    assert root.attributes is not None and root.parent is None
    assert root.attributes["es_rag.status"] == result.status
    assert root.attributes["es_rag.retrieval.path"] == trace.paths["retrieval"] == "embedded"
    assert root.attributes["es_rag.hits"] == len(result.hits)
    for st in trace.stages:
        span = spans[f"es_rag.{st.name}"]
        attrs = span.attributes
        assert attrs is not None and span.parent is not None
        assert span.parent.span_id == root.context.span_id and span.context.trace_id == root.context.trace_id
        assert (attrs["es_rag.hits_in"], attrs["es_rag.hits_out"], attrs["es_rag.dropped"]) == (
            st.in_count, st.out_count, len(st.dropped)
        )  # fmt: skip
        assert span.start_time == st.start_ns and span.end_time == st.start_ns + int(st.ms * 1e6)
        assert root.start_time is not None and root.end_time is not None and span.end_time is not None
        assert root.start_time <= st.start_ns and span.end_time <= root.end_time
    rerank, embed = spans["es_rag.rerank"].attributes, spans["es_rag.embed_query"].attributes
    retrieve, gate = spans["es_rag.retrieve"].attributes, spans["es_rag.gate"].attributes
    assert rerank is not None and embed is not None and retrieve is not None and gate is not None
    rerank_info = trace.record("rerank").info  # type: ignore[union-attr]
    assert rerank["es_rag.rerank.model_version"] == rerank_info["model_version"] == versions["reranker"]
    assert rerank["es_rag.rerank.ranking_text_version"] == rerank_info["ranking_text_version"]
    assert rerank["es_rag.path"] == trace.paths["rerank"] and rerank["es_rag.rerank.cache"] == "miss"
    assert (
        embed["es_rag.embed_query.embedding_version"]
        == versions["embedding"]
        == f"local:{Path(settings.encoder.model).name}"
    )
    assert embed["es_rag.path"] == "client-embedding"
    assert retrieve["es_rag.path"] == "embedded"
    assert gate["es_rag.gate.status"] == result.status
    dropped = {st.name: len(st.dropped) for st in trace.stages}
    assert sum(dropped.values()) > 0  # a drop is counted where the trace recorded it
    assert all(spans[f"es_rag.{n}"].attributes["es_rag.dropped"] == d for n, d in dropped.items())  # type: ignore[index]


def test_metrics_from_real_searches(settings: Settings, otel: Otel) -> None:
    results: list[SearchResult] = []
    with RagClient.open(None, settings, telemetry=otel.telemetry) as rag:
        rag.ingest_texts(DOCS, tenant="acme")
        results.append(rag.search("password reset", tenant="acme"))
        results.append(rag.search("password reset", tenant="acme"))  # the same candidates: a rerank cache hit
        results.append(asyncio.run(rag.asearch("token expires", tenant="acme")))  # the async path records too
    assert otel.total("es_rag.searches") == 3
    assert otel.total("es_rag.searches", status=results[0].status, **{"retrieval.path": "embedded"}) >= 1
    assert otel.total("es_rag.rerank.cache", result="miss") == 2
    assert otel.total("es_rag.rerank.cache", result="hit") == 1
    assert otel.total("es_rag.rerank.pairs") == sum(r.trace.record("rerank").info["pairs"] for r in results)  # type: ignore[union-attr]
    assert otel.total("es_rag.fallbacks") == 0 and otel.total("es_rag.licence_fallbacks") == 0
    stage_points = {p.attributes["es_rag.stage"]: p for p in otel.points("es_rag.stage.duration")}
    for st in results[0].trace.stages:
        point = stage_points[st.name]
        assert point.count == 3
        assert point.sum == pytest.approx(sum(r.trace.record(st.name).ms for r in results))  # type: ignore[union-attr]
    [candidates] = otel.points("es_rag.search.candidates")
    fused = [r.trace.record("fusion").out_count for r in results]  # type: ignore[union-attr]
    assert (candidates.count, candidates.sum, candidates.max) == (3, sum(fused), max(fused)) and max(fused) > 0
    [searches] = otel.points("es_rag.search.duration")
    assert searches.count == 3 and searches.sum >= sum(st.ms for st in results[0].trace.stages)


def test_fallback_and_no_answer_counters_follow_the_trace(settings: Settings, otel: Otel, tmp_path: Path) -> None:
    # a cross-encoder that cannot load: the fused order is kept and the trace says "fallback"
    broken = settings.replace(rerank_model=str(tmp_path / "no-such-model"))
    with RagClient.open(None, broken, telemetry=otel.telemetry) as rag:
        rag.ingest_texts(DOCS, tenant="acme")
        result = rag.search("password reset", tenant="acme")
    assert result.trace.paths["rerank"].startswith("fallback: fused order (reranker unavailable")
    assert otel.total("es_rag.fallbacks", stage="rerank") == 1 and otel.total("es_rag.fallbacks") == 1
    assert otel.total("es_rag.rerank.cache") == 0  # nothing was reranked
    # a strict gate threshold: the calibrated cross-encoder score of every hit is below it -> no sufficient evidence
    strict = settings.replace(rerank_calibration="sigmoid", rerank_threshold=0.999999)
    with RagClient.open(None, strict, telemetry=otel.telemetry) as rag:
        rag.ingest_texts(DOCS, tenant="acme")
        gated = rag.search("password reset", tenant="acme")
    assert gated.no_sufficient_evidence
    assert otel.total("es_rag.no_answer") == 1
    assert otel.total("es_rag.searches", status="no_sufficient_evidence") == 1


def test_telemetry_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"telemetry: expected True, False or an es_rag\.telemetry\.StageTelemetry"):
        RagClient.open(None, telemetry="yes")  # type: ignore[arg-type]


BLOCK_OTEL = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Block())
import asyncio, es_rag
from es_rag.errors import ConfigError
import es_rag.telemetry, es_rag.client, es_rag.pipeline
rag = es_rag.RagClient.open(None, embedding_model=sys.argv[1], vector_dims=32, rerank_model=None)
rag.ingest_texts({"a.md": "# A\\n\\nReset the password from the login page."}, tenant="acme")
assert rag.search("password", tenant="acme").hits
assert asyncio.run(rag.asearch("password", tenant="acme")).hits
try:
    es_rag.RagClient.open(None, telemetry=True)
except ConfigError as exc:
    print("refused:", exc)
print("imported:", sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


def test_without_the_extra_nothing_of_opentelemetry_is_imported(tiny_bi_encoder: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCK_OTEL, str(tiny_bi_encoder)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[-1] == "imported: []"
    assert out[-2] == (
        "refused: telemetry: OpenTelemetry is not installed; install the otel extra: pip install 'es-rag[otel]'"
    )


def test_truncation_and_licence_fallback_counters_follow_the_trace(settings: Settings, otel: Otel) -> None:
    from tests.support.double.client import strict_backend
    from tests.support.double.cluster import StrictCluster

    # passages longer than the cross-encoder reads, cut rather than windowed: the rerank info lists them
    short = settings.replace(rerank_long_text="truncate", rerank_max_length=24)
    cluster = StrictCluster(license_type="trial")
    backend, _, _ = strict_backend(short, cluster, setup=True)
    with RagClient.from_elasticsearch(backend.client, short, telemetry=otel.telemetry) as rag:
        rag.ingest_texts(DOCS, tenant="acme")
        first = rag.search("password reset", tenant="acme")
        cluster.license_type = "basic"  # the trial ends between two queries: native rrf is refused at query time
        second = rag.search("token expires", tenant="acme")
    assert first.trace.paths["retrieval"] == "native-rrf" and second.trace.paths["retrieval"] == "client-rrf"
    assert otel.total("es_rag.licence_fallbacks") == 1
    assert otel.total("es_rag.searches", **{"retrieval.path": "client-rrf"}) == 1
    truncated = [len(r.trace.record("rerank").info["truncated"]) for r in (first, second)]  # type: ignore[union-attr]
    assert sum(truncated) > 0 and otel.total("es_rag.rerank.truncated") == sum(truncated)
    pairs = sum(r.trace.record("rerank").info["pairs"] for r in (first, second))  # type: ignore[union-attr]
    assert otel.total("es_rag.rerank.pairs") == pairs >= sum(truncated)
