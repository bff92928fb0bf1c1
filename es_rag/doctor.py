"""``es-rag doctor`` without a cluster: which models load here and which path each stage takes on the
embedded backend (the cluster report is :meth:`es_rag.elasticsearch.backend.ElasticsearchBackend.doctor`)."""

from __future__ import annotations

from typing import Any

from es_rag.settings import Settings


def local_doctor(settings: Settings) -> dict[str, Any]:
    """Without a cluster: which models load here and which path each stage takes on the embedded backend.

    Args:
        settings: Settings.
    """
    from es_rag.cross_encoder.model import CrossEncoderReranker
    from es_rag.encoders.embedder import SentenceTransformerEmbedder
    from es_rag.errors import ModelLoadError

    out: dict[str, Any] = {"cluster": "none (embedded backend)"}
    emb = SentenceTransformerEmbedder(settings.encoder.model)
    try:
        emb.warm_up()
        out["embedding_model"] = {"name": emb.name, "version": emb.version, "dims": emb.dims, "status": "ok"}
    except ModelLoadError as exc:
        out["embedding_model"] = {"name": emb.name, "status": f"unavailable: {exc}"}
    if settings.rerank.model:
        rr = CrossEncoderReranker(settings.rerank.model)
        try:
            rr.warm_up()
            out["reranker"] = {"name": rr.name, "status": "ok"}
        except ModelLoadError as exc:
            out["reranker"] = {"name": rr.name, "status": f"unavailable -> fused order fallback: {exc}"}
    out["paths"] = {
        "bm25": "bm25s (embedded)",
        "knn": "exact numpy (embedded)",
        "fusion": "client-rrf",
        "rerank": out.get("reranker", {}).get("status", "disabled"),
        "select/pack": "python (mmr, per-source cap, token budget)",
    }
    return out
