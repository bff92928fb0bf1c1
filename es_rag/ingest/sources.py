"""Where ingested documents come from: files found under the paths given (or stdin), read, decoded and named.

* Folders are walked in name order. Hidden files and folders, vendor folders (:data:`VENDOR_DIRS`), es_rag's own
  index folders and whatever the root's ``.gitignore`` / ``.es-ragignore`` (or ``--ignore-file``) exclude are
  skipped, and so are files of unsupported types; each skip is reported with its reason
  (:attr:`~es_rag.ingest.report.IngestReport.skipped`). A file named on the command line is never skipped.
* A source's id is its path relative to a base folder: ``--base-dir``, else the folder given (for a file: the
  folder it is in), so the same file gets the same id whether it is named by an absolute path, a relative one or
  from another working folder. ``--source-id`` names a single file or stdin (``-``) explicitly. Two sources of one
  run with the same id are refused.
* JSONL files hold one source per line (``text`` plus ``source_id`` or ``id``, optional ``title``,
  ``source_version``, ``tenant_id`` (must equal ``--tenant``), ``acl``, ``format``, ``meta`` (an object of
  metadata fields, :mod:`es_rag.metadata`), and metadata fields at the top level); any other key is an error.
* A Markdown file may open with YAML front matter (``---`` lines around it): ``title`` and ``source_version``
  (or ``version``) set those, metadata fields (``doc_type``, ``tags``, ``valid_from``, ...) go to ``meta``, and
  other keys (``layout``, ``slug``, ... of static-site tools) are ignored with a warning. The block is blanked
  (spaces, newlines kept) rather than cut, so chunk offsets still index the file.
* ``updated_from_mtime``: a file that declares no ``updated`` date gets its modification time (UTC day), so
  freshness can rank files whose version is a content digest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from es_rag.errors import ConfigError, InputError
from es_rag.ingest.build_trees import BuildTree, build_tree
from es_rag.ingest.formats import JSONL_FORMATS as JSONL_FORMATS  # re-exported, as the names below
from es_rag.ingest.formats import MAX_FILE_BYTES as MAX_FILE_BYTES
from es_rag.ingest.formats import PLAIN_NAMES as PLAIN_NAMES
from es_rag.ingest.formats import SUFFIX_FORMAT as SUFFIX_FORMAT
from es_rag.ingest.formats import FrontMatter as FrontMatter
from es_rag.ingest.formats import SourceText as SourceText
from es_rag.ingest.formats import decode_source as decode_source
from es_rag.ingest.formats import default_version as default_version
from es_rag.ingest.formats import format_of as format_of
from es_rag.ingest.formats import mtime_day as mtime_day
from es_rag.ingest.formats import path_format as path_format
from es_rag.ingest.formats import read_front_matter as read_front_matter
from es_rag.ingest.formats import read_source as read_source
from es_rag.ingest.report import IngestReport
from es_rag.metadata import META, MetadataSchema
from es_rag.principals import name_problem


@dataclass(frozen=True)
class SourceDoc:
    """A source document to ingest, decoded, with its ownership and version."""

    source_id: str
    text: str
    tenant_id: str
    acl: tuple[str, ...]
    source_version: str
    title: str | None = None
    source_path: str | None = None
    fmt: str = "markdown"
    meta: Mapping[str, Any] = field(default_factory=dict)
    pages: tuple[int, ...] = ()
    """Start offset of each page in ``text`` (a PDF), else empty."""
    page_labels: tuple[str, ...] = ()
    """The label each page prints (a PDF with ``/PageLabels``), one per page of ``pages``; else empty."""
    headings: tuple[tuple[int, int, str], ...] = ()
    """``(offset, level, title)`` of each heading found by a PDF's extraction (its sections), else empty."""
    escapes: tuple[int, ...] | None = None
    """A Word or OpenDocument file's: ``text`` is as written, and these are the offsets before which its Markdown
    rendering has a backslash (:mod:`es_rag.ingest.office_render`); None for any other source."""


JSONL_KEYS = frozenset({"source_id", "id", "text", "title", "source_version", "tenant_id", "acl", "format", META})


