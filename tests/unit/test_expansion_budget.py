"""Expansion within the budget, through the whole pipeline on both backends (embedded, and the Elasticsearch
backend on the strict double, which serves the parent and neighbour fetches as Elasticsearch does): a merged slot is
refilled from the ranked remainder, an expanded block over budget falls back to its children, and settings whose
``context_k`` units cannot fit the budget are warned about (seed 003).

Token counts are whitespace words (:class:`tests.support.corpus.WordTokenizer`), counted by hand: the rendered
context is a 28-word preamble, per source a 4-word block header (fence, source, version, ``title="guide"``), per
excerpt its marker -- 5 words for the first of a block (``[S1] § Guide > guide``), 1 for the next one of the same
section (``[S2]``) -- and its text, and the 1-word closing line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline, SearchResult
from es_rag.records import StageRecord
from tests.support.contract import chunk, load, open_backend
from tests.support.corpus import WordTokenizer

LONG = " ".join(f"w{i}" for i in range(30))  # a 30-word section
CHILDREN = [
    # BM25 for "password reset": a1 (both words twice) > a2 (both once) > b1 (one word); all five words long.
    chunk("a1", "password reset password reset steps", start=0),
    chunk("a2", "password reset link expires soon", start=100),
    chunk("b1", "password rules for the vpn", source="faq", parent="p-faq"),
    chunk("f1", "unrelated words about printers here", source="misc", parent="p-misc"),
    chunk("g1", "password reset password reset steps", tenant="globex", parent="p-guide-g"),
]
PARENTS = [
    chunk("p-guide", LONG, parent=None, kind="parent"),
    chunk("p-faq", "vpn passwords rotate monthly", source="faq", parent=None, kind="parent"),
    chunk("p-misc", "misc", source="misc", parent=None, kind="parent"),
    chunk("p-guide-g", "globex guide", tenant="globex", parent=None, kind="parent"),
]


@pytest.fixture(params=["embedded", "strict-double"])
def loaded(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    with open_backend(request.param) as (backend, settings):
        load(backend, CHILDREN, PARENTS)
        # context_k=2 of the three matches; pure relevance (mmr_lambda=1) so the top two are chosen: a1 and a2.
        yield backend, settings.replace(context_k=2, mmr_lambda=1.0, rerank_calibration="none")


def search(loaded: tuple[Any, Any], **values: Any) -> SearchResult:
    backend, settings = loaded
    pipe = RagPipeline(backend, embedder=None, settings=settings.replace(**values), tokenizer=WordTokenizer())
    return pipe.search("password reset", SearchFilter("acme"))


def stage(result: SearchResult, name: str) -> StageRecord:
    record = result.trace.record(name)
    assert record is not None
    return record


def test_a_merged_parent_slot_is_refilled_and_everything_fits(loaded: tuple[Any, Any]) -> None:
    """a1 and a2 both expand to p-guide: one block for two slots. b1, the best hit selection left out, fills the
    second slot with its section p-faq. The context: 28 + (4 + 5 + 30) + (4 + 5 + 4) + 1 = 81 words."""
    result = search(loaded, expand_mode="parent", token_budget=1500)
    assert [h.chunk_id for h in result.hits] == ["p-guide", "p-faq"]
    assert result.hits[1].expanded_from == ("b1",) and result.hits[1].tenant_id == "acme"
    expand = stage(result, "expand")
    assert expand.dropped == [{"id": "a2", "reason": "merged into parent p-guide"}]
    assert (expand.in_count, expand.out_count) == (3, 2)  # a1, a2 selected + b1 refilled -> 2 blocks + 1 merged
    assert expand.info["refilled"] == ["b1"]
    assert result.trace.paths["expand"].endswith("; 1 merged slot refilled from the ranked remainder")
    assert stage(result, "select").dropped == [{"id": "b1", "reason": "not selected (context_k=2)"}]
    assert result.context.tokens == 81 and stage(result, "pack").dropped == []


def test_a_parent_over_budget_falls_back_to_its_children(loaded: tuple[Any, Any]) -> None:
    """Budget 63: p-guide alone makes 28 + 4 + 5 + 30 + 1 = 68. Its children take its place: a1 makes 28 + 4 + 5 + 5 + 1
    = 43, a1 and a2 (one block) 43 + 1 + 5 = 49. That fills context_k=2, so the refilled p-faq is left out."""
    result = search(loaded, expand_mode="parent", token_budget=63)
    assert [h.chunk_id for h in result.hits] == ["a1", "a2"] and result.context.tokens == 49
    assert [c.chunk_id for c in result.context.citations] == ["a1", "a2"]
    pack = stage(result, "pack")
    assert pack.dropped == [
        {"id": "p-guide", "reason": "parent p-guide over budget (68 tokens > 63 left): kept the children a1, a2"},
        {"id": "p-faq", "reason": "context_k=2 blocks already packed"},
    ]
    assert pack.info["fell_back_to_children"] == {"p-guide": ["a1", "a2"]}
    assert (pack.in_count, pack.out_count) == (4, 2)  # 2 blocks + 2 children in = 2 packed + 2 dropped


def test_a_merged_neighbour_slot_is_refilled(loaded: tuple[Any, Any]) -> None:
    """Window 1: a2 is a1's neighbour, so both are one block of 10 words; b1 (no neighbours) fills the second slot.
    28 + (4 + 5 + 10) + (4 + 5 + 5) + 1 = 62 words."""
    result = search(loaded, expand_mode="neighbors", expand_neighbors=1, token_budget=1500)
    assert [h.chunk_id for h in result.hits] == ["a1", "b1"] and result.hits[0].expanded_from == ("a1", "a2")
    expand = stage(result, "expand")
    assert expand.dropped == [{"id": "a2", "reason": "merged into the neighbour block of a1"}]
    assert expand.info["refilled"] == ["b1"] and (expand.in_count, expand.out_count) == (3, 2)
    assert result.context.tokens == 62


def test_a_neighbour_block_over_budget_falls_back_to_its_anchor(loaded: tuple[Any, Any]) -> None:
    """Budget 46: the block makes 28 + 4 + 5 + 10 + 1 = 48; a1 alone makes 43; a1 and a2 would make 49, a1 and b1 57."""
    result = search(loaded, expand_mode="neighbors", expand_neighbors=1, token_budget=46)
    assert [h.chunk_id for h in result.hits] == ["a1"] and result.hits[0].text == "password reset password reset steps"
    assert stage(result, "pack").dropped == [
        {"id": "a1", "reason": "neighbour block of a1 over budget (48 tokens > 46 left): kept the child a1"},
        {"id": "a2", "reason": "token budget 46 exceeded (in place of neighbour block of a1)"},
        {"id": "b1", "reason": "token budget 46 exceeded"},
    ]
    assert result.context.tokens == 43


def test_units_that_cannot_fit_the_budget_are_warned_about(
    loaded: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """context_k=2 parents of up to 800 tokens = 1600 > 1500: logged once when the pipeline is built, and recorded in
    the pack stage's trace of every search; none when 2 x 200-token chunks fit."""
    with caplog.at_level(logging.WARNING, logger="es_rag"):
        result = search(loaded, expand_mode="parent", token_budget=1500)
    expected = (
        "context_k=2 x parent size 800 tokens = 1600 > token_budget 1500: at most 1 parent will fit "
        "(a parent that does not fit falls back to its child)"
    )
    assert [r.getMessage() for r in caplog.records if r.name.startswith("es_rag")] == [expected]
    assert stage(result, "pack").info["budget_warning"] == expected
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="es_rag"):
        result = search(loaded, token_budget=1500)
    assert not [r for r in caplog.records if r.name.startswith("es_rag")]
    assert "budget_warning" not in stage(result, "pack").info


def test_the_command_line_prints_the_warning_once_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """``es-rag`` routes the package's warnings to stderr as ``es-rag: warning: ...``, once however often it runs."""
    from es_rag.cli import _show_warnings

    _show_warnings()
    _show_warnings()
    logging.getLogger("es_rag.pipeline").warning("context_k=8 x chunk size 512 tokens = 4096 > token_budget 3000")
    err = capsys.readouterr().err
    assert err == "es-rag: warning: context_k=8 x chunk size 512 tokens = 4096 > token_budget 3000\n"
