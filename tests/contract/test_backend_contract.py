"""The backend contract: what the pipeline relies on from every :class:`es_rag.backend.SearchBackend`, run on the
embedded backend, on the Elasticsearch backend against the strict cluster double, and on a real cluster when
``ES_URL`` is set (the live runs skip otherwise)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from es_rag.backend import Retrieval
from es_rag.filters import SearchFilter
from es_rag.ingest import delete_source
from es_rag.records import Hit
from tests.support.contract import KINDS, chunk, corpus, load, open_backend

ACME = SearchFilter("acme")
Q = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    with open_backend(request.param) as (b, settings):
        b.contract_settings = settings  # the settings it was opened with (the live one has its own prefix)
        yield b


def hits_of(ret: Retrieval) -> list[Hit]:
    return list(ret.fused) if ret.fused is not None else [h for hits in ret.channels.values() for h in hits]


def retrieve(backend: Any, query: str, flt: SearchFilter, vector: Any = Q) -> list[Hit]:
    return hits_of(backend.retrieve(query, vector, backend.snapshot_versions(flt), backend.contract_settings))


def test_count_follows_tenant_and_acl(backend: Any) -> None:
    load(backend, *corpus())
    assert backend.count() == 6
    assert backend.count(ACME) == 3  # a4 is legal-only
    assert backend.count(SearchFilter("acme", ("legal",))) == 4
    assert backend.count(SearchFilter("globex")) == 2
    assert backend.count(SearchFilter("initech")) == 0


def test_every_channel_runs_under_the_hard_filter(backend: Any) -> None:
    load(backend, *corpus())
    got = retrieve(backend, "reset the password", ACME)
    assert got and {h.tenant_id for h in got} == {"acme"}
    assert "a4" not in {h.chunk_id for h in got} and {"a1", "a2"} <= {h.chunk_id for h in got}
    # the identifier brings the exact channel in; globex's identical chunk never appears
    ret = backend.retrieve("what is E1042", Q, backend.snapshot_versions(ACME), backend.contract_settings)
    ids = [h.chunk_id for h in hits_of(ret)]
    assert "a3" in ids and "g2" not in ids
    assert any("E1042" in note for note in ret.notes)
    # BM25 alone (no vector) is still filtered
    assert {h.tenant_id for h in retrieve(backend, "password", SearchFilter("globex"), None)} == {"globex"}


def test_exact_channel_finds_identifiers_next_to_japanese_text(backend: Any) -> None:
    """Seed 000's "E1042の対処": the identifier is split from the Japanese text around it in the query and in the
    indexed text alike (``es_rag_identifier``: CJK runs and other word runs are separate tokens), on every backend.
    Before, the query phrase was ``nim e1042の対処`` and the indexed token ``e1042が発生``: the channel found nothing.
    The client path keeps each channel's own list visible."""
    load(
        backend,
        [
            chunk("j1", "NIM-E1042が発生したら再起動する", start=0),
            chunk("j2", "E1042の対処：トークンを更新", start=40),
            chunk("j3", "E10420が発生", start=80),
            chunk("j4", "ＥＲＲ－２２の確認", start=120),
        ],
    )
    settings = backend.contract_settings.replace(fusion_path="client")

    def exact(query: str) -> list[str]:
        ret = backend.retrieve(query, None, backend.snapshot_versions(ACME), settings)
        return sorted(h.chunk_id for h in ret.channels.get("exact", []))

    assert exact("NIM-E1042の対処") == ["j1"]  # the phrase nim e1042
    assert exact("E1042の対処") == ["j1", "j2"]  # not E10420
    assert exact("ERR-22について") == ["j4"]  # fullwidth text folded by cjk_width


def test_acl_groups_open_restricted_chunks(backend: Any) -> None:
    load(backend, *corpus())
    assert "a4" not in {h.chunk_id for h in retrieve(backend, "legal hold", ACME)}
    assert "a4" in {h.chunk_id for h in retrieve(backend, "legal hold", SearchFilter("acme", ("legal",)))}


def test_a_version_switch_serves_only_the_committed_version(backend: Any) -> None:
    children, parents = corpus()
    load(backend, children, parents)
    v2 = [chunk("a1-v2", "reset the password in settings now", version="v2", start=0)]
    retired = load(backend, v2, [chunk("p-guide-v2", "Guide v2", version="v2", parent=None, kind="parent")])
    assert retired == [("guide", "v1")]
    ids = {h.chunk_id for h in retrieve(backend, "reset the password", ACME)}
    assert "a1-v2" in ids and not ids & {"a1", "a2", "a3"}  # v1 is hidden before it is purged
    purged = backend.version_store().purge("acme", retired)
    assert purged.clean and purged.deleted >= 3
    assert backend.count(ACME) == 1 and backend.count(SearchFilter("globex")) == 2


def test_the_version_snapshot_is_taken_once(backend: Any) -> None:
    load(backend, *corpus())
    snap = backend.snapshot_versions(ACME)
    assert snap.versions is not None and snap.versions.tenant_id == "acme"
    assert backend.snapshot_versions(snap) is snap


