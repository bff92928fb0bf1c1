"""No query may crash retrieval (issue 17).

``es-rag search "Type S engines" --analyzer english`` on an embedded index, and any query holding a lone ``s``,
``S-IVB`` or ``S-IC``, ended in bm25s's ``ValueError: The maximum token ID in the query ... is higher than the
number of tokens in the index``: the ``english`` mirror stemmed ``s`` to ``""``, and bm25s keeps ``""`` in its
vocabulary with an id past its score matrix. The regression tests below name those queries; the property test
throws arbitrary text (any Unicode, punctuation, CJK, emoji, very long) at every analyzer and every channel and
accepts only a result or an :class:`~es_rag.errors.EsRagError`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag.embedded.analyzers import get_analyzer
from es_rag.embedded.backend import EmbeddedBackend, _scorable_tokens
from es_rag.errors import EsRagError
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.records import Chunk
from es_rag.settings import Analyzer, Settings
from tests.support.corpus import DIMS, OverlapReranker, RandomEmbedder, WordTokenizer

TEXTS = [
    "The S-IVB third stage used one J-2 engine; the S-IC first stage used five F-1 engines.",
    "Type S engines are rated for continuous duty. Error E1042 means a checksum mismatch.",
    "Studies of running mice show it's the dog's bowl, and the U.S. government agrees.",
    "同期が止まったときは、アプリを再起動してください。東京都の設定を確認します。",
    "한국어 문장과 ｶﾀｶﾅ and full-width ＡＢＣ１２３ text 😀 with emoji 👍🏽 and 中文字符。",
]
ANALYZERS = [None, Analyzer.STANDARD, Analyzer.ENGLISH, Analyzer.CJK]
TENANT = "acme"


def _chunk(i: int, text: str) -> Chunk:
    rng = np.random.default_rng(i)
    return Chunk(
        chunk_id=f"c{i}", source_id=f"s{i}", source_version="v1", parent_id=None, heading_path=("H",),
        start_offset=0, end_offset=len(text), chunker_version="t", tenant_id=TENANT, acl=("public",),
        title=f"doc {i}", text=text, token_count=len(text.split()),
    ).with_vector(rng.uniform(0.1, 1.0, DIMS).astype(np.float32), "rand-4")  # fmt: skip


def _backend(analyzer: Analyzer | None) -> EmbeddedBackend:
    backend = EmbeddedBackend(dims=DIMS, analyzer=analyzer)
    assert backend.index([_chunk(i, t) for i, t in enumerate(TEXTS)]).failed == []
    return backend


BACKENDS = {a: _backend(a) for a in ANALYZERS}


@pytest.mark.parametrize("query", ["S-IVB J-2", "S-IC", "Type S engines", "s", "an s", "'s", "us as is"])
def test_the_queries_that_crashed_bm25_now_return_hits(query: str) -> None:
    hits = BACKENDS[Analyzer.ENGLISH].bm25(query, SearchFilter(TENANT), 5)
    assert all(h.bm25_score and h.bm25_score > 0 for h in hits)


def test_s_ivb_finds_its_chunk_with_the_english_analyzer() -> None:
    hits = BACKENDS[Analyzer.ENGLISH].bm25("S-IVB J-2", SearchFilter(TENANT), 5)
    assert hits and hits[0].chunk_id == "c0"
    hits = BACKENDS[Analyzer.ENGLISH].bm25("Type S engines", SearchFilter(TENANT), 5)
    assert {h.chunk_id for h in hits} >= {"c0", "c1"}


def test_tokens_bm25s_cannot_score_are_dropped_not_sent() -> None:
    """bm25s's own ``""`` entry has an id past its score matrix; asking for it raises inside bm25s."""
    backend = BACKENDS[Analyzer.STANDARD]
    backend._refresh()
    model = backend._bm25["text"]
    assert "" in model.vocab_dict  # the trap: bm25s keeps it in the vocabulary
    with pytest.raises(ValueError):
        model.get_scores(["engines", ""])
    assert _scorable_tokens(model, ["engines", "", "nowhere-in-the-index"]) == ["engines"]


def test_a_mirror_that_emitted_an_empty_token_cannot_crash_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(Analyzer.STANDARD)
    monkeypatch.setattr(backend, "_analyze", lambda text: ["", *get_analyzer("standard")(text)])
    assert [h.chunk_id for h in backend.bm25("engines", SearchFilter(TENANT), 5)][:1] == ["c1"]


_PIPELINES = {
    (a, exact): RagPipeline(
        BACKENDS[a],
        embedder=RandomEmbedder(),
        settings=Settings(
            vector_dims=DIMS,
            analyzer=a or "standard",
            candidate_k=5,
            num_candidates=10,
            rerank_k=5,
            context_k=3,
            token_budget=300,
            rerank_calibration="none",
            exact_channel=exact,
        ),
        tokenizer=WordTokenizer(),
        reranker=OverlapReranker(),
    )
    for a in ANALYZERS
    for exact in ("auto", "off")
}

QUERIES = st.one_of(
    st.text(max_size=80),  # any Unicode scalar value but surrogates
    st.text(alphabet=st.characters(categories=("P", "S", "Z", "Cc", "Cf", "Co")), max_size=30),
    st.text(alphabet=st.characters(min_codepoint=0x3000, max_codepoint=0x9FFF), max_size=40),  # CJK, kana, punct
    st.text(alphabet=st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF), max_size=10),  # emoji
    st.lists(
        st.sampled_from(["s", "S-IVB", "J-2", "E1042", "'s", "U.S.", "１２３", "ｶﾀｶﾅ", "👍🏽", "-", "_"]), max_size=8
    ).map(" ".join),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=20), st.integers(200, 2000)),  # very long
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=QUERIES, analyzer=st.sampled_from(ANALYZERS), exact=st.sampled_from(["auto", "off"]))
def test_any_query_gives_a_result_or_a_clear_error(query: str, analyzer: Analyzer | None, exact: str) -> None:
    pipe = _PIPELINES[(analyzer, exact)]
    flt = SearchFilter(TENANT)
    try:
        result = pipe.search(query, flt)
    except EsRagError as exc:  # a clear error, e.g. the empty query
        assert str(exc)
        assert not query.strip()
        return
    assert len(result.hits) <= 3
    assert set(result.channels) <= {"bm25", "dense", "exact"} and result.channels["dense"]  # kNN always answers
    # every analyzer's tokens are non-empty strings on their own, whatever the input
    assert all(t for t in get_analyzer(analyzer)(query))


def test_a_query_longer_than_the_model_reads_is_named(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 46, item 10: a 10,000-character query got 6 hits from random words and no word of why."""

    class Short(WordTokenizer):
        max_tokens = 64

    base = _PIPELINES[(Analyzer.STANDARD, "auto")]
    pipe = RagPipeline(
        BACKENDS[Analyzer.STANDARD], embedder=RandomEmbedder(), settings=base.settings, tokenizer=Short(),
        reranker=OverlapReranker(),
    )  # fmt: skip
    long_query = " ".join(["engines"] * 2000)
    with caplog.at_level("WARNING"):
        result = pipe.search(long_query, SearchFilter(TENANT))
    said = result.trace.paths["query_length"]
    assert said.startswith("warning: the query is 2000 tokens; the embedding model reads its first 64")
    assert any("the query is 2000 tokens" in r.getMessage() for r in caplog.records)
    assert "query_length" not in pipe.search("Type S engines", SearchFilter(TENANT)).trace.paths
