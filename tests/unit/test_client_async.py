"""``await RagClient.asearch``: the same result as ``search`` on the embedded backend and on the strict double (through
a real ``AsyncElasticsearch``), byte-identical request bodies, model work in the bounded executor, the async
lifecycle. Async tests run their coroutine with ``asyncio.run`` (no plugin)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from es_rag import RagClient, SearchResult, Settings
from es_rag.errors import ConfigError, EsRagError
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster
from tests.support.es_transport import FakeNode
from tests.support.es_transport_async import async_client_on

DOCS = {
    "guide.md": "# Passwords\n\nReset the password from the login page. The reset link expires after one hour.\n\n"
    "## Locked accounts\n\nAfter five failed sign-ins the account locks for fifteen minutes.\n",
    "sync.md": "# Sync\n\nSync stops when the token expires; sign in again to renew the token.\n",
    "billing.md": "# Billing\n\nInvoices are sent on the first day of the month. Refunds take five days.\n",
}
QUERIES = ["password reset", "token expires", "refund invoice", "account locked after failed sign-ins"]


@pytest.fixture(scope="module")
def settings(tiny_bi_encoder: Path, tiny_cross_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=str(tiny_cross_encoder), candidate_k=10,
        num_candidates=20, rerank_k=8, context_k=3, chunk_max_tokens=40, chunk_overlap=0,
    )  # fmt: skip


def same(a: SearchResult, b: SearchResult) -> None:
    """Everything a caller reads from a result, but the timings."""
    assert [h.chunk_id for h in a.hits] == [h.chunk_id for h in b.hits]
    assert [h.scores() for h in a.hits] == [h.scores() for h in b.hits]
    assert [h.chunk_id for h in a.candidates] == [h.chunk_id for h in b.candidates]
    assert a.context.text == b.context.text
    assert (a.status, a.status_basis, a.channels, a.fused, a.reranked) == (
        b.status, b.status_basis, b.channels, b.fused, b.reranked
    )  # fmt: skip
    assert a.trace.paths == b.trace.paths
    shape = [(s.name, s.in_count, s.out_count, s.dropped) for s in a.trace.stages]
    assert shape == [(s.name, s.in_count, s.out_count, s.dropped) for s in b.trace.stages]


# ---------------------------------------------------------------------------------------------- embedded backend
def test_asearch_returns_what_search_returns_on_the_embedded_backend(settings: Settings, tmp_path: Path) -> None:
    with RagClient.open(tmp_path / "idx", settings) as writer:
        writer.ingest_texts(DOCS, tenant="acme", acl="support")
    # two clients on the one folder: each computes its own rerank (one result cache would answer the second search)
    with RagClient.open(tmp_path / "idx", settings) as sync_rag:
        expected = [sync_rag.search(q, tenant="acme", acl="support") for q in QUERIES]
    assert expected[0].reranked and expected[0].hits  # the cross-encoder ran: its work is compared too
    with RagClient.open(tmp_path / "idx", settings) as rag:

        async def run() -> list[SearchResult]:
            return list(await asyncio.gather(*(rag.asearch(q, tenant="acme", acl="support") for q in QUERIES)))

        for sync, asynchronous in zip(expected, asyncio.run(run()), strict=True):
            same(sync, asynchronous)


def test_model_work_runs_in_the_bounded_executor_not_on_the_loop(settings: Settings) -> None:
    rag = RagClient.open(None, settings, async_workers=2)
    rag.ingest_texts(DOCS, tenant="acme")
    threads: dict[str, set[str]] = {"embed": set(), "rerank": set()}

    async def run() -> str:
        loop_thread = threading.current_thread().name
        await rag.asearch("warm up", tenant="acme")  # loads the models (in the executor too)
        pipeline = rag._pipeline
        assert pipeline is not None
        embed, rerank = pipeline.embedder.embed_query, pipeline.rerank_stage.run

        def spy_embed(*a: Any) -> Any:
            threads["embed"].add(threading.current_thread().name)
            return embed(*a)

        def spy_rerank(*a: Any, **kw: Any) -> Any:
            threads["rerank"].add(threading.current_thread().name)
            return rerank(*a, **kw)

        pipeline.embedder.embed_query = spy_embed  # type: ignore[method-assign]
        pipeline.rerank_stage.run = spy_rerank  # type: ignore[method-assign]
        await asyncio.gather(*(rag.asearch(q, tenant="acme") for q in QUERIES * 3))
        return loop_thread

    loop_thread = asyncio.run(run())
    names = threads["embed"] | threads["rerank"]
    assert threads["embed"] and threads["rerank"] and loop_thread not in names
    assert all(n.startswith("es-rag-async") for n in names)
    assert len(names) <= 2  # async_workers=2 bounds it
    assert rag._executor is not None and rag._executor._max_workers == 2
    rag.close()


def test_a_cancelled_asearch_keeps_the_read_lock_until_its_running_step_is_done(settings: Settings) -> None:
    rag = RagClient.open(None, settings)
    rag.ingest_texts(DOCS, tenant="acme")
    entered, release = threading.Event(), threading.Event()

    async def run() -> None:
        await rag.asearch("warm up", tenant="acme")
        pipeline = rag._pipeline
        assert pipeline is not None
        embed = pipeline.embedder.embed_query

        def blocked(*a: Any) -> Any:
            entered.set()
            release.wait(30)
            return embed(*a)

        pipeline.embedder.embed_query = blocked  # type: ignore[method-assign]
        task = asyncio.create_task(rag.asearch("password", tenant="acme"))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.1)
        assert not task.done() and rag._rw._readers == 1  # the embedding still runs on the backend's snapshot
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rag._rw._readers == 0

    asyncio.run(run())
    rag.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_async_workers_is_validated(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"async_workers: must be an integer >= 1"):
        RagClient.open(None, async_workers=bad)


def test_async_with_and_aclose(settings: Settings) -> None:
    async def run() -> RagClient:
        async with RagClient.open(None, settings) as rag:
            rag.ingest_texts(DOCS, tenant="acme")
            assert (await rag.asearch("password", tenant="acme")).hits
        assert rag.closed
        with pytest.raises(EsRagError, match="the client is closed"):
            await rag.asearch("password", tenant="acme")
        await rag.aclose()  # twice is fine
        return rag

    rag = asyncio.run(run())
    assert rag._executor is not None and rag._executor._shutdown


def test_asearch_validates_like_search(settings: Settings) -> None:
    rag = RagClient.open(None, settings)
    with pytest.raises(ConfigError, match="tenant: every call needs a non-empty tenant"):
        asyncio.run(rag.asearch("password", tenant=""))
    with pytest.raises(EsRagError, match="query: empty query"):
        asyncio.run(rag.asearch("  ", tenant="acme"))
    assert rag._pipeline is None  # refused before any model loaded


# ---------------------------------------------------------------------------------------------- strict double
def _search_requests(node: FakeNode) -> list[tuple[str, str, str, bytes | None]]:
    return [(r.method, r.path, r.query, r.raw) for r in node.requests]


@pytest.mark.parametrize(
    ("licence", "path"), [("trial", "native-rrf"), ("basic", "client-rrf")], ids=["native-rrf", "client-rrf"]
)
def test_asearch_on_async_elasticsearch_sends_the_same_bytes_and_returns_the_same(
    settings: Settings, licence: str, path: str
) -> None:
    cluster = StrictCluster(license_type=licence)
    backend, node, _ = strict_backend(settings, cluster, setup=True)
    # parent expansion reads parents (one more request); neighbours would read children: both go through the loop
    for expand in ("parent", "neighbors"):
        cfg = settings.replace(expand_mode=expand)
        with RagClient.from_elasticsearch(backend.client, cfg) as writer:
            writer.ingest_texts(DOCS, tenant="acme", acl="support")
        node.reset()
        with RagClient.from_elasticsearch(backend.client, cfg) as sync_rag:  # a new client: it probes, as the async one
            expected = [sync_rag.search(q, tenant="acme", acl="support") for q in QUERIES]
            sent = _search_requests(node)
        assert expected[0].trace.paths["retrieval"] == path

        aes, anode = async_client_on(cluster)

        async def run(aes: Any = aes, cfg: Settings = cfg) -> list[SearchResult]:
            async with RagClient.from_elasticsearch(aes, cfg) as rag:
                assert rag.backend.async_io and rag.backend.client is None
                results = [await rag.asearch(q, tenant="acme", acl="support") for q in QUERIES]
            await aes.close()  # the app's client: aclose left it open
            return results

        results = asyncio.run(run())
        assert _search_requests(anode) == sent  # probe, registry read, searches, parents/neighbours: byte for byte
        paths = {p for _, p, _, _ in sent}
        assert ("/es-rag-chunks/_search" if path == "native-rrf" else "/es-rag-chunks/_msearch") in paths, paths
        assert ("/es-rag-parents/_search" if expand == "parent" else "/_msearch") in paths
        for sync, asynchronous in zip(expected, results, strict=True):
            same(sync, asynchronous)


def test_a_licence_refusal_at_query_time_falls_back_the_same_way_on_both_paths(settings: Settings) -> None:
    cluster = StrictCluster(license_type="trial")
    backend, _node, _ = strict_backend(settings, cluster, setup=True)
    sync_rag = RagClient.from_elasticsearch(backend.client, settings)
    sync_rag.ingest_texts(DOCS, tenant="acme")
    aes, _anode = async_client_on(cluster)
    rag = RagClient.from_elasticsearch(aes, settings)

    async def probe_then(query: str) -> SearchResult:
        return await rag.asearch(query, tenant="acme")

    sync_rag.search("password", tenant="acme")
    asyncio.run(probe_then("password"))  # both probed a trial licence: native rrf
    cluster.license_type = "basic"  # the trial ends
    expected = sync_rag.search("password reset", tenant="acme")
    got = asyncio.run(probe_then("password reset"))
    same(expected, got)
    retrieve = got.trace.record("retrieve")
    assert retrieve is not None and retrieve.info["licence_fallback"] is True
    assert got.trace.paths["retrieval"] == "client-rrf"


def test_a_client_on_async_elasticsearch_refuses_synchronous_calls_clearly(settings: Settings) -> None:
    aes, anode = async_client_on(StrictCluster())
    rag = RagClient.from_elasticsearch(aes, settings)
    with pytest.raises(ConfigError, match=r"built from an AsyncElasticsearch; use `await rag.asearch"):
        rag.search("password", tenant="acme")
    with pytest.raises(ConfigError, match="holds an AsyncElasticsearch client, which serves only the async calls"):
        rag.delete_source("guide.md", tenant="acme")
    assert anode.requests == []
    asyncio.run(aes.close())
