"""Every post-retrieval stage returns one shape (:class:`es_rag.stages.base.StageOutput`) and loses nothing:
each hit a stage receives either passes or is dropped with a reason, on every path."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.corpus import (
    DIMS,
    TENANTS,
    OverlapReranker,
    RandomEmbedder,
    WordTokenizer,
    random_corpus,
    random_groups,
    random_query,
)

#: stages that only pass on or drop what they receive (fusion merges channel lists; retrieve and embed are not
#: post-retrieval stages)
FILTERING = ("dedup", "rerank", "gate", "boost", "select", "expand", "pack")


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"expand_mode": "parent"},
        {"expand_mode": "neighbors", "expand_neighbors": 2},
        # the cliff applies only to a calibrated model: an explicit temperature counts as one
        {
            "gate_cliff": 0.05,
            "gate_margin": 0.5,
            "dedup_near_threshold": 0.5,
            "rerank_calibration": "sigmoid",
            "rerank_temperature": 1.0,
        },
        {"freshness_weight": 0.2, "source_tiers": {"src-1*": 0.3}, "max_chunks_per_parent": 1},
        {"token_budget": 40},
    ],
)
@pytest.mark.parametrize("reranker", [None, OverlapReranker])
def test_each_stage_passes_or_drops_every_hit_with_a_reason(extra: dict[str, Any], reranker: Any) -> None:
    rng = random.Random(11)
    corpus = random_corpus(rng, n_children=240)
    backend = EmbeddedBackend(dims=DIMS)
    assert backend.index(corpus.children, corpus.parents).failed == []
    base = dict(vector_dims=DIMS, candidate_k=20, num_candidates=40, rerank_k=12, context_k=3, token_budget=400)
    settings = Settings(**{**base, "rerank_calibration": "none", **extra})
    pipe = RagPipeline(
        backend,
        embedder=RandomEmbedder(),
        settings=settings,
        tokenizer=WordTokenizer(),
        reranker=reranker() if reranker else None,
    )
    checked = 0
    dropped: Counter[str] = Counter()
    for _ in range(12):
        flt = SearchFilter(rng.choice(TENANTS), random_groups(rng))
        result = pipe.search(random_query(rng, identifier=rng.random() < 0.3), flt)
        for st in result.trace.stages:
            if st.name in FILTERING:
                assert st.in_count == st.out_count + len(st.dropped), (st.name, st.to_dict())
                assert all(d["reason"] for d in st.dropped), st.name
                dropped[st.name] += len(st.dropped)
                checked += 1
        assert [s.name for s in result.trace.stages if s.name in FILTERING] == list(FILTERING)
        assert len(result.hits) == len(result.context.citations)
    assert checked == 12 * len(FILTERING)
    assert dropped["select"] > 0 and dropped["rerank"] > 0  # the invariant was exercised, not vacuous
