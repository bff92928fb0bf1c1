"""The declared metadata of a source: typed fields kept under ``meta`` in every chunk and parent document, and the
filters and validity predicate that read them (seed 000 "metadata filters: type, section, date, tags"; seed 002
§11, §26 "an expired version is filtered, not demoted").

**Schema.** :data:`BUILTIN_FIELDS` plus the fields an index declares with ``--metadata-fields name:type`` (settings
``index.metadata_fields``, fixed when the index is created, like the analyzer). The index template maps exactly
these fields (``meta`` is ``dynamic: strict``), the embedded backend stores exactly them, and a value of another
field or of the wrong type is refused at ingest with the document and the field named.

**Values.** ``keyword``: a string or a list of strings. ``date``: an ISO-8601 date (``2026-04-30``), year-month
(``2026-04``), year (``2026``) or date-time with a zone (``2026-04-30T09:00:00Z``); partial dates are stored as the
first day of the period. ``integer``/``float``/``boolean`` as JSON gives them. ``valid_from``, ``valid_to``
and ``url`` hold one value.

**Filters** (:func:`parse_filter`): ``field=value[,value...]`` (any of), ``field!=value[,...]`` (none of), and
``field>=X``, ``field>X``, ``field<=X``, ``field<X`` on date and number fields. A date bound keeps its
granularity the way Elasticsearch's date math does (``DateFieldMapper.DateFieldType.rangeQuery``: the lower bound
is rounded up when exclusive, the upper bound rounded up when inclusive): ``published>=2023`` means from
2023-01-01, ``effective<=2026-04`` through the last millisecond of April 2026, ``published=2026-04`` the whole
month. The rendered clause says the same in date math (``"2026-04-01||/M"``), so a body pasted into Kibana means
what the embedded backend computes.

**Validity** (:class:`Validity`): a document with ``valid_from`` after the query's date, or ``valid_to`` before
it, is not served; a document without them always is. Day granularity, both ends inclusive: a policy with
``valid_to: 2026-02-28`` is served on 2026-02-28 and hidden from 2026-03-01. The clause is rendered with
``now/d`` (Elasticsearch evaluates it per request, in UTC) or a fixed ``--as-of`` date.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from es_rag.errors import ConfigError, InputError
from es_rag.metadata.dates import _ms, _partial, render_bound
from es_rag.metadata.dates import canonical_date as canonical_date  # re-exported
from es_rag.metadata.dates import parse_instant as parse_instant  # re-exported
from es_rag.metadata.dates import resolve_bound as resolve_bound  # re-exported

META = "meta"
"""The object field every declared metadata value lives under (``meta.doc_type``, ``meta.published``, ...)."""

METADATA_SCHEMA_VERSION = "meta-1"
"""Version of :data:`BUILTIN_FIELDS` and of the value rules; recorded in the templates' ``_meta``."""

TYPES = ("keyword", "date", "integer", "float", "boolean")
RANGE_TYPES = frozenset({"date", "integer", "float"})
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class MetaField:
    """One declared metadata field.

    Args:
        name: Field name under ``meta``.
        type: One of :data:`TYPES`.
        single: Holds at most one value (a list is refused).
        help: What it means (docs and errors).
    """

    name: str
    type: str
    single: bool = False
    help: str = ""

    def es_mapping(self) -> dict[str, Any]:
        """The field's Elasticsearch mapping (``float`` is mapped as ``double``, the precision Python compares)."""
        return {"type": "double" if self.type == "float" else self.type}


BUILTIN_FIELDS: tuple[MetaField, ...] = (
    MetaField("doc_type", "keyword", help="document type: policy, faq, runbook, ..."),
    MetaField("tags", "keyword", help="free tags, e.g. eu-regulation"),
    MetaField("region", "keyword", help="region or market the document applies to"),
    MetaField("language", "keyword", help="ISO 639-1 language of the document"),
    MetaField("author", "keyword", help="author or owning team"),
    MetaField("url", "keyword", single=True, help="where a reader finds the source; cited in the context"),
    MetaField("published", "date", single=True, help="publication date"),
    MetaField("updated", "date", single=True, help="last substantive update; freshness reads it first"),
    MetaField("valid_from", "date", single=True, help="first day the content applies (hard filter)"),
    MetaField("valid_to", "date", single=True, help="last day the content applies (hard filter)"),
    MetaField("supersedes", "keyword", help="source ids this source replaces; they are never served"),
)
ALIASES = {"type": "doc_type", "tag": "tags", "effective": "valid_from", "expires": "valid_to", "date": "published"}
"""Other names accepted for built-in fields, in documents and in filters."""


