"""The gate stage (``es_rag.stages.gate``) with every verdict written out: kept and dropped ids, each reason, the
``status`` / ``basis`` / trace path and the info the trace records. Scores are binary fractions (0.5, 0.25, ...)
so that the boundary cases (a drop or a margin exactly at the setting) are exact."""

from __future__ import annotations

from es_rag.cross_encoder.model import Calibration
from es_rag.records import Hit
from es_rag.settings import GateSettings
from es_rag.stages.base import StageOutput
from es_rag.stages.gate import (
    EVIDENCE,
    NO_SUFFICIENT_EVIDENCE,
    UNDECIDED,
    apply_gate,
    fitted,
    run,
    score_cliff,
    status_of,
)

NO_THRESHOLD = "; no calibrated threshold for this model"


def _hits(n: int) -> list[Hit]:
    return [Hit(chunk_id=f"h{i}", source_id=f"s{i}", text=f"text {i}", tenant_id="t") for i in range(n)]


def _ids(out: StageOutput) -> list[str]:
    return [h.chunk_id for h in out.hits]


def test_status_names() -> None:
    assert (EVIDENCE, NO_SUFFICIENT_EVIDENCE, UNDECIDED) == ("evidence", "no_sufficient_evidence", "undecided")


def test_status_of() -> None:
    assert status_of(StageOutput(hits=[])) == ("undecided", "")
    assert status_of(StageOutput(hits=[], info={"status": "evidence", "basis": "b"})) == ("evidence", "b")
    assert status_of(StageOutput(hits=[], info={"status": 1, "basis": 2})) == ("1", "2")


def test_score_cliff() -> None:
    assert score_cliff([], 0.5) is None
    assert score_cliff([0.75], 0.5) is None
    assert score_cliff([1.0, 0.5], 0.5) == 0  # a drop exactly at min_drop is a cliff
    assert score_cliff([1.0, 0.5625], 0.5) is None
    assert score_cliff([1.0, 0.75, 0.5, 0.0], 0.5) == 2
    assert score_cliff([1.0, 0.0, -1.0], 1.0) == 0  # the first cliff
    assert score_cliff([1.0, 0.75, 0.25], 0.5) == 1  # the last pair
    assert score_cliff([0.0, 1.0], 0.5) is None  # a rise is no cliff


def test_fused_order_is_passed_through() -> None:
    hs = _hits(3)
    out = apply_gate(hs, None, threshold=0.5, cliff=0.25, margin=0.25, scale="fused")
    basis = "not applied: fused order carries no relevance scores (no no-answer verdict)"
    assert out.hits == hs and out.hits is not hs
    assert out.dropped == []
    assert out.info == {"status": "undecided", "basis": basis}
    assert out.path == "undecided: " + basis


def test_threshold_keeps_scores_at_the_threshold() -> None:
    out = apply_gate(_hits(3), [0.875, 0.5, 0.25], threshold=0.5, cliff=None, margin=None, scale="calibrated")
    assert _ids(out) == ["h0", "h1"]
    assert out.dropped == [("h2", "calibrated score 0.2500 < threshold 0.5")]
    assert out.info == {
        "scale": "calibrated",
        "scores": [0.875, 0.5, 0.25],
        "top1_top2_margin": 0.375,
        "status": "evidence",
        "basis": "calibrated threshold 0.5 on calibrated scores",
    }
    assert out.path == "evidence: calibrated threshold 0.5 on calibrated scores"


def test_threshold_nothing_passes() -> None:
    out = apply_gate(_hits(3), [0.375, 0.25, 0.125], threshold=0.5, cliff=0.25, margin=0.25, scale="calibrated")
    assert out.hits == []
    assert out.dropped == [
        ("h0", "calibrated score 0.3750 < threshold 0.5"),
        ("h1", "calibrated score 0.2500 < threshold 0.5"),
        ("h2", "calibrated score 0.1250 < threshold 0.5"),
    ]
    basis = "calibrated threshold 0.5 + margin 0.25 on calibrated scores"
    assert out.info == {
        "scale": "calibrated",
        "scores": [0.375, 0.25, 0.125],
        "status": NO_SUFFICIENT_EVIDENCE,
        "basis": basis,
    }
    assert out.path == "no_sufficient_evidence: " + basis


