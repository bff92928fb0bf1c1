"""Analyzer mirrors (es_rag.analysis) and the embedded backend's configurable multi_match."""

from __future__ import annotations

import numpy as np
import pytest

from es_rag.analysis import (
    ENGLISH_STOP_WORDS,
    analyze,
    cjk_analyzer,
    english_analyzer,
    get_analyzer,
    standard_analyzer,
)
from es_rag.backends.embedded import EmbeddedBackend
from es_rag.backends.embedded import analyze as embedded_analyze
from es_rag.config import Analyzer, Settings
from es_rag.errors import ConfigError
from es_rag.filters import SearchFilter
from es_rag.models import Chunk


def test_standard_keeps_stop_words_and_uax29_joins() -> None:
    assert standard_analyzer("The U.S. can't pay 1,000.50 for foo_bar") == [
        "the", "u.s", "can't", "pay", "1,000.50", "for", "foo_bar",
    ]  # fmt: skip


def test_standard_splits_ideographs_one_per_token() -> None:
    assert standard_analyzer("東京タワー") == ["東", "京", "タワー"]


def test_english_possessive_stop_words_and_porter() -> None:
    assert english_analyzer("John's cells were running into the studies") == ["john", "cell", "were", "run", "studi"]
    assert not set(english_analyzer(" ".join(sorted(ENGLISH_STOP_WORDS))))
    assert len(ENGLISH_STOP_WORDS) == 33


def test_cjk_bigrams_width_folding_and_stop_words() -> None:
    assert cjk_analyzer("東京タワー ＡＢＣ the www") == ["東京", "京タ", "タワ", "ワー", "abc"]


def test_default_analyze_is_reexported_unchanged() -> None:
    assert embedded_analyze is analyze
    assert analyze("東京タワー ABC") == ["東京", "京タ", "タワ", "ワー", "abc"]
    assert get_analyzer(None) is analyze


def test_kuromoji_and_unknown_are_rejected() -> None:
    with pytest.raises(ConfigError, match="kuromoji"):
        get_analyzer(Analyzer.KUROMOJI)
    with pytest.raises(ConfigError, match="valid values"):
        get_analyzer("klingon")


def _chunk(cid: str, title: str, text: str) -> Chunk:
    return Chunk(
        chunk_id=cid, source_id=cid, source_version="1", parent_id=None, heading_path=(), start_offset=0,
        end_offset=len(text), chunker_version="t", tenant_id="t", acl=("public",), title=title, text=text,
        token_count=0, vector=np.ones(4, dtype=np.float32),
    )  # fmt: skip


def test_english_analyzer_matches_inflections_standard_does_not() -> None:
    docs = [_chunk("a", "", "Studies of running mice"), _chunk("b", "", "unrelated text about cats")]
    flt = SearchFilter("t")
    std = EmbeddedBackend(dims=4, analyzer="standard")
    std.index(docs)
    eng = EmbeddedBackend(dims=4, analyzer="english")
    eng.index(docs)
    assert std.bm25("study run", flt, 5) == []
    assert [h.chunk_id for h in eng.bm25("study run", flt, 5)] == ["a"]


def test_tie_breaker_adds_other_fields() -> None:
    docs = [_chunk("a", "malaria", "malaria vaccine trial"), _chunk("b", "other", "nothing relevant here")]
    flt = SearchFilter("t")
    best = EmbeddedBackend(dims=4, bm25_fields=["title", "text"], tie_breaker=0.0)
    best.index(docs)
    tied = EmbeddedBackend(dims=4, bm25_fields=["title", "text"], tie_breaker=0.5)
    tied.index(docs)
    title_only = EmbeddedBackend(dims=4, bm25_fields=["title"])
    title_only.index(docs)
    text_only = EmbeddedBackend(dims=4, bm25_fields=["text"])
    text_only.index(docs)
    s_title = title_only.bm25("malaria", flt, 1)[0].bm25_score
    s_text = text_only.bm25("malaria", flt, 1)[0].bm25_score
    assert s_title is not None and s_text is not None
    assert best.bm25("malaria", flt, 1)[0].bm25_score == pytest.approx(max(s_title, s_text))
    assert tied.bm25("malaria", flt, 1)[0].bm25_score == pytest.approx(
        max(s_title, s_text) + 0.5 * min(s_title, s_text)
    )


def test_settings_validate_bm25_fields_and_tie_breaker() -> None:
    assert Settings(bm25_fields=["title", "text^1.5"]).bm25_fields == ("title", "text^1.5")
    with pytest.raises(ConfigError, match="bm25_fields"):
        Settings(bm25_fields=("title^x",))
    with pytest.raises(ConfigError, match="bm25_fields"):
        Settings(bm25_fields=())
    with pytest.raises(ConfigError, match="tie_breaker"):
        Settings(bm25_tie_breaker=1.5)