@dataclass(frozen=True)
class MetadataSchema:
    """The metadata fields of one index: :data:`BUILTIN_FIELDS` plus declared ones."""

    fields: tuple[MetaField, ...] = BUILTIN_FIELDS

    @classmethod
    def declare(cls, specs: Iterable[str]) -> MetadataSchema:
        """The built-in fields plus ``name:type`` declarations (``--metadata-fields``).

        Args:
            specs: ``name:type`` strings; type one of :data:`TYPES`.
        """
        fields = list(BUILTIN_FIELDS)
        for spec in specs:
            name, sep, kind = str(spec).partition(":")
            name, kind = name.strip(), kind.strip().lower()
            if not sep or not _NAME_RE.match(name) or kind not in TYPES:
                raise ConfigError(
                    f"metadata_fields: {spec!r} is not name:type (name: lowercase letters, digits, '_', starting "
                    f"with a letter; type: {', '.join(TYPES)})"
                )
            if name in ALIASES or any(f.name == name for f in fields):
                raise ConfigError(f"metadata_fields: {name!r} is a built-in field or alias; it is already declared")
            fields.append(MetaField(name, kind, help="declared with --metadata-fields"))
        return cls(tuple(fields))

    def get(self, name: str) -> MetaField | None:
        """The field called ``name`` (an alias resolves to its field), else None.

        Args:
            name: Field name or alias, with or without the ``meta.`` prefix.
        """
        name = name.removeprefix(META + ".")
        name = ALIASES.get(name, name)
        return next((f for f in self.fields if f.name == name), None)

    def field(self, name: str, *, where: str) -> MetaField:
        """Like :meth:`get`, raising an error that lists the known fields.

        Args:
            name: Field name or alias.
            where: What is being read (a filter, a document), for the message.
        """
        found = self.get(name)
        if found is None:
            known = ", ".join(f.name for f in self.fields)
            raise ConfigError(
                f"{where}: unknown metadata field {name!r}; known: {known} (declare others with "
                "--metadata-fields name:type when the index is created)"
            )
        return found

    def es_properties(self) -> dict[str, Any]:
        """The ``meta`` object mapping (strict: an undeclared field is refused, as by the embedded backend)."""
        return {
            "type": "object",
            "dynamic": "strict",
            "properties": {f.name: f.es_mapping() for f in self.fields},
        }

    def normalise(self, raw: Mapping[str, Any], *, document: str) -> dict[str, Any]:
        """Validated, canonical metadata of one document: known fields only, values of the field's type, dates in
        ISO form, lists for multi-valued keyword fields, empty values dropped.

        Args:
            raw: Field (or alias) -> value.
            document: The document's name, for errors.

        Raises:
            InputError: An unknown field or a value of the wrong type, naming the document and ``meta.<field>``.
        """
        out: dict[str, Any] = {}
        for key, value in raw.items():
            fld = self.get(str(key))
            if fld is None:
                known = ", ".join(f.name for f in self.fields)
                raise InputError(
                    document,
                    f"{META}.{key}",
                    f"unknown metadata field; known: {known} (declare others with --metadata-fields name:type)",
                )
            if fld.name in out:
                raise InputError(document, f"{META}.{fld.name}", f"given twice ({key!r} is another name for it)")
            value = _normalise_value(fld, value, document)
            if value is not None:
                out[fld.name] = value
        start, end = out.get("valid_from"), out.get("valid_to")
        if start is not None and end is not None and parse_instant(end) < parse_instant(start):
            raise InputError(document, f"{META}.valid_to", f"{end} is before valid_from {start}")
        return out


def _normalise_value(fld: MetaField, value: Any, document: str) -> Any:
    name = f"{META}.{fld.name}"
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    values = [v for v in values if v is not None and not (isinstance(v, str) and not v.strip())]
    if not values:
        return None
    if fld.single and len(values) > 1:
        raise InputError(document, name, f"holds one value, got {len(values)}")
    out: list[Any] = []
    for v in values:
        if fld.type == "keyword":
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise InputError(document, name, f"expected a string, got {type(v).__name__}")
            out.append(str(v).strip())
        elif fld.type == "date":
            if isinstance(v, datetime):
                v = v.isoformat()
            elif isinstance(v, date):  # YAML front matter parses 2026-04-30 as a date
                v = v.isoformat()
            if not isinstance(v, str):
                raise InputError(document, name, f"expected an ISO date like 2026-04-30, got {v!r}")
            try:
                out.append(canonical_date(v))
            except ValueError as exc:
                raise InputError(document, name, str(exc)) from None
        elif fld.type == "boolean":
            if not isinstance(v, bool):
                raise InputError(document, name, f"expected true or false, got {v!r}")
            out.append(v)
        else:
            number = _number(v, fld.type)
            if number is None:
                raise InputError(document, name, f"expected {'an integer' if fld.type == 'integer' else 'a number'}")
            out.append(number)
    if fld.single or fld.type not in ("keyword",):
        return out[0] if len(out) == 1 else out
    return out