def test_a_query_scoped_threshold_decides_the_verdict_and_keeps_every_hit() -> None:
    hs = _hits(3)
    out = apply_gate(hs, [0.875, 0.5, 0.25], threshold=0.625, cliff=None, margin=None, scale="calibrated",
                     scope="query")  # fmt: skip
    assert _ids(out) == ["h0", "h1", "h2"] and out.dropped == []
    assert out.info["status"] == "evidence"
    assert out.info["basis"] == "calibrated threshold 0.625 on the best hit on calibrated scores"
    # the best hit need not come first (an interpolated order): the verdict reads the best score, not the first
    out = apply_gate(hs, [0.25, 0.75, 0.5], threshold=0.625, cliff=None, margin=None, scale="calibrated",
                     scope="query")  # fmt: skip
    assert _ids(out) == ["h0", "h1", "h2"]
    out = apply_gate(hs, [0.5, 0.375, 0.25], threshold=0.625, cliff=0.125, margin=0.0625, scale="calibrated",
                     scope="query")  # fmt: skip
    assert out.hits == [] and out.info["status"] == NO_SUFFICIENT_EVIDENCE
    assert out.dropped == [(h.chunk_id, "best calibrated score 0.5000 < threshold 0.625") for h in hs]


def test_the_settings_choose_the_threshold_scope() -> None:
    cal = Calibration(temperature=1.0, bias=0.0, threshold=0.625, source="es_rag_calibration.json")
    hs = [h.replace(rerank_score=s, calibrated_score=s) for h, s in zip(_hits(3), [0.875, 0.5, 0.25], strict=True)]
    by_hit = run(hs, reranked=True, calibration=cal, settings=GateSettings(cliff=None, threshold_scope="hit"))
    by_query = run(hs, reranked=True, calibration=cal, settings=GateSettings(cliff=None))  # the default
    assert _ids(by_hit) == ["h0"] and _ids(by_query) == ["h0", "h1", "h2"]


def test_threshold_on_no_hits() -> None:
    out = apply_gate([], [], threshold=0.5, cliff=None, margin=None, scale="calibrated")
    assert out.hits == [] and out.dropped == []
    assert out.info == {
        "scale": "calibrated",
        "scores": [],
        "status": "no_sufficient_evidence",
        "basis": "calibrated threshold 0.5 on calibrated scores",
    }


def test_threshold_one_hit_passes() -> None:
    out = apply_gate(_hits(1), [0.5], threshold=0.5, cliff=None, margin=None, scale="calibrated")
    assert _ids(out) == ["h0"] and out.dropped == []
    assert out.info["status"] == "evidence"


def test_cliff_cuts_after_the_first_drop() -> None:
    hs = _hits(5)
    out = apply_gate(hs, [1.0, 0.875, 0.75, 0.25, 0.125], threshold=None, cliff=0.5, margin=None, scale="raw")
    assert _ids(out) == ["h0", "h1", "h2"]
    assert out.dropped == [
        ("h3", "after a score cliff (0.7500 -> 0.2500)"),
        ("h4", "after a score cliff (0.7500 -> 0.2500)"),
    ]
    basis = "cliff 0.5 on raw scores" + NO_THRESHOLD
    assert out.info == {
        "scale": "raw",
        "scores": [1.0, 0.875, 0.75, 0.25, 0.125],
        "cliff_after": 3,
        "top1_top2_margin": 0.125,
        "status": "undecided",
        "basis": basis,
    }
    assert out.path == "undecided: " + basis


def test_cliff_at_the_top_leaves_one() -> None:
    out = apply_gate(_hits(3), [1.0, 0.5, 0.375], threshold=None, cliff=0.5, margin=None, scale="raw")
    assert _ids(out) == ["h0"]
    assert out.dropped == [
        ("h1", "after a score cliff (1.0000 -> 0.5000)"),
        ("h2", "after a score cliff (1.0000 -> 0.5000)"),
    ]
    assert out.info["cliff_after"] == 1 and "top1_top2_margin" not in out.info


