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

Merging empties slots: ``context_k`` children became fewer blocks. With a :class:`Refill` (the pipeline always
passes one) they are refilled from the ranked remainder -- the hits selection did not choose, best first
(:func:`es_rag.stages.select.remainder`) -- under the selection's per-source / per-parent caps counted over the
selected and refilled children together, refusing any hit of another tenant or outside the caller's ACL groups.
A refill fills a slot or is not taken: a hit already inside a block, or whose block would merge with one, is
skipped. ``info["refilled"]`` and ``info["refill_skipped"]`` (with reasons) record it; the refilled ids are the
stage output's ``added``. The budget is the pack stage's: a block that does not fit there falls back to the
children :func:`fallbacks` names.

Tenant isolation: everything is fetched under the caller's filter, and any returned document whose
``tenant_id`` differs from the filter's is refused again here (defence in depth).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from es_rag.chunking.html import visible_text
from es_rag.errors import EsRagError
from es_rag.filters import SearchFilter
from es_rag.records import Hit
from es_rag.settings import ExpandSettings, SelectSettings
from es_rag.stages.base import StageOutput
from es_rag.stages.pack import Fallback
from es_rag.stages.select import cap_reason

SCORE_FIELDS = ("bm25_score", "dense_score", "fused_score", "rerank_score", "calibrated_score", "final_score")


def _max_scores(members: Sequence[Hit]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in SCORE_FIELDS:
        values = [getattr(m, name) for m in members if getattr(m, name) is not None]
        out[name] = max(values) if values else None
    return out


def _sources(members: Sequence[Hit]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for m in members for s in m.retrieval_sources))


@dataclass(frozen=True)
class Refill:
    """Where the slots that merging empties are refilled from.

    Attributes:
        remainder: The hits selection did not choose, best first (:func:`es_rag.stages.select.remainder`).
        slots: Blocks wanted (``context_k``).
        max_per_source: The selection's per-source cap, over the selected and refilled hits together.
        max_per_parent: The selection's per-parent cap, likewise.
    """

    remainder: Sequence[Hit]
    slots: int
    max_per_source: int | None = None
    max_per_parent: int | None = None

    @classmethod
    def of(cls, remainder: Sequence[Hit], settings: SelectSettings) -> Refill:
        """The refill of a selection made with ``settings``.

        Args:
            remainder: The hits selection did not choose, best first.
            settings: ``context_k`` and the caps.
        """
        return cls(
            remainder=remainder,
            slots=settings.context_k,
            max_per_source=settings.max_chunks_per_source,
            max_per_parent=settings.max_chunks_per_parent,
        )


def _outside(hit: Hit, flt: SearchFilter) -> str | None:
    """Why a remainder hit is refused as a refill although retrieval already ran under ``flt`` (defence in depth)."""
    if hit.tenant_id != flt.tenant_id:
        return f"refused: tenant {hit.tenant_id!r} is not the caller's"
    if not set(hit.acl) & set(flt.groups):
        return "refused: none of its ACL groups is the caller's"
    return None


class _Refiller:
    """The refill loop's state: what is left of the remainder (rank order), what was taken, what was skipped and why.

    Each round takes up to ``n`` admissible hits: inside the filter, within the caps counted over the selected and
    refilled hits, and not already inside a block. A hit that would break a cap only together with another hit of the
    same round, or that ``clash`` defers, waits for the next round; every other refusal is final (blocks and the
    chosen set only grow, so it would be refused again).
    """

    def __init__(self, plan: Refill, selected: Sequence[Hit], flt: SearchFilter) -> None:
        self.plan = plan
        self.flt = flt
        self.pending = list(plan.remainder)
        self.chosen = list(selected)
        self.taken: list[Hit] = []
        self.skipped: dict[str, str] = {}

    def _cap(self, hit: Hit, chosen: Sequence[Hit]) -> str | None:
        return cap_reason(hit, chosen, max_per_source=self.plan.max_per_source, max_per_parent=self.plan.max_per_parent)

    def next_batch(
        self, n: int, covered: Callable[[Hit], str | None], clash: Callable[[Hit, list[Hit]], bool]
    ) -> list[Hit]:
        batch: list[Hit] = []
        waiting: list[Hit] = []
        for i, h in enumerate(self.pending):
            if len(batch) == n:
                waiting.extend(self.pending[i:])
                break
            reason = _outside(h, self.flt) or self._cap(h, self.chosen) or covered(h)
            if reason is not None:
                self.skipped[h.chunk_id] = reason
            elif self._cap(h, [*self.chosen, *batch]) is not None or clash(h, batch):
                waiting.append(h)
            else:
                batch.append(h)
        self.pending = waiting
        return batch

    def accept(self, hit: Hit) -> None:
        self.chosen.append(hit)
        self.taken.append(hit)

    def record(self, info: dict[str, Any]) -> str:
        """Write what was refilled and skipped into ``info``; the path's suffix."""
        if self.taken:
            info["refilled"] = [h.chunk_id for h in self.taken]
        if self.skipped:
            info["refill_skipped"] = dict(self.skipped)
        n = len(self.taken)
        return f"; {n} merged slot{'s' if n != 1 else ''} refilled from the ranked remainder" if n else ""


