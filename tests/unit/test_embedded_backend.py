"""Embedded backend: filtered BM25 / kNN, persistence, idempotent upserts, per-document failures."""

from __future__ import annotations

import numpy as np
import pytest

from es_rag.embedded.backend import EmbeddedBackend, analyze
from es_rag.filters import SearchFilter
from es_rag.records import Chunk
from es_rag.settings import Settings


def chunk(i: int, text: str, tenant: str = "a", acl: tuple[str, ...] = ("public",), vec=None) -> Chunk:  # type: ignore[no-untyped-def]
    v = np.asarray(vec if vec is not None else np.eye(4)[i % 4], dtype=np.float32)
    return Chunk(
        chunk_id=f"c{i}",
        source_id=f"s{i}",
        source_version="1",
        parent_id=f"p{i}",
        heading_path=("H",),
        start_offset=0,
        end_offset=len(text),
        chunker_version="x",
        tenant_id=tenant,
        acl=acl,
        title="",
        text=text,
        token_count=3,
        vector=v,
    )


def test_analyzer_words_and_cjk_bigrams() -> None:
    assert analyze("Error NIM-E1042!") == ["error", "nim", "e1042"]
    assert analyze("同期が止まる") == ["同期", "期が", "が止", "止ま", "まる"]
    assert analyze("abc日本") == ["abc", "日本"]


def test_filter_applies_before_top_k() -> None:
    b = EmbeddedBackend(dims=4)
    # Tenant b holds the best BM25 matches; tenant a must still get its own top k.
    docs = [chunk(i, "apple apple apple", tenant="b") for i in range(5)] + [chunk(10, "apple pie", tenant="a")]
    assert not b.index(docs).failed
    hits = b.bm25("apple", SearchFilter("a"), 3)
    assert [h.chunk_id for h in hits] == ["c10"]
    dense = b.knn(np.eye(4)[2], SearchFilter("a"), 3)
    assert [h.chunk_id for h in dense] == ["c10"]


def test_acl_groups() -> None:
    b = EmbeddedBackend(dims=4)
    b.index([chunk(0, "secret runbook", acl=("engineering",)), chunk(1, "public runbook")])
    assert {h.chunk_id for h in b.bm25("runbook", SearchFilter("a"), 10)} == {"c1"}
    assert {h.chunk_id for h in b.bm25("runbook", SearchFilter("a", ("engineering",)), 10)} == {"c0", "c1"}


def test_knn_scores_like_es_cosine() -> None:
    b = EmbeddedBackend(dims=4)
    b.index([chunk(0, "x", vec=[1, 0, 0, 0]), chunk(1, "y", vec=[-1, 0, 0, 0])])
    hits = b.knn(np.asarray([1, 0, 0, 0], dtype=np.float32), SearchFilter("a"), 2)
    assert [(h.chunk_id, round(h.dense_score, 6)) for h in hits] == [("c0", 1.0), ("c1", 0.0)]


