"""Command-line options generated from the settings groups' field metadata.

A flag is the setting's flat name with ``-`` for ``_`` (``--rerank-k`` sets ``rerank_k``); its help and
default come from :mod:`es_rag.settings.groups`. A command names the settings it reads (:data:`Scope`):
``--help`` shows the common ones (:mod:`es_rag.cli.brief_help`), ``--help-all`` all of them, one section per stage, and
the parser accepts nothing else.

Settings flags default to "not given" (argparse ``SUPPRESS``), so :func:`settings_from_args` can apply,
in order: the defaults, the command's own defaults (``setup`` keeps ``analyzer=auto``), the settings file
(``--settings FILE``), presets given on the command line (``--mmr-preset``, ``--bm25-protocol``; ``eval``'s
defaults to ``settings``, es_rag's own defaults), then every flag given -- the command line always wins over the
file, and explicit flags over presets.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from es_rag.cli.brief_help import hold_back
from es_rag.cli.flags import (  # re-exported: the commands import them from here
    DEFAULT_INDEX_DIR as DEFAULT_INDEX_DIR,
)
from es_rag.cli.flags import (
    acl_groups as acl_groups,
)
from es_rag.cli.flags import (
    add_chunker as add_chunker,
)
from es_rag.cli.flags import (
    add_filters as add_filters,
)
from es_rag.cli.flags import (
    add_json as add_json,
)
from es_rag.cli.flags import (
    add_owner as add_owner,
)
from es_rag.cli.flags import (
    add_principal as add_principal,
)
from es_rag.cli.flags import (
    add_sources as add_sources,
)
from es_rag.cli.flags import (
    add_target as add_target,
)
from es_rag.cli.flags import (
    comma_list as comma_list,
)
from es_rag.cli.flags import (
    connect as connect,
)
from es_rag.cli.flags import (
    connection_kwargs as connection_kwargs,
)
from es_rag.cli.flags import (
    existing_index_dir as existing_index_dir,
)
from es_rag.cli.flags import (
    group_list as group_list,
)
from es_rag.cli.flags import (
    index_dir_path as index_dir_path,
)
from es_rag.cli.flags import (
    meta_values as meta_values,
)
from es_rag.cli.flags import (
    owner_acl as owner_acl,
)
from es_rag.cli.flags import (
    reading_backend as reading_backend,
)
from es_rag.cli.flags import (
    search_filter as search_filter,
)
from es_rag.cli.flags import (
    source_kwargs as source_kwargs,
)
from es_rag.cli.flags import (
    uses_cluster as uses_cluster,
)
from es_rag.errors import ConfigError
from es_rag.settings import AUTO_MODEL, FLAT, GROUPS, Choice, Group, Settings

Scope = Mapping[str, Sequence[str] | None]
"""Settings a command reads: group name -> field names (None = every field of the group)."""

SEARCH_INDEX = (
    "prefix",
    "generation",
    "analyzer",
    "language",
    "languages",
    "bm25_k1",
    "bm25_b",
    "similarity",
    "metadata_fields",
)
"""The ``index`` settings a reader needs (prefix on a cluster; analysis and BM25 on the embedded index)."""
QUERY_ENCODER = ("model", "dims", "inference_id", "vector_mode", "device", "precision", "query_runtime", "fit_check")
"""The ``encoder`` settings a query needs."""
POST_RETRIEVAL = ("dedup", "rerank", "escalate", "gate", "boost", "select", "expand", "pack")

SEARCH_SCOPE: Scope = {
    "index": SEARCH_INDEX,
    "encoder": QUERY_ENCODER,
    "retrieve": None,
    "fusion": None,
    **{g: None for g in POST_RETRIEVAL},
    "connection": ("request_timeout",),
}
"""What ``search`` reads: everything from the query to the packed context."""

_GROUPS: dict[str, type[Group]] = {g.NAME: g for g in GROUPS}


_HINTS: dict[type[Group], dict[str, Any]] = {}


def _hints(cls: type[Group]) -> dict[str, Any]:
    # once per settings group and process: get_type_hints evaluates every annotation string again on each call, and
    # building the parser called it 469 times (90% of build_parser, about 0.14 s of each CLI start, profiled)
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(tp, False)``."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def off_or(kind: type) -> Callable[[str], Any]:
    """argparse type: ``off``/``none`` -> None, else ``kind(value)``.

    Args:
        kind: ``int`` or ``float``.
    """

    def parse(value: str) -> Any:
        if value.strip().lower() in ("off", "none"):
            return None
        try:
            return kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__} or 'off', got {value!r}") from None

    parse.__name__ = f"{kind.__name__}-or-off"
    return parse


def key_floats(value: str) -> dict[str, float]:
    """argparse type: ``a=1,b=2.5`` -> ``{"a": 1.0, "b": 2.5}``.

    Args:
        value: The option's text.
    """
    out: dict[str, float] = {}
    for part in (x.strip() for x in value.split(",")):
        if not part:
            continue
        key, sep, number = part.rpartition("=")
        try:
            if not sep or not key:
                raise ValueError
            out[key.strip()] = float(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected NAME=NUMBER[,NAME=NUMBER...], got {part!r}") from None
    return out


def shown_default(value: Any) -> str:
    """A default as ``--help`` shows it.

    Args:
        value: The setting's value.
    """
    if value is None:
        return "off"
    if isinstance(value, Choice):
        return str(value.value)
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _argument(cls: type[Group], fld: dataclasses.Field[Any], default: Any) -> tuple[str, dict[str, Any]]:
    """``(flag, add_argument kwargs)`` of one settings field."""
    flat = fld.metadata.get("flat") or fld.name
    tp, optional = _unwrap_optional(_hints(cls)[fld.name])
    kwargs: dict[str, Any] = {"dest": flat, "default": argparse.SUPPRESS}
    metavar = fld.metadata.get("metavar")
    if tp is bool:
        kwargs["action"] = "store_true"
    elif isinstance(tp, type) and issubclass(tp, Choice):
        kwargs["choices"] = tp.values()
        kwargs["type"] = str.lower
    elif tp in (int, float) and optional:
        kwargs["type"] = off_or(tp)
    elif tp in (int, float):
        kwargs["type"] = tp
    elif typing.get_origin(tp) is dict:
        kwargs["type"] = key_floats
    elif typing.get_origin(tp) is tuple:
        kwargs["type"] = lambda v: tuple(comma_list(v))
    if metavar:
        kwargs["metavar"] = metavar
    own = fld.default_factory() if fld.default_factory is not dataclasses.MISSING else fld.default
    custom = fld.metadata.get("shown")
    shown = custom if custom is not None and default == own else shown_default(default)
    kwargs["help"] = f"{fld.metadata['help']} (default: {shown})".replace("%", "%%")
    return "--" + flat.replace("_", "-"), kwargs


def add_settings(
    parser: argparse.ArgumentParser, scope: Scope, *, defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Add the settings flags of ``scope``, one ``--help`` section per group, in pipeline order.

    Args:
        parser: The command's parser.
        scope: Group -> fields (None = all) the command reads.
        defaults: The command's own defaults by flat name (shown in ``--help`` and applied first).

    Returns:
        The ``--help`` section of each group, for options that belong there (presets).
    """
    base = Settings(**(defaults or {}))
    parser.set_defaults(_settings_defaults=dict(defaults or {}))
    parser.add_argument(
        "--settings",
        dest="settings_file",
        metavar="FILE",
        default=None,
        help="TOML settings file, e.g. from `es-rag tune`: [stage] tables of flat names (bm25_k1 = 0.9); "
        "over the defaults, under the command line",
    )
    sections: dict[str, Any] = {}
    actions = []
    for cls in GROUPS:
        if cls.NAME not in scope:
            continue
        wanted = scope[cls.NAME]
        section = sections[cls.NAME] = parser.add_argument_group(cls.TITLE)
        group_value = getattr(base, cls.NAME)
        if cls.NAME == "encoder" and base.model_is_auto:  # --help shows "auto", not the model it resolves to
            group_value = dataclasses.replace(group_value, model=AUTO_MODEL)
        for fld in dataclasses.fields(cls):
            if wanted is not None and fld.name not in wanted:
                continue
            flag, kwargs = _argument(cls, fld, getattr(group_value, fld.name))
            actions.append(section.add_argument(flag, **kwargs))
    hold_back(parser, actions, also=defaults or {})  # --help: the common settings and the command's own defaults
    return sections


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings flags given on the command line, by flat name.

    Args:
        args: Parsed arguments.
    """
    return {name: getattr(args, name) for name in FLAT if hasattr(args, name)}


class Preset(dict[str, Any]):
    """The settings a named preset stands for, and whether the user named it (``explicit``) or the command applies
    it by default: a default preset sits under the settings file, a named one over it.

    Args:
        values: Settings by flat name.
        explicit: Whether the preset was given on the command line.
    """

    def __init__(self, values: Mapping[str, Any], *, explicit: bool) -> None:
        super().__init__(values)
        self.explicit = explicit


def file_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of ``--settings FILE`` by flat name (empty without the option).

    Args:
        args: Parsed arguments.

    Raises:
        ConfigError: The file cannot be read or holds an invalid setting (the message names the file and key).
    """
    path = getattr(args, "settings_file", None)
    if not path:
        return {}
    from es_rag.settings.file import read_settings_file

    return read_settings_file(path)


