"""scripts/no_answer_probe.py's arithmetic: ROC AUC, abstention precision and recall, the threshold chosen on the
calibration part (the search loop runs on a real index only, in docs/evaluation.md's measurement)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "no_answer_probe", Path(__file__).resolve().parents[2] / "scripts" / "no_answer_probe.py"
)
assert _SPEC is not None and _SPEC.loader is not None
probe = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(probe)


def test_auc_counts_pairs_and_ties_half() -> None:
    assert probe.auc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert probe.auc([0.1, 0.9], [True, False]) == 0.0
    assert probe.auc([0.5, 0.5], [True, False]) == 0.5


def test_abstention_and_the_calibrated_threshold() -> None:
    rows = [
        {"answerable": True, "dense": 0.9},
        {"answerable": True, "dense": 0.6},
        {"answerable": False, "dense": 0.5},
        {"answerable": False, "dense": 0.7},
    ]
    assert probe.abstention(rows, "dense", 0.55) == (1.0, 0.5)  # abstains on 0.5 only: right, half of the two
    assert probe.abstention(rows, "dense", 0.1) == (None, 0.0)
    p, r = probe.abstention(rows, "dense", 0.8)  # abstains on 0.6, 0.5, 0.7: two of three right, both found
    assert (p, r) == (pytest.approx(2 / 3), 1.0)
    assert probe.best_threshold(rows, "dense") == 0.9  # F1 0.8 (precision 2/3, recall 1): the best on these rows
