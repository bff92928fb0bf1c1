"""The reliability suite's Elasticsearch: the strict double (:mod:`tests.double`) after a real ``setup()``.

Every test here goes through the real client, the rendered templates and pipelines, and a cluster that validates
and executes them as Elasticsearch does: component templates alone, ``dynamic: strict`` on every write, the
ingest processors, refresh visibility, terms lookups, licence and version gates. (It replaced a permissive fake
that accepted any template and pipeline.)
"""

from __future__ import annotations

from typing import Any

from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.settings import Settings
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster
from tests.support.es_transport import FakeNode


def cluster_backend(
    settings: Settings,
    *,
    license_type: str = "trial",
    missing: tuple[str, ...] = (),
    version: str = "9.5.0",
    **client_kwargs: Any,
) -> tuple[ElasticsearchBackend, FakeNode, StrictCluster]:
    """An :class:`ElasticsearchBackend` on a strict double where ``setup()`` already ran (indices in ``missing``
    deleted afterwards); the node's request log starts empty."""
    cluster = StrictCluster(version=version, license_type=license_type)
    backend, node, cluster = strict_backend(settings, cluster, setup=True, **client_kwargs)
    for name in missing:
        cluster.indices.pop(name)
    node.reset()
    return backend, node, cluster
