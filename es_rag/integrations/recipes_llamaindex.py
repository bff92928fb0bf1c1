"""LlamaIndex's default RAG recipe for :mod:`es_rag.integrations.recipes`: ``SentenceSplitter`` (1024 tiktoken
tokens, 20 overlap) into a ``VectorStoreIndex`` over es_rag's own embedder (:class:`EsRagEmbedding`), searched with
``as_retriever(similarity_top_k=k)`` (``pip install 'es-rag[recipes]'``).

The splitter counts ``cl100k_base`` tokens with tiktoken; llama-index-core ships that encoding's file and points
tiktoken's cache at it, so nothing is downloaded."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from es_rag.integrations.recipes_common import checked_chunk, missing_framework
from es_rag.records import Hit

try:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.schema import Document, MetadataMode, TextNode
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - needs an environment without the package
    raise missing_framework("llama-index-core", exc) from exc

if TYPE_CHECKING:
    from es_rag.ingest import SourceDoc

__all__ = ["CHUNK_OVERLAP", "CHUNK_SIZE", "EsRagEmbedding", "LlamaIndexIndex", "split_documents"]

CHUNK_SIZE = 1024
"""Tokens per chunk: ``SentenceSplitter``'s default."""
CHUNK_OVERLAP = 20
"""Tokens of overlap: ``SentenceSplitter``'s default."""
SPLITTER = "LlamaIndex SentenceSplitter"
SOURCE_KEY = "source_id"


class EsRagEmbedding(BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` over an es_rag embedder (:func:`es_rag.wiring.build_embedder`): the same model,
    vectors and normalisation as the es_rag index.

    Args:
        embedder: An es_rag embedder (``embed_documents(list[str]) -> array``, ``embed_query(str) -> array``).
        **kwargs: ``BaseEmbedding``'s own fields (``embed_batch_size``; default 64).
    """

    _embedder: Any = PrivateAttr()

    def __init__(self, embedder: Any, **kwargs: Any) -> None:
        kwargs.setdefault("embed_batch_size", 64)
        kwargs.setdefault("model_name", str(getattr(embedder, "name", "es_rag")))
        super().__init__(**kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        """The class's name in LlamaIndex's serialisation."""
        return "EsRagEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        row: list[float] = np.asarray(self._embedder.embed_query(query), dtype=np.float64).tolist()
        return row

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        rows: list[list[float]] = np.asarray(self._embedder.embed_documents(list(texts)), dtype=np.float64).tolist()
        return rows


def _document(doc: SourceDoc) -> Document:
    # The source id rides along for the offsets check but stays out of the embedded and the LLM text (the other
    # recipes embed and stuff the chunk text alone).
    return Document(
        text=doc.text,
        id_=doc.source_id,
        metadata={SOURCE_KEY: doc.source_id},
        excluded_embed_metadata_keys=[SOURCE_KEY],
        excluded_llm_metadata_keys=[SOURCE_KEY],
    )


def split_documents(docs: Sequence[SourceDoc]) -> tuple[list[Hit], list[TextNode]]:
    """Every document split by the recipe's splitter, each node checked against its source text: the hits and the
    nodes (same order, ``node.id_`` = the hit's ``chunk_id``).

    Args:
        docs: The corpus (es_rag's reading of the folder).

    Raises:
        InputError: A node without offsets, or whose ``start_char_idx``/``end_char_idx`` do not give back its text
            (naming the document).
    """
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    hits: list[Hit] = []
    nodes: list[TextNode] = []
    for doc in docs:
        for n, node in enumerate(splitter.get_nodes_from_documents([_document(doc)])):
            if not isinstance(node, TextNode):  # pragma: no cover - the sentence splitter makes text nodes
                continue
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            hit = checked_chunk(doc, text, node.start_char_idx, node.end_char_idx, n, SPLITTER)
            node.id_ = hit.chunk_id
            hits.append(hit)
            nodes.append(node)
    return hits, nodes


class LlamaIndexIndex:
    """The recipe's index: the nodes of :func:`split_documents` in a ``VectorStoreIndex`` over
    :class:`EsRagEmbedding`.

    Args:
        docs: The corpus.
        embedder: es_rag's embedder.
    """

    def __init__(self, docs: Sequence[SourceDoc], embedder: Any) -> None:
        t0 = time.perf_counter()
        self.chunks, nodes = split_documents(docs)
        self._by_id = {h.chunk_id: h for h in self.chunks}
        self.index = VectorStoreIndex(nodes, embed_model=EsRagEmbedding(embedder))
        self._retrievers: dict[int, Any] = {}
        self.build_s = time.perf_counter() - t0

    def search(self, question: str, k: int) -> list[Hit]:
        """``index.as_retriever(similarity_top_k=k).retrieve(question)``: the top ``k`` nodes, best first.

        Args:
            question: The question.
            k: ``similarity_top_k``.
        """
        retriever = self._retrievers.get(k)
        if retriever is None:
            retriever = self._retrievers[k] = self.index.as_retriever(similarity_top_k=k)
        return [self._by_id[found.node.node_id] for found in retriever.retrieve(question)]
