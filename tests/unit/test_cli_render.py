"""What the CLI prints of a search result (es_rag.cli.render)."""

from __future__ import annotations

import pytest

from es_rag.cli import render
from es_rag.records import Trace
from es_rag.result import SearchResult
from es_rag.stages.pack import PackedContext


def test_the_undecided_explanation_is_printed_once_a_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46, item 11: the three-line "undecided" explanation came with every result (the demo prints several)."""
    monkeypatch.setitem(render._SAID, "undecided", False)
    result = SearchResult("q", [], PackedContext("", 0), Trace(), [])
    for _ in range(3):
        render.print_result(result)
    out = capsys.readouterr().out
    assert out.count("status: undecided") == 3
    assert out.count("the no-answer gate judges calibrated cross-encoder scores only") == 1
