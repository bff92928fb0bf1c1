"""The strict double's BM25 (``tests/support/double/search.py``, written independently of es_rag's) against real
Lucene 10.5: a ``multi_match`` ``best_fields`` query over a ``text`` field analysed ``english``, on the repository's
en-debian-docs set. Before, the double scored a textbook BM25 over exact lengths and counted documents whose field
analyses to nothing in ``docCount``; Lucene stores each length in one byte (``SmallFloat``) and counts only documents
with a term, and so does the double now."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.double.cluster import StrictCluster
from tests.support.lucene_oracle import LuceneOracle, repo_corpus, repo_queries

QUERIES = 60


def _double(docs: list[dict[str, Any]]) -> StrictCluster:
    cluster = StrictCluster()
    mapping = {"mappings": {"properties": {"title": {"type": "text", "analyzer": "english"},
                                           "text": {"type": "text", "analyzer": "english"}}}}  # fmt: skip
    assert cluster.handle("PUT", "d", "", mapping, {})[0] == 200
    lines: list[Any] = []
    for i, d in enumerate(docs):
        lines += [{"index": {"_index": "d", "_id": str(i)}}, {"title": d.get("title", ""), "text": d["text"]}]
    status, body = cluster.handle("POST", "_bulk", "refresh=true", lines, {})
    assert status == 200 and not body["errors"]
    return cluster


def test_the_doubles_multi_match_scores_are_lucenes(lucene: LuceneOracle) -> None:
    docs = repo_corpus("en-debian-docs")
    # every third title blanked and every fifth made "The" (nothing under english): docCount below the doc count
    docs = [
        {**d, "title": "" if i % 3 == 0 else "The" if i % 5 == 0 else d.get("title", "")} for i, d in enumerate(docs)
    ]
    queries = [q["text"] for q in repo_queries("en-debian-docs")][:QUERIES]
    want = lucene.bm25(
        {"title": "english", "text": "english"},
        [{"title": d["title"], "text": d["text"]} for d in docs],
        queries,
        query_fields=[("title", 2.0), ("text", 1.0)],
        tie_breaker=0.5,
        top=10,
    )["results"]
    cluster = _double(docs)
    worst = 0.0
    for query, expected in zip(queries, want, strict=True):
        body = {
            "size": 10,
            "query": {"multi_match": {"query": query, "fields": ["title^2", "text"], "type": "best_fields",
                                      "tie_breaker": 0.5}},
        }  # fmt: skip
        status, answer = cluster.handle("POST", "d/_search", "", body, {})
        assert status == 200, answer
        hits = answer["hits"]["hits"]
        got = {int(h["_id"]): float(h["_score"]) for h in hits}
        exp = dict(zip(expected["ids"], expected["scores"], strict=True))
        assert set(got) == set(exp) or _ties_only(got, exp), (query, got, exp)
        for doc, score in exp.items():
            if doc in got:
                worst = max(worst, abs(got[doc] - score) / max(score, 1e-9))
    assert worst <= 1e-5, worst


def _ties_only(got: dict[int, float], exp: dict[int, float]) -> bool:
    """The two top 10s differ only among documents scored the same as the tenth."""
    tenth = min(exp.values()) if exp else 0.0
    return all(abs(s - tenth) <= 1e-6 * max(tenth, 1.0) for d, s in {**got, **exp}.items() if (d in got) != (d in exp))


pytestmark = pytest.mark.slow
