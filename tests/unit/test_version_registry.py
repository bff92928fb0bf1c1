"""The version registry (``es_rag.versions.registry``) on its own: the snapshot predicate, each transition of the
per-tenant state machine, and every request it builds -- checked against literal states, paths and bodies."""

from __future__ import annotations

from es_rag.es_request import EsRequest
from es_rag.settings import Settings
from es_rag.versions.registry import (
    SOURCES_PAGE,
    VERSION_KEY_FIELD,
    RegistryState,
    VersionSnapshot,
    key_pair,
    lineage_count_requests,
    purge_requests,
    refresh_request,
    registry_get_request,
    registry_index,
    registry_put_request,
    source_listing_request,
    task_request,
    version_key,
)

KB = Settings(index_prefix="kb")


# ------------------------------------------------------------------------------ names
def test_names() -> None:
    assert VERSION_KEY_FIELD == "version_key"
    assert version_key("guide", "2024-01") == "guide@2024-01"
    assert registry_index(Settings()) == "es-rag-versions"
    assert registry_index(KB) == "kb-versions"
    assert SOURCES_PAGE == 1000


# ------------------------------------------------------------------------------ snapshot
def test_snapshot_defaults_restrict_nothing() -> None:
    snap = VersionSnapshot("acme")
    assert snap.index is None and snap.hidden == frozenset()
    assert snap.restricts is False
    assert snap.to_es() == {"bool": {"must_not": [{"terms": {"version_key": []}}]}}
    assert snap.allows({"version_key": "g@v1"}) is True


def test_snapshot_restricts_with_a_lookup_or_hidden_keys() -> None:
    assert VersionSnapshot("acme", index="kb-versions").restricts is True
    assert VersionSnapshot("acme", hidden=frozenset({"g@v1"})).restricts is True
    assert VersionSnapshot("acme", index="kb-versions", hidden=frozenset({"g@v1"})).restricts is True


def test_snapshot_to_es_lookup_and_inline() -> None:
    lookup = VersionSnapshot("acme", index="kb-versions", hidden=frozenset({"g@v1"}))
    assert lookup.to_es() == {
        "bool": {
            "must_not": [
                {"terms": {"version_key": {"index": "kb-versions", "id": "acme", "path": "hidden"}}},
                {"terms": {"source_id": {"index": "kb-versions", "id": "acme", "path": "superseded"}}},
            ]
        }
    }
    inline = VersionSnapshot("acme", hidden=frozenset({"z@1", "a@2", "m@3"}))
    assert inline.to_es() == {"bool": {"must_not": [{"terms": {"version_key": ["a@2", "m@3", "z@1"]}}]}}
    both = VersionSnapshot("acme", hidden=frozenset({"a@2"}), superseded=frozenset({"old-b", "old-a"}))
    assert both.to_es() == {
        "bool": {
            "must_not": [
                {"terms": {"version_key": ["a@2"]}},
                {"terms": {"source_id": ["old-a", "old-b"]}},
            ]
        }
    }
    assert VersionSnapshot("acme", superseded=frozenset({"old"})).restricts is True


def test_snapshot_allows() -> None:
    snap = VersionSnapshot("acme", hidden=frozenset({"g@v1", "7"}))
    assert snap.allows({"version_key": "g@v1"}) is False
    assert snap.allows({"version_key": "g@v2"}) is True
    assert snap.allows({"source_id": "g"}) is True  # written by another tool: never hidden
    assert snap.allows({"version_key": None}) is True
    assert snap.allows({"version_key": 7}) is False  # compared as text
    assert snap.allows({"version_key": 8}) is True


# ------------------------------------------------------------------------------ state document
def test_from_doc_none_and_empty_fields() -> None:
    for doc in (None, {}, {"active": None, "hidden": None}):
        st = RegistryState.from_doc("acme", doc)
        assert (st.tenant_id, st.active, st.hidden) == ("acme", {}, [])


def test_from_doc_copies_the_document() -> None:
    doc = {"tenant_id": "acme", "active": {"g": "v2"}, "hidden": ["g@v1"]}
    st = RegistryState.from_doc("acme", doc)
    assert (st.tenant_id, st.active, st.hidden) == ("acme", {"g": "v2"}, ["g@v1"])
    st.begin("g", "v3")
    st.commit("h", "v1")
    assert doc == {"tenant_id": "acme", "active": {"g": "v2"}, "hidden": ["g@v1"]}


