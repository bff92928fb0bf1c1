"""Rank and score fusion with exactly the semantics of Elasticsearch's ``rrf`` and ``linear`` retrievers.

Elasticsearch (``RRFRetrieverBuilder.combineInnerRetrieverResults``): each child retriever returns its top
``rank_window_size`` documents; a document at 1-based rank ``r`` in child ``i`` adds
``weight_i * (1.0f / (rank_constant + r))`` to a **32-bit float** score, children in request order;
documents a child did not return add nothing; the fused list is sorted by score (ties: smaller shard, then
smaller Lucene doc id), cut to ``rank_window_size``, and ``from``/``size`` page inside it
(``size <= rank_window_size`` is enforced). :func:`reciprocal_rank_fusion` reproduces the float32
arithmetic step by step, so a client-side fused score equals the ``_score`` the native retriever returns.

``LinearRetrieverBuilder``: each child's top ``rank_window_size`` scores are normalised per child
(``none``, ``minmax``, ``l2_norm``; see :func:`normalize_scores`), multiplied by the child's weight and
summed in float32; missing documents add 0. ``zscore`` is an es_rag-only normaliser (client path only).

The same functions serve the client-side path over ``_msearch`` and the embedded backend, so every path
produces the same ranking for the same child lists. The one thing the client cannot see is Lucene's doc
id: exact score ties are broken by first appearance (child lists scanned in order, each best first) or
by a caller-given key, where Elasticsearch uses (shard, doc id).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from es_rag.backend import Retrieval
from es_rag.errors import ConfigError
from es_rag.records import CHANNEL_SCORE_FIELD, Hit
from es_rag.settings import Settings
from es_rag.stages.base import StageOutput

DEFAULT_RANK_WINDOW_SIZE = 10
"""Elasticsearch's ``RankBuilder.DEFAULT_RANK_WINDOW_SIZE``."""
DEFAULT_RANK_CONSTANT = 60
"""Elasticsearch's ``RRFRetrieverBuilder.DEFAULT_RANK_CONSTANT``."""
NORMALIZERS = ("none", "minmax", "l2_norm", "zscore")
"""Score normalisers of :func:`linear_fusion`; the first three are Elasticsearch's ``ScoreNormalizer`` s."""
NATIVE_NORMALIZERS = ("none", "minmax", "l2_norm")
_EPSILON = np.float32(1e-6)


@dataclass(frozen=True)
class FusedItem:
    """One fused document: its id, fused score and 1-based rank in each child list that returned it."""

    id: Any
    score: float
    ranks: tuple[int | None, ...] = field(default=())


def check_window(rank_window_size: int, size: int, from_: int = 0) -> None:
    """Elasticsearch's request validation of a compound retriever's window.

    Args:
        rank_window_size: The retriever's ``rank_window_size``.
        size: The search ``size``.
        from_: The search ``from``.

    Raises:
        ConfigError: When ``rank_window_size < 1``, ``size < 0``, ``from < 0`` or ``size > rank_window_size``
            (Elasticsearch answers 400 ``[rank_window_size] must be greater than or equal to [size]``).
    """
    if not isinstance(rank_window_size, int) or rank_window_size < 1:
        raise ConfigError(f"rank_window_size: must be an integer >= 1, got {rank_window_size!r}")
    if size < 0 or from_ < 0:
        raise ConfigError(f"size and from must be >= 0, got size={size}, from={from_}")
    if size > rank_window_size:
        raise ConfigError(
            f"rank_window_size ({rank_window_size}) must be greater than or equal to size ({size}), "
            "as Elasticsearch requires"
        )


def _validate(n_lists: int, rank_window_size: int, weights: Sequence[float] | None) -> list[float]:
    if not isinstance(rank_window_size, int) or rank_window_size < 1:
        raise ConfigError(f"rank_window_size: must be an integer >= 1, got {rank_window_size!r}")
    ws = [1.0] * n_lists if weights is None else [float(w) for w in weights]
    if len(ws) != n_lists:
        raise ConfigError(f"weights: {len(ws)} given for {n_lists} ranked lists")
    if any(w < 0 or math.isnan(w) for w in ws):
        raise ConfigError(f"weights: must be >= 0, got {ws}")
    return ws


def _order(scores: dict[Any, np.float32], tiebreak: Callable[[Any], Any] | None, window: int) -> list[Any]:
    order = list(scores)  # insertion order == first appearance
    if tiebreak is None:
        position = {doc_id: i for i, doc_id in enumerate(order)}
        order.sort(key=lambda d: (-float(scores[d]), position[d]))
    else:
        order.sort(key=lambda d: (-float(scores[d]), tiebreak(d)))
    return order[:window]


