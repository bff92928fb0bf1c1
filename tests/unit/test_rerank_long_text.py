"""Long passages: tokens are counted first, and only a passage over the model's limit is windowed or truncated;
one that fits is scored once, whole, whatever ``long_text`` says (the cost of ``windows`` is paid only where a
passage really exceeds the limit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from es_rag.cross_encoder.model import CrossEncoderReranker

SHORT = ("Title: Trash\nContent:\n", "Deleted files are kept in the trash for 60 days.")
LONG = ("Title: Long\nContent:\n", " ".join(f"word{i % 17}" for i in range(400)))


@pytest.mark.parametrize("long_text", ["windows", "truncate"])
def test_only_passages_over_the_limit_are_windowed_or_cut(tiny_cross_encoder: Path, long_text: str) -> None:
    rr = CrossEncoderReranker(str(tiny_cross_encoder), long_text=long_text)
    out = rr.score("trash policy", [SHORT, LONG, SHORT])
    short, long, short2 = out.truncation
    assert short.strategy == short2.strategy == "none" and short.windows == 1 and not short.truncated
    assert short.original_tokens == short.model_tokens < rr.limit()
    assert long.original_tokens > rr.limit() and long.strategy == long_text
    assert out.pairs == 2 + long.windows  # one forward pair per fitting passage
    assert len(out.window_scores[0]) == len(out.window_scores[2]) == 1
    # a fitting passage scores the same whether or not a long one shares its batch
    alone = rr.score("trash policy", [SHORT])
    np.testing.assert_allclose(alone.scores, out.scores[:1], rtol=1e-5, atol=1e-6)


def test_truncate_scores_the_first_window(tiny_cross_encoder: Path) -> None:
    """``truncate`` keeps the header and the head of the content: exactly the first of the ``windows`` windows, so
    ``windows`` + ``max`` can only raise a long passage's score over ``truncate``."""
    windows = CrossEncoderReranker(str(tiny_cross_encoder), long_text="windows").score("q", [LONG])
    cut = CrossEncoderReranker(str(tiny_cross_encoder), long_text="truncate").score("q", [LONG])
    assert windows.truncation[0].windows > 1 and cut.pairs == 1
    np.testing.assert_allclose(cut.scores[0], windows.window_scores[0][0], rtol=1e-5, atol=1e-6)
    assert windows.scores[0] >= cut.scores[0] - 1e-6
