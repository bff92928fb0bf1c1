"""The select stage end to end, and the edges of ``mmr`` / ``select_context``, with hand-computed expectations.

Every expected order below is worked out in the test's docstring from the vectors and scores written in the
test; none is produced by calling the code under test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from es_rag.errors import ConfigError
from es_rag.records import Hit
from es_rag.settings import SelectSettings
from es_rag.stages import select
from es_rag.stages.select import Selection, mmr, select_context


def hit(
    cid: str,
    source: str,
    vec: list[float] | list[list[float]] | None,
    final: float | None = None,
    parent: str | None = None,
) -> Hit:
    return Hit(
        chunk_id=cid,
        source_id=source,
        text=cid,
        tenant_id="t",
        parent_id=parent,
        vector=np.asarray(vec, dtype=np.float32) if vec is not None else None,
        final_score=final,
    )


def ids(hits: list[Hit]) -> list[str]:
    return [h.chunk_id for h in hits]


# --- select.run ----------------------------------------------------------------------------------------------


def test_run_on_no_hits_passes_nothing() -> None:
    out = select.run([], SelectSettings())
    assert out.hits == [] and out.dropped == [] and out.info == {} and out.path == ""


def test_run_scales_final_scores_to_0_1_before_mmr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Final scores 12, 11.9, 7 and 2 span 10, so min-max scaling gives 1, 0.99, 0.5 and 0; a missing final
    score reads as 0 before scaling (12, 0, 3 -> 1, 0, 0.25); equal scores all read as 1."""
    seen: list[list[float]] = []
    real = select.select_context

    def spy(*args: Any, **kwargs: Any) -> Selection:
        seen.append([float(x) for x in kwargs["relevance"]])
        return real(*args, **kwargs)

    monkeypatch.setattr(select, "select_context", spy)
    settings = SelectSettings(context_k=4, max_chunks_per_source=9)
    vecs = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]]
    select.run(
        [hit(f"h{i}", f"s{i}", v, f) for i, (v, f) in enumerate(zip(vecs, [12.0, 11.9, 7.0, 2.0], strict=True))],
        settings,
    )
    select.run([hit(f"h{i}", f"s{i}", vecs[i], f) for i, f in enumerate([12.0, None, 3.0])], settings)
    select.run([hit(f"h{i}", f"s{i}", vecs[i], 3.0) for i in range(2)], settings)
    select.run([hit(f"h{i}", f"s{i}", vecs[i], f) for i, f in enumerate([0.9, 0.4, 0.65])], settings)
    assert seen[0] == pytest.approx([1.0, 0.99, 0.5, 0.0])
    assert seen[1] == pytest.approx([1.0, 0.0, 0.25])
    assert seen[2] == [1.0, 1.0]
    assert seen[3] == pytest.approx([1.0, 0.0, 0.5])  # a span below 1 is scaled too


def test_run_lets_mmr_decide_membership_and_keeps_relevance_order() -> None:
    """Scaled relevance 1, 0.99, 0.5, 0 (final scores 12, 11.9, 7, 2); lambda 0.5; h1 is a near duplicate of
    h0 (cosine 0.99995), h2 is orthogonal to both, h3 is at 45 degrees to all three. Picks: h0 (most relevant);
    then h2 (0.5 x 0.5 - 0 = 0.25) over h1 (0.495 - 0.49998 < 0) and h3 (0 - 0.354); then h1 (-0.005) over h3
    (-0.354). MMR order h0, h2, h1; the stage passes them on in relevance order h0, h1, h2 and drops h3."""
    hits = [
        hit("h0", "a", [1.0, 0.0, 0.0], 12.0),
        hit("h1", "b", [1.0, 0.01, 0.0], 11.9),
        hit("h2", "c", [0.0, 1.0, 0.0], 7.0),
        hit("h3", "d", [0.5, 0.5, 0.7071], 2.0),
    ]
    settings = SelectSettings(context_k=3, mmr_lambda=0.5, max_chunks_per_source=2)
    out = select.run(hits, settings)
    assert out.info == {"mmr_order": ["h0", "h2", "h1"]}
    assert ids(out.hits) == ["h0", "h1", "h2"]
    assert out.dropped == [("h3", "not selected (context_k=3)")]
    assert out.path == "mmr(lambda=0.5) + max 2/source"


def test_run_orders_equal_relevance_by_position() -> None:
    """All final scores equal (relevance 1 each), lambda 0.5: h0 first (ties go to the lower index), then h2
    (orthogonal to h0: 0.5 - 0 = 0.5) before h1 (a copy of h0: 0.5 - 0.5 = 0). Output: position order."""
    hits = [hit("h0", "a", [1.0, 0.0], 1.0), hit("h1", "b", [1.0, 0.0], 1.0), hit("h2", "c", [0.0, 1.0], 1.0)]
    out = select.run(hits, SelectSettings(context_k=3, mmr_lambda=0.5))
    assert out.info == {"mmr_order": ["h0", "h2", "h1"]}
    assert ids(out.hits) == ["h0", "h1", "h2"]


