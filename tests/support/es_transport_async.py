"""A real ``AsyncElasticsearch`` over the same fake node (and so the same strict double) the synchronous tests use.

:class:`AsyncFakeNode` is an :class:`elastic_transport.BaseAsyncNode` passed as ``node_class=`` (as
:class:`tests.support.es_transport.FakeNode` is to ``Elasticsearch``); every request is handed to a
:class:`FakeNode`, which records it and answers from its routes. Everything above the node is the real async client:
serialisation, compatibility headers, the product check, the transport's retries. Nothing is faked above the
transport: a search on it runs es_rag's async path end to end.

``latency`` (seconds) makes the node wait before each answer -- ``await asyncio.sleep`` here, ``time.sleep`` in
:class:`SlowNode` -- to simulate a cluster's round trip (``benchmarks/async_bench.py``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from elastic_transport import BaseAsyncNode, HttpHeaders, NodeConfig
from elastic_transport._node import NodeApiResponse
from elasticsearch import AsyncElasticsearch, Elasticsearch

from tests.support.double.client import attach
from tests.support.double.cluster import StrictCluster
from tests.support.es_transport import FakeNode


class AsyncFakeNode(BaseAsyncNode):
    """An async node that hands every request to a synchronous :class:`FakeNode` (``self.fake``)."""

    latency = 0.0
    """Seconds awaited before each answer (set on the class or the instance)."""

    def __init__(self, config: NodeConfig):
        super().__init__(config)
        self.fake = FakeNode(config)

    async def perform_request(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: HttpHeaders | None = None,
        request_timeout: Any = None,
    ) -> NodeApiResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        return self.fake.perform_request(method, target, body=body, headers=headers, request_timeout=request_timeout)

    async def close(self) -> None:
        """Nothing to release."""


class SlowNode(FakeNode):
    """A :class:`FakeNode` that sleeps ``latency`` seconds before each answer (the thread waits, as on a socket) and
    answers one request at a time (the strict double is not thread-safe; a node applies requests in order)."""

    latency = 0.0
    _lock = threading.Lock()

    def perform_request(self, *args: Any, **kwargs: Any) -> NodeApiResponse:
        if self.latency:
            time.sleep(self.latency)
        with self._lock:
            return super().perform_request(*args, **kwargs)


def make_async_client(**client_kwargs: Any) -> tuple[AsyncElasticsearch, FakeNode]:
    """A real ``AsyncElasticsearch`` whose only node is an :class:`AsyncFakeNode`; returns it and the node's
    :class:`FakeNode` (routes, recorded requests)."""
    client = AsyncElasticsearch("http://localhost:9200", node_class=AsyncFakeNode, **client_kwargs)
    node = client.transport.node_pool.all()[0]
    assert isinstance(node, AsyncFakeNode)
    return client, node.fake


def async_client_on(cluster: StrictCluster, **client_kwargs: Any) -> tuple[AsyncElasticsearch, FakeNode]:
    """An ``AsyncElasticsearch`` whose every request the strict double ``cluster`` answers."""
    client, fake = make_async_client(**client_kwargs)
    attach(cluster, fake)
    return client, fake


def sync_client_on(cluster: StrictCluster, **client_kwargs: Any) -> tuple[Elasticsearch, FakeNode]:
    """A synchronous ``Elasticsearch`` on ``cluster`` through a :class:`SlowNode` (``latency`` 0 unless set)."""
    client = Elasticsearch("http://localhost:9200", node_class=SlowNode, **client_kwargs)
    node = client.transport.node_pool.all()[0]
    assert isinstance(node, SlowNode)
    attach(cluster, node)
    return client, node
