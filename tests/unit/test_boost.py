"""Business rules (the boost stage): authority tiers, freshness, a learned hook and the final-score formula, with
hand-computed numbers."""

from __future__ import annotations

from datetime import date

import pytest

from es_rag.errors import ConfigError
from es_rag.records import Hit
from es_rag.settings import Settings
from es_rag.stages import boost
from es_rag.stages.boost import BusinessRules, base_score, business_rank, contributions, parse_date

TODAY = date(2026, 12, 1)


def hit(cid: str, source: str, *, version: str | None = None, **scores: float) -> Hit:
    return Hit(chunk_id=cid, source_id=source, text=cid, tenant_id="t", source_version=version, **scores)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-05-12", date(2026, 5, 12)),
        ("2026-05-12T08:00:00Z", date(2026, 5, 12)),
        ("2026-13-01", None),
        ("2026-05", None),
        ("sha256:3f2a9c0d1e4b5a6f", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_date(value: str | None, expected: date | None) -> None:
    assert parse_date(value) == expected


def test_base_score_prefers_calibrated_then_raw_then_fused() -> None:
    assert base_score(hit("a", "s", calibrated_score=0.9, rerank_score=3.0, fused_score=0.03)) == 0.9
    assert base_score(hit("a", "s", rerank_score=3.0, fused_score=0.03)) == 3.0
    assert base_score(hit("a", "s", fused_score=0.03, final_score=7.0)) == 0.03
    assert base_score(hit("a", "s", final_score=7.0)) == 7.0
    assert base_score(hit("a", "s")) == 0.0


def test_authority_takes_the_first_matching_glob() -> None:
    rules = BusinessRules(source_tiers={"handbook/*": 0.2, "*": -0.1}, today=TODAY)
    got = contributions([hit("a", "handbook/x.md"), hit("b", "legacy/y.md")], rules)
    assert got == [{"authority": 0.2}, {"authority": -0.1}]
    assert contributions([hit("a", "Handbook/x.md")], BusinessRules(source_tiers={"handbook/*": 0.2})) == [{}]


def test_freshness_halves_every_half_life() -> None:
    """Weight 0.4, half-life 30 days: today 0.4, 30 days old 0.2, 60 days 0.1; a future date counts as today; an
    undated version (a content digest) gets no freshness contribution."""
    rules = BusinessRules(freshness_weight=0.4, half_life_days=30, today=TODAY)
    hits = [
        hit("now", "s1", version="2026-12-01"),
        hit("month", "s2", version="2026-11-01"),
        hit("two", "s3", version="2026-10-02"),
        hit("future", "s4", version="2027-01-01"),
        hit("digest", "s5", version="sha256:3f2a9c0d1e4b5a6f"),
    ]
    got = contributions(hits, rules)
    assert [g.get("freshness") for g in got] == pytest.approx([0.4, 0.2, 0.1, 0.4, None])
    assert got[4] == {}


def test_learned_scorer_sees_the_other_contributions() -> None:
    seen = []

    def learned(h: Hit, parts: object) -> float:
        seen.append((h.chunk_id, parts))
        return 0.05

    rules = BusinessRules(source_tiers={"a*": 0.1}, learned=learned, today=TODAY)
    assert contributions([hit("x", "a1")], rules) == [{"authority": 0.1, "learned": 0.05}]
    assert seen == [("x", {"authority": 0.1})]


def test_final_is_base_plus_business_times_abs_base_and_reorders() -> None:
    """Bases 2.0 and 1.8 (raw reranker scores, one negative case too). Tier +0.2 on b: 1.8 + 0.2 x 1.8 = 2.16
    beats a's 2.0. A negative base moves up with a positive boost: -1.0 + 0.5 x 1.0 = -0.5."""
    rules = BusinessRules(source_tiers={"b*": 0.2, "c*": 0.5}, today=TODAY)
    hits = [hit("a", "a1", rerank_score=2.0), hit("b", "b1", rerank_score=1.8), hit("c", "c1", rerank_score=-1.0)]
    ranked, rows = business_rank(hits, rules)
    assert [h.chunk_id for h in ranked] == ["b", "a", "c"]
    assert [h.final_score for h in ranked] == pytest.approx([2.16, 2.0, -0.5])
    assert [h.boost_score for h in ranked] == pytest.approx([0.2, 0.0, 0.5])
    assert rows[0] == {
        "id": "b",
        "base": 1.8,
        "contributions": {"authority": 0.2},
        "business": 0.2,
        "final": rows[0]["final"],
    }
    assert rows[0]["final"] == pytest.approx(2.16)


def test_equal_final_scores_keep_their_order() -> None:
    rules = BusinessRules(source_tiers={"zzz": 0.3}, today=TODAY)
    hits = [hit(c, "s", rerank_score=1.0) for c in "abc"]
    assert [h.chunk_id for h in business_rank(hits, rules)[0]] == ["a", "b", "c"]


def test_the_stage_without_rules_changes_nothing() -> None:
    hits = [hit("a", "s", rerank_score=1.0), hit("b", "s", rerank_score=2.0)]
    out = boost.run(hits, BusinessRules())
    assert out.hits == hits and out.info == {} and out.path == "no rules configured: order unchanged"
    out = boost.run(hits, BusinessRules(source_tiers={"s": 0.1}, freshness_weight=0.2, today=TODAY))
    assert out.path == "final = base + business * |base| (authority)"  # no dated version: no freshness row
    assert [h.chunk_id for h in out.hits] == ["b", "a"]


def test_latest_version_boost_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"setting 'latest_version_boost' was removed: the version gate serves"):
        Settings(latest_version_boost=0.2)


def test_freshness_reads_declared_dates_before_the_version() -> None:
    """Seed-audit row 53: a file ingested with a content-digest version is dated by its metadata (front matter,
    ``--meta`` or ``--updated-from-mtime``): updated first, then published; without either, no freshness."""
    rules = BusinessRules(freshness_weight=0.4, half_life_days=10.0, today=date(2026, 5, 21))
    digest = "sha256:0123456789abcdef"
    hits = [
        Hit(chunk_id="u", source_id="u", text="", tenant_id="t", source_version=digest,
            meta={"updated": "2026-05-11", "published": "2020-01-01"}),
        Hit(chunk_id="p", source_id="p", text="", tenant_id="t", source_version=digest,
            meta={"published": "2026-05-01"}),
        Hit(chunk_id="v", source_id="v", text="", tenant_id="t", source_version="2026-05-21"),
        Hit(chunk_id="n", source_id="n", text="", tenant_id="t", source_version=digest),
    ]  # fmt: skip
    # 10 days old: 0.4 * 0.5; 20 days: 0.4 * 0.25; today: 0.4; undated: nothing
    assert contributions(hits, rules) == [{"freshness": 0.2}, {"freshness": 0.1}, {"freshness": 0.4}, {}]