def test_run_path_names_the_parent_cap_and_the_relevance_fallback() -> None:
    hits = [
        hit("a1", "A", None, 3.0, parent="P"),
        hit("a2", "A", None, 2.0, parent="P"),
        hit("b1", "B", None, 1.0, parent="Q"),
    ]
    out = select.run(hits, SelectSettings(context_k=3, max_chunks_per_source=2, max_chunks_per_parent=1))
    assert out.path == "relevance order (no stored vectors) + max 2/source, 1/parent"
    assert ids(out.hits) == ["a1", "b1"]
    assert out.dropped == [("a2", "per-parent cap (1) for P")]
    assert out.info == {"mmr_order": ["a1", "b1"]}
    with_vectors = [hit("a1", "A", [1.0, 0.0], 3.0, parent="P"), hit("b1", "B", [0.0, 1.0], 1.0, parent="Q")]
    out = select.run(with_vectors, SelectSettings(mmr_lambda=0.25, max_chunks_per_source=1, max_chunks_per_parent=3))
    assert out.path == "mmr(lambda=0.25) + max 1/source, 3/parent"


# --- select_context ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -1])
def test_select_context_with_no_room_drops_every_hit(k: int) -> None:
    """Without room, every hit is dropped with the reason, and the method still says which path applied."""
    hits = [hit("a", "A", [1.0, 0.0]), hit("b", "B", None)]
    sel = select_context(hits, None, lambda_mult=0.5, k=k)
    assert (sel.chosen, sel.method) == ([], "relevance")
    assert sel.dropped == [("a", f"not selected (context_k={k})"), ("b", f"not selected (context_k={k})")]
    sel = select_context(hits[:1], None, lambda_mult=0.5, k=k, relevance=[1.0])
    assert (sel.chosen, sel.method, sel.dropped) == ([], "mmr", [("a", f"not selected (context_k={k})")])


def test_select_context_on_no_hits_chooses_nothing() -> None:
    assert select_context([], None, lambda_mult=0.5, k=3) == Selection(chosen=[], dropped=[])


@pytest.mark.parametrize("lam", [-0.01, 1.01])
def test_select_context_refuses_lambda_outside_0_1(lam: float) -> None:
    with pytest.raises(ConfigError, match=r"lambda_mult: must be within \[0, 1\], got "):
        select_context([hit("a", "A", [1.0])], None, lambda_mult=lam, k=1)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_select_context_accepts_lambda_at_the_bounds(lam: float) -> None:
    assert select_context([hit("a", "A", [1.0])], None, lambda_mult=lam, k=1, relevance=[1.0]).chosen == [0]


def test_select_context_needs_relevance_or_a_query_vector() -> None:
    with pytest.raises(ConfigError, match=r"^select_context: needs relevance scores or a query vector$"):
        select_context([hit("a", "A", [1.0, 0.0])], None, lambda_mult=0.5, k=1)


def test_select_context_uses_the_cosine_to_the_query_not_the_raw_dot_product() -> None:
    """Query (10, 5) has length 11.18; its cosines are a 0.894, b 0.949, c 0.447, and a-b are 0.990 similar,
    b-c 0.141, a-c 0. Lambda 0.5: b first; then c (0.224 - 0.071 = 0.153) over a (0.447 - 0.495 < 0); then a.
    With the raw dot product (relevance x 11.18) a would score 5.0 - 0.495 and come second."""
    hits = [hit("a", "A", [1.0, 0.0]), hit("b", "B", [0.99, 0.141]), hit("c", "C", [0.0, 1.0])]
    assert select_context(hits, [10.0, 5.0], lambda_mult=0.5, k=3).chosen == [1, 2, 0]
    assert select_context(hits, np.asarray([[10.0], [5.0]]), lambda_mult=0.5, k=3).chosen == [1, 2, 0]


def test_select_context_with_a_zero_query_vector_keeps_the_given_order() -> None:
    hits = [hit("a", "A", [1.0, 0.0]), hit("b", "B", [0.0, 1.0]), hit("c", "C", [1.0, 1.0])]
    assert select_context(hits, [0.0, 0.0], lambda_mult=1.0, k=3).chosen == [0, 1, 2]