def test_persist_reopen_and_idempotent_upsert(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = EmbeddedBackend(tmp_path / "idx", dims=4)
    b.index([chunk(0, "alpha"), chunk(1, "beta")], [chunk(9, "parent text")])
    b.flush()
    again = EmbeddedBackend(tmp_path / "idx", dims=4)
    assert again.count() == 2
    again.index([chunk(0, "alpha")])  # same chunk_id: replaced, not duplicated
    assert again.count() == 2
    assert [h.chunk_id for h in again.bm25("alpha", SearchFilter("a"), 5)] == ["c0"]
    assert set(again.get_parents(["c9"], SearchFilter("a"))) == {"c9"}
    assert again.get_parents(["c9"], SearchFilter("other")) == {}
    assert again.delete_source("s0") == 1
    assert again.count() == 1


def test_bad_documents_are_reported_and_good_ones_land() -> None:
    b = EmbeddedBackend(dims=4)
    bad_tenant = chunk(1, "no tenant", tenant="")
    bad_dims = chunk(2, "wrong dims", vec=[1.0, 0.0])
    no_vec = Chunk(**{**chunk(3, "no vector").__dict__, "vector": None})
    report = b.index([chunk(0, "good"), bad_tenant, bad_dims, no_vec, chunk(4, "good too")])
    assert report.indexed == 2
    fields = sorted(f["field"] for f in report.failed)
    assert fields == ["tenant_id", "vector", "vector"]
    assert all(f["document"] for f in report.failed)


def test_retrieve_runs_both_channels_with_the_same_filter() -> None:
    b = EmbeddedBackend(dims=4)
    b.index([chunk(0, "apple"), chunk(1, "apple", tenant="b")])
    ret = b.retrieve("apple", np.eye(4)[0], SearchFilter("a"), Settings(vector_dims=4))
    assert set(ret.channels) == {"bm25", "dense"}
    assert all(h.tenant_id == "a" for hits in ret.channels.values() for h in hits)
    ret = b.retrieve("apple", None, SearchFilter("a"), Settings(vector_dims=4))
    assert set(ret.channels) == {"bm25"}


def test_dims_mismatch_on_reopen(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = EmbeddedBackend(tmp_path, dims=4)
    b.index([chunk(0, "a")])
    b.flush()
    from es_rag.errors import ConfigError

    with pytest.raises(ConfigError, match="4-dim"):
        EmbeddedBackend(tmp_path, dims=8)


# -- kNN over the cached rows (issue 20 part 5) ---------------------------------------------------------------------
def _random_backend(similarity: str, n: int, seed: int) -> tuple[EmbeddedBackend, np.ndarray]:
    import dataclasses

    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, 4)).astype(np.float32)
    if similarity == "dot_product":
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    b = EmbeddedBackend(dims=4, similarity=similarity)
    chunks = [dataclasses.replace(chunk(i, f"t{i}"), vector=vectors[i]) for i in range(n)]
    b.index(chunks)
    return b, vectors


@pytest.mark.parametrize("similarity", ["cosine", "dot_product", "l2_norm", "max_inner_product"])
def test_knn_on_the_cached_rows_scores_and_ranks_as_the_float64_reference(similarity: str) -> None:
    """The rows are prepared once per index state (cosine: unit float32 rows) instead of a float64 copy of the whole
    matrix per query; scores stay within float32 rounding of the reference and the ranking is the same."""
    from es_rag.embedded.backend import knn_scores
    from es_rag.settings import Similarity

    b, vectors = _random_backend(similarity, 300, seed=len(similarity))
    rng = np.random.default_rng(7)
    for _ in range(20):
        q = rng.normal(size=4).astype(np.float32)
        if similarity == "dot_product":
            q /= np.linalg.norm(q)
        ref = knn_scores(vectors, q, Similarity(similarity))
        hits = b.knn(q, SearchFilter("a"), 300)
        got = {h.chunk_id: h.dense_score for h in hits}
        np.testing.assert_allclose([got[f"c{i}"] for i in range(300)], ref, rtol=0, atol=1e-6)
        order = [int(h.chunk_id[1:]) for h in hits]
        ref_order = list(np.argsort(-ref, kind="stable"))
        # the same ranking, but for neighbours whose reference scores tie within float32 rounding
        swaps = [i for i, (a, r) in enumerate(zip(order, ref_order, strict=True)) if a != r]
        assert all(abs(ref[order[i]] - ref[ref_order[i]]) < 1e-6 for i in swaps)


def test_the_cached_rows_follow_every_write() -> None:
    b = EmbeddedBackend(dims=4)
    b.index([chunk(0, "x", vec=[1, 0, 0, 0]), chunk(1, "y", vec=[0, 2, 0, 0])])
    q = np.asarray([0, 1, 0, 0], dtype=np.float32)
    assert [h.chunk_id for h in b.knn(q, SearchFilter("a"), 1)] == ["c1"]
    b.index([chunk(1, "y", vec=[-3, 0, 0, 0]), chunk(2, "z", vec=[0, 0.5, 0.1, 0])])  # c1 replaced, c2 added
    assert [(h.chunk_id, round(h.dense_score, 6)) for h in b.knn(q, SearchFilter("a"), 3)] == [
        ("c2", round((1 + 0.5 / np.sqrt(0.26)) / 2, 6)),
        ("c0", 0.5),
        ("c1", 0.5),
    ]
    b.version_store().delete_source("a", "s2")
    assert [h.chunk_id for h in b.knn(q, SearchFilter("a"), 3)] == ["c0", "c1"]


