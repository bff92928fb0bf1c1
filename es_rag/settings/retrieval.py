"""The settings groups of retrieval: ``retrieve`` (channels, candidates, BM25 fields) and ``fusion``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from es_rag.errors import ConfigError
from es_rag.languages import check_code
from es_rag.settings.base import (
    CHANNELS,
    Group,
    opt,
)
from es_rag.settings.enums import (
    ExactChannel,
    FusionMethod,
    FusionPath,
    ScoreNormalizer,
)


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