def test_select_context_per_parent_cap_ignores_hits_without_a_parent() -> None:
    hits = [
        hit("n1", "A", [1.0, 0.0]),
        hit("n2", "B", [1.0, 0.1]),
        hit("p1", "C", [0.0, 1.0], parent="P"),
        hit("p2", "D", [0.1, 1.0], parent="P"),
    ]
    sel = select_context(hits, None, lambda_mult=1.0, k=4, max_per_parent=1, relevance=[1.0, 0.9, 0.8, 0.7])
    assert sel.chosen == [0, 1, 2]
    assert sel.dropped == [("p2", "per-parent cap (1) for P")]


def test_select_context_caps_at_exactly_the_limit() -> None:
    """Three hits of one source, cap 2: the first two pass (0 and 1 already chosen are below the cap), the third
    is refused; cap 3 passes all three."""
    hits = [hit(f"a{i}", "A", [1.0, float(i)]) for i in range(3)]
    two = select_context(hits, None, lambda_mult=1.0, k=3, max_per_source=2, relevance=[0.9, 0.8, 0.7])
    assert two.chosen == [0, 1] and two.dropped == [("a2", "per-source cap (2) for A")]
    three = select_context(hits, None, lambda_mult=1.0, k=3, max_per_source=3, relevance=[0.9, 0.8, 0.7])
    assert three.chosen == [0, 1, 2] and three.dropped == []


def test_select_context_relevance_order_stops_at_k_and_reports_the_rest() -> None:
    hits = [hit("a", "A", None), hit("b", "B", None), hit("c", "C", None)]
    sel = select_context(hits, None, lambda_mult=0.5, k=2)
    assert (sel.chosen, sel.method) == ([0, 1], "relevance")
    assert sel.dropped == [("c", "not selected (context_k=2)")]
    assert select_context(hits, None, lambda_mult=0.5, k=3).dropped == []


def test_select_context_mixed_vectors_fall_back_to_relevance_order() -> None:
    """One hit without a stored vector is enough to fall back: nothing is re-embedded."""
    hits = [hit("a", "A", [1.0, 0.0]), hit("b", "B", None), hit("c", "C", [1.0, 0.0])]
    sel = select_context(hits, [1.0, 0.0], lambda_mult=0.0, k=2)
    assert (sel.chosen, sel.method) == ([0, 1], "relevance")


# --- mmr edges -----------------------------------------------------------------------------------------------


def test_mmr_first_pick_is_the_most_relevant_even_at_lambda_0() -> None:
    """At lambda 0 every later pick is the least similar one; the first is still the most relevant (c: 1.0)."""
    q = [0.0, 1.0]
    cands = [[1.0, 0.0], [0.7, 0.7], [0.0, 1.0]]
    assert mmr(q, cands, lambda_mult=0.0, k=3) == [2, 0, 1]


def test_mmr_accepts_lambda_at_the_bounds_and_refuses_outside() -> None:
    assert mmr([1.0], [[1.0]], lambda_mult=0.0, k=1) == [0]
    assert mmr([1.0], [[1.0]], lambda_mult=1.0, k=1) == [0]
    with pytest.raises(ConfigError, match=r"lambda_mult: must be within \[0, 1\], got -0.5"):
        mmr([1.0], [[1.0]], lambda_mult=-0.5)
    with pytest.raises(ConfigError, match="k: must be >= 0, got -2"):
        mmr([1.0], [[1.0]], k=-2)


def test_mmr_refuses_a_flat_candidate_array() -> None:
    with pytest.raises(ConfigError, match=r"candidate_vectors: expected a 2-D array, got shape \(3,\)"):
        mmr([1.0, 0.0, 0.0], [1.0, 0.0, 0.0], k=1)


def test_mmr_shape_messages_name_both_sizes() -> None:
    with pytest.raises(ConfigError, match="query_vector has 3 dims, candidate_vectors have 2"):
        mmr([1.0, 0.0, 0.0], [[1.0, 0.0]])
    with pytest.raises(ConfigError, match="relevance has 1 values for 2 candidates"):
        mmr([1.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], relevance=[0.5])


def test_mmr_zero_vectors_have_relevance_0_not_nan() -> None:
    """A zero candidate has cosine 0 to the query (its norm is read as 1, not divided by 0): the other one,
    cosine 1, comes first. A zero query gives every candidate relevance 0, so the order is by position."""
    assert mmr([1.0, 0.0], [[0.0, 0.0], [1.0, 0.0]], lambda_mult=1.0, k=2) == [1, 0]
    assert mmr([0.0, 0.0], [[0.0, 1.0], [1.0, 0.0]], lambda_mult=1.0, k=2) == [0, 1]