def settings_from_args(
    args: argparse.Namespace,
    *,
    presets: Sequence[Mapping[str, Any]] = (),
    resolve: bool = True,
    **overrides: Any,
) -> Settings:
    """Settings = defaults, then the command's defaults, then the presets the command applies by default, then the
    settings file (``--settings``), then the presets given on the command line, then the flags given, then
    ``overrides`` (values the command decided itself).

    Args:
        args: Parsed arguments.
        presets: Preset values by flat name (``--bm25-protocol``, ``--mmr-preset``); flags override them. A
            :class:`Preset` that is not ``explicit`` goes under the settings file; any other mapping over it.
        resolve: Resolve ``analyzer=auto`` here, by the no-plugin branch; commands that probe a cluster
            (setup, selftest, doctor) pass False and resolve it against the cluster's plugins.
        **overrides: Final values by flat name.
    """
    values: dict[str, Any] = dict(getattr(args, "_settings_defaults", {}))
    named = [p for p in presets if getattr(p, "explicit", True)]
    for preset in presets:
        if not getattr(preset, "explicit", True):
            values.update(preset)
    from_file = file_settings(args)
    values.update(from_file)
    for preset in named:
        values.update(preset)
    values.update(given_settings(args))
    values.update(overrides)
    retrieve_k = values.get("candidate_k")
    if retrieve_k is not None and "num_candidates" not in given_settings(args):
        # kNN needs num_candidates >= k: raise it with --candidate-k unless the user set it too
        values["num_candidates"] = max(retrieve_k, values.get("num_candidates", Settings().retrieve.num_candidates))
    for flat, flag in (
        ("embedding_model", "--embedding-model"),
        ("rerank_model", "--rerank-model"),
        ("escalate_model", "--escalate-model"),
    ):
        _check_local_model(given_settings(args).get(flat), flag)
    try:
        settings = Settings(**values)
    except ConfigError as exc:
        if not from_file:
            raise
        raise ConfigError(f"{exc} (with the settings file {args.settings_file})") from None
    if resolve:
        from es_rag.elasticsearch.assets import resolved_settings

        settings = resolved_settings(settings, plugins=None)
    return settings


