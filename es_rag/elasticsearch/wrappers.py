"""Whether a search wraps its fused retriever in Elasticsearch (``text_similarity_reranker``, ``diversify``) or falls
back to the client: why not (:func:`es_rerank_blocker_of`, :func:`diversify_blocker_of`), which wrapper a refusal is
about and whether it sticks (:func:`refused_wrapper`), and what the answer says of where its hits came from."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from es_rag.elasticsearch.probe import Capabilities
from es_rag.errors import ClusterError, LicenseError
from es_rag.es_request import EsRequest
from es_rag.query import diversify_blocker, es_rerank_blocker
from es_rag.settings import Settings


def es_rerank_blocker_of(
    settings: Settings, native: bool, version: tuple[int, ...] | None, caps: Capabilities
) -> str | None:
    """Why this search does not rerank in Elasticsearch: :func:`es_rag.query.es_rerank_blocker`, a refusal
    learned earlier (sticky), or an endpoint the probe lists with another task type or does not list."""
    why = es_rerank_blocker(settings, native, version)
    if why is not None:
        return why
    if caps.es_rerank_refused is not None:
        return caps.es_rerank_refused
    inference_id = str(settings.rerank.inference_id)
    if "_inference/_all" in caps.unreadable:
        # GET _inference and the reranker's GetInferenceModelAction are one action,
        # cluster:monitor/xpack/inference/get, which the retriever runs as the caller
        # (TextSimilarityRankFeaturePhaseRankCoordinatorContext): a key that cannot list endpoints cannot rerank
        return MONITOR_INFERENCE_MISSING
    if "_inference/_all" not in caps.unreadable:
        info = caps.inference_endpoint_info.get(inference_id)
        if info is None:
            return f"inference endpoint {inference_id!r} not found (GET _inference/_all)"
        if info.get("task_type") != "rerank":
            return f"inference endpoint {inference_id!r} has task type {info.get('task_type')}, not rerank"
    return None


def diversify_blocker_of(
    settings: Settings,
    native: bool,
    es_rerank: bool,
    has_vector: bool,
    version: tuple[int, ...] | None,
    caps: Capabilities,
) -> str | None:
    """Why MMR runs client-side for this search (None: the ``diversify`` retriever), see
    :func:`es_rag.query.diversify_blocker`; a refusal learned earlier is sticky."""
    why = diversify_blocker(settings, native=native, es_rerank=es_rerank, has_vector=has_vector, version=version)
    if why is None and caps.diversify_refused is not None:
        return caps.diversify_refused
    return why


MONITOR_INFERENCE_MISSING = (
    "the key lacks cluster privilege monitor_inference, which text_similarity_reranker needs: Elasticsearch runs "
    "GetInferenceModelAction as the caller (grant monitor_inference to the search role, docs/cluster.md)"
)
"""Why a search does not rerank in Elasticsearch when the key cannot read inference endpoints."""


def endpoint_score(score: float | None) -> float | None:
    """The rerank endpoint's own score of a hit that ``text_similarity_reranker`` returned.

    Elasticsearch (8.16.4+, every version es_rag supports; PR #120930) returns ``max(s, 0) + min(exp(s), 1)`` of the
    endpoint's score ``s`` (``TextSimilarityRankFeaturePhaseRankCoordinatorContext.normalizeScore``): a positive
    score comes back one higher, a negative one as ``exp(s)``. This inverts it, so the trace shows ``s``.

    Args:
        score: The hit's ``_score``.
    """
    if score is None:
        return None
    if score >= 1.0:
        return score - 1.0
    return math.log(score) if score > 0.0 else float("-inf")


def lacks_monitor_inference(exc: ClusterError) -> bool:
    """Whether a refusal is the 403 for ``cluster:monitor/xpack/inference/get``, the action
    ``text_similarity_reranker`` runs as the caller (:data:`MONITOR_INFERENCE_MISSING`)."""
    return exc.status == 403 and "cluster:monitor/xpack/inference/get" in str(exc)


def refused_wrapper(exc: ClusterError, *, es_rerank: bool, diversify: bool) -> tuple[str, bool] | None:
    """Which wrapping retriever (``text_similarity_reranker`` or ``diversify``) a refusal is about, and whether
    it is permanent for this cluster (a licence 403, an unknown retriever); None when it is about neither.

    ``LicenseUtils.newComplianceException`` names the feature (``current license is non-compliant for
    [text_similarity_reranker]``); ``RetrieverBuilder.parseInnerRetrieverBuilder`` names an unknown retriever."""
    if exc.status is None or not 400 <= exc.status < 500:
        return None
    text = str(exc)
    if es_rerank and lacks_monitor_inference(exc):
        return "text_similarity_reranker", True  # the caller lacks monitor_inference: no later search can rerank
    for kind, active in (("text_similarity_reranker", es_rerank), ("diversify", diversify)):
        if active and (f"[{kind}]" in text or (kind == "text_similarity_reranker" and "Inference endpoint" in text)):
            sticky = isinstance(exc, LicenseError) or f"unknown retriever [{kind}]" in text
            return kind, sticky
    return None


def diversify_spec(reqs: Sequence[EsRequest]) -> dict[str, Any] | None:
    body = reqs[0].body if reqs else None
    spec = (body.get("retriever") or {}).get("diversify") if isinstance(body, dict) else None
    if not isinstance(spec, dict):
        return None
    return {k: spec[k] for k in ("type", "field", "lambda", "rank_window_size", "size")}


def hit_indices(responses: Sequence[Any]) -> tuple[str, ...]:
    """The concrete indices (``_index``) the hits of these search answers came from."""
    return tuple(
        sorted(
            {
                str(h["_index"])
                for r in responses
                if isinstance(r, dict)
                for h in (r.get("hits") or {}).get("hits", [])
                if "_index" in h
            }
        )
    )
