"""Reranker fine-tuning: hard negatives from es_rag's own channels, graded labels, a loadable model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.config import Settings
from es_rag.errors import InputError
from es_rag.evaluation import EVAL_TENANT, build_index, load_beir
from es_rag.training import TRAINING_META, TrainingConfig, mine_pairs, train_reranker
from tests.unit.test_evaluation import write_beir


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir-train"))


def test_hard_negatives_come_from_retrieval_and_exclude_positives(
    beir: Path, tiny_bi_encoder: Path, tmp_path: Path
) -> None:
    settings = Settings(embedding_model=str(tiny_bi_encoder), vector_dims=32, analyzer="english")
    corpus, queries, qrels = load_beir(beir, "train")
    index = build_index(corpus, settings, cache_dir=tmp_path)
    docs = {h.chunk_id: h for h in index.hits()}
    pairs = mine_pairs(
        index.backend, index.embedder, queries, qrels, docs, tenant=EVAL_TENANT, negatives_per_query=4, depth=10
    )
    by_query: dict[str, list] = {}
    for p in pairs:
        by_query.setdefault(p.query_id, []).append(p)
    assert set(by_query) == set(queries)
    for qid, rows in by_query.items():
        pos = {p.doc_id: p.label for p in rows if p.origin == "qrels"}
        assert pos == {d: g / 2 for d, g in qrels[qid].items() if g > 0}  # graded: 2 -> 1.0, 1 -> 0.5
        negs = [p for p in rows if p.origin != "qrels"]
        assert len(negs) == 4 and len({p.doc_id for p in negs}) == 4
        assert all(p.label == 0.0 and qrels[qid].get(p.doc_id, 0) <= 0 for p in negs)
        # every negative was ranked by a channel at the rank it claims
        for p in negs:
            channel, rank = p.origin.split("@")
            assert channel in {"hybrid", "bm25", "dense"} and 1 <= int(rank) <= 10 * 2
        assert rows[0].passage.startswith("Title: ")
    assert {p.origin.split("@")[0] for p in pairs if p.origin != "qrels"} >= {"hybrid", "bm25"}


def test_train_reranker_saves_a_model_the_reranker_loads(
    beir: Path, tiny_bi_encoder: Path, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    from es_rag.models import Hit
    from es_rag.rerank import CrossEncoderReranker

    settings = Settings(embedding_model=str(tiny_bi_encoder), vector_dims=32)
    out = tmp_path / "model"
    report = train_reranker(
        beir,
        out,
        settings=settings,
        config=TrainingConfig(base_model=str(tiny_cross_encoder), max_steps=3, batch_size=4, max_length=64),
        cache_dir=tmp_path,
    )
    assert report.steps == 3 and len(report.losses) == 3 and report.positives == 12
    meta = json.loads((out / TRAINING_META).read_text())
    assert meta["split"] == "train" and meta["negatives_by_channel"]
    rr = CrossEncoderReranker(str(out))
    hits = [
        Hit(chunk_id=c, source_id=c, text=t, tenant_id="t", title="x")
        for c, t in (("a", "malaria vaccine"), ("b", "gut"))
    ]
    ranked = rr.rerank("malaria", hits)
    assert {h.chunk_id for h in ranked} == {"a", "b"} and all(h.semantic_score is not None for h in ranked)


def test_test_split_is_refused(beir: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="evaluation only"):
        train_reranker(beir, tmp_path / "m", split="test")