def _page_range(pieces: Sequence[Hit]) -> dict[str, Any]:
    """The pages of a block merged from ``pieces``: from the first piece's first page to the last one's last, with
    the printed labels of those two pages when the pieces carry them (None when no piece has pages)."""
    paged = [p for p in pieces if p.page_start is not None]
    if not paged:
        return {"page_start": None, "page_end": None, "page_label_start": None, "page_label_end": None}
    first = min(paged, key=lambda p: p.page_start or 0)
    last = max(paged, key=lambda p: p.page_end if p.page_end is not None else p.page_start or 0)
    return {
        "page_start": first.page_start,
        "page_end": last.page_end if last.page_end is not None else last.page_start,
        "page_label_start": first.page_label_start,
        "page_label_end": last.page_label_end if last.page_label_end is not None else last.page_label_start,
    }


def _parent_block(parent: Hit, members: Sequence[Hit]) -> Hit:
    return parent.replace(
        **_max_scores(members),
        retrieval_sources=_sources(members),
        ranks=dict(members[0].ranks),
        reranker_model=members[0].reranker_model,
        boost_score=members[0].boost_score,
        expanded_from=tuple(m.chunk_id for m in members),
        vector=None,
    )


def expand_parents(
    hits: Sequence[Hit], backend: Any, flt: SearchFilter, *, max_parent_tokens: int, refill: Refill | None = None
) -> StageOutput:
    """Replace children by their parent sections, one block per parent; slots that merging empties are refilled.

    Args:
        hits: Selected hits, best first.
        backend: Anything with ``get_parents(ids, filter)``.
        flt: The caller's hard filter.
        max_parent_tokens: Longest parent (``token_count``) swapped in.
        refill: Where merged slots are refilled from; None = they stay empty.
    """
    parents: dict[str, Hit] = {}
    refused: list[str] = []
    asked: set[str] = set()

    def fetch(batch: Sequence[Hit]) -> None:
        ids = [pid for pid in dict.fromkeys(h.parent_id for h in batch if h.parent_id) if pid not in asked]
        asked.update(ids)
        for pid, p in (backend.get_parents(ids, flt) if ids else {}).items():
            if p.tenant_id != flt.tenant_id:
                refused.append(pid)
            else:
                parents[pid] = p

    def swap(h: Hit) -> tuple[str | None, str | None]:
        """The parent id ``h`` is swapped for, else None and why the child stays (None: it has no parent)."""
        pid = h.parent_id
        if pid is None:
            return None, None
        parent = parents.get(pid)
        if parent is None:
            return None, "parent not available under the filter"
        size = parent.token_count if parent.token_count is not None else len(parent.text.split())
        if size > max_parent_tokens:
            return None, f"parent has {size} tokens > {max_parent_tokens}"
        return pid, None

    fetch(hits)
    groups: dict[str, list[Hit]] = {}
    for h in hits:
        pid, _ = swap(h)
        if pid is not None:
            groups.setdefault(pid, []).append(h)
    out: list[Hit] = []
    dropped: list[tuple[str, str]] = []
    kept_as_child: dict[str, str] = {}
    emitted: set[str] = set()
    for h in hits:
        pid, why = swap(h)
        if pid is None:
            if why is not None:
                kept_as_child[h.chunk_id] = why
            out.append(h)
            continue
        if pid in emitted:
            dropped.append((h.chunk_id, f"merged into parent {pid}"))
            continue
        emitted.add(pid)
        out.append(_parent_block(parents[pid], groups[pid]))
    info: dict[str, Any] = {"mode": "parent", "parents": 0, "kept_as_child": kept_as_child}
    path = "parent sections (dedup by parent_id, score = max of its children)"
    added: list[str] = []
    if refill is not None and dropped:
        r = _Refiller(refill, hits, flt)
        while len(out) < refill.slots:
            batch = r.next_batch(
                refill.slots - len(out),
                covered=lambda h: f"already inside parent {h.parent_id}" if h.parent_id in emitted else None,
                clash=lambda h, batch: h.parent_id is not None and any(b.parent_id == h.parent_id for b in batch),
            )
            if not batch:
                break
            fetch(batch)
            for h in batch:  # distinct parents, none emitted yet: each one fills a slot
                r.accept(h)
                pid, why = swap(h)
                if pid is None:
                    if why is not None:
                        kept_as_child[h.chunk_id] = why
                    out.append(h)
                else:
                    emitted.add(pid)
                    out.append(_parent_block(parents[pid], [h]))
        path += r.record(info)
        added = [h.chunk_id for h in r.taken]
    info["parents"] = len(emitted)
    if refused:
        info["refused_other_tenant"] = refused
    return StageOutput(hits=out, dropped=dropped, info=info, path=path, added=added)


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


