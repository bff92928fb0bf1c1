"""Metadata filters, validity and superseded sources on every backend (issue 19 items 1 and 2; seed-audit rows 29,
68, 115): the embedded backend's numpy columns, the Elasticsearch backend on the strict cluster double (whose
``range`` evaluates dates with Elasticsearch's own date-math rounding, ``DateFieldType.rangeQuery``) and a real
cluster when ``ES_URL`` is set must serve exactly the documents an independent oracle written here allows.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag.filters import SearchFilter
from es_rag.metadata import MetadataSchema, Validity, parse_filters
from tests.support.contract import KINDS, chunk, open_backend

SCHEMA = MetadataSchema()
TAGS = ("eu-regulation", "gdpr", "sox")
TYPES = ("policy", "faq", "draft")
DATES = ("2022-12-31", "2023-01-01", "2023-06-30", "2024-02-29", "2026-02-28", "2026-03-01")


def _corpus() -> list[Any]:
    """Twelve chunks of one tenant: every combination of a type, one or two tags, a publication date (or none)
    and a validity window around 2026-03-01 (or none)."""
    out = []
    windows = [{}, {"valid_to": "2026-02-28"}, {"valid_from": "2026-03-01"}, {"valid_from": "2023-01-01"}]
    for i, (kind, tags, published, window) in enumerate(
        zip(
            itertools.cycle(TYPES),
            itertools.cycle([["eu-regulation"], ["gdpr", "eu-regulation"], ["sox"], []]),
            itertools.cycle([*DATES, None]),
            itertools.cycle(windows),
        )
    ):
        if i == 12:
            break
        meta: dict[str, Any] = {"doc_type": [kind], **window}
        if tags:
            meta["tags"] = tags
        if published:
            meta["published"] = published
        c = chunk(f"m{i}", f"policy text number {i}", source=f"s{i}", parent=None, start=0)
        out.append(dataclasses.replace(c, meta=meta))
    return out


CORPUS = _corpus()


def _day(text: str) -> date:
    return date.fromisoformat(text[:10])


def _oracle(meta: dict[str, Any], exprs: list[str], as_of: date | None) -> bool:
    """The predicate written from the requirement with dates as calendar days (every value and bound here is a
    whole day, year or month, so day arithmetic is exact)."""
    for expr in exprs:
        for sign in (">=", "<=", "!=", "=", ">", "<"):
            if sign in expr:
                name, value = expr.split(sign, 1)
                break
        stored = meta.get(name)
        values = stored if isinstance(stored, list) else ([] if stored is None else [stored])
        if name in ("tags", "doc_type"):
            hit = bool(set(values) & set(value.split(",")))
            if hit != (sign == "="):
                return False
            continue
        # a date: the bound's period [first day, last day]
        parts = [int(p) for p in value.split("-")]
        first = date(parts[0], parts[1] if len(parts) > 1 else 1, parts[2] if len(parts) > 2 else 1)
        if len(parts) == 1:
            last = date(parts[0], 12, 31)
        elif len(parts) == 2:
            last = (date(parts[0] + parts[1] // 12, parts[1] % 12 + 1, 1)) - timedelta(days=1)
        else:
            last = first
        if not any(_within(sign, _day(v), first, last) for v in values):
            return False
    if as_of is not None:
        start, end = meta.get("valid_from"), meta.get("valid_to")
        if start is not None and _day(start) > as_of:
            return False
        if end is not None and _day(end) < as_of:
            return False
    return True


def _within(sign: str, day: date, first: date, last: date) -> bool:
    """Whether ``day`` satisfies ``FIELD <sign> bound`` for a bound covering the days ``first`` to ``last``."""
    if sign == ">=":
        return day >= first
    if sign == ">":
        return day > last
    if sign == "<=":
        return day <= last
    if sign == "<":
        return day < first
    return first <= day <= last


@pytest.fixture(params=KINDS, scope="module")
def loaded(request: pytest.FixtureRequest) -> Iterator[Any]:
    with open_backend(request.param) as (backend, _):
        report = backend.index(CORPUS, [])
        assert report.failed == [], report.failed
        backend.version_store().refresh()
        backend.flush()
        yield backend


expr_st = st.one_of(
    st.builds(lambda t: f"tags={t}", st.sampled_from([*TAGS, "eu-regulation,sox"])),
    st.builds(lambda t: f"doc_type!={t}", st.sampled_from([*TYPES, "policy,faq"])),
    st.builds(
        lambda op, d: f"published{op}{d}",
        st.sampled_from([">=", ">", "<=", "<", "="]),
        st.sampled_from(["2023", "2023-06", "2023-06-30", "2024-02", "2026", "2022-12-31"]),
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    exprs=st.lists(expr_st, min_size=0, max_size=3),
    as_of=st.sampled_from([None, "2026-02-28", "2026-03-01", "2022-06-01"]),
)
def test_every_backend_serves_what_the_oracle_allows(loaded: Any, exprs: list[str], as_of: str | None) -> None:
    flt = SearchFilter(
        "acme", conditions=parse_filters(exprs, SCHEMA), validity=None if as_of is None else Validity(as_of)
    )
    expected = sum(_oracle(dict(c.meta), exprs, None if as_of is None else _day(as_of)) for c in CORPUS)
    assert loaded.count(flt) == expected, (exprs, as_of)


def test_validity_at_today_uses_the_requests_day(loaded: Any) -> None:
    today = datetime.now(tz=timezone.utc).date()
    expected = sum(_oracle(dict(c.meta), [], today) for c in CORPUS)
    assert loaded.count(SearchFilter("acme")) == expected
    assert loaded.count(SearchFilter("acme", validity=None)) == len(CORPUS)


def test_seed_004_eu_regulations_2023_or_later_is_one_filter_pair(loaded: Any) -> None:
    flt = SearchFilter("acme", conditions=parse_filters(["tags=eu-regulation", "published>=2023"], SCHEMA))
    got = {h.chunk_id for h in loaded.retrieve("policy text", None, loaded.snapshot_versions(flt), _settings(loaded))
           .channels["bm25"]}  # fmt: skip
    want = {
        c.chunk_id
        for c in CORPUS
        if "eu-regulation" in c.meta.get("tags", [])
        and c.meta.get("published", "0000") >= "2023-01-01"
        and _oracle(dict(c.meta), [], datetime.now(tz=timezone.utc).date())
    }
    assert want and got == want


def _settings(backend: Any) -> Any:
    from tests.support.contract import SETTINGS

    return SETTINGS.replace(candidate_k=20, num_candidates=40, rerank_k=5, context_k=3)


@pytest.mark.parametrize("kind", KINDS)
def test_a_superseded_source_is_hidden_in_every_order_and_back_when_its_successor_goes(kind: str) -> None:
    from es_rag.ingest import delete_source

    old = chunk("old1", "trash keeps deleted files for 30 days", source="retention-2025", parent=None)
    new = chunk("new1", "trash keeps deleted files for 60 days", source="retention-2026", parent=None)
    new = dataclasses.replace(new, meta={"supersedes": ["retention-2025"]})
    with open_backend(kind) as (backend, _):
        store = backend.version_store()

        def write(c: Any, supersedes: list[str]) -> None:
            store.begin("acme", [(c.source_id, c.source_version)])
            assert backend.index([c], []).failed == []
            store.refresh()
            store.commit("acme", [(c.source_id, c.source_version)], supersedes={c.source_id: supersedes})

        def served() -> set[str]:
            return {
                h.source_id
                for h in backend.retrieve(
                    "trash deleted files", None, backend.snapshot_versions(SearchFilter("acme")), _settings(backend)
                ).channels["bm25"]
            }

        write(new, ["retention-2025"])  # the successor first: the old source, ingested later, stays hidden
        write(old, [])
        assert served() == {"retention-2026"}
        assert store.state("acme").superseded_by == {"retention-2025": "retention-2026"}
        delete_source(backend, "acme", "retention-2026")  # the successor gone: the old source is served again
        assert served() == {"retention-2025"}
        assert store.state("acme").superseded_by == {}