def _jsonl_docs(
    path: Path,
    text: str,
    *,
    tenant_id: str,
    acl: Sequence[str],
    report: IngestReport,
    schema: MetadataSchema,
) -> list[SourceDoc]:
    docs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name = f"{path}:{lineno}"
        try:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(name, "json", f"invalid JSON: {exc.msg} at column {exc.colno}") from None
            if not isinstance(row, dict):
                raise InputError(name, "json", f"expected an object, got {type(row).__name__}")
            source_id = row.get("source_id", row.get("id"))
            if not isinstance(source_id, (str, int)) or not str(source_id).strip():
                raise InputError(name, "source_id", "missing or empty (give 'source_id' or 'id')")
            body = row.get("text")
            if not isinstance(body, str) or not body.strip():
                raise InputError(name, "text", "missing, empty or not a string")
            fmt = str(row.get("format", "plain"))
            if fmt not in JSONL_FORMATS:
                raise InputError(name, "format", f"invalid value {fmt!r}; valid values: {', '.join(JSONL_FORMATS)}")
            row_acl = row.get("acl", list(acl))
            if isinstance(row_acl, str):
                row_acl = [row_acl]
            if not isinstance(row_acl, list) or not all(isinstance(g, str) for g in row_acl):
                raise InputError(name, "acl", "must be a string or a list of strings")
            for group in row_acl:
                if (problem := name_problem(group)) is not None:
                    raise InputError(name, "acl", problem)
            tenant = row.get("tenant_id", tenant_id)
            if not isinstance(tenant, str) or not tenant.strip():
                raise InputError(name, "tenant_id", "missing or empty: every chunk needs a tenant")
            if (problem := name_problem(tenant)) is not None:
                raise InputError(name, "tenant_id", problem)
            if tenant != tenant_id:  # a line must not move a document into another tenant behind --tenant's back
                raise InputError(
                    name,
                    "tenant_id",
                    f"{tenant!r} conflicts with --tenant {tenant_id!r}; ingest each tenant separately",
                )
            title = row.get("title")
            meta = row.get(META, {})
            if not isinstance(meta, dict):
                raise InputError(name, META, f"must be an object of metadata fields, got {type(meta).__name__}")
            meta = dict(meta)
            for key, value in row.items():
                if key in JSONL_KEYS:
                    continue
                if schema.get(key) is None:
                    known = ", ".join(sorted(JSONL_KEYS | {f.name for f in schema.fields}))
                    raise InputError(name, key, f"unknown field; known: {known}")
                if key in meta:
                    raise InputError(name, key, f"given at the top level and in {META}")
                meta[key] = value
            docs.append(
                SourceDoc(
                    source_id=str(source_id),
                    text=body,
                    tenant_id=tenant,
                    acl=tuple(row_acl),
                    source_version=str(row.get("source_version") or default_version(body)),
                    title=str(title) if title is not None else None,
                    source_path=name,
                    fmt=fmt,
                    meta=meta,
                )
            )
        except InputError as err:
            report.failed.append(err.as_dict())
    return docs


#: Folder names never walked into: package managers' and virtualenvs' trees.
VENDOR_DIRS = frozenset(
    {"node_modules", "bower_components", "jspm_packages", "vendor", "venv", "__pycache__", "site-packages"}
)
#: Ignore files read at the root of every folder walked (gitignore syntax).
IGNORE_FILES = (".gitignore", ".es-ragignore")
#: Types people keep in documentation folders that es_rag does not read (yet): named when skipped.
KNOWN_UNSUPPORTED = {
    ".doc": "Word 97-2003",
    ".rtf": "RTF",
    ".pptx": "PowerPoint",
    ".xlsx": "Excel",
    ".odp": "OpenDocument presentation",
    ".ods": "OpenDocument spreadsheet",
}


@dataclass(frozen=True)
class Found:
    """A source to read: ``path`` (None = stdin) and the ``source_id`` it will have."""

    path: Path | None
    source_id: str


def _unsupported(suffix: str) -> str:
    kind = KNOWN_UNSUPPORTED.get(suffix.lower())
    what = f"{suffix or '(no suffix)'}" + (f" ({kind})" if kind else "")
    hint = "; save it as .docx, .odt, PDF, Markdown or text first"
    names = " and text files named README, COPYING, copyright, LICENSE, NEWS, ..."
    return f"unsupported file type: {what}; supported: {', '.join(SUFFIX_FORMAT)}{names}" + (hint if kind else "")


def _ignore_specs(root: Path, extra: Path | None) -> list[tuple[str, Any]]:
    import pathspec

    specs = []
    for f in [*(root / n for n in IGNORE_FILES), *([extra] if extra is not None else [])]:
        if f.is_file():
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
            specs.append((f.name if f.parent == root else str(f), pathspec.GitIgnoreSpec.from_lines(lines)))
    return specs


