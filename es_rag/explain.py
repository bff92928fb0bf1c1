"""What ``es-rag explain`` prints: the Elasticsearch request(s) a search sends, per fusion path, with
comments saying why (pure: no model; a cluster only when one is given, for its version gate and fusion path)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from es_rag.query import diversify_blocker, es_rerank_blocker, extract_identifiers, plan_search
from es_rag.settings import MmrPath, Settings

_CHANNEL_LABEL = {"bm25": "BM25", "dense": "kNN", "exact": "exact"}


def version_of(number: str) -> tuple[int, ...] | None:
    """A probed version number as a tuple, None when unknown.

    Args:
        number: ``9.1.2`` or ``9.2.0-SNAPSHOT``.
    """
    parts = tuple(int(p) for p in number.split("-")[0].split(".") if p.isdigit())
    return parts or None


def explain_sections(
    query: str,
    vector: Any,
    flt: Any,
    settings: Settings,
    *,
    paths: Sequence[bool],
    vectors_param: bool = True,
    version: tuple[int, ...] | None = None,
) -> list[tuple[list[str], list[Any]]]:
    """``(comment lines, requests)`` per fusion path ``explain`` prints, chosen as
    :meth:`~es_rag.elasticsearch.backend.ElasticsearchBackend.retrieve` chooses: a single channel or a
    client-only normaliser (``zscore``) never takes the native path.

    Args:
        query: The query.
        vector: The query vector.
        flt: Hard filter (with the version snapshot).
        settings: Fusion method, normaliser, weights, exact channel.
        paths: Native (True) and/or client (False), in print order.
        vectors_param: See :func:`es_rag.elasticsearch.bodies.source_spec`.
        version: The probed cluster version (weighted rrf, linear and l2_norm are version-gated), None if unknown.
    """
    from es_rag.elasticsearch.bodies import EXACT_FIELDS, rerank_window, search_requests

    # the plan a search would follow where native fusion is on offer (the same function decides retrieve's path)
    plan = plan_search(query, vector, settings, native_available=True in paths, version=version)
    notes: list[str] = []
    if plan.bm25 is not None:
        notes.append(plan.bm25.describe())
    if plan.identifiers:
        notes.append(
            f"exact channel: identifiers {list(plan.identifiers)} as match_phrase on {', '.join(EXACT_FIELDS)}"
        )
    if plan.native_blocked:
        notes.append(f"native fusion not used ({plan.native_blocked}): client path only")
        paths = [False]
    if settings.fusion.channel_weights:
        given = ", ".join(f"{c}={w}" for c, w in settings.fusion.channel_weights.items())
        notes.append(f"channel weights: {given} (any other channel 1.0)")
    method = settings.fusion.method
    channels = " + ".join(_CHANNEL_LABEL[c] for c in plan.channels)
    sections: list[tuple[list[str], list[Any]]] = []
    for native in paths:
        es_rerank = es_rerank_blocker(settings, native, version) is None
        # without a cluster, --mmr-path native shows the body a 9.3+ cluster would get
        assumed = version if version is not None or settings.select.mmr_path is not MmrPath.NATIVE else (9, 3)
        mmr_why = diversify_blocker(
            settings, native=native, es_rerank=es_rerank, has_vector=vector is not None, version=assumed
        )
        reqs = search_requests(
            query,
            vector,
            flt,
            settings,
            native=native,
            vectors_in_source_param=vectors_param,
            es_rerank=es_rerank,
            diversify=mmr_why is None,
        )
        extra: list[str] = []
        if es_rerank:
            extra.append(
                f"rerank: Elasticsearch text_similarity_reranker {settings.rerank.inference_id} over the top "
                f"{rerank_window(settings)} (Enterprise/trial licence, Elasticsearch >= 8.14); the local cross-encoder "
                "is skipped, and is the fallback on a licence 403 or a cluster without the retriever"
            )
        elif native and settings.rerank.inference_id is not None:
            extra.append(f"rerank: local cross-encoder ({es_rerank_blocker(settings, native, version)})")
        if mmr_why is None:
            extra.append(
                f"select: Elasticsearch diversify retriever, MMR lambda={settings.select.mmr_lambda} keeps "
                f"{settings.select.context_k} (Elasticsearch >= 9.3, technical preview); client MMR is the fallback"
            )
        elif native and settings.select.mmr_path is not MmrPath.CLIENT:
            extra.append(f"select: client MMR ({mmr_why})")
        if native and method == "rrf":
            weighted = ", >= 9.2 for the weights" if settings.fusion.channel_weights else ""
            label = f"native fusion: rrf retriever (Enterprise/trial licence, Elasticsearch >= 8.16{weighted})"
        elif native:
            l2 = ", >= 9.1 for l2_norm" if settings.fusion.normalizer == "l2_norm" else ""
            label = (
                f"native fusion: linear retriever, normalizer {settings.fusion.normalizer} per child "
                f"(Enterprise/trial licence, Elasticsearch >= 8.18{l2})"
            )
        else:
            fused = "RRF" if method == "rrf" else f"linear fusion ({settings.fusion.normalizer})"
            label = f"client fusion: one _msearch ({channels}), fused by es_rag's {fused} (any licence)"
        sections.append(([*notes, label, *extra] if not sections else [label, *extra], reqs))
    return sections


def template_section(
    query: str, vector: Any, flt: Any, settings: Settings, *, vectors_param: bool = True
) -> tuple[list[str], list[Any]]:
    """The ``_search/template`` call of the stored hybrid template, with what it does and does not do.

    Args:
        query: The query.
        vector: The query vector.
        flt: Hard filter (with the version snapshot).
        settings: Settings.
        vectors_param: See :func:`es_rag.elasticsearch.bodies.source_spec`.
    """
    from es_rag.elasticsearch.search_template import search_template_id, search_template_request

    exact = " + exact" if settings.retrieve.exact_channel == "auto" and extract_identifiers(query) else ""
    comments = [
        f"stored search template {search_template_id(settings)} (installed by es-rag setup): native rrf over "
        f"bm25 + dense{exact} with the filter in every child (Enterprise/trial licence)"
    ]
    if settings.fusion.method != "rrf" or settings.fusion.channel_weights:
        comments.append("the template fuses with unweighted rrf: --fusion-method/--channel-weights are not templated")
    return comments, [search_template_request(query, vector, flt, settings, vectors_in_source_param=vectors_param)]


EXPLAIN_FORMATS = ("console", "json")


def explain_text(
    query: str,
    vector: Any,
    flt: Any,
    settings: Settings,
    *,
    backend: Any = None,
    template: bool = False,
    fmt: str = "console",
) -> str:
    """Exactly what ``es-rag explain`` prints (``es-rag explain`` and :meth:`es_rag.client.RagClient.explain` both
    call it): the request(s) a search sends, Kibana Dev Tools console text or JSON.

    With a cluster ``backend`` the filter carries the tenant's version-registry snapshot a search would read and the
    cluster's fusion path; without one, both fusion paths are shown when ``fusion_path`` is ``auto`` and the version
    gate is described (no hidden keys are known).

    Args:
        query: The query.
        vector: The query vector (a list of floats).
        flt: The caller's hard filter (:class:`~es_rag.filters.SearchFilter`).
        settings: Settings.
        backend: An :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend`, or None (no cluster).
        template: Show the ``_search/template`` call of the stored hybrid template instead.
        fmt: ``console`` or ``json``.

    Raises:
        ConfigError: An unknown ``fmt``.
    """
    from es_rag.errors import ConfigError
    from es_rag.es_request import render
    from es_rag.settings import FusionPath
    from es_rag.versions.registry import registry_index

    if fmt not in EXPLAIN_FORMATS:
        raise ConfigError(f"format: invalid value {fmt!r}; valid values: {', '.join(EXPLAIN_FORMATS)}")
    # exactly what a search sends: the caller's filter plus the tenant's version-registry snapshot, read once per
    # call and inlined (es_rag.versions.registry); without a cluster no key is known to be hidden
    if backend is not None:
        flt = backend.snapshot_versions(flt)
        hidden = sorted(flt.versions.hidden) if flt.versions is not None else []
        gate_note = (
            f"version gate: {len(hidden)} hidden key(s) read from {registry_index(settings)}/_doc/{flt.tenant_id}"
        )
    else:
        gate_note = (
            f"version gate: a search reads {registry_index(settings)}/_doc/{flt.tenant_id} once and adds "
            '{"bool": {"must_not": [{"terms": {"version_key": [<hidden keys>]}}]}} to every retriever '
            "(none shown: no cluster; pass --es to read them)"
        )
    if template:
        vectors_param = backend is None or backend.probe().vectors_in_source_param is not False
        sections = [template_section(query, vector, flt, settings, vectors_param=vectors_param)]
    else:
        vectors_param = True
        version: tuple[int, ...] | None = None
        paths: list[bool]
        if backend is not None:
            caps = backend.probe()
            vectors_param = caps.vectors_in_source_param is not False
            version = version_of(caps.version)
            paths = [backend.fusion_path() == "native"]
        elif settings.fusion.path is FusionPath.AUTO:
            paths = [True, False]
        else:
            paths = [settings.fusion.path is FusionPath.NATIVE]
        sections = explain_sections(
            query, vector, flt, settings, paths=paths, vectors_param=vectors_param, version=version
        )
    sections[0] = ([gate_note, *sections[0][0]], sections[0][1])
    if fmt == "json":
        return render([r for _, reqs in sections for r in reqs], "json")
    blocks = ["".join(f"# {c}\n" for c in comments) + render(reqs, "console") for comments, reqs in sections]
    return "\n".join(blocks)
