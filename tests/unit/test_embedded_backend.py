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
