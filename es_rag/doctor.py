"""``es-rag doctor`` without a cluster: which models load here and which path each stage takes on the
embedded backend (the cluster report is :meth:`es_rag.elasticsearch.backend.ElasticsearchBackend.doctor`)."""

from __future__ import annotations

from typing import Any

from es_rag.settings import Settings


def model_source(name: str) -> str:
    """Where a model would be loaded from, found without loading it (no torch import): a local folder, the
    offline package that ships it, the model hub's local cache, or the hub (reachable or not).

    Args:
        name: Hub name or local folder.
    """
    from es_rag.cross_encoder.shipped import SHIPPED_EN, shipped_path
    from es_rag.encoders.embedder import resolve_model_path
    from es_rag.encoders.hub import hub_reachable
    from es_rag.settings.base import DEFAULT_RERANKER_MODEL

    shipped = shipped_path(name)
    if shipped is not None:
        return f"shipped with es_rag: {shipped}"
    path, version = resolve_model_path(name)
    if version.startswith("local:"):
        return f"local folder {path}"
    if path != name:
        return f"offline package ({version.split('@', 1)[1]}): {path}"
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
    except Exception:
        cached = None
    if isinstance(cached, str):
        return "model hub cache on this machine"
    if hub_reachable():
        return "model hub: reachable, not cached yet"
    instead = f"; the shipped {SHIPPED_EN} reranks in its place" if name == DEFAULT_RERANKER_MODEL else ""
    return f"model hub: unreachable and not cached here{instead}"


def local_doctor(settings: Settings, *, load_models: bool = False) -> dict[str, Any]:
    """Without a cluster: where each model would load from (``load_models``: load it, seconds each) and which
    path each stage takes on the embedded backend.

    Args:
        settings: Settings.
        load_models: Load the models to prove they work, instead of only locating them.
    """
    out: dict[str, Any] = {"cluster": "none (embedded backend)"}
    models = {"embedding_model": settings.encoder.model}
    if settings.rerank.model:
        models["reranker"] = settings.rerank.model
    for key, name in models.items():
        out[key] = {"name": name, "source": model_source(name), "status": "not loaded (--load-models loads it)"}
    out["device"] = {
        "requested": f"{settings.encoder.device} {settings.encoder.precision}",
        "resolved": "not resolved (--load-models resolves it: cuda, else mps, else cpu for auto)",
    }
    if load_models:
        _load(settings, out)
        out["device"]["resolved"] = out["embedding_model"].get("device", out["embedding_model"]["status"])
    out["paths"] = {
        "bm25": "bm25s (embedded)",
        "knn": "exact numpy (embedded)",
        "fusion": "client-rrf",
        "rerank": out.get("reranker", {}).get("status", "disabled")
        if load_models
        else ("cross-encoder if it loads, else the fused order" if settings.rerank.model else "disabled"),
        "select/pack": "python (mmr, per-source cap, token budget)",
    }
    return out


def _load(settings: Settings, out: dict[str, Any]) -> None:
    from es_rag.cross_encoder.model import CrossEncoderReranker
    from es_rag.encoders.embedder import make_embedder
    from es_rag.errors import ConfigError, ModelLoadError

    emb = make_embedder(settings.encoder.model, device=settings.encoder.device, precision=settings.encoder.precision)
    try:
        emb.warm_up()
        out["embedding_model"].update(
            version=emb.version, dims=emb.dims, device=emb.device_plan.describe(), status="ok"
        )
    except (ModelLoadError, ConfigError) as exc:
        out["embedding_model"]["status"] = f"unavailable: {exc}"
    if settings.rerank.model:
        rr = CrossEncoderReranker(
            settings.rerank.model,
            device=settings.encoder.device,
            precision=settings.encoder.precision,
            backend=settings.rerank.backend,
        )
        try:
            rr.warm_up()
            out["reranker"].update(device=rr.device_plan.describe(), backend=rr.backend, status="ok")
            if rr.substituted:
                out["reranker"].update(model=rr.name, status=f"ok: the shipped model, {rr.substituted}")
        except (ModelLoadError, ConfigError) as exc:
            out["reranker"]["status"] = f"unavailable -> fused order fallback: {exc}"
