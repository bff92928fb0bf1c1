"""Fixtures of the live-cluster suite (``pytest -m live``).

Every test here needs a real Elasticsearch cluster and is skipped unless ``ES_URL`` is set.
Credentials come from ``ES_API_KEY`` or ``ES_USERNAME``/``ES_PASSWORD`` (read by
:meth:`ElasticsearchBackend.connect`); ``ES_VERIFY_CERTS=false`` turns TLS verification off for a
self-signed development cluster.

The suite works under a throw-away prefix ``es-rag-test-<random>`` and, when the module is done,
deletes exactly the indices, index templates, component templates, ingest pipelines and the stored
search template (``_scripts/<prefix>-hybrid``) that ``setup()`` created under that prefix - never a
wildcard, never anything else.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from es_rag.elasticsearch.backend import ElasticsearchBackend  # noqa: E402
from es_rag.settings import Settings  # noqa: E402
from tests.support.live import SKIP_REASON, TEST_PREFIX, delete_created_assets, live_settings_for  # noqa: E402

LIVE_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this directory's ``live`` tests when no cluster is configured."""
    if os.environ.get("ES_RAG_TEST_ES_URL"):
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if item.get_closest_marker("live") and LIVE_DIR in Path(item.path).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def es_url() -> str:
    url = os.environ.get("ES_RAG_TEST_ES_URL")
    if not url:
        pytest.skip(SKIP_REASON)
    return url


@pytest.fixture(scope="module")
def live_settings() -> Settings:
    return live_settings_for(f"{TEST_PREFIX}{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module")
def live_backend(es_url: str, live_settings: Settings) -> Iterator[ElasticsearchBackend]:
    verify = os.environ.get("ES_VERIFY_CERTS", "true").strip().lower() not in ("0", "false", "no")
    backend = ElasticsearchBackend.connect(es_url, live_settings, verify_certs=verify)
    try:
        yield backend
    finally:
        delete_created_assets(backend)


@pytest.fixture(scope="module")
def installed(live_backend: ElasticsearchBackend) -> ElasticsearchBackend:
    """The backend after a first ``setup()`` (pipelines, templates, both indices)."""
    live_backend.setup()
    return live_backend
