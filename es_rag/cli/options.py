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
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from es_rag.cli.brief_help import hold_back
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
QUERY_ENCODER = ("model", "dims", "inference_id", "vector_mode", "device", "precision", "fit_check")
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


def _hints(cls: type[Group]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


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


def comma_list(value: str) -> list[str]:
    """argparse type: ``a,b, c`` -> ``["a", "b", "c"]`` (empty items dropped).

    Args:
        value: The option's text.
    """
    return [p.strip() for p in value.split(",") if p.strip()]


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


def index_dir_path(value: str) -> str:
    """argparse ``type`` of ``--index-dir``: an existing file is refused at once (ingest used to embed everything
    and then fail with ``FileExistsError``).

    Args:
        value: The argument.
    """
    if Path(value).exists() and not Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a file, not a folder")
    return value


# ---------------------------------------------------------------------------------------------
# options that are not settings
# ---------------------------------------------------------------------------------------------
DEFAULT_INDEX_DIR = ".es_rag/index"


def existing_index_dir(args: argparse.Namespace) -> str | None:
    """The embedded index a reading command opens (``--index-dir``, default :data:`DEFAULT_INDEX_DIR`), or None on a
    cluster.

    Args:
        args: Parsed arguments of a command with :func:`add_target`.

    Raises:
        EsRagError: No embedded index there (with the command that creates one).
    """
    from es_rag.errors import EsRagError

    if uses_cluster(args):
        return None
    from es_rag.embedded.generations import has_index

    index_dir = str(args.index_dir or DEFAULT_INDEX_DIR)
    if not has_index(index_dir):
        raise EsRagError(
            f"no embedded index in {index_dir}: run `es-rag ingest PATH --tenant T --index-dir {index_dir}` first"
        )
    return index_dir


def add_json(parser: argparse.ArgumentParser, what: str = "print the result as JSON") -> None:
    """``--json``.

    Args:
        parser: The command's parser.
        what: Help text.
    """
    parser.add_argument("--json", action="store_true", help=what)


def add_target(
    parser: argparse.ArgumentParser,
    *,
    embedded: bool = True,
    es_help: str = "Elasticsearch URL (https://host:9200; default: $ES_URL)",
    index_dir_help: str = f"embedded index directory (default {DEFAULT_INDEX_DIR})",
) -> None:
    """``--es URL`` (and ``--index-dir`` when the command also runs on the embedded index), plus the
    connection options.

    Args:
        parser: The command's parser.
        embedded: Offer ``--index-dir`` as the alternative to ``--es``.
        es_help: Help of ``--es``.
        index_dir_help: Help of ``--index-dir``.
    """
    g = parser.add_argument_group(
        "where: an Elasticsearch cluster"
        + (" or the embedded index" if embedded else "")
        + " (credentials: ES_API_KEY, or ES_USERNAME and ES_PASSWORD)"
    )
    target = g.add_mutually_exclusive_group() if embedded else g
    target.add_argument("--es", metavar="URL", default=None, help=es_help)
    if embedded:
        target.add_argument("--index-dir", metavar="DIR", default=None, type=index_dir_path, help=index_dir_help)
    g.add_argument(
        "--cloud-id", default=None, metavar="ID", help="Elastic Cloud deployment id instead of --es (ES_CLOUD_ID)"
    )
    g.add_argument(
        "--ca-certs",
        default=None,
        metavar="FILE",
        help="CA that signed the cluster's certificate; Elasticsearch 9 writes config/certs/http_ca.crt (ES_CA_CERTS)",
    )
    g.add_argument(
        "--ssl-assert-fingerprint",
        default=None,
        metavar="SHA256",
        help="trust the certificate with this SHA-256 fingerprint instead of a CA (ES_SSL_ASSERT_FINGERPRINT)",
    )
    g.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify TLS certificates (a throwaway dev cluster only; ES_VERIFY_CERTS=false)",
    )


def connection_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """:meth:`ElasticsearchBackend.connect` options from the command line, else the environment.

    Args:
        args: Parsed arguments (parsers without the connection group give none).
    """
    env = os.environ
    verify = not getattr(args, "insecure", False) and env.get("ES_VERIFY_CERTS", "true").strip().lower() not in (
        "0",
        "false",
        "no",
    )
    if not verify:
        print("es-rag: warning: TLS certificates are not verified (--insecure)", file=sys.stderr)
    return {
        "cloud_id": getattr(args, "cloud_id", None) or env.get("ES_CLOUD_ID") or None,
        "ca_certs": getattr(args, "ca_certs", None) or env.get("ES_CA_CERTS") or None,
        "ssl_assert_fingerprint": getattr(args, "ssl_assert_fingerprint", None)
        or env.get("ES_SSL_ASSERT_FINGERPRINT")
        or None,
        "verify_certs": verify,
    }