def test_cliff_between_two_hits() -> None:
    out = apply_gate(_hits(2), [1.0, 0.25], threshold=None, cliff=0.5, margin=None, scale="raw")
    assert _ids(out) == ["h0"]
    assert out.dropped == [("h1", "after a score cliff (1.0000 -> 0.2500)")]
    assert out.info["cliff_after"] == 1
    assert out.info["basis"] == "cliff 0.5 on raw scores" + NO_THRESHOLD


def test_no_cliff_found() -> None:
    out = apply_gate(_hits(3), [1.0, 0.75, 0.5], threshold=None, cliff=0.5, margin=None, scale="raw")
    assert _ids(out) == ["h0", "h1", "h2"] and out.dropped == []
    assert "cliff_after" not in out.info
    assert out.info["basis"] == "cliff 0.5 on raw scores" + NO_THRESHOLD


def test_cliff_after_threshold_uses_the_passing_hits() -> None:
    # unsorted scores: the cliff is looked for among the hits that passed the threshold, by their own scores
    hs = _hits(4)
    out = apply_gate(hs, [0.875, 0.125, 0.75, 0.25], threshold=0.25, cliff=0.5, margin=None, scale="calibrated")
    assert _ids(out) == ["h0", "h2"]
    assert out.dropped == [
        ("h1", "calibrated score 0.1250 < threshold 0.25"),
        ("h3", "after a score cliff (0.7500 -> 0.2500)"),
    ]
    assert out.info["cliff_after"] == 2
    assert out.info["top1_top2_margin"] == 0.125
    assert out.info["basis"] == "calibrated threshold 0.25 + cliff 0.5 on calibrated scores"
    assert out.info["status"] == "evidence"


def test_cliff_and_margin_read_the_scores_not_the_order() -> None:
    # an interpolated order: the cross-encoder's best hit is second, and neighbours of the order differ by 0.5
    hs = _hits(5)
    out = apply_gate(hs, [0.75, 1.0, 0.25, 0.875, 0.125], threshold=None, cliff=0.5, margin=None, scale="calibrated")
    assert _ids(out) == ["h0", "h1", "h3"]  # sorted 1.0, 0.875, 0.75 | 0.25, 0.125: the order of the list is kept
    assert out.dropped == [
        ("h2", "after a score cliff (0.7500 -> 0.2500)"),
        ("h4", "after a score cliff (0.7500 -> 0.2500)"),
    ]
    assert out.info["cliff_after"] == 3 and out.info["top1_top2_margin"] == 0.125
    out = apply_gate(hs, [0.25, 1.0, 0.5, 0.125, 0.0], threshold=None, cliff=None, margin=0.5, scale="calibrated")
    assert _ids(out) == ["h1"]  # the best score wins the margin, though it stands second
    assert [d[0] for d in out.dropped] == ["h0", "h2", "h3", "h4"]


def test_cliff_needs_two_hits() -> None:
    out = apply_gate(_hits(1), [0.5], threshold=None, cliff=0.25, margin=None, scale="raw")
    assert _ids(out) == ["h0"] and out.dropped == []
    assert out.info == {
        "scale": "raw",
        "scores": [0.5],
        "status": "undecided",
        "basis": "nothing on raw scores" + NO_THRESHOLD,
    }
    out = apply_gate(_hits(2), [1.0, 0.25], threshold=0.5, cliff=0.25, margin=None, scale="raw")
    assert out.info["basis"] == "calibrated threshold 0.5 on raw scores"


def test_margin_at_the_setting_keeps_top1_alone() -> None:
    out = apply_gate(_hits(3), [1.0, 0.5, 0.25], threshold=None, cliff=None, margin=0.5, scale="calibrated")
    assert _ids(out) == ["h0"]
    assert out.dropped == [
        ("h1", "top-1 margin 0.5000 >= 0.5: single clear answer"),
        ("h2", "top-1 margin 0.5000 >= 0.5: single clear answer"),
    ]
    basis = "margin 0.5 on calibrated scores" + NO_THRESHOLD
    assert out.info == {
        "scale": "calibrated",
        "scores": [1.0, 0.5, 0.25],
        "top1_top2_margin": 0.5,
        "status": "undecided",
        "basis": basis,
    }


