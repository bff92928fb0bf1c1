"""Pure builders of every search body es_rag sends (no I/O).

Every fusion path queries the same channels with the same hard filters, the same candidate counts and
the same fusion parameters:

* channels: ``bm25`` (``multi_match`` over ``Settings.bm25_fields``), ``dense`` (``knn`` on ``vector``;
  in ``vector_mode=semantic_text`` a ``semantic`` query on the ``semantic_text`` field instead, embedded
  by Elasticsearch, with a ``semantic`` highlight naming the best server-side chunk) and ``exact``
  (identifier-like query tokens -- error codes, product numbers, function names -- as ``match_phrase``
  on the ``.ident`` subfields, see :func:`extract_identifiers`); ``exact`` runs only when
  the query holds such a token and ``Settings.exact_channel`` is ``auto``;
* native: one ``_search`` with an ``rrf`` (or ``linear``) retriever whose children are named
  (``_name``) ``standard`` / ``knn`` retrievers, each carrying the filter clauses itself;
* client: one ``_msearch`` with one search per channel (filters in the bool ``filter`` and in the kNN
  ``filter``), fused by :func:`es_rag.stages.fusion.reciprocal_rank_fusion` /
  :func:`es_rag.stages.fusion.linear_fusion`;
* native reranking (``--rerank-inference-id``): the fusion retriever wrapped in a ``text_similarity_reranker``
  (:func:`rerank_retriever`); native MMR (``--mmr-path``): the outermost retriever wrapped in ``diversify``
  (:func:`diversify_retriever`);
* stored search template: :func:`es_rag.elasticsearch.assets.search_template_requests` (mustache, for apps and
  Kibana Dev Tools), called through :mod:`es_rag.elasticsearch.search_template`.

No body ever uses ``post_filter``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.query import bm25_route, channel_plan, extract_identifiers, semantic_mode
from es_rag.settings import SEMANTIC_FIELD, Settings
from es_rag.stages.fusion import check_window

SOURCE_FIELDS = [
    "chunk_id",
    "source_id",
    "source_version",
    "parent_id",
    "heading_path",
    "start_offset",
    "end_offset",
    "page_start",
    "page_end",
    "page_label_start",
    "page_label_end",
    "chunker_version",
    "embedding_version",
    "tenant_id",
    "acl",
    "title",
    "text",
    "visible_text",
    "token_count",
    "content_hash",
    "source_path",
    "language",
    "meta",
    "vector",
]
EXACT_FIELDS = ("text.ident", "title.ident", "heading_path.ident")
"""Subfields analysed by ``es_rag_identifier`` (pattern tokenizer emitting the matches of
:data:`es_rag.query.IDENTIFIER_TOKEN_PATTERN`, + ``cjk_width`` + ``lowercase``)."""


def source_spec(*, vectors_in_source_param: bool = True) -> dict[str, Any]:
    """``_source`` of every search: lineage fields plus the stored vector (MMR reuses it).

    Args:
        vectors_in_source_param: Send ``exclude_vectors: false`` (Elasticsearch >= 9.2 leaves
            vectors out of ``_source`` by default); False for older clusters that reject the key.
    """
    spec: dict[str, Any] = {"includes": list(SOURCE_FIELDS)}
    if vectors_in_source_param:
        spec["exclude_vectors"] = False
    return spec


def bm25_query(query_text: str, settings: Settings | None = None) -> dict[str, Any]:
    """BM25 ``multi_match`` (``best_fields``) over the configured fields, or over their subfields of the query's
    language (``text.en``, ``title.ja``: :func:`es_rag.query.bm25_route`).

    Args:
        query_text: The user's query.
        settings: Gives ``bm25_fields``, ``bm25_tie_breaker`` and the language routing (default settings when None).
    """
    s = settings or Settings()
    fields = list(bm25_route(query_text, s).fields)
    mm: dict[str, Any] = {"query": query_text, "fields": fields, "type": "best_fields"}
    if s.retrieve.bm25_tie_breaker:
        mm["tie_breaker"] = s.retrieve.bm25_tie_breaker
    return {"multi_match": mm}


def exact_query(identifiers: Sequence[str]) -> dict[str, Any]:
    """Exact-match query: each identifier as a phrase on every ``.ident`` subfield; any may match.

    A ``dis_max`` with ``tie_breaker: 1.0`` scores the sum of the matching phrase clauses (the embedded
    backend mirrors exactly that) and keeps the query free of a nested ``bool`` without filter.

    Args:
        identifiers: Identifier-like query tokens (:func:`extract_identifiers`).
    """
    queries = [{"match_phrase": {f: {"query": ident}}} for ident in identifiers for f in EXACT_FIELDS]
    return {"dis_max": {"queries": queries, "tie_breaker": 1.0}}


def knn_clause(query_vector: Sequence[float] | np.ndarray, flt: SearchFilter, settings: Settings) -> dict[str, Any]:
    """kNN search section with the filter applied during the graph search (never after).

    A quantized index (``bbq_*``, or ``int8``/``int4`` with an oversample set) also carries ``rescore_vector``:
    the search-time option exists from 8.18 and 9.0 (``RescoreVectorBuilder``, oversample >= 1), the mapping's
    only from 8.19 and 9.1, so every supported version rescores the same way.

    Args:
        query_vector: The query embedding.
        flt: Hard filter.
        settings: Gives ``candidate_k`` (k), ``num_candidates`` and the rescore oversample.
    """
    clause: dict[str, Any] = {
        "field": "vector",
        "query_vector": [float(x) for x in query_vector],
        "k": settings.retrieve.candidate_k,
        "num_candidates": settings.retrieve.num_candidates,
        "filter": flt.to_es(),
    }
    over = settings.index.vector_rescore()
    if over:  # 0 turns rescoring off: the mapping says so where it can, and 8.18 / 9.0 have no default to undo
        clause["rescore_vector"] = {"oversample": over}
    return clause


def semantic_query(query_text: str) -> dict[str, Any]:
    """The ``semantic`` query on the ``semantic_text`` field (``vector_mode=semantic_text``): Elasticsearch
    embeds the query with the field's inference endpoint and scores each document by its best chunk.

    Args:
        query_text: The user's query.
    """
    return {"semantic": {"field": SEMANTIC_FIELD, "query": query_text}}


def semantic_highlight() -> dict[str, Any]:
    """``highlight`` asking the ``semantic`` highlighter for the best-scoring server-side chunk of each hit.

    The highlighter returns chunk *text* (the chunks are stored as offsets into the field value, which
    are not exposed); :func:`es_rag.elasticsearch.responses.locate_server_chunk` maps it back to source
    offsets where the chunk is a span of ``text``. ``SemanticTextHighlighter`` returns whole chunks
    (``content.substring(offset.start, offset.end)``) and never reads ``fragment_size``; it ranks the chunks by
    score and keeps ``number_of_fragments`` of them (default 5; re-sorted into document order unless
    ``order: score``) -- hence the explicit ``1`` and ``score``. ``tests/live/test_live_selftest.py`` checks that
    the fragment is a whole chunk.
    """
    return {"fields": {SEMANTIC_FIELD: {"type": "semantic", "number_of_fragments": 1, "order": "score"}}}


def _child_retriever(
    channel: str,
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
) -> dict[str, Any]:
    if channel == "bm25":
        return {"standard": {"query": bm25_query(query_text, settings), "filter": flt.to_es(), "_name": "bm25"}}
    if channel == "dense":
        if semantic_mode(settings):
            return {"standard": {"query": semantic_query(query_text), "filter": flt.to_es(), "_name": "dense"}}
        assert query_vector is not None
        return {"knn": {**knn_clause(query_vector, flt, settings), "_name": "dense"}}
    if channel == "exact":
        query = exact_query(extract_identifiers(query_text))
        return {"standard": {"query": query, "filter": flt.to_es(), "_name": "exact"}}
    raise ValueError(f"unknown channel {channel!r}")


def rerank_window(settings: Settings) -> int:
    """``rank_window_size`` of the ``text_similarity_reranker``: ``rerank_k``, at most the fused window.

    Args:
        settings: ``rerank_k`` and ``candidate_k``.
    """
    return min(settings.rerank.k, settings.retrieve.candidate_k)


def rerank_retriever(inner: dict[str, Any], query_text: str, settings: Settings) -> dict[str, Any]:
    """``inner`` (the fusion retriever) wrapped in a ``text_similarity_reranker`` retriever.

    ``TextSimilarityRankRetrieverBuilder`` (x-pack/plugin/inference): ``retriever``, ``inference_text`` and ``field``
    are required, ``inference_id`` optional (recent versions default it to the built-in Elastic reranker; es_rag
    always names it), ``rank_window_size`` (default 10) and the base ``min_score`` (applied after reranking), and
    an Enterprise licence (``TEXT_SIMILARITY_RERANKER_FEATURE``). The endpoint reads ``field`` from each hit's
    ``_source``: es_rag names the chunk ``text``.

    Args:
        inner: The retriever to rerank.
        query_text: The user's query (``inference_text``).
        settings: ``rerank_inference_id``, ``rerank_k`` (the window) and ``rerank_min_score``.
    """
    assert settings.rerank.inference_id is not None
    spec: dict[str, Any] = {
        "retriever": inner,
        "inference_id": settings.rerank.inference_id,
        "inference_text": query_text,
        "field": "text",
        "rank_window_size": rerank_window(settings),
    }
    if settings.rerank.min_score is not None:
        spec["min_score"] = settings.rerank.min_score
    return {"text_similarity_reranker": spec}


def diversify_retriever(
    inner: dict[str, Any], query_vector: Sequence[float] | np.ndarray, settings: Settings, *, window: int
) -> dict[str, Any]:
    """``inner`` wrapped in Elasticsearch's ``diversify`` retriever (MMR, 9.3+, technical preview).

    ``DiversifyRetrieverBuilder`` (server/.../search/diversification): ``retriever``, ``type`` (only ``mmr``) and
    ``field`` (a ``dense_vector``) are required; ``lambda`` is required for MMR and must lie in [0, 1]; ``size``
    (default ``min(10, rank_window_size)``) must be > 0 and <= ``rank_window_size``; ``query_vector`` or
    ``query_vector_builder``, not both. ``MMRResultDiversification`` keeps ``size`` hits chosen by MMR (relevance:
    the maximum-inner-product similarity to ``query_vector``) and returns them in the inner retriever's order.

    Args:
        inner: The retriever whose top ``window`` hits are diversified.
        query_vector: The query embedding.
        settings: ``mmr_lambda`` and ``context_k`` (the ``size``).
        window: ``rank_window_size``: the hits ``inner`` contributes.
    """
    return {
        "diversify": {
            "type": "mmr",
            "retriever": inner,
            "field": "vector",
            "query_vector": [float(x) for x in query_vector],
            "lambda": settings.select.mmr_lambda,
            "rank_window_size": window,
            "size": min(settings.select.context_k, window),
        }
    }


def native_fusion_body(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    vectors_in_source_param: bool = True,
    channels: Sequence[str] | None = None,
    es_rerank: bool = False,
    diversify: bool = False,
) -> dict[str, Any]:
    """``_search`` body using the native ``rrf`` (or ``linear``) retriever (Enterprise/trial, ES >= 8.16).

    Each child retriever is named (``_name``: ``bm25``, ``dense``, ``exact``) and carries the filter
    itself. With one channel (no vector, no identifier) the body is that single filtered retriever:
    fusion of one list is that list. ``size == rank_window_size == candidate_k``.

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None for no dense channel.
        flt: Hard filter, placed inside every child retriever.
        settings: Candidate counts, fusion method and parameters, channel weights.
        vectors_in_source_param: See :func:`source_spec`.
        channels: Channels to fuse (default :func:`es_rag.query.channel_plan`).
        es_rerank: Wrap the fusion retriever in :func:`rerank_retriever` (``size`` becomes its window).
        diversify: Wrap the outermost retriever in :func:`diversify_retriever` (``size`` becomes its ``size``).
    """
    body = _fusion_body(
        query_text,
        query_vector,
        flt,
        settings,
        vectors_in_source_param=vectors_in_source_param,
        channels=channels,
    )
    if es_rerank:
        body["retriever"] = rerank_retriever(body["retriever"], query_text, settings)
        body["size"] = rerank_window(settings)
    if diversify:
        assert query_vector is not None
        body["retriever"] = diversify_retriever(body["retriever"], query_vector, settings, window=body["size"])
        body["size"] = body["retriever"]["diversify"]["size"]
    return body


def _fusion_body(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    vectors_in_source_param: bool,
    channels: Sequence[str] | None,
) -> dict[str, Any]:
    names = list(channels) if channels is not None else channel_plan(query_text, query_vector, settings)
    check_window(settings.retrieve.candidate_k, settings.retrieve.candidate_k)
    body: dict[str, Any] = {
        "size": settings.retrieve.candidate_k,
        "_source": source_spec(vectors_in_source_param=vectors_in_source_param),
    }
    if "dense" in names and semantic_mode(settings):
        body["highlight"] = semantic_highlight()
    children = [_child_retriever(c, query_text, query_vector, flt, settings) for c in names]
    if len(children) == 1:
        body["retriever"] = children[0]
        return body
    weights = settings.fusion.channel_weights  # per-language dense weight: see es_rag.stages.fusion.fuse_channels
    if settings.fusion.method == "linear":
        # the normalizer per child only: a top-level normalizer next to retrievers is refused by 9.1
        # ("[linear] [normalizer] cannot be provided when [retrievers] is specified") and unknown to 9.0
        entries = [
            {"retriever": child, "weight": weights.get(name, 1.0), "normalizer": settings.fusion.normalizer}
            for name, child in zip(names, children, strict=True)
        ]
        body["retriever"] = {"linear": {"retrievers": entries, "rank_window_size": settings.retrieve.candidate_k}}
        return body
    rrf_children: list[dict[str, Any]]
    if weights:
        rrf_children = [
            {"retriever": child, "weight": weights.get(name, 1.0)} for name, child in zip(names, children, strict=True)
        ]
    else:
        rrf_children = children
    body["retriever"] = {
        "rrf": {
            "retrievers": rrf_children,
            "rank_constant": settings.fusion.rank_constant,
            "rank_window_size": settings.retrieve.candidate_k,
        }
    }
    return body


def client_channel_bodies(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    vectors_in_source_param: bool = True,
    channels: Sequence[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per-channel ``_search`` bodies of the client-side fusion path, keyed by channel name.

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None for no dense channel.
        flt: Hard filter, placed in every channel.
        settings: Candidate counts.
        vectors_in_source_param: See :func:`source_spec`.
        channels: Channels to query (default :func:`es_rag.query.channel_plan`).
    """
    names = list(channels) if channels is not None else channel_plan(query_text, query_vector, settings)
    src = source_spec(vectors_in_source_param=vectors_in_source_param)
    bodies: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == "dense" and semantic_mode(settings):
            bodies[name] = {
                "size": settings.retrieve.candidate_k,
                "_source": src,
                "query": {"bool": {"must": [semantic_query(query_text)], "filter": flt.to_es()}},
                "highlight": semantic_highlight(),
            }
            continue
        if name == "dense":
            assert query_vector is not None
            bodies[name] = {
                "size": settings.retrieve.candidate_k,
                "_source": src,
                "knn": knn_clause(query_vector, flt, settings),
            }
            continue
        query = bm25_query(query_text, settings) if name == "bm25" else exact_query(extract_identifiers(query_text))
        bodies[name] = {
            "size": settings.retrieve.candidate_k,
            "_source": src,
            "query": {"bool": {"must": [query], "filter": flt.to_es()}},
        }
    return bodies


