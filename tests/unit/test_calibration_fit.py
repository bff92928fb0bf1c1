"""Fitting a reranker's calibration (``es_rag.cross_encoder.calibration``): Platt scaling, Brier, ECE and the
no-answer threshold, on hand-built cases whose answers are worked out in the comments."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from es_rag.cross_encoder.calibration import (
    CRITERION,
    ScoredQuery,
    brier,
    choose_threshold,
    ece,
    fit_calibration,
    no_answer_accuracy,
    platt,
)
from es_rag.cross_encoder.model import CALIBRATION_FILE, load_calibration
from es_rag.errors import InputError
from es_rag.records import Hit

# 3 relevant and 3 non-relevant pairs: Platt's targets are 4/5 and 1/5. With two distinct scores the fit reproduces
# each score's mean target: at x=+1 (2 relevant, 1 not) (0.8 + 0.8 + 0.2) / 3 = 0.6, at x=-1 0.4. So
# a * 1 + c = logit(0.6) = ln 1.5 and -a + c = ln(2/3) = -ln 1.5: a = ln 1.5, c = 0, temperature = 1 / ln 1.5.
SYMMETRIC_RAW = [1.0, 1.0, 1.0, -1.0, -1.0, -1.0]
SYMMETRIC_REL = [True, True, False, True, False, False]
T_SYMMETRIC = 2.4663034623764317  # 1 / ln(1.5)


def test_platt_two_scores_reproduces_the_smoothed_rates() -> None:
    temperature, bias = platt(SYMMETRIC_RAW, SYMMETRIC_REL)
    assert temperature == pytest.approx(T_SYMMETRIC, rel=1e-5)
    assert bias == pytest.approx(0.0, abs=1e-5)


def test_platt_shifted_scores_move_the_bias_only() -> None:
    temperature, bias = platt([x + 2.0 for x in SYMMETRIC_RAW], SYMMETRIC_REL)
    assert temperature == pytest.approx(T_SYMMETRIC, rel=1e-5)
    assert bias == pytest.approx(2.0, abs=1e-5)


def test_platt_large_logits_do_not_overflow() -> None:
    temperature, bias = platt([x * 400.0 for x in SYMMETRIC_RAW], SYMMETRIC_REL)
    assert temperature == pytest.approx(400.0 * T_SYMMETRIC, rel=1e-4)
    assert bias == pytest.approx(0.0, abs=1e-2)


def test_platt_refuses_one_class_and_a_reversed_model() -> None:
    with pytest.raises(InputError, match=r"labels.*3 and 0"):
        platt([1.0, 2.0, 3.0], [True, True, True])
    with pytest.raises(InputError, match=r"scores.*slope"):
        platt([-x for x in SYMMETRIC_RAW], SYMMETRIC_REL)


def test_brier_and_ece_by_hand() -> None:
    p, y = [0.05, 0.15, 0.95, 0.85], [False, False, True, True]
    # squared errors 0.0025, 0.0225, 0.0025, 0.0225
    assert brier(p, y) == pytest.approx(0.0125)
    # one pair per bin (0, 1, 9, 8): gaps 0.05, 0.15, 0.05, 0.15, each weighted 1/4
    assert ece(p, y) == pytest.approx(0.1)
    # one bin with all four: mean p 0.5, share relevant 0.5
    assert ece([0.4, 0.4, 0.6, 0.6], [False, True, False, True], bins=1) == pytest.approx(0.0)
    assert ece([1.0], [False]) == pytest.approx(1.0)  # 1.0 falls in the last bin
    assert brier([], []) == 0.0 and ece([], []) == 0.0


def test_no_answer_threshold_by_hand() -> None:
    best = [0.9, 0.7, 0.4, 0.2]
    answerable = [True, False, True, False]
    # midpoints of 0, 0.2, 0.4, 0.7, 0.9, 1: accuracies 0.1 -> 2/4, 0.3 -> 3/4, 0.55 -> 2/4, 0.8 -> 3/4, 0.95 -> 2/4;
    # the tie of 0.3 and 0.8 goes to the lower
    assert no_answer_accuracy(best, answerable, 0.3) == 0.75
    assert no_answer_accuracy(best, answerable, 0.55) == 0.5
    assert no_answer_accuracy(best, answerable, 0.9) == 0.75  # 0.9 >= 0.9 answers
    assert choose_threshold(best, answerable) == pytest.approx(0.3)
    assert choose_threshold([0.9, 0.1], [True, False]) == pytest.approx(0.5)
    assert choose_threshold([0.9, 0.1], [True, True]) is None
    assert choose_threshold([0.9, 0.1], [False, False]) is None


def test_fit_calibration_end_to_end_and_the_file(tmp_path: Path) -> None:
    scored = [
        ScoredQuery("q1", (1.0, -1.0), (True, False)),
        ScoredQuery("q2", (1.0, -1.0), (True, True)),
        ScoredQuery("q3", (1.0, -1.0), (False, False)),  # its best score is 0.6 but nothing is relevant
        ScoredQuery("q4", (), ()),  # no candidate: best 0.0, not answerable
    ]
    fit = fit_calibration(scored, data={"dataset": "hand"})
    assert fit.temperature == pytest.approx(T_SYMMETRIC, rel=1e-5)
    assert fit.bias == pytest.approx(0.0, abs=1e-5)
    # best calibrated scores 0.6, 0.6, 0.6, 0.0; answerable T, T, F, F: midpoints 0.3 -> 3/4, 0.8 -> 2/4
    assert fit.threshold == pytest.approx(0.3)
    assert fit.no_answer_accuracy == pytest.approx(0.75)
    assert (fit.queries, fit.answerable, fit.pairs, fit.relevant_pairs) == (4, 2, 6, 3)
    # before: sigmoid(+-1) = 0.731059 / 0.268941; three pairs of each score, two of each wrong-side label
    s1 = 1 / (1 + math.exp(-1))
    assert fit.brier_before == pytest.approx(((1 - s1) ** 2 * 2 + s1**2) / 3, abs=1e-6)
    # after: 0.6 / 0.4 per score: squared errors 0.16 (x4) and 0.36 (x2)
    assert fit.brier_after == pytest.approx((0.16 * 4 + 0.36 * 2) / 6, abs=1e-5)
    assert fit.ece_after == pytest.approx(abs(0.6 - 2 / 3) / 2 + abs(0.4 - 1 / 3) / 2, abs=1e-5)
    assert fit.ece_before == pytest.approx(abs(s1 - 2 / 3), abs=1e-6)
    assert fit.criterion == CRITERION and fit.note == "" and fit.data == {"dataset": "hand"}
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps(fit.to_file()))
    loaded = load_calibration(tmp_path)
    assert loaded.temperature == fit.temperature and loaded.bias == fit.bias and loaded.threshold == fit.threshold
    assert loaded.source == str(tmp_path / CALIBRATION_FILE)


def test_fit_without_unanswerable_queries_leaves_the_threshold_unset() -> None:
    fit = fit_calibration([ScoredQuery("q1", (1.0, -1.0), (True, False)), ScoredQuery("q2", (1.0, -1.0), (True, True))])
    assert fit.threshold is None and fit.no_answer_accuracy is None
    assert "no query without a relevant candidate" in fit.note


def test_scored_query_checks_lengths() -> None:
    with pytest.raises(InputError, match=r"q1.*relevant"):
        ScoredQuery("q1", (1.0,), ())
    with pytest.raises(InputError, match="no scored candidate"):
        fit_calibration([ScoredQuery("q1", (), ())])


def test_scored_queries_through_the_pipeline_then_the_fit() -> None:
    """The real pipeline (embedded backend, 4 one-chunk sources, every one a candidate) with a reranker whose raw
    scores are fixed per text: +1 for s0 and s1, -1 for s2 and s3."""
    from es_rag.evaluation.calibrate import scored_queries
    from es_rag.filters import SearchFilter
    from es_rag.pipeline import RagPipeline
    from es_rag.settings import Settings
    from tests.support.corpus import OverlapReranker, WordTokenizer
    from tests.support.rerank_corpus import Embedder
    from tests.support.rerank_corpus import rerank_backend as _backend

    settings = Settings(vector_dims=3, candidate_k=4, num_candidates=4, rerank_k=4, context_k=3, rerank_model="x",
                        rerank_calibration="none")  # fmt: skip
    reranker = OverlapReranker({"password": 1.0, "sync": 1.0, "NIM-E1042": -1.0, "Retention": -1.0})
    pipe = RagPipeline(_backend(), embedder=Embedder(), settings=settings, tokenizer=WordTokenizer(), reranker=reranker)
    flt = SearchFilter("acme")
    gold = {"q1": {"s0", "s2"}, "q2": {"s1"}, "q3": set()}

    def judge(sources: set[str]) -> Callable[[Hit], bool]:
        return lambda h: h.source_id in sources

    cases = [(q, "reset password", flt, judge(g)) for q, g in gold.items()]
    scored = scored_queries(pipe, cases)
    assert [len(s.raw) for s in scored] == [4, 4, 4]
    assert all(sorted(s.raw) == [-1.0, -1.0, 1.0, 1.0] for s in scored)
    assert [sum(s.relevant) for s in scored] == [2, 1, 0]
    fit = fit_calibration(scored)
    # 12 pairs: at x=+1 6 pairs, 2 relevant (s0 for q1, s1 for q2); at x=-1 6 pairs, 1 relevant (s2 for q1).
    # N+ = 3, N- = 9: targets 4/5 and 1/11. The fit reproduces each score's mean target.
    p_hi = (2 * 0.8 + 4 / 11) / 6
    p_lo = (0.8 + 5 / 11) / 6
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    a = (logit(p_hi) - logit(p_lo)) / 2
    c = (logit(p_hi) + logit(p_lo)) / 2
    assert fit.temperature == pytest.approx(1 / a, rel=1e-4)
    assert fit.bias == pytest.approx(-c / a, rel=1e-4)
    # every query's best candidate scores +1 (p_hi); q1 and q2 are answerable, q3 is not: midpoints p_hi / 2 (all
    # answer: 2/3 right) and (p_hi + 1) / 2 (none answers: 1/3 right)
    assert fit.threshold == pytest.approx(p_hi / 2, rel=1e-4)
    assert fit.no_answer_accuracy == pytest.approx(2 / 3, abs=1e-6)
    assert (fit.queries, fit.answerable, fit.pairs, fit.relevant_pairs) == (3, 2, 12, 3)
