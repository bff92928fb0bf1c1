"""Command-line options that are not settings: where the index is (``--es``, ``--index-dir`` and the connection),
who asks (``--tenant``, ``--acl``), what narrows a search (``--filter``, ``--as-of``), which files an ingest reads and
whose they are, and the chunker's options. The settings flags are :mod:`es_rag.cli.options`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError
from es_rag.settings import Settings


def comma_list(value: str) -> list[str]:
    """argparse type: ``a,b, c`` -> ``["a", "b", "c"]`` (empty items dropped).

    Args:
        value: The option's text.
    """
    return [p.strip() for p in value.split(",") if p.strip()]


def group_list(value: str) -> list[str]:
    """argparse type of ``--acl``: ``a,b`` -> ``["a", "b"]``; a name is kept as typed (``a, b`` gives ``" b"``,
    which is refused with the API's message: :mod:`es_rag.principals`).

    Args:
        value: The option's text.
    """
    return [p for p in value.split(",") if p]


def index_dir_path(value: str) -> str:
    """argparse ``type`` of ``--index-dir``: an existing file is refused at once (ingest used to embed everything
    and then fail with ``FileExistsError``).

    Args:
        value: The argument.
    """
    if Path(value).exists() and not Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a file, not a folder")
    return value


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


def reading_backend(args: argparse.Namespace, settings: Settings, index_dir: str | None) -> Any:
    """The backend a reading command searches: the cluster the arguments name, probed (one that is down or refuses
    us fails here, before a model is loaded), or the embedded index in ``index_dir``.

    Args:
        args: Parsed arguments of a command with :func:`add_target`.
        settings: Settings.
        index_dir: :func:`existing_index_dir` of ``args`` (None on a cluster).
    """
    from es_rag.wiring import build_backend

    if index_dir is not None:
        return build_backend(settings, index_dir=index_dir)
    backend = build_backend(settings, es_url=args.es, **connection_kwargs(args))
    backend.probe()
    return backend


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
        type=group_list,
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
        "field; a date may be 2026, 2026-04 or 2026-04-30 and keeps that granularity; or an Elasticsearch query "
        'as JSON (\'{"range": {"meta.published": {"gte": "now-1y"}}}\'; the embedded index evaluates term, '
        "terms, range, exists, bool); repeat for AND",
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
    from es_rag.query_filters import check_query_fields

    as_of = getattr(args, "as_of", "now")
    given = getattr(args, "filters", []) or []
    queries = [g for g in given if g.lstrip().startswith("{")]  # a query in Elasticsearch's JSON (es_rag.query_filters)
    schema = settings.index.metadata_schema()
    flt = SearchFilter(
        args.tenant,
        acl_groups(args.acl),
        conditions=parse_filters([g for g in given if g not in queries], schema),
        validity=None if as_of == "any" else Validity(as_of),
        queries=tuple(queries),
    )
    check_query_fields(flt.queries, schema)
    return flt


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
        type=group_list,
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