def merge_visible(pieces: Sequence[Hit]) -> str | None:
    """Visible text of the block :func:`merge_pieces` builds, when the pieces carry one (HTML); None otherwise.

    A piece on its own keeps its stored ``visible_text``; pieces that overlap are one markup span of the source,
    whose visible text is read from that span (:func:`es_rag.chunking.html.visible_text`); spans that do not
    touch are joined by a blank line, as in :func:`merge_pieces`.

    Args:
        pieces: Children of one source with offsets.
    """
    if all(p.visible_text is None for p in pieces):
        return None
    runs: list[list[Hit]] = []
    end: int | None = None
    for p in sorted(pieces, key=lambda p: p.start_offset or 0):
        if runs and p.start_offset is not None and p.end_offset is not None and end is not None:
            if p.end_offset <= end:
                continue  # contained in what we already have
            if p.start_offset < end:
                runs[-1].append(p)
                end = p.end_offset
                continue
        if not runs or (p.end_offset is not None and end is not None):
            end = p.end_offset
        runs.append([p])
    return "\n\n".join(run[0].display_text if len(run) == 1 else visible_text(merge_pieces(run)[0]) for run in runs)


def expand_neighbors(
    hits: Sequence[Hit], backend: Any, flt: SearchFilter, *, window: int, refill: Refill | None = None
) -> StageOutput:
    """Extend each selected child with its neighbours; blocks sharing a piece are merged, and the slots that merging
    empties are refilled.

    Args:
        hits: Selected hits, best first.
        backend: Anything with ``get_neighbors(anchors, filter, window)``.
        flt: The caller's hard filter.
        window: Children per side.
        refill: Where merged slots are refilled from; None = they stay empty.
    """
    refused: list[str] = []

    def fetch(batch: Sequence[Hit]) -> dict[str, list[Hit]]:
        anchors = [h for h in batch if h.start_offset is not None and h.end_offset is not None]
        got = backend.get_neighbors(anchors, flt, window) if anchors and window > 0 else {}
        kept: dict[str, list[Hit]] = {}
        for h in anchors:
            kept[h.chunk_id] = []
            for n in got.get(h.chunk_id, []):
                if n.tenant_id != flt.tenant_id:
                    refused.append(n.chunk_id)
                else:
                    kept[h.chunk_id].append(n)
        return kept

    fetched = fetch(hits)
    blocks: list[dict[str, Any]] = []  # {"anchors": [Hit], "pieces": {chunk_id: Hit}}
    owner: dict[str, int] = {}
    order: list[int | Hit] = []
    dropped: list[tuple[str, str]] = []

    def pieces_of(h: Hit, got: dict[str, list[Hit]]) -> dict[str, Hit]:
        return {h.chunk_id: h, **{n.chunk_id: n for n in got.get(h.chunk_id, [])}}

    def new_block(h: Hit, pieces: dict[str, Hit]) -> None:
        blocks.append({"anchors": [h], "pieces": pieces})
        order.append(len(blocks) - 1)
        for c in pieces:
            owner.setdefault(c, len(blocks) - 1)

    for h in hits:
        if h.start_offset is None or h.end_offset is None:
            order.append(h)
            continue
        pieces = pieces_of(h, fetched)
        shared = next((owner[c] for c in pieces if c in owner), None)
        if shared is None:
            new_block(h, pieces)
            continue
        blocks[shared]["anchors"].append(h)
        blocks[shared]["pieces"].update(pieces)
        dropped.append((h.chunk_id, f"merged into the neighbour block of {blocks[shared]['anchors'][0].chunk_id}"))
        for c in pieces:
            owner.setdefault(c, shared)
    info: dict[str, Any] = {"mode": "neighbors", "window": window, "blocks": 0}
    path = f"neighbours +/-{window} within the parent section"
    added: list[str] = []
    if refill is not None and dropped:
        r = _Refiller(refill, hits, flt)

        def covered(h: Hit) -> str | None:
            idx = owner.get(h.chunk_id)
            return (
                None if idx is None else f"already inside the neighbour block of {blocks[idx]['anchors'][0].chunk_id}"
            )

        while len(order) < refill.slots:
            batch = r.next_batch(refill.slots - len(order), covered=covered, clash=lambda h, batch: False)
            if not batch:
                break
            got = fetch(batch)
            for h in batch:
                if h.start_offset is None or h.end_offset is None:
                    r.accept(h)
                    order.append(h)
                    continue
                pieces = pieces_of(h, got)
                shared = next((owner[c] for c in pieces if c in owner), None)
                if shared is not None:  # a refill fills a slot or is not taken
                    r.skipped[h.chunk_id] = (
                        f"would merge into the neighbour block of {blocks[shared]['anchors'][0].chunk_id}"
                    )
                    continue
                r.accept(h)
                new_block(h, pieces)
        path += r.record(info)
        added = [h.chunk_id for h in r.taken]
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
                visible_text=merge_visible(pieces_list),
                start_offset=start,
                end_offset=end,
                **_page_range(pieces_list),
                token_count=None,
                content_hash=None,
                retrieval_sources=_sources(members),
                expanded_from=ids if len(ids) > 1 else (),
                vector=None,
            )
        )
    info["blocks"] = len(blocks)
    if refused:
        info["refused_other_tenant"] = refused
    return StageOutput(hits=out, dropped=dropped, info=info, path=path, added=added)