def _check_local_model(value: Any, flag: str) -> None:
    """A model given as a local path (``/``, ``./``, ``../``, ``~``) must exist: without this check a typo fell back
    to the fused order (or failed after seconds of loading) with a misleading "hub unreachable" reason."""
    if not isinstance(value, str) or not value.startswith(("/", "./", "../", "~")):
        return
    path = Path(value).expanduser()
    if not path.is_dir():
        what = "is a file, not a model folder" if path.exists() else "no such folder"
        raise ConfigError(f"{flag} {value}: {what} (a sentence-transformers model folder or a model hub name)")


def non_empty_query(value: str) -> str:
    """argparse ``type`` of a query argument: an empty or blank query is a usage error, found before any model
    or index is touched.

    Args:
        value: The argument.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError("empty query")
    return value


# ---------------------------------------------------------------------------------------------
# presets: named sets of settings that explicit flags override
# ---------------------------------------------------------------------------------------------
def add_mmr_preset(section: Any) -> None:
    """``--mmr-preset`` in the ``select`` section.

    Args:
        section: The ``select`` argument group.
    """
    from es_rag.stages.select import LAMBDA_PRESETS

    section.add_argument(
        "--mmr-preset",
        choices=list(LAMBDA_PRESETS),
        default=None,
        help="named --mmr-lambda (an explicit --mmr-lambda wins): "
        + ", ".join(f"{k}={v}" for k, v in LAMBDA_PRESETS.items()),
    )


def mmr_preset(args: argparse.Namespace) -> Preset:
    """The settings ``--mmr-preset`` stands for (empty when not given).

    Args:
        args: Parsed arguments.
    """
    from es_rag.stages.select import lambda_for

    preset = getattr(args, "mmr_preset", None)
    return Preset({"mmr_lambda": lambda_for(preset)} if preset else {}, explicit=True)


DEFAULT_BM25_PROTOCOL = "settings"
"""The ``--bm25-protocol`` of commands on BEIR-layout datasets when none is named."""


def add_bm25_protocol(parser: argparse.ArgumentParser) -> None:
    """``--bm25-protocol`` for commands on BEIR-layout datasets.

    Args:
        parser: The command's parser.
    """
    from es_rag.evaluation.beir import BM25_PROTOCOLS

    described = "; ".join(
        f"{name} = " + ", ".join(f"{k} {shown_default(v)}" for k, v in values.items())
        for name, values in BM25_PROTOCOLS.items()
    )
    parser.add_argument(
        "--bm25-protocol",
        choices=[*BM25_PROTOCOLS, "settings"],
        default=None,
        help="BM25 set-up, a preset that --analyzer, --bm25-fields, --bm25-tie-breaker, --bm25-k1 and --bm25-b "
        f"override: {described} (beir-multifield reproduces BEIR's published BM25); settings = es_rag's own "
        f"defaults (default: {DEFAULT_BM25_PROTOCOL}; a --settings file overrides the default, not a protocol "
        "named here)",
    )


def bm25_preset(args: argparse.Namespace) -> Preset:
    """The settings ``--bm25-protocol`` stands for.

    Args:
        args: Parsed arguments.
    """
    from es_rag.evaluation.beir import BM25_PROTOCOLS

    named = getattr(args, "bm25_protocol", None)
    return Preset(BM25_PROTOCOLS.get(named or DEFAULT_BM25_PROTOCOL, {}), explicit=named is not None)
