"""The settings groups of the post-retrieval stages: ``dedup``, ``rerank``, ``escalate``, ``gate``, ``boost``,
``select``, ``expand`` and ``pack``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from es_rag.errors import ConfigError
from es_rag.settings.base import (
    DEFAULT_RERANKER_MODEL,
    Group,
    opt,
)
from es_rag.settings.enums import (
    Aggregation,
    Calibration,
    ExpandMode,
    LongText,
    MmrPath,
    RerankBackend,
    RerankFusion,
    ThresholdScope,
)


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
    threshold_scope: ThresholdScope = opt(
        ThresholdScope.QUERY,
        flat="gate_threshold_scope",
        metavar="query|hit",
        help="what a calibrated reranker's no-answer threshold cuts: query = only the verdict (no sufficient "
        "evidence when the best candidate is below it); hit = also every candidate below it (on rag-en-train's "
        "no-answer split, hit kept 0.853 of the answer characters against query's 0.885: docs/reranker.md)",
    )
    min_dense: float | None = opt(
        None,
        flat="gate_min_dense",
        metavar="SCORE|off",
        help="no-answer from retrieval alone: no sufficient evidence when no candidate's dense (kNN) score reaches "
        "this (Elasticsearch's score scale, e.g. (1 + cosine) / 2; fit it on your own questions with "
        "es-rag calibrate --gate-floor; docs/evaluation.md). Off by default: it costs answerable questions their "
        "context",
    )

    def __post_init__(self) -> None:
        self._number("cliff", above=0.0)
        self._number("margin", above=0.0)
        self._number("min_dense", above=0.0)
        self._enum("threshold_scope", ThresholdScope)


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
