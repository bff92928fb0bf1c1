"""Unit tests of the two mirror fixes the Lucene oracle found, without Java (``tests/lucene/test_*_oracle.py`` check
the same against real Lucene):

- the ``cjk`` stop set is Lucene's ``cjk/stopwords.txt``: the English stop words but ``an``, plus ``s``, ``t``,
  ``www`` (the mirror dropped ``an``, which Elasticsearch's ``cjk`` analyzer keeps);
- BM25 scores with Lucene's statistics: each document's length as ``SmallFloat`` stores it in one byte, ``avgdl`` and
  ``docCount`` over the documents whose field has a term.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from es_rag.embedded.analyzers import CJK_STOP_WORDS, ENGLISH_STOP_WORDS, cjk_analyzer, english_analyzer
from es_rag.embedded.lexical import byte4_to_int, int_to_byte4, lucene_length
from es_rag.filters import SearchFilter
from tests.support.lucene_oracle import embedded_backend

#: (length, SmallFloat.intToByte4 as unsigned, byte4ToInt of it): what Lucene 10.5.0's SmallFloat returns
#: (lucene/core/src/java/org/apache/lucene/util/SmallFloat.java; the oracle's ``smallfloat`` op printed them).
LUCENE_SMALL_FLOAT = [
    (0, 0, 0),
    (1, 1, 1),
    (23, 23, 23),
    (24, 24, 24),
    (25, 25, 25),
    (40, 40, 40),
    (41, 40, 40),
    (47, 43, 46),
    (48, 44, 48),
    (100, 57, 96),
    (255, 70, 248),
    (1000, 87, 984),
    (4096, 103, 3864),
    (65535, 135, 61464),
    (123456, 143, 122904),
    (1000000, 167, 983064),
    (2**31 - 1, 255, 2013265944),
]


def test_cjk_keeps_an_and_drops_s_t_www() -> None:
    assert cjk_analyzer("an apple a day, it's www") == ["an", "apple", "day", "it's"]
    assert english_analyzer("an apple") == ["appl"]
    assert CJK_STOP_WORDS == (ENGLISH_STOP_WORDS - {"an"}) | {"s", "t", "www"}


@pytest.mark.parametrize(("length", "byte", "decoded"), LUCENE_SMALL_FLOAT)
def test_small_float_is_lucenes(length: int, byte: int, decoded: int) -> None:
    assert int_to_byte4(length) == byte
    assert byte4_to_int(byte) == decoded
    assert lucene_length(np.asarray([length]))[0] == decoded


def test_lengths_below_24_are_exact_and_longer_ones_lose_under_an_eighth() -> None:
    n = np.arange(0, 200_000)
    q = lucene_length(n)
    assert np.array_equal(q[:24], n[:24])
    assert np.all(q <= n) and np.all(np.diff(q) >= 0)
    assert np.all(n[24:] - q[24:] < (n[24:] - 24) / 8 + 1)
    assert len({int_to_byte4(int(i)) for i in n}) == int_to_byte4(199_999) + 1  # every byte up to there is used
    with pytest.raises(ValueError):
        int_to_byte4(-1)


def test_bm25_uses_the_stored_length_and_counts_only_documents_with_a_term() -> None:
    """One query term, k1 1.2, b 0.75; the title "the" analyses to nothing and the third document has no title:
    Lucene's docCount for ``title`` is 2 and avgdl is (1 + 100) / 2; the long title's length reads back as 96."""
    docs = [
        {"title": "apple", "text": "x"},
        {"title": " ".join(["apple"] + ["pear"] * 99), "text": "x"},
        {"title": "", "text": "x"},
        {"title": "the", "text": "x"},
    ]
    backend = embedded_backend(docs, "english", bm25_fields=["title"])
    got = {h.chunk_id: h.bm25_score for h in backend.bm25("apple", SearchFilter("t"), 10)}
    k1, b, doc_count, df, avgdl = 1.2, 0.75, 2, 2, np.float32(101 / 2)
    idf = math.log(1 + (doc_count - df + 0.5) / (df + 0.5))

    def score(length: int) -> float:
        return (k1 + 1) * idf * 1 / (1 + k1 * (1 - b + b * length / avgdl))

    assert set(got) == {"d0", "d1"}
    assert got["d0"] == pytest.approx(score(1), rel=1e-6)
    assert got["d1"] == pytest.approx(score(96), rel=1e-6)
    assert got["d1"] != pytest.approx(score(100), rel=1e-4)  # the true length would score it differently


def test_term_frequencies_counted_by_blocks_equal_counted_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`~es_rag.embedded.lexical.lucene_scores` counts tf a block of documents at a time; blocks of 3 give the
    scores one block gives (documents of varied lengths, empty ones included, terms repeated across blocks)."""
    import es_rag.embedded.lexical as lexical

    words = "apple pear plum fig kiwi lime".split()
    docs = [{"text": "x", "title": " ".join(words[(i * j) % 6] for j in range(i % 9))} for i in range(40)]
    queries = ("apple", "pear plum", "fig fig kiwi lime")

    def scores() -> list[list[tuple[str, float | None]]]:
        backend = embedded_backend(docs, "standard", bm25_fields=["title"])  # the index is built at the first search
        return [[(h.chunk_id, h.bm25_score) for h in backend.bm25(q, SearchFilter("t"), 40)] for q in queries]

    want = scores()
    monkeypatch.setattr(lexical, "_TF_BLOCK", 3)
    assert all(want) and scores() == want
