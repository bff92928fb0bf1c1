"""Extra hard filters an app writes as Elasticsearch queries: ``elasticsearch.dsl`` query objects (``Q("range",
...)``) or their dict form, placed in every retriever's ``filter`` beside the tenant, ACL and metadata clauses
(:meth:`es_rag.filters.SearchFilter.to_es`), so they can only narrow what a caller sees.

Elasticsearch evaluates any query there. The embedded backend evaluates the subset below on a stored chunk's source,
as Elasticsearch evaluates it in filter context, and refuses any other query type by name:

- ``term`` and ``terms`` on keyword, number and boolean fields (a stored list matches when any element does; never on
  the analysed text fields, whose terms are tokens);
- ``range`` (``gt``, ``gte``, ``lt``, ``lte``): numbers as numbers, dates (and date math: ``now-1y/d``,
  ``2024-05-01||+1M/M``) as instants with Elasticsearch's rounding (``gt``/``lte`` round up, a partial date is its
  whole period), other strings in code-point order as a keyword field compares them;
- ``exists``: the field holds a value (not null, not an empty list);
- ``bool`` (``must``, ``filter``, ``should`` with ``minimum_should_match``, ``must_not``) and ``match_all``.

Field names are the index's: ``meta.published``, ``source_id``, ``meta.tags``.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from es_rag.errors import ConfigError
from es_rag.metadata import META, MetadataSchema, in_range, parse_instant, resolve_bound, within
from es_rag.metadata.dates import render_bound

EMBEDDED_QUERIES = ("term", "terms", "range", "exists", "bool", "match_all")
"""The query types the embedded backend evaluates."""
TEXT_FIELDS = frozenset({"text", "title", "heading_path", "contextual_text", "visible_text"})
"""Analysed fields: a ``term`` on them matches tokens, which the embedded backend does not mirror."""
_META_KEYS = {"boost", "_name"}


def query_clause(query: Any) -> dict[str, Any]:
    """One filter clause from an ``elasticsearch.dsl`` query object (anything with ``to_dict()``), its dict form, or
    its JSON text.

    Args:
        query: The query.

    Raises:
        ConfigError: Not a query: not an object with exactly one key (the query type).
    """
    if hasattr(query, "to_dict") and callable(query.to_dict):
        query = query.to_dict()
    elif isinstance(query, str):
        try:
            query = json.loads(query)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"query filter {query!r}: not JSON ({exc.msg})") from None
    if not isinstance(query, Mapping) or len(query) != 1 or not isinstance(next(iter(query)), str):
        raise ConfigError(
            f"query filter: expected an elasticsearch.dsl query (Q('range', ...)) or its dict form with one key, the "
            f"query type ({{'range': {{'meta.published': {{'gte': '2024'}}}}}}), got {query!r}"
        )
    copy: dict[str, Any] = json.loads(json.dumps(query))  # a plain, independent copy: what the request body carries
    return copy


def is_query(value: Any) -> bool:
    """Whether ``value`` is a query rather than a ``--filter`` expression or a metadata mapping: a dsl query object,
    or a mapping with one key that is a query type this module or Elasticsearch's common filters name."""
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return True
    return isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in _KNOWN_TYPES


_KNOWN_TYPES = frozenset(
    {*EMBEDDED_QUERIES, "ids", "prefix", "wildcard", "regexp", "match", "match_phrase", "multi_match", "nested",
     "geo_distance", "geo_bounding_box", "script", "query_string", "simple_query_string", "constant_score"}
)  # fmt: skip


