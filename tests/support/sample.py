"""The bundled sample corpus (``es_rag/data/sample``) ingested with a tiny embedding model, for end-to-end tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from es_rag.ingest import IngestReport, ingest_documents
from es_rag.settings import Settings
from es_rag.wiring import build_chunker, build_embedder, load_manifest


def sample_settings(model: Path, **overrides: Any) -> Settings:
    """Settings sized for the sample corpus and a tiny 32-dimension bi-encoder, no reranker.

    Args:
        model: The tiny bi-encoder's directory (the ``tiny_bi_encoder`` fixture).
        overrides: Further settings (flat names).
    """
    values: dict[str, Any] = {
        "embedding_model": str(model),
        "vector_dims": 32,
        "rerank_model": None,
        "chunk_max_tokens": 60,
        "chunk_overlap": 10,
        "candidate_k": 30,
        "num_candidates": 60,
        "rerank_k": 20,
        "context_k": 4,
    }
    return Settings(**{**values, **overrides})


def ingest_sample(backend: Any, settings: Settings, sample_dir: Path) -> tuple[Any, IngestReport, list[Any]]:
    """Ingest every sample document into ``backend``; returns the embedder, the report (asserted free of failures)
    and the manifest's golden queries.

    Args:
        backend: Embedded backend or a strict-double cluster backend.
        settings: From :func:`sample_settings`.
        sample_dir: The sample folder (the ``sample_dir`` fixture).
    """
    report = IngestReport()
    docs, queries = load_manifest(sample_dir, report)
    embedder = build_embedder(settings)
    ingest_documents(docs, chunker=build_chunker(settings, embedder), embedder=embedder, backend=backend, report=report)
    assert not report.failed, report.failed
    return embedder, report, queries
