"""Search backends behind one small protocol: Elasticsearch (the product) and an embedded reference."""

from es_rag.backends.base import IndexReport, Retrieval, SearchBackend

__all__ = ["IndexReport", "Retrieval", "SearchBackend"]
