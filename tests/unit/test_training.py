"""Reranker fine-tuning: hard negatives from es_rag's own channels, graded labels, a loadable model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.cross_encoder.fusion import FUSION_FILE, SAFETY_FILE, load_fusion
from es_rag.cross_encoder.model import CALIBRATION_FILE, load_calibration
from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.index import EVAL_TENANT, build_index
from es_rag.evaluation.train_reranker import (
    CURVE_PLOT,
    TRAINING_META,
    TrainingConfig,
    TrainingPair,
    _channel_lists,
    _listwise_target,
    curve_evaluator,
    listwise_groups,
    mine_pairs,
    train_cross_encoder,
    train_reranker,
)
from es_rag.filters import SearchFilter
from es_rag.records import Hit
from es_rag.settings import Settings
from tests.support.beir import write_beir


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
        # the teacher's rank: a hybrid-mined negative sits in the fused list at the rank it claims
        for p in negs:
            if p.origin.startswith("hybrid@"):
                assert p.fused_rank == int(p.origin.split("@")[1])
    assert {p.origin.split("@")[0] for p in pairs if p.origin != "qrels"} >= {"hybrid", "bm25"}


def test_train_reranker_saves_a_model_the_reranker_loads(
    beir: Path, tiny_bi_encoder: Path, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    from es_rag.cross_encoder.model import CrossEncoderReranker
    from es_rag.records import Hit

    settings = Settings(embedding_model=str(tiny_bi_encoder), vector_dims=32)
    out = tmp_path / "model"
    report = train_reranker(
        beir,
        out,
        settings=settings,
        config=TrainingConfig(base_model=str(tiny_cross_encoder), max_steps=3, batch_size=4, max_length=64),
        cache_dir=tmp_path,
    )
    # 6 training queries with 2 positives each; no dev split, so the last one (20% of 6, at least 1) is held out
    assert report.steps == 3 and len(report.losses) == 3 and report.positives == 10 and report.queries == 5
    # the held-out query calibrates the model: a file the reranker reads; one answerable query gives no threshold
    assert report.calibration is not None and report.calibration["written"] == str(out / CALIBRATION_FILE)
    assert report.calibration["threshold"] is None
    assert report.calibration["fit"]["queries"] == 1 and report.calibration["fit"]["relevant_pairs"] == 2
    cal = load_calibration(out)
    assert cal.source == str(out / CALIBRATION_FILE) and cal.temperature == report.calibration["temperature"] > 0
    meta = json.loads((out / TRAINING_META).read_text())
    assert meta["split"] == "train" and meta["negatives_by_channel"]
    # the held-out query also learns the fusion weight and runs the safety check, written beside the model
    assert meta["held_out"] == ["tr5"] and report.held_out == ["tr5"]
    assert report.fusion is not None and report.fusion["written"] == str(out / FUSION_FILE)
    assert report.safety is not None and report.safety["written"] == str(out / SAFETY_FILE)
    assert report.safety["verdict"] in ("helps", "neutral", "hurts") and report.safety["data"]["queries"] == 1
    assert report.safety["checks"][0]["method"] == "replace"
    assert load_fusion(out).source == str(out / FUSION_FILE)
    # the learning curve scored the held-out query before training and after the (only, partial) epoch
    assert [c["step"] for c in report.curve] == [0, 3] and meta["curve"] == report.curve
    assert report.curve[0]["train_loss"] is None and report.curve[1]["train_loss"] == round(sum(report.losses) / 3, 4)
    assert all(c["queries"] == 1 and 0 <= c["ndcg@10_reranked"] <= 1 for c in report.curve)
    assert (out / CURVE_PLOT).read_bytes().startswith(b"\x89PNG")
    # calibrate --split dev on a dataset without dev qrels reuses exactly those held-out queries
    from es_rag.evaluation.calibrate import calibrate_beir

    check = calibrate_beir(beir, str(out), split="dev", settings=settings, cache_dir=tmp_path)
    assert check.fusion.queries == 1 and "held out of training" in check.fusion.data["split"]
    rr = CrossEncoderReranker(str(out))
    hits = [
        Hit(chunk_id=c, source_id=c, text=t, tenant_id="t", title="x")
        for c, t in (("a", "malaria vaccine"), ("b", "gut"))
    ]
    ranked = rr.rerank("malaria", hits)
    assert {h.chunk_id for h in ranked} == {"a", "b"} and all(h.rerank_score is not None for h in ranked)


def test_test_split_is_refused(beir: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="evaluation only"):
        train_reranker(beir, tmp_path / "m", split="test")
    with pytest.raises(InputError, match=r"calibration_split.*held-out split"):
        train_reranker(beir, tmp_path / "m", calibration_split="test")
    with pytest.raises(InputError, match="calibration_split"):
        train_reranker(beir, tmp_path / "m", calibration_split="train")


def _pair(q: str, d: str, label: float) -> TrainingPair:
    return TrainingPair(q, d, f"query {q}", f"passage {d}", label, "qrels" if label > 0 else "bm25@1")


def test_listwise_groups_put_each_positive_first_with_only_its_querys_negatives() -> None:
    pairs = [
        _pair("q1", "p1", 1.0), _pair("q1", "p2", 0.5), _pair("q1", "n1", 0.0), _pair("q1", "n2", 0.0),
        _pair("q2", "p3", 1.0), _pair("q2", "n3", 0.0),
        _pair("q3", "p4", 1.0),  # no negative: no group
    ]  # fmt: skip
    groups = [[p.doc_id for p in g] for g in listwise_groups(pairs)]
    assert groups == [["p1", "n1", "n2"], ["p2", "n1", "n2"], ["p3", "n3"]]


def test_unknown_loss_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="listwise, pointwise"):
        TrainingConfig(base_model="x", loss="hinge")


@pytest.mark.parametrize("loss", ["listwise", "pointwise"])
def test_both_losses_learn_to_put_the_positive_first(loss: str, tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """A learnable toy for a 1-layer random model: positives carry one phrase, hard negatives another."""
    from es_rag.cross_encoder.model import CrossEncoderReranker

    queries = ["remote wipe", "upload error", "cpu usage", "trash policy", "tenant isolation", "sync laptop"]
    pairs = []
    for i, q in enumerate(queries):
        pairs.append(TrainingPair(f"q{i}", f"p{i}", q, f"{q} checksum mismatch resume", 1.0, "qrels"))
        for j in range(3):
            pairs.append(TrainingPair(f"q{i}", f"n{i}{j}", q, f"{q} quick brown fox {j}", 0.0, "bm25@1"))
    config = TrainingConfig(
        base_model=str(tiny_cross_encoder), max_steps=60, epochs=40, batch_size=8, max_length=32,
        learning_rate=3e-3, loss=loss,
    )  # fmt: skip
    steps, losses, _ = train_cross_encoder(pairs, config, tmp_path / loss)
    assert steps == 60
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    rr = CrossEncoderReranker(str(tmp_path / loss))
    wins = 0
    for q in queries:
        for j in range(3):
            hits = [
                Hit(chunk_id=cid, source_id=cid, text=text, tenant_id="t", title="")
                for cid, text in (("neg", f"{q} quick brown fox {j}"), ("pos", f"{q} checksum mismatch resume"))
            ]
            wins += rr.rerank(q, hits)[0].chunk_id == "pos"
    # 18 pairwise comparisons: a model that learned nothing wins about 9; tiny random models on another
    # machine's threads may leave a borderline pair or two
    assert wins >= 15, wins


def test_listwise_target_mixes_the_positive_with_the_fused_order_teacher() -> None:
    group = [
        TrainingPair("q", "p", "q", "p", 1.0, "qrels", 3),
        TrainingPair("q", "n1", "q", "n1", 0.0, "hybrid@1", 1),
        TrainingPair("q", "n2", "q", "n2", 0.0, "bm25@2", None),  # not in the fused list: rank depth + 1 = 5
    ]
    assert _listwise_target(group, 0.0, 4).tolist() == [1.0, 0.0, 0.0]
    inverse = [1 / 3, 1.0, 1 / 5]
    expected = [0.5 * (i == 0) + 0.5 * x / sum(inverse) for i, x in enumerate(inverse)]
    assert _listwise_target(group, 0.5, 4).tolist() == pytest.approx(expected)
    assert float(_listwise_target(group, 0.5, 4).sum()) == pytest.approx(1.0)


def test_distill_is_bounded_and_listwise_only() -> None:
    with pytest.raises(ConfigError, match=r"distill: must be within \[0, 1\]"):
        TrainingConfig(base_model="x", distill=1.5)
    with pytest.raises(ConfigError, match="needs --loss listwise"):
        TrainingConfig(base_model="x", distill=0.3, loss="pointwise")


@pytest.mark.parametrize("alpha_rank", [1, 9])
def test_distillation_learns_the_order_of_the_negatives(
    alpha_rank: int, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    """Labels alone say nothing about two negatives; the fused-order teacher ranks ``alpha`` (fused rank 1, then 9)
    against ``omega`` (9, then 1), and a model trained on the teacher alone (distill 1) learns that order. The two
    runs differ only in the teacher, so a teacher the loss ignored gives the same order twice and fails one run."""
    import torch
    from sentence_transformers import CrossEncoder

    omega_rank = 10 - alpha_rank
    queries = ["remote wipe", "upload error", "cpu usage", "trash policy", "tenant isolation", "sync laptop"]
    pairs = []
    for i, q in enumerate(queries):
        pairs.append(TrainingPair(f"q{i}", f"p{i}", q, f"{q} checksum mismatch", 1.0, "qrels", 2))
        pairs.append(TrainingPair(f"q{i}", f"a{i}", q, f"{q} alpha alpha alpha", 0.0, "hybrid@1", alpha_rank))
        pairs.append(TrainingPair(f"q{i}", f"o{i}", q, f"{q} omega omega omega", 0.0, "hybrid@9", omega_rank))
    config = TrainingConfig(
        base_model=str(tiny_cross_encoder), max_steps=60, epochs=60, batch_size=6, max_length=32,
        learning_rate=3e-3, distill=1.0, mining_depth=10,
    )  # fmt: skip
    train_cross_encoder(pairs, config, tmp_path / "m")
    ce = CrossEncoder(str(tmp_path / "m"), device="cpu")
    with torch.no_grad():
        alpha = ce.predict([(q, f"{q} alpha alpha alpha") for q in queries])
        omega = ce.predict([(q, f"{q} omega omega omega") for q in queries])
    wins = sum(a > o for a, o in zip(alpha, omega, strict=True))
    assert wins == (len(queries) if alpha_rank < omega_rank else 0), (alpha, omega)


def test_learning_curve_points_come_before_training_and_at_every_epoch_end(
    tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    pairs = []
    for i in range(4):
        pairs.append(TrainingPair(f"q{i}", f"p{i}", f"query {i}", f"good passage {i}", 1.0, "qrels", 1))
        pairs.append(TrainingPair(f"q{i}", f"n{i}", f"query {i}", f"bad passage {i}", 0.0, "bm25@1", 2))
    seen: list[list[float]] = []

    def evaluate(score):  # type: ignore[no-untyped-def]
        scores = score([("query 0", "good passage 0"), ("query 0", "bad passage 0")])
        seen.append(scores)
        return {"margin": scores[0] - scores[1]}

    # 4 groups of 2 pairs, batch 4 = 2 groups per step: 2 steps an epoch; 5 steps stop half-way through epoch 3
    config = TrainingConfig(base_model=str(tiny_cross_encoder), max_steps=5, epochs=3, batch_size=4, max_length=16)
    curve: list[dict] = []
    steps, losses, _ = train_cross_encoder(pairs, config, tmp_path / "m", evaluate=evaluate, curve=curve)
    assert steps == 5
    assert [(c["epoch"], c["step"]) for c in curve] == [(0.0, 0), (1.0, 2), (2.0, 4), (2.5, 5)]
    assert [c["train_loss"] for c in curve[1:]] == [
        round(sum(losses[0:2]) / 2, 4), round(sum(losses[2:4]) / 2, 4), round(losses[4], 4)
    ]  # fmt: skip
    assert len(seen) == 4 and all(len(s) == 2 for s in seen)
    assert seen[0] != seen[-1]  # the scorer is the model being trained


class _Backend:
    """Two channels that both rank the relevant document third."""

    def bm25(self, text, flt, k):  # type: ignore[no-untyped-def]
        return [Hit(chunk_id=c, source_id=c, text=c, tenant_id="t") for c in ("x", "y", "rel", "z")][:k]

    def knn(self, vector, flt, k):  # type: ignore[no-untyped-def]
        return [Hit(chunk_id=c, source_id=c, text=c, tenant_id="t") for c in ("y", "x", "rel", "z")][:k]


class _Embedder:
    def embed_query(self, text):  # type: ignore[no-untyped-def]
        return [0.0]


def test_curve_evaluator_scores_the_first_stage_head_against_the_reranked_one() -> None:
    from es_rag.evaluation.metrics import ndcg_at

    docs = {c: Hit(chunk_id=c, source_id=c, text=f"text {c}", tenant_id="t", title="") for c in ("x", "y", "z", "rel")}
    flt = SearchFilter("t")
    first_stage = lambda text: _channel_lists(_Backend(), _Embedder(), text, flt, 4, 60)["hybrid"]  # noqa: E731
    evaluate = curve_evaluator(first_stage, {"q": "query", "unjudged": "other"}, {"q": {"rel": 1}}, docs, depth=4)
    assert evaluate is not None
    oracle = evaluate(lambda batch: [1.0 if "text rel" in d else 0.0 for _, d in batch])
    # fused order x, y (1/61 + 1/62 each), rel (2/63), z (2/64): rel is third; the oracle puts it first
    assert oracle == {"queries": 1, "ndcg@10_first_stage": round(ndcg_at(["x", "y", "rel"], {"rel": 1}), 4),
                      "ndcg@10_reranked": 1.0}  # fmt: skip
    assert evaluate(lambda batch: [0.0 if "text rel" in d else 1.0 for _, d in batch])["ndcg@10_reranked"] == round(
        ndcg_at(["x", "y", "z", "rel"], {"rel": 1}), 4
    )
    assert curve_evaluator(first_stage, {"u": "q"}, {}, docs, depth=4) is None


def test_negatives_come_from_the_pipeline_head_when_a_first_stage_is_given(
    beir: Path, tiny_bi_encoder: Path, tmp_path: Path
) -> None:
    """What the reranker will be given is what it learns from: negatives are the head's top non-relevant documents in
    its order, each with its rank there as the teacher's rank; judged documents are never negatives."""
    from es_rag.evaluation.train_reranker import pipeline_first_stage

    settings = Settings(embedding_model=str(tiny_bi_encoder), vector_dims=32, analyzer="english")
    corpus, queries, qrels = load_beir(beir, "train")
    index = build_index(corpus, settings, cache_dir=tmp_path)
    docs = {h.chunk_id: h for h in index.hits()}
    first_stage = pipeline_first_stage(index, settings, EVAL_TENANT)
    pairs = mine_pairs(
        index.backend, index.embedder, queries, qrels, docs, tenant=EVAL_TENANT, negatives_per_query=3, depth=10,
        first_stage=first_stage,
    )  # fmt: skip
    for qid, text in queries.items():
        head = first_stage(text)[:10]
        expected = [d for d in head if qrels[qid].get(d, 0) <= 0][:3]
        negs = [p for p in pairs if p.query_id == qid and p.origin != "qrels"]
        assert [p.doc_id for p in negs] == expected
        assert all(p.origin == f"fused@{head.index(p.doc_id) + 1}" == f"fused@{p.fused_rank}" for p in negs)
        positives = [p for p in pairs if p.query_id == qid and p.origin == "qrels"]
        assert all(p.fused_rank == (head.index(p.doc_id) + 1 if p.doc_id in head else None) for p in positives)
