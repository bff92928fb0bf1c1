"""Evidence metrics (``es_rag.evaluation.evidence``): answer coverage, duplicate tokens, no-answer precision and
recall, latency percentiles and the memoised backend, on hand-built cases whose values are worked out in the
comments."""

from __future__ import annotations

from typing import Any

import pytest

from es_rag.evaluation.evidence import (
    MemoBackend,
    MemoEmbedder,
    answer_coverage,
    duplicate_tokens,
    latency,
    no_answer,
    summarize,
)
from es_rag.evaluation.golden import GoldSpan
from es_rag.records import Hit

SOURCE = "zero one two three four five six seven eight nine"  # word i starts at a known offset


def _hit(cid: str, start: int, end: int, source: str = "s", text: str | None = None) -> Hit:
    return Hit(
        chunk_id=cid,
        source_id=source,
        text=SOURCE[start:end] if text is None else text,
        tenant_id="t",
        start_offset=start,
        end_offset=end,
    )


def words(text: str) -> int:
    return len(text.split())


def test_coverage_counts_the_union_of_ranges_once() -> None:
    # span [10, 30): [0, 20) covers 10..19, [15, 25) adds 20..24, [12, 18) adds nothing: 15 of 20
    spans = [GoldSpan("s", 10, 30)]
    assert answer_coverage(spans, [_hit("a", 0, 20), _hit("b", 15, 25), _hit("c", 12, 18)]) == (0.75, False)
    # another source's range covers nothing of this span
    assert answer_coverage(spans, [_hit("x", 0, 50, source="other")]) == (0.0, False)
    # two spans: the whole answer needs every character of both
    two = [GoldSpan("s", 0, 4), GoldSpan("s", 40, 45)]
    assert answer_coverage(two, [_hit("a", 0, 10)]) == (4 / 9, False)
    assert answer_coverage(two, [_hit("a", 0, 10), _hit("b", 38, 49)]) == (1.0, True)
    assert answer_coverage([], [_hit("a", 0, 10)]) is None


def test_a_hit_without_offsets_covers_nothing() -> None:
    bare = Hit(chunk_id="b", source_id="s", text="zero one", tenant_id="t")
    assert answer_coverage([GoldSpan("s", 0, 4)], [bare]) == (0.0, False)


def test_duplicate_tokens_count_what_an_earlier_block_of_the_same_source_holds() -> None:
    # block 1 = "zero one two" [0, 12); block 2 = "two three four" [9, 23): "two" (9..12) repeats: 1 duplicate word;
    # block 3 on another source repeats nothing; evidence = 3 + 3 + 2 words
    hits = [_hit("a", 0, 12), _hit("b", 9, 23), _hit("c", 0, 8, source="other", text="zero one")]
    assert duplicate_tokens(hits, words) == (1, 8)
    # a block inside an earlier one is all duplicate
    assert duplicate_tokens([_hit("a", 0, 23), _hit("b", 5, 12)], words) == (2, 7)


def test_duplicate_tokens_of_a_block_whose_text_is_not_its_span_use_the_repeated_share() -> None:
    # an HTML block shows 4 words of visible text for a 20-character markup span; half the span repeats: 2 tokens
    html = Hit(
        chunk_id="h", source_id="s", text="<p>" + "x" * 17, visible_text="a b c d", tenant_id="t",
        start_offset=10, end_offset=30,
    )  # fmt: skip
    assert duplicate_tokens([_hit("a", 0, 20), html], words) == (2, 5 + 4)  # "zero one two three f": 5 words


def _row(gold: list[str], abstained: bool, packed: float | None = 1.0, **extra: Any) -> dict[str, Any]:
    stages = ("retrieved", "reranked", "selected", "expanded", "packed")
    return {
        "gold": gold,
        "abstained": abstained,
        "coverage": dict.fromkeys(stages, packed),
        "whole": dict.fromkeys(stages, None if packed is None else packed == 1.0),
        "context_tokens": 100,
        "evidence_tokens": 80,
        "duplicate_tokens": 8,
        "blocks": 4,
        "latency_ms": {"retrieve": 10.0, "pack": 2.0},
        **extra,
    }


