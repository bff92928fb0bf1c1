"""The Lucene oracle suite: ``lucene``, one JVM answering for the whole session (:mod:`tests.support.lucene_oracle`;
skipped without ``make lucene-deps``, failed instead under ``ES_RAG_REQUIRE_LUCENE=1``)."""

from tests.support.lucene_oracle import lucene  # noqa: F401  (the session fixture)