def is_index_dir(path: Path) -> bool:
    """Whether ``path`` holds an embedded es_rag index (its manifest ``meta.json``, or the ``CURRENT`` pointer of
    blue-green generations)."""
    from es_rag.embedded.store import has_manifest

    return has_manifest(path) or (path / "CURRENT").is_file()


def _walk(root: Path, specs: list[tuple[str, Any]], excluded: set[Path], report: IngestReport) -> list[Path]:
    out: list[Path] = []
    builds: list[BuildTree] = []  # the generated documentation trees met so far (es_rag.ingest.build_trees)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        found = build_tree(here, dirnames, filenames)
        if found is not None:
            builds.append(found)
        inside = [b for b in builds if here == b.root or b.root in here.parents]
        keep = []
        for d in sorted(dirnames):
            full = here / d
            rel = full.relative_to(root).as_posix() + "/"
            reason = (
                "hidden folder"
                if d.startswith(".")
                else "vendor folder"
                if d in VENDOR_DIRS
                else "es_rag index folder"
                if full.resolve() in excluded or is_index_dir(full)
                else next((f"ignored by {name}" for name, spec in specs if spec.match_file(rel)), None)
                or next((why for b in inside if (why := b.skips_dir(full))), None)
            )
            if reason is None:
                keep.append(d)
            else:
                report.skipped.append({"path": str(full), "reason": reason})
        dirnames[:] = keep
        for name in sorted(filenames):
            f = here / name
            rel = f.relative_to(root).as_posix()
            ignored = next((f"ignored by {n}" for n, spec in specs if spec.match_file(rel)), None) or next(
                (why for b in inside if (why := b.skips_file(f))), None
            )
            if name.startswith("."):
                report.skipped.append({"path": str(f), "reason": "hidden file"})
            elif ignored:
                report.skipped.append({"path": str(f), "reason": ignored})
            elif not path_format(f):
                report.skipped.append({"path": str(f), "reason": _unsupported(f.suffix)})
            else:
                out.append(f)
    return out


def relative_id(path: Path, base: Path) -> str:
    """``path``'s id relative to ``base`` (POSIX separators).

    Raises:
        InputError: ``path`` is outside ``base``.
    """
    rel = os.path.relpath(path, base)
    if rel == ".." or rel.startswith(".." + os.sep):
        raise InputError(str(path), "path", f"outside the base folder {base} (--base-dir)")
    return Path(rel).as_posix()


def discover(
    paths: Sequence[str | Path],
    *,
    report: IngestReport,
    base_dir: str | Path | None = None,
    source_id: str | None = None,
    ignore_file: str | Path | None = None,
    exclude_dirs: Sequence[str | Path] = (),
) -> list[Found]:
    """The sources under ``paths``, with their ids; skipped paths go into ``report.skipped``, a named file that
    cannot get an id (outside ``base_dir``) into ``report.failed``.

    Args:
        paths: Files, folders, or ``-`` for stdin.
        report: Receives skips and failures.
        base_dir: Ids are relative to it (default: each folder given, or a file's own folder).
        source_id: The id of the single file or stdin given.
        ignore_file: A gitignore-style file applied to every folder walked, besides each root's own.
        exclude_dirs: Folders never walked into (the index being written).

    Raises:
        ConfigError: ``source_id`` with several paths or a folder, stdin without ``source_id``, a missing
            ``base_dir`` or ``ignore_file``.
    """
    if source_id is not None and (len(paths) != 1 or Path(paths[0]).is_dir()):
        raise ConfigError("--source-id names one source: give exactly one file, or - for stdin")
    base = Path(base_dir).resolve() if base_dir is not None else None
    if base is not None and not base.is_dir():
        raise ConfigError(f"--base-dir {base_dir}: not a folder")
    extra = Path(ignore_file) if ignore_file is not None else None
    if extra is not None and not extra.is_file():
        raise ConfigError(f"--ignore-file {ignore_file}: no such file")
    excluded = {Path(d).resolve() for d in exclude_dirs}
    found: list[Found] = []
    for p in paths:
        if str(p) == "-":
            if source_id is None:
                raise ConfigError("reading stdin (-) needs --source-id to name the source")
            found.append(Found(None, source_id))
            continue
        path = Path(p)
        if path.is_dir():
            root = path.resolve()
            if base is not None:
                relative_id(root, base)  # the whole folder must be under --base-dir
            for f in _walk(root, _ignore_specs(root, extra), excluded, report):
                found.append(Found(f, relative_id(f, base or root)))
            continue
        try:  # a named file: never skipped; reading it reports what is wrong with it
            resolved = path.resolve()
            found.append(Found(path, source_id or relative_id(resolved, base or resolved.parent)))
        except InputError as err:
            report.failed.append(err.as_dict())
    return found


