"""The backends the contract suite runs on, and its small hand-made corpus.

Backends: the embedded backend, the Elasticsearch backend on the strict cluster double (through the real
``elasticsearch`` client), and -- when ``ES_URL`` is set -- the Elasticsearch backend on a real cluster under a
throw-away prefix that is deleted afterwards (:mod:`tests.support.live`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.records import Chunk
from es_rag.settings import Settings
from es_rag.wiring import embedded_backend
from tests.support.chunks import chunk as chunk  # re-exported: the contract tests build their chunks with it
from tests.support.double.client import strict_backend
from tests.support.live import SKIP_REASON, TEST_PREFIX, delete_created_assets

DIMS = 4
KINDS = ("embedded", "strict-double", "live")
SETTINGS = Settings(vector_dims=DIMS, candidate_k=10, num_candidates=20, rerank_k=5, context_k=3, rerank_model=None)


@contextmanager
def open_backend(kind: str, settings: Settings = SETTINGS) -> Iterator[tuple[Any, Settings]]:
    """A fresh, empty backend of ``kind`` with the assets installed, and its settings; the live one is cleaned
    up on exit.

    Args:
        kind: One of :data:`KINDS`.
        settings: Settings (the live backend gets a throw-away prefix).
    """
    import pytest

    if kind == "embedded":
        yield embedded_backend(settings, None), settings
        return
    if kind == "strict-double":
        backend, _, _ = strict_backend(settings, setup=True)
        yield backend, settings
        return
    url = os.environ.get("ES_RAG_TEST_ES_URL")
    if not url:
        pytest.skip(SKIP_REASON)
    settings = settings.replace(index_prefix=f"{TEST_PREFIX}{uuid.uuid4().hex[:10]}")
    live = ElasticsearchBackend.connect(url, settings)
    try:
        live.setup()
        yield live, settings
    finally:
        delete_created_assets(live)
        live.close()


def corpus() -> tuple[list[Chunk], list[Chunk]]:
    """Children and parents of two tenants: one source in three consecutive chunks, an ACL-restricted chunk, an
    identifier, and the other tenant's copy of the same source, ids and words."""
    children = [
        chunk("a1", "reset the password from the login page", start=0, vector=(1, 0, 0, 0)),
        chunk("a2", "the password reset link expires after one hour", start=40, vector=(0.9, 0.1, 0, 0)),
        chunk("a3", "error E1042 means the sync token expired", start=90, vector=(0, 1, 0, 0)),
        chunk("a4", "legal hold keeps the password history", acl=("legal",), source="policy", parent="p-policy",
              vector=(0, 0, 1, 0)),
        chunk("g1", "reset the password from the login page", tenant="globex", vector=(1, 0, 0, 0)),
        chunk("g2", "error E1042 means the sync token expired", tenant="globex", start=90, vector=(0, 1, 0, 0)),
    ]  # fmt: skip
    parents = [
        chunk("p-guide", "Guide: passwords and sync errors", parent=None, kind="parent"),
        chunk("p-policy", "Policy: legal hold", source="policy", parent=None, acl=("legal",), kind="parent"),
        chunk("p-guide-g", "Globex guide", tenant="globex", parent=None, kind="parent"),
    ]
    return children, parents


def load(backend: Any, children: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> list[tuple[str, str]]:
    """Write chunks as ingest does (begin -> write -> refresh -> commit per tenant); returns the retired
    ``(source_id, version)`` pairs (not purged).

    Args:
        backend: The backend.
        children: Children.
        parents: Parents.
    """
    store = backend.version_store()
    by_tenant: dict[str, set[tuple[str, str]]] = {}
    for c in (*children, *parents):
        by_tenant.setdefault(c.tenant_id, set()).add((c.source_id, c.source_version))
    for tenant, pairs in by_tenant.items():
        store.begin(tenant, sorted(pairs))
    report = backend.index(list(children), list(parents))
    assert report.failed == [], report.failed
    store.refresh()
    retired = [r for tenant, pairs in by_tenant.items() for r in store.commit(tenant, sorted(pairs))]
    backend.flush()
    return retired