def query_matches(query: Mapping[str, Any], source: Mapping[str, Any], *, now_ms: int) -> bool:
    """Whether a stored document's source satisfies ``query`` (the subset the module names).

    Args:
        query: One clause (:func:`query_clause`).
        source: The document as stored.
        now_ms: The request's ``now`` (date math).

    Raises:
        ConfigError: A query type or parameter outside the subset, named.
    """
    ((kind, spec),) = query.items()
    if kind == "match_all":
        return True
    if kind == "bool":
        return _bool(spec, source, now_ms)
    if kind == "exists":
        _only(kind, spec, {"field"})
        return bool(_values(source, str(spec["field"])))
    if kind not in ("term", "terms", "range"):
        raise ConfigError(
            f"query filter {kind!r}: the embedded backend evaluates {', '.join(EMBEDDED_QUERIES)}; run this filter on "
            "Elasticsearch, or write it as one of those (or as a --filter expression)"
        )
    fields = [k for k in spec if k not in _META_KEYS]
    if len(fields) != 1:
        raise ConfigError(f"query filter {kind!r}: needs exactly one field, got {sorted(fields)}")
    (name,) = fields
    if name in TEXT_FIELDS:
        raise ConfigError(
            f"query filter {kind!r} on the analysed field {name!r}: the embedded backend filters keyword, number, "
            "date and boolean fields"
        )
    stored = _values(source, name)
    arg = spec[name]
    if kind == "term":
        value = arg.get("value") if isinstance(arg, Mapping) else arg
        if isinstance(arg, Mapping):
            _only(f"term.{name}", arg, {"value", "boost", "case_insensitive", "_name"})
            if arg.get("case_insensitive"):
                return any(str(s).lower() == str(value).lower() for s in stored)
        return any(_equal(s, value) for s in stored)
    if kind == "terms":
        if not isinstance(arg, Sequence) or isinstance(arg, str):
            raise ConfigError(f"query filter 'terms' on {name!r}: needs a list of values (a terms lookup is not run)")
        return any(_equal(s, v) for s in stored for v in arg)
    if not isinstance(arg, Mapping):
        raise ConfigError(f"query filter 'range' on {name!r}: needs an object of bounds (gte, gt, lte, lt)")
    _only(f"range.{name}", arg, {"gt", "gte", "lt", "lte", "format", "time_zone", "boost", "relation", "_name"})
    bounds = {op: arg[op] for op in ("gt", "gte", "lt", "lte") if op in arg}
    return any(_in_range(s, bounds, now_ms) for s in stored)


def query_fields(query: Mapping[str, Any]) -> list[str]:
    """The field names a query clause reads, ``bool`` clauses searched through (what :func:`check_query_fields`
    checks); a query type whose field is not a top key of its body (``match_all``, ``script``) names none.

    Args:
        query: One clause (:func:`query_clause`).
    """
    ((kind, spec),) = query.items()
    if not isinstance(spec, Mapping):
        return []
    if kind == "bool":
        out: list[str] = []
        for key in ("must", "filter", "should", "must_not"):
            got = spec.get(key) or []
            for clause in got if isinstance(got, list) else [got]:
                if isinstance(clause, Mapping) and len(clause) == 1:
                    out += query_fields(clause)
        return out
    if kind == "exists":
        return [str(spec["field"])] if "field" in spec else []
    if kind in ("match_all", "match_none", "script", "nested", "has_child", "has_parent", "knn"):
        return []
    return [str(k) for k in spec if k not in _META_KEYS]


def check_query_fields(queries: Sequence[Mapping[str, Any]], schema: MetadataSchema) -> None:
    """Refuse a query filter on an undeclared metadata field (``meta.<name>``): in filter context a term on a field no
    document has matches nothing, so a misspelt field would silently empty every search. A ``--filter``
    expression on one is refused the same way (:meth:`~es_rag.metadata.MetadataSchema.field`).

    Args:
        queries: The clauses (:func:`query_clause`).
        schema: The index's metadata fields.

    Raises:
        ConfigError: A ``meta.`` field the schema does not declare, named with the fields it does.
    """
    for query in queries:
        for name in query_fields(query):
            if name.startswith(f"{META}.") and name != META:
                schema.field(name.removesuffix(".keyword"), where=f"query filter {json.dumps(query)[:200]}")


def _bool(spec: Any, source: Mapping[str, Any], now_ms: int) -> bool:
    if not isinstance(spec, Mapping):
        raise ConfigError("query filter 'bool': needs an object")
    _only("bool", spec, {"must", "filter", "should", "must_not", "minimum_should_match", "boost", "_name"})

    def clauses(key: str) -> list[Mapping[str, Any]]:
        got = spec.get(key) or []
        return [query_clause(c) for c in (got if isinstance(got, list) else [got])]

    required = clauses("must") + clauses("filter")
    if not all(query_matches(c, source, now_ms=now_ms) for c in required):
        return False
    if any(query_matches(c, source, now_ms=now_ms) for c in clauses("must_not")):
        return False
    should = clauses("should")
    least = spec.get("minimum_should_match", 0 if required else 1 if should else 0)
    if not isinstance(least, int) or isinstance(least, bool):
        raise ConfigError("query filter 'bool': the embedded backend takes minimum_should_match as a whole number")
    return sum(query_matches(c, source, now_ms=now_ms) for c in should) >= least