def test_margin_below_the_setting_keeps_all() -> None:
    out = apply_gate(_hits(3), [1.0, 0.5625, 0.25], threshold=None, cliff=None, margin=0.5, scale="raw")
    assert _ids(out) == ["h0", "h1", "h2"] and out.dropped == []
    assert out.info["top1_top2_margin"] == 0.4375
    assert out.info["basis"] == "margin 0.5 on raw scores" + NO_THRESHOLD


def test_margin_is_recorded_without_the_setting() -> None:
    out = apply_gate(_hits(2), [0.3333333, 0.1], threshold=None, cliff=None, margin=None, scale="raw")
    assert out.info["top1_top2_margin"] == 0.233333
    assert out.info["basis"] == "nothing on raw scores" + NO_THRESHOLD


def test_margin_with_one_hit_is_named_not_applied() -> None:
    out = apply_gate(_hits(1), [0.25], threshold=None, cliff=None, margin=0.5, scale="raw")
    assert _ids(out) == ["h0"] and out.dropped == []
    assert out.info == {
        "scale": "raw",
        "scores": [0.25],
        "status": "undecided",
        "basis": "margin 0.5 on raw scores" + NO_THRESHOLD,
    }


def test_all_three_rules() -> None:
    hs = _hits(5)
    scores = [1.0, 0.75, 0.625, 0.125, 0.0625]
    out = apply_gate(hs, scores, threshold=0.1, cliff=0.5, margin=0.25, scale="calibrated")
    assert _ids(out) == ["h0"]
    assert out.dropped == [
        ("h4", "calibrated score 0.0625 < threshold 0.1"),
        ("h3", "after a score cliff (0.6250 -> 0.1250)"),
        ("h1", "top-1 margin 0.2500 >= 0.25: single clear answer"),
        ("h2", "top-1 margin 0.2500 >= 0.25: single clear answer"),
    ]
    assert out.info == {
        "scale": "calibrated",
        "scores": scores,
        "cliff_after": 3,
        "top1_top2_margin": 0.25,
        "status": "evidence",
        "basis": "calibrated threshold 0.1 + cliff 0.5 + margin 0.25 on calibrated scores",
    }
    assert out.path == "evidence: calibrated threshold 0.1 + cliff 0.5 + margin 0.25 on calibrated scores"


def test_info_scores_are_rounded_and_capped_at_20() -> None:
    out = apply_gate(_hits(21), [0.1234567] * 21, threshold=None, cliff=None, margin=None, scale="raw")
    assert out.info["scores"] == [0.123457] * 20
    assert len(out.hits) == 21


# ------------------------------------------------------------------------------ the stage
def _scored() -> list[Hit]:
    return [
        Hit(chunk_id="a", source_id="s", text="a", tenant_id="t", rerank_score=3.0, calibrated_score=0.25),
        Hit(chunk_id="b", source_id="s", text="b", tenant_id="t", rerank_score=2.0, calibrated_score=0.875),
        Hit(chunk_id="c", source_id="s", text="c", tenant_id="t", rerank_score=-1.0, calibrated_score=None),
    ]


def test_run_on_the_fused_order_decides_nothing() -> None:
    hs = _scored()
    out = run(hs, reranked=False, calibration=Calibration(threshold=0.5), settings=GateSettings(cliff=0.5, margin=0.25))
    assert out.hits == hs and out.dropped == []
    basis = "not applied: fused order carries no relevance scores (no no-answer verdict)"
    assert out.info == {"status": "undecided", "basis": basis}


