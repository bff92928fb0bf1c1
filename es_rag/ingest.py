"""Ingestion: files -> chunks (parents + children) -> embeddings -> backend, with a per-document report.

A bad document (unreadable, binary, not UTF-8, empty, missing tenant) is reported with its name,
field and reason; every good document is still indexed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from es_rag.backends.base import IndexReport, SearchBackend
from es_rag.chunking import StructureChunker
from es_rag.errors import InputError
from es_rag.models import Chunk

SUFFIX_FORMAT = {".md": "markdown", ".markdown": "markdown", ".txt": "plain", ".text": "plain"}
MAX_FILE_BYTES = 50 * 1024 * 1024


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
    """Bulk outcome plus how many sources and chunks were processed."""

    sources: int = 0
    chunks: int = 0
    parents: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "sources": self.sources,
            "chunks": self.chunks,
            "parents": self.parents,
            "indexed": self.indexed,
            "failed": self.failed,
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


def load_files(
    paths: Sequence[str | Path], *, tenant_id: str, acl: Sequence[str], report: IngestReport
) -> list[SourceDoc]:
    """Read files into :class:`SourceDoc` records; failures go into ``report``.

    Args:
        paths: Files and directories.
        tenant_id: Tenant of every document.
        acl: ACL groups of every document.
        report: Receives one row per unreadable document.
    """
    docs = []
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
    return docs


def chunk_documents(
    docs: Sequence[SourceDoc], chunker: StructureChunker, report: IngestReport, *, progress: bool = False
) -> tuple[list[Chunk], list[Chunk]]:
    """Chunk every document; a failing document is reported and skipped.

    Args:
        docs: Sources.
        chunker: The chunker.
        report: Receives failures and counts.
        progress: Show a progress bar.
    """
    children: list[Chunk] = []
    parents: list[Chunk] = []
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
        except InputError as err:
            report.failed.append(err.as_dict())
            continue
        report.sources += 1
        parents.extend(c for c in chunks if c.kind == "parent")
        children.extend(c for c in chunks if c.kind == "child")
    report.chunks += len(children)
    report.parents += len(parents)
    return children, parents


def ingest_documents(
    docs: Sequence[SourceDoc],
    *,
    chunker: StructureChunker,
    embedder: Any,
    backend: SearchBackend,
    report: IngestReport | None = None,
    batch_size: int = 256,
    progress: bool = False,
) -> IngestReport:
    """Chunk, embed (in batches) and index ``docs``.

    Args:
        docs: Sources.
        chunker: The chunker.
        embedder: Anything with ``embed_documents`` and ``version``; None when the cluster embeds.
        backend: Destination.
        report: Report to extend (e.g. with file-reading failures).
        batch_size: Chunks per embedding + indexing batch.
        progress: Show progress bars.
    """
    report = report or IngestReport()
    children, parents = chunk_documents(docs, chunker, report, progress=progress)
    bar = tqdm(total=len(children), desc="embed+index", unit="chunk", disable=not progress)
    for start in range(0, len(children), batch_size):
        batch = children[start : start + batch_size]
        if embedder is not None:
            vectors = embedder.embed_documents([c.text for c in batch])
            batch = [c.with_vector(v, embedder.version) for c, v in zip(batch, vectors, strict=True)]
        report.merge(backend.index(batch))
        bar.update(len(batch))
    bar.close()
    if parents:
        report.merge(backend.index([], parents))
    return report
