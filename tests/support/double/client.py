"""Wire the strict double to es_rag: through the real ``elasticsearch`` client (a
:class:`tests.support.es_transport.FakeNode` whose every request the cluster answers) or over HTTP
(:mod:`tests.support.double.http`)."""

from __future__ import annotations

from typing import Any

from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.settings import Settings
from tests.support.double.cluster import StrictCluster
from tests.support.es_transport import FakeNode, make_client


def attach(cluster: StrictCluster, node: FakeNode) -> FakeNode:
    """Route every request of ``node`` to ``cluster``."""

    node.route("GET|POST|PUT|HEAD|DELETE", ".*", cluster.respond)
    return node


def strict_backend(
    settings: Settings, cluster: StrictCluster | None = None, *, setup: bool = False, **client_kwargs: Any
) -> tuple[ElasticsearchBackend, FakeNode, StrictCluster]:
    """An :class:`ElasticsearchBackend` whose real client talks to a strict double.

    Args:
        settings: Backend settings.
        cluster: The double (a new 9.5 trial node by default).
        setup: Run ``backend.setup()`` first.
        **client_kwargs: Passed to ``Elasticsearch(...)``.
    """
    cluster = cluster or StrictCluster()
    client, node = make_client(**client_kwargs)
    attach(cluster, node)
    backend = ElasticsearchBackend(client, settings)
    if setup:
        backend.setup()
    return backend, node, cluster
