"""The arithmetic of ``es-rag calibrate --gate-floor`` (es_rag/evaluation/floor.py): ROC AUC, abstention precision
and recall, and the floor of the best abstention F1; each expected value is worked out by hand in the comment beside
it. The search loop runs on a real embedded index in tests/e2e/test_golden_eval.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from es_rag.errors import ConfigError
from es_rag.evaluation.floor import FloorFit, abstention, auc, best_dense, fit_threshold, floor_file, format_floor
from es_rag.settings.file import parse_settings


def test_auc_counts_pairs_and_ties_half() -> None:
    assert auc([0.9, 0.8, 0.1], [True, True, False]) == 1.0  # both positives above the negative
    assert auc([0.1, 0.9], [True, False]) == 0.0
    assert auc([0.5, 0.5], [True, False]) == 0.5  # one tied pair
    assert auc([0.9, 0.4, 0.5, 0.3], [True, True, False, False]) == 0.75  # pairs won: 0.9>0.5, 0.9>0.3, 0.4>0.3
    with pytest.raises(ValueError):
        auc([0.5], [True])


def test_abstention_precision_recall_and_lost_answers() -> None:
    best = [0.9, 0.6, 0.5, 0.7]
    answerable = [True, True, False, False]
    assert abstention(best, answerable, 0.55) == (1.0, 0.5, 0)  # abstains on 0.5 only: right, half of the two
    assert abstention(best, answerable, 0.1) == (None, 0.0, 0)  # abstains on none
    p, r, lost = abstention(best, answerable, 0.8)  # abstains on 0.6, 0.5, 0.7: two of three right, both found
    assert (p, r, lost) == (pytest.approx(2 / 3), 1.0, 1)
    assert abstention(best, answerable, 0.5) == (None, 0.0, 0)  # a score on the floor reaches it


def test_the_floor_is_a_midpoint_of_the_best_f1() -> None:
    # cuts 0.45, 0.7, 0.85; below 0.7 abstains on exactly the two unanswerable questions: F1 1
    assert fit_threshold([0.9, 0.8, 0.6, 0.3], [True, True, False, False]) == pytest.approx(0.7)
    # cuts 0.5 (abstains on 0.4: P 1, R 1/2, F1 2/3), 0.65 (0.6, 0.4: P 1/2, R 1/2), 0.75 (0.7, 0.6, 0.4: P 1/3,
    # R 1/2), 0.9 (0.8, 0.7, 0.6, 0.4: P 1/2, R 1, F1 2/3): the tie goes to the lower floor, 0.5
    assert fit_threshold([1.0, 0.8, 0.7, 0.6, 0.4], [True, False, True, True, False]) == pytest.approx(0.5)


def test_best_dense_reads_the_fused_candidates() -> None:
    def hit(dense: float | None) -> SimpleNamespace:
        return SimpleNamespace(dense_score=dense)

    fused = SimpleNamespace(stage_hits={"retrieved": [hit(0.6), hit(None), hit(0.8)]}, candidates=[hit(0.1)])
    assert best_dense(fused) == 0.8
    native = SimpleNamespace(stage_hits={"retrieved": [hit(None)]}, candidates=[])
    assert best_dense(native) is None


def test_the_floor_file_is_a_settings_file_that_reads_back() -> None:
    import tomllib

    fit = FloorFit(
        threshold=0.7254,
        auc=0.93,
        precision=0.81,
        recall=0.9,
        answerable=237,
        unanswerable=117,
        answerable_abstained=20,
        without_dense=3,
        embedding_model="sentence-transformers/all-MiniLM-L6-v2",
        golden="calib.jsonl",
    )
    text = floor_file(fit)
    assert parse_settings(tomllib.loads(text), where="floor") == {"gate_min_dense": 0.7254}
    assert "all-MiniLM-L6-v2" in text and "117 unanswerable" in text  # provenance in the header
    shown = format_floor(fit)
    assert "gate_min_dense 0.7254" in shown and "20 answerable questions" in shown
    assert "3 questions left out: no candidate had a dense score" in shown
    with pytest.raises(ConfigError):
        parse_settings({"gate": {"gate_min_dense": -1.0}}, where="floor")  # the settings refuse a floor <= 0


def test_a_fit_without_dense_scores_says_what_it_needs(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Native fusion returns fused scores only: every question lacks a dense score, and the fit says to search with
    client-side fusion instead of fitting nothing."""
    import json

    import es_rag.wiring
    from es_rag.evaluation.floor import calibrate_floor
    from es_rag.settings import Settings

    golden = tmp_path / "g.jsonl"
    rows = [{"id": "a", "question": "q1", "gold": ["a.md"]}, {"id": "b", "question": "q2", "gold": []}]
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    native = SimpleNamespace(stage_hits={"retrieved": [SimpleNamespace(dense_score=None)]}, candidates=[])
    fake = SimpleNamespace(search=lambda question, flt: native)
    monkeypatch.setattr(es_rag.wiring, "build_pipeline", lambda settings, backend, embedder: fake)
    with pytest.raises(ConfigError, match=r"2 of 2 questions got no dense score.*--fusion-path client"):
        calibrate_floor(golden, backend=None, embedder=None, settings=Settings(), tenant="t")