def _number(value: Any, kind: str) -> int | float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value) if kind == "float" else int(str(value).strip())
    except (TypeError, ValueError):
        return None
    if kind == "float" and not math.isfinite(number):
        return None
    return number


# ----------------------------------------------------------------------------------------------------- dates

_OPS = {">=": "gte", "<=": "lte", "!=": "ne", ">": "gt", "<": "lt", "==": "eq", "=": "eq"}
# ``==`` is ``=`` (a Python or SQL habit): before it, ``doc_type==policy`` filtered on the value "=policy" (issue 31)
_FILTER_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|!=|==|>|<|=)\s*(.*?)\s*$", re.DOTALL)


@dataclass(frozen=True)
class Condition:
    """One metadata condition of a search.

    Args:
        field: Field name under ``meta``.
        type: Its declared type.
        op: ``eq`` / ``ne`` (``values``) or ``gt`` / ``gte`` / ``lt`` / ``lte`` (``bound``).
        values: Allowed (``eq``) or excluded (``ne``) values, canonical.
        bounds: ``op -> rendered bound`` of a range (one or two entries).
    """

    field: str
    type: str
    op: str
    values: tuple[Any, ...] = ()
    bounds: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def path(self) -> str:
        """The stored field path, ``meta.<field>``."""
        return f"{META}.{self.field}"

    def describe(self) -> str:
        """The condition as a user would write it."""
        if self.op in ("eq", "ne"):
            sign = "=" if self.op == "eq" else "!="
            return f"{self.field}{sign}{','.join(str(v) for v in self.values)}"
        signs = {v: k for k, v in _OPS.items()}
        return " and ".join(f"{self.field}{signs[o]}{b}" for o, b in self.bounds.items())

    def to_es(self) -> dict[str, Any]:
        """The filter clause."""
        if self.op == "eq":
            if self.bounds:  # a date equality: the whole period
                return {"range": {self.path: dict(self.bounds)}}
            return {"terms": {self.path: list(self.values)}}
        if self.op == "ne":
            return {"bool": {"must_not": [{"terms": {self.path: list(self.values)}}]}}
        return {"range": {self.path: dict(self.bounds)}}

    def matches(self, source: Mapping[str, Any], *, now_ms: int) -> bool:
        """The same predicate on a stored document (a multi-valued field matches when one value does, as a Lucene
        query on the field's terms or points does; a missing field matches ``ne`` only).

        Args:
            source: The stored document.
            now_ms: The request's ``now``.
        """
        stored = stored_values(source, self.field)
        if self.op in ("eq", "ne") and not self.bounds:
            wanted = {term_key(self.type, v) for v in self.values}
            hit = any(term_key(self.type, v) in wanted for v in stored)
            return hit if self.op == "eq" else not hit
        return any(in_range(self.type, v, self.bounds, now_ms=now_ms) for v in stored)


def term_key(kind: str, value: Any) -> str:
    """The indexed term of a value, as a term query compares it: a keyword's string (a number stored in a
    keyword field is indexed as its text), a number's float value, a boolean's ``true``/``false``.

    Args:
        kind: The field's type.
        value: A stored or queried value.
    """
    if kind == "boolean":
        return "true" if value is True or str(value).lower() == "true" else "false"
    if kind in ("integer", "float"):
        try:
            return repr(float(value))
        except (TypeError, ValueError):
            return f"<{value!r}>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def stored_values(source: Mapping[str, Any], name: str) -> list[Any]:
    """The values of ``meta.<name>`` in a stored document (none when missing).

    Args:
        source: The stored document.
        name: Field name under ``meta``.
    """
    meta = source.get(META)
    if not isinstance(meta, Mapping):
        return []
    value = meta.get(name)
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def in_range(kind: str, value: Any, bounds: Mapping[str, Any], *, now_ms: int) -> bool:
    """Whether one stored value satisfies every bound.

    Args:
        kind: The field's type.
        value: The stored value.
        bounds: ``op -> bound``.
        now_ms: The request's ``now``.
    """
    point: float
    limits: dict[str, float]
    if kind == "date":
        try:
            point = float(parse_instant(str(value)))
        except ValueError:
            return False
        limits = {op: float(resolve_bound(str(b), op, now_ms=now_ms)) for op, b in bounds.items()}
    else:
        try:
            point = float(value)
        except (TypeError, ValueError):
            return False
        limits = {op: float(b) for op, b in bounds.items()}
    return within(point, limits)


def within(point: Any, limits: Mapping[str, Any]) -> bool:
    """Whether ``point`` satisfies every ``op -> limit`` (``gt``, ``gte``, ``lt``, ``lte``), compared as they are
    (numbers, epoch milliseconds, or strings in code-point order).

    Args:
        point: The value.
        limits: ``op -> limit`` of the same type.
    """
    for op, limit in limits.items():
        if (
            (op == "gt" and not point > limit)
            or (op == "gte" and not point >= limit)
            or (op == "lt" and not point < limit)
            or (op == "lte" and not point <= limit)
        ):
            return False
    return True


