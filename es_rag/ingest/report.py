"""What an ingest run did: counts, every failed document, every skipped file, warnings, switches, timings."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from es_rag.backend import IndexReport


@dataclass
class IngestReport(IndexReport):
    """Bulk outcome plus sources and chunks processed, skipped files, warnings, version switches and timings.

    ``skipped`` lists what a folder walk left out on purpose (``{"path", "reason"}``: hidden, vendor or es_rag
    index folders, ignore-file matches, unsupported file types); ``failed`` lists documents that could not be
    ingested; ``removed`` lists the sources ``--sync`` deleted because their folder no longer has them.
    """

    sources: int = 0
    chunks: int = 0
    parents: int = 0
    warnings: list[dict[str, str]] = field(default_factory=list)
    switched: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    """Sources whose chunks the index already serves exactly, with vectors of this model: not embedded again."""
    timings: dict[str, float] = field(default_factory=lambda: {"parse": 0.0, "chunk": 0.0, "embed": 0.0, "index": 0.0})
    extra: dict[str, Any] = field(default_factory=dict)

    def skipped_by_reason(self) -> dict[str, int]:
        """How many paths were skipped for each kind of reason (the text before the first ``:``)."""
        return dict(Counter(s["reason"].split(":", 1)[0] for s in self.skipped))

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "sources": self.sources,
            "chunks": self.chunks,
            "parents": self.parents,
            "indexed": self.indexed,
            "failed": self.failed,
            "skipped": self.skipped,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "warnings": self.warnings,
            "switched": self.switched,
            "timings_s": {k: round(v, 4) for k, v in self.timings.items()},
            **({"query_encoder": self.extra["query_encoder"]} if "query_encoder" in self.extra else {}),
        }
