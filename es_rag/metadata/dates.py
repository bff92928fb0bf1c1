"""Dates in metadata values and filters, read as Elasticsearch reads them: a partial date (``2024``, ``2024-05``) is
its whole period, a bound is rounded as ``date`` range queries round it, and ``now`` is one instant per request."""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timezone

_PARTIAL_RE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")
_UNIT = {1: "y", 2: "M", 3: "d"}


def _partial(text: str) -> tuple[date, str] | None:
    """``(first day, unit)`` of ``2026``, ``2026-04`` or ``2026-04-30``; None for other forms."""
    m = _PARTIAL_RE.match(text.strip())
    if m is None:
        return None
    parts = [int(p) for p in m.groups() if p is not None]
    year, month, day = parts[0], parts[1] if len(parts) > 1 else 1, parts[2] if len(parts) > 2 else 1
    try:
        return date(year, month, day), _UNIT[len(parts)]
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a calendar date ({exc})") from None


def _datetime(text: str) -> datetime:
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO-8601 date: use 2026-04-30, 2026-04, 2026 or 2026-04-30T09:00:00Z"
        ) from None
    if moment.tzinfo is None:  # Elasticsearch reads a zone-less date-time as UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment


def canonical_date(text: str) -> str:
    """The stored form of a date value: ``YYYY-MM-DD`` for dates (a partial date is its first day), ISO-8601 with
    its zone for date-times.

    Args:
        text: The value as given.

    Raises:
        ValueError: Not an ISO-8601 date.
    """
    partial = _partial(text)
    if partial is not None:
        return partial[0].isoformat()
    return _datetime(text).isoformat()


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def parse_instant(text: str) -> int:
    """Milliseconds since the epoch (UTC) of a stored date value, as Elasticsearch indexes it.

    Args:
        text: A date or date-time.
    """
    partial = _partial(text)
    if partial is not None:
        day = partial[0]
        return _ms(datetime(day.year, day.month, day.day, tzinfo=timezone.utc))
    return _ms(_datetime(text))


def _period_end(start: date, unit: str) -> date:
    if unit == "y":
        return date(start.year, 12, 31)
    if unit == "M":
        return date(start.year, start.month, calendar.monthrange(start.year, start.month)[1])
    return start


def resolve_bound(expr: str, op: str, *, now_ms: int) -> int:
    """The millisecond a rendered range bound means, with Elasticsearch's rounding (``DateFieldType.rangeQuery``:
    ``parseToLong(lower, roundUp = !includeLower)``, ``parseToLong(upper, roundUp = includeUpper)``): rounding
    up goes to the last millisecond of the period, down to its first.

    Args:
        expr: ``now/d``, ``<YYYY-MM-DD>||/<y|M|d>`` or an ISO date-time (the forms :func:`render_bound` writes).
        op: ``gt``, ``gte``, ``lt`` or ``lte``.
        now_ms: The request's ``now``.
    """
    round_up = op in ("gt", "lte")
    if expr == "now/d":
        day = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).date()
        start, unit = day, "d"
    elif "||/" in expr:
        anchor, unit = expr.split("||/")
        partial = _partial(anchor)
        if partial is None or unit not in ("y", "M", "d"):
            raise ValueError(f"unsupported date math {expr!r}")
        start = partial[0]
    else:
        return _ms(_datetime(expr))
    if round_up:
        end = _period_end(start, unit)
        return _ms(datetime(end.year, end.month, end.day, tzinfo=timezone.utc)) + 86_400_000 - 1
    return _ms(datetime(start.year, start.month, start.day, tzinfo=timezone.utc))


def render_bound(text: str) -> str:
    """A user's date bound in Elasticsearch date math that keeps its granularity: ``2023`` ->
    ``2023-01-01||/y``, ``2026-04`` -> ``2026-04-01||/M``, ``2026-04-30`` -> ``2026-04-30||/d``; a date-time
    stays as it is (canonical ISO form).

    Args:
        text: The bound as the user wrote it.

    Raises:
        ValueError: Not an ISO-8601 date.
    """
    partial = _partial(text)
    if partial is not None:
        return f"{partial[0].isoformat()}||/{partial[1]}"
    return _datetime(text).isoformat()


# --------------------------------------------------------------------------------------------------- filters