def search_requests(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    native: bool,
    vectors_in_source_param: bool = True,
    channels: Sequence[str] | None = None,
    es_rerank: bool = False,
    diversify: bool = False,
) -> list[EsRequest]:
    """The request(s) one search sends: one ``_search`` (native) or one ``_msearch`` (client).

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None for no dense channel.
        flt: Hard filter.
        settings: Candidate counts, fusion parameters and index names.
        native: Native ``rrf``/``linear`` retriever (True) or client-side fusion over ``_msearch`` (False).
        vectors_in_source_param: See :func:`source_spec`.
        channels: Channels to query (default :func:`es_rag.query.channel_plan`).
        es_rerank: Native only: rerank in Elasticsearch (:func:`rerank_retriever`).
        diversify: Native only: MMR in Elasticsearch (:func:`diversify_retriever`).
    """
    index = settings.chunk_index
    if native:
        body = native_fusion_body(
            query_text,
            query_vector,
            flt,
            settings,
            vectors_in_source_param=vectors_in_source_param,
            channels=channels,
            es_rerank=es_rerank,
            diversify=diversify,
        )
        return [EsRequest("POST", f"{index}/_search", body)]
    lines: list[dict[str, Any]] = []
    for body in client_channel_bodies(
        query_text, query_vector, flt, settings, vectors_in_source_param=vectors_in_source_param, channels=channels
    ).values():
        lines.extend([{"index": index}, body])
    return [EsRequest("POST", f"{index}/_msearch", lines)]


