"""Business ranking: soft, configurable boosts for authority (source tier) and freshness (seed 002 §2.3,
§11). Hard constraints (tenant, ACL, expired versions) stay hard filters in the retrievers; nothing here can
bring back a filtered document, it only re-orders what passed. There is no "latest version" boost: the version
gate serves one version per source, and an expired or superseded version is filtered, never demoted (seed 002
§11, §26).

Each rule contributes a number; their sum is ``boost_score`` and

    final = base + boost_score * |base|

where ``base`` is the calibrated reranker score when there is one, else the raw reranker score,
else the fused (RRF) score. The boost is relative to the base's magnitude, so the same rules work on
any score scale and a zero business score leaves the order unchanged. A learned ranker plugs in as
``learned(hit, contributions) -> float``; its output is one more contribution.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from es_rag.records import Hit
from es_rag.stages.base import StageOutput

LearnedScorer = Callable[[Hit, Mapping[str, float]], float]


def parse_date(value: str | None) -> date | None:
    """The ISO date at the start of ``value`` (``2026-05-12``, ``2026-05-12T..``), else None.

    Args:
        value: A ``source_version`` or timestamp.
    """
    if not value or len(value) < 10:
        return None
    try:
        return datetime.strptime(value[:10], "%Y-%m-%d").date()
    except ValueError:
        return None


def content_date(hit: Hit) -> date | None:
    """The date freshness reads: ``meta.updated``, else ``meta.published`` (declared in front matter, a JSONL
    line, ``--meta`` or ``--updated-from-mtime``), else a ``source_version`` that starts with an ISO date; None
    when the hit has none of them (a file ingested with a ``sha256:`` version and no dates gets no freshness
    boost, rather than one guessed).

    Args:
        hit: The candidate.
    """
    for name in ("updated", "published"):
        value = hit.meta.get(name) if hit.meta else None
        if isinstance(value, str):
            dated = parse_date(value)
            if dated is not None:
                return dated
    return parse_date(hit.source_version)


@dataclass(frozen=True)
class BusinessRules:
    """Soft ranking rules; every weight 0 (the default) means the stage changes nothing.

    Args:
        source_tiers: ``source_id`` glob -> boost; the first matching pattern wins (authority / tier).
        freshness_weight: Boost of a source dated ``today`` (:func:`content_date`), halved every ``half_life_days``.
        half_life_days: Freshness half-life.
        today: Reference date for freshness (None = today's date).
        learned: Optional learned scorer added as contribution ``learned``.
    """

    source_tiers: Mapping[str, float] = field(default_factory=dict)
    freshness_weight: float = 0.0
    half_life_days: float = 365.0
    today: date | None = None
    learned: LearnedScorer | None = None

    @property
    def active(self) -> bool:
        """True when some rule can change a score."""
        return bool(self.source_tiers) or self.freshness_weight > 0 or self.learned is not None


def base_score(hit: Hit) -> float:
    """The score business rules boost: calibrated reranker score, else raw reranker score, else fused.

    Args:
        hit: The candidate.
    """
    for value in (hit.calibrated_score, hit.rerank_score, hit.fused_score, hit.final_score):
        if value is not None:
            return float(value)
    return 0.0


def contributions(hits: Sequence[Hit], rules: BusinessRules) -> list[dict[str, float]]:
    """Per hit, each rule's contribution (only rules that apply appear).

    Args:
        hits: Candidates.
        rules: The rules.
    """
    today = rules.today or date.today()
    out = []
    for h in hits:
        parts: dict[str, float] = {}
        for pattern, boost in rules.source_tiers.items():
            if fnmatch.fnmatchcase(h.source_id, pattern):
                parts["authority"] = float(boost)
                break
        if rules.freshness_weight > 0:
            dated = content_date(h)
            if dated is not None:
                age = max((today - dated).days, 0)
                parts["freshness"] = rules.freshness_weight * math.pow(0.5, age / rules.half_life_days)
        if rules.learned is not None:
            parts["learned"] = float(rules.learned(h, dict(parts)))
        out.append(parts)
    return out


def business_rank(hits: Sequence[Hit], rules: BusinessRules) -> tuple[list[Hit], list[dict[str, Any]]]:
    """Apply the rules: hits re-sorted by ``final_score`` (stable) and the per-hit trace rows.

    Args:
        hits: Candidates, best first.
        rules: The rules.
    """
    parts = contributions(hits, rules)
    scored = []
    rows = []
    for h, p in zip(hits, parts, strict=True):
        base = base_score(h)
        business = sum(p.values())
        final = base + business * abs(base)
        scored.append(h.replace(boost_score=business, final_score=final))
        rows.append({"id": h.chunk_id, "base": base, "contributions": p, "business": business, "final": final})
    order = sorted(range(len(scored)), key=lambda i: (-(scored[i].final_score or 0.0), i))
    return [scored[i] for i in order], [rows[i] for i in order]


def run(hits: Sequence[Hit], rules: BusinessRules) -> StageOutput:
    """The boost stage: with no rule configured the order is unchanged; else each hit's ``final_score`` is its
    base score plus the rules' sum times ``|base|``, re-sorted, with one trace row per hit.

    Args:
        hits: Candidates, best first.
        rules: The rules.
    """
    if not rules.active:
        return StageOutput(hits=list(hits), path="no rules configured: order unchanged")
    ranked, rows = business_rank(hits, rules)
    used = ", ".join(sorted({k for r in rows for k in r["contributions"]}))
    return StageOutput(hits=ranked, info={"rows": rows}, path=f"final = base + business * |base| ({used})")