def fallbacks(blocks: Sequence[Hit], units: Sequence[Hit]) -> dict[str, Fallback]:
    """For each expanded block, the retrieved units it holds (the selected and refilled children), best first:
    what the pack stage packs instead when the block does not fit the budget.

    A parent block's id is the parent's, outside its ``expanded_from``; a neighbour block keeps its best
    anchor's id, inside it. Neighbour pieces that no one retrieved are not units and never fall back.

    Args:
        blocks: The expand stage's output.
        units: The hits it expanded (selected, then refilled), best first.
    """
    out: dict[str, Fallback] = {}
    for b in blocks:
        inside = set(b.expanded_from)
        children = tuple(u for u in units if u.chunk_id in inside)
        if children:
            label = f"neighbour block of {b.chunk_id}" if b.chunk_id in inside else f"parent {b.chunk_id}"
            out[b.chunk_id] = Fallback(label=label, children=children)
    return out


def run(
    hits: Sequence[Hit], backend: Any, flt: SearchFilter, settings: ExpandSettings, *, refill: Refill | None = None
) -> StageOutput:
    """The expand stage: parent sections or neighbouring children, under the caller's filter, with the slots that
    merging empties refilled from ``refill``; when the backend fails, the selected chunks are kept and the path
    says so.

    Args:
        hits: Selected hits, best first.
        backend: Anything with ``get_parents`` / ``get_neighbors``.
        flt: The caller's hard filter (with its version snapshot).
        settings: Mode, window and the longest parent swapped in.
        refill: The ranked remainder, ``context_k`` and the caps; None = merged slots stay empty.
    """
    if settings.mode == "none" or not hits:
        return StageOutput(hits=list(hits), path="none")
    try:
        if settings.mode == "parent":
            return expand_parents(hits, backend, flt, max_parent_tokens=settings.max_parent_tokens, refill=refill)
        return expand_neighbors(hits, backend, flt, window=settings.neighbors, refill=refill)
    except (EsRagError, OSError) as exc:
        return StageOutput(
            hits=list(hits),
            info={"fallback": True},
            path=f"fallback: selected chunks kept (expansion failed: {exc})",
        )
