"""Cap-aware MMR selection, lambda presets and gate cut-offs with exact expected orders."""

from __future__ import annotations

import numpy as np
import pytest

from es_rag.errors import ConfigError
from es_rag.records import Hit
from es_rag.stages.gate import NO_SUFFICIENT_EVIDENCE, UNDECIDED, apply_gate, score_cliff
from es_rag.stages.select import LAMBDA_PRESETS, lambda_for, select_context


def hit(cid: str, source: str, vec: list[float] | None, parent: str | None = None) -> Hit:
    return Hit(
        chunk_id=cid,
        source_id=source,
        text=cid,
        tenant_id="t",
        parent_id=parent,
        vector=np.asarray(vec, dtype=np.float32) if vec is not None else None,
    )


def test_presets_follow_the_seed_ranges() -> None:
    assert 0.7 <= lambda_for("single_fact") <= 0.9
    assert 0.5 <= lambda_for("multi_source") <= 0.7
    assert 0.4 <= lambda_for("exploratory") <= 0.6
    assert set(LAMBDA_PRESETS) == {"single_fact", "multi_source", "exploratory"}
    with pytest.raises(ConfigError, match="single_fact"):
        lambda_for("nope")


def test_per_source_cap_skips_without_counting_the_capped_hit() -> None:
    hits = [
        hit("a1", "A", [1.0, 0.0, 0.0]),
        hit("a2", "A", [0.9, 0.1, 0.0]),
        hit("a3", "A", [0.8, 0.0, 0.2]),
        hit("b1", "B", [0.0, 1.0, 0.0]),
        hit("c1", "C", [0.0, 0.0, 1.0]),
    ]
    rel = [1.0, 0.9, 0.8, 0.5, 0.4]
    sel = select_context(hits, None, lambda_mult=1.0, k=4, max_per_source=2, relevance=rel)
    assert [hits[i].chunk_id for i in sel.chosen] == ["a1", "a2", "b1", "c1"]
    assert sel.dropped == [("a3", "per-source cap (2) for A")]


def test_capped_hit_does_not_penalise_similar_candidates() -> None:
    # x2 is capped (same source as x1); y is nearly identical to x2 but from another source.
    # If x2 had counted as selected, y's redundancy would be ~1 and z would win at lambda 0.5.
    hits = [
        hit("x1", "X", [1.0, 0.0]),
        hit("x2", "X", [0.0, 1.0]),
        hit("y", "Y", [0.05, 1.0]),
        hit("z", "Z", [0.7, 0.7]),
    ]
    sel = select_context(hits, None, lambda_mult=0.5, k=2, max_per_source=1, relevance=[1.0, 0.9, 0.8, 0.45])
    assert [hits[i].chunk_id for i in sel.chosen] == ["x1", "y"]
    assert ("x2", "per-source cap (1) for X") in sel.dropped
    assert ("z", "not selected (context_k=2)") in sel.dropped


def test_per_parent_cap() -> None:
    hits = [
        hit("p1a", "S", [1.0, 0.0], parent="P1"),
        hit("p1b", "S", [0.0, 1.0], parent="P1"),
        hit("p2a", "S", [0.7, 0.7], parent="P2"),
    ]
    sel = select_context(hits, None, lambda_mult=1.0, k=3, max_per_parent=1, relevance=[1.0, 0.9, 0.8])
    assert [hits[i].chunk_id for i in sel.chosen] == ["p1a", "p2a"]
    assert sel.dropped == [("p1b", "per-parent cap (1) for P1")]


def test_without_stored_vectors_relevance_order_with_caps() -> None:
    hits = [hit("a1", "A", None), hit("a2", "A", None), hit("b1", "B", None), hit("c1", "C", None)]
    sel = select_context(hits, None, lambda_mult=0.5, k=2, max_per_source=1)
    assert sel.method == "relevance"
    assert [hits[i].chunk_id for i in sel.chosen] == ["a1", "b1"]
    assert sel.dropped == [("a2", "per-source cap (1) for A"), ("c1", "not selected (context_k=2)")]