def parents_request(parent_ids: Sequence[str], flt: SearchFilter, settings: Settings) -> EsRequest:
    """Fetch parent sections by id under the hard filter (a parent of another tenant is never returned).

    Args:
        parent_ids: Parent chunk ids.
        flt: Hard filter.
        settings: Gives the parent index.
    """
    body = {
        "size": len(parent_ids),
        "query": {"bool": {"filter": [{"ids": {"values": list(parent_ids)}}, *flt.to_es()]}},
    }
    return EsRequest("POST", f"{settings.parent_index}/_search", body)


def count_request(flt: SearchFilter | None, settings: Settings) -> EsRequest:
    """Count child chunks, under the hard filter when one is given.

    Args:
        flt: Hard filter, or None to count every tenant's chunks (admin use).
        settings: Gives the chunk index.
    """
    query: dict[str, Any] = {"bool": {"filter": flt.to_es()}} if flt is not None else {"match_all": {}}
    return EsRequest("POST", f"{settings.chunk_index}/_count", {"query": query})


def neighbors_request(anchors: Sequence[Any], flt: SearchFilter, settings: Settings, *, window: int) -> EsRequest:
    """Adjacent children of each anchor chunk, under the hard filter: one ``_msearch`` with two
    searches per anchor (``window`` children before it, sorted by ``start_offset`` descending, and
    ``window`` after it, ascending), restricted to the anchor's source, version and parent section.

    Args:
        anchors: Selected hits (anything with ``source_id``, ``source_version``, ``parent_id`` and
            ``start_offset``).
        flt: Hard filter (a neighbour of another tenant or ACL is never returned).
        settings: Gives the chunk index.
        window: Children per side.
    """
    lines: list[dict[str, Any]] = []
    for a in anchors:
        same: list[dict[str, Any]] = [{"term": {"source_id": a.source_id}}]
        if a.source_version is not None:
            same.append({"term": {"source_version": a.source_version}})
        if a.parent_id is not None:
            same.append({"term": {"parent_id": a.parent_id}})
        for op, order in (("lt", "desc"), ("gt", "asc")):
            body = {
                "size": window,
                "query": {"bool": {"filter": [*same, {"range": {"start_offset": {op: a.start_offset}}}, *flt.to_es()]}},
                "sort": [{"start_offset": {"order": order}}],
                "_source": {"excludes": ["vector"]},
            }
            lines.extend([{"index": settings.chunk_index}, body])
    return EsRequest("POST", "_msearch", lines)