def test_no_answer_precision_and_recall_against_the_golden_truth() -> None:
    rows = [
        _row(["a"], False),  # answerable, answered
        _row(["a"], True),  # answerable, abstained: a wrong abstention
        _row([], True, None),  # unanswerable, abstained: right
        _row([], False, None),  # unanswerable, answered: missed
        _row([], True, None),  # right
    ]
    # abstained 3, of which 2 unanswerable: precision 2/3; unanswerable 3, of which 2 abstained: recall 2/3
    assert no_answer(rows) == {
        "unanswerable": 3,
        "abstained": 3,
        "precision": pytest.approx(0.6667, abs=1e-4),
        "recall": pytest.approx(0.6667, abs=1e-4),
        "answered_wrongly": 1,
        "abstained_wrongly": 1,
    }
    assert no_answer([_row(["a"], False)]) is None
    # nothing abstained: precision is undefined, recall 0
    assert no_answer([_row([], False, None)])["precision"] is None  # type: ignore[index]


def test_no_answer_scores_each_unanswerable_kind_against_the_answerable_abstentions() -> None:
    rows = [
        _row(["a"], True, category="answerable"),  # a wrong abstention, counted against both kinds
        _row(["a"], False, category="answerable"),
        _row([], True, None, category="no-answer"),
        _row([], True, None, category="no-answer"),
        _row([], True, None, category="no-answer-paragraph"),
        _row([], False, None, category="no-answer-paragraph"),
        _row([], False, None, category="no-answer-paragraph"),
    ]
    out = no_answer(rows)
    assert out is not None
    assert (out["precision"], out["recall"]) == (pytest.approx(0.75), pytest.approx(0.6))
    assert out["by_category"] == {
        "no-answer": {"unanswerable": 2, "precision": pytest.approx(0.6667, abs=1e-4), "recall": 1.0},
        "no-answer-paragraph": {"unanswerable": 3, "precision": 0.5, "recall": pytest.approx(0.3333, abs=1e-4)},
    }
    one_kind = [r for r in rows if r["category"] != "no-answer-paragraph"]
    assert "by_category" not in (no_answer(one_kind) or {})


def test_summary_means_over_the_questions_with_spans_and_the_duplicate_rate_over_all_evidence() -> None:
    rows = [_row(["a"], False, 1.0), _row(["a"], False, 0.5), _row([], True, None)]
    s = summarize(rows)
    assert s["with_spans"] == 2
    assert s["answer_coverage"] == 0.75 and s["answer_whole"] == 0.5
    assert s["coverage_by_stage"]["retrieved"] == {"coverage": 0.75, "whole": 0.5}
    assert s["duplicate_token_rate"] == pytest.approx(24 / 240)
    assert s["context_tokens"] == 100 and s["blocks"] == 4
    assert s["no_answer"]["recall"] == 1.0


def test_latency_percentiles_per_stage_and_in_total() -> None:
    rows = [_row(["a"], False, latency_ms={"retrieve": float(ms), "pack": 1.0}) for ms in (10, 20, 30, 40, 50)]
    out = latency(rows)
    assert list(out) == ["retrieve", "pack", "total"]
    assert out["retrieve"] == {"mean": 30.0, "p50": 30.0, "p95": 48.0}  # 40 + 0.8 * (50 - 40)
    assert out["total"]["p50"] == 31.0


class _CountingBackend:
    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def retrieve(self, query: str, vector: Any, flt: Any, settings: Any) -> str:
        self.calls += 1
        return f"{query}:{self.calls}"


class _Settings:
    def __init__(self, k: int) -> None:
        self.retrieve = ("candidate_k", k)


def test_the_memoised_backend_searches_once_per_query_filter_and_retrieval_settings() -> None:
    import numpy as np

    inner = _CountingBackend()
    memo = MemoBackend(inner)
    vec = np.ones(3, dtype=np.float32)
    assert memo.retrieve("q", vec, "f", _Settings(10)) == "q:1"
    assert memo.retrieve("q", vec.copy(), "f", _Settings(10)) == "q:1"  # same query, vector, filter and settings
    assert memo.retrieve("q", vec, "f", _Settings(20)) == "q:2"  # other retrieval settings
    assert memo.retrieve("q", vec, "g", _Settings(10)) == "q:3"  # other filter
    assert memo.retrieve("q", None, "f", _Settings(10)) == "q:4"  # no vector (BM25 only)
    assert memo.name == "counting" and inner.calls == 4


def test_the_memoised_embedder_embeds_each_query_once() -> None:
    class Embedder:
        version = "v"
        calls = 0

        def embed_query(self, text: str) -> list[int]:
            self.calls += 1
            return [len(text)]

    inner = Embedder()
    memo = MemoEmbedder(inner)
    assert memo.embed_query("abc") == [3] and memo.embed_query("abc") == [3] and inner.calls == 1
    assert memo.version == "v"