def test_run_uses_calibrated_scores_and_the_models_threshold() -> None:
    hit = GateSettings(cliff=None, margin=None, threshold_scope="hit")
    out = run(_scored(), reranked=True, calibration=Calibration(threshold=0.5), settings=hit)
    assert _ids(out) == ["b"]
    assert out.dropped == [
        ("a", "calibrated score 0.2500 < threshold 0.5"),
        ("c", "calibrated score 0.0000 < threshold 0.5"),  # no calibrated score reads as 0
    ]
    assert out.info == {
        "scale": "calibrated",
        "scores": [0.25, 0.875, 0.0],
        "status": "evidence",
        "basis": "calibrated threshold 0.5 on calibrated scores",
    }


CALIBRATED = Calibration(temperature=2.0, bias=1.0, source="/models/ce/es_rag_calibration.json")
NOT_CALIBRATED = "; cliff off: model not calibrated"


def test_fitted_means_sigmoid_from_a_file_or_the_settings() -> None:
    assert fitted(CALIBRATED) is True
    assert fitted(Calibration(source="settings")) is True
    assert fitted(Calibration()) is False  # source "default": sigmoid(raw), temperature 1, bias 0
    assert fitted(Calibration(method="none", source="settings")) is False
    assert fitted(Calibration(method="none")) is False


def test_run_default_calibration_leaves_the_cliff_off() -> None:
    # calibrated scores 0.25, 0.875, 0.0 with the default calibration: the 0.875 -> 0.25 drop is no cliff here, since
    # an uncalibrated sigmoid of the logit says nothing absolute; the margin (set on purpose) still applies: the best
    # score (b's, second in the list) beats the next (a's) by 0.625
    out = run(_scored(), reranked=True, calibration=Calibration(), settings=GateSettings(cliff=0.5, margin=0.25))
    assert _ids(out) == ["b"]
    margin = "top-1 margin 0.6250 >= 0.25: single clear answer"
    assert out.dropped == [("a", margin), ("c", margin)]
    assert out.info == {
        "scale": "calibrated",
        "scores": [0.25, 0.875, 0.0],
        "top1_top2_margin": 0.625,
        "cliff": "off: model not calibrated",
        "status": "undecided",
        "basis": "margin 0.25 on calibrated scores" + NO_THRESHOLD + NOT_CALIBRATED,
    }
    assert out.path == "undecided: margin 0.25 on calibrated scores" + NO_THRESHOLD + NOT_CALIBRATED


def test_run_default_calibration_without_a_cliff_setting_says_nothing_of_it() -> None:
    out = run(_scored(), reranked=True, calibration=Calibration(), settings=GateSettings(cliff=None, margin=None))
    assert _ids(out) == ["a", "b", "c"] and out.dropped == []
    assert "cliff" not in out.info
    assert out.info["basis"] == "nothing on calibrated scores" + NO_THRESHOLD


def test_run_takes_cliff_and_margin_from_settings_once_calibrated() -> None:
    out = run(_scored(), reranked=True, calibration=CALIBRATED, settings=GateSettings(cliff=0.5, margin=0.25))
    # calibrated scores 0.25, 0.875, 0.0: no threshold; sorted, 0.875 -> 0.25 is a drop of 0.625 after the best,
    # so only b (second in the list) stays, and no margin is left to measure
    assert _ids(out) == ["b"]
    cliff = "after a score cliff (0.8750 -> 0.2500)"
    assert out.dropped == [("a", cliff), ("c", cliff)]
    assert out.info["cliff_after"] == 1
    assert "top1_top2_margin" not in out.info
    assert "cliff" not in out.info
    assert out.info["basis"] == "cliff 0.5 + margin 0.25 on calibrated scores" + NO_THRESHOLD


def test_run_explicit_settings_count_as_calibrated() -> None:
    out = run(_scored(), reranked=True, calibration=Calibration(source="settings"), settings=GateSettings(cliff=0.5))
    assert _ids(out) == ["b"]
    assert out.dropped == [
        ("a", "after a score cliff (0.8750 -> 0.2500)"),
        ("c", "after a score cliff (0.8750 -> 0.2500)"),
    ]