def test_to_doc_is_sorted_and_independent() -> None:
    st = RegistryState("acme", {"z": "1", "a": "2"}, ["z@0", "a@1"])
    doc = st.to_doc()
    assert doc == {"tenant_id": "acme", "active": {"a": "2", "z": "1"}, "hidden": ["a@1", "z@0"]}
    assert list(doc) == ["tenant_id", "active", "hidden"]
    assert list(doc["active"]) == ["a", "z"]
    doc["active"]["q"] = "9"
    assert st.active == {"z": "1", "a": "2"}


def test_new_state_has_its_own_containers() -> None:
    one, two = RegistryState("a"), RegistryState("b")
    one.begin("g", "v1")
    one.commit("g", "v1")
    one.begin("g", "v2")
    assert (two.active, two.hidden) == ({}, [])


# ------------------------------------------------------------------------------ transitions
def test_begin() -> None:
    st = RegistryState("acme", {"g": "v1"}, [])
    assert st.begin("g", "v1") is False  # already served: rewritten in place
    assert st.hidden == []
    assert st.begin("g", "v2") is True
    assert st.hidden == ["g@v2"]
    assert st.begin("g", "v2") is True  # a retry of an unfinished write: hidden once
    assert st.hidden == ["g@v2"]
    assert st.begin("h", "v1") is True
    assert st.hidden == ["g@v2", "h@v1"]
    assert st.active == {"g": "v1"}


def test_commit_first_version() -> None:
    st = RegistryState("acme", {}, ["g@v1", "h@v1"])
    assert st.commit("g", "v1") is None
    assert st.active == {"g": "v1"} and st.hidden == ["h@v1"]


def test_commit_same_version_retires_nothing() -> None:
    st = RegistryState("acme", {"g": "v1"}, ["h@v1"])
    assert st.commit("g", "v1") is None
    assert st.active == {"g": "v1"} and st.hidden == ["h@v1"]


def test_commit_switch_retires_the_old_key() -> None:
    st = RegistryState("acme", {"g": "v1", "h": "v1"}, ["h@v2", "g@v2"])
    assert st.commit("g", "v2") == "g@v1"
    assert st.active == {"g": "v2", "h": "v1"}
    assert st.hidden == ["h@v2", "g@v1"]


def test_commit_switch_old_key_already_hidden_once() -> None:
    st = RegistryState("acme", {"g": "v1"}, ["g@v1", "g@v2"])
    assert st.commit("g", "v2") == "g@v1"
    assert st.hidden == ["g@v1"]


def test_forget() -> None:
    st = RegistryState("acme", {"g": "v3"}, ["g@v1", "g@v2", "h@v1"])
    st.forget(["g@v1", "h@v1", "x@y"])
    assert st.hidden == ["g@v2"] and st.active == {"g": "v3"}
    st.forget([])
    assert st.hidden == ["g@v2"]


def test_hide_source() -> None:
    st = RegistryState("acme", {"g": "v2", "h": "v1"}, ["g@v3"])
    st.hide_source("g")
    assert st.active == {"h": "v1"} and st.hidden == ["g@v3", "g@v2"]
    st.hide_source("g")  # nothing active any more: unchanged
    assert st.active == {"h": "v1"} and st.hidden == ["g@v3", "g@v2"]
    st.hide_source("unknown")
    assert st.active == {"h": "v1"} and st.hidden == ["g@v3", "g@v2"]


def test_hide_source_key_already_hidden_once() -> None:
    st = RegistryState("acme", {"g": "v2"}, ["g@v2"])
    st.hide_source("g")
    assert st.active == {} and st.hidden == ["g@v2"]


def test_drop_source_only_that_source() -> None:
    st = RegistryState("acme", {"g": "v2", "g2": "v1", "h": "v1"}, ["g@v1", "g2@v0", "xg@v1", "g@v3", "h@v0"])
    st.drop_source("g")
    assert st.active == {"g2": "v1", "h": "v1"}
    assert st.hidden == ["g2@v0", "xg@v1", "h@v0"]
    st.drop_source("absent")
    assert st.active == {"g2": "v1", "h": "v1"}


