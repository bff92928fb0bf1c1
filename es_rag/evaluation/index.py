"""The evaluation index: a BEIR corpus embedded (through the on-disk cache) and indexed for an evaluation run.

By default each corpus document is one retrieval unit (BEIR protocol); its vector embeds ``title + " " + text``
(:func:`build_index`). With a chunked :class:`ChunkUnit` (``fixed``, ``recursive``, ``structure``) each
document's text is cut by es_rag's own chunker, each chunk embeds ``title + " " + chunk`` and keeps its lineage
(source id, offsets, chunker version) (:func:`build_chunk_index`). :func:`build_es_index` writes either to a
live cluster the way ``es-rag ingest`` does.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.encoders.cache import EmbeddingCache, default_cache_dir
from es_rag.errors import ConfigError
from es_rag.progress import terminal
from es_rag.records import Chunk, Hit
from es_rag.settings import Settings

EVAL_TENANT = "eval"
CHUNKER_VERSION = "whole-doc"
SOURCE_VERSION = "1"


def bm25_description(settings: Settings) -> str:
    """One line naming the BM25 set-up of ``settings`` (run records and report paths).

    Args:
        settings: Settings.
    """
    return (
        f"multi_match best_fields {list(settings.retrieve.bm25_fields)} "
        f"tie_breaker={settings.retrieve.bm25_tie_breaker} "
        f"analyzer={settings.index.analyzer.value} k1={settings.index.bm25_k1} b={settings.index.bm25_b}"
    )


@dataclass
class EvalIndex:
    """An index of a BEIR corpus (one chunk per document) and the embedder that built it.

    ``backend`` is the embedded backend (:func:`build_index`) or an Elasticsearch backend the corpus was
    written to (:func:`build_es_index`); ``chunks`` are the indexed chunks with their vectors.
    """

    backend: Any
    embedder: Any
    ids: list[str]
    paths: dict[str, str]
    embed_seconds: float
    chunks: list[Chunk]

    def hits(self) -> list[Hit]:
        """Every document as a hit (for passage texts)."""
        return list(self.backend.all_hits())


def build_index(
    corpus: dict[str, dict[str, str]],
    settings: Settings,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    embedder: Any = None,
) -> EvalIndex:
    """Embed (through the on-disk cache) and index ``corpus`` in an in-memory embedded backend.

    The backend uses the analyzer, BM25 fields and tie_breaker of ``settings``.

    Args:
        corpus: Doc id -> ``{"title", "text"}``.
        settings: Embedding model and BM25 configuration.
        cache_dir: Embedding cache root (default: ``~/.cache/es_rag/embeddings``).
        progress: Show the encoding progress bar.
        embedder: A ready embedder (default: the settings' sentence-transformers model).
    """
    if embedder is None:
        from es_rag.encoders.embedder import make_embedder

        embedder = make_embedder(
            settings.encoder.model,
            batch_size=64,
            device=settings.encoder.device,
            precision=settings.encoder.precision,
            show_progress=progress and terminal(),  # its own bar redraws with \r: a terminal only
        )
        embedder.warm_up()
    cache = EmbeddingCache(Path(cache_dir) if cache_dir else default_cache_dir() / "embeddings", embedder.version)
    ids = list(corpus)
    texts = [(corpus[d]["title"] + " " + corpus[d]["text"]).strip() for d in ids]
    t0 = time.perf_counter()
    matrix, encoded = cache.embed(texts, embedder.embed_documents)
    embed_s = time.perf_counter() - t0
    backend = EmbeddedBackend(
        None,
        dims=int(matrix.shape[1]) if len(ids) else None,
        analyzer=settings.index.analyzer,
        bm25_fields=settings.retrieve.bm25_fields,
        tie_breaker=settings.retrieve.bm25_tie_breaker,
        bm25_k1=settings.index.bm25_k1,
        bm25_b=settings.index.bm25_b,
        similarity=settings.index.similarity,
        languages=settings.index.languages,
    )
    chunks = [
        Chunk(
            chunk_id=d,
            source_id=d,
            source_version=SOURCE_VERSION,
            parent_id=None,
            heading_path=(),
            start_offset=0,
            end_offset=len(corpus[d]["text"]),
            chunker_version=CHUNKER_VERSION,
            tenant_id=EVAL_TENANT,
            acl=("public",),
            title=corpus[d]["title"],
            text=corpus[d]["text"] or corpus[d]["title"] or " ",
            token_count=0,
            vector=matrix[i],
            embedding_version=embedder.version,
        )
        for i, d in enumerate(ids)
    ]
    report = backend.index(chunks)
    paths = {
        "backend": "embedded",
        "embedding": embedder.version,
        "embedding_cache": f"{encoded} encoded, {len(ids) - encoded} from cache ({cache.root})",
        "bm25": f"{bm25_description(settings)} (embedded mirror)",
    }
    if report.failed:
        paths["index_failures"] = f"{len(report.failed)} documents failed: {report.failed[:3]}"
    return EvalIndex(backend=backend, embedder=embedder, ids=ids, paths=paths, embed_seconds=embed_s, chunks=chunks)


def _installed_bm25(backend: Any, settings: Settings) -> dict[str, Any]:
    """The analyzer and BM25 similarity the chunk index was created with (``GET <index>/_settings``)."""
    from es_rag.es_request import EsRequest

    body = backend.send(EsRequest("GET", f"{settings.chunk_index}/_settings"))
    index_settings = next(iter(body.values()))["settings"]["index"] if body else {}
    similarity = index_settings.get("similarity", {}).get("default", {})
    analyzer = index_settings.get("analysis", {}).get("analyzer", {}).get("es_rag_text", {}).get("type")
    return {
        "analyzer": analyzer,
        "k1": float(similarity["k1"]) if "k1" in similarity else 1.2,
        "b": float(similarity["b"]) if "b" in similarity else 0.75,
    }


def build_es_index(
    corpus: dict[str, dict[str, str]],
    settings: Settings,
    backend: Any,
    *,
    unit: ChunkUnit | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    embedder: Any = None,
) -> EvalIndex:
    """Write ``corpus`` to a live cluster the way ``es-rag ingest`` does and return it as an :class:`EvalIndex`.

    The chunks and vectors are the ones :func:`build_index` makes (same embedding cache); ``setup`` installs
    the assets and creates the indices when absent; the sources are switched in through the version
    registry (begin, bulk through the ingest pipeline, refresh, commit), so every retriever's version snapshot
    serves them.

    Args:
        corpus: Doc id -> ``{"title", "text"}``.
        settings: Index prefix, analyzer, BM25 k1/b, embedding model.
        backend: A connected :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend`.
        unit: Retrieval unit (default: the whole document); chunks are cut as :func:`build_chunk_index` does.
        cache_dir: Embedding cache root.
        progress: Show the encoding progress bar.
        embedder: A ready embedder (default: the settings' model).

    Raises:
        ConfigError: The chunk index exists with another analyzer or BM25 k1/b than ``settings`` (similarity
            and analysis are fixed when an index is created: use another ``--index-prefix``).
        ClusterError: A document failed to index (every failure is listed).
    """
    from es_rag.errors import ClusterError

    local: EvalIndex
    if unit is not None and unit.chunked:
        local = build_chunk_index(corpus, settings, unit, cache_dir=cache_dir, progress=progress, embedder=embedder)
    else:
        local = build_index(corpus, settings, cache_dir=cache_dir, progress=progress, embedder=embedder)
    backend.settings = settings
    backend.setup(create_indices=True)
    installed = _installed_bm25(backend, settings)
    wanted = {
        "analyzer": settings.index.analyzer.value,
        "k1": float(settings.index.bm25_k1),
        "b": float(settings.index.bm25_b),
    }
    if installed != wanted:
        raise ConfigError(
            f"index {settings.chunk_index} was created with analyzer={installed['analyzer']} k1={installed['k1']} "
            f"b={installed['b']}, the evaluation asks for analyzer={wanted['analyzer']} k1={wanted['k1']} "
            f"b={wanted['b']}; analysis and similarity are fixed at index creation: use another --index-prefix "
            "(or delete that index)"
        )
    store = backend.version_store()
    pairs = sorted({(c.source_id, c.source_version) for c in local.chunks})
    store.begin(EVAL_TENANT, pairs)
    report = backend.index(local.chunks)
    if report.failed:
        raise ClusterError(f"{len(report.failed)} of {len(local.chunks)} documents failed to index: {report.failed}")
    store.refresh()
    store.commit(EVAL_TENANT, pairs)
    paths = dict(local.paths)
    paths["backend"] = f"elasticsearch (index {settings.chunk_index}, {len(local.chunks)} chunks written)"
    paths["bm25"] = f"{bm25_description(settings)} (elasticsearch, similarity as installed)"
    return dataclasses.replace(local, backend=backend, paths=paths)


UNIT_STRATEGIES = ("document", "fixed", "recursive", "structure")
"""Retrieval units of :func:`~es_rag.evaluation.run.evaluate`: the whole document (BEIR protocol) or chunks of
one es_rag chunker."""


@dataclass(frozen=True)
class ChunkUnit:
    """The retrieval unit of an evaluation run.

    Args:
        strategy: ``document`` (one unit per corpus document) or the es_rag chunker (``fixed``,
            ``recursive``, ``structure``) that cuts each document's text into chunks.
        max_tokens: Largest chunk in the embedding model's tokens (ignored for ``document``).
        overlap: Overlap in tokens (``fixed``: between windows; ``recursive``: trailing pieces repeated;
            ``structure``: only inside a sentence cut into token windows); ignored for ``document``.
    """

    strategy: str = "document"
    max_tokens: int = 200
    overlap: int = 0

    def __post_init__(self) -> None:
        if self.strategy not in UNIT_STRATEGIES:
            raise ConfigError(f"unit: invalid value {self.strategy!r}; valid values: {', '.join(UNIT_STRATEGIES)}")
        if self.chunked and not 0 <= self.overlap < self.max_tokens:
            raise ConfigError(f"unit overlap ({self.overlap}) must be >= 0 and < max_tokens ({self.max_tokens})")

    @property
    def chunked(self) -> bool:
        """Whether documents are cut into chunks (anything but ``document``)."""
        return self.strategy != "document"

    @property
    def label(self) -> str:
        """Short name, e.g. ``fixed L128 O0`` or ``document``."""
        return f"{self.strategy} L{self.max_tokens} O{self.overlap}" if self.chunked else "document"


@dataclass
class ChunkedEvalIndex(EvalIndex):
    """An embedded index of a BEIR corpus cut into chunks; ``ids`` are chunk ids.

    ``source_of`` maps every chunk id to its BEIR document id (the unit qrels judge); ``stats`` is what
    ``stages.chunking`` reports (sizes, index size, embedding cost).
    """

    unit: ChunkUnit
    chunker_version: str
    source_of: dict[str, str]
    documents: int
    stats: dict[str, Any]


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p95": 0.0}
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(arr.mean()), 2), "p95": round(float(np.percentile(arr, 95)), 2)}


def build_chunk_index(
    corpus: dict[str, dict[str, str]],
    settings: Settings,
    unit: ChunkUnit,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    embedder: Any = None,
) -> ChunkedEvalIndex:
    """Cut every document's text into chunks with es_rag's own chunker, embed and index them.

    Each chunk keeps its lineage: ``chunk_id`` (the chunker's stable id), ``source_id`` = the BEIR doc id,
    ``title`` = the doc title, ``start_offset``/``end_offset`` into the doc text and ``chunker_version``.
    Its vector embeds ``title + " " + chunk text`` through the on-disk :class:`EmbeddingCache`, so a rerun
    encodes nothing. A document whose text is empty becomes one title-only unit (counted in the stats).
    The backend comes from :func:`build_index` (called on an empty corpus), so both modes share one
    mapping of ``settings`` to the embedded backend (analyzer, BM25 fields and parameters).

    Args:
        corpus: Doc id -> ``{"title", "text"}``.
        settings: Embedding model and BM25 configuration.
        unit: A chunked unit (``fixed``, ``recursive`` or ``structure``).
        cache_dir: Embedding cache root (default: ``~/.cache/es_rag/embeddings``).
        progress: Show the encoding progress bar.
        embedder: A ready embedder (default: the settings' sentence-transformers model).

    Raises:
        ConfigError: ``unit`` is ``document``, or its size exceeds the model's input limit.
    """
    from es_rag.chunking import make_chunker, stable_chunk_id

    if not unit.chunked:
        raise ConfigError("unit: build_chunk_index needs a chunked unit (fixed, recursive, structure); use build_index")
    base = build_index({}, settings, cache_dir=cache_dir, progress=progress, embedder=embedder)
    embedder = base.embedder
    tok = embedder.tokenizer()
    chunker = make_chunker(tok, strategy=unit.strategy, max_tokens=unit.max_tokens, overlap=unit.overlap)
    version = chunker.version
    t0 = time.perf_counter()
    chunks: list[Chunk] = []
    title_only = 0
    doc_tokens = 0
    for d, doc in corpus.items():
        text, title = doc["text"], doc["title"]
        pieces: list[Chunk] = []
        if text.strip():
            doc_tokens += tok.count(text)
            pieces = chunker.chunk(
                text,
                source_id=d,
                source_version=SOURCE_VERSION,
                tenant_id=EVAL_TENANT,
                acl=("public",),
                title=title,
                fmt="plain",
            )
        if not pieces:
            title_only += 1
            pieces = [
                Chunk(
                    chunk_id=stable_chunk_id(d, SOURCE_VERSION, version, "title-only", 0, 0, EVAL_TENANT),
                    source_id=d,
                    source_version=SOURCE_VERSION,
                    parent_id=None,
                    heading_path=(),
                    start_offset=0,
                    end_offset=0,
                    chunker_version=version,
                    tenant_id=EVAL_TENANT,
                    acl=("public",),
                    title=title,
                    text=title or " ",
                    token_count=tok.count(title),
                )
            ]
        chunks.extend(pieces)
    chunk_s = time.perf_counter() - t0
    cache = EmbeddingCache(Path(cache_dir) if cache_dir else default_cache_dir() / "embeddings", embedder.version)
    texts = [(c.title + " " + c.text).strip() for c in chunks]
    t0 = time.perf_counter()
    matrix, encoded = cache.embed(texts, embedder.embed_documents)
    embed_s = time.perf_counter() - t0
    chunks = [
        dataclasses.replace(c, vector=matrix[i], embedding_version=embedder.version) for i, c in enumerate(chunks)
    ]
    report = base.backend.index(chunks)
    embed_tokens = [tok.count(t) for t in texts]
    limit = tok.max_tokens
    per_doc = Counter(c.source_id for c in chunks)
    chunk_tokens = [c.token_count for c in chunks]
    stats: dict[str, Any] = {
        "chunks": len(chunks),
        "documents": len(corpus),
        "title_only_documents": title_only,
        "chunks_per_document": {
            "mean": round(len(chunks) / len(corpus), 3) if corpus else 0.0,
            "max": max(per_doc.values(), default=0),
        },
        "tokens_per_chunk": _stats(chunk_tokens),
        "indexed_token_ratio": round(sum(chunk_tokens) / doc_tokens, 4) if doc_tokens else None,
        "index": {"chunks": len(chunks), "vector_bytes": int(matrix.nbytes)},
        "embed_seconds": round(embed_s, 2),
        "embed_tokens": int(sum(min(n, limit) if limit else n for n in embed_tokens)),
        "embedded_over_limit": sum(1 for n in embed_tokens if limit is not None and n > limit),
        "encoded": encoded,
        "from_cache": len(texts) - encoded,
        "chunk_seconds": round(chunk_s, 2),
    }
    paths = dict(base.paths)
    paths["embedding_cache"] = f"{encoded} encoded, {len(texts) - encoded} from cache ({cache.root})"
    paths["unit"] = (
        f"{unit.label} chunks ({version}); each chunk is ranked, mapped to its source document, and a document "
        "keeps the rank of its best chunk (max-pooling); candidate depth is counted in chunks"
    )
    if report.failed:
        paths["index_failures"] = f"{len(report.failed)} chunks failed: {report.failed[:3]}"
    return ChunkedEvalIndex(
        backend=base.backend,
        embedder=embedder,
        ids=[c.chunk_id for c in chunks],
        paths=paths,
        embed_seconds=embed_s,
        chunks=chunks,
        unit=unit,
        chunker_version=version,
        source_of={c.chunk_id: c.source_id for c in chunks},
        documents=len(corpus),
        stats=stats,
    )