def test_mmr_default_lambda_and_k() -> None:
    """Defaults lambda 0.5 and k 4: five orthogonal candidates with falling relevance give the first four."""
    cands = np.eye(5)
    assert mmr(np.ones(5), cands, relevance=[0.9, 0.8, 0.7, 0.6, 0.5]) == [0, 1, 2, 3]
    # lambda 0.5 (not 1.0): the near copy of the first pick loses to a less relevant orthogonal one.
    near = [[1.0, 0.0, 0.0], [1.0, 0.01, 0.0], [0.0, 1.0, 0.0]]
    assert mmr([1.0, 0.0, 0.0], near, k=2, relevance=[1.0, 0.95, 0.5]) == [0, 2]


def test_run_passes_hits_on_in_relevance_order_whatever_their_input_order() -> None:
    """Final scores 1, 5, 3 on orthogonal vectors (no redundancy): all three chosen, passed on as h1, h2, h0."""
    hits = [
        hit("h0", "a", [1.0, 0.0, 0.0], 1.0),
        hit("h1", "b", [0.0, 1.0, 0.0], 5.0),
        hit("h2", "c", [0.0, 0.0, 1.0], 3.0),
    ]
    out = select.run(hits, SelectSettings(context_k=3, mmr_lambda=0.5))
    assert ids(out.hits) == ["h1", "h2", "h0"]
    assert out.info == {"mmr_order": ["h1", "h2", "h0"]}


def test_run_applies_the_per_source_cap() -> None:
    hits = [hit("a1", "A", [1.0, 0.0], 3.0), hit("a2", "A", [0.0, 1.0], 2.0), hit("b1", "B", [1.0, 1.0], 1.0)]
    out = select.run(hits, SelectSettings(context_k=3, mmr_lambda=1.0, max_chunks_per_source=1))
    assert ids(out.hits) == ["a1", "b1"]
    assert out.dropped == [("a2", "per-source cap (1) for A")]


def test_lambda_preset_error_lists_the_valid_presets() -> None:
    with pytest.raises(ConfigError) as err:
        select.lambda_for("nope")
    assert str(err.value) == "mmr preset: invalid value 'nope'; valid values: single_fact, multi_source, exploratory"


def test_mmr_on_no_candidates_is_empty_whatever_k() -> None:
    assert mmr([1.0], [], k=3) == []


def test_mmr_relevance_counts_candidates_not_dimensions() -> None:
    """Two candidates in three dimensions: two relevance values are right, one is refused naming both counts."""
    cands = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert mmr([1.0, 0.0, 0.0], cands, lambda_mult=1.0, k=2, relevance=[0.4, 0.5]) == [1, 0]
    with pytest.raises(ConfigError, match=r"^relevance has 1 values for 2 candidates$"):
        mmr([1.0, 0.0, 0.0], cands, relevance=[0.5])


def test_mmr_and_select_context_take_integer_relevance() -> None:
    """Integer scores are read as numbers (the masked-out candidates get -inf, which an integer array cannot hold)."""
    assert mmr([1.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], lambda_mult=1.0, k=2, relevance=[1, 2]) == [1, 0]
    hits = [hit("a", "A", [1.0, 0.0]), hit("b", "B", [0.0, 1.0])]
    assert select_context(hits, None, lambda_mult=1.0, k=2, relevance=[1, 2]).chosen == [1, 0]


def test_row_shaped_queries_scores_and_vectors_are_flattened() -> None:
    """Encoders return a batch of one, shape (1, d); score arrays may come as (1, n). Both are read flat."""
    cands = [[1.0, 0.0], [0.0, 1.0]]
    assert mmr(np.asarray([[0.0, 1.0]]), cands, lambda_mult=1.0, k=2) == [1, 0]
    assert mmr([1.0, 0.0], cands, lambda_mult=1.0, k=2, relevance=np.asarray([[0.2, 0.9]])) == [1, 0]
    hits = [hit("a", "A", [[1.0, 0.0]]), hit("b", "B", [[0.0, 1.0]])]
    assert select_context(hits, np.asarray([[0.0, 1.0]]), lambda_mult=1.0, k=2).chosen == [1, 0]
    assert select_context(hits, None, lambda_mult=1.0, k=2, relevance=np.asarray([[0.2, 0.9]])).chosen == [1, 0]


def test_zero_query_leaves_relevance_at_0_and_diversity_decides() -> None:
    """A zero query vector gives every candidate relevance 0 (no division by 0). Lambda 0.5: a first (tie, lower
    index), then c (orthogonal to a: score 0) over b (cosine 0.99995 to a: score -0.5)."""
    cands = [[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]]
    assert mmr([0.0, 0.0], cands, lambda_mult=0.5, k=3) == [0, 2, 1]
    hits = [hit(c, c.upper(), v) for c, v in zip("abc", cands, strict=True)]
    assert select_context(hits, [0.0, 0.0], lambda_mult=0.5, k=3).chosen == [0, 2, 1]
