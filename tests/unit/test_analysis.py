"""Analyzer mirrors (es_rag.embedded.analyzers) and the embedded backend's configurable multi_match."""

from __future__ import annotations

import numpy as np
import pytest

from es_rag.embedded.analyzers import (
    ENGLISH_STOP_WORDS,
    analyze,
    cjk_analyzer,
    english_analyzer,
    get_analyzer,
    standard_analyzer,
)
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.embedded.backend import analyze as embedded_analyze
from es_rag.errors import ConfigError
from es_rag.filters import SearchFilter
from es_rag.records import Chunk
from es_rag.settings import Analyzer, Settings


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
    assert Settings(bm25_fields=["title", "text^1.5"]).retrieve.bm25_fields == ("title", "text^1.5")
    with pytest.raises(ConfigError, match="bm25_fields"):
        Settings(bm25_fields=("title^x",))
    with pytest.raises(ConfigError, match="bm25_fields"):
        Settings(bm25_fields=())
    with pytest.raises(ConfigError, match="tie_breaker"):
        Settings(bm25_tie_breaker=1.5)


def _legacy_bm25(tf: int, df: int, n: int, dl: int, avgdl: float, k1: float, b: float) -> float:
    """Elasticsearch's LegacyBM25Similarity, written out: idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))."""
    idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
    return float(idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl)))


@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (0.9, 0.4), (2.0, 0.0)])
def test_bm25_scores_equal_elasticsearch_legacy_bm25_for_any_k1_b(k1: float, b: float) -> None:
    docs = [
        _chunk("a", "", "malaria malaria vaccine"),
        _chunk("b", "", "malaria trial in children of the region with a long text here"),
        _chunk("c", "", "cats dogs"),
    ]
    backend = EmbeddedBackend(dims=4, analyzer="standard", bm25_fields=["text"], bm25_k1=k1, bm25_b=b)
    backend.index(docs)
    lengths = {"a": 3, "b": 12, "c": 2}
    avgdl = sum(lengths.values()) / 3
    got = {h.chunk_id: h.bm25_score for h in backend.bm25("malaria", SearchFilter("t"), 5)}
    assert got == pytest.approx(
        {
            "a": _legacy_bm25(2, 2, 3, lengths["a"], avgdl, k1, b),
            "b": _legacy_bm25(1, 2, 3, lengths["b"], avgdl, k1, b),
        },
        rel=1e-6,
    )


def test_embedded_backend_takes_k1_and_b_from_settings() -> None:
    from es_rag.wiring import embedded_backend

    backend = embedded_backend(Settings(bm25_k1=0.9, bm25_b=0.4), None)
    assert (backend.k1, backend.b) == (0.9, 0.4)


def test_settings_validate_bm25_k1_and_b() -> None:
    with pytest.raises(ConfigError, match="bm25_k1"):
        Settings(bm25_k1=-0.1)
    with pytest.raises(ConfigError, match="bm25_b"):
        Settings(bm25_b=1.5)
