"""Parent / neighbour expansion after selection (seed 000 parent/child, seed 002 §27.9).

Retrieval and selection work on small children; the LLM often needs the section around them.

* ``parent``: each selected child is replaced by its parent section, fetched with
  ``backend.get_parents(ids, filter)`` (the hard filter is applied there). Children that share a
  parent become **one** block (dedup by ``parent_id``) whose scores are the **maximum** of its
  children's scores (a section is as relevant as its best child; a sum would favour long sections
  that happened to be cut into many children), placed where its best child was, with
  ``expanded_from`` listing the children. A parent longer than ``max_parent_tokens`` or not returned
  under the filter leaves the child as it is.
* ``neighbors``: each selected child is extended with up to ``window`` adjacent children of the same
  source, version and parent section, fetched with ``backend.get_neighbors(anchors, filter, window)``.
  The block spans the pieces' offsets; overlapping text (window overlap) is written once and pieces
  are joined by a blank line (between children of one section the source holds only whitespace).
  Blocks of two selected children that share a piece are merged (max score, best position).

Tenant isolation: everything is fetched under the caller's filter, and any returned document whose
``tenant_id`` differs from the filter's is refused again here (defence in depth).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from es_rag.errors import EsRagError
from es_rag.filters import SearchFilter
from es_rag.records import Hit
from es_rag.settings import ExpandSettings
from es_rag.stages.base import StageOutput

SCORE_FIELDS = ("bm25_score", "dense_score", "fused_score", "rerank_score", "calibrated_score", "final_score")


def _max_scores(members: Sequence[Hit]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in SCORE_FIELDS:
        values = [getattr(m, name) for m in members if getattr(m, name) is not None]
        out[name] = max(values) if values else None
    return out


def _sources(members: Sequence[Hit]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for m in members for s in m.retrieval_sources))


def expand_parents(hits: Sequence[Hit], backend: Any, flt: SearchFilter, *, max_parent_tokens: int) -> StageOutput:
    """Replace children by their parent sections, one block per parent.

    Args:
        hits: Selected hits, best first.
        backend: Anything with ``get_parents(ids, filter)``.
        flt: The caller's hard filter.
        max_parent_tokens: Longest parent (``token_count``) swapped in.
    """
    ids = list(dict.fromkeys(h.parent_id for h in hits if h.parent_id))
    fetched = backend.get_parents(ids, flt) if ids else {}
    refused = [pid for pid, p in fetched.items() if p.tenant_id != flt.tenant_id]
    parents = {pid: p for pid, p in fetched.items() if pid not in refused}
    groups: dict[str, list[Hit]] = {}
    for h in hits:
        if h.parent_id is not None and h.parent_id in parents:
            groups.setdefault(h.parent_id, []).append(h)
    out: list[Hit] = []
    dropped: list[tuple[str, str]] = []
    kept_as_child: dict[str, str] = {}
    emitted: set[str] = set()
    for h in hits:
        pid = h.parent_id
        parent = parents.get(pid) if pid else None
        if pid is None or parent is None:
            if pid is not None:
                kept_as_child[h.chunk_id] = "parent not available under the filter"
            out.append(h)
            continue
        size = parent.token_count if parent.token_count is not None else len(parent.text.split())
        if size > max_parent_tokens:
            kept_as_child[h.chunk_id] = f"parent has {size} tokens > {max_parent_tokens}"
            out.append(h)
            continue
        if pid in emitted:
            dropped.append((h.chunk_id, f"merged into parent {pid}"))
            continue
        members = groups[pid]
        emitted.add(pid)
        out.append(
            parent.replace(
                **_max_scores(members),
                retrieval_sources=_sources(members),
                ranks=dict(members[0].ranks),
                reranker_model=members[0].reranker_model,
                boost_score=members[0].boost_score,
                expanded_from=tuple(m.chunk_id for m in members),
                vector=None,
            )
        )
    info = {"mode": "parent", "parents": len(emitted), "kept_as_child": kept_as_child}
    if refused:
        info["refused_other_tenant"] = refused
    return StageOutput(
        hits=out, dropped=dropped, info=info, path="parent sections (dedup by parent_id, score = max of its children)"
    )


def merge_pieces(pieces: Sequence[Hit]) -> tuple[str, int | None, int | None]:
    """Text and span of contiguous pieces of one source (sorted by ``start_offset``).

    Overlapping characters are written once; pieces that do not touch are joined by a blank line.

    Args:
        pieces: Children of one source with offsets.
    """
    ordered = sorted(pieces, key=lambda p: p.start_offset or 0)
    text = ordered[0].text
    start = ordered[0].start_offset
    end = ordered[0].end_offset
    for p in ordered[1:]:
        if p.start_offset is None or p.end_offset is None or end is None:
            text += "\n\n" + p.text
            continue
        if p.end_offset <= end:
            continue  # contained in what we already have
        if p.start_offset < end:
            text += p.text[end - p.start_offset :]
        else:
            text += "\n\n" + p.text
        end = p.end_offset
    return text, start, end


def expand_neighbors(hits: Sequence[Hit], backend: Any, flt: SearchFilter, *, window: int) -> StageOutput:
    """Extend each selected child with its neighbours; blocks sharing a piece are merged.

    Args:
        hits: Selected hits, best first.
        backend: Anything with ``get_neighbors(anchors, filter, window)``.
        flt: The caller's hard filter.
        window: Children per side.
    """
    anchors = [h for h in hits if h.start_offset is not None and h.end_offset is not None]
    fetched = backend.get_neighbors(anchors, flt, window) if anchors and window > 0 else {}
    refused: list[str] = []
    blocks: list[dict[str, Any]] = []  # {"anchors": [Hit], "pieces": {chunk_id: Hit}}
    owner: dict[str, int] = {}
    order: list[int | Hit] = []
    dropped: list[tuple[str, str]] = []
    for h in hits:
        if h.start_offset is None or h.end_offset is None:
            order.append(h)
            continue
        neigh = []
        for n in fetched.get(h.chunk_id, []):
            if n.tenant_id != flt.tenant_id:
                refused.append(n.chunk_id)
                continue
            neigh.append(n)
        pieces = {h.chunk_id: h, **{n.chunk_id: n for n in neigh}}
        shared = next((owner[c] for c in pieces if c in owner), None)
        if shared is None:
            blocks.append({"anchors": [h], "pieces": pieces})
            idx = len(blocks) - 1
            order.append(idx)
        else:
            idx = shared
            blocks[idx]["anchors"].append(h)
            blocks[idx]["pieces"].update(pieces)
            dropped.append((h.chunk_id, f"merged into the neighbour block of {blocks[idx]['anchors'][0].chunk_id}"))
        for c in pieces:
            owner.setdefault(c, idx)
    out: list[Hit] = []
    for item in order:
        if isinstance(item, Hit):
            out.append(item)
            continue
        block = blocks[item]
        members: list[Hit] = block["anchors"]
        pieces_list = list(block["pieces"].values())
        text, start, end = merge_pieces(pieces_list)
        ids = tuple(p.chunk_id for p in sorted(pieces_list, key=lambda p: p.start_offset or 0))
        out.append(
            members[0].replace(
                **_max_scores(members),
                text=text,
                start_offset=start,
                end_offset=end,
                token_count=None,
                content_hash=None,
                retrieval_sources=_sources(members),
                expanded_from=ids if len(ids) > 1 else (),
                vector=None,
            )
        )
    info: dict[str, Any] = {"mode": "neighbors", "window": window, "blocks": len(blocks)}
    if refused:
        info["refused_other_tenant"] = refused
    return StageOutput(hits=out, dropped=dropped, info=info, path=f"neighbours +/-{window} within the parent section")


def run(hits: Sequence[Hit], backend: Any, flt: SearchFilter, settings: ExpandSettings) -> StageOutput:
    """The expand stage: parent sections or neighbouring children, under the caller's filter; when the backend
    fails, the selected chunks are kept and the path says so.

    Args:
        hits: Selected hits, best first.
        backend: Anything with ``get_parents`` / ``get_neighbors``.
        flt: The caller's hard filter (with its version snapshot).
        settings: Mode, window and the longest parent swapped in.
    """
    if settings.mode == "none" or not hits:
        return StageOutput(hits=list(hits), path="none")
    try:
        if settings.mode == "parent":
            return expand_parents(hits, backend, flt, max_parent_tokens=settings.max_parent_tokens)
        return expand_neighbors(hits, backend, flt, window=settings.neighbors)
    except (EsRagError, OSError) as exc:
        return StageOutput(
            hits=list(hits),
            info={"fallback": True},
            path=f"fallback: selected chunks kept (expansion failed: {exc})",
        )
