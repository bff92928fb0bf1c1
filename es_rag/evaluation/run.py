"""Stage-wise retrieval evaluation on BEIR-layout datasets, with run records and ablations.

Layout: ``corpus*.jsonl`` (read in name order; ``{"_id", "title", "text"}``), ``queries.jsonl``
(``{"_id", "text"}``), ``qrels/<split>.tsv`` (``query-id corpus-id score``, graded, header optional).
By default each corpus document is one retrieval unit (BEIR protocol); its vector embeds ``title + " " + text``.
With a chunked :class:`ChunkUnit` (``fixed``, ``recursive``, ``structure``) each document's text is cut by
es_rag's own chunker, each chunk embeds ``title + " " + chunk`` and keeps its lineage (source id, offsets,
chunker version); ranked chunks are mapped to documents, a document at its best chunk's rank
(:func:`documents_from_chunks`), before the document-level qrels score any stage.

Every query runs through the real :class:`~es_rag.pipeline.RagPipeline` (retrieve -> fusion -> dedup ->
rerank -> select -> pack) with ``candidate_k = depth`` so Recall@200 is measurable; the stages are scored
from its trace with ``ir_measures``:

- ``bm25``, ``dense``: each channel's list; ``union``: recall of the union of both channels' top N;
- ``hybrid``: the fused (RRF) list; ``rerank``: the cross-encoder order of the top ``rerank_k`` followed by
  the fused tail (None when no reranker could be loaded, with the reason in ``paths.rerank``);
- ``selection``: context recall (share of the judged documents that reach the packed context), duplicate
  rate and context tokens; ``chunking``: gold-span coverage when the dataset gives spans;
- latency per stage (p50/p95, ms) from the trace.

:func:`ablate` evaluates variants that change one setting at a time on the same corpus and queries;
:func:`es_rag.evaluation.ladder.ladder` runs the eight cumulative steps from fixed chunks to context selection.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.encoders.cache import EmbeddingCache, default_cache_dir
from es_rag.errors import ConfigError, InputError
from es_rag.filters import SearchFilter
from es_rag.records import Chunk, Hit
from es_rag.settings import Settings

EVAL_TENANT = "eval"
DEPTH = 200
RECALL_DEPTHS = (10, 50, 100, 200)
CHUNKER_VERSION = "whole-doc"
SOURCE_VERSION = "1"

BM25_PROTOCOLS: dict[str, dict[str, Any]] = {
    "beir-multifield": {
        "analyzer": "english",
        "bm25_fields": ("title", "text"),
        "bm25_tie_breaker": 1.0,
        "bm25_k1": 0.9,
        "bm25_b": 0.4,
    },
    "beir-es": {
        "analyzer": "english",
        "bm25_fields": ("title", "text"),
        "bm25_tie_breaker": 0.5,
        "bm25_k1": 1.2,
        "bm25_b": 0.75,
    },
}
"""BM25 set-ups of published BEIR baselines, as es_rag settings.

