"""Golden sets (``es_rag.evaluation.golden``): the file format, its errors, the relevance rule and every metric on
a hand-built case whose values are worked out in the comments."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from es_rag.errors import InputError
from es_rag.evaluation.evidence import answer_coverage
from es_rag.evaluation.golden import (
    GoldSpan,
    context_recall,
    load_golden,
    parse_question,
    question_filter,
    rank_metrics,
    ranked_sources,
)
from es_rag.evaluation.metrics import run_from_ids
from es_rag.records import Hit


def _write(tmp_path: Path, *lines: object) -> Path:
    p = tmp_path / "golden.jsonl"
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return p


def _hit(cid: str, source: str, start: int = 0, end: int = 10, parent: str | None = None) -> Hit:
    return Hit(
        chunk_id=cid, source_id=source, text="x", tenant_id="t", start_offset=start, end_offset=end, parent_id=parent
    )


def test_full_line_and_defaults(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "id": "q1",
            "question": "what?",
            "gold": ["A", {"source_id": "B", "chunk_ids": ["b1"]}],
            "spans": [{"source_id": "A", "start": 3, "end": 9}],
            "acceptable_parents": ["pB"],
            "category": "cat",
            "tenant": "acme",
            "groups": ["eng"],
            "filters": {"doc_type": "policy", "lang": ["en", "ja"]},
        },
        "",
        {"question": "no answer?", "gold": []},
    )
    q1, q2 = load_golden(path)
    assert q1.id == "q1" and q1.gold == {"A": (), "B": ("b1",)}
    assert q1.spans == (GoldSpan("A", 3, 9),) and q1.acceptable_parents == ("pB",)
    assert (q1.category, q1.tenant, q1.groups) == ("cat", "acme", ("eng",))
    assert q1.filters == {"doc_type": ("policy",), "lang": ("en", "ja")}
    assert q2.id == "line-3" and q2.gold == {} and q2.category == "uncategorised" and q2.tenant is None
    flt = question_filter(q1, "other", ("x",))
    assert flt.tenant_id == "acme" and flt.groups == ("eng", "public") and flt.metadata["lang"] == ("en", "ja")
    flt = question_filter(q2, "other", ("x",))
    assert flt.tenant_id == "other" and flt.groups == ("x", "public")
    with pytest.raises(InputError, match="golden question line-3: field 'tenant'"):
        question_filter(q2, None)


@pytest.mark.parametrize(
    ("line", "field", "reason"),
    [
        ('{"question": "q", "gold": [}', "json", "not valid JSON"),
        ("[1]", "question", "JSON object"),
        ({"gold": ["A"]}, "question", "missing or empty"),
        ({"question": " ", "gold": ["A"]}, "question", "missing or empty"),
        ({"question": "q"}, "gold", "use [] for a question"),
        ({"question": "q", "gold": "A"}, "gold", "must be a list"),
        ({"question": "q", "gold": [3]}, "gold[0]", "source id or an object"),
        ({"question": "q", "gold": [{"source_id": "A", "chunk": 1}]}, "gold[0].chunk", "unknown field"),
        ({"question": "q", "gold": [{"source_id": "A", "chunk_ids": "c"}]}, "gold[0].chunk_ids", "list of non-empty"),
        ({"question": "q", "gold": ["A"], "spans": [{"source_id": "A", "start": 5}]}, "spans[0]", "exactly"),
        (
            {"question": "q", "gold": ["A"], "spans": [{"source_id": "A", "start": 5, "end": 5}]},
            "spans[0]",
            "start < end",
        ),
        (
            {"question": "q", "gold": ["A"], "spans": [{"source_id": "A", "start": "1", "end": 5}]},
            "spans[0]",
            "integers",
        ),
        (
            {"question": "q", "gold": ["A"], "spans": [{"source_id": "B", "start": 1, "end": 5}]},
            "spans[0].source_id",
            "not among gold",
        ),
        ({"question": "q", "gold": [], "category": ""}, "category", "non-empty"),
        ({"question": "q", "gold": [], "tenant": 3}, "tenant", "non-empty"),
        ({"question": "q", "gold": [], "groups": "eng"}, "groups", "list of non-empty"),
        ({"question": "q", "gold": [], "filters": ["x"]}, "filters", "must be an object"),
        ({"question": "q", "gold": [], "filters": {"k": [1]}}, "filters.k", "list of non-empty"),
        ({"question": "q", "gold": [], "answer": "x"}, "answer", "unknown field"),
    ],
)
def test_errors_name_the_line_and_the_field(tmp_path: Path, line: object, field: str, reason: str) -> None:
    path = _write(tmp_path, {"question": "fine", "gold": []}, line)
    with pytest.raises(InputError) as err:
        load_golden(path)
    assert err.value.document == f"{path}:2" and err.value.field == field
    assert reason in err.value.reason


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="field 'golden': unreadable"):
        load_golden(tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match="no question in the file"):
        load_golden(_write(tmp_path, ""))
    with pytest.raises(InputError, match=r":2: field 'id': 'a' repeats line 1"):
        load_golden(
            _write(tmp_path, {"id": "a", "question": "q", "gold": []}, {"id": "a", "question": "r", "gold": []})
        )


def test_relevance_rule() -> None:
    q = parse_question({"question": "q", "gold": ["A", {"source_id": "B", "chunk_ids": ["b1"]}],
                        "acceptable_parents": ["pB"]}, "f:1", 1)  # fmt: skip
    assert q.relevant(_hit("a9", "A"))  # any chunk of A
    assert q.relevant(_hit("b1", "B"))  # a listed chunk of B
    assert not q.relevant(_hit("b2", "B"))  # another chunk of B
    assert q.relevant(_hit("b3", "B", parent="pB"))  # a child of an acceptable parent
    assert not q.relevant(_hit("c1", "C", parent="pB"))  # C is not gold at all


def test_holds_answer_is_span_level_and_falls_back_to_the_source_rule() -> None:
    q = parse_question({"question": "q", "gold": ["A"], "spans": [{"source_id": "A", "start": 10, "end": 20}]},
                       "f:1", 1)  # fmt: skip
    at = lambda s, e, src="A": _hit("x", src, s, e)  # noqa: E731
    assert q.holds_answer(at(0, 11)) and q.holds_answer(at(19, 40)) and q.holds_answer(at(12, 15))
    assert not q.holds_answer(at(0, 10))  # ends where the span starts: [start, end) do not overlap
    assert not q.holds_answer(at(20, 30))
    assert not q.holds_answer(at(10, 20, "B"))  # the same offsets in another source
    assert q.relevant(at(20, 30))  # the source rule still counts it
    assert q.holds_answer(replace(at(20, 30), start_offset=None, end_offset=None))  # no offsets: the source rule
    no_spans = parse_question({"question": "q", "gold": ["A"]}, "f:2", 2)
    assert no_spans.holds_answer(at(20, 30)) and not no_spans.holds_answer(at(20, 30, "B"))


# Question 1: gold A and B; ranked chunks x(C), a1(A), c2(C), b1(B), a2(A) -> sources ~C, A, B.
#   R@5 = 1; RR = 1/2; P@5 = 2/5; P@10 = 2/10; AP = (1/2 + 2/3) / 2 = 0.583333;
#   nDCG@10 = (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3)) = 1.130930 / 1.630930 = 0.693426.
# Question 2: gold D, only chunk d2; ranked d1(D), d2(D) -> ~D, D (d1 does not count).
#   R@5 = 1; RR = 1/2; P@5 = 1/5; P@10 = 1/10; AP = 1/2; nDCG@10 = 1/log2(3) = 0.630930.
# Question 3: gold E, ranked e only at rank 6 (after five other sources): R@5 = 0, R@10 = 1, RR@10 = 1/6,
#   P@5 = 0, P@10 = 1/10, AP = 1/6, nDCG@10 = 1/log2(7) = 0.356207.
def test_metrics_on_a_hand_built_case() -> None:
    q1 = parse_question({"id": "q1", "question": "q", "gold": ["A", "B"]}, "f:1", 1)
    q2 = parse_question({"id": "q2", "question": "q", "gold": [{"source_id": "D", "chunk_ids": ["d2"]}]}, "f:2", 2)
    q3 = parse_question({"id": "q3", "question": "q", "gold": ["E"]}, "f:3", 3)
    r1 = ranked_sources(q1, [_hit("x", "C"), _hit("a1", "A"), _hit("c2", "C"), _hit("b1", "B"), _hit("a2", "A")])
    r2 = ranked_sources(q2, [_hit("d1", "D"), _hit("d2", "D")])
    r3 = ranked_sources(q3, [*(_hit(f"o{i}", f"O{i}") for i in range(5)), _hit("e", "E")])
    assert r1 == ["~C", "A", "B"] and r2 == ["~D", "D"] and r3[-1] == "E" and len(r3) == 6
    qrels = {"q1": {"A": 1, "B": 1}, "q2": {"D": 1}, "q3": {"E": 1}}
    run = {"q1": run_from_ids(r1), "q2": run_from_ids(r2), "q3": run_from_ids(r3)}
    m = rank_metrics(qrels, run)
    assert m["recall@5"] == pytest.approx((1 + 1 + 0) / 3, abs=1e-4)
    assert m["recall@10"] == 1.0 and m["recall@20"] == 1.0
    assert m["mrr@10"] == pytest.approx((0.5 + 0.5 + 1 / 6) / 3, abs=1e-4)
    assert m["p@5"] == pytest.approx((0.4 + 0.2 + 0.0) / 3, abs=1e-4)
    assert m["p@10"] == pytest.approx((0.2 + 0.1 + 0.1) / 3, abs=1e-4)
    assert m["map"] == pytest.approx((0.583333 + 0.5 + 1 / 6) / 3, abs=1e-4)
    assert m["ndcg@10"] == pytest.approx((0.693426 + 0.630930 + 0.356207) / 3, abs=1e-4)
    # a judged question missing from the run scores 0 everywhere
    assert rank_metrics({"q1": {"A": 1}}, {})["recall@20"] == 0.0


def test_answer_coverage_and_context_recall() -> None:
    spans = [GoldSpan("A", 10, 30), GoldSpan("B", 0, 10)]
    # A is covered by [0, 20) and [15, 25): characters 10..24 = 15 of 20; B not at all: 15 of 30
    hits = [_hit("a1", "A", 0, 20), _hit("a2", "A", 15, 25), _hit("c", "C", 0, 100)]
    assert answer_coverage(spans, hits) == (0.5, False)
    share, whole = answer_coverage(spans, [_hit("a", "A", 0, 100), _hit("b", "B", 5, 8)])  # type: ignore[misc]
    assert share == pytest.approx(23 / 30) and not whole
    assert answer_coverage(spans, [_hit("a", "A", 0, 100), _hit("b", "B", 0, 8), _hit("b2", "B", 8, 12)]) == (1.0, True)
    assert answer_coverage([], hits) is None
    q = parse_question({"question": "q", "gold": ["A", "B", "D"]}, "f:1", 1)
    assert context_recall(q, hits) == pytest.approx(1 / 3)
    assert context_recall(parse_question({"question": "q", "gold": []}, "f:1", 1), hits) is None