def parse_filter(expr: str, schema: MetadataSchema) -> Condition:
    """A ``--filter`` expression as a :class:`Condition`.

    Args:
        expr: ``field=v1,v2`` (or ``==``), ``field!=v``, ``field>=X``, ``field>X``, ``field<=X``, ``field<X``.
        schema: The index's metadata fields.

    Raises:
        ConfigError: Unknown field, operator or value; a range on a keyword or boolean field.
    """
    m = _FILTER_RE.match(expr)
    if m is None or not m.group(3):
        raise ConfigError(
            f"--filter {expr!r}: expected FIELD=VALUE[,VALUE...], FIELD!=VALUE, or FIELD>=X / >X / <=X / <X on a "
            "date or number field, e.g. doc_type=policy or published>=2023"
        )
    name, sign, raw = m.groups()
    fld = schema.field(name, where=f"--filter {expr!r}")
    op = _OPS[sign]
    where = f"--filter {expr!r}"
    if op in ("eq", "ne"):
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        if not parts:
            raise ConfigError(f"{where}: needs at least one value")
        if fld.type == "date":
            if op == "ne" or len(parts) > 1:
                raise ConfigError(f"{where}: a date field takes one value with '=' (or use >=, <=)")
            bound = _date_bound(parts[0], where)
            return Condition(fld.name, fld.type, "eq", bounds={"gte": bound, "lte": bound})
        return Condition(fld.name, fld.type, op, values=tuple(_filter_value(fld, p, where) for p in parts))
    if fld.type not in RANGE_TYPES:
        raise ConfigError(f"{where}: {sign} needs a date or number field; {fld.name} is {fld.type}")
    bound = _date_bound(raw, where) if fld.type == "date" else _filter_value(fld, raw, where)
    return Condition(fld.name, fld.type, op, bounds={op: bound})


def _date_bound(text: str, where: str) -> str:
    try:
        return render_bound(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _filter_value(fld: MetaField, text: str, where: str) -> Any:
    if fld.type == "keyword":
        return text
    if fld.type == "boolean":
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{where}: {fld.name} is boolean: use true or false")
        return text.lower() == "true"
    number = _number(text, fld.type)
    if number is None:
        raise ConfigError(f"{where}: {fld.name} is {fld.type}: {text!r} is not a number")
    return number


def parse_filters(exprs: Sequence[str], schema: MetadataSchema) -> tuple[Condition, ...]:
    """Every ``--filter`` expression of a command (all apply: AND).

    Args:
        exprs: The expressions.
        schema: The index's metadata fields.
    """
    return tuple(parse_filter(e, schema) for e in exprs)


# -------------------------------------------------------------------------------------------------- validity


@dataclass(frozen=True)
class Validity:
    """The validity predicate at one date (``as_of``: ``now`` = the request's day in UTC, else ``YYYY-MM-DD``).

    Args:
        as_of: ``"now"`` or an ISO date.
    """

    as_of: str = "now"

    def __post_init__(self) -> None:
        if self.as_of != "now":
            partial = _partial(str(self.as_of))
            if partial is None or partial[1] != "d":
                raise ConfigError(f"as_of: {self.as_of!r} is not a date like 2026-04-30 (or 'now')")
            object.__setattr__(self, "as_of", partial[0].isoformat())

    @property
    def anchor(self) -> str:
        """The date math of the query's day: ``now/d`` or ``YYYY-MM-DD||/d``."""
        return "now/d" if self.as_of == "now" else f"{self.as_of}||/d"

    def to_es(self) -> dict[str, Any]:
        """Not yet valid (``valid_from`` after the day) or expired (``valid_to`` before the day) is excluded."""
        return {
            "bool": {
                "must_not": [
                    {"range": {f"{META}.valid_from": {"gt": self.anchor}}},
                    {"range": {f"{META}.valid_to": {"lt": self.anchor}}},
                ]
            }
        }

    def matches(self, source: Mapping[str, Any], *, now_ms: int) -> bool:
        """The same predicate on a stored document.

        Args:
            source: The stored document.
            now_ms: The request's ``now``.
        """
        starts = stored_values(source, "valid_from")
        ends = stored_values(source, "valid_to")
        if any(in_range("date", v, {"gt": self.anchor}, now_ms=now_ms) for v in starts):
            return False
        return not any(in_range("date", v, {"lt": self.anchor}, now_ms=now_ms) for v in ends)


def now_ms() -> int:
    """The current time in epoch milliseconds (what Elasticsearch's ``now`` is for one request)."""
    return _ms(datetime.now(tz=timezone.utc))
