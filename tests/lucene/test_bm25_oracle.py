"""The embedded backend's BM25 (:meth:`~es_rag.embedded.lexical.LexicalChannels.bm25`, bm25s with Lucene's statistics)
against real Lucene 10.5 running Elasticsearch's ``LegacyBM25Similarity`` (``BM25Similarity`` times ``k1 + 1``) over
one segment, as a one-shard index scores: for every query the same top 10 (documents with equal scores may swap) and
every compared score within 1e-5 relative -- the embedded top 100 of each query, and every matching document of
every tenth query (with the set of matching documents).

Query sets: the repository's debian-docs sets (610 English, 369 Japanese queries) and, when present, all 300 SciFact
test queries (``qrels/test.tsv``) over its 5,183 abstracts. Japanese text is scored under ``cjk`` (the embedded
mirror of ``kuromoji``). Before Lucene's statistics (a textbook BM25 over the true lengths), half of the debian-docs
top 10s differed and scores were up to 9% off (reports/lucene-oracle.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from es_rag.embedded.analyzers import english_analyzer
from es_rag.embedded.lexical import int_to_byte4, lucene_length
from tests.support.lucene_oracle import (
    LuceneOracle,
    compare_bm25,
    repo_corpus,
    repo_queries,
    scifact_corpus,
    scifact_test_queries,
)

pytestmark = pytest.mark.slow  # real corpora

TOLERANCE = 1e-5


def _load(corpus: str) -> tuple[list[dict[str, Any]], list[str]]:
    if corpus == "scifact":
        return scifact_corpus(), [q["text"] for q in scifact_test_queries()]
    return repo_corpus(corpus), [q["text"] for q in repo_queries(corpus)]


@pytest.mark.parametrize(
    ("corpus", "analyzer"), [("en-debian-docs", "english"), ("ja-debian-docs", "cjk"), ("scifact", "english")]
)
def test_embedded_bm25_is_lucenes_on_one_field(lucene: LuceneOracle, corpus: str, analyzer: str) -> None:
    docs, queries = _load(corpus)
    got = compare_bm25(lucene, docs, queries, analyzer, full_every=10)
    assert got.queries == len(queries) >= 300
    assert got.top10_tied == got.queries, f"{got.queries - got.top10_tied} top-10 lists differ"
    assert got.max_rel <= TOLERANCE, got.worst
    assert got.full_queries >= 30 and got.matched_set_differs == 0


def test_best_fields_with_boosts_tie_breaker_and_empty_titles(lucene: LuceneOracle) -> None:
    """``multi_match`` ``best_fields`` over ``title^2`` and ``text``, tie breaker 0.5 (the default of
    ``bm25_tie_breaker``), on en-debian-docs with every third title blanked and every fifth made ``The`` (nothing
    under ``english``): Lucene's ``title`` statistics count only the documents whose title has a term."""
    docs, queries = _load("en-debian-docs")
    docs = [
        {**d, "title": "" if i % 3 == 0 else "The" if i % 5 == 0 else d.get("title", "")} for i, d in enumerate(docs)
    ]
    got = compare_bm25(lucene, docs, queries, "english", fields=(("title", 2.0), ("text", 1.0)), tie_breaker=0.5)
    assert got.top10_tied == got.queries == len(queries)
    assert got.max_rel <= TOLERANCE, got.worst
    assert got.matched_set_differs == 0
    stats = lucene.bm25({"title": "english"}, [{"title": d["title"]} for d in docs], [])["stats"]["title"]
    lengths = [len(english_analyzer(d["title"])) for d in docs]
    assert stats == {"doc_count": sum(n > 0 for n in lengths), "sum_total_term_freq": sum(lengths)}
    assert stats["doc_count"] < len(docs)
    title_only = compare_bm25(lucene, docs, queries, "english", fields=(("title", 1.0),), full_every=1)
    assert title_only.top10_tied == title_only.queries and title_only.max_rel <= TOLERANCE, title_only.worst
    assert title_only.matched_set_differs == 0


def test_lucene_length_is_smallfloats_for_every_length_to_70000_and_beyond(lucene: LuceneOracle) -> None:
    """``int_to_byte4`` and :func:`~es_rag.embedded.lexical.lucene_length` against Lucene's own ``SmallFloat``."""
    lengths = [*range(70_000), *(int(x) for x in np.geomspace(70_000, 2**31 - 1, 2000)), 2**31 - 1]
    want_bytes, want_lengths = lucene.small_float(lengths)
    assert [int_to_byte4(n) for n in lengths] == want_bytes
    assert lucene_length(np.asarray(lengths)).tolist() == want_lengths
