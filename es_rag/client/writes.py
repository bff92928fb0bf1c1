"""The write side of :class:`~es_rag.client.RagClient`: ingest (files and texts) and delete, serialised."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from es_rag.client.common import _groups, _tenant
from es_rag.errors import ConfigError, InputError
from es_rag.settings import Settings

if TYPE_CHECKING:
    from es_rag.encoders.embedder import LocalEmbedder
    from es_rag.ingest import IngestReport, SourceDoc
    from es_rag.ingest.sync import SyncScope
    from es_rag.pipeline import RagPipeline


T = TypeVar("T")


class ClientWrites:
    """Ingests and deletes of a :class:`~es_rag.client.RagClient` (a mixin: the client holds the state)."""

    _settings: Settings
    _backend: Any
    _on_cluster: bool
    _index_dir: Path | None
    _pipeline: RagPipeline | None
    _write_mutex: threading.Lock
    _rw: Any

    def _check_open(self) -> None:
        raise NotImplementedError

    def _loaded_embedder(self) -> LocalEmbedder:
        raise NotImplementedError

    def _listeners(self) -> list[Any]:
        raise NotImplementedError

    def _write(self, work: Callable[[Any], T]) -> T:
        """Run ``work(backend)`` as this client's only writer (see the class docstring for what it excludes)."""
        with self._write_mutex:
            self._check_open()
            if self._on_cluster:
                return work(self._backend)
            if self._index_dir is None:
                with self._rw.write():
                    return work(self._backend)
            from es_rag.embedded.backend import write_lock
            from es_rag.wiring import embedded_backend

            with write_lock(self._index_dir):
                fresh = embedded_backend(self._settings, self._index_dir)  # what is on disk now, every writer's
                result = work(fresh)
                fresh.flush()
            fresh.refresh()  # BM25 and vectors built here, not in the first search after the swap
            with self._rw.write():
                self._backend = fresh
                if self._pipeline is not None:
                    self._pipeline.backend = fresh
            return result

    def ingest(
        self,
        paths: str | Path | Sequence[str | Path],
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        base_dir: str | Path | None = None,
        source_id: str | None = None,
        ignore_file: str | Path | None = None,
        sync: bool = False,
        strategy: str = "parent-child",
        contextual: bool = False,
        parent_max_tokens: int | None = None,
        meta: Mapping[str, Any] | None = None,
        updated_from_mtime: bool = False,
    ) -> IngestReport:
        """Chunk, embed and index files and folders, as ``es-rag ingest`` does: folder walks skip hidden, vendor and
        index folders, ignore-file matches and unsupported types (``report.skipped``); a bad document is reported
        (``report.failed``) and the others are indexed; each source switches to its new version only when all its
        chunks landed. Nothing to read returns the report without loading a model.

        Args:
            paths: Files and folders (or one).
            tenant: Tenant written into every chunk (required).
            acl: Groups allowed to read the documents (default ``public``).
            base_dir: Source ids are paths relative to it (default: each folder given, or a file's own folder).
            source_id: The id of the single file given.
            ignore_file: Gitignore-style patterns skipped in every folder walked, besides each folder's own.
            sync: The index follows the folders given: after a run with no failed document, delete the tenant's
                sources they no longer yield (``report.removed``), as ``es-rag ingest --sync``.
            strategy: Chunking strategy: ``fixed``, ``recursive``, ``structure``, ``parent-child`` or ``semantic``
                (children cut where the embedding model sees the topic change); late chunking is the
                ``late_chunking`` setting of the client's settings.
            contextual: Embed ``title + heading path`` with each child.
            parent_max_tokens: Cap on parent size in tokens (``parent-child``, ``semantic``).
            meta: Metadata of every source (``es-rag ingest --meta``); a document's front matter or JSONL fields
                win. A bad field or value fails the documents it applies to, in ``report.failed``.
            updated_from_mtime: A file that declares no ``updated`` date gets its modification day.

        Raises:
            ConfigError: A missing tenant, a bad strategy, ``sync`` with a file, a missing ``base_dir``.
        """
        import itertools

        from es_rag.chunking import Strategy
        from es_rag.ingest import IngestReport, iter_files

        tenant = _tenant(tenant)
        Strategy.parse(strategy)
        items = [paths] if isinstance(paths, (str, Path)) else list(paths)
        scopes = None
        if sync:
            from es_rag.ingest.sync import sync_scopes

            scopes = sync_scopes(items, base_dir)  # a file is refused before anything is read
        self._check_open()
        report = IngestReport()
        stream = iter_files(  # read lazily, one file at a time
            items,
            tenant_id=tenant,
            acl=_groups(acl) or ("public",),
            report=report,
            base_dir=base_dir,
            source_id=source_id,
            ignore_file=ignore_file,
            exclude_dirs=[self._index_dir] if self._index_dir is not None else [],
            schema=self._settings.index.metadata_schema(),
            meta=meta,
            updated_from_mtime=updated_from_mtime,
        )
        first = next(stream, None)
        if first is None and scopes is None:
            return report
        docs = itertools.chain([] if first is None else [first], stream)
        chunking = {"strategy": strategy, "contextual": contextual, "parent_max_tokens": parent_max_tokens}
        return self._ingest(docs, report, tenant=tenant, scopes=scopes, chunking=chunking)

    def ingest_texts(
        self,
        texts: Mapping[str, str] | Iterable[tuple[str, str]],
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        format: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> IngestReport:
        """Index documents held in memory, ``{source_id: text}`` or ``(source_id, text)`` pairs, like files: the
        version is a digest of the text, an empty text or a repeated id is reported in ``report.failed``.

        Args:
            texts: The documents.
            tenant: Tenant written into every chunk (required).
            acl: Groups allowed to read them (default ``public``).
            format: ``markdown``, ``rst``, ``plain`` or ``html``; None: each id's suffix says, as for files
                (``page.html`` is HTML, ``notes.txt`` plain text), else ``markdown``.
            meta: Metadata of every document (validated like ``es-rag ingest --meta``).

        Raises:
            ConfigError: A missing tenant or an unknown format.
        """
        from es_rag.ingest import IngestReport, SourceDoc, default_version
        from es_rag.ingest.sources import JSONL_FORMATS, format_of

        tenant = _tenant(tenant)
        if format is not None and format not in JSONL_FORMATS:
            raise ConfigError(f"format: invalid value {format!r}; valid values: {', '.join(JSONL_FORMATS)}")
        groups = _groups(acl) or ("public",)
        pairs = list(texts.items()) if isinstance(texts, Mapping) else list(texts)
        report = IngestReport()
        docs: list[SourceDoc] = []
        seen: set[str] = set()
        for i, pair in enumerate(pairs):
            try:
                if not isinstance(pair, tuple) or len(pair) != 2:
                    raise InputError(f"texts[{i}]", "pair", "expected a (source_id, text) pair")
                sid, text = pair
                if not isinstance(sid, str) or not sid.strip():
                    raise InputError(f"texts[{i}]", "source_id", "missing or empty")
                if not isinstance(text, str) or not text.strip():
                    raise InputError(sid, "text", "missing, empty or not a string")
                if sid in seen:
                    raise InputError(sid, "source_id", "given twice in one call")
            except InputError as err:
                report.failed.append(err.as_dict())
                continue
            seen.add(sid)
            docs.append(
                SourceDoc(
                    source_id=sid,
                    text=text,
                    tenant_id=tenant,
                    acl=groups,
                    source_version=default_version(text),
                    fmt=format or format_of(sid),
                    meta=dict(meta or {}),
                )
            )
        self._check_open()
        if not docs:
            return report
        return self._ingest(docs, report, tenant=tenant, scopes=None, chunking={})

    def _ingest(
        self,
        docs: Iterable[SourceDoc],
        report: IngestReport,
        *,
        tenant: str,
        scopes: list[SyncScope] | None,
        chunking: Mapping[str, Any],
    ) -> IngestReport:
        from es_rag.ingest import ingest_sources

        def work(backend: Any) -> IngestReport:
            # saved by _write (an embedded folder); Elasticsearch has nothing to flush
            return ingest_sources(
                docs,
                backend=backend,
                settings=self._settings,
                embedder=self._loaded_embedder,
                report=report,
                tenant_id=tenant,
                chunking=chunking,
                sync_scopes=scopes,
                on_cluster=self._on_cluster,
                listeners=self._listeners(),
            )

        return self._write(work)

    def delete_source(self, source_id: str, *, tenant: str) -> dict[str, Any]:
        """Delete every chunk, parent and registry entry of one of the tenant's sources (all versions), as
        ``es-rag delete-source``; loads no model.

        Args:
            source_id: The source.
            tenant: Its tenant (required).

        Returns:
            ``{"deleted": n, "remaining": {"chunks": c, "parents": p}, "conflicts": k, "failures": [...]}``;
            ``deleted == 0`` with nothing remaining means the tenant has no such source.
        """
        from es_rag.ingest import delete_source

        tenant = _tenant(tenant)
        if not isinstance(source_id, str) or not source_id.strip():
            raise ConfigError(f"source_id: must be a non-empty string, got {source_id!r}")
        return self._write(lambda backend: delete_source(backend, tenant, source_id, listeners=self._listeners()))
