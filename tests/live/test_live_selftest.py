"""``es-rag selftest`` on a real cluster (skipped unless ``ES_URL`` is set): the same checks CI runs against the
strict double (``tests/e2e/test_selftest.py``), plus what only a live node can show.

Environment: ``ES_URL`` and credentials (``ES_API_KEY`` or ``ES_USERNAME``/``ES_PASSWORD``, ``ES_CA_CERTS`` or
``ES_VERIFY_CERTS=false`` for a self-signed dev cluster); ``ES_INFERENCE_ID`` (a ``text_embedding`` endpoint, with
``ES_INFERENCE_DIMS``) runs the ``inference`` and ``semantic_text`` modes too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from es_rag.elasticsearch.backend import ElasticsearchBackend  # noqa: E402
from es_rag.elasticsearch.bodies import client_channel_bodies  # noqa: E402
from es_rag.es_request import EsRequest  # noqa: E402
from es_rag.filters import SearchFilter  # noqa: E402
from es_rag.selftest import cleanup, run_selftest, throwaway_settings  # noqa: E402
from es_rag.settings import SEMANTIC_FIELD, Settings  # noqa: E402

pytestmark = pytest.mark.live


def _connect(settings: Settings) -> ElasticsearchBackend:
    verify = os.environ.get("ES_VERIFY_CERTS", "true").strip().lower() not in ("0", "false", "no")
    return ElasticsearchBackend.connect(
        os.environ["ES_RAG_TEST_ES_URL"], settings, verify_certs=verify, ca_certs=os.environ.get("ES_CA_CERTS") or None
    )


def _modes() -> list[tuple[str, dict[str, Any]]]:
    modes: list[tuple[str, dict[str, Any]]] = [("client", {})]
    inference = os.environ.get("ES_INFERENCE_ID")
    if inference:
        dims = int(os.environ.get("ES_INFERENCE_DIMS", "384"))
        modes.append(("inference", {"inference_id": inference, "vector_dims": dims}))
        modes.append(("semantic_text", {"inference_id": inference, "vector_mode": "semantic_text"}))
    return modes


@pytest.mark.parametrize(("mode", "changes"), _modes(), ids=[m for m, _ in _modes()])
def test_selftest_passes_on_the_live_cluster(es_url: str, mode: str, changes: dict[str, Any]) -> None:
    backend = _connect(throwaway_settings(Settings(**changes)))
    with backend:
        report = run_selftest(backend)
    print(report.table())
    assert report.ok, [c for c in report.checks if c.status == "fail"]
    assert {c.name: c.status for c in report.checks}["cleanup"] == "pass"


def test_semantic_highlight_returns_whole_server_chunks(es_url: str) -> None:
    """``SemanticTextHighlighter``: a fragment is a whole chunk (``fragment_size`` is never read) and
    ``number_of_fragments: 1, order: score`` gives the best one. es_rag maps it back to source offsets
    (``locate_server_chunk``); here the fragment must be a span of the section text, never a cut of it."""
    inference = os.environ.get("ES_INFERENCE_ID")
    if not inference:
        pytest.skip("set ES_INFERENCE_ID (a text_embedding endpoint) to check semantic_text highlighting")
    s = throwaway_settings(Settings(inference_id=inference, vector_mode="semantic_text", semantic_max_chunk_size=20))
    backend = _connect(s)
    text = " ".join(f"Sentence {i} talks about rotating api keys and device wipes in detail." for i in range(40))
    try:
        backend.setup()
        doc = {
            "chunk_id": "c1",
            "source_id": "s",
            "source_version": "1",
            "version_key": "s@1",
            "tenant_id": "t",
            "acl": ["public"],
            "title": "T",
            "text": text,
            "start_offset": 0,
            "end_offset": len(text),
        }
        backend.send(EsRequest("PUT", f"{s.chunk_index}/_doc/c1?refresh=true", doc), timeout=s.connection.bulk_timeout)
        body = client_channel_bodies("device wipes", None, SearchFilter("t"), s, channels=["dense"])["dense"]
        hits = backend.send(EsRequest("POST", f"{s.chunk_index}/_search", body))["hits"]["hits"]
        fragments = hits[0]["highlight"][SEMANTIC_FIELD]
        assert len(fragments) == 1
        assert fragments[0] in text and len(fragments[0].split()) >= 10  # a whole chunk of ~20 words, not 100 chars
    finally:
        cleanup(backend)
