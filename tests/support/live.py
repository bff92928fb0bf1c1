"""What the live-cluster suite shares: the throw-away prefix, the skip reason, small settings for hand-made
vectors, and the cleanup that deletes exactly what ``setup()`` created under the prefix."""

from __future__ import annotations

from es_rag.elasticsearch.assets import setup_paths
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.es_request import EsRequest
from es_rag.settings import Settings

TEST_PREFIX = "es-rag-test-"
LIVE_URL_ENV = "ES_RAG_TEST_ES_URL"
"""Where tests/conftest.py puts the ``ES_URL`` a live run was started with (the CLI would follow ``ES_URL``)."""
SKIP_REASON = (
    "live Elasticsearch suite: set ES_URL (credentials from ES_API_KEY or "
    "ES_USERNAME/ES_PASSWORD) to run it against a real cluster"
)


def live_settings_for(prefix: str) -> Settings:
    """Small settings for hand-made 4-dimensional vectors."""
    return Settings(
        index_prefix=prefix,
        vector_dims=4,
        candidate_k=10,
        num_candidates=20,
        rerank_k=5,
        context_k=3,
        rerank_model=None,
    )


def delete_created_assets(backend: ElasticsearchBackend) -> None:
    """Delete what ``setup()`` created under the throw-away prefix, dependants first."""
    s = backend.settings
    if not s.index.prefix.startswith(TEST_PREFIX):  # never touch anything that is not ours
        raise AssertionError(f"refusing to clean up non-test prefix {s.index.prefix!r}")
    for index in (s.chunk_index, s.parent_index, f"{s.index.prefix}-versions"):
        backend.send(EsRequest("DELETE", index), ignore=(404,))
    # stored script, index templates, component templates, then pipelines (setup order reversed)
    for path in reversed(setup_paths(s)):
        backend.send(EsRequest("DELETE", path), ignore=(404,))
