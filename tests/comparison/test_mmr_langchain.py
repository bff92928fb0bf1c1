"""es_rag.stages.select.mmr against LangChain's reference ``maximal_marginal_relevance`` on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

# a dev dependency (pyproject [dev]): imported, not importorskip-ped, so a missing install fails the run instead of
# silently dropping the only independent MMR oracle
from langchain_core.vectorstores import utils as lc_utils

from es_rag.stages.select import mmr


@pytest.mark.parametrize("seed", range(40))
def test_same_selection_as_langchain(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    dims = int(rng.integers(2, 48))
    query = rng.normal(size=dims)
    cands = rng.normal(size=(n, dims))
    if seed % 4 == 0:  # near duplicates make the diversity term decide
        cands[1:3] = cands[0] + rng.normal(scale=1e-3, size=(2, dims))
    lam = float(rng.choice([0.0, 0.25, 0.5, 0.7, 0.9, 1.0]))
    k = int(rng.integers(1, n + 1))
    ours = mmr(query, cands, lambda_mult=lam, k=k)
    theirs = lc_utils.maximal_marginal_relevance(query, list(cands), lambda_mult=lam, k=k)
    assert ours == [int(i) for i in theirs]
