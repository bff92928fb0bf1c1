"""One frozen settings group per stage. Each group validates itself; each field carries its flat name
(the keyword of ``Settings(...)``/``Settings.replace`` and, with ``-`` for ``_``, the command-line flag)
and its help text, from which the CLI builds its options.

Group name = stage (trace stage, module, ``--help`` section): ``index``, ``encoder``, ``chunking``,
``retrieve``, ``fusion``, ``dedup``, ``rerank``, ``escalate``, ``gate``, ``boost``, ``select``, ``expand``, ``pack``,
plus ``connection`` (how long to wait for Elasticsearch), declared by stage in :mod:`es_rag.settings.indexing`,
:mod:`es_rag.settings.retrieval` and :mod:`es_rag.settings.post_retrieval`. Rules that span two groups (candidate
counts, vector dimensions of a quantized index type) live in :class:`es_rag.settings.Settings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from es_rag.settings.base import Group, opt
from es_rag.settings.indexing import ChunkingSettings, EncoderSettings, IndexSettings, IngestSettings
from es_rag.settings.post_retrieval import (
    BoostSettings,
    DedupSettings,
    EscalateSettings,
    ExpandSettings,
    GateSettings,
    PackSettings,
    RerankSettings,
    SelectSettings,
)
from es_rag.settings.retrieval import FusionSettings, RetrieveSettings

__all__ = [
    "GROUPS",
    "BoostSettings",
    "ChunkingSettings",
    "ConnectionSettings",
    "DedupSettings",
    "EncoderSettings",
    "EscalateSettings",
    "ExpandSettings",
    "FusionSettings",
    "GateSettings",
    "IndexSettings",
    "IngestSettings",
    "PackSettings",
    "RerankSettings",
    "RetrieveSettings",
    "SelectSettings",
]


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