def _only(where: str, spec: Any, allowed: set[str]) -> None:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"query filter {where!r}: needs an object")
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(
            f"query filter {where!r}: unknown parameter {unknown[0]!r}; valid: {', '.join(sorted(allowed))}"
        )


def _values(source: Mapping[str, Any], name: str) -> list[Any]:
    """The values a dotted field holds in a stored source (an object path; a list holds several)."""
    node: Any = source
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return []
        node = node[part]
    if node is None:
        return []
    items = node if isinstance(node, list) else [node]
    return [v for v in items if v is not None]


def _equal(stored: Any, value: Any) -> bool:
    if isinstance(stored, bool) or isinstance(value, bool):
        return str(stored).lower() == str(value).lower()
    if isinstance(stored, (int, float)):
        try:
            return float(stored) == float(value)
        except (TypeError, ValueError):
            return False
    return str(stored) == str(value)


def _in_range(stored: Any, bounds: Mapping[str, Any], now_ms: int) -> bool:
    if isinstance(stored, bool):
        return False
    if isinstance(stored, (int, float)):
        return in_range("float", stored, bounds, now_ms=now_ms)
    if _is_date(str(stored)) and all(_is_date_bound(str(b)) for b in bounds.values()):
        limits = {op: _bound_ms(str(b), op, now_ms) for op, b in bounds.items()}
        return within(parse_instant(str(stored)), limits)
    # a keyword field: code-point order, as Lucene compares its terms
    return within(str(stored), {op: str(b) for op, b in bounds.items()})


def _is_date(text: str) -> bool:
    try:
        parse_instant(text)
    except ValueError:
        return False
    return True


def _is_date_bound(text: str) -> bool:
    return text.startswith("now") or _is_date(text.split("||")[0])


_DATE_MATH = re.compile(r"^(?:now|(?P<anchor>.+?)\|\|)(?P<ops>(?:[+-]\d+[yMwdhHms])*)(?:/(?P<unit>[yMwdhHms]))?$")


def _bound_ms(expr: str, op: str, now_ms: int) -> int:
    """A range bound on a date field in epoch milliseconds, as ``DateFieldType.rangeQuery`` reads it: ``gt`` and
    ``lte`` round up (to the last millisecond of the rounded unit, or of what a partial date leaves out), ``gte`` and
    ``lt`` down; date math ``now-1y/d``, ``2024-05-01||+1M/M``.

    Args:
        expr: The bound.
        op: ``gt``, ``gte``, ``lt`` or ``lte``.
        now_ms: The request's ``now``.
    """
    m = _DATE_MATH.match(expr)
    if m is None:  # a date: the round-up parser fills what a partial date leaves out with its maximum
        return resolve_bound(render_bound(expr), op, now_ms=now_ms)
    anchor = m.group("anchor")
    moment = datetime.fromtimestamp((now_ms if anchor is None else parse_instant(anchor)) / 1000, tz=timezone.utc)
    for sign, n, unit in re.findall(r"([+-])(\d+)([yMwdhHms])", m.group("ops")):
        moment = _shift(moment, int(n) if sign == "+" else -int(n), unit)
    unit = m.group("unit")
    if unit is None:
        return int(moment.timestamp() * 1000)
    start = _floor(moment, unit)
    if op in ("gt", "lte"):
        return int(_shift(start, 1, unit).timestamp() * 1000) - 1
    return int(start.timestamp() * 1000)


def _shift(moment: datetime, n: int, unit: str) -> datetime:
    if unit in ("y", "M"):
        months = moment.month - 1 + n * (12 if unit == "y" else 1)
        year, month = moment.year + months // 12, months % 12 + 1
        day = min(moment.day, calendar.monthrange(year, month)[1])
        return moment.replace(year=year, month=month, day=day)
    seconds = {"w": 604_800, "d": 86_400, "h": 3_600, "H": 3_600, "m": 60, "s": 1}[unit]
    return moment + timedelta(seconds=n * seconds)


def _floor(moment: datetime, unit: str) -> datetime:
    if unit == "y":
        return moment.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if unit == "M":
        return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if unit == "w":  # ISO weeks: Monday
        day = moment - timedelta(days=moment.weekday())
        return day.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "d":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit in ("h", "H"):
        return moment.replace(minute=0, second=0, microsecond=0)
    if unit == "m":
        return moment.replace(second=0, microsecond=0)
    return moment.replace(microsecond=0)
