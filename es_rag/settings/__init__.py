"""Validated settings: one frozen group per stage (:mod:`es_rag.settings.groups`), the rules that span
groups, and flat construction (``Settings(rerank_k=20)``, ``settings.replace(fusion_method="linear")``) by
the names the command line uses as flags."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError
from es_rag.settings.base import (
    AUTO_MODEL,
    BBQ_DEFAULT_OVERSAMPLE,
    CHANNELS,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_MODEL_MISFITS,
    DEFAULT_RERANKER_MODEL,
    MULTILINGUAL_EMBEDDING_MODEL,
    RESERVED_PREFIXES,
    Group,
)
from es_rag.settings.enums import (
    Aggregation,
    Analyzer,
    Calibration,
    Choice,
    DenseFitCheck,
    Device,
    ExactChannel,
    ExpandMode,
    FusionMethod,
    FusionPath,
    LongText,
    MmrPath,
    Precision,
    QueryRuntime,
    RerankBackend,
    RerankFusion,
    ScoreNormalizer,
    SemanticChunking,
    Similarity,
    ThresholdScope,
    VectorIndexType,
    VectorMode,
    parse_enum,
)
from es_rag.settings.groups import (
    GROUPS,
    BoostSettings,
    ChunkingSettings,
    ConnectionSettings,
    DedupSettings,
    EncoderSettings,
    EscalateSettings,
    ExpandSettings,
    FusionSettings,
    GateSettings,
    IndexSettings,
    IngestSettings,
    PackSettings,
    RerankSettings,
    RetrieveSettings,
    SelectSettings,
)

__all__ = [
    "AUTO_MODEL",
    "BBQ_DEFAULT_OVERSAMPLE",
    "CHANNELS",
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_MODEL_MISFITS",
    "DEFAULT_RERANKER_MODEL",
    "FLAT",
    "GROUPS",
    "MULTILINGUAL_EMBEDDING_MODEL",
    "PUBLIC_GROUP",
    "RESERVED_PREFIXES",
    "SEMANTIC_FIELD",
    "Aggregation",
    "Analyzer",
    "BoostSettings",
    "Calibration",
    "Choice",
    "ChunkingSettings",
    "ConnectionSettings",
    "DedupSettings",
    "DenseFitCheck",
    "Device",
    "EncoderSettings",
    "EscalateSettings",
    "ExactChannel",
    "ExpandMode",
    "ExpandSettings",
    "FusionMethod",
    "FusionPath",
    "FusionSettings",
    "GateSettings",
    "Group",
    "IndexSettings",
    "IngestSettings",
    "LongText",
    "MmrPath",
    "PackSettings",
    "Precision",
    "QueryRuntime",
    "RerankBackend",
    "RerankFusion",
    "RerankSettings",
    "RetrieveSettings",
    "ScoreNormalizer",
    "SelectSettings",
    "SemanticChunking",
    "Settings",
    "Similarity",
    "ThresholdScope",
    "VectorIndexType",
    "VectorMode",
    "chunk_pipeline_id",
    "parse_enum",
]  # fmt: skip

PUBLIC_GROUP = "public"
"""ACL group every principal belongs to implicitly: documents tagged ``public`` are visible to all
principals of their tenant. Tenant isolation is never relaxed by it."""
SEMANTIC_FIELD = "semantic"
"""The ``semantic_text`` field of the chunk mapping in ``vector_mode=semantic_text`` (the ``semantic``
query's ``field``); the ``chunks-semantic`` pipeline fills it with the text the model reads."""

FLAT: dict[str, tuple[str, str]] = {
    flat: (group.NAME, name) for group in GROUPS for name, flat in group.flat_names().items()
}
"""Flat setting name (keyword, flag) -> (group, field)."""
_GROUP_CLASSES: dict[str, type[Group]] = {g.NAME: g for g in GROUPS}
if len(FLAT) != sum(len(g.flat_names()) for g in GROUPS) or set(FLAT) & set(_GROUP_CLASSES):
    raise RuntimeError("settings groups: every flat name must be unique and differ from every group name")


REMOVED: dict[str, str] = {
    "latest_version_boost": "the version gate serves one version per source, so the candidates never hold two "
    "versions of one source and the boost could never fire (a superseded source is hidden, not demoted)",
}
"""Settings that existed and were removed -> why (the error says so instead of "unknown")."""


def unknown_setting(name: str, valid: list[str]) -> ConfigError:
    """The error for a setting name that does not exist, with the closest valid names (or why it was removed).

    Args:
        name: What the caller wrote.
        valid: The names that exist.
    """
    if name in REMOVED:
        return ConfigError(f"setting {name!r} was removed: {REMOVED[name]}")
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; valid: {', '.join(sorted(valid))}"
    return ConfigError(f"unknown setting {name!r}{hint}")


@dataclass(frozen=True, init=False)
class Settings:
    """Every tunable of the stack: one validated group per stage, and the rules between groups.

    Build it flat, by the names the command line uses as flags (``Settings(rerank_k=20,
    fusion_method="linear")``), or from groups (``Settings(rerank=RerankSettings(k=20))``), or both (flat
    names apply on top of a given group). A stage reads its own group: ``settings.rerank.k``.

    Cross-group rules: ``context_k <= rerank_k <= candidate_k`` (the seeds' funnel), and the vector
    dimension a quantized index type needs (int4: even, bbq: >= 64).
    """

    index: IndexSettings
    encoder: EncoderSettings
    chunking: ChunkingSettings
    ingest: IngestSettings
    retrieve: RetrieveSettings
    fusion: FusionSettings
    dedup: DedupSettings
    rerank: RerankSettings
    escalate: EscalateSettings
    gate: GateSettings
    boost: BoostSettings
    select: SelectSettings
    expand: ExpandSettings
    pack: PackSettings
    connection: ConnectionSettings

    def __init__(self, **values: Any) -> None:
        given: dict[str, Group] = {}
        flat: dict[str, dict[str, Any]] = {name: {} for name in _GROUP_CLASSES}
        for key, value in values.items():
            if key in _GROUP_CLASSES:
                if not isinstance(value, _GROUP_CLASSES[key]):
                    raise ConfigError(f"{key}: expected a {_GROUP_CLASSES[key].__name__}, got {type(value).__name__}")
                given[key] = value
            elif key in FLAT:
                group_name, field_name = FLAT[key]
                flat[group_name][field_name] = value
            else:
                raise unknown_setting(key, [*FLAT, *_GROUP_CLASSES])
        for name, cls in _GROUP_CLASSES.items():
            base = given.get(name)
            if base is None:
                built = cls(**flat[name])
            else:
                built = dataclasses.replace(base, **flat[name]) if flat[name] else base
            object.__setattr__(self, name, built)
        self._resolve_model()
        self._check_across_groups()

    def _resolve_model(self) -> None:
        """``embedding_model = "auto"`` becomes a model: :data:`MULTILINGUAL_EMBEDDING_MODEL` for a corpus language
        the default model misfits (:data:`DEFAULT_MODEL_MISFITS`), else :data:`DEFAULT_EMBEDDING_MODEL`. The choice is
        remembered, so :meth:`replace` with another language chooses again."""
        auto = self.encoder.model.strip().lower() == AUTO_MODEL
        object.__setattr__(self, "_auto_model", auto)
        if auto:
            language = self.index.language
            model = MULTILINGUAL_EMBEDDING_MODEL if language in DEFAULT_MODEL_MISFITS else DEFAULT_EMBEDDING_MODEL
            object.__setattr__(self, "encoder", dataclasses.replace(self.encoder, model=model))

    @property
    def model_is_auto(self) -> bool:
        """Whether ``embedding_model`` was left to ``auto`` (the model then follows ``language``)."""
        return bool(getattr(self, "_auto_model", False))

    def _check_across_groups(self) -> None:
        context_k, rerank_k, candidate_k = self.select.context_k, self.rerank.k, self.retrieve.candidate_k
        if not context_k <= rerank_k <= candidate_k:
            raise ConfigError(
                "candidate counts must satisfy context_k <= rerank_k <= candidate_k, got "
                f"context_k={context_k}, rerank_k={rerank_k}, candidate_k={candidate_k}"
            )
        kind, dims = self.index.vector_index_type, self.encoder.dims
        if kind.value.startswith("int4") and dims % 2:
            raise ConfigError(f"vector_index_type {kind}: needs an even vector_dims, got {dims}")
        if kind.value.startswith("bbq") and dims < 64:
            raise ConfigError(f"vector_index_type {kind}: needs vector_dims >= 64, got {dims}")

    def budget_warning(self) -> str | None:
        """Seed 003: ``context_k`` units of the configured size should fit ``token_budget``; the warning, with the
        numbers, when they cannot (None when they fit).

        The unit is what the pack stage receives: a child chunk (``chunk_max_tokens``), a parent section of up to
        ``expand_max_parent_tokens`` (``expand_mode=parent``) or a child with ``expand_neighbors`` children on each
        side (``expand_mode=neighbors``). These are configured maxima in embedding-model tokens, and the budget also
        pays for the block headers, so a context that passes this check can still drop a block.
        """
        k, budget, chunk = self.select.context_k, self.pack.token_budget, self.chunking.max_tokens
        detail = ""
        if self.expand.mode is ExpandMode.PARENT:
            size, unit, noun = self.expand.max_parent_tokens, "parent size", "parent"
            note = " (a parent that does not fit falls back to its child)"
        elif self.expand.mode is ExpandMode.NEIGHBORS and self.expand.neighbors > 0:
            span = 2 * self.expand.neighbors + 1
            size, unit, noun, detail = span * chunk, "neighbour block size", "block", f" ({span} chunks of {chunk})"
            note = " (a block that does not fit falls back to its child)"
        else:
            size, unit, noun, note = chunk, "chunk size", "chunk", ""
        if k * size <= budget:
            return None
        fit = budget // size
        fits = f"at most {fit} {noun}{'s' if fit > 1 else ''} will fit" if fit else f"not one {noun} of that size fits"
        return f"context_k={k} x {unit} {size} tokens{detail} = {k * size} > token_budget {budget}: {fits}{note}"

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> Settings:
        """Settings from a TOML settings file (:mod:`es_rag.settings.file`: one table per stage, keys are flat
        names), with ``overrides`` (flat names) applied over the file.

        Args:
            path: The settings file (``--settings FILE`` reads the same files).
            **overrides: Flat setting names that win over the file.

        Raises:
            ConfigError: The file is missing, not TOML, or holds an unknown key, a value of the wrong type or one
                its group refuses; every message names the file and the key.
        """
        from es_rag.settings.file import read_settings_file

        values = read_settings_file(path)
        values.update(overrides)
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (flat names or whole groups) applied and validated again.

        Args:
            **changes: Flat setting names or group names.
        """
        groups: dict[str, Any] = {name: getattr(self, name) for name in _GROUP_CLASSES}
        if self.model_is_auto and "embedding_model" not in changes and "encoder" not in changes:
            groups["encoder"] = dataclasses.replace(self.encoder, model=AUTO_MODEL)  # the language may change
        return Settings(**groups, **changes)

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name (enums as their values), in group order: what reports record."""
        out: dict[str, Any] = {}
        for flat_name, (group, name) in FLAT.items():
            value = getattr(getattr(self, group), name)
            out[flat_name] = value.value if isinstance(value, Choice) else value
        return out

    # Names derived from the prefix: one place, so templates, pipelines and queries agree.
    def index_name(self, role: str) -> str:
        """The name requests address for ``role`` (``chunks``, ``parents`` or ``versions``): ``<prefix>-<role>``
        (an alias after the first blue-green swap, a concrete index before it), or with ``index_generation`` set
        that generation's concrete index ``<prefix>-<role>-<generation>``.

        Args:
            role: ``chunks``, ``parents`` or ``versions``.
        """
        base = f"{self.index.prefix}-{role}"
        return f"{base}-{self.index.generation}" if self.index.generation else base

    @property
    def chunk_index(self) -> str:
        """Index (or alias) holding child chunk documents."""
        return self.index_name("chunks")

    @property
    def parent_index(self) -> str:
        """Index (or alias) holding parent (section) documents."""
        return self.index_name("parents")

    @property
    def pipeline_id(self) -> str:
        """Ingest pipeline that every chunk write goes through: one per generation.

        An index names its pipeline in ``index.default_pipeline`` and Elasticsearch resolves that name on every
        write (``IngestService.resolvePipelines``), so a pipeline shared by two generations would let a
        ``reindex`` to another model or inference endpoint change how the live generation embeds its writes.
        A blue-green generation therefore gets its own (``<prefix>-chunks-<generation>[-inference|-semantic]``);
        the indices of before the first reindex keep ``<prefix>-chunks[-inference|-semantic]``.
        """
        return chunk_pipeline_id(self.index.prefix, self.index.generation, self.encoder.vectors)


def chunk_pipeline_id(prefix: str, generation: str | None, mode: VectorMode) -> str:
    """``<prefix>-chunks[-<generation>][-inference|-semantic]``: :attr:`Settings.pipeline_id`.

    Args:
        prefix: The index prefix.
        generation: The blue-green generation, or None for the indices of before the first reindex.
        mode: Where vectors are computed.
    """
    suffix = {VectorMode.CLIENT: "", VectorMode.INFERENCE: "-inference", VectorMode.SEMANTIC_TEXT: "-semantic"}
    return f"{prefix}-chunks" + (f"-{generation}" if generation else "") + suffix[mode]