def iter_files(
    paths: Sequence[str | Path],
    *,
    tenant_id: str,
    acl: Sequence[str],
    report: IngestReport,
    base_dir: str | Path | None = None,
    source_id: str | None = None,
    ignore_file: str | Path | None = None,
    exclude_dirs: Sequence[str | Path] = (),
    stdin: BinaryIO | None = None,
    schema: MetadataSchema | None = None,
    meta: Mapping[str, Any] | None = None,
    updated_from_mtime: bool = False,
    encoding: str = "utf-8",
) -> Iterator[SourceDoc]:
    """Read the sources :func:`discover` finds into :class:`SourceDoc` records, lazily: a file is read when the
    caller asks for its document (a JSONL file gives one per line), so an ingest holds one file at a time, not
    the corpus. Failures go into ``report.failed``, skips into ``report.skipped`` (the folder walk runs at the
    first document), the reading time into ``report.timings["parse"]``.

    Args:
        paths: Files, folders, or ``-`` for stdin.
        tenant_id: Tenant of every document (a JSONL line may repeat it, not change it).
        acl: ACL groups of every document (a JSONL line may set its own).
        report: Receives failures, skips and the parse time.
        base_dir: See :func:`discover`.
        source_id: See :func:`discover`.
        ignore_file: See :func:`discover`.
        exclude_dirs: See :func:`discover`.
        stdin: Where ``-`` reads from (default: the process's standard input).
        schema: The index's metadata fields (default: the built-in ones).
        meta: Metadata of every source read (``--meta k=v``); a document's own values win.
        updated_from_mtime: Give a file that declares no ``updated`` date its modification day.
        encoding: The text encoding of every file (:func:`decode_source`).
    """
    import time

    schema = schema or MetadataSchema()
    defaults = dict(meta or {})
    t0 = time.perf_counter()
    seen: dict[str, str] = {}
    for item in discover(
        paths,
        report=report,
        base_dir=base_dir,
        source_id=source_id,
        ignore_file=ignore_file,
        exclude_dirs=exclude_dirs,
    ):
        name = str(item.path) if item.path is not None else "<stdin>"
        docs: list[SourceDoc] = []
        try:
            if item.path is None:
                data = (stdin or sys.stdin.buffer).read()
                fmt = SUFFIX_FORMAT.get(Path(item.source_id).suffix.lower(), "markdown")
                if fmt == "jsonl":
                    raise InputError(name, "format", "JSONL is read from files, not stdin")
            else:
                f = item.path
                if not f.is_file():
                    raise InputError(name, "path", "no such file")
                fmt = path_format(f)
                if not fmt:
                    raise InputError(name, "path", _unsupported(f.suffix))
                size = f.stat().st_size
                if size > MAX_FILE_BYTES:
                    raise InputError(name, "size", f"{size} bytes exceeds the {MAX_FILE_BYTES} byte limit")
                data = f.read_bytes()
            if len(data) > MAX_FILE_BYTES:
                raise InputError(name, "size", f"{len(data)} bytes exceeds the {MAX_FILE_BYTES} byte limit")
            if item.path is not None and not data.strip():
                # an empty file (26 of Debian Python's 201 __init__.py) holds nothing to index: skipped with a word,
                # not a failure, so the folder's content stays known (ingest --sync still removes what is gone)
                report.skipped.append({"path": name, "reason": "empty file: nothing to index"})
            elif fmt == "jsonl":
                text = decode_source(Path(name), data, encoding)
                rows = _jsonl_docs(Path(name), text, tenant_id=tenant_id, acl=acl, report=report, schema=schema)
                docs.extend(_with_defaults(d, defaults, schema) for d in rows)
            elif item.source_id in seen:
                raise InputError(
                    name,
                    "source_id",
                    f"{item.source_id!r} is also the id of {seen[item.source_id]} (ids are paths relative to the "
                    "folder given): pass --base-dir with a folder above both, or ingest them separately",
                )
            else:
                seen[item.source_id] = name
                source = read_source(name, data, fmt, encoding)
                report.warnings.extend({"document": name, "field": "text", "reason": w} for w in source.warnings)
                docs.append(_file_doc(item, name, source, tenant_id, acl, report, schema, defaults, updated_from_mtime))
        except InputError as err:
            report.failed.append(err.as_dict())
        except OSError as exc:
            report.failed.append({"document": name, "field": "path", "reason": str(exc)})
        report.timings["parse"] = report.timings.get("parse", 0.0) + time.perf_counter() - t0
        yield from docs
        t0 = time.perf_counter()  # the caller's time between two files is not parse time
    report.timings["parse"] = report.timings.get("parse", 0.0) + time.perf_counter() - t0


