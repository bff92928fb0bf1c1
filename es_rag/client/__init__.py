"""``RagClient``: the one object an app keeps for its whole life -- search, ingest, delete, list, explain, selftest --
over an Elasticsearch cluster or an embedded index folder (:mod:`es_rag.client.rag`; its read side
:mod:`es_rag.client.reads`, its write side :mod:`es_rag.client.writes`)."""

from es_rag.client.common import DEFAULT_ASYNC_WORKERS
from es_rag.client.rag import RagClient

__all__ = ["DEFAULT_ASYNC_WORKERS", "RagClient"]
