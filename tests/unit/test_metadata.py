"""The metadata model (issue 19 item 1, seed-audit rows 29 and 115): declared typed fields, their validation at
ingest, the ``--filter`` language, and Elasticsearch's date-math rounding. Every expected value is written out by
hand from the rule it checks, never computed with ``es_rag.metadata``.

Rounding rule (``DateFieldMapper.DateFieldType.rangeQuery`` in elastic/elasticsearch:
``l = parseToLong(lowerTerm, !includeLower, ...)``, ``u = parseToLong(upperTerm, includeUpper, ...)``; the range
query reference, "Date math and rounding"): ``gt`` rounds up to the last millisecond of the period, ``gte`` down to
its first, ``lt`` down, ``lte`` up.
"""

from __future__ import annotations

import pytest

from es_rag.errors import ConfigError, InputError
from es_rag.metadata import (
    MetadataSchema,
    Validity,
    canonical_date,
    parse_filter,
    parse_instant,
    render_bound,
    resolve_bound,
)

SCHEMA = MetadataSchema()
CUSTOM = MetadataSchema.declare(["priority:integer", "score:float", "internal:boolean", "product:keyword"])

# epoch milliseconds, worked out by hand: 2026-01-01T00:00Z = 1767225600 s
JAN_1_2026 = 1_767_225_600_000
DAY = 86_400_000
APR_1_2026 = JAN_1_2026 + (31 + 28 + 31) * DAY
MAY_1_2026 = APR_1_2026 + 30 * DAY
JAN_1_2027 = JAN_1_2026 + 365 * DAY


# ------------------------------------------------------------------------------------------------ values
def test_dates_are_stored_in_iso_form_partial_dates_as_their_first_day() -> None:
    assert canonical_date("2026-04-30") == "2026-04-30"
    assert canonical_date("2026-04") == "2026-04-01"
    assert canonical_date("2026") == "2026-01-01"
    assert canonical_date("2026-04-30T09:15:00Z") == "2026-04-30T09:15:00+00:00"
    assert canonical_date("2026-04-30T09:15:00") == "2026-04-30T09:15:00+00:00"  # zone-less: UTC, as ES reads it
    assert parse_instant("2026-04-01") == APR_1_2026
    assert parse_instant("2026-04-01T01:00:00+01:00") == APR_1_2026
    with pytest.raises(ValueError, match="not a calendar date"):
        canonical_date("2026-02-30")
    with pytest.raises(ValueError, match="not an ISO-8601 date"):
        canonical_date("30/04/2026")


def test_normalise_types_aliases_and_single_values() -> None:
    got = SCHEMA.normalise(
        {"type": "policy", "tags": "eu-regulation", "effective": "2026-03", "expires": "2027", "url": "https://x/y"},
        document="a.md",
    )
    assert got == {
        "doc_type": ["policy"],
        "tags": ["eu-regulation"],
        "valid_from": "2026-03-01",
        "valid_to": "2027-01-01",
        "url": "https://x/y",
    }
    assert CUSTOM.normalise({"priority": "3", "score": 0.5, "internal": True}, document="d") == {
        "priority": 3,
        "score": 0.5,
        "internal": True,
    }
    assert SCHEMA.normalise({"tags": [" a ", None, ""], "author": "  "}, document="d") == {"tags": ["a"]}


@pytest.mark.parametrize(
    ("meta", "field", "reason"),
    [
        ({"colour": "red"}, "meta.colour", "unknown metadata field"),
        ({"published": "last week"}, "meta.published", "not an ISO-8601 date"),
        ({"url": ["a", "b"]}, "meta.url", "holds one value, got 2"),
        ({"tags": {"a": 1}}, "meta.tags", "expected a string, got dict"),
        ({"type": "a", "doc_type": "b"}, "meta.doc_type", "given twice"),
        ({"valid_from": "2026-03-01", "valid_to": "2026-02-28"}, "meta.valid_to", "before valid_from 2026-03-01"),
    ],
)
def test_bad_metadata_names_the_document_and_the_field(meta, field, reason) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError) as err:
        SCHEMA.normalise(meta, document="docs/policy.md")
    assert err.value.document == "docs/policy.md" and err.value.field == field and reason in err.value.reason


