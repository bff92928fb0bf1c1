"""Parent / neighbour expansion: merging rules, score aggregation, tenant isolation, and the refill of the slots that
merging empties (from the ranked remainder, under the caps and the filter)."""

from __future__ import annotations

import dataclasses

import numpy as np

from es_rag.chunking import visible_text
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.records import Chunk, Hit
from es_rag.stages.expand import Refill, expand_neighbors, expand_parents, fallbacks, merge_pieces, merge_visible
from es_rag.stages.pack import Fallback

SOURCE = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
#         0     6    11    17    23      31   36  40    46   51


def chunk(
    cid: str,
    start: int,
    end: int,
    *,
    tenant: str = "A",
    parent: str | None = "P",
    kind: str = "child",
    source: str = "doc",
) -> Chunk:
    return Chunk(
        chunk_id=cid,
        source_id=source,
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
        # A second source with its own section: where a refill lands.
        chunk("d0", 0, 10, parent="Q", source="doc2"),
    ]
    parents = [
        chunk("P", 0, 56, parent=None, kind="parent"),
        chunk("PB", 0, 56, tenant="B", parent=None, kind="parent"),
        chunk("Q", 0, 22, parent=None, kind="parent", source="doc2"),
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


def test_a_merged_parent_slot_is_refilled_from_the_remainder_in_rank_order() -> None:
    """c1 and c3 merge into P, which empties one of the two slots: the best remainder hit not already inside P (d0,
    whose section is Q) fills it; c4 is skipped because P already holds it."""
    be = backend()
    hits = [as_hit(chunk("c1", 11, 22), 0.9), as_hit(chunk("c3", 36, 45), 0.8)]
    rest = [as_hit(chunk("c4", 46, 56), 0.7), as_hit(chunk("d0", 0, 10, parent="Q", source="doc2"), 0.6)]
    res = expand_parents(hits, be, SearchFilter("A"), max_parent_tokens=100, refill=Refill(rest, slots=2))
    assert [h.chunk_id for h in res.hits] == ["P", "Q"]
    assert res.hits[1].expanded_from == ("d0",) and res.hits[1].final_score == 0.6
    assert res.dropped == [("c3", "merged into parent P")]
    assert res.added == ["d0"]
    assert res.info["refilled"] == ["d0"] and res.info["refill_skipped"] == {"c4": "already inside parent P"}
    assert res.info["parents"] == 2
    assert res.path == (
        "parent sections (dedup by parent_id, score = max of its children); 1 merged slot refilled from the ranked "
        "remainder"
    )
    # Without a merge nothing is refilled, even with slots to spare.
    alone = expand_parents(hits[:1], be, SearchFilter("A"), max_parent_tokens=100, refill=Refill(rest, slots=5))
    assert [h.chunk_id for h in alone.hits] == ["P"] and alone.added == [] and "refilled" not in alone.info


def test_the_refill_keeps_the_caps_and_never_crosses_tenant_or_acl() -> None:
    """Remainder hits are refused when another tenant's (even under the same ids), outside the caller's ACL groups,
    or over the selection's per-source cap counted over the selected children; the first admissible one is taken."""
    be = backend()
    hits = [as_hit(chunk("c1", 11, 22), 0.9), as_hit(chunk("c3", 36, 45), 0.8)]
    foreign = as_hit(chunk("d0", 0, 10, tenant="B", parent="Q", source="doc2"), 0.75)
    legal = as_hit(chunk("d0", 0, 10, parent="Q", source="doc2"), 0.74).replace(chunk_id="d-legal", acl=("legal",))
    capped = as_hit(chunk("x9", 0, 10, parent="R"), 0.73)  # source "doc" already has c1 and c3
    good = as_hit(chunk("d0", 0, 10, parent="Q", source="doc2"), 0.6)
    plan = Refill([foreign, legal, capped, good], slots=3, max_per_source=2)
    res = expand_parents(hits, be, SearchFilter("A"), max_parent_tokens=100, refill=plan)
    assert [h.chunk_id for h in res.hits] == ["P", "Q"]  # one slot stays empty: nothing else is admissible
    assert res.added == ["d0"] and all(h.tenant_id == "A" for h in res.hits)
    assert res.info["refill_skipped"] == {
        "d0": "refused: tenant 'B' is not the caller's",
        "d-legal": "refused: none of its ACL groups is the caller's",
        "x9": "per-source cap (2) for doc",
    }
    # The same ACL-restricted hit is admissible to a caller in that group.
    res = expand_parents(hits, be, SearchFilter("A", ("legal",)), max_parent_tokens=100, refill=Refill([legal], 2))
    assert res.added == ["d-legal"]


def test_two_remainder_hits_of_one_section_fill_one_slot() -> None:
    """A per-round batch never takes two hits of one parent: the second would merge into the first's block."""
    be = backend()
    hits = [as_hit(chunk("c1", 11, 22), 0.9), as_hit(chunk("c3", 36, 45), 0.8)]
    rest = [as_hit(chunk("d0", 0, 10, parent="Q", source="doc2"), 0.6), as_hit(chunk("d1", 11, 22, parent="Q"), 0.5)]
    res = expand_parents(hits, be, SearchFilter("A"), max_parent_tokens=100, refill=Refill(rest, slots=3))
    assert [h.chunk_id for h in res.hits] == ["P", "Q"]
    assert res.added == ["d0"] and res.info["refill_skipped"] == {"d1": "already inside parent Q"}


def test_a_merged_neighbour_slot_is_refilled_by_a_block_that_does_not_merge() -> None:
    """c1 and c2 (window 1) merge into one block c0..c3. The remainder: c3 is inside that block, c4 would merge with
    it (its neighbour c3), d0 starts a block of its own."""
    be = backend()
    flt = SearchFilter("A")
    hits = [as_hit(chunk("c1", 11, 22), 0.9), as_hit(chunk("c2", 23, 35), 0.8)]
    rest = [
        as_hit(chunk("c3", 36, 45), 0.7),
        as_hit(chunk("c4", 46, 56), 0.65),
        as_hit(chunk("d0", 0, 10, parent="Q", source="doc2"), 0.6),
    ]
    res = expand_neighbors(hits, be, flt, window=1, refill=Refill(rest, slots=2))
    assert [h.chunk_id for h in res.hits] == ["c1", "d0"]
    assert res.hits[0].expanded_from == ("c0", "c1", "c2", "c3") and res.hits[1].text == "alpha beta"
    assert res.dropped == [("c2", "merged into the neighbour block of c1")]
    assert res.added == ["d0"]
    assert res.info["refill_skipped"] == {
        "c3": "already inside the neighbour block of c1",
        "c4": "would merge into the neighbour block of c1",
    }
    assert res.info["blocks"] == 2
    assert res.path == "neighbours +/-1 within the parent section; 1 merged slot refilled from the ranked remainder"


def test_each_expanded_block_falls_back_to_the_units_it_holds() -> None:
    """The pack stage's fallback of a block: the selected (or refilled) children inside it, best first; neighbour
    pieces that no one retrieved are not units."""
    c1, c2, c3 = as_hit(chunk("c1", 11, 22), 0.9), as_hit(chunk("c2", 23, 35), 0.8), as_hit(chunk("c3", 36, 45), 0.7)
    parent = as_hit(chunk("P", 0, 56, parent=None, kind="parent"), 0.9).replace(expanded_from=("c1", "c3"))
    block = c1.replace(expanded_from=("c0", "c1", "c2", "c3"))
    plain = as_hit(chunk("c4", 46, 56), 0.5)
    assert fallbacks([parent, plain], [c3, c1]) == {"P": Fallback(label="parent P", children=(c3, c1))}
    assert fallbacks([block], [c1, c2]) == {"c1": Fallback(label="neighbour block of c1", children=(c1, c2))}


HTML = "<p>One &amp; two</p>\n<p>Three <b>four</b></p>\n<p>Five&nbsp;six</p>"
P1, P2, P3 = ((m, HTML.index("</p>", m) + 4) for m in (0, HTML.index("<p>Three"), HTML.index("<p>Five")))


def html_chunk(cid: str, start: int, end: int, *, kind: str = "child") -> Chunk:
    c = chunk(cid, 0, 1, kind=kind, parent=None if kind == "parent" else "HP", source="page.html")
    return dataclasses.replace(
        c, start_offset=start, end_offset=end, text=HTML[start:end], visible_text=visible_text(HTML[start:end])
    )


def test_html_neighbour_blocks_and_parents_show_visible_text_and_keep_the_markup_offsets() -> None:
    be = EmbeddedBackend(None, dims=2)
    parts = [html_chunk("h1", *P1), html_chunk("h2", *P2), html_chunk("h3", *P3)]
    assert be.index(parts, [html_chunk("HP", 0, len(HTML), kind="parent")]).failed == []
    flt = SearchFilter("A")
    res = expand_neighbors([as_hit(parts[1], 1.0)], be, flt, window=1)
    (block,) = res.hits
    assert (block.start_offset, block.end_offset) == (0, len(HTML))
    assert block.text == HTML.replace("\n", "\n\n")  # the markup pieces, as merge_pieces writes them
    assert block.display_text == "One & two\n\nThree four\n\nFive six"
    (parent,) = expand_parents([as_hit(parts[0], 1.0)], be, flt, max_parent_tokens=100).hits
    assert parent.text == HTML and parent.display_text == "One & two\nThree four\nFive six"


def test_merge_visible_reads_overlapping_markup_as_one_span_and_leaves_plain_text_alone() -> None:
    a = as_hit(html_chunk("a", 0, P2[1]), 1.0)  # first two paragraphs
    b = as_hit(html_chunk("b", P2[0], len(HTML)), 1.0)  # last two: overlaps a
    inner = as_hit(html_chunk("i", *P2), 1.0)  # contained in a
    assert merge_visible([b, inner, a]) == "One & two\nThree four\nFive six" == visible_text(HTML)
    assert merge_visible([as_hit(html_chunk("x", *P1), 1.0), as_hit(html_chunk("y", *P3), 1.0)]) == (
        "One & two\n\nFive six"
    )
    plain = [as_hit(chunk("c0", 0, 10), 1.0), as_hit(chunk("c1", 11, 22), 1.0)]
    assert merge_visible(plain) is None  # Markdown/plain pieces: the merged text is shown as it is
