"""Settings files: a TOML file of settings by their flat names, read by ``--settings FILE`` on every command and by
:meth:`es_rag.settings.Settings.from_file`, and written by ``es-rag tune``.

Layout: one table per stage (the settings group: ``[index]``, ``[retrieve]``, ``[fusion]``, ``[select]``, ...)
holding that stage's settings by their flat names -- the keywords of ``Settings(...)`` and, with ``-`` for
``_``, the command-line flags::

    [index]
    analyzer = "english"
    bm25_k1 = 0.9

    [retrieve]
    bm25_fields = ["title^2", "text"]

    [fusion]
    rank_constant = 40
    channel_weights = { bm25 = 1.5, dense = 1.0 }

A flat name may also stand at the top level, outside any table (the table only groups). Values have the
setting's type: a string for a choice (``analyzer``), an integer or a float, an array of strings (or one comma
string) for ``bm25_fields`` and ``metadata_fields``, an inline table of numbers for ``channel_weights`` and
``source_tiers``; ``"off"`` (or ``"none"``) for a setting that can be unset. Every error names the file, the
table and the key, and what is valid.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from es_rag.errors import ConfigError
from es_rag.settings.base import Group
from es_rag.settings.enums import Choice
from es_rag.settings.groups import GROUPS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_BY_GROUP: dict[str, type[Group]] = {g.NAME: g for g in GROUPS}
_FIELDS: dict[str, tuple[type[Group], dataclasses.Field[Any]]] = {
    fld.metadata.get("flat") or fld.name: (group, fld) for group in GROUPS for fld in dataclasses.fields(group)
}
_OFF = ("off", "none")


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


def _convert(flat: str, value: Any) -> Any:
    """``value`` as read from TOML -> the Python value ``Settings`` takes for ``flat`` (type checks only; the group
    checks ranges and choices)."""
    group, fld = _FIELDS[flat]
    tp, optional = _unwrap_optional(typing.get_type_hints(group)[fld.name])
    if optional and isinstance(value, str) and value.strip().lower() in _OFF:
        return None
    wanted: str
    if isinstance(tp, type) and issubclass(tp, Choice):
        if isinstance(value, str):
            return value
        wanted = f"a string, one of {', '.join(tp.values())}"
    elif tp is bool:
        if isinstance(value, bool):
            return value
        wanted = "true or false"
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        wanted = "an integer"
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        wanted = "a number"
    elif tp is str:
        if isinstance(value, str):
            return value
        wanted = "a string"
    elif typing.get_origin(tp) is tuple:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        wanted = 'an array of strings (e.g. ["title^2", "text"])'
    elif typing.get_origin(tp) is dict:
        if isinstance(value, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()
        ):
            return {str(k): float(v) for k, v in value.items()}
        wanted = "a table of numbers (e.g. { bm25 = 1.0, dense = 2.0 })"
    else:  # pragma: no cover - a new field type must be taught here
        raise ConfigError(f"{flat}: settings files cannot set a {tp}")
    if optional:
        wanted += ' or "off"'
    raise ConfigError(f"{flat}: expected {wanted}, got {value!r} ({_type_name(value)})")


def parse_settings(data: Mapping[str, Any], *, where: str = "settings") -> dict[str, Any]:
    """Validated settings by flat name from a parsed settings file (see the module's layout).

    Every group's values are checked by the group itself (ranges, choices); rules between groups are left to
    :class:`~es_rag.settings.Settings`, since the command line may complete them.

    Args:
        data: The parsed TOML document.
        where: Names the file in every error.

    Raises:
        ConfigError: An unknown table or key, a key in another stage's table, a value of the wrong type, or a
            value the group refuses.
    """
    from es_rag.settings import unknown_setting

    values: dict[str, Any] = {}
    origin: dict[str, str] = {}

    def take(table: str | None, key: str, raw: Any) -> None:
        at = f"{where}: " + (f"[{table}] " if table else "")
        if key not in _FIELDS:
            group_keys = [f for f, (g, _) in _FIELDS.items() if table is None or g.NAME == table]
            raise ConfigError(at + str(unknown_setting(key, group_keys or list(_FIELDS))))
        home = _FIELDS[key][0].NAME
        if table is not None and home != table:
            raise ConfigError(f"{at}{key}: belongs to the [{home}] table, not [{table}]")
        if key in values:
            raise ConfigError(f"{at}{key}: given twice ({origin[key]} and here)")
        try:
            values[key] = _convert(key, raw)
        except ConfigError as exc:
            raise ConfigError(f"{at}{exc}") from None
        origin[key] = f"[{table}]" if table else "top level"

    for name, raw in data.items():
        if isinstance(raw, dict) and name not in _FIELDS:
            if name not in _BY_GROUP:
                raise ConfigError(f"{where}: unknown table [{name}]; valid tables: {', '.join(_BY_GROUP)}")
            for key, value in raw.items():
                take(name, key, value)
        else:
            take(None, name, raw)
    for group in GROUPS:
        own = {
            fld.name: values[flat]
            for fld in dataclasses.fields(group)
            if (flat := fld.metadata.get("flat") or fld.name) in values
        }
        if not own:
            continue
        try:
            group(**own)
        except ConfigError as exc:
            raise ConfigError(f"{where}: [{group.NAME}] {exc}") from None
    return values


def read_settings_file(path: str | Path) -> dict[str, Any]:
    """The settings of a TOML settings file, by flat name, validated (:func:`parse_settings`).

    Args:
        path: The file.

    Raises:
        ConfigError: The file is missing, is not TOML, or holds an invalid setting (the error names the file).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"settings file {file}: no such file") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise ConfigError(f"settings file {file}: cannot read it ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"settings file {file}: not valid TOML: {exc}") from None
    return parse_settings(data, where=str(file))


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_value(value: Any) -> str:
    if value is None:
        return '"off"'
    if isinstance(value, Choice):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{k if _BARE_KEY.match(k) else json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise ConfigError(f"settings file: cannot write a {type(value).__name__} ({value!r})")


def dump_settings(values: Mapping[str, Any], *, header: Sequence[str] = ()) -> str:
    """A settings file of ``values`` (flat name -> value): ``header`` lines as ``#`` comments, then one table per
    stage in pipeline order; :func:`read_settings_file` reads it back to the same values.

    Args:
        values: Settings by flat name.
        header: Comment lines (provenance: what tuned it, on which data, when).

    Raises:
        ConfigError: An unknown flat name.
    """
    from es_rag.settings import unknown_setting

    for key in values:
        if key not in _FIELDS:
            raise unknown_setting(key, list(_FIELDS))
    lines = [f"# {line}".rstrip() for text in header for line in text.splitlines()]
    for group in GROUPS:
        keys = [f for f in (fld.metadata.get("flat") or fld.name for fld in dataclasses.fields(group)) if f in values]
        if not keys:
            continue
        if lines:
            lines.append("")
        lines.append(f"[{group.NAME}]")
        lines.extend(f"{key} = {_toml_value(values[key])}" for key in keys)
    return "\n".join(lines) + "\n"