def reciprocal_rank_fusion(
    ranked_lists: Sequence[Sequence[Hashable]],
    *,
    rank_constant: int = DEFAULT_RANK_CONSTANT,
    rank_window_size: int = DEFAULT_RANK_WINDOW_SIZE,
    weights: Sequence[float] | None = None,
    tiebreak: Callable[[Any], Any] | None = None,
) -> list[FusedItem]:
    """Fuse ranked id lists with RRF, in Elasticsearch's float32 arithmetic.

    Args:
        ranked_lists: One sequence of ids per child retriever, best first.
        rank_constant: ``k`` in ``1 / (k + rank)``; Elasticsearch requires >= 1 (default 60).
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
    ws = _validate(len(ranked_lists), rank_window_size, weights)
    one = np.float32(1.0)
    scores: dict[Any, np.float32] = {}
    ranks: dict[Any, list[int | None]] = {}
    for child, (ids, weight) in enumerate(zip(ranked_lists, ws, strict=True)):
        window = list(ids)[:rank_window_size]
        if len(set(window)) != len(window):
            raise ConfigError(f"ranked_lists[{child}]: an id appears more than once")
        w32 = np.float32(weight)
        for rank, doc_id in enumerate(window, start=1):
            if doc_id not in scores:
                scores[doc_id] = np.float32(0.0)
                ranks[doc_id] = [None] * len(ranked_lists)
            # Java: value.score += weights[findex] * (1.0f / (rankConstant + frank)), all float
            scores[doc_id] = np.float32(
                scores[doc_id] + np.float32(w32 * np.float32(one / np.float32(rank_constant + rank)))
            )
            ranks[doc_id][child] = rank
    return [
        FusedItem(id=d, score=float(scores[d]), ranks=tuple(ranks[d]))
        for d in _order(scores, tiebreak, rank_window_size)
    ]


def normalize_scores(scores: Sequence[float], normalizer: str) -> list[float]:
    """One child's scores normalised as Elasticsearch's ``ScoreNormalizer`` s do (float32).

    ``minmax``: ``(s - min) / (max - min)``; when ``max - min < 1e-6`` every score becomes ``min``
    (Elasticsearch's behaviour, not 1.0). ``l2_norm``: ``s / sqrt(sum s^2)`` unless the norm is < 1e-6.
    ``none``: unchanged. ``zscore`` (es_rag only): ``(s - mean) / std``, 0 when ``std < 1e-6``.

    Args:
        scores: One child's raw scores, best first.
        normalizer: ``none``, ``minmax``, ``l2_norm`` or ``zscore``.

    Raises:
        ConfigError: On an unknown normalizer.
    """
    if normalizer not in NORMALIZERS:
        raise ConfigError(f"normalizer: invalid value {normalizer!r}; valid values: {', '.join(NORMALIZERS)}")
    arr = np.asarray(scores, dtype=np.float32)
    if arr.size == 0 or normalizer == "none":
        return [float(x) for x in arr]
    if normalizer == "minmax":
        lo, hi = np.float32(arr.min()), np.float32(arr.max())
        if abs(lo - hi) < _EPSILON:
            return [float(lo)] * int(arr.size)
        return [float(np.float32(np.float32(s - lo) / np.float32(hi - lo))) for s in arr]
    if normalizer == "l2_norm":
        norm = math.sqrt(sum(float(s) * float(s) for s in arr))
        if norm < float(_EPSILON):
            return [float(x) for x in arr]
        return [float(np.float32(float(s) / norm)) for s in arr]
    mean = float(np.mean(arr, dtype=np.float64))
    std = float(np.std(arr, dtype=np.float64))
    if std < float(_EPSILON):
        return [0.0] * int(arr.size)
    return [float(np.float32((float(s) - mean) / std)) for s in arr]


def linear_fusion(
    scored_lists: Sequence[Sequence[tuple[Hashable, float]]],
    *,
    rank_window_size: int = DEFAULT_RANK_WINDOW_SIZE,
    weights: Sequence[float] | None = None,
    normalizer: str = "minmax",
    tiebreak: Callable[[Any], Any] | None = None,
) -> list[FusedItem]:
    """Weighted score fusion (Elasticsearch's ``linear`` retriever) over ``(id, raw score)`` lists.

    Args:
        scored_lists: One list per child, best first, of ``(id, raw score)`` pairs.
        rank_window_size: Each child list is cut to this many before normalising; the fused result
            holds at most this many items.
        weights: One multiplier per child (default 1.0); must be >= 0.
        normalizer: Per-child normaliser, see :func:`normalize_scores`.
        tiebreak: Key for equal scores, ascending (default: first appearance).

    Returns:
        The fused window, best first; ``ranks`` are the 1-based ranks in each child list.

    Raises:
        ConfigError: On a bad window, weights or normalizer, or an id repeated inside one list.
    """
    ws = _validate(len(scored_lists), rank_window_size, weights)
    scores: dict[Any, np.float32] = {}
    ranks: dict[Any, list[int | None]] = {}
    for child, (pairs, weight) in enumerate(zip(scored_lists, ws, strict=True)):
        window = list(pairs)[:rank_window_size]
        ids = [d for d, _ in window]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"scored_lists[{child}]: an id appears more than once")
        normed = normalize_scores([s for _, s in window], normalizer)
        w32 = np.float32(weight)
        for rank, (doc_id, value) in enumerate(zip(ids, normed, strict=True), start=1):
            if doc_id not in scores:
                scores[doc_id] = np.float32(0.0)
                ranks[doc_id] = [None] * len(scored_lists)
            v = np.float32(0.0) if math.isnan(value) else np.float32(value)
            scores[doc_id] = np.float32(scores[doc_id] + np.float32(w32 * v))
            ranks[doc_id][child] = rank
    return [
        FusedItem(id=d, score=float(scores[d]), ranks=tuple(ranks[d]))
        for d in _order(scores, tiebreak, rank_window_size)
    ]


def fuse_channels(channels: dict[str, list[Hit]], settings: Settings) -> list[Hit]:
    """Client-side fusion of the channel lists with the parameters of the native retriever: RRF
    (``rank_constant``, ``rank_window_size`` = ``candidate_k``, channel weights) or linear (normaliser, weights).

    Args:
        channels: Per channel, hits best first, each with its channel score.
        settings: Fusion and candidate settings.
    """
    fusion, window = settings.fusion, settings.retrieve.candidate_k
    names = list(channels)
    # A per-language dense weight (0 for a language the embedding model does not fit) belongs in channel_weights,
    # set per query from es_rag.query.bm25_route(query, settings).language before the search; native fusion reads
    # the same weights (es_rag.elasticsearch.bodies._fusion_body).
    weights = [fusion.channel_weights.get(n, 1.0) for n in names]
    if fusion.method == "linear":
        scored = [
            [(h.chunk_id, float(getattr(h, CHANNEL_SCORE_FIELD.get(n, "final_score")) or 0.0)) for h in channels[n]]
            for n in names
        ]
        fused = linear_fusion(scored, rank_window_size=window, weights=weights, normalizer=fusion.normalizer)
    else:
        lists = [[h.chunk_id for h in channels[n]] for n in names]
        fused = reciprocal_rank_fusion(
            lists, rank_constant=fusion.rank_constant, rank_window_size=window, weights=weights
        )
    by_id: dict[str, Hit] = {}
    for name in names:
        for h in channels[name]:
            base = by_id.get(h.chunk_id, h)
            attr = CHANNEL_SCORE_FIELD.get(name)
            by_id[h.chunk_id] = base.replace(**{attr: getattr(h, attr)}) if attr else base
    out = []
    for item in fused:
        ranks = {names[i]: r for i, r in enumerate(item.ranks) if r is not None}
        out.append(
            by_id[item.id].replace(
                fused_score=item.score, ranks=ranks, retrieval_sources=tuple(ranks), final_score=item.score
            )
        )
    return out


def run(retrieval: Retrieval, settings: Settings) -> StageOutput:
    """The fusion stage: the list Elasticsearch fused natively, else :func:`fuse_channels` over the channels.

    Args:
        retrieval: What the backend returned.
        settings: Fusion and candidate settings.
    """
    if retrieval.fused is not None:
        hits, path = list(retrieval.fused), f"{retrieval.path} (Elasticsearch retriever)"
    else:
        hits = fuse_channels(retrieval.channels, settings)
        fusion, window = settings.fusion, settings.retrieve.candidate_k
        if fusion.method == "linear":
            path = f"client-linear (normalizer={fusion.normalizer}, rank_window_size={window})"
        else:
            path = f"client-rrf (rank_constant={fusion.rank_constant}, rank_window_size={window})"
    fused = [{"id": h.chunk_id, "rank": i, "score": h.fused_score} for i, h in enumerate(hits, start=1)]
    return StageOutput(hits=hits, info={"fused": fused}, path=path)
