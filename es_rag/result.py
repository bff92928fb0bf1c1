"""What a search returns: the packed evidence, the trace, and the hits each ranking stage produced
(:class:`SearchResult`), with its JSON and text renderings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from es_rag.records import Hit, Trace
from es_rag.stages.gate import NO_SUFFICIENT_EVIDENCE
from es_rag.stages.pack import PackedContext


@dataclass
class SearchResult:
    """Selected hits (best first), the packed context, the trace, and what each ranking stage produced.

    Attributes:
        query: The query.
        hits: The packed evidence, best first.
        context: The packed context with citations.
        trace: Every stage's record and the paths taken.
        candidates: The hits the gate received: reranked (and escalated, when the escalate stage re-ordered them), or
            in fused order.
        status: The gate's verdict (``evidence``, ``no_sufficient_evidence``, ``undecided``).
        status_basis: What the gate used, in words.
        channels: Per retrieval channel, the chunk ids it returned, best first (empty when fused natively).
        fused: The fused chunk ids, best first.
        reranked: Whether the cross-encoder ordered ``candidates`` (False: disabled or a fallback).
        stage_hits: The hits each stage handed on, best first: ``retrieved`` (fused, before dedup), ``reranked``
            (``candidates``), ``selected`` (after the gate, business rules and selection) and ``expanded`` (the blocks
            the pack stage was given); :mod:`es_rag.evaluation.evidence` places a lost answer at its stage with them.
    """

    query: str
    hits: list[Hit]
    context: PackedContext
    trace: Trace
    candidates: list[Hit]
    status: str = "undecided"
    status_basis: str = ""
    channels: dict[str, list[str]] = field(default_factory=dict)
    fused: list[str] = field(default_factory=list)
    reranked: bool = False
    stage_hits: dict[str, list[Hit]] = field(default_factory=dict)

    @property
    def no_sufficient_evidence(self) -> bool:
        """True when the calibrated gate found no hit good enough to answer from."""
        return self.status == NO_SUFFICIENT_EVIDENCE

    def to_dict(self) -> dict[str, Any]:
        """The JSON printed by ``es-rag search --json``."""
        return {
            "query": self.query,
            "status": self.status,
            "status_basis": self.status_basis,
            "hits": [hit_to_dict(h) for h in self.hits],
            "context": self.context.to_dict(),
            "trace": self.trace.to_dict(),
        }


def hit_to_dict(hit: Hit) -> dict[str, Any]:
    """JSON form of a hit with every stage's score.

    Args:
        hit: The hit.
    """
    out: dict[str, Any] = {
        "chunk_id": hit.chunk_id,
        "source_id": hit.source_id,
        "source_version": hit.source_version,
        "parent_id": hit.parent_id,
        "tenant_id": hit.tenant_id,
        "heading_path": list(hit.heading_path),
        "start_offset": hit.start_offset,
        "end_offset": hit.end_offset,
        "language": hit.language,
        "text": hit.text,
        "scores": hit.scores(),
        "ranks": dict(hit.ranks),
        "sources": list(hit.retrieval_sources),
        "truncated": hit.truncated,
        "expanded_from": list(hit.expanded_from),
    }
    if hit.page_start is not None:  # a paged source (PDF)
        out["page_start"] = hit.page_start
        out["page_end"] = hit.page_end
    if hit.page_label_start is not None:  # the labels the PDF prints on those pages
        out["page_label_start"] = hit.page_label_start
        out["page_label_end"] = hit.page_label_end
    if hit.visible_text is not None:  # HTML: ``text`` is the markup span, this is what the models read
        out["visible_text"] = hit.visible_text
    return out


def format_trace(result: SearchResult) -> str:
    """A readable, fixed-width trace of every stage.

    Args:
        result: A search result.
    """
    lines = [f"{'stage':<12} {'in':>5} {'out':>5} {'dropped':>8} {'ms':>9}"]
    for st in result.trace.stages:
        lines.append(f"{st.name:<12} {st.in_count:>5} {st.out_count:>5} {len(st.dropped):>8} {st.ms:>9.1f}")
    lines.append("paths:")
    for key, value in result.trace.paths.items():
        lines.append(f"  {key:<10} {value}")
    return "\n".join(lines)


def summarize_hits(hits: Sequence[Hit]) -> list[str]:
    """One line per hit with its scores, for the human-readable output.

    Args:
        hits: Hits to summarize.
    """
    rows = []
    for i, h in enumerate(hits, start=1):
        sc = h.scores()
        fmt = " ".join(f"{k}={v:.4f}" for k, v in sc.items() if v is not None)
        rows.append(f"{i:>2}. {h.source_id} § {' > '.join(h.heading_path) or '-'}  [{fmt}]")
    return rows