def _file_doc(
    item: Found,
    name: str,
    source: SourceText,
    tenant_id: str,
    acl: Sequence[str],
    report: IngestReport,
    schema: MetadataSchema,
    defaults: Mapping[str, Any],
    updated_from_mtime: bool,
) -> SourceDoc:
    """The document of one (non-JSONL) file: its front matter read (a Markdown file), its metadata under
    ``defaults``."""
    text = source.text
    front = FrontMatter(text, title=source.title)
    if source.fmt == "markdown" and not source.extracted:
        front = read_front_matter(text, document=name, schema=schema)
        if front.ignored:
            report.warnings.append(
                {
                    "document": name,
                    "field": "front_matter",
                    "reason": f"not metadata fields, ignored: {', '.join(front.ignored)}",
                }
            )
    own = dict(front.meta)
    if updated_from_mtime and item.path is not None and "updated" not in _names([*own, *defaults], schema):
        own["updated"] = mtime_day(item.path)
    doc = SourceDoc(
        source_id=item.source_id,
        text=front.text,
        tenant_id=tenant_id,
        acl=tuple(acl),
        source_version=front.version or default_version(text),
        title=front.title,
        source_path=name,
        fmt=source.fmt,
        meta=own,
        pages=source.pages,
        page_labels=source.page_labels,
        headings=source.headings,
        escapes=source.escapes,
    )
    return _with_defaults(doc, defaults, schema)


def load_files(
    paths: Sequence[str | Path],
    *,
    tenant_id: str,
    acl: Sequence[str],
    report: IngestReport,
    base_dir: str | Path | None = None,
    source_id: str | None = None,
    ignore_file: str | Path | None = None,
    exclude_dirs: Sequence[str | Path] = (),
    stdin: BinaryIO | None = None,
    schema: MetadataSchema | None = None,
    meta: Mapping[str, Any] | None = None,
    updated_from_mtime: bool = False,
    encoding: str = "utf-8",
) -> list[SourceDoc]:
    """Every document :func:`iter_files` yields, read now (for callers that need them all, e.g. ``es-rag chunk``).

    Args:
        paths: Files, folders, or ``-`` for stdin.
        tenant_id: Tenant of every document (a JSONL line may repeat it, not change it).
        acl: ACL groups of every document (a JSONL line may set its own).
        report: Receives failures, skips and the parse time.
        base_dir: See :func:`discover`.
        source_id: See :func:`discover`.
        ignore_file: See :func:`discover`.
        exclude_dirs: See :func:`discover`.
        stdin: Where ``-`` reads from (default: the process's standard input).
        schema: See :func:`iter_files`.
        meta: See :func:`iter_files`.
        updated_from_mtime: See :func:`iter_files`.
        encoding: See :func:`iter_files`.
    """
    return list(
        iter_files(
            paths,
            tenant_id=tenant_id,
            acl=acl,
            report=report,
            base_dir=base_dir,
            source_id=source_id,
            ignore_file=ignore_file,
            exclude_dirs=exclude_dirs,
            stdin=stdin,
            schema=schema,
            meta=meta,
            updated_from_mtime=updated_from_mtime,
            encoding=encoding,
        )
    )


def _names(keys: Sequence[str], schema: MetadataSchema) -> set[str]:
    """The fields ``keys`` name (aliases resolved; unknown keys as they are)."""
    return {(schema.get(k).name if schema.get(k) is not None else k) for k in keys}  # type: ignore[union-attr]


def _with_defaults(doc: SourceDoc, defaults: Mapping[str, Any], schema: MetadataSchema) -> SourceDoc:
    """``doc`` with the run's ``--meta`` values under its own (a field the document sets, under any of its names,
    keeps the document's value)."""
    if not defaults:
        return doc
    own = _names(list(doc.meta), schema)
    merged = dict(doc.meta)
    for key, value in defaults.items():
        if not _names([key], schema) & own:
            merged[key] = value
    return dataclasses.replace(doc, meta=merged)
