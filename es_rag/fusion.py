"""Reciprocal rank fusion with exactly the semantics of Elasticsearch's ``rrf`` retriever.

Elasticsearch (``RRFRetrieverBuilder``): each child retriever returns its top ``rank_window_size``
documents; a document at 1-based rank ``r`` in child ``i`` adds ``weight_i / (rank_constant + r)``;
documents a child did not return add nothing; the fused list is cut to ``rank_window_size`` and
``from``/``size`` page inside it. The same function serves the client-side path over ``_msearch`` and
the embedded backend, so all three produce the same ranking for the same child lists.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from es_rag.errors import ConfigError


@dataclass(frozen=True)
class FusedItem:
    """One fused document: its id, RRF score and 1-based rank in each child list that returned it."""

    id: Any
    score: float
    ranks: tuple[int | None, ...] = field(default=())


def reciprocal_rank_fusion(
    ranked_lists: Sequence[Sequence[Hashable]],
    *,
    rank_constant: int = 60,
    rank_window_size: int = 10,
    weights: Sequence[float] | None = None,
    tiebreak: Callable[[Any], Any] | None = None,
) -> list[FusedItem]:
    """Fuse ranked id lists with RRF.

    Args:
        ranked_lists: One sequence of ids per child retriever, best first.
        rank_constant: ``k`` in ``1 / (k + rank)``; Elasticsearch requires >= 1.
        rank_window_size: Each child list is cut to this many ids before fusion, and the fused
            result holds at most this many items (Elasticsearch's default is 10).
        weights: One multiplier per child list (default 1.0 each); must be >= 0.
        tiebreak: Key function for equal scores, ascending; without it ties keep the order in which
            the ids first appear (child lists scanned in order, each best first).

    Returns:
        The fused window, best first. Page with ``window[from_:from_ + size]``.

    Raises:
        ConfigError: On a non-positive ``rank_constant`` or ``rank_window_size``, a weight count
            that does not match the lists, a negative weight, or an id repeated inside one list.
    """
    if not isinstance(rank_constant, int) or rank_constant < 1:
        raise ConfigError(f"rank_constant: must be an integer >= 1, got {rank_constant!r}")
    if not isinstance(rank_window_size, int) or rank_window_size < 1:
        raise ConfigError(f"rank_window_size: must be an integer >= 1, got {rank_window_size!r}")
    if weights is None:
        weights = [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ConfigError(f"weights: {len(weights)} given for {len(ranked_lists)} ranked lists")
    if any(w < 0 for w in weights):
        raise ConfigError(f"weights: must be >= 0, got {list(weights)}")

    scores: dict[Any, float] = {}
    ranks: dict[Any, list[int | None]] = {}
    for child, (ids, weight) in enumerate(zip(ranked_lists, weights, strict=True)):
        window = list(ids)[:rank_window_size]
        if len(set(window)) != len(window):
            raise ConfigError(f"ranked_lists[{child}]: an id appears more than once")
        for rank, doc_id in enumerate(window, start=1):
            if doc_id not in scores:
                scores[doc_id] = 0.0
                ranks[doc_id] = [None] * len(ranked_lists)
            scores[doc_id] += weight / (rank_constant + rank)
            ranks[doc_id][child] = rank

    order = list(scores)  # insertion order == first appearance
    if tiebreak is None:
        position = {doc_id: i for i, doc_id in enumerate(order)}
        order.sort(key=lambda d: (-scores[d], position[d]))
    else:
        order.sort(key=lambda d: (-scores[d], tiebreak(d)))
    return [FusedItem(id=d, score=scores[d], ranks=tuple(ranks[d])) for d in order[:rank_window_size]]