def test_bad_typed_values_of_declared_fields() -> None:
    with pytest.raises(InputError, match="expected an integer"):
        CUSTOM.normalise({"priority": "high"}, document="d")
    with pytest.raises(InputError, match="expected true or false"):
        CUSTOM.normalise({"internal": "yes"}, document="d")
    with pytest.raises(InputError, match="expected a number"):
        CUSTOM.normalise({"score": float("nan")}, document="d")


def test_declarations_are_checked() -> None:
    with pytest.raises(ConfigError, match="is not name:type"):
        MetadataSchema.declare(["priority"])
    with pytest.raises(ConfigError, match="is not name:type"):
        MetadataSchema.declare(["priority:text"])
    with pytest.raises(ConfigError, match="built-in field or alias"):
        MetadataSchema.declare(["tags:keyword"])
    with pytest.raises(ConfigError, match="metadata_fields"):
        from es_rag.settings import Settings

        Settings(metadata_fields=("Bad Name:keyword",))


def test_mapping_is_strict_and_typed() -> None:
    props = CUSTOM.es_properties()
    assert props["type"] == "object" and props["dynamic"] == "strict"
    assert props["properties"]["tags"] == {"type": "keyword"}
    assert props["properties"]["published"] == {"type": "date"}
    assert props["properties"]["priority"] == {"type": "integer"}
    assert props["properties"]["score"] == {"type": "double"}
    assert props["properties"]["internal"] == {"type": "boolean"}


