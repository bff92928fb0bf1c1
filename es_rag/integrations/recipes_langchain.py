"""LangChain's common RAG recipe for :mod:`es_rag.integrations.recipes`: ``RecursiveCharacterTextSplitter``
(1000 characters, 200 overlap, ``add_start_index``) into an ``InMemoryVectorStore`` over es_rag's own embedder
(:class:`EsRagEmbeddings`), searched with ``similarity_search`` (``pip install 'es-rag[recipes]'``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from es_rag.integrations.recipes_common import checked_chunk, missing_framework
from es_rag.records import Hit

try:
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore
except ImportError as exc:  # pragma: no cover - needs an environment without the package
    raise missing_framework("langchain-core", exc) from exc
try:
    from langchain_text_splitters import RecursiveCharacterTextSplitter
except ImportError as exc:  # pragma: no cover - needs an environment without the package
    raise missing_framework("langchain-text-splitters", exc) from exc

if TYPE_CHECKING:
    from es_rag.ingest import SourceDoc

__all__ = ["CHUNK_OVERLAP", "CHUNK_SIZE", "EsRagEmbeddings", "LangChainIndex", "split_documents"]

CHUNK_SIZE = 1000
"""Characters per chunk of the recipe (LangChain's RAG tutorial)."""
CHUNK_OVERLAP = 200
"""Characters of overlap between neighbouring chunks of the recipe."""
SPLITTER = "LangChain RecursiveCharacterTextSplitter"


class EsRagEmbeddings(Embeddings):
    """A LangChain ``Embeddings`` over an es_rag embedder (:func:`es_rag.wiring.build_embedder`): the same model,
    vectors and normalisation as the es_rag index.

    Args:
        embedder: An es_rag embedder (``embed_documents(list[str]) -> array``, ``embed_query(str) -> array``).
    """

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages (unit vectors).

        Args:
            texts: The passages.
        """
        if not texts:
            return []
        rows: list[list[float]] = np.asarray(self._embedder.embed_documents(list(texts)), dtype=np.float64).tolist()
        return rows

    def embed_query(self, text: str) -> list[float]:
        """Embed a query (unit vector).

        Args:
            text: The query.
        """
        row: list[float] = np.asarray(self._embedder.embed_query(text), dtype=np.float64).tolist()
        return row


def split_documents(docs: Sequence[SourceDoc]) -> list[Hit]:
    """Every document split by the recipe's splitter, each chunk checked against its source text.

    Args:
        docs: The corpus (es_rag's reading of the folder).

    Raises:
        InputError: A chunk whose ``start_index`` does not give back its text (naming the document).
    """
    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, add_start_index=True)
    out: list[Hit] = []
    for doc in docs:
        pieces = splitter.split_documents([Document(page_content=doc.text, metadata={"source": doc.source_id})])
        for n, piece in enumerate(pieces):
            start = piece.metadata.get("start_index")
            end = start + len(piece.page_content) if isinstance(start, int) else None
            out.append(checked_chunk(doc, piece.page_content, start, end, n, SPLITTER))
    return out


class LangChainIndex:
    """The recipe's index: the chunks of :func:`split_documents` in an ``InMemoryVectorStore`` (cosine similarity)
    over :class:`EsRagEmbeddings`.

    Args:
        docs: The corpus.
        embedder: es_rag's embedder.
    """

    def __init__(self, docs: Sequence[SourceDoc], embedder: Any) -> None:
        t0 = time.perf_counter()
        self.chunks = split_documents(docs)
        self._by_id = {h.chunk_id: h for h in self.chunks}
        self.store = InMemoryVectorStore(EsRagEmbeddings(embedder))
        documents = [
            Document(page_content=h.text, metadata={"source": h.source_id, "start_index": h.start_offset})
            for h in self.chunks
        ]
        if documents:
            self.store.add_documents(documents, ids=[h.chunk_id for h in self.chunks])
        self.build_s = time.perf_counter() - t0

    def search(self, question: str, k: int) -> list[Hit]:
        """``similarity_search(question, k)``: the top ``k`` chunks, best first.

        Args:
            question: The question.
            k: How many chunks.
        """
        return [self._by_id[str(d.id)] for d in self.store.similarity_search(question, k=k)]