def test_run_a_fitted_threshold_then_the_cliff() -> None:
    cal = Calibration(threshold=0.125, source="/m/es_rag_calibration.json")
    hs = [
        Hit(chunk_id="a", source_id="s", text="a", tenant_id="t", rerank_score=1.0, calibrated_score=0.875),
        Hit(chunk_id="b", source_id="s", text="b", tenant_id="t", rerank_score=0.5, calibrated_score=0.75),
        Hit(chunk_id="c", source_id="s", text="c", tenant_id="t", rerank_score=0.0, calibrated_score=0.25),
        Hit(chunk_id="d", source_id="s", text="d", tenant_id="t", rerank_score=-1.0, calibrated_score=0.0625),
    ]
    out = run(hs, reranked=True, calibration=cal, settings=GateSettings(cliff=0.5, threshold_scope="hit"))
    assert _ids(out) == ["a", "b"]
    assert out.dropped == [
        ("d", "calibrated score 0.0625 < threshold 0.125"),
        ("c", "after a score cliff (0.7500 -> 0.2500)"),
    ]
    assert out.info["status"] == "evidence"
    assert out.info["basis"] == "calibrated threshold 0.125 + cliff 0.5 on calibrated scores"


def test_run_raw_scores_without_calibration_leave_the_cliff_off() -> None:
    # calibration none: raw logits have no fixed scale, so a cliff on them is not applied either
    out = run(
        _scored(), reranked=True, calibration=Calibration(method="none"), settings=GateSettings(cliff=2.5, margin=None)
    )
    assert _ids(out) == ["a", "b", "c"]
    assert out.dropped == []
    assert out.info == {
        "scale": "raw",
        "scores": [3.0, 2.0, -1.0],
        "top1_top2_margin": 1.0,
        "cliff": "off: model not calibrated",
        "status": "undecided",
        "basis": "nothing on raw scores" + NO_THRESHOLD + NOT_CALIBRATED,
    }


def test_apply_gate_names_why_the_cliff_is_off() -> None:
    out = apply_gate(
        _hits(2), [1.0, 0.25], threshold=0.5, cliff=None, margin=None, scale="calibrated", cliff_off="because"
    )
    assert _ids(out) == ["h0"]
    assert out.info["cliff"] == "off: because"
    assert out.info["basis"] == "calibrated threshold 0.5 on calibrated scores; cliff off: because"


def test_run_raw_missing_score_reads_as_zero() -> None:
    hs = [Hit(chunk_id="a", source_id="s", text="a", tenant_id="t", rerank_score=None, calibrated_score=0.75)]
    out = run(hs, reranked=True, calibration=Calibration(method="none"), settings=GateSettings(cliff=None, margin=None))
    assert out.info["scores"] == [0.0] and out.info["scale"] == "raw"


def test_a_dense_floor_abstains_when_no_candidate_reaches_it() -> None:
    """``gate_min_dense``: no sufficient evidence, every candidate dropped with the reason, when the best dense score
    is under the floor; the other steps decide as before when one reaches it; off by default."""
    hits = [h.replace(dense_score=s) for h, s in zip(_hits(3), (0.61, None, 0.70), strict=True)]
    out = run(hits, reranked=False, calibration=Calibration(), settings=GateSettings(min_dense=0.72))
    assert status_of(out) == (NO_SUFFICIENT_EVIDENCE, "best dense score 0.7000 < gate_min_dense 0.72")
    assert out.hits == [] and len(out.dropped) == 3 and out.info["best_dense"] == 0.7
    passed = run(hits, reranked=False, calibration=Calibration(), settings=GateSettings(min_dense=0.7))
    assert status_of(passed)[0] == UNDECIDED and _ids(passed) == _ids(StageOutput(hits=hits))  # fused: no verdict
    assert GateSettings().min_dense is None
    # native fusion hands back no channel scores: the floor cannot decide, and does not drop anything
    bare = run(_hits(2), reranked=False, calibration=Calibration(), settings=GateSettings(min_dense=0.72))
    assert status_of(bare)[0] == UNDECIDED and len(bare.hits) == 2
    assert status_of(bare)[1].endswith("gate_min_dense not applied: no candidate has a dense score (native fusion "
                                        "returns fused ones)")  # fmt: skip
