"""Ingestion: files -> chunks (parents + children) -> embeddings -> backend, with versions and a report.

* Sources: Markdown, HTML, plain text, and JSONL (one source per line: ``text`` plus ``source_id`` or
  ``id``, optional ``title``, ``source_version``, ``tenant_id``, ``acl``, ``format``).
* A bad document (unreadable, binary, not UTF-8, empty, missing field, bad JSONL line) is reported with
  its name, field and reason; every good document is still indexed.
* A child whose embedded text exceeds the model's input limit is reported in ``warnings`` (never cut
  silently).
* Versions (:mod:`es_rag.versions.registry`): the new version of each source is hidden while it is written,
  the indices refreshed, then one registry write per tenant serves it and hides the previous version,
  whose documents are then deleted. A source any of whose chunks failed keeps its previous version
  served; its partial new version is deleted.
* :class:`~es_rag.versions.registry.LineageListener` s (e.g. a result cache) are told about every retired
  version and deleted source.
* ``timings`` splits the time into parse (read + decode), chunk, embed and index.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from es_rag.backend import IndexReport, SearchBackend
from es_rag.chunking import Chunker
from es_rag.errors import InputError
from es_rag.records import Chunk
from es_rag.versions.registry import LineageListener
from es_rag.versions.store import Pair

SUFFIX_FORMAT = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "plain",
    ".text": "plain",
    ".html": "html",
    ".htm": "html",
    ".jsonl": "jsonl",
}
MAX_FILE_BYTES = 50 * 1024 * 1024
JSONL_FORMATS = ("markdown", "plain", "html")


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


@dataclass
class IngestReport(IndexReport):
    """Bulk outcome plus sources and chunks processed, warnings, version switches and timings."""

    sources: int = 0
    chunks: int = 0
    parents: int = 0
    warnings: list[dict[str, str]] = field(default_factory=list)
    switched: list[dict[str, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=lambda: {"parse": 0.0, "chunk": 0.0, "embed": 0.0, "index": 0.0})
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "sources": self.sources,
            "chunks": self.chunks,
            "parents": self.parents,
            "indexed": self.indexed,
            "failed": self.failed,
            "warnings": self.warnings,
            "switched": self.switched,
            "timings_s": {k: round(v, 4) for k, v in self.timings.items()},
        }


def default_version(text: str) -> str:
    """Version derived from the content (changes whenever the text does).

    Args:
        text: Source text.
    """
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def decode_source(path: Path, data: bytes) -> str:
    """Decode a file as UTF-8, refusing binary data with a clear error.

    Args:
        path: The file (for messages).
        data: Its bytes.
    """
    if not data.strip():
        raise InputError(str(path), "text", "the file is empty")
    if b"\x00" in data[:8192]:
        raise InputError(str(path), "encoding", "binary file (NUL bytes); only UTF-8 text is ingested")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            str(path), "encoding", f"not valid UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
        ) from None
    return text


def iter_files(paths: Sequence[str | Path]) -> Iterable[Path]:
    """Every ingestible file under ``paths`` (directories are walked in name order).

    Args:
        paths: Files and directories.
    """
    for p in paths:
        path = Path(p)
        if path.is_dir():
            for f in sorted(path.rglob("*")):
                if f.is_file() and f.suffix.lower() in SUFFIX_FORMAT:
                    yield f
        else:
            yield path


def _jsonl_docs(path: Path, text: str, *, tenant_id: str, acl: Sequence[str], report: IngestReport) -> list[SourceDoc]:
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
            tenant = row.get("tenant_id", tenant_id)
            if not isinstance(tenant, str) or not tenant.strip():
                raise InputError(name, "tenant_id", "missing or empty: every chunk needs a tenant")
            title = row.get("title")
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
                )
            )
        except InputError as err:
            report.failed.append(err.as_dict())
    return docs


def load_files(
    paths: Sequence[str | Path], *, tenant_id: str, acl: Sequence[str], report: IngestReport
) -> list[SourceDoc]:
    """Read files into :class:`SourceDoc` records (a JSONL file gives one per line); failures go into
    ``report``, the time into ``report.timings["parse"]``.

    Args:
        paths: Files and directories.
        tenant_id: Tenant of every document (a JSONL line may set its own).
        acl: ACL groups of every document (a JSONL line may set its own).
        report: Receives one row per unreadable document.
    """
    t0 = time.perf_counter()
    docs: list[SourceDoc] = []
    for f in iter_files(paths):
        try:
            if not f.is_file():
                raise InputError(str(f), "path", "no such file")
            fmt = SUFFIX_FORMAT.get(f.suffix.lower())
            if fmt is None:
                raise InputError(
                    str(f), "path", f"unsupported file type {f.suffix!r}; supported: {', '.join(SUFFIX_FORMAT)}"
                )
            size = f.stat().st_size
            if size > MAX_FILE_BYTES:
                raise InputError(str(f), "size", f"{size} bytes exceeds the {MAX_FILE_BYTES} byte limit")
            text = decode_source(f, f.read_bytes())
            if fmt == "jsonl":
                docs.extend(_jsonl_docs(f, text, tenant_id=tenant_id, acl=acl, report=report))
                continue
            docs.append(
                SourceDoc(
                    source_id=f.as_posix(),
                    text=text,
                    tenant_id=tenant_id,
                    acl=tuple(acl),
                    source_version=default_version(text),
                    source_path=str(f),
                    fmt=fmt,
                )
            )
        except InputError as err:
            report.failed.append(err.as_dict())
        except OSError as exc:
            report.failed.append({"document": str(f), "field": "path", "reason": str(exc)})
    report.timings["parse"] = report.timings.get("parse", 0.0) + time.perf_counter() - t0
    return docs


def _doc_name(doc: SourceDoc) -> str:
    return doc.source_path or doc.source_id


def chunk_documents(
    docs: Sequence[SourceDoc], chunker: Chunker, report: IngestReport, *, progress: bool = False
) -> tuple[list[Chunk], list[Chunk]]:
    """Chunk every document; a failing document is reported and skipped, a child over the model's input
    limit is reported in ``report.warnings``.

    Args:
        docs: Sources.
        chunker: The chunker (any strategy).
        report: Receives failures, warnings, counts and the chunking time.
        progress: Show a progress bar.
    """
    t0 = time.perf_counter()
    children: list[Chunk] = []
    parents: list[Chunk] = []
    limit = chunker.tokenizer.max_tokens
    for doc in tqdm(docs, desc="chunk", unit="doc", disable=not progress):
        try:
            chunks = chunker.chunk(
                doc.text,
                source_id=doc.source_id,
                source_version=doc.source_version,
                tenant_id=doc.tenant_id,
                acl=doc.acl,
                title=doc.title,
                source_path=doc.source_path,
                fmt=doc.fmt,
            )
            if not any(c.kind == "child" for c in chunks):
                raise InputError(_doc_name(doc), "text", "no chunkable text (e.g. headings only)")
        except InputError as err:
            report.failed.append(err.as_dict())
            continue
        report.sources += 1
        for c in chunks:
            if c.kind == "parent":
                parents.append(c)
                continue
            children.append(c)
            if limit is not None and c.token_count > limit:
                report.warnings.append(
                    {
                        "document": _doc_name(doc),
                        "field": "contextual_text" if c.contextual_text is not None else "text",
                        "reason": (
                            f"chunk {c.chunk_id} (chars {c.start_offset}-{c.end_offset}) has {c.token_count} tokens, "
                            f"over the model's input limit of {limit}: its embedding would be truncated"
                        ),
                    }
                )
    report.chunks += len(children)
    report.parents += len(parents)
    report.timings["chunk"] = report.timings.get("chunk", 0.0) + time.perf_counter() - t0
    return children, parents


def section_units(children: Sequence[Chunk], parents: Sequence[Chunk]) -> list[Chunk]:
    """Retrieval units of server-side chunking: each source's parent sections, or its chunks when its
    strategy makes no parents (``fixed``, ``recursive``, ``structure``).

    Args:
        children: Child chunks of every source.
        parents: Parent sections of every source.
    """
    with_parents = {(p.tenant_id, p.source_id) for p in parents}
    return [*parents, *(c for c in children if (c.tenant_id, c.source_id) not in with_parents)]


def ingest_documents(
    docs: Sequence[SourceDoc],
    *,
    chunker: Chunker,
    embedder: Any,
    backend: SearchBackend,
    report: IngestReport | None = None,
    batch_size: int = 256,
    progress: bool = False,
    listeners: Sequence[LineageListener] = (),
    server_chunking: bool = False,
) -> IngestReport:
    """Chunk, embed (in batches) and index ``docs``, then switch each source to its new version.

    With ``server_chunking`` (``vector_mode=semantic_text``) the retrieval units written to the chunk
    index are the *sections* -- each source's parent chunks, or its chunks when the strategy makes no
    parents -- and Elasticsearch chunks and embeds them in the ``semantic_text`` field. Their lineage
    (ids, offsets, heading path, version) is the section's; the server-side chunks inside a section have
    no id or offsets of their own (see :func:`es_rag.elasticsearch.responses.locate_server_chunk`).

    Args:
        docs: Sources.
        chunker: The chunker.
        embedder: Anything with ``embed_documents`` and ``version``; None when the cluster embeds.
        backend: Destination.
        report: Report to extend (e.g. with file-reading failures).
        batch_size: Chunks per embedding + indexing batch.
        progress: Show progress bars.
        listeners: Told about every retired version.
        server_chunking: Write sections as retrieval units and let the cluster chunk and embed them;
            ``embedder`` must then be None.
    """
    if server_chunking and embedder is not None:
        raise InputError("ingest", "embedder", "server-side chunking embeds in Elasticsearch: pass embedder=None")
    report = report or IngestReport()
    warned = len(report.warnings)
    children, parents = chunk_documents(docs, chunker, report, progress=progress)
    if server_chunking:
        children = section_units(children, parents)
        # the model's input limit is the server chunker's concern here, not a per-section warning
        del report.warnings[warned:]
    store = backend.version_store()
    # (tenant -> sources) that produced chunks; begin: hide the new versions while they are written.
    by_tenant: dict[str, list[Pair]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for c in (*parents, *children):
        if (c.tenant_id, c.source_id) not in seen:
            seen.add((c.tenant_id, c.source_id))
            by_tenant[c.tenant_id].append((c.source_id, c.source_version))
    t0 = time.perf_counter()
    switching = {tenant: store.begin(tenant, pairs) for tenant, pairs in by_tenant.items()}
    report.timings["index"] += time.perf_counter() - t0
    failed_before = len(report.failed)
    bar = tqdm(total=len(children), desc="embed+index", unit="chunk", disable=not progress)
    for start in range(0, len(children), batch_size):
        batch = children[start : start + batch_size]
        if embedder is not None:
            t0 = time.perf_counter()
            vectors = embedder.embed_documents([c.embed_text for c in batch])
            batch = [c.with_vector(v, embedder.version) for c, v in zip(batch, vectors, strict=True)]
            report.timings["embed"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        report.merge(backend.index(batch))
        report.timings["index"] += time.perf_counter() - t0
        bar.update(len(batch))
    bar.close()
    t0 = time.perf_counter()
    if parents:
        report.merge(backend.index([], parents))
    names = {c.source_path or c.source_id: (c.tenant_id, c.source_id) for c in (*parents, *children)}
    broken = {names[f["document"]] for f in report.failed[failed_before:] if f.get("document") in names}
    store.refresh()
    for tenant, pairs in switching.items():
        ok = [p for p in pairs if (tenant, p[0]) not in broken]
        bad = [p for p in pairs if (tenant, p[0]) in broken]
        retired = store.commit(tenant, ok) if ok else []
        for source_id, version in ok:
            old = next((v for s, v in retired if s == source_id), None)
            report.switched.append(
                {"tenant_id": tenant, "source_id": source_id, "version": version, "retired": old or ""}
            )
        purged = store.purge(tenant, [*retired, *bad])
        if not purged.clean:
            for source_id, version in [*retired, *bad]:
                report.warnings.append(
                    {
                        "document": source_id,
                        "field": "source_version",
                        "reason": f"old version {version} not fully deleted ({purged.describe()}); it stays "
                        "hidden and is never served; re-ingest or run delete-source to remove it",
                    }
                )
        for source_id, old in retired:
            for listener in listeners:
                listener.on_retired(tenant, source_id, old)
    report.timings["index"] += time.perf_counter() - t0
    return report


def delete_source(
    backend: SearchBackend, tenant_id: str, source_id: str, *, listeners: Sequence[LineageListener] = ()
) -> dict[str, Any]:
    """Delete every child, parent and registry entry of a tenant's source (all versions), tell the
    listeners (cached entries), and return ``{"deleted": n, "remaining": {"chunks": 0, "parents": 0}}``.

    Args:
        backend: Elasticsearch or embedded backend.
        tenant_id: The tenant.
        source_id: The source.
        listeners: Told that the source is gone.

    """
    result = backend.version_store().delete_source(tenant_id, source_id)
    for listener in listeners:
        listener.on_deleted(tenant_id, source_id)
    return result
