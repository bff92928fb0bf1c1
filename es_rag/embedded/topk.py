"""The top k of a score array without sorting all of it, in the order a stable sort gives (ties by position): what
every channel of the embedded backend returns, and what its oracle tests compare with Lucene's."""

from __future__ import annotations

import numpy as np


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest ``scores``, best first, ties by position (what a stable sort of ``-scores``
    gives), without sorting every score: ``argpartition`` to the k-th value, then a sort of what reaches it.

    Args:
        scores: One score per position.
        k: How many.
    """
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.intp)
    if k < n:
        kth = scores[np.argpartition(-scores, k - 1)[k - 1]]
        head = np.flatnonzero(scores >= kth)  # every tie of the k-th value, ascending: the stable order's candidates
    else:
        head = np.arange(n)
    return head[np.argsort(-scores[head], kind="stable")][:k]