def uses_cluster(args: argparse.Namespace) -> bool:
    """Whether the command targets Elasticsearch (``--es`` or an Elastic Cloud id).

    Args:
        args: Parsed arguments.
    """
    return bool(getattr(args, "es", None) or getattr(args, "cloud_id", None) or os.environ.get("ES_CLOUD_ID"))


def connect(args: argparse.Namespace, settings: Settings) -> Any:
    """The :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend` the arguments name.

    Args:
        args: Parsed arguments.
        settings: Settings.
    """
    from es_rag.elasticsearch.backend import ElasticsearchBackend

    return ElasticsearchBackend.connect(getattr(args, "es", None), settings, **connection_kwargs(args))


def acl_groups(values: Sequence[Sequence[str]] | None) -> tuple[str, ...]:
    """The ``--acl`` values (comma lists, possibly repeated) as one tuple, in order, without repeats.

    Args:
        values: What argparse collected.
    """
    out: dict[str, None] = {}
    for chunk in values or ():
        for group in chunk:
            out[group] = None
    return tuple(out)


def add_principal(parser: argparse.ArgumentParser, *, tenant_required: bool = True) -> None:
    """``--tenant`` and ``--acl`` of the caller (the hard filter of every retriever).

    Args:
        parser: The command's parser.
        tenant_required: Whether ``--tenant`` must be given.
    """
    g = parser.add_argument_group("who asks (the hard filter of every retriever)")
    g.add_argument("--tenant", required=tenant_required, help="tenant id")
    g.add_argument(
        "--acl",
        action="append",
        type=comma_list,
        metavar="G[,G...]",
        help="ACL groups of the caller, comma separated or repeated; 'public' is always included",
    )


def add_filters(parser: argparse.ArgumentParser) -> None:
    """``--filter`` (metadata conditions) and ``--as-of`` (the validity date), applied in every retriever.

    Args:
        parser: The command's parser.
    """
    g = parser.add_argument_group(
        "what may be served (hard filters, inside every retriever)",
        "Metadata fields: doc_type, tags, region, language, author, url, published, updated, valid_from "
        "(alias effective), valid_to (alias expires), supersedes, and those declared with --metadata-fields. "
        "Example: --filter tags=eu-regulation --filter published>=2023.",
    )
    g.add_argument(
        "--filter",
        dest="filters",
        action="append",
        default=[],
        metavar="EXPR",
        help="FIELD=V[,V...] (any of), FIELD!=V[,V...] (none of), or FIELD>=X, >X, <=X, <X on a date or number "
        "field; a date may be 2026, 2026-04 or 2026-04-30 and keeps that granularity; repeat for AND",
    )
    g.add_argument(
        "--as-of",
        default="now",
        metavar="DATE|now|any",
        help="serve what is valid on this day (valid_from <= DATE <= valid_to, UTC); 'any' turns the validity "
        "filter off (default: now)",
    )


def search_filter(args: argparse.Namespace, settings: Settings) -> Any:
    """The :class:`~es_rag.filters.SearchFilter` of ``--tenant``, ``--acl``, ``--filter`` and ``--as-of``.

    Args:
        args: Parsed arguments.
        settings: Gives the index's metadata fields.
    """
    from es_rag.filters import SearchFilter
    from es_rag.metadata import Validity, parse_filters

    as_of = getattr(args, "as_of", "now")
    return SearchFilter(
        args.tenant,
        acl_groups(args.acl),
        conditions=parse_filters(getattr(args, "filters", []) or [], settings.index.metadata_schema()),
        validity=None if as_of == "any" else Validity(as_of),
    )


def add_sources(parser: argparse.ArgumentParser) -> None:
    """``PATH...`` and how files become sources: ``--base-dir``, ``--source-id``, ``--ignore-file``.

    Args:
        parser: The command's parser.
    """
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="files and folders to read (folders are walked), or - for stdin"
    )
    g = parser.add_argument_group(
        "sources: which files are read and the id each gets",
        "Folder walks skip hidden files and folders, vendor folders (node_modules, venv, ...), es_rag index "
        "folders, what the folder's .gitignore / .es-ragignore exclude and unsupported types; each skip is "
        "reported. A source's id is its path relative to --base-dir (default: the folder given, or a file's own "
        "folder).",
    )
    g.add_argument("--base-dir", metavar="DIR", help="source ids are paths relative to this folder")
    g.add_argument("--source-id", metavar="ID", help="the id of the single file (or stdin, -) given")
    g.add_argument("--ignore-file", metavar="FILE", help="gitignore-style patterns to skip, besides each folder's own")
    g.add_argument(
        "--encoding", default="utf-8", help="text encoding of the files (default utf-8; latin-1, cp1252, ...)"
    )
    m = parser.add_argument_group(
        "metadata: typed fields every chunk carries (filters read them; see docs/metadata.md)",
        "A Markdown file's YAML front matter and a JSONL line's fields set a document's own metadata; --meta sets "
        "it for every source of the run, under the document's own values.",
    )
    m.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="metadata of every source read, e.g. doc_type=policy, tags=eu-regulation,gdpr (a comma list for a "
        "multi-valued field), valid_from=2026-03-01; repeat for more fields",
    )
    m.add_argument(
        "--updated-from-mtime",
        action="store_true",
        help="a file that declares no 'updated' date gets its modification day, so freshness can rank files whose "
        "version is a content digest",
    )


