"""Dates as a ``date`` field parses them by default: ``strict_date_optional_time||epoch_millis``.

``DateFormatters.STRICT_DATE_OPTIONAL_TIME``: a four-digit year, then optionally ``-MM``, ``-dd``, and after the
date a ``T`` with ``HH``, optional ``:mm``, ``:ss`` and a fraction of 1-9 digits, then an optional zone (``Z`` or
``+HH``, ``+HHmm``, ``+HH:mm``). So ``2026-04`` and ``2026`` parse, while a space instead of ``T``
(``2026-04-30 09:00:00``) and ISO week dates (``2026-W18-4``) do not, though Python's ``datetime.fromisoformat``
takes both. ``epoch_millis``: an integer, or a number string. Missing parts default to the start of the period, in
UTC unless a zone is given.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

_STRICT = re.compile(
    r"^(?P<y>\d{4})(?:-(?P<mo>\d{2})(?:-(?P<d>\d{2})"
    r"(?:T(?P<h>\d{2})(?::(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d{1,9}))?)?)?"
    r"(?P<z>Z|[+-]\d{2}(?::?\d{2})?)?)?)?)?$"
)
_EPOCH = re.compile(r"^-?\d+(?:\.\d+)?$")


def parse_date(value: Any) -> datetime | None:
    """The instant ``value`` denotes in the default date format, or None where Elasticsearch refuses it.

    Args:
        value: A JSON value of a ``date`` field.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(0, tz=timezone.utc) + timedelta(milliseconds=float(value))
    if not isinstance(value, str):
        return None
    m = _STRICT.match(value)
    if m is None:
        if _EPOCH.match(value):
            return datetime.fromtimestamp(0, tz=timezone.utc) + timedelta(milliseconds=float(value))
        return None
    zone = timezone.utc
    z = m["z"]
    if z and z != "Z":
        digits = z[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
        if hours > 18 or minutes > 59:
            return None
        sign = -1 if z[0] == "-" else 1
        zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
    fraction = (m["f"] or "").ljust(6, "0")[:6]
    try:
        return datetime(
            int(m["y"]),
            int(m["mo"] or 1),
            int(m["d"] or 1),
            int(m["h"] or 0),
            int(m["mi"] or 0),
            int(m["s"] or 0),
            int(fraction or 0),
            tzinfo=zone,
        )
    except ValueError:  # month 13, February 30, hour 24, ...
        return None


def date_millis(value: Any) -> int:
    """Milliseconds since the epoch of a ``date`` value (UTC).

    Args:
        value: A JSON value of a ``date`` field.

    Raises:
        ValueError: Elasticsearch would refuse it.
    """
    moment = parse_date(value)
    if moment is None:
        raise ValueError(f"failed to parse date field [{value}] with format [strict_date_optional_time||epoch_millis]")
    return round(moment.timestamp() * 1000)