- ``beir-multifield``: the Anserini/Pyserini "multifield" BM25 regression that reproduces BEIR's published
  BM25 table (SciFact nDCG@10 0.6647 vs the paper's 0.665): Lucene BM25 with k1 0.9 and b 0.4, title and
  text as separate fields queried with equal weight and summed (``tie_breaker`` 1.0 makes Elasticsearch's
  ``best_fields`` the sum, i.e. ``most_fields``), English analysis (Porter stemming, stop words).
- ``beir-es``: the Elasticsearch code shipped in the ``beir`` package (``multi_match`` ``best_fields``
  over title and text, ``tie_breaker`` 0.5, ``english`` analyzer, Elasticsearch's default k1 1.2 / b 0.75).
  It does not reproduce the paper's number: run on Elasticsearch 7.17 it gives SciFact 0.6906
  (beir-cellar/beir#143).

``settings`` (no entry here) keeps the product's own settings.
"""


def apply_bm25_protocol(settings: Settings, protocol: str) -> Settings:
    """``settings`` with the analyzer, BM25 fields, tie_breaker and k1/b of a :data:`BM25_PROTOCOLS` entry.

    Args:
        settings: Base settings (every other field is kept).
        protocol: A :data:`BM25_PROTOCOLS` name, or ``settings`` to keep ``settings`` unchanged.
    """
    if protocol == "settings":
        return settings
    if protocol not in BM25_PROTOCOLS:
        raise ConfigError(f"bm25 protocol: unknown {protocol!r}; valid: {', '.join([*BM25_PROTOCOLS, 'settings'])}")
    return settings.replace(**BM25_PROTOCOLS[protocol])


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


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{n}", "json", f"malformed JSON: {exc.msg}") from None
            if not isinstance(row, dict) or "_id" not in row:
                raise InputError(f"{path}:{n}", "_id", "missing")
            rows.append(row)
    return rows


def load_beir(
    directory: str | Path, split: str
) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    """Corpus, the split's queries and its graded qrels.

    Args:
        directory: Dataset folder.
        split: Qrels split name (``qrels/<split>.tsv``).
    """
    root = Path(directory)
    files = sorted(root.glob("corpus*.jsonl"))
    if not files:
        raise InputError(str(root), "corpus", "no corpus*.jsonl file")
    corpus = {}
    for f in files:
        for row in _read_jsonl(f):
            corpus[str(row["_id"])] = {"title": str(row.get("title") or ""), "text": str(row.get("text") or "")}
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise InputError(str(qrels_path), "split", f"no qrels for split {split!r}")
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate(qrels_path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split("\t")
        if not line.strip() or (n == 1 and not parts[-1].strip().lstrip("-").isdigit()):
            continue
        if len(parts) < 3:
            raise InputError(f"{qrels_path}:{n}", "qrels", "expected query-id, corpus-id, score")
        qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    all_queries = {str(r["_id"]): str(r.get("text", "")) for r in _read_jsonl(root / "queries.jsonl")}
    missing = [q for q in qrels if q not in all_queries]
    if missing:
        raise InputError(str(root / "queries.jsonl"), "_id", f"{len(missing)} qrels queries missing, e.g. {missing[0]}")
    queries = {q: all_queries[q] for q in qrels}
    return corpus, queries, qrels


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0}
    arr = np.asarray(values)
    return {"p50": round(float(np.percentile(arr, 50)), 3), "p95": round(float(np.percentile(arr, 95)), 3)}


def _measures(depths: Sequence[int]) -> dict[str, Any]:
    from ir_measures import RR, R, nDCG

    out: dict[str, Any] = {"ndcg@10": nDCG @ 10, "mrr@10": RR @ 10}
    for n in depths:
        out[f"recall@{n}"] = R @ n
    return out


def metrics(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], depths: Sequence[int] = RECALL_DEPTHS
) -> dict[str, float]:
    """nDCG@10, MRR@10 (RR@10) and Recall@N of ``run``, averaged over every judged query (ir_measures).

    Queries without any retrieved document count as 0 (they are added to the run as empty).

    Args:
        qrels: Query id -> doc id -> grade.
        run: Query id -> doc id -> score (higher = better).
        depths: Recall cut-offs.
    """
    import ir_measures

    named = _measures(depths)
    per_query: dict[str, dict[str, float]] = {name: {} for name in named}
    inverse = {str(m): name for name, m in named.items()}
    for row in ir_measures.iter_calc(list(named.values()), qrels, run):
        per_query[inverse[str(row.measure)]][row.query_id] = float(row.value)
    n = len([q for q in qrels if any(g > 0 for g in qrels[q].values())]) or 1
    return {name: round(sum(vals.values()) / n, 4) for name, vals in per_query.items()}


def _recall_full(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], cutoff: int) -> float:
    import ir_measures
    from ir_measures import R

    n = len([q for q in qrels if any(g > 0 for g in qrels[q].values())]) or 1
    return round(sum(float(r.value) for r in ir_measures.iter_calc([R @ cutoff], qrels, run)) / n, 4)


def run_from_ids(ids: Sequence[str]) -> dict[str, float]:
    """Rank-derived scores (first occurrence of an id wins), so ir_measures keeps this order.

    Args:
        ids: Document ids, best first (duplicates allowed; later ones are ignored).
    """
    out: dict[str, float] = {}
    for i, d in enumerate(ids):
        if d not in out:
            out[d] = float(len(ids) - i)
    return out


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
        from es_rag.encoders.embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder(settings.encoder.model, batch_size=64, show_progress=progress)
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
    registry (begin, bulk through the ingest pipeline, refresh, commit), so every retriever's version gate
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
"""Retrieval units of :func:`evaluate`: the whole document (BEIR protocol) or chunks of one es_rag chunker."""


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


def documents_from_chunks(ids: Sequence[str], source_of: Mapping[str, str]) -> list[str]:
    """Document ids of a ranked chunk list, each document at the rank of its best (first) chunk.

    This is max-pooling by rank: a document is as good as its best chunk, later chunks of the same
    document are dropped, so document-level qrels score a chunk ranking.

    Args:
        ids: Chunk ids, best first.
        source_of: Chunk id -> document id.
    """
    out: list[str] = []
    seen: set[str] = set()
    for cid in ids:
        try:
            doc = source_of[cid]
        except KeyError:
            raise InputError(cid, "source_id", "chunk id is not in the evaluated index") from None
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out


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


def _stage(trace: Any, name: str) -> Any:
    for st in trace.stages:
        if st.name == name:
            return st
    return None


def _chunking_stage(
    index: ChunkedEvalIndex,
    qrels: dict[str, dict[str, int]],
    dense_run: dict[str, dict[str, float]],
    channel_ids: dict[str, dict[str, list[str]]],
    depth: int,
) -> dict[str, Any]:
    """``stages.chunking`` of a chunked run: the unit, its sizes and cost, top-10 redundancy per channel and
    dense metrics on the queries whose judged documents were all split (the boundary-query proxy)."""
    unit = index.unit
    dup: dict[str, float] = {}
    for ch, per_query in channel_ids.items():
        rates = [1.0 - len({index.source_of[c] for c in ids[:10]}) / len(ids[:10]) for ids in per_query.values() if ids]
        dup[ch] = round(float(np.mean(rates)) if rates else 0.0, 4)
    per_doc = Counter(index.source_of.values())
    split = {
        q: judged
        for q, judged in qrels.items()
        if any(g > 0 for g in judged.values()) and all(per_doc.get(d, 0) >= 2 for d, g in judged.items() if g > 0)
    }
    boundary: dict[str, Any] = {
        "definition": "queries whose every relevant document is split into >= 2 chunks (the evidence may cross "
        "a chunk boundary); the qrels have no spans, so the queries that really straddle one are unknown",
        "queries": len(split),
        "dense": metrics(split, {q: dense_run.get(q, {}) for q in split}, depths=(10, 100)) if split else None,
    }
    return {
        "unit": f"{unit.label} ({index.chunker_version})",
        "strategy": unit.strategy,
        "max_tokens": unit.max_tokens,
        "overlap": unit.overlap,
        "chunker_version": index.chunker_version,
        **{k: v for k, v in index.stats.items() if k != "chunk_seconds"},
        "duplicate_rate@10": dup,
        "boundary_proxy": boundary,
        "scoring": f"chunks ranked (depth {depth} chunks per channel), mapped to documents; a document keeps "
        "its best chunk's rank (max-pooling), so Recall@N counts the first N distinct documents",
        "gold_span_coverage": None,
        "note": "the dataset gives document-level qrels, no gold spans: coverage of answer spans by chunks "
        "cannot be measured",
    }


def evaluate(
    dataset: str | Path,
    *,
    split: str = "test",
    settings: Settings | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    progress: bool = False,
    depth: int = DEPTH,
    records_path: str | Path | None = None,
    index: EvalIndex | None = None,
    unit: ChunkUnit | None = None,
    es_backend: Any = None,
) -> dict[str, Any]:
    """Run every stage over the split's queries and score each stage.

    With a chunked ``unit`` (or a :class:`ChunkedEvalIndex`) the corpus is indexed as chunks; every ranked
    list is mapped to documents by :func:`documents_from_chunks` (a document keeps its best chunk's rank)
    before the document-level qrels score it, and ``stages.chunking`` reports the unit's sizes and cost.

    Args:
        dataset: BEIR folder.
        split: Qrels split.
        settings: Model names, analyzer/BM25 fields, rank constant, rerank_k, context_k, token budget.
        cache_dir: Embedding cache root (default: ``~/.cache/es_rag``).
        max_queries: Evaluate only the first N queries (in qrels order).
        progress: Show progress bars.
        depth: Candidates per channel (= ``candidate_k`` and RRF window of the evaluated pipeline).
        records_path: When set, one JSON run record per query is written there (JSON Lines).
        index: A prebuilt index of the same corpus (ablations reuse it when the BM25 setup is unchanged).
        unit: Retrieval unit (default: the whole document, BEIR protocol); must match ``index`` when both
            are given.
        es_backend: A connected Elasticsearch backend: the corpus (cut into ``unit``) is written to it
            (:func:`build_es_index`) and every query runs against the cluster, with client-side fusion so
            each channel's list is scored (Elasticsearch's native rrf returns only the fused list; the
            client RRF equals it).
    """
    from es_rag.pipeline import RagPipeline
    from es_rag.wiring import build_reranker

    settings = settings or Settings()
    settings = settings.replace(
        candidate_k=max(depth, settings.rerank.k),
        num_candidates=max(depth, settings.retrieve.num_candidates, settings.rerank.k),
    )
    corpus, queries, qrels = load_beir(dataset, split)
    if max_queries is not None:
        keep = list(queries)[:max_queries]
        queries = {q: queries[q] for q in keep}
        qrels = {q: qrels[q] for q in keep}
    if es_backend is not None:
        settings = settings.replace(fusion_path="client")
    if index is None and es_backend is not None:
        index = build_es_index(corpus, settings, es_backend, unit=unit, cache_dir=cache_dir, progress=progress)
    elif index is None:
        if unit is not None and unit.chunked:
            index = build_chunk_index(corpus, settings, unit, cache_dir=cache_dir, progress=progress)
        else:
            index = build_index(corpus, settings, cache_dir=cache_dir, progress=progress)
    elif unit is not None and unit != (index.unit if isinstance(index, ChunkedEvalIndex) else ChunkUnit()):
        have = index.unit.label if isinstance(index, ChunkedEvalIndex) else "document"
        raise ConfigError(f"unit: the given index holds {have} units, not {unit.label}")
    chunked = index if isinstance(index, ChunkedEvalIndex) else None
    source_of: dict[str, str] = chunked.source_of if chunked is not None else {}

    def docs(ids: Sequence[str]) -> list[str]:
        return documents_from_chunks(ids, source_of) if chunked is not None else list(ids)

    def src(cid: str) -> str:
        return source_of[cid] if chunked is not None else cid

    embedder = index.embedder
    reranker = build_reranker(settings)
    pipeline = RagPipeline(
        index.backend, embedder=embedder, settings=settings, tokenizer=embedder.tokenizer(), reranker=reranker
    )
    flt = SearchFilter(EVAL_TENANT)
    versions = {
        "source_version": SOURCE_VERSION,
        "chunker_version": chunked.chunker_version if chunked is not None else CHUNKER_VERSION,
        "embedding_version": embedder.version,
        "sparse_index_version": index.paths["bm25"],
        "dense_index_version": f"{embedder.version} flat-{settings.index.similarity.value}",
        "reranker": settings.rerank.model or "none",
    }
    runs: dict[str, dict[str, dict[str, float]]] = {k: {} for k in ("bm25", "dense", "hybrid", "rerank", "context")}
    channel_ids: dict[str, dict[str, list[str]]] = {"bm25": {}, "dense": {}}
    lat: dict[str, list[float]] = {}
    tokens: list[int] = []
    dup_rates: list[float] = []
    rerank_path = "disabled"
    records = open(records_path, "w", encoding="utf-8") if records_path else None
    try:
        for qid, qtext in tqdm(queries.items(), desc="eval", unit="q", disable=not progress):
            result = pipeline.search(qtext, flt)
            trace = result.trace
            for st in trace.stages:
                lat.setdefault(st.name, []).append(st.ms)
            retrieve = _stage(trace, "retrieve")
            for ch, took in retrieve.info.get("took_ms", {}).items():
                lat.setdefault(f"retrieve.{ch}", []).append(float(took))
            channels = {ch: [c["id"] for c in rows] for ch, rows in retrieve.info["channels"].items()}
            for ch in ("bm25", "dense"):
                ids = channels.get(ch, [])
                channel_ids[ch][qid] = ids
                runs[ch][qid] = run_from_ids(docs(ids))
            fused = [f["id"] for f in _stage(trace, "fusion").info["fused"]]
            runs["hybrid"][qid] = run_from_ids(docs(fused))
            rerank_path = trace.paths.get("rerank", rerank_path)
            reranked = rerank_path.startswith("cross-encoder")
            head = [h.chunk_id for h in result.candidates]
            if reranked:
                runs["rerank"][qid] = run_from_ids(docs([*head, *fused]))
            packed = [c.chunk_id for c in result.context.citations]
            runs["context"][qid] = run_from_ids(docs(packed))
            tokens.append(result.context.tokens)
            sources = [c.source_id for c in result.context.citations]
            dup_rates.append(1.0 - len(set(sources)) / len(sources) if sources else 0.0)
            if records is not None:
                record = {
                    "query_id": qid,
                    "versions": versions,
                    "channels": {
                        ch: [{"id": d, "rank": r, "source_id": src(d)} for r, d in enumerate(ids, 1)]
                        for ch, ids in channels.items()
                    },
                    "fused": [{"id": d, "rank": r, "source_id": src(d)} for r, d in enumerate(fused, 1)],
                    "reranker_scores": (
                        [
                            {"id": h.chunk_id, "source_id": h.source_id, "score": h.semantic_score}
                            for h in result.candidates
                        ]
                        if reranked
                        else None
                    ),
                    "selected": packed,
                    "selected_sources": sources,
                    "excluded": [
                        {"stage": st.name, **d} for st in trace.stages for d in st.dropped if st.name != "rerank"
                    ],
                    "paths": dict(trace.paths),
                    "relevant": sorted(d for d, g in qrels[qid].items() if g > 0),
                }
                records.write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        if records is not None:
            records.close()
    stages: dict[str, Any] = {}
    for name in ("bm25", "dense"):
        stages[name] = metrics(qrels, runs[name])
    stages["union"] = {
        f"recall@{n}": _recall_full(
            qrels,
            {q: run_from_ids([*docs(channel_ids["bm25"][q][:n]), *docs(channel_ids["dense"][q][:n])]) for q in queries},
            2 * n,
        )
        for n in RECALL_DEPTHS
    }
    stages["hybrid"] = metrics(qrels, runs["hybrid"])
    stages["rerank"] = metrics(qrels, runs["rerank"]) if runs["rerank"] else None
    stages["selection"] = {
        "context_recall": _recall_full(qrels, runs["context"], max(1, settings.select.context_k)),
        "duplicate_rate": round(float(np.mean(dup_rates)) if dup_rates else 0.0, 4),
        "context_tokens": {"mean": round(float(np.mean(tokens)) if tokens else 0.0, 1), **_percentiles(tokens)},
        "context_k": settings.select.context_k,
        "token_budget": settings.pack.token_budget,
    }
    if chunked is None:
        stages["chunking"] = {
            "unit": "whole document (BEIR protocol)",
            "gold_span_coverage": None,
            "note": "the dataset gives document-level qrels, no gold spans",
        }
    else:
        stages["chunking"] = _chunking_stage(chunked, qrels, runs["dense"], channel_ids, depth)
    paths = dict(index.paths)
    paths["fusion"] = f"client-rrf (rank_constant={settings.fusion.rank_constant}, rank_window_size={depth})"
    paths["rerank"] = rerank_path if reranker is not None else "disabled"
    return {
        "dataset": str(dataset),
        "split": split,
        "queries": len(queries),
        "documents": chunked.documents if chunked is not None else len(index.ids),
        "stages": stages,
        "paths": paths,
        "versions": versions,
        "latency_ms": {k: _percentiles(v) for k, v in lat.items() if v},
        "timing_s": {"embed_corpus": round(index.embed_seconds, 2)}
        | ({"chunk_corpus": chunked.stats["chunk_seconds"]} if chunked is not None else {}),
        "settings": {
            "embedding_model": settings.encoder.model,
            "rerank_model": settings.rerank.model,
            "analyzer": settings.index.analyzer.value,
            "bm25_fields": list(settings.retrieve.bm25_fields),
            "bm25_tie_breaker": settings.retrieve.bm25_tie_breaker,
            "bm25_k1": settings.index.bm25_k1,
            "bm25_b": settings.index.bm25_b,
            "rank_constant": settings.fusion.rank_constant,
            "rerank_k": settings.rerank.k,
            "context_k": settings.select.context_k,
            "token_budget": settings.pack.token_budget,
            "mmr_lambda": settings.select.mmr_lambda,
            "depth": depth,
        },
        "records": str(records_path) if records_path else None,
    }


ABLATIONS: dict[str, dict[str, Any]] = {
    "rank_constant=20": {"rank_constant": 20},
    "rerank_k=20": {"rerank_k": 20},
    "no reranker": {"rerank_model": None},
    "mmr_lambda=1.0 (no diversity)": {"mmr_lambda": 1.0},
    "context_k=10": {"context_k": 10},
}
"""One change each against the base settings (the seed's list, steps 5-8) besides the BM25 ones that
:func:`ablations_for` derives from the base."""


def ablations_for(base: Settings) -> dict[str, dict[str, Any]]:
    """The default one-change variants of ``base``: the other analyzer (english <-> standard), every
    :data:`BM25_PROTOCOLS` set-up that differs from the base's, then :data:`ABLATIONS`.

    Args:
        base: The settings every variant changes one thing of.
    """
    other = "standard" if base.index.analyzer.value == "english" else "english"
    out: dict[str, dict[str, Any]] = {f"analyzer={other}": {"analyzer": other}}
    for name, values in BM25_PROTOCOLS.items():
        if apply_bm25_protocol(base, name) != base:
            out[f"bm25 protocol {name}"] = dict(values)
    out.update(ABLATIONS)
    return out


_BM25_KEYS = ("analyzer", "bm25_fields", "bm25_tie_breaker", "bm25_k1", "bm25_b")


def ablate(
    dataset: str | Path,
    *,
    split: str = "test",
    settings: Settings | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    cache_dir: str | Path | None = None,
    max_queries: int | None = None,
    depth: int = DEPTH,
    progress: bool = False,
) -> dict[str, Any]:
    """Evaluate the base settings, then each variant changing one setting, on the same corpus and queries.

    Args:
        dataset: BEIR folder.
        split: Qrels split.
        settings: Base settings.
        variants: Name -> settings changes (default :func:`ablations_for` of the base).
        cache_dir: Embedding cache root.
        max_queries: Evaluate only the first N queries.
        depth: Candidates per channel.
        progress: Show progress bars.
    """
    base = settings or Settings()
    variants = ablations_for(base) if variants is None else variants
    corpus, _, _ = load_beir(dataset, split)
    index = build_index(corpus, base, cache_dir=cache_dir, progress=progress)
    common = dict(split=split, cache_dir=cache_dir, max_queries=max_queries, depth=depth, progress=progress)
    results = {"base": evaluate(dataset, settings=base, index=index, **common)}  # type: ignore[arg-type]
    for name, changes in variants.items():
        varied = base.replace(**changes)
        own = index
        if any(k in changes for k in _BM25_KEYS):
            own = build_index(corpus, varied, cache_dir=cache_dir, embedder=index.embedder)
        results[name] = evaluate(dataset, settings=varied, index=own, **common)  # type: ignore[arg-type]
    return {
        "dataset": str(dataset),
        "split": split,
        "variants": variants,
        "table": ablation_table(results),
        "results": results,
    }


def _final_stage(result: dict[str, Any]) -> dict[str, float]:
    stages = result["stages"]
    m = stages["rerank"] or stages["hybrid"]
    return {
        "bm25_ndcg@10": stages["bm25"]["ndcg@10"],
        "hybrid_ndcg@10": stages["hybrid"]["ndcg@10"],
        "final_ndcg@10": m["ndcg@10"],
        "final_mrr@10": m["mrr@10"],
        "union_recall@100": stages["union"]["recall@100"],
        "context_recall": stages["selection"]["context_recall"],
        "context_tokens": stages["selection"]["context_tokens"]["mean"],
    }


def ablation_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of metrics per variant with deltas against ``results["base"]``.

    Args:
        results: Variant name -> :func:`evaluate` result (must contain ``base``).
    """
    base = _final_stage(results["base"])
    rows = []
    for name, res in results.items():
        vals = _final_stage(res)
        rows.append({"variant": name, **vals, **{f"delta_{k}": round(v - base[k], 4) for k, v in vals.items()}})
    return rows


def format_report(result: dict[str, Any]) -> str:
    """Human-readable table of an :func:`evaluate` result.

    Args:
        result: Output of :func:`evaluate`.
    """
    lines = [
        f"dataset {result['dataset']} split {result['split']}: {result['queries']} queries, "
        f"{result['documents']} documents",
        "",
        f"{'stage':<9} {'nDCG@10':>8} {'MRR@10':>8} " + " ".join(f"{'R@' + str(n):>7}" for n in RECALL_DEPTHS),
    ]
    for name in ("bm25", "dense", "union", "hybrid", "rerank"):
        m = result["stages"].get(name)
        if m is None:
            lines.append(f"{name:<9} (not run: {result['paths'].get('rerank', 'disabled')})")
            continue
        head = f"{m['ndcg@10']:>8.4f} {m['mrr@10']:>8.4f}" if "ndcg@10" in m else f"{'-':>8} {'-':>8}"
        lines.append(f"{name:<9} {head} " + " ".join(f"{m[f'recall@{n}']:>7.4f}" for n in RECALL_DEPTHS))
    sel = result["stages"]["selection"]
    lines.append(
        f"selection context_recall={sel['context_recall']:.4f} duplicate_rate={sel['duplicate_rate']:.4f} "
        f"context_tokens mean={sel['context_tokens']['mean']} p95={sel['context_tokens']['p95']} "
        f"(context_k={sel['context_k']}, budget={sel['token_budget']})"
    )
    ck = result["stages"]["chunking"]
    lines.append(f"chunking  {ck['unit']}: {ck['note']}")
    if "chunks" in ck:
        lines.append(
            f"          {ck['chunks']} chunks ({ck['chunks_per_document']['mean']}/doc, max "
            f"{ck['chunks_per_document']['max']}), tokens/chunk mean={ck['tokens_per_chunk']['mean']} "
            f"p95={ck['tokens_per_chunk']['p95']}, vectors {ck['index']['vector_bytes']} bytes, "
            f"embedded {ck['embed_tokens']} tokens in {ck['embed_seconds']} s ({ck['from_cache']} from cache)"
        )
    lines.append("")
    lines.append("latency per query (ms):")
    lines.extend(f"  {k:<16} p50={v['p50']:>8.1f} p95={v['p95']:>8.1f}" for k, v in result["latency_ms"].items())
    lines.append("paths:")
    lines.extend(f"  {k}: {v}" for k, v in result["paths"].items())
    return "\n".join(lines)


def format_ablation(table: list[dict[str, Any]]) -> str:
    """Fixed-width table of :func:`ablation_table` rows.

    Args:
        table: Rows with a ``variant`` and metric/delta keys.
    """
    keys = ["final_ndcg@10", "final_mrr@10", "hybrid_ndcg@10", "union_recall@100", "context_recall"]
    lines = [f"{'variant':<40} " + " ".join(f"{k:>18}" for k in keys)]
    for row in table:
        cells = [f"{row[k]:.4f} ({row['delta_' + k]:+.4f})" for k in keys]
        lines.append(f"{row['variant']:<40} " + " ".join(f"{c:>18}" for c in cells))
    return "\n".join(lines)