def test_score_cliff_matches_the_seed_example() -> None:
    assert score_cliff([0.93, 0.90, 0.87, 0.52, 0.49], 0.3) == 2
    assert score_cliff([0.81, 0.80, 0.79], 0.3) is None
    assert score_cliff([0.5], 0.3) is None


def _hits(n: int) -> list[Hit]:
    return [hit(f"h{i}", f"s{i}", None) for i in range(n)]


def test_gate_cliff_cut_and_margin() -> None:
    hs = _hits(5)
    d = apply_gate(hs, [0.93, 0.90, 0.87, 0.52, 0.49], threshold=None, cliff=0.3, margin=None, scale="calibrated")
    assert [h.chunk_id for h in d.hits] == ["h0", "h1", "h2"]
    assert [c for c, _ in d.dropped] == ["h3", "h4"]
    assert d.info["status"] == UNDECIDED and "no calibrated threshold" in d.info["basis"]
    d = apply_gate(hs[:3], [0.95, 0.51, 0.50], threshold=None, cliff=None, margin=0.3, scale="calibrated")
    assert [h.chunk_id for h in d.hits] == ["h0"]
    assert d.info["top1_top2_margin"] == pytest.approx(0.44)
    d = apply_gate(hs[:3], [0.81, 0.80, 0.79], threshold=None, cliff=0.3, margin=0.3, scale="calibrated")
    assert len(d.hits) == 3


def test_gate_threshold_and_no_answer() -> None:
    hs = _hits(4)
    d = apply_gate(hs, [0.9, 0.7, 0.2, 0.1], threshold=0.5, cliff=None, margin=None, scale="calibrated")
    assert [h.chunk_id for h in d.hits] == ["h0", "h1"] and d.info["status"] == "evidence"
    d = apply_gate(hs, [0.3, 0.2, 0.2, 0.1], threshold=0.5, cliff=0.3, margin=None, scale="calibrated")
    assert d.hits == [] and d.info["status"] == NO_SUFFICIENT_EVIDENCE
    assert d.dropped[0][1] == "calibrated score 0.3000 < threshold 0.5"


def test_gate_on_fused_order_decides_nothing() -> None:
    hs = _hits(3)
    d = apply_gate(hs, None, threshold=0.5, cliff=0.3, margin=0.3, scale="fused")
    assert d.hits == hs and d.dropped == [] and d.info["status"] == UNDECIDED
    assert "fused order" in d.info["basis"]


def test_the_remainder_is_what_selection_did_not_choose_in_rank_order_and_the_caps_keep_the_capped_out() -> None:
    """Where the expand stage refills merged slots from: every candidate not chosen, best first; a hit the
    per-source cap dropped is in it, and the same cap refuses it again (a cap only tightens as hits are added)."""
    from es_rag.stages.select import cap_reason, remainder

    hits = [hit("a1", "A", None, "p"), hit("a2", "A", None, "p"), hit("a3", "A", None, "q"), hit("b1", "B", None)]
    sel = select_context(hits, None, lambda_mult=1.0, k=2, max_per_source=1, relevance=[1.0, 0.9, 0.8, 0.7])
    chosen = [hits[i] for i in sel.chosen]
    assert [h.chunk_id for h in chosen] == ["a1", "b1"]
    rest = remainder(hits, chosen)
    assert [h.chunk_id for h in rest] == ["a2", "a3"]
    assert [cap_reason(h, chosen, max_per_source=1, max_per_parent=None) for h in rest] == [
        "per-source cap (1) for A",
        "per-source cap (1) for A",
    ]
    assert cap_reason(hits[1], chosen, max_per_source=2, max_per_parent=1) == "per-parent cap (1) for p"
    assert cap_reason(hits[2], chosen, max_per_source=2, max_per_parent=1) is None
    assert cap_reason(hits[3], [], max_per_source=None, max_per_parent=None) is None
