"""Rerank fusion (replace, weighted RRF, interpolation), its learned weight, the safety verdict and the paired
bootstrap, on hand-made scores with exact expected orders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from es_rag.cross_encoder.fusion import (
    FUSION_FILE,
    SAFETY_FILE,
    FusionPlan,
    fuse,
    load_fusion,
    load_safety,
    refusal,
    verdict_for,
)
from es_rag.cross_encoder.model import Calibration
from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.metrics import ndcg_at, paired_bootstrap, per_query, run_from_ids
from es_rag.evaluation.rerank_safety import DevQuery, fit_fusion


def test_replace_is_the_reranker_order_ties_to_the_fused_order() -> None:
    f = fuse(FusionPlan(), [0.1, 2.0, 0.1, -1.0], [None] * 4, [None] * 4)
    assert f.order == [1, 0, 2, 3] and f.rerank_rank == [2, 1, 3, 4]


def test_weighted_rrf_of_both_ranks() -> None:
    raw = [0.0, 1.0, 2.0]  # reranker ranks: 3, 2, 1; fused ranks 1, 2, 3
    plan = FusionPlan(method="rrf", weight=0.75, rank_constant=1)
    f = fuse(plan, raw, [None] * 3, [None] * 3)
    expected = [0.75 / (1 + 3) + 0.25 / (1 + 1), 0.75 / (1 + 2) + 0.25 / (1 + 2), 0.75 / (1 + 1) + 0.25 / (1 + 3)]
    assert f.combined == pytest.approx(expected)
    assert f.order == [2, 1, 0]
    # at w = 0.25 the fused order wins; at w = 0.5 the two ends tie (0.375) and the fused order breaks the tie
    assert fuse(FusionPlan(method="rrf", weight=0.25, rank_constant=1), raw, [None] * 3, [None] * 3).order == [0, 1, 2]
    assert fuse(FusionPlan(method="rrf", weight=0.5, rank_constant=1), raw, [None] * 3, [None] * 3).order == [0, 2, 1]


def test_interpolation_of_calibrated_and_min_max_fused_scores() -> None:
    fused = [0.05, 0.03, 0.01]  # normalised: 1, 0.5, 0
    calibrated = [0.1, 0.5, 0.9]
    f = fuse(FusionPlan(method="interpolate", weight=0.6), [0.0, 1.0, 2.0], calibrated, fused)
    assert f.fused_norm == pytest.approx([1.0, 0.5, 0.0]) and f.rerank_norm == calibrated
    assert f.combined == pytest.approx([0.6 * 0.1 + 0.4, 0.6 * 0.5 + 0.2, 0.6 * 0.9])
    assert f.order == [2, 1, 0]  # 0.54, 0.5, 0.46
    assert "calibrated reranker score" in f.inputs and "min-max fused score" in f.inputs
    # calibration none: the raw scores are min-max normalised; no fused score: the fused rank is
    g = fuse(FusionPlan(method="interpolate", weight=0.5), [0.0, 1.0, 2.0], [None] * 3, [None, 0.2, 0.1])
    assert g.rerank_norm == pytest.approx([0.0, 0.5, 1.0]) and g.fused_norm == pytest.approx([1.0, 0.5, 0.0])
    assert g.order == [0, 1, 2]  # every combined score is 0.5: ties to the fused order


def test_fusion_plan_from_settings_over_the_model_directory(tmp_path: Path) -> None:
    assert load_fusion(tmp_path) == FusionPlan()
    (tmp_path / FUSION_FILE).write_text(json.dumps({"method": "rrf", "weight": 0.3, "rank_constant": 20}))
    plan = load_fusion(tmp_path)
    assert (plan.method, plan.weight, plan.rank_constant, plan.source) == ("rrf", 0.3, 20, str(tmp_path / FUSION_FILE))
    assert load_fusion(tmp_path, weight=0.8).weight == 0.8
    assert load_fusion(tmp_path, method="interpolate").weight == 0.5  # the file's weight is for rrf
    assert load_fusion(tmp_path, method="replace").weight == 1.0
    assert load_fusion(None, method="rrf", weight=0.2).source == "settings"
    with pytest.raises(ConfigError, match="valid values: replace, rrf, interpolate"):
        load_fusion(None, method="max")
    (tmp_path / FUSION_FILE).write_text("{")
    with pytest.raises(ConfigError, match="unreadable fusion file"):
        load_fusion(tmp_path)


def _check(method: str, weight: float, verdict: str, diff: float = 0.0) -> dict:
    return {"method": method, "weight": weight, "verdict": verdict, "diff": diff, "ci": [diff - 0.01, diff + 0.01]}


def test_verdict_rules() -> None:
    hurts_alone = {"checks": [_check("replace", 1.0, "hurts", -0.1), _check("rrf", 0.3, "helps", 0.02)]}
    assert refusal(hurts_alone, FusionPlan()) is not None
    assert refusal(hurts_alone, FusionPlan(method="rrf", weight=0.3)) is None  # this combination helps
    why = refusal(hurts_alone, FusionPlan(method="rrf", weight=0.5))  # not checked: the model alone hurts
    assert why is not None and "was not checked" in why and "the model alone hurts" in why
    neutral = {"checks": [_check("replace", 1.0, "hurts", -0.1), _check("rrf", 0.3, "neutral")]}
    assert verdict_for(neutral, FusionPlan(method="rrf", weight=0.3))[0] == "hurts"
    fine = {"checks": [_check("replace", 1.0, "neutral"), _check("interpolate", 0.4, "hurts", -0.05)]}
    assert refusal(fine, FusionPlan()) is None
    assert refusal(fine, FusionPlan(method="interpolate", weight=0.4)) is not None
    assert verdict_for(fine, FusionPlan(method="rrf", weight=0.4))[0] == "unchecked"
    assert refusal(None, FusionPlan()) is None


def test_safety_file_is_validated(tmp_path: Path) -> None:
    assert load_safety(tmp_path) is None
    (tmp_path / SAFETY_FILE).write_text(json.dumps({"verdict": "hurts"}))
    with pytest.raises(ConfigError, match="list of checks"):
        load_safety(tmp_path)


def test_ndcg_matches_ir_measures() -> None:
    grades = {"a": 2, "b": 1, "c": 0, "z": 1}
    ranked = ["c", "b", "x", "a", "b", "y"]
    expected = per_query({"q": grades}, {"q": run_from_ids(ranked)})["q"]
    assert ndcg_at(ranked, grades) == pytest.approx(expected, abs=1e-9)
    idcg = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at(ranked, grades) == pytest.approx((1 / math.log2(3) + 2 / math.log2(5)) / idcg)
    assert ndcg_at(["a"], {"a": 0}) == 0.0


def test_paired_bootstrap_is_seeded_and_gives_the_verdict() -> None:
    better = [0.5 + 0.01 * (i % 7) for i in range(60)]
    base = [0.5] * 60
    up = paired_bootstrap(better, base)
    assert up == paired_bootstrap(better, base)  # same seed, same interval
    assert up["verdict"] == "helps" and up["ci"][0] > 0 and up["resamples"] == 1000 and up["queries"] == 60
    assert paired_bootstrap(base, better)["verdict"] == "hurts"
    mixed = [0.5 + (0.1 if i % 2 else -0.1) for i in range(60)]
    assert paired_bootstrap(mixed, base)["verdict"] == "neutral"
    with pytest.raises(InputError, match="equally long"):
        paired_bootstrap([1.0], [])


def _dev(n: int, *, reranker_good: bool) -> list[DevQuery]:
    """``n`` queries, 5 candidates each; the relevant document is third in the fused order. A good reranker puts it
    first; a bad one last."""
    out = []
    for q in range(n):
        docs = tuple(f"d{q}-{i}" for i in range(5))
        raw = (0.0, 0.0, 3.0, 0.0, 0.0) if reranker_good else (1.0, 1.0, -3.0, 1.0, 1.0)
        out.append(DevQuery(f"q{q}", docs, (0.05, 0.04, 0.03, 0.02, 0.01), raw, (), {docs[2]: 1}))
    return out


def test_fit_fusion_learns_the_weight_and_checks_safety() -> None:
    cal = Calibration()
    good = fit_fusion(_dev(20, reranker_good=True), cal, data={"split": "dev"})
    alone, learned = good.checks
    assert alone["method"] == "replace" and alone["verdict"] == "helps" and alone["candidate"] == 1.0
    assert alone["baseline"] == pytest.approx(0.5)  # relevant at rank 3: 1 / log2(4)
    assert learned["verdict"] == "helps" and good.weight > 0
    assert good.safety_file()["verdict"] == "helps" and good.safety_file()["data"]["split"] == "dev"
    bad = fit_fusion(_dev(20, reranker_good=False), cal)
    assert bad.checks[0]["verdict"] == "hurts"
    # the best a useless reranker can do is to be ignored: weight 0 (ties to the lower weight)
    assert (bad.method, bad.weight) == ("rrf", 0.0) and bad.checks[1]["verdict"] == "neutral"
    assert bad.safety_file()["verdict"] == "hurts"  # alone it hurts, and its fusion was not shown to help
    with pytest.raises(InputError, match="no judged held-out query"):
        fit_fusion([], cal)


def _stage_hits() -> list:
    from es_rag.records import Hit

    texts = ["alpha text", "beta text", "gamma text"]
    return [
        Hit(chunk_id=f"c{i}", source_id=f"s{i}", text=t, tenant_id="t", title="x", fused_score=f)
        for i, (t, f) in enumerate(zip(texts, (0.05, 0.04, 0.01), strict=True))
    ]


@pytest.mark.parametrize(
    ("settings", "order", "method", "weight"),
    [
        ({}, ["c2", "c1", "c0"], "replace", 1.0),
        ({"fusion": "rrf", "fusion_weight": 0.2}, ["c0", "c1", "c2"], "rrf", 0.2),
        ({"fusion": "rrf", "fusion_weight": 0.9}, ["c2", "c1", "c0"], "rrf", 0.9),
        # sigmoid(-2, 0, 2) = 0.119, 0.5, 0.881; fused min-max 1, 0.75, 0: 0.560, 0.625, 0.440
        ({"fusion": "interpolate", "fusion_weight": 0.5}, ["c1", "c0", "c2"], "interpolate", 0.5),
    ],
)
def test_the_stage_orders_by_the_fusion_and_traces_both_inputs(
    settings: dict, order: list[str], method: str, weight: float
) -> None:
    from es_rag.settings import RerankSettings
    from es_rag.stages.rerank import RerankStage
    from tests.support.corpus import OverlapReranker

    reranker = OverlapReranker({"alpha": -2.0, "beta": 0.0, "gamma": 2.0})  # the reverse of the fused order
    stage = RerankStage(reranker, RerankSettings(k=3, **settings), None)  # type: ignore[arg-type]
    out = stage.run("q", _stage_hits())
    assert [h.chunk_id for h in out.hits] == order and out.info["reranked"]
    assert out.info["fusion"]["method"] == method and out.info["fusion"]["weight"] == weight
    rows = {r["id"]: r for r in out.info["scores"]}
    assert rows["c0"]["fused_rank"] == 1 and rows["c0"]["rerank_rank"] == 3 and rows["c0"]["raw"] == -2.0
    assert rows["c0"]["fused_score"] == pytest.approx(0.05) and rows["c0"]["weight"] == weight
    assert [r["id"] for r in out.info["scores"]] == order and [r["rank"] for r in out.info["scores"]] == [1, 2, 3]
    assert [h.final_score for h in out.hits] == [rows[c]["combined"] for c in order]
    if method != "replace":
        assert f"fused with the first stage ({method} w={weight:g})" in out.path


def test_the_stage_refuses_a_model_marked_hurts_unless_allowed(tmp_path: Path) -> None:
    from es_rag.settings import RerankSettings
    from es_rag.stages.rerank import RerankStage
    from tests.support.corpus import OverlapReranker

    (tmp_path / SAFETY_FILE).write_text(json.dumps({"date": "2026-01-01", "checks": [_check("replace", 1.0, "hurts")]}))
    reranker = OverlapReranker({"alpha": -2.0, "beta": 0.0, "gamma": 2.0})
    reranker.name = str(tmp_path)  # a model directory
    refused = RerankStage(reranker, RerankSettings(k=3), None).run("q", _stage_hits())  # type: ignore[arg-type]
    assert [h.chunk_id for h in refused.hits] == ["c0", "c1", "c2"] and not refused.info["reranked"]
    assert refused.info["safety"]["refused"] and refused.path.startswith("fallback: fused order")
    assert reranker.calls == 0  # nothing scored
    allowed = RerankStage(reranker, RerankSettings(k=3, allow_harmful=True), None).run("q", _stage_hits())  # type: ignore[arg-type]
    assert allowed.info["reranked"] and [h.chunk_id for h in allowed.hits] == ["c2", "c1", "c0"]
    assert allowed.path.endswith("(marked hurts; allowed by allow_harmful_reranker)")
