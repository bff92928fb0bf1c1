"""Parent / neighbour expansion: merging rules, score aggregation and tenant isolation."""

from __future__ import annotations

import numpy as np

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.records import Chunk, Hit
from es_rag.stages.expand import expand_neighbors, expand_parents, merge_pieces

SOURCE = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
#         0     6    11    17    23      31   36  40    46   51


def chunk(cid: str, start: int, end: int, *, tenant: str = "A", parent: str | None = "P", kind: str = "child") -> Chunk:
    return Chunk(
        chunk_id=cid,
        source_id="doc",
        source_version="v1",
        parent_id=parent,
        heading_path=("Doc",),
        start_offset=start,
        end_offset=end,
        chunker_version="t",
        tenant_id=tenant,
        acl=("public",),
        title="Doc",
        text=SOURCE[start:end],
        token_count=(end - start) // 5 + 1,
        kind=kind,
        vector=np.ones(2, dtype=np.float32),
    )


def backend() -> EmbeddedBackend:
    be = EmbeddedBackend(None, dims=2)
    children = [
        chunk("c0", 0, 10),
        chunk("c1", 11, 22),
        chunk("c2", 23, 35),
        chunk("c3", 36, 45),
        chunk("c4", 46, 56),
        # Another tenant's chunk with the same source id and parent id, between c1 and c2.
        chunk("evil", 17, 30, tenant="B"),
    ]
    parents = [
        chunk("P", 0, 56, parent=None, kind="parent"),
        chunk("PB", 0, 56, tenant="B", parent=None, kind="parent"),
    ]
    report = be.index(children, parents)
    assert report.failed == []
    return be


def as_hit(c: Chunk, score: float) -> Hit:
    return Hit.from_source(c.to_source()).replace(final_score=score, rerank_score=score, retrieval_sources=("bm25",))


def test_neighbours_merge_within_filter_and_never_cross_tenants() -> None:
    be = backend()
    flt = SearchFilter("A")
    got = be.get_neighbors([as_hit(chunk("c2", 23, 35), 1.0)], flt, 1)
    assert [h.chunk_id for h in got["c2"]] == ["c1", "c3"]
    res = expand_neighbors([as_hit(chunk("c2", 23, 35), 0.9), as_hit(chunk("c3", 36, 45), 0.7)], be, flt, window=1)
    assert len(res.hits) == 1  # c3 is a neighbour of c2: one block
    block = res.hits[0]
    assert block.chunk_id == "c2" and block.expanded_from == ("c1", "c2", "c3", "c4")
    assert (block.start_offset, block.end_offset) == (11, 56)
    assert block.text == "gamma delta\n\nepsilon zeta\n\neta theta\n\niota kappa"
    assert block.final_score == 0.9
    assert res.dropped == [("c3", "merged into the neighbour block of c2")]
    assert "evil" not in block.text and "evil" not in block.expanded_from


def test_parents_dedup_by_parent_id_with_max_score_and_tenant_isolation() -> None:
    be = backend()
    flt = SearchFilter("A")
    hits = [as_hit(chunk("c1", 11, 22), 0.5), as_hit(chunk("c3", 36, 45), 0.8)]
    res = expand_parents(hits, be, flt, max_parent_tokens=100)
    assert [h.chunk_id for h in res.hits] == ["P"]
    assert res.hits[0].expanded_from == ("c1", "c3")
    assert res.hits[0].final_score == 0.8 and res.hits[0].tenant_id == "A"
    assert res.dropped == [("c3", "merged into parent P")]
    # A child pointing at another tenant's parent: the parent is never pulled in.
    foreign = as_hit(chunk("c0", 0, 10), 0.4).replace(parent_id="PB")
    res = expand_parents([foreign], be, flt, max_parent_tokens=100)
    assert res.hits == [foreign]
    assert res.info["kept_as_child"] == {"c0": "parent not available under the filter"}


def test_parent_too_long_keeps_the_child() -> None:
    be = backend()
    h = as_hit(chunk("c1", 11, 22), 0.5)
    res = expand_parents([h], be, SearchFilter("A"), max_parent_tokens=3)
    assert res.hits == [h] and "tokens > 3" in res.info["kept_as_child"]["c1"]


def test_merge_pieces_writes_overlap_once() -> None:
    a = as_hit(chunk("a", 0, 16), 1.0)  # "alpha beta gamma"
    b = as_hit(chunk("b", 11, 22), 1.0)  # "gamma delta"
    assert merge_pieces([b, a]) == ("alpha beta gamma delta", 0, 22)