# ----------------------------------------------------------------------------------------------- filters
def test_filter_expressions_render_to_the_clauses_written_by_hand() -> None:
    assert parse_filter("doc_type=policy,faq", SCHEMA).to_es() == {"terms": {"meta.doc_type": ["policy", "faq"]}}
    assert parse_filter("type = policy", SCHEMA).to_es() == {"terms": {"meta.doc_type": ["policy"]}}
    # == is =: it once filtered on the value "=policy" and returned nothing, silently (issue 31)
    assert parse_filter("doc_type==policy", SCHEMA).to_es() == {"terms": {"meta.doc_type": ["policy"]}}
    assert parse_filter("published == 2024-05-01", SCHEMA) == parse_filter("published=2024-05-01", SCHEMA)
    assert parse_filter("tags!=draft", SCHEMA).to_es() == {"bool": {"must_not": [{"terms": {"meta.tags": ["draft"]}}]}}
    assert parse_filter("published>=2023", SCHEMA).to_es() == {"range": {"meta.published": {"gte": "2023-01-01||/y"}}}
    assert parse_filter("effective<=2026-04-30", SCHEMA).to_es() == {
        "range": {"meta.valid_from": {"lte": "2026-04-30||/d"}}
    }
    assert parse_filter("updated<2026-04", SCHEMA).to_es() == {"range": {"meta.updated": {"lt": "2026-04-01||/M"}}}
    assert parse_filter("published=2026-04", SCHEMA).to_es() == {
        "range": {"meta.published": {"gte": "2026-04-01||/M", "lte": "2026-04-01||/M"}}
    }
    assert parse_filter("updated>2026-04-30T09:00:00Z", SCHEMA).to_es() == {
        "range": {"meta.updated": {"gt": "2026-04-30T09:00:00+00:00"}}
    }
    assert parse_filter("priority>=2", CUSTOM).to_es() == {"range": {"meta.priority": {"gte": 2}}}
    assert parse_filter("internal=false", CUSTOM).to_es() == {"terms": {"meta.internal": [False]}}


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("doc_type", "expected FIELD=VALUE"),
        ("doc_type=", "expected FIELD=VALUE"),
        ("colour=red", "unknown metadata field 'colour'"),
        ("tags>=a", ">= needs a date or number field; tags is keyword"),
        ("published>=yesterday", "not an ISO-8601 date"),
        ("published!=2026", "a date field takes one value"),
        ("published=2025,2026", "a date field takes one value"),
        ("doc_type=,", "needs at least one value"),
    ],
)
def test_bad_filters_say_what_is_wrong(expr: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_filter(expr, SCHEMA)
    with pytest.raises(ConfigError, match="internal is boolean"):
        parse_filter("internal=maybe", CUSTOM)
    with pytest.raises(ConfigError, match="priority is integer"):
        parse_filter("priority>=high", CUSTOM)


def test_date_bounds_keep_their_granularity() -> None:
    assert render_bound("2023") == "2023-01-01||/y"
    assert render_bound("2026-04") == "2026-04-01||/M"
    assert render_bound("2026-04-30") == "2026-04-30||/d"


def test_rounding_follows_elasticsearch() -> None:
    now = APR_1_2026 + 15 * DAY + 3_600_000  # 2026-04-16T01:00Z
    # gte / lt round down to the first millisecond of the period; gt / lte up to the last
    assert resolve_bound("2026-04-01||/M", "gte", now_ms=now) == APR_1_2026
    assert resolve_bound("2026-04-01||/M", "lt", now_ms=now) == APR_1_2026
    assert resolve_bound("2026-04-01||/M", "lte", now_ms=now) == MAY_1_2026 - 1
    assert resolve_bound("2026-04-01||/M", "gt", now_ms=now) == MAY_1_2026 - 1
    assert resolve_bound("2026-01-01||/y", "lte", now_ms=now) == JAN_1_2027 - 1
    assert resolve_bound("2026-04-30||/d", "lte", now_ms=now) == MAY_1_2026 - 1
    assert resolve_bound("now/d", "gt", now_ms=now) == APR_1_2026 + 16 * DAY - 1
    assert resolve_bound("now/d", "lt", now_ms=now) == APR_1_2026 + 15 * DAY
    assert resolve_bound("2026-04-30T09:00:00+00:00", "gt", now_ms=now) == MAY_1_2026 - DAY + 9 * 3_600_000


def test_conditions_match_stored_documents() -> None:
    now = APR_1_2026
    doc = {"meta": {"tags": ["eu-regulation", "gdpr"], "published": "2023-06-30", "doc_type": ["policy"]}}
    assert parse_filter("tags=eu-regulation", SCHEMA).matches(doc, now_ms=now)
    assert not parse_filter("tags=sox", SCHEMA).matches(doc, now_ms=now)
    assert parse_filter("published>=2023", SCHEMA).matches(doc, now_ms=now)
    assert not parse_filter("published>=2023-07", SCHEMA).matches(doc, now_ms=now)
    assert parse_filter("published<=2023-06", SCHEMA).matches(doc, now_ms=now)  # through June 30
    assert parse_filter("published=2023", SCHEMA).matches(doc, now_ms=now)
    assert not parse_filter("doc_type!=policy", SCHEMA).matches(doc, now_ms=now)
    # a missing field matches no value and no range, and every "none of"
    assert not parse_filter("tags=eu-regulation", SCHEMA).matches({}, now_ms=now)
    assert not parse_filter("published>=2000", SCHEMA).matches({"meta": {}}, now_ms=now)
    assert parse_filter("doc_type!=policy", SCHEMA).matches({}, now_ms=now)
    # a number stored in a keyword field is its text, as Elasticsearch indexes it
    assert parse_filter("product=3", CUSTOM).matches({"meta": {"product": 3}}, now_ms=now)
    assert parse_filter("priority=3", CUSTOM).matches({"meta": {"priority": 3}}, now_ms=now)


# ---------------------------------------------------------------------------------------------- validity
def test_validity_clause_and_inclusive_days() -> None:
    assert Validity().to_es() == {
        "bool": {
            "must_not": [
                {"range": {"meta.valid_from": {"gt": "now/d"}}},
                {"range": {"meta.valid_to": {"lt": "now/d"}}},
            ]
        }
    }
    assert Validity("2026-04-30").anchor == "2026-04-30||/d"
    old = {"meta": {"valid_from": "2025-01-01", "valid_to": "2026-02-28"}}
    new = {"meta": {"valid_from": "2026-03-01"}}
    feb_28 = JAN_1_2026 + 58 * DAY + 23 * 3_600_000  # 2026-02-28T23:00Z
    mar_1 = JAN_1_2026 + 59 * DAY
    assert Validity().matches(old, now_ms=feb_28) and not Validity().matches(new, now_ms=feb_28)
    assert not Validity().matches(old, now_ms=mar_1) and Validity().matches(new, now_ms=mar_1)
    assert Validity("2025-06-01").matches(old, now_ms=mar_1) and not Validity("2025-06-01").matches(new, now_ms=mar_1)
    assert Validity().matches({}, now_ms=mar_1)  # no validity declared: always served
    with pytest.raises(ConfigError, match="is not a date"):
        Validity("2026-04")
