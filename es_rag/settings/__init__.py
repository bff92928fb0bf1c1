"""Validated, keyword-only settings shared by every stage."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from es_rag.errors import ConfigError

DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_RERANKER_MODEL = "cross-encoder/ms-marco-MiniLM-L6-v2"
PUBLIC_GROUP = "public"
"""ACL group every principal belongs to implicitly: documents tagged ``public`` are visible to all
principals of their tenant. Tenant isolation is never relaxed by it."""


class FusionMode(str, Enum):
    """How BM25 and kNN candidate lists are fused."""

    AUTO = "auto"
    NATIVE = "native"
    CLIENT = "client"

    @classmethod
    def parse(cls, value: str | FusionMode) -> FusionMode:
        """Parse a string into a mode, naming the valid values on error.

        Args:
            value: ``auto``, ``native`` or ``client``.
        """
        parsed: FusionMode = parse_enum(cls, value, "fusion")
        return parsed


class VectorMode(str, Enum):
    """Where vectors come from.

    * ``client``: es_rag embeds chunks and queries with sentence-transformers (any licence);
    * ``inference``: the ``chunks-inference`` ingest pipeline's ``inference`` processor embeds each
      client-made chunk into ``vector`` with ``inference_id``; queries are still embedded client-side
      and searched with ``knn``;
    * ``semantic_text``: the Enterprise path -- es_rag writes whole sections, Elasticsearch chunks and
      embeds them into a ``semantic_text`` field with ``inference_id`` and searches it with the
      ``semantic`` query (query embedded server-side).
    """

    CLIENT = "client"
    INFERENCE = "inference"
    SEMANTIC_TEXT = "semantic_text"


SEMANTIC_FIELD = "semantic"
"""The ``semantic_text`` field of the chunk mapping in ``vector_mode=semantic_text`` (the ``semantic``
query's ``field``); the ``chunks-semantic`` pipeline fills it with the text the model reads."""

SEMANTIC_CHUNKING_STRATEGIES = ("sentence", "word", "none")
"""``chunking_settings.strategy`` values es_rag renders into the ``semantic_text`` mapping."""


class Similarity(str, Enum):
    """dense_vector similarity."""

    COSINE = "cosine"
    DOT_PRODUCT = "dot_product"
    L2_NORM = "l2_norm"
    MAX_INNER_PRODUCT = "max_inner_product"


VECTOR_INDEX_TYPES = ("hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "flat", "int8_flat", "int4_flat", "bbq_flat")
"""``dense_vector`` ``index_options.type`` values es_rag renders (``DenseVectorFieldMapper.VectorIndexType``)."""
QUANTIZED_VECTOR_TYPES = ("int8_hnsw", "int4_hnsw", "bbq_hnsw", "int8_flat", "int4_flat", "bbq_flat")
"""The quantized types: the only ones that take ``rescore_vector``."""
BBQ_DEFAULT_OVERSAMPLE = 3.0
"""Elasticsearch's own ``rescore_vector.oversample`` for ``bbq_*`` from 9.1
(``DenseVectorFieldMapper.DEFAULT_OVERSAMPLE``); es_rag writes it explicitly so 9.0 and 8.18 rescore the same way."""


class Analyzer(str, Enum):
    """Analyzer for text fields. ``kuromoji`` needs the analysis-kuromoji plugin.

    ``auto`` is resolved once, at setup, by :func:`es_rag.elasticsearch.assets.resolve_analyzer`: ``kuromoji`` when
    the cluster has the analysis-kuromoji plugin, else ``cjk`` when the corpus language is Japanese,
    Chinese or Korean, else ``standard``. Assets are never rendered with ``auto`` unresolved.
    """

    AUTO = "auto"
    STANDARD = "standard"
    ENGLISH = "english"
    CJK = "cjk"
    KUROMOJI = "kuromoji"


def parse_enum(enum_cls: Any, value: Any, name: str) -> Any:
    """Parse ``value`` into ``enum_cls`` (case-insensitive); a bad value raises ConfigError listing the valid ones.

    Args:
        enum_cls: The string Enum.
        value: A member or its value.
        name: Setting name for the error message.
    """
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(str(value).lower())
    except ValueError:
        valid = ", ".join(m.value for m in enum_cls)
        raise ConfigError(f"{name}: invalid value {value!r}; valid values: {valid}") from None


_PREFIX_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,100}$")
RESERVED_PREFIXES = (
    "logs", "metrics", "traces", "synthetics", "profiling", "exemplars", "agentless", "ilm-history",
    "behavioral_analytics", "ai-index", "security_solution", "fleet-synced-integrations", "apm",
)  # fmt: skip
"""Index-name roots of the templates a 9.x node installs itself (StackTemplateRegistry: ``logs-*-*``,
``metrics-*-*``, ``synthetics-*-*``, ``agentless-*-*`` at priority 100; otel ``*.otel-*`` 120; APM 140; ILM history;
behavioral analytics; ``ai-index-idx-*`` at priority 500 on the newest versions; Fleet's synced integrations).
es_rag's index templates (priority 500) would take those indices over, or collide: a prefix equal to one of them or
starting with it and ``-`` is refused."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every tunable of the stack, validated on construction.

    The candidate counts follow the seeds' rule ``context_k <= rerank_k <= candidate_k``.

    Args:
        index_prefix: Prefix of every index, template, pipeline and alias es_rag creates.
        embedding_model: sentence-transformers model name or local path.
        vector_dims: Dimension of the embedding vectors.
        similarity: dense_vector similarity.
        vector_index_type: dense_vector ``index_options.type`` (:data:`VECTOR_INDEX_TYPES`). Always written
            explicitly: without it Elasticsearch 9.1+ picks ``bbq_hnsw`` (1-bit) at 384 dims and more and
            ``int8_hnsw`` below, so recall and scores would depend on the cluster version. ``hnsw`` (float32,
            the default) scores exactly as the embedded backend and ``explain`` show; the quantized types trade
            memory for recall (``docs/retrieval.md``).
        vector_rescore_oversample: ``index_options.rescore_vector.oversample`` of a quantized type (0 or 1..10):
            kNN gathers ``k * oversample`` candidates on the quantized vectors and rescores them with the float
            ones. None: 3.0 for ``bbq_*`` (Elasticsearch's own default from 9.1, written explicitly), no
            rescoring for ``int8_*``/``int4_*``; refused for ``hnsw``/``flat``.
        analyzer: Analyzer of text fields; ``auto`` is resolved against the cluster at setup
            (:func:`es_rag.elasticsearch.assets.resolve_analyzer`).
        bm25_fields: Fields (``name^boost``) of the BM25 ``multi_match``; the embedded backend mirrors them.
        bm25_tie_breaker: ``multi_match`` ``best_fields`` tie_breaker: the best field's score plus this
            times every other matching field's score (0 = best field only; 1 = the sum of the fields, i.e.
            ``most_fields``).
        bm25_k1: BM25 term-frequency saturation of every text field (Lucene/Elasticsearch default 1.2); set
            as the index's ``default`` similarity by the settings component template, mirrored by the
            embedded backend. Changing it needs a new index (similarity is fixed at index creation).
        bm25_b: BM25 length normalisation in [0, 1] (default 0.75), same place as ``bm25_k1``.
        inference_id: Inference endpoint id; when set, ingest computes vectors in Elasticsearch.
        vector_mode: ``client``, ``inference`` or ``semantic_text`` (:class:`VectorMode`); None (default)
            means ``inference`` when ``inference_id`` is set, else ``client``. Read the resolved mode
            from :attr:`vectors`.
        semantic_chunking: ``chunking_settings.strategy`` of the ``semantic_text`` field: ``sentence``,
            ``word`` or ``none`` (no chunking: one embedding per section); None leaves the inference
            endpoint's own chunking settings in force.
        semantic_max_chunk_size: ``max_chunk_size`` in words (``sentence``: 20-300, ``word``: 10-300).
        semantic_overlap: ``sentence_overlap`` (0 or 1 sentences) for ``sentence``, ``overlap`` in words
            (at most half of ``semantic_max_chunk_size``) for ``word``.
        reranker_model: Cross-encoder model name or local path; ``None`` disables reranking.
        candidate_k: Candidates per retrieval channel; also the RRF ``rank_window_size``.
        num_candidates: kNN ``num_candidates`` per shard (>= candidate_k).
        rerank_k: How many fused candidates the cross-encoder scores.
        context_k: Most chunks handed to the LLM context.
        rank_constant: RRF rank constant (k in 1/(k+rank)).
        fusion: ``auto`` (probe the cluster), ``native`` (rrf retriever) or ``client`` (_msearch + RRF).
        channel_weights: Optional weight per channel name (``bm25``, ``dense``, ``exact``) in RRF or linear fusion.
        fusion_method: ``rrf`` (rank fusion) or ``linear`` (weighted sum of normalised scores).
        score_normalizer: Per-channel normaliser of ``linear`` fusion: ``minmax``, ``l2_norm``, ``none``
            (Elasticsearch's ``linear`` retriever) or ``zscore`` (client-side only).
        exact_channel: ``auto`` (run the exact-match channel when the query holds identifier-like tokens)
            or ``off``.
        mmr_lambda: MMR trade-off, 1.0 = pure relevance.
        max_chunks_per_source: Per-source cap applied during selection.
        max_chunks_per_parent: Per-parent-section cap applied during selection (None = no cap).
        dedup_adjacent_overlap: Dedup drops a chunk overlapping a kept chunk of the same source and
            version by at least this share of the shorter span (None disables the rule).
        dedup_near_threshold: Dedup drops a chunk whose word 3-shingle Jaccard with a kept chunk is at
            least this (never across two versions of one source); None (default) disables it.
        rerank_batch_size: (query, passage) windows per cross-encoder forward pass.
        rerank_max_length: Token limit of one pair; None = the model's own.
        rerank_long_text: ``windows`` (score windows of a long passage and aggregate) or ``truncate``.
        rerank_aggregation: Window aggregation: ``max`` or ``mean_top_m``.
        rerank_top_m: ``m`` of ``mean_top_m``.
        rerank_calibration: ``sigmoid`` (sigmoid((raw - bias) / temperature)) or ``none``.
        rerank_temperature: Calibration temperature; None = the model directory's calibration file or 1.0.
        rerank_bias: Calibration bias; None = the model directory's calibration file or 0.0.
        rerank_threshold: Calibrated relevance threshold of the no-answer gate, per model; None = the
            model directory's calibration file, else no absolute threshold (never a universal 0.5).
        rerank_timeout: Seconds before a rerank call is abandoned for the fused order; None = no limit.
        rerank_backend: Cross-encoder backend: ``torch``, ``int8`` (dynamic quantisation) or ``onnx``.
        rerank_cache_size: Reranked results kept in memory (0 disables the cache).
        gate_cliff: Cut the reranked list after the first drop of at least this between neighbours,
            on the gate scale (calibrated relevance, or raw scores with calibration ``none``); None disables it.
        gate_margin: When top-1 beats top-2 by at least this (gate scale), keep top-1 alone; None disables it.
        source_tiers: Business rule: ``source_id`` glob -> boost (authority / source tier).
        freshness_weight: Business rule: boost of a source dated today (``source_version`` as ISO date),
            halved every ``freshness_half_life_days``; 0 disables it.
        freshness_half_life_days: Half-life of the freshness boost.
        latest_version_boost: Business rule: boost of the newest version among candidates of one source.
        expansion: After selection: ``none``, ``parent`` (replace children by their parent section) or
            ``neighbors`` (extend a child with adjacent children of its section).
        expand_neighbors: Children fetched before and after each selected child (``neighbors``).
        expand_max_parent_tokens: A parent longer than this is not swapped in (the child stays).
        pack_tokenizer: Tokenizer (model name or directory) of the target LLM counting the context
            budget; None = the embedding model's.
        token_budget: Model-token budget of the packed context.
        chunk_max_tokens: Child chunk size in embedding-model tokens.
        chunk_overlap: Overlap between consecutive child chunks of one section, in tokens.
        request_timeout: Seconds before an Elasticsearch request (search, probe, setup, registry) is abandoned.
        bulk_timeout: Seconds before one ``_bulk`` request is abandoned: longer, since the first bulks through an
            ``inference`` pipeline or into a ``semantic_text`` field wait for the model to be allocated.
    """

    index_prefix: str = "es-rag"
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    vector_dims: int = 384
    similarity: Similarity = Similarity.COSINE
    vector_index_type: str = "hnsw"
    vector_rescore_oversample: float | None = None
    analyzer: Analyzer = Analyzer.STANDARD
    bm25_fields: tuple[str, ...] = ("title^2", "heading_path^1.5", "text")
    bm25_tie_breaker: float = 0.0
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    inference_id: str | None = None
    vector_mode: VectorMode | None = None
    semantic_chunking: str | None = "sentence"
    semantic_max_chunk_size: int = 250
    semantic_overlap: int = 1
    reranker_model: str | None = DEFAULT_RERANKER_MODEL
    candidate_k: int = 50
    num_candidates: int = 100
    rerank_k: int = 40
    context_k: int = 5
    rank_constant: int = 60
    fusion: FusionMode = FusionMode.AUTO
    channel_weights: dict[str, float] = field(default_factory=dict)
    fusion_method: str = "rrf"
    score_normalizer: str = "minmax"
    exact_channel: str = "auto"
    mmr_lambda: float = 0.7
    max_chunks_per_source: int = 2
    max_chunks_per_parent: int | None = None
    dedup_adjacent_overlap: float | None = 0.8
    dedup_near_threshold: float | None = None
    rerank_batch_size: int = 32
    rerank_max_length: int | None = None
    rerank_long_text: str = "windows"
    rerank_aggregation: str = "max"
    rerank_top_m: int = 2
    rerank_calibration: str = "sigmoid"
    rerank_temperature: float | None = None
    rerank_bias: float | None = None
    rerank_threshold: float | None = None
    rerank_timeout: float | None = None
    rerank_backend: str = "torch"
    rerank_cache_size: int = 256
    gate_cliff: float | None = 0.3
    gate_margin: float | None = None
    source_tiers: dict[str, float] = field(default_factory=dict)
    freshness_weight: float = 0.0
    freshness_half_life_days: float = 365.0
    latest_version_boost: float = 0.0
    expansion: str = "none"
    expand_neighbors: int = 1
    expand_max_parent_tokens: int = 800
    pack_tokenizer: str | None = None
    token_budget: int = 1500
    chunk_max_tokens: int = 200
    chunk_overlap: int = 30
    request_timeout: float = 30.0
    bulk_timeout: float = 300.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "similarity", parse_enum(Similarity, self.similarity, "similarity"))
        object.__setattr__(self, "analyzer", parse_enum(Analyzer, self.analyzer, "analyzer"))
        object.__setattr__(self, "fusion", FusionMode.parse(self.fusion))
        if not _PREFIX_RE.match(self.index_prefix):
            raise ConfigError(
                f"index_prefix: {self.index_prefix!r} is not a valid index name prefix "
                "(lowercase letters, digits, '-' and '_', starting with a letter or digit)"
            )
        root = next(
            (r for r in RESERVED_PREFIXES if self.index_prefix == r or self.index_prefix.startswith(r + "-")), None
        )
        if root is not None:
            raise ConfigError(
                f"index_prefix: {self.index_prefix!r} would put es_rag's index templates (priority 500) over indices "
                f"that Elasticsearch's built-in templates own ({root}-*); choose another prefix, e.g. "
                f"rag-{self.index_prefix}"
            )
        for name in (
            "vector_dims",
            "candidate_k",
            "num_candidates",
            "rerank_k",
            "context_k",
            "rank_constant",
            "max_chunks_per_source",
            "token_budget",
            "chunk_max_tokens",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}: must be a positive integer, got {value!r}")
        if self.vector_dims > 4096:
            raise ConfigError(f"vector_dims: Elasticsearch dense_vector allows at most 4096, got {self.vector_dims}")
        self._validate_index_options()
        if self.num_candidates < self.candidate_k:
            raise ConfigError(
                f"num_candidates ({self.num_candidates}) must be >= candidate_k ({self.candidate_k}): "
                "Elasticsearch rejects a kNN search whose k exceeds num_candidates"
            )
        if self.num_candidates > 10_000:
            raise ConfigError(f"num_candidates: Elasticsearch allows at most 10000, got {self.num_candidates}")
        if not self.context_k <= self.rerank_k <= self.candidate_k:
            raise ConfigError(
                "candidate counts must satisfy context_k <= rerank_k <= candidate_k, got "
                f"context_k={self.context_k}, rerank_k={self.rerank_k}, candidate_k={self.candidate_k}"
            )
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise ConfigError(f"mmr_lambda: must be within [0, 1], got {self.mmr_lambda}")
        if not 0 <= self.chunk_overlap < self.chunk_max_tokens:
            raise ConfigError(
                f"chunk_overlap ({self.chunk_overlap}) must be >= 0 and < chunk_max_tokens ({self.chunk_max_tokens})"
            )
        for channel, weight in self.channel_weights.items():
            if channel not in ("bm25", "dense", "exact"):
                raise ConfigError(f"channel_weights: unknown channel {channel!r}; valid: bm25, dense, exact")
            if not weight > 0:
                raise ConfigError(f"channel_weights[{channel}]: must be > 0, got {weight}")
        object.__setattr__(self, "bm25_fields", tuple(self.bm25_fields))
        if not self.bm25_fields:
            raise ConfigError("bm25_fields: at least one field is needed")
        for spec in self.bm25_fields:
            name, sep, boost = str(spec).partition("^")
            if not re.fullmatch(r"[a-z_][a-z0-9_.]*", name) or (sep and not re.fullmatch(r"\d+(\.\d+)?", boost)):
                raise ConfigError(f"bm25_fields: {spec!r} is not 'field' or 'field^boost' (e.g. title^2)")
        if not 0.0 <= self.bm25_tie_breaker <= 1.0:
            raise ConfigError(f"bm25_tie_breaker: must be within [0, 1], got {self.bm25_tie_breaker}")
        if not (isinstance(self.bm25_k1, (int, float)) and 0.0 <= self.bm25_k1 <= 100.0):
            raise ConfigError(f"bm25_k1: must be a number within [0, 100], got {self.bm25_k1!r}")
        if not (isinstance(self.bm25_b, (int, float)) and 0.0 <= self.bm25_b <= 1.0):
            raise ConfigError(f"bm25_b: must be a number within [0, 1], got {self.bm25_b!r}")
        if self.fusion_method not in ("rrf", "linear"):
            raise ConfigError(f"fusion_method: invalid value {self.fusion_method!r}; valid values: rrf, linear")
        if self.score_normalizer not in ("minmax", "l2_norm", "none", "zscore"):
            raise ConfigError(
                f"score_normalizer: invalid value {self.score_normalizer!r}; "
                "valid values: minmax, l2_norm, none, zscore"
            )
        if self.exact_channel not in ("auto", "off"):
            raise ConfigError(f"exact_channel: invalid value {self.exact_channel!r}; valid values: auto, off")
        self._validate_vectors()
        self._validate_post_retrieval()
        for name in ("request_timeout", "bulk_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}: must be > 0, got {getattr(self, name)}")

    def _validate_index_options(self) -> None:
        """The ``dense_vector`` ``index_options`` rules of ``DenseVectorFieldMapper`` (refused at setup otherwise)."""
        kind = self.vector_index_type
        if kind not in VECTOR_INDEX_TYPES:
            raise ConfigError(
                f"vector_index_type: invalid value {kind!r}; valid values: {', '.join(VECTOR_INDEX_TYPES)}"
            )
        if kind.startswith("int4") and self.vector_dims % 2:
            raise ConfigError(f"vector_index_type {kind}: needs an even vector_dims, got {self.vector_dims}")
        if kind.startswith("bbq") and self.vector_dims < 64:
            raise ConfigError(f"vector_index_type {kind}: needs vector_dims >= 64, got {self.vector_dims}")
        over = self.vector_rescore_oversample
        if over is not None:
            if kind not in QUANTIZED_VECTOR_TYPES:
                raise ConfigError(
                    "vector_rescore_oversample: only quantized index types rescore "
                    f"({', '.join(QUANTIZED_VECTOR_TYPES)}); {kind} keeps float vectors"
                )
            if not (over == 0 or 1.0 <= over <= 10.0):
                raise ConfigError(f"vector_rescore_oversample: must be 0 or within [1, 10], got {over}")

    def vector_index_options(self) -> dict[str, Any]:
        """The ``index_options`` object of the ``vector`` mapping."""
        opts: dict[str, Any] = {"type": self.vector_index_type}
        over = self.vector_rescore_oversample
        if over is None and self.vector_index_type.startswith("bbq"):
            over = BBQ_DEFAULT_OVERSAMPLE
        if over is not None:
            opts["rescore_vector"] = {"oversample": float(over)}
        return opts

    def _validate_vectors(self) -> None:
        """Checks of ``vector_mode``, ``inference_id`` and the ``semantic_text`` chunking settings."""
        if self.vector_mode is not None:
            object.__setattr__(self, "vector_mode", parse_enum(VectorMode, self.vector_mode, "vector_mode"))
        mode = self.vectors
        if mode is VectorMode.CLIENT and self.inference_id:
            raise ConfigError(
                f"vector_mode client: inference_id {self.inference_id!r} would be unused; "
                "use vector_mode inference or semantic_text, or drop inference_id"
            )
        if mode is not VectorMode.CLIENT and not self.inference_id:
            raise ConfigError(f"vector_mode {mode.value}: needs inference_id (an inference endpoint of the cluster)")
        strategy = self.semantic_chunking
        if strategy is not None and strategy not in SEMANTIC_CHUNKING_STRATEGIES:
            raise ConfigError(
                f"semantic_chunking: invalid value {strategy!r}; valid values: "
                f"{', '.join(SEMANTIC_CHUNKING_STRATEGIES)} (or None for the endpoint's own settings)"
            )
        size, overlap = self.semantic_max_chunk_size, self.semantic_overlap
        for name, value in (("semantic_max_chunk_size", size), ("semantic_overlap", overlap)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name}: must be an integer >= 0, got {value!r}")
        # Limits enforced by Elasticsearch's SentenceBoundaryChunkingSettings / WordBoundaryChunkingSettings.
        if strategy == "sentence":
            if not 20 <= size <= 300:
                raise ConfigError(f"semantic_max_chunk_size: sentence chunking needs 20..300 words, got {size}")
            if overlap not in (0, 1):
                raise ConfigError(f"semantic_overlap: sentence chunking allows 0 or 1 sentences, got {overlap}")
        elif strategy == "word":
            if not 10 <= size <= 300:
                raise ConfigError(f"semantic_max_chunk_size: word chunking needs 10..300 words, got {size}")
            if overlap > size // 2:
                raise ConfigError(
                    f"semantic_overlap: word chunking allows at most half of max_chunk_size ({size // 2}), "
                    f"got {overlap}"
                )

    @property
    def vectors(self) -> VectorMode:
        """The resolved vector mode: ``vector_mode``, else ``inference`` when ``inference_id`` is set,
        else ``client``."""
        if self.vector_mode is not None:
            return VectorMode(self.vector_mode)
        return VectorMode.INFERENCE if self.inference_id else VectorMode.CLIENT

    def semantic_chunking_settings(self) -> dict[str, Any] | None:
        """The ``chunking_settings`` object of the ``semantic_text`` mapping, or None (endpoint defaults)."""
        strategy = self.semantic_chunking
        if strategy is None:
            return None
        if strategy == "none":
            return {"strategy": "none"}
        body: dict[str, Any] = {"strategy": strategy, "max_chunk_size": self.semantic_max_chunk_size}
        body["sentence_overlap" if strategy == "sentence" else "overlap"] = self.semantic_overlap
        return body

    def _validate_post_retrieval(self) -> None:
        """Checks of the dedup / rerank / gate / business / expansion / packing knobs."""
        choices = {
            "rerank_long_text": ("windows", "truncate"),
            "rerank_aggregation": ("max", "mean_top_m"),
            "rerank_calibration": ("sigmoid", "none"),
            "rerank_backend": ("torch", "int8", "onnx"),
            "expansion": ("none", "parent", "neighbors"),
        }
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ConfigError(f"{name}: invalid value {getattr(self, name)!r}; valid values: {', '.join(valid)}")
        for name in ("rerank_batch_size", "rerank_top_m", "expand_max_parent_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}: must be a positive integer, got {value!r}")
        for name in ("max_chunks_per_parent", "rerank_max_length"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{name}: must be a positive integer or None, got {value!r}")
        if not isinstance(self.expand_neighbors, int) or self.expand_neighbors < 0:
            raise ConfigError(f"expand_neighbors: must be an integer >= 0, got {self.expand_neighbors!r}")
        if not isinstance(self.rerank_cache_size, int) or self.rerank_cache_size < 0:
            raise ConfigError(f"rerank_cache_size: must be an integer >= 0, got {self.rerank_cache_size!r}")
        for name in ("dedup_adjacent_overlap", "dedup_near_threshold"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise ConfigError(f"{name}: must be within (0, 1] or None, got {value}")
        for name in ("rerank_temperature", "rerank_timeout", "freshness_half_life_days"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name}: must be > 0, got {value}")
        for name in ("gate_cliff", "gate_margin"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name}: must be > 0 or None, got {value}")
        if self.rerank_threshold is not None and self.rerank_calibration == "none":
            raise ConfigError(
                "rerank_threshold: needs rerank_calibration='sigmoid' (a threshold on raw scores is not calibrated)"
            )
        for name in ("freshness_weight", "latest_version_boost"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name}: must be >= 0, got {getattr(self, name)}")
        for pattern, boost in self.source_tiers.items():
            if not pattern or boost <= -1.0:
                raise ConfigError(f"source_tiers[{pattern!r}]: needs a pattern and a boost > -1, got {boost}")

    # Names derived from the prefix: one place, so templates, pipelines and queries agree.
    @property
    def chunk_index(self) -> str:
        """Index (or alias) holding child chunk documents."""
        return f"{self.index_prefix}-chunks"

    @property
    def parent_index(self) -> str:
        """Index holding parent (section) documents."""
        return f"{self.index_prefix}-parents"

    @property
    def pipeline_id(self) -> str:
        """Ingest pipeline that every chunk write goes through."""
        suffix = {VectorMode.CLIENT: "", VectorMode.INFERENCE: "-inference", VectorMode.SEMANTIC_TEXT: "-semantic"}
        return f"{self.index_prefix}-chunks" + suffix[self.vectors]

    def replace(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied and validated again.

        Args:
            **changes: Fields to override.
        """
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            valid = ", ".join(sorted(f.name for f in dataclasses.fields(self)))
            raise ConfigError(f"unknown setting(s) {sorted(unknown)}; valid: {valid}")
        return dataclasses.replace(self, **changes)
