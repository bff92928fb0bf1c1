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
        parsed: FusionMode = _parse_enum(cls, value, "fusion")
        return parsed


class Similarity(str, Enum):
    """dense_vector similarity."""

    COSINE = "cosine"
    DOT_PRODUCT = "dot_product"
    L2_NORM = "l2_norm"
    MAX_INNER_PRODUCT = "max_inner_product"


class Analyzer(str, Enum):
    """Analyzer for text fields. ``kuromoji`` needs the analysis-kuromoji plugin."""

    STANDARD = "standard"
    ENGLISH = "english"
    CJK = "cjk"
    KUROMOJI = "kuromoji"


def _parse_enum(enum_cls: Any, value: Any, name: str) -> Any:
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(str(value).lower())
    except ValueError:
        valid = ", ".join(m.value for m in enum_cls)
        raise ConfigError(f"{name}: invalid value {value!r}; valid values: {valid}") from None


_PREFIX_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,100}$")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every tunable of the stack, validated on construction.

    The candidate counts follow the seeds' rule ``context_k <= rerank_k <= candidate_k``.

    Args:
        index_prefix: Prefix of every index, template, pipeline and alias es_rag creates.
        embedding_model: sentence-transformers model name or local path.
        vector_dims: Dimension of the embedding vectors.
        similarity: dense_vector similarity.
        analyzer: Analyzer of text fields.
        inference_id: Inference endpoint id; when set, ingest computes vectors in Elasticsearch.
        reranker_model: Cross-encoder model name or local path; ``None`` disables reranking.
        candidate_k: Candidates per retrieval channel; also the RRF ``rank_window_size``.
        num_candidates: kNN ``num_candidates`` per shard (>= candidate_k).
        rerank_k: How many fused candidates the cross-encoder scores.
        context_k: Most chunks handed to the LLM context.
        rank_constant: RRF rank constant (k in 1/(k+rank)).
        fusion: ``auto`` (probe the cluster), ``native`` (rrf retriever) or ``client`` (_msearch + RRF).
        channel_weights: Optional RRF weight per channel name (``bm25``, ``dense``).
        mmr_lambda: MMR trade-off, 1.0 = pure relevance.
        max_chunks_per_source: Per-source cap applied during selection.
        token_budget: Model-token budget of the packed context.
        chunk_max_tokens: Child chunk size in embedding-model tokens.
        chunk_overlap: Overlap between consecutive child chunks of one section, in tokens.
        request_timeout: Seconds before an Elasticsearch request is abandoned.
    """

    index_prefix: str = "es-rag"
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    vector_dims: int = 384
    similarity: Similarity = Similarity.COSINE
    analyzer: Analyzer = Analyzer.STANDARD
    inference_id: str | None = None
    reranker_model: str | None = DEFAULT_RERANKER_MODEL
    candidate_k: int = 50
    num_candidates: int = 100
    rerank_k: int = 40
    context_k: int = 5
    rank_constant: int = 60
    fusion: FusionMode = FusionMode.AUTO
    channel_weights: dict[str, float] = field(default_factory=dict)
    mmr_lambda: float = 0.7
    max_chunks_per_source: int = 2
    token_budget: int = 1500
    chunk_max_tokens: int = 200
    chunk_overlap: int = 30
    request_timeout: float = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "similarity", _parse_enum(Similarity, self.similarity, "similarity"))
        object.__setattr__(self, "analyzer", _parse_enum(Analyzer, self.analyzer, "analyzer"))
        object.__setattr__(self, "fusion", FusionMode.parse(self.fusion))
        if not _PREFIX_RE.match(self.index_prefix):
            raise ConfigError(
                f"index_prefix: {self.index_prefix!r} is not a valid index name prefix "
                "(lowercase letters, digits, '-' and '_', starting with a letter or digit)"
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
        if self.request_timeout <= 0:
            raise ConfigError(f"request_timeout: must be > 0, got {self.request_timeout}")

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
        return f"{self.index_prefix}-chunks" + ("-inference" if self.inference_id else "")

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