def test_full_lifecycle() -> None:
    st = RegistryState("acme")
    assert st.begin("g", "v1", at="2026-12-01T10:00:00+00:00") is True
    assert st.to_doc() == {
        "tenant_id": "acme",
        "active": {},
        "hidden": ["g@v1"],
        "writing": {"g@v1": "2026-12-01T10:00:00+00:00"},
    }
    assert st.commit("g", "v1") is None
    assert st.to_doc() == {"tenant_id": "acme", "active": {"g": "v1"}, "hidden": []}
    assert st.begin("g", "v2", at="2026-12-01T11:00:00+00:00") is True
    assert st.commit("g", "v2") == "g@v1"
    # the retired version is listed for deletion in the same write (issue 33: a purge a kill interrupts resumes)
    assert st.to_doc() == {"tenant_id": "acme", "active": {"g": "v2"}, "hidden": ["g@v1"], "retired": ["g@v1"]}
    st.forget(["g@v1"])
    assert st.to_doc() == {"tenant_id": "acme", "active": {"g": "v2"}, "hidden": []}
    st.hide_source("g")
    assert st.to_doc() == {"tenant_id": "acme", "active": {}, "hidden": ["g@v2"]}
    st.drop_source("g")
    assert st.to_doc() == {"tenant_id": "acme", "active": {}, "hidden": []}


def test_abandoned_versions_are_retired_and_a_drop_forgets_them() -> None:
    st = RegistryState("acme", {"g": "v1"})
    assert st.begin("g", "v2") is True and st.begin("h@x", "v1") is True  # an id may hold "@"
    st.abandon(["g@v2", "h@x@v1"])
    assert st.hidden == ["g@v2", "h@x@v1"] and st.retired == ["g@v2", "h@x@v1"]
    assert key_pair("h@x@v1") == ("h@x", "v1")
    st.drop_source("h@x")
    assert st.retired == ["g@v2"]
    assert RegistryState.from_doc("acme", st.to_doc()).retired == ["g@v2"]  # stored and read back
    assert st.commit("g", "v2") is not None and st.retired == ["g@v1"]  # committed after all: no longer retired


# ------------------------------------------------------------------------------ requests
def test_registry_get_request_quotes_the_tenant() -> None:
    assert registry_get_request(KB, "acme") == EsRequest("GET", "kb-versions/_doc/acme")
    assert registry_get_request(KB, "a/b c:d") == EsRequest("GET", "kb-versions/_doc/a%2Fb%20c%3Ad")


def test_registry_put_request_create_or_conditional() -> None:
    st = RegistryState("a/b", {"g": "v1"}, ["g@v0"])
    doc = {"tenant_id": "a/b", "active": {"g": "v1"}, "hidden": ["g@v0"]}
    assert registry_put_request(KB, st, seq_no=None, primary_term=None) == EsRequest(
        "PUT", "kb-versions/_doc/a%2Fb?op_type=create", doc
    )
    assert registry_put_request(KB, st, seq_no=4, primary_term=None) == EsRequest(
        "PUT", "kb-versions/_doc/a%2Fb?op_type=create", doc
    )
    assert registry_put_request(KB, st, seq_no=None, primary_term=2) == EsRequest(
        "PUT", "kb-versions/_doc/a%2Fb?op_type=create", doc
    )
    assert registry_put_request(KB, st, seq_no=0, primary_term=1) == EsRequest(
        "PUT", "kb-versions/_doc/a%2Fb?if_seq_no=0&if_primary_term=1", doc
    )
    assert registry_put_request(KB, st, seq_no=17, primary_term=3) == EsRequest(
        "PUT", "kb-versions/_doc/a%2Fb?if_seq_no=17&if_primary_term=3", doc
    )


def test_refresh_request() -> None:
    assert refresh_request(KB) == EsRequest("POST", "kb-chunks,kb-parents/_refresh")


