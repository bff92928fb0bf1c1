"""``eval --es`` on a real cluster: the corpus is written under a throw-away prefix, every query runs
there, and the cluster's BM25 (Lucene, 1-byte length norms) ranks like the embedded mirror."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.evaluation.run import evaluate
from es_rag.settings import Settings
from tests.support.beir import write_beir
from tests.support.live import SKIP_REASON, TEST_PREFIX, delete_created_assets

pytestmark = pytest.mark.live


def test_eval_on_the_cluster_matches_the_embedded_mirror(tiny_bi_encoder: Path, tmp_path: Path) -> None:
    url = os.environ.get("ES_RAG_TEST_ES_URL")
    if not url:
        pytest.skip(SKIP_REASON)
    settings = Settings(
        index_prefix=f"{TEST_PREFIX}{uuid.uuid4().hex[:12]}", embedding_model=str(tiny_bi_encoder), vector_dims=32,
        rerank_model=None, candidate_k=20, num_candidates=40, rerank_k=8, context_k=3, token_budget=400,
        analyzer="english", bm25_fields=("title", "text"), bm25_tie_breaker=1.0, bm25_k1=0.9, bm25_b=0.4,
    )  # fmt: skip
    beir = write_beir(tmp_path / "beir")
    verify = os.environ.get("ES_VERIFY_CERTS", "true").strip().lower() not in ("0", "false", "no")
    backend = ElasticsearchBackend.connect(url, settings, verify_certs=verify)
    try:
        live = evaluate(beir, settings=settings, cache_dir=tmp_path, depth=20, es_backend=backend)
    finally:
        delete_created_assets(backend)
    mirror = evaluate(beir, settings=settings, cache_dir=tmp_path, depth=20)
    assert live["documents"] == mirror["documents"] == 24
    # Lucene quantises field lengths to one byte and HNSW is approximate: close, not equal
    for stage in ("bm25", "dense", "hybrid"):
        assert live["stages"][stage]["ndcg@10"] == pytest.approx(mirror["stages"][stage]["ndcg@10"], abs=0.05), stage