def test_delete_source_removes_its_lineage_and_nothing_else(backend: Any) -> None:
    load(backend, *corpus())
    out = delete_source(backend, "acme", "guide")
    assert out["remaining"] == {"chunks": 0, "parents": 0} and out["deleted"] == 4  # a1-a3 and p-guide
    backend.version_store().refresh()
    assert backend.count(SearchFilter("acme", ("legal",))) == 1 and backend.count(SearchFilter("globex")) == 2
    assert "guide" not in backend.version_store().state("acme").active


def test_parents_and_neighbours_stay_under_the_filter(backend: Any) -> None:
    load(backend, *corpus())
    parents = backend.get_parents(["p-guide", "p-guide-g", "p-policy"], backend.snapshot_versions(ACME))
    assert set(parents) == {"p-guide"} and parents["p-guide"].tenant_id == "acme"
    anchor = next(h for h in retrieve(backend, "password reset link expires", ACME) if h.chunk_id == "a2")
    neighbours = backend.get_neighbors([anchor], backend.snapshot_versions(ACME), 1)
    assert [h.chunk_id for h in neighbours["a2"]] == ["a1", "a3"]


def test_a_bad_document_fails_alone(backend: Any) -> None:
    good = chunk("ok1", "a good document about passwords")
    bad = chunk("bad1", "no tenant here", tenant="", source="orphan")
    report = backend.index([good, bad])
    assert report.indexed == 1  # the good one lands; the bad one is named by its document and field
    assert report.failed == [{"document": "orphan", "field": "tenant_id", "reason": "missing required field"}]


def test_sources_lists_each_source_with_its_served_version_and_counts(backend: Any) -> None:
    """``es-rag sources`` (issue 13): the registry's active version and the chunks / parents stored per version,
    one tenant only; a retired version not purged yet is listed with its chunks (hidden)."""
    children, parents = corpus()
    load(backend, children, parents)
    listing = {s.source_id: s.to_dict() for s in backend.version_store().sources("acme")}
    assert listing == {
        "guide": {
            "source_id": "guide",
            "active_version": "v1",
            "chunks": 3,
            "parents": 1,
            "pages": None,
            "versions": {"v1": 3},
        },
        "policy": {
            "source_id": "policy",
            "active_version": "v1",
            "chunks": 1,
            "parents": 1,
            "pages": None,
            "versions": {"v1": 1},
        },
    }
    v2 = [chunk("a1-v2", "reset the password in settings now", version="v2", start=0)]
    load(backend, v2, [chunk("p-guide-v2", "Guide v2", version="v2", parent=None, kind="parent")])
    guide = next(s for s in backend.version_store().sources("acme") if s.source_id == "guide")
    assert (guide.active_version, guide.chunks, guide.versions, guide.parents) == ("v2", 1, {"v1": 3, "v2": 1}, 2)
    assert [s.source_id for s in backend.version_store().sources("globex")] == ["guide"]
    assert backend.version_store().sources("initech") == []


def test_source_paths_say_where_each_source_was_read_from(backend: Any) -> None:
    """``ingest --sync`` without ``--base-dir`` (issue 31) decides by the stored ``source_path``: on Elasticsearch a
    composite aggregation over its doc values (the field is ``index: false``), here the stored documents."""
    children, parents = corpus()
    with_paths = [
        dataclasses.replace(c, source_path=f"/kb/{c.tenant_id}/{c.source_id}.md") if c.chunk_id != "a4" else c
        for c in children
    ]
    load(backend, with_paths, parents)
    assert backend.version_store().source_paths("acme") == {"guide": {"/kb/acme/guide.md"}}  # a4 (policy): none
    assert backend.version_store().source_paths("globex") == {"guide": {"/kb/globex/guide.md"}}
    assert backend.version_store().source_paths("initech") == {}


def test_visible_text_is_stored_and_optional(backend: Any) -> None:
    """An HTML chunk's ``visible_text`` comes back from search, neighbours and parents alike; a chunk without it
    (Markdown, or a document another tool wrote) comes back without it and is shown as its text."""
    markup = "<p>Reset the <b>password</b> &amp; the token</p>"
    shown = "Reset the password & the token"
    html = dataclasses.replace(chunk("h1", markup, source="page.html", parent="p-page"), visible_text=shown)
    plain = chunk("h2", "reset the password by hand", source="page.html", parent="p-page", start=len(markup) + 1)
    parent = dataclasses.replace(
        chunk("p-page", markup, source="page.html", parent=None, kind="parent"), visible_text=shown
    )
    load(backend, [html, plain], [parent])
    got = {h.chunk_id: h for h in retrieve(backend, "reset the password", ACME)}
    assert got["h1"].text == markup and got["h1"].visible_text == shown and got["h1"].display_text == shown
    assert got["h2"].visible_text is None and got["h2"].display_text == "reset the password by hand"
    flt = backend.snapshot_versions(ACME)
    assert backend.get_parents(["p-page"], flt)["p-page"].display_text == shown
    (neighbour,) = backend.get_neighbors([got["h2"]], flt, 1)["h2"]
    assert neighbour.chunk_id == "h1" and neighbour.display_text == shown
