"""``make_chunker``: the chunker of a strategy (:mod:`es_rag.chunking.chunkers`, and the ``semantic`` one of
:mod:`es_rag.chunking.semantic`, which builds on them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from es_rag.chunking.chunkers import Chunker, FixedTokenChunker, RecursiveChunker, Strategy, StructureChunker
from es_rag.chunking.semantic import SemanticChunker
from es_rag.encoders.tokenizer import Tokenizer
from es_rag.errors import ConfigError


def make_chunker(
    tokenizer: Tokenizer,
    *,
    strategy: str | Strategy = Strategy.PARENT_CHILD,
    max_tokens: int = 200,
    overlap: int = 30,
    contextual: bool = False,
    parent_max_tokens: int | None = None,
    embed: Callable[[list[str]], Any] | None = None,
    embed_version: str | None = None,
    breakpoint_percentile: float = 95.0,
) -> Chunker:
    """The chunker of ``strategy`` with the given sizes.

    Args:
        tokenizer: The embedding model's tokenizer.
        strategy: ``fixed``, ``recursive``, ``structure``, ``parent-child`` or ``semantic``.
        max_tokens: Largest child in tokens (L).
        overlap: Overlap in tokens (O).
        contextual: Embed ``title + heading path`` with each child.
        parent_max_tokens: Parent size cap (``parent-child`` and ``semantic``).
        embed: ``semantic`` only: the embedding model's document encoder (texts -> unit rows), which places the
            boundaries; ignored by the other strategies.
        embed_version: ``semantic`` only: that model's version (it enters ``chunker_version``).
        breakpoint_percentile: ``semantic`` only: a child starts where the distance between neighbouring sentences
            is at or above this percentile of the document's distances.

    Raises:
        ConfigError: An unknown strategy, bad sizes, or ``semantic`` without ``embed`` and ``embed_version``.
    """
    strat = Strategy.parse(strategy)
    if strat is Strategy.SEMANTIC:
        if embed is None or embed_version is None:
            raise ConfigError(
                "strategy semantic: places its boundaries with the embedding model's vectors, so it needs embed= "
                "and embed_version= (es-rag ingest and RagClient.ingest pass the model's own)"
            )
        return SemanticChunker(
            tokenizer,
            embed=embed,
            embed_version=embed_version,
            breakpoint_percentile=breakpoint_percentile,
            max_tokens=max_tokens,
            overlap=overlap,
            contextual=contextual,
            parent_max_tokens=parent_max_tokens,
        )
    kw = dict(max_tokens=max_tokens, overlap=overlap, contextual=contextual)
    if strat is Strategy.FIXED:
        return FixedTokenChunker(tokenizer, **kw)  # type: ignore[arg-type]
    if strat is Strategy.RECURSIVE:
        return RecursiveChunker(tokenizer, **kw)  # type: ignore[arg-type]
    return StructureChunker(
        tokenizer,
        max_tokens=max_tokens,
        overlap=overlap,
        contextual=contextual,
        parents=strat is Strategy.PARENT_CHILD,
        parent_max_tokens=parent_max_tokens,
    )
