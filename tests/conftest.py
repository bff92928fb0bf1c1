from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests never reach a model hub: fail fast instead of waiting on retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Ingest exports the embedding model's ONNX query encoder once per model (es_rag/encoders/onnx_query.py): seconds per
# export, and the suite's models are throwaway ones. tests/unit/test_onnx_query.py turns it back on where it tests it.
os.environ["ES_RAG_ONNX_EXPORT"] = "0"
# ... and never reads the exports of this machine's user (~/.cache/es_rag/onnx): each test process has its own folder.
os.environ["ES_RAG_ONNX_CACHE"] = tempfile.mkdtemp(prefix="es_rag-test-onnx-")
atexit.register(shutil.rmtree, os.environ["ES_RAG_ONNX_CACHE"], True)
# ... nor this user's other es_rag caches (the decompressed language model, es_rag/languages.py).
os.environ["ES_RAG_CACHE"] = tempfile.mkdtemp(prefix="es_rag-test-cache-")
atexit.register(shutil.rmtree, os.environ["ES_RAG_CACHE"], True)
# es-rag search hands its query to an es-rag serve of the same index when one runs (es_rag/cli/resident.py): a
# server of this user must never answer a test's search. tests/unit/test_resident.py points it at its own folder.
os.environ["ES_RAG_SOCKET_DIR"] = tempfile.mkdtemp(prefix="es_rag-test-run-")
atexit.register(shutil.rmtree, os.environ["ES_RAG_SOCKET_DIR"], True)
# Haystack (tests/integrations) sends usage telemetry unless told not to; nothing leaves a test run.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
# pytest-xdist runs one worker per core: each gets its share of the CPUs for torch, not all of them
# (es_rag/encoders/threads.py; N workers x all cores each oversubscribed the machine)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and not os.environ.get("ES_RAG_TORCH_THREADS"):
    _cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ["ES_RAG_TORCH_THREADS"] = str(max(1, _cpus // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
# The live suite's cluster moves out of ES_URL, which the CLI follows: a command a test runs without --es stays on
# its embedded index; the live tests read tests.support.live.LIVE_URL_ENV.
if os.environ.get("ES_URL"):
    os.environ["ES_RAG_TEST_ES_URL"] = os.environ.pop("ES_URL")


@pytest.fixture(scope="session")
def tiny_bi_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.models_factory import build_tiny_bi_encoder

    return build_tiny_bi_encoder(tmp_path_factory.mktemp("tiny-bi"))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.models_factory import build_tiny_cross_encoder

    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce"))


@pytest.fixture(scope="session")
def minilm_tokenizer():  # type: ignore[no-untyped-def]
    from es_rag.encoders.embedder import tokenizer_for

    return tokenizer_for("sentence-transformers/all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    from es_rag.wiring import SAMPLE_DIR

    return SAMPLE_DIR


@pytest.fixture(scope="session")
def two_tenant_rag(tiny_bi_encoder: Path):  # type: ignore[no-untyped-def]
    """A RagClient holding two tenants' documents (:mod:`tests.support.apps`), shared by the adapter tests."""
    from tests.support.apps import two_tenant_client

    rag = two_tenant_client(tiny_bi_encoder)
    yield rag
    rag.close()
