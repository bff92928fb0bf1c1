"""Pure builders of every search body es_rag sends (no I/O).

Both fusion paths query the same channels with the same hard filters, the same candidate counts and
the same RRF parameters:

* native: one ``_search`` with an ``rrf`` retriever whose children are a ``standard`` retriever
  (BM25 ``multi_match``) and a ``knn`` retriever, each carrying the filter clauses itself;
* client: one ``_msearch`` with the BM25 search and the kNN search (filters in the bool ``filter``
  and in the kNN ``filter``), fused by :func:`es_rag.fusion.reciprocal_rank_fusion`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from es_rag.config import Settings
from es_rag.filters import SearchFilter
from es_rag.requests import EsRequest

SOURCE_FIELDS = [
    "chunk_id",
    "source_id",
    "source_version",
    "parent_id",
    "heading_path",
    "start_offset",
    "end_offset",
    "chunker_version",
    "embedding_version",
    "tenant_id",
    "acl",
    "title",
    "text",
    "token_count",
    "content_hash",
    "vector",
]
BM25_FIELDS = ["title^2", "heading_path^1.5", "text"]


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


def bm25_query(query_text: str) -> dict[str, Any]:
    """BM25 ``multi_match`` over title, heading path and text.

    Args:
        query_text: The user's query.
    """
    return {"multi_match": {"query": query_text, "fields": list(BM25_FIELDS), "type": "best_fields"}}


def knn_clause(query_vector: Sequence[float] | np.ndarray, flt: SearchFilter, settings: Settings) -> dict[str, Any]:
    """kNN search section with the filter applied during the graph search (never after).

    Args:
        query_vector: The query embedding.
        flt: Hard filter.
        settings: Gives ``candidate_k`` (k) and ``num_candidates``.
    """
    return {
        "field": "vector",
        "query_vector": [float(x) for x in query_vector],
        "k": settings.candidate_k,
        "num_candidates": settings.num_candidates,
        "filter": flt.to_es(),
    }


def native_rrf_body(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    vectors_in_source_param: bool = True,
) -> dict[str, Any]:
    """``_search`` body using the native ``rrf`` retriever (Enterprise/trial licence, ES >= 8.16).

    Without a query vector (embedding failed) the body is a single filtered BM25 ``standard``
    retriever: RRF of one list is that list.

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None for BM25 only.
        flt: Hard filter, placed inside every child retriever.
        settings: Candidate counts and RRF parameters.
        vectors_in_source_param: See :func:`source_spec`.
    """
    standard = {"standard": {"query": bm25_query(query_text), "filter": flt.to_es()}}
    body: dict[str, Any] = {
        "size": settings.candidate_k,
        "_source": source_spec(vectors_in_source_param=vectors_in_source_param),
    }
    if query_vector is None:
        body["retriever"] = standard
        return body
    knn = {"knn": knn_clause(query_vector, flt, settings)}
    weights = settings.channel_weights
    children: list[dict[str, Any]]
    if weights:
        children = [
            {"retriever": standard, "weight": weights.get("bm25", 1.0)},
            {"retriever": knn, "weight": weights.get("dense", 1.0)},
        ]
    else:
        children = [standard, knn]
    body["retriever"] = {
        "rrf": {
            "retrievers": children,
            "rank_constant": settings.rank_constant,
            "rank_window_size": settings.candidate_k,
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
) -> dict[str, dict[str, Any]]:
    """Per-channel ``_search`` bodies of the client-side fusion path, keyed by channel name.

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None for BM25 only.
        flt: Hard filter, placed in every channel.
        settings: Candidate counts.
        vectors_in_source_param: See :func:`source_spec`.
    """
    src = source_spec(vectors_in_source_param=vectors_in_source_param)
    bodies: dict[str, dict[str, Any]] = {
        "bm25": {
            "size": settings.candidate_k,
            "_source": src,
            "query": {"bool": {"must": [bm25_query(query_text)], "filter": flt.to_es()}},
        },
    }
    if query_vector is not None:
        bodies["dense"] = {"size": settings.candidate_k, "_source": src, "knn": knn_clause(query_vector, flt, settings)}
    return bodies


def search_requests(
    query_text: str,
    query_vector: Sequence[float] | np.ndarray | None,
    flt: SearchFilter,
    settings: Settings,
    *,
    native: bool,
    vectors_in_source_param: bool = True,
) -> list[EsRequest]:
    """The request(s) one search sends: one ``_search`` (native) or one ``_msearch`` (client).

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None for BM25 only.
        flt: Hard filter.
        settings: Candidate counts, RRF parameters and index names.
        native: Native ``rrf`` retriever (True) or client-side RRF over ``_msearch`` (False).
        vectors_in_source_param: See :func:`source_spec`.
    """
    index = settings.chunk_index
    if native:
        body = native_rrf_body(query_text, query_vector, flt, settings, vectors_in_source_param=vectors_in_source_param)
        return [EsRequest("POST", f"{index}/_search", body)]
    lines: list[dict[str, Any]] = []
    for body in client_channel_bodies(
        query_text, query_vector, flt, settings, vectors_in_source_param=vectors_in_source_param
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
