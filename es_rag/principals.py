"""One rule for tenant ids and ACL group names, on every path (CLI, API, JSONL lines, golden files).

Elasticsearch matches both exactly: they are ``keyword`` fields, and the filter of every retriever is a ``term`` /
``terms`` query on them. A name with whitespace around it (``" finance"``) is therefore another group, and a search
under it would see nothing, or another tenant's documents if one were named so. Rather than strip on some paths and
not on others, es_rag refuses such a name with an error that names the field and shows the name stripped.
"""

from __future__ import annotations

from collections.abc import Iterable

from es_rag.errors import ConfigError


def name_problem(value: object) -> str | None:
    """Why ``value`` cannot be a tenant id or a group name, in words; None when it can.

    Args:
        value: The name as given.
    """
    if not isinstance(value, str):
        return f"must be a string, got {value!r} ({type(value).__name__})"
    if not value.strip():
        return f"missing or empty ({value!r})"
    if value != value.strip():
        return (
            f"{value!r} has whitespace around it, and names match exactly (keyword fields): "
            f"write {value.strip()!r} if that is the name"
        )
    return None


def check_name(value: object, field: str) -> str:
    """``value`` when it is a valid tenant id or group name, else a :class:`~es_rag.errors.ConfigError` naming
    ``field``.

    Args:
        value: The name as given.
        field: What it is, for the message (``tenant``, ``acl``).
    """
    problem = name_problem(value)
    if problem is not None:
        raise ConfigError(f"{field}: {problem}")
    return value  # type: ignore[return-value]  # name_problem is None only for a str


def check_names(values: Iterable[object], field: str) -> tuple[str, ...]:
    """Each of ``values`` checked by :func:`check_name`, in order, without repeats.

    Args:
        values: The names as given.
        field: What they are, for the message.
    """
    return tuple(dict.fromkeys(check_name(v, field) for v in values))
