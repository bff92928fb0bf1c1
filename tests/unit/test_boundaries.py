"""Boundaries that hand-made mutants once crossed without a failing test (issue 33, item 7). Every expected value is
written out by hand, not computed by the code under test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from es_rag import languages
from es_rag.elasticsearch.bodies import source_spec
from es_rag.ingest import IngestReport, chunk_documents
from es_rag.ingest.sources import SourceDoc
from es_rag.metadata import MetadataSchema, parse_filter
from es_rag.query import MAX_IDENTIFIERS, extract_identifiers, is_identifier
from es_rag.records import Chunk, Hit
from es_rag.settings import RerankSettings
from es_rag.stages.rerank import RerankStage


@pytest.mark.parametrize(
    "token, expected",
    [("v2", True), ("E1", True), ("x", False), ("v", False), ("42", False), ("ab", False), ("a_b", True)],
)
def test_two_character_identifiers_are_identifiers(token: str, expected: bool) -> None:
    assert is_identifier(token) is expected


def test_a_query_keeps_exactly_its_first_eight_identifiers() -> None:
    query = "E1 E2 E3 E4 E5 E6 E7 E8 E9 E10"
    assert MAX_IDENTIFIERS == 8
    assert extract_identifiers(query) == ["E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8"]
    assert extract_identifiers("see v2 and v2 again") == ["v2"]


def test_source_spec_asks_for_the_vectors_on_9_2_and_says_nothing_before() -> None:
    assert source_spec(vectors_in_source_param=True)["exclude_vectors"] is False
    assert "exclude_vectors" not in source_spec(vectors_in_source_param=False)


@pytest.mark.parametrize(
    "expr, value, expected",
    [
        ("year>=2020", 2020, True),
        ("year>=2020", 2019, False),
        ("year>2020", 2020, False),
        ("year>2020", 2021, True),
        ("year<=2020", 2020, True),
        ("year<=2020", 2021, False),
        ("year<2020", 2020, False),
        ("year<2020", 2019, True),
    ],
)
def test_range_bounds_on_the_per_document_path(expr: str, value: int, expected: bool) -> None:
    schema = MetadataSchema.declare(["year:integer"])
    condition = parse_filter(expr, schema)
    assert condition.matches({"meta": {"year": value}}, now_ms=0) is expected


def _hit(cid: str) -> Hit:
    return Hit(chunk_id=cid, source_id="s", text=f"text of {cid}", tenant_id="t")


def test_the_rerank_cache_key_changes_with_the_candidates() -> None:
    reranker = SimpleNamespace(
        name="tiny-ce", version="w1", long_text="truncate", aggregation="max", top_m=1, max_length=256
    )
    stage = RerankStage(reranker, RerankSettings(), cache=None)  # type: ignore[arg-type]
    ab = stage._cache_key("reset password", [_hit("a"), _hit("b")])
    assert ab == stage._cache_key("reset password", [_hit("a"), _hit("b")])
    assert ab != stage._cache_key("reset password", [_hit("a"), _hit("c")])
    assert ab != stage._cache_key("reset password", [_hit("b"), _hit("a")])
    assert ab != stage._cache_key("reset password", [_hit("a")])


@pytest.mark.parametrize("text, expected", [("abc", "ja"), ("ab", None), ("a1b2", None), ("日本語", "ja")])
def test_three_letters_are_enough_for_a_language(
    text: str, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(languages, "language_scores", lambda t, c=None: [("ja", 0.99), ("en", 0.01)])
    assert languages.detect_language(text) == expected


@pytest.mark.parametrize("p, routed", [(0.9, "ja"), (0.95, "ja"), (0.8999, None)])
def test_a_query_routes_from_exactly_ninety_percent(
    p: float, routed: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(languages, "language_scores", lambda t, c=None: [("ja", p), ("en", 1 - p)])
    decision = languages.query_language("pasuwaado no risetto", "auto", ["en", "ja"], None)
    assert decision.code == routed and decision.how == ("detected" if routed else "unknown")


class _Chunker:
    """Returns children of the given token counts; the model's input limit is 10 tokens."""

    def __init__(self, counts: list[int]) -> None:
        self.tokenizer = SimpleNamespace(max_tokens=10)
        self.counts = counts

    def chunk(self, text: str, **kw: object) -> list[Chunk]:
        return [
            Chunk(
                chunk_id=f"c{n}",
                source_id="doc.md",
                source_version="v1",
                parent_id=None,
                heading_path=(),
                start_offset=0,
                end_offset=len(text),
                chunker_version="t",
                tenant_id="t",
                acl=("public",),
                title="doc",
                text=text,
                token_count=n,
            )
            for n in self.counts
        ]


def test_the_input_limit_warning_starts_one_token_over_the_limit() -> None:
    doc = SourceDoc(source_id="doc.md", text="some text here", tenant_id="t", acl=("public",), source_version="v1")
    report = IngestReport()
    chunk_documents([doc], _Chunker([9, 10, 11]), report, corpus_language="en")  # type: ignore[arg-type]
    assert [w["reason"].split(" ")[1] for w in report.warnings] == ["c11"]
    assert "has 11 tokens, over the model's input limit of 10" in report.warnings[0]["reason"]