def test_purge_requests() -> None:
    suffix = "_delete_by_query?conflicts=proceed&refresh=true&wait_for_completion=false"
    by_keys = {"query": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}, {"terms": {"version_key": ["g@v1"]}}]}}}
    assert purge_requests(KB, "acme", keys=("g@v1",)) == [
        EsRequest("POST", f"kb-chunks/{suffix}", by_keys),
        EsRequest("POST", f"kb-parents/{suffix}", by_keys),
    ]
    by_source = {"query": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}, {"term": {"source_id": "g"}}]}}}
    assert purge_requests(KB, "acme", source_id="g") == [
        EsRequest("POST", f"kb-chunks/{suffix}", by_source),
        EsRequest("POST", f"kb-parents/{suffix}", by_source),
    ]
    both = purge_requests(KB, "acme", source_id="g", keys=["g@v1", "g@v2"])
    assert [r.body for r in both] == [
        {
            "query": {
                "bool": {
                    "filter": [
                        {"term": {"tenant_id": "acme"}},
                        {"term": {"source_id": "g"}},
                        {"terms": {"version_key": ["g@v1", "g@v2"]}},
                    ]
                }
            }
        }
    ] * 2
    assert purge_requests(KB, "acme")[0].body == {"query": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}]}}}
    assert purge_requests(KB, "acme", keys=[])[0].body == {
        "query": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}, {"terms": {"version_key": []}}]}}
    }


def test_task_request() -> None:
    assert task_request("node-1:42", wait_s=30.0) == EsRequest(
        "GET", "_tasks/node-1:42?wait_for_completion=true&timeout=30s"
    )
    assert task_request("n/1:7", wait_s=2.5) == EsRequest("GET", "_tasks/n%2F1:7?wait_for_completion=true&timeout=2.5s")


def test_lineage_count_requests() -> None:
    body = {"query": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}, {"term": {"source_id": "g"}}]}}}
    assert lineage_count_requests(KB, "acme", "g") == [
        EsRequest("POST", "kb-chunks/_count", body),
        EsRequest("POST", "kb-parents/_count", body),
    ]


def test_source_listing_request() -> None:
    sources = [
        {"source_id": {"terms": {"field": "source_id"}}},
        {"source_version": {"terms": {"field": "source_version"}}},
    ]
    query = {"bool": {"filter": [{"term": {"tenant_id": "acme"}}]}}
    assert source_listing_request("acme", "kb-chunks") == EsRequest(
        "POST",
        "kb-chunks/_search",
        {"size": 0, "query": query, "aggs": {"sources": {"composite": {"size": 1000, "sources": sources}}}},
    )
    after = {"source_id": "g", "source_version": "v1"}
    req = source_listing_request("acme", "kb-parents", after=after, size=2)
    assert req == EsRequest(
        "POST",
        "kb-parents/_search",
        {
            "size": 0,
            "query": query,
            "aggs": {"sources": {"composite": {"size": 2, "sources": sources, "after": after}}},
        },
    )
    assert req.body["aggs"]["sources"]["composite"]["after"] is not after


def test_a_write_that_never_committed_is_retired_by_the_next_commit_of_its_source_a_day_later() -> None:
    """Issue 33: a run killed while it wrote guide@v2 left it hidden; if the file then changes, v2 is never written
    again. A write begun more than ABANDONED_AFTER_S ago is a killed run's: the next commit of the same source retires
    it. One begun just now may be another ingest's, still running: left alone."""
    st = RegistryState("acme", {"guide": "v1"})
    st.begin("guide", "v2", at="2026-11-01T10:00:00+00:00")  # a month ago: killed
    st.begin("guide", "v3")  # now: still being written by another process
    st.begin("other", "w1", at="2026-11-01T10:00:00+00:00")  # another source: not this commit's business
    st.begin("guide", "v4")
    assert st.commit("guide", "v4") == "guide@v1"
    assert st.retired == ["guide@v2", "guide@v1"] and "guide@v3" in st.hidden and "guide@v3" not in st.retired
    assert set(st.writing) == {"guide@v3", "other@w1"}
    st.abandon(["guide@v3"])
    assert "guide@v3" not in st.writing and "guide@v3" in st.retired
    st.drop_source("other")
    assert st.writing == {} and RegistryState.from_doc("acme", st.to_doc()).retired == sorted(st.retired)
