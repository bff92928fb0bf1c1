"""The one shape every post-retrieval stage returns, so the pipeline records each stage the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from es_rag.records import Hit


@dataclass
class StageOutput:
    """What a stage did.

    Attributes:
        hits: The hits it passes on, in the order it passes them.
        dropped: ``(chunk_id, reason)`` of every hit it left out.
        info: What the trace records about it (scores, cut positions, rules; JSON values only).
        path: One line on the path it took (``trace.paths[stage]``); empty when there is nothing to say.
        added: chunk ids of hits it took in besides its input (the expand stage's refills from the remainder, the
            pack stage's children of an over-budget block); the trace counts them as input, so every hit in is
            passed on or dropped.
    """

    hits: list[Hit]
    dropped: list[tuple[str, str]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    added: list[str] = field(default_factory=list)