def meta_values(exprs: Sequence[str], schema: Any) -> dict[str, Any]:
    """``--meta FIELD=VALUE`` options as a metadata mapping (values are validated with the documents).

    Args:
        exprs: The options.
        schema: The index's :class:`~es_rag.metadata.MetadataSchema`.

    Raises:
        ConfigError: Not ``FIELD=VALUE``, an unknown field, or a field given twice.
    """
    out: dict[str, Any] = {}
    for expr in exprs:
        name, sep, value = str(expr).partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise ConfigError(f"--meta {expr!r}: expected FIELD=VALUE, e.g. doc_type=policy")
        fld = schema.field(name, where=f"--meta {expr!r}")
        if fld.name in {schema.field(k, where="--meta").name for k in out}:
            raise ConfigError(f"--meta {expr!r}: {fld.name} is given twice")
        parts = [p.strip() for p in value.split(",") if p.strip()]
        out[name] = parts if fld.type == "keyword" and not fld.single else value.strip()
    return out


def source_kwargs(args: argparse.Namespace, settings: Settings | None = None) -> dict[str, Any]:
    """The :func:`es_rag.ingest.load_files` options of :func:`add_sources`.

    Args:
        args: Parsed arguments.
        settings: Gives the index's metadata fields (default: the built-in ones).
    """
    schema = (settings or Settings()).index.metadata_schema()
    return {
        "base_dir": args.base_dir,
        "source_id": args.source_id,
        "ignore_file": args.ignore_file,
        "schema": schema,
        "meta": meta_values(getattr(args, "meta", []) or [], schema),
        "updated_from_mtime": bool(getattr(args, "updated_from_mtime", False)),
        "encoding": getattr(args, "encoding", "utf-8"),
    }


def add_owner(parser: argparse.ArgumentParser, *, tenant_default: str | None = None) -> None:
    """``--tenant`` and ``--acl`` written into every chunk.

    Args:
        parser: The command's parser.
        tenant_default: Default tenant (None: required).
    """
    g = parser.add_argument_group("who owns the documents")
    g.add_argument(
        "--tenant",
        required=tenant_default is None,
        default=tenant_default,
        help="tenant id written into every chunk" + (f" (default {tenant_default!r})" if tenant_default else ""),
    )
    g.add_argument(
        "--acl",
        action="append",
        type=comma_list,
        metavar="G[,G...]",
        help="groups allowed to read the documents, comma separated or repeated (default: public)",
    )


def owner_acl(args: argparse.Namespace) -> tuple[str, ...]:
    """The documents' ACL: ``--acl`` values, else ``public``.

    Args:
        args: Parsed arguments.
    """
    return acl_groups(args.acl) or ("public",)


def add_chunker(parser: argparse.ArgumentParser, *, semantic: bool = False) -> None:
    """The chunker choice (the sizes are the ``chunking`` settings).

    Args:
        parser: The command's parser.
        semantic: Also ``--breakpoint-percentile`` (commands that load the model ``semantic`` needs).
    """
    from es_rag.chunking import Strategy

    g = parser.add_argument_group("chunker")
    g.add_argument(
        "--strategy",
        choices=[s.value for s in Strategy],
        default=Strategy.PARENT_CHILD.value,
        help="chunking strategy (default: %(default)s)",
    )
    g.add_argument(
        "--contextual",
        action="store_true",
        help="embed 'title + heading path' with each child (stored in contextual_text; text stays the span)",
    )
    g.add_argument(
        "--parent-max-tokens",
        type=int,
        default=None,
        help="cap on parent size in tokens (parent-child strategy; default: none)",
    )
    if semantic:
        g.add_argument(
            "--breakpoint-percentile",
            type=float,
            default=95.0,
            metavar="P",
            help="semantic strategy: a child starts where the embedding distance between neighbouring sentences is at "
            "or above this percentile of the document's distances, in (0, 100] (default: %(default)s)",
        )


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
