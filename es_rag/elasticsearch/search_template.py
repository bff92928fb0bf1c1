"""The stored hybrid search template's call: its id, the params of a ``_search/template`` request, and a
renderer of its mustache (the tests prove that the stored template renders to exactly
:func:`es_rag.elasticsearch.bodies.native_fusion_body`'s retriever)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from es_rag.elasticsearch.bodies import exact_query, semantic_highlight, source_spec
from es_rag.errors import ConfigError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.query import bm25_route, extract_identifiers, semantic_mode
from es_rag.settings import SEMANTIC_FIELD, Settings


def search_template_id(settings: Settings) -> str:
    """Id of the stored hybrid search template (``<prefix>-hybrid``).

    Args:
        settings: Gives the prefix.
    """
    return f"{settings.index.prefix}-hybrid"


def search_template_params(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    vectors_in_source_param: bool = True,
) -> dict[str, Any]:
    """``params`` of a ``_search/template`` call of the stored hybrid template.

    Args:
        query_text: The user's query.
        query_vector: The query embedding; None in ``vector_mode=semantic_text``, where the template's dense child
            is the ``semantic`` query (``params.semantic``) and Elasticsearch embeds the query.
        flt: Hard filter (rendered into every child retriever by the template).
        settings: Candidate counts and RRF parameters.
        vectors_in_source_param: See :func:`source_spec`.
    """
    identifiers = extract_identifiers(query_text) if settings.retrieve.exact_channel == "auto" else []
    semantic = semantic_mode(settings)
    if query_vector is None and not semantic:
        raise ConfigError(
            "the stored search template runs bm25 + dense and needs a query vector (vector_mode semantic_text needs "
            "none: Elasticsearch embeds the query)"
        )
    params: dict[str, Any] = {"query_text": query_text}
    if query_vector is not None and not semantic:
        params["query_vector"] = [float(x) for x in query_vector]
    params |= {
        "filter": flt.to_es(),
        "k": settings.retrieve.candidate_k,
        "num_candidates": settings.retrieve.num_candidates,
        "rank_window_size": settings.retrieve.candidate_k,
        "rank_constant": settings.fusion.rank_constant,
        "fields": list(bm25_route(query_text, settings).fields),  # the query language's subfields, as bm25_query
        "source": source_spec(vectors_in_source_param=vectors_in_source_param),
    }
    if semantic:
        params["semantic"] = {"field": SEMANTIC_FIELD, "highlight": semantic_highlight()}
    rescore = settings.index.vector_rescore()
    if rescore and not semantic:  # a quantized index: the kNN search's rescore_vector, as knn_clause writes it
        params["rescore"] = rescore
    if settings.retrieve.bm25_tie_breaker:  # absent = the template's section is skipped, as the native body omits it
        params["tie_breaker"] = settings.retrieve.bm25_tie_breaker
    if identifiers:
        params["exact"] = {"query": exact_query(identifiers)}
    return params


def search_template_request(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    vectors_in_source_param: bool = True,
) -> EsRequest:
    """``POST <index>/_search/template`` calling the stored hybrid template with params.

    Args:
        query_text: The user's query.
        query_vector: The query embedding (None in ``vector_mode=semantic_text``).
        flt: Hard filter.
        settings: Candidate counts, index and template names.
        vectors_in_source_param: See :func:`~es_rag.elasticsearch.bodies.source_spec` (False before Elasticsearch
            9.1 and 8.19, which refuse the key).
    """
    body = {
        "id": search_template_id(settings),
        "params": search_template_params(
            query_text, query_vector, flt, settings, vectors_in_source_param=vectors_in_source_param
        ),
    }
    return EsRequest("POST", f"{settings.chunk_index}/_search/template", body)


def render_search_template(source: str, params: dict[str, Any]) -> dict[str, Any]:
    """Render the stored template's mustache the way Elasticsearch does for the constructs it uses.

    Supports ``{{name}}`` (values are JSON-escaped scalars inside strings), ``{{#toJson}}name{{/toJson}}``
    and ``{{#name}}...{{/name}}`` / ``{{^name}}...{{/name}}`` sections on a present / absent param. Used
    by the tests to prove the stored template renders to exactly :func:`native_fusion_body`'s retriever.

    Args:
        source: Template source (mustache over JSON).
        params: The call's params.
    """

    def lookup(name: str) -> Any:
        value: Any = params
        for part in name.split("."):
            value = value[part] if isinstance(value, dict) and part in value else None
        return value

    def sections(text: str) -> str:
        pattern = re.compile(r"\{\{([#^])(\w+)\}\}(.*?)\{\{/\2\}\}", re.S)
        while True:
            m = pattern.search(text)
            if m is None:
                return text
            kind, name, inner = m.groups()
            if name == "toJson":
                rendered = json.dumps(lookup(inner.strip()), ensure_ascii=False)
            else:
                present = lookup(name) not in (None, False, [], "")
                rendered = inner if present == (kind == "#") else ""
            text = text[: m.start()] + rendered + text[m.end() :]

    def scalar(m: re.Match[str]) -> str:
        value = lookup(m.group(1))
        return json.dumps(value, ensure_ascii=False)[1:-1] if isinstance(value, str) else json.dumps(value)

    text = sections(re.sub(r"\{\{![^}]*\}\}", "", source))
    text = re.sub(r"\{\{([\w.]+)\}\}", scalar, text)
    result: dict[str, Any] = json.loads(text)
    return result