def test_count_and_neighbours_follow_the_filter_and_every_write() -> None:
    import dataclasses

    def part(i: int, start: int, tenant: str = "a", acl: tuple[str, ...] = ("public",)) -> Chunk:
        return dataclasses.replace(
            chunk(i, f"text {i}", tenant=tenant, acl=acl), source_id="s", parent_id="p", start_offset=start
        )

    b = EmbeddedBackend(dims=4)
    b.index([part(0, 0), part(1, 10, acl=("hr",)), part(2, 20), part(3, 30), part(4, 40, tenant="b")])
    assert b.count(SearchFilter("a")) == 3 and b.count(SearchFilter("a", ("hr",))) == 4 and b.count() == 5
    anchor = b.knn(np.eye(4)[2].astype(np.float32), SearchFilter("a"), 1)[0]
    assert anchor.chunk_id == "c2"
    near = b.get_neighbors([anchor], SearchFilter("a"), 2)
    assert [h.chunk_id for h in near["c2"]] == ["c0", "c3"]  # c1 not visible, c4 another tenant
    assert [h.chunk_id for h in b.get_neighbors([anchor], SearchFilter("a", ("hr",)), 1)["c2"]] == ["c1", "c3"]
    b.index([part(5, 25)])  # a write: the groups are rebuilt
    assert [h.chunk_id for h in b.get_neighbors([anchor], SearchFilter("a"), 1)["c2"]] == ["c0", "c5"]
    assert b.count(SearchFilter("a")) == 4


def test_a_bm25_query_view_scores_like_an_index_built_with_those_fields() -> None:
    """``es-rag tune`` applies fields, boosts and tie_breaker (query-time on Elasticsearch) to a view of one index;
    the view must score exactly as a backend built with them, and leave the index it came from as it was."""
    import dataclasses

    docs = [
        dataclasses.replace(chunk(0, "kinase inhibitor trial"), title="kinase"),
        dataclasses.replace(chunk(1, "kinase kinase pathway"), title="pathway review"),
        dataclasses.replace(chunk(2, "unrelated text"), title="kinase inhibitor"),
    ]
    wide = EmbeddedBackend(dims=4, bm25_fields=("title", "heading_path", "text"))
    wide.index(docs)
    before = [(h.chunk_id, h.bm25_score) for h in wide.bm25("kinase inhibitor", SearchFilter("a"), 3)]
    for fields, tie in ((("title^3", "text"), 0.0), (("title", "text"), 1.0), (("text",), 0.4)):
        built = EmbeddedBackend(dims=4, bm25_fields=fields, tie_breaker=tie)
        built.index(docs)
        view = wide.with_bm25_query(fields, tie)
        got = [(h.chunk_id, round(h.bm25_score or 0, 9)) for h in view.bm25("kinase inhibitor", SearchFilter("a"), 3)]
        want = [(h.chunk_id, round(h.bm25_score or 0, 9)) for h in built.bm25("kinase inhibitor", SearchFilter("a"), 3)]
        assert got == want, fields
    assert [(h.chunk_id, h.bm25_score) for h in wide.bm25("kinase inhibitor", SearchFilter("a"), 3)] == before
    # a field the index never built: the view builds its own, the source index is untouched
    narrow = EmbeddedBackend(dims=4, bm25_fields=("text",))
    narrow.index(docs)
    view = narrow.with_bm25_query(("title",), 0.0)
    assert [h.chunk_id for h in view.bm25("inhibitor", SearchFilter("a"), 3)] == ["c2"]
    assert [h.chunk_id for h in narrow.bm25("inhibitor", SearchFilter("a"), 3)] == ["c0"]
