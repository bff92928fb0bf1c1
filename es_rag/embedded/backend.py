"""Embedded reference backend: bm25s BM25 + exact (flat) numpy kNN, persisted to a directory.

It applies the same :class:`~es_rag.filters.SearchFilter` predicate as the Elasticsearch filter
clauses *before* taking the top k of each channel (as Elasticsearch's filtered queries and
filtered kNN do), and its channel lists are fused by the same client-side RRF. BM25 mirrors a
``multi_match`` ``best_fields`` query: one BM25 index per field (title, heading_path, text), the
document score is the best boosted field score. The scores are Lucene's (one-byte length norms, ``docCount``
of the documents that have the field; :mod:`es_rag.embedded.lexical`): ``tests/lucene`` compares them with real
Lucene 10.5's on SciFact and the debian-docs sets (the same top 10 for every query, within 1e-6 relative).

Tokenisation (every field and the query): the mirror of the configured Elasticsearch analyzer
(``standard``, ``english``, ``cjk``: :mod:`es_rag.embedded.analyzers`); without one, lower-cased Unicode word runs
with runs of CJK characters as overlapping bigrams (:func:`es_rag.embedded.analyzers.analyze`, re-exported here).
Per-language subfields (``text.en``, ``title.ja``: ``--languages``, :mod:`es_rag.languages`) are BM25 indexes of the
same field values under the mirror of that language's analyzer (``english``; ``cjk`` for ja, zh, ko, as the
template's ``kuromoji`` has no mirror), built the first time a query searches them; a query is analysed per field,
as ``multi_match`` does, and a field the index lacks scores nothing (Elasticsearch skips an unmapped field).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.backend import EmbeddingState, IndexReport, Retrieval, content_hash, validate_chunk_source
from es_rag.embedded import store
from es_rag.embedded.analyzers import analyze as analyze  # re-export: es_rag.embedded.backend.analyze
from es_rag.embedded.analyzers import get_analyzer
from es_rag.embedded.columns import FilterColumns, exact_mask
from es_rag.embedded.generations import live_directory
from es_rag.embedded.ident import IdentIndex
from es_rag.embedded.lexical import EXACT_CHANNEL_FIELDS as EXACT_CHANNEL_FIELDS  # re-exported
from es_rag.embedded.lexical import LexicalChannels, field_weights
from es_rag.embedded.lexical import _scorable_tokens as _scorable_tokens  # re-exported (tests)
from es_rag.embedded.store import LOCK_TIMEOUT_S as LOCK_TIMEOUT_S  # re-exported
from es_rag.embedded.store import write_lock as write_lock  # re-exported: es_rag.embedded.backend.write_lock
from es_rag.embedded.vectors import filtered_knn, knn_rows, unit_rows, vector_refusal
from es_rag.embedded.vectors import knn_scores as knn_scores  # re-exported
from es_rag.embedded.versions import EmbeddedVersionStore
from es_rag.errors import ConfigError, InputError
from es_rag.filters import SearchFilter
from es_rag.languages import DEFAULT_LANGUAGES, LANGUAGE_FIELDS, parse_languages
from es_rag.query import plan_search
from es_rag.records import Chunk, Hit
from es_rag.settings import Analyzer, RetrieveSettings, Settings, Similarity
from es_rag.versions.registry import VersionSnapshot

LANGUAGE_MIRRORS = {"english": Analyzer.ENGLISH, "cjk": Analyzer.CJK, "kuromoji": Analyzer.CJK}
"""The embedded mirror of each per-language analyzer of the templates (kuromoji: cjk bigrams)."""


class EmbeddedBackend(LexicalChannels):
    """Local backend stored in ``directory`` (created on first write).

    Threads: reads (searches, counts, parents, neighbours) may run at the same time -- the search structures a write
    invalidates are rebuilt once, under a lock, by whichever read comes first (or by :meth:`refresh`). A write
    (:meth:`index`, :meth:`delete_source`, version switches) must not overlap any read or other write:
    :class:`es_rag.client.RagClient` serialises them; across processes, :func:`write_lock`.

    Args:
        directory: Where chunks, parents and vectors are persisted; None keeps everything in memory. A folder with
            blue-green generations (a ``CURRENT`` pointer) opens its live generation.
        dims: Vector dimension (checked against stored data and every write).
        bm25_k1: BM25 k1 (Lucene default 1.2).
        bm25_b: BM25 b (Lucene default 0.75).
        analyzer: Mirror of the Elasticsearch analyzer (``standard``, ``english``, ``cjk``; see
            :mod:`es_rag.embedded.analyzers`) used for every field and the query;
            None = :func:`~es_rag.embedded.analyzers.analyze`.
        bm25_fields: ``multi_match`` fields with boosts (default: ``settings.retrieve.bm25_fields``).
        tie_breaker: ``best_fields`` tie_breaker: best boosted field score + this x the other fields' scores.
        similarity: The ``dense_vector`` similarity: kNN scores (and the vectors it accepts) follow it as
            Elasticsearch computes them (:func:`knn_scores`). None: the stored index's, else cosine; a stored
            index keeps the similarity it was built with (another one is refused, as a mapping change would be).
        languages: The per-language subfields (``--languages``: ``en``, ``ja``, ``ja:kuromoji``); None: the
            default (:data:`es_rag.languages.DEFAULT_LANGUAGES`).
    """

    name = "embedded"

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        dims: int | None = None,
        bm25_k1: float = 1.2,
        bm25_b: float = 0.75,
        analyzer: Analyzer | str | None = None,
        bm25_fields: Sequence[str] | None = None,
        tie_breaker: float = 0.0,
        similarity: Similarity | str | None = None,
        languages: Sequence[str] | None = None,
    ) -> None:
        self.similarity = Similarity(similarity) if similarity is not None else Similarity.COSINE
        self._similarity_given = similarity is not None
        self.root = Path(directory) if directory is not None else None
        """The folder given; :attr:`directory` is the live generation's inside it
        (:mod:`es_rag.embedded.generations`)."""
        self.directory = live_directory(directory) if directory is not None else None
        self.dims = dims
        self.k1 = bm25_k1
        self.b = bm25_b
        self.analyzer = None if analyzer is None else Analyzer(analyzer)
        self._analyze = get_analyzer(self.analyzer)
        self._fields = field_weights(tuple(bm25_fields) if bm25_fields is not None else RetrieveSettings().bm25_fields)
        self.tie_breaker = float(tie_breaker)
        analyses = parse_languages(DEFAULT_LANGUAGES if languages is None else languages)
        self.languages = {a.code: LANGUAGE_MIRRORS[a.analyzer] for a in analyses}
        """Subfield language -> the analyzer mirror of its BM25 index."""
        self._field_lock = threading.Lock()
        self._children: dict[str, dict[str, Any]] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._packed: tuple[list[str], np.ndarray] | None = None
        """``(ids, matrix)`` when every vector is a row of ``matrix`` in ``ids`` order (after a save or a load): the
        refresh takes the matrix as it is instead of stacking another copy."""
        self._parents: dict[str, dict[str, Any]] = {}
        # Version registry, tenant -> registry document (es_rag.versions.registry.RegistryState.to_doc()).
        self.versions: dict[str, dict[str, Any]] = {}
        self._dirty = True
        self._embedding: EmbeddingState | None = None
        self._ids: list[str] = []
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._columns = FilterColumns([])
        self._bm25: dict[str, Any] = {}
        self._ident_index: dict[str, IdentIndex] = {}
        self._groups: dict[tuple[Any, Any, Any], list[dict[str, Any]]] | None = None
        self._refresh_lock = threading.Lock()
        self._commit: int | None = None  # the commit the documents in memory are, None once written to
        self._committed = ""  # _registry_state() of that commit
        self.embedding_model: str | None = None
        """The embedding model the index was built with (``embedding_model`` as the ingest was given it), saved in its
        manifest: a search left to ``embedding_model = "auto"`` uses it (:func:`es_rag.wiring.index_settings`)."""
        if self.directory is not None:
            self._load()

    # -- persistence ---------------------------------------------------------------------------
    def _load(self) -> None:
        """Read the committed index (:func:`es_rag.embedded.store.read`: every file checked, one commit)."""
        assert self.directory is not None
        snap = store.read(self.directory)
        if snap is None:
            return
        meta = snap.meta
        stored_dims = meta.get("dims")
        if self.dims is not None and stored_dims is not None and stored_dims != self.dims:
            raise ConfigError(f"{self.directory}: index holds {stored_dims}-dim vectors, settings say {self.dims}")
        self.dims = stored_dims
        stored_similarity = Similarity(meta.get("similarity", Similarity.COSINE.value))
        if self._similarity_given and stored_similarity is not self.similarity:
            raise ConfigError(
                f"{self.directory}: index was built with similarity {stored_similarity.value}, settings say "
                f"{self.similarity.value} (a new index is needed, as on Elasticsearch)"
            )
        self.similarity = stored_similarity
        self.embedding_model = meta.get("embedding_model")
        self._commit = meta.get("commit")
        for doc, vec in zip(snap.children, snap.vectors, strict=True):
            self._children[doc["chunk_id"]] = doc
            self._vectors[doc["chunk_id"]] = vec
        self._packed = (list(self._children), snap.vectors) if len(snap.vectors) == len(self._children) else None
        self._parents = {doc["chunk_id"]: doc for doc in snap.parents}
        self.versions = snap.versions
        self._committed = self._registry_state()
        self._dirty = True
        self._embedding = None

    def flush(self) -> None:
        """Commit the store to ``directory``: all files or none (:func:`es_rag.embedded.store.write`).

        Raises:
            es_rag.embedded.store.DiskFull: No room; the previous commit is still the index.
        """
        if self.directory is None:
            return
        if self._commit is not None and self._registry_state() == self._committed:
            return  # nothing changed since the commit (an unchanged re-run): no rewrite, its token caches stay
        ids = list(self._children)
        packed = self._packed
        if packed is not None and packed[0] == ids:
            matrix = packed[1]
        elif ids:
            matrix = np.stack([self._vectors[c] for c in ids], dtype=np.float32)
            # every vector becomes a view of its row: one copy is kept, not the per-chunk arrays and this matrix
            self._vectors = {c: matrix[i] for i, c in enumerate(ids)}
            self._packed = (ids, matrix)
        else:
            matrix = np.zeros((0, self.dims or 0), np.float32)
        meta = {
            "dims": self.dims,
            "similarity": self.similarity.value,
            "chunks": len(ids),
            "parents": len(self._parents),
        }
        if self.embedding_model:
            meta["embedding_model"] = self.embedding_model
        manifest = store.write(
            self.directory,
            meta=meta,
            children=(self._children[c] for c in ids),
            vectors=matrix,
            parents=self._parents.values(),
            versions=self.versions,
        )
        self._commit = int(manifest["commit"])
        self._committed = self._registry_state()

    def _registry_state(self) -> str:
        """What a save holds besides the documents (the registry, the embedding model), to tell a change."""
        return json.dumps([self.versions, self.embedding_model], sort_keys=True, ensure_ascii=False)

    # -- writes --------------------------------------------------------------------------------
    def _prepare(self, chunk: Chunk) -> dict[str, Any]:
        doc = chunk.to_source(include_vector=False)
        validate_chunk_source(doc, document=chunk.source_path or chunk.source_id or chunk.chunk_id)
        doc["content_hash"] = content_hash(doc["text"])
        doc["ingested_at"] = datetime.now(timezone.utc).isoformat()
        if chunk.source_path is not None:
            doc["source_path"] = chunk.source_path
        return doc

    def index(self, chunks: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> IndexReport:
        """Upsert children (each needs a vector) and parents; every bad document is reported, the rest land.

        Args:
            chunks: Child chunks with vectors.
            parents: Parent sections.
        """
        report = IndexReport()
        for chunk in chunks:
            name = chunk.source_path or chunk.source_id or chunk.chunk_id
            try:
                doc = self._prepare(chunk)
                if chunk.vector is None:
                    raise InputError(name, "vector", f"chunk {chunk.chunk_id} has no vector")
                vec = np.asarray(chunk.vector, dtype=np.float32).reshape(-1)
                if self.dims is None:
                    self.dims = int(vec.shape[0])
                if vec.shape[0] != self.dims:
                    raise InputError(name, "vector", f"has {vec.shape[0]} dims, the index holds {self.dims}")
                if not np.all(np.isfinite(vec)):
                    raise InputError(name, "vector", "contains NaN or infinity")
                refused = vector_refusal(vec, self.similarity)
                if refused:
                    raise InputError(name, "vector", refused)
            except InputError as err:
                report.failed.append(err.as_dict())
                continue
            self._children[doc["chunk_id"]] = doc
            self._vectors[doc["chunk_id"]] = vec
            report.indexed += 1
        for parent in parents:
            try:
                doc = self._prepare(parent)
            except InputError as err:
                report.failed.append(err.as_dict())
                continue
            self._parents[doc["chunk_id"]] = doc
            report.indexed += 1
        self._dirty = True
        self._packed = None  # a vector may have been replaced: the next save or refresh stacks them again
        self._embedding = None
        self._commit = None
        return report

    def delete_source(
        self, source_id: str | None, *, tenant_id: str | None = None, version_keys: Collection[str] | None = None
    ) -> int:
        """Remove every child and parent of ``source_id`` (optionally only ``tenant_id``'s, only the given
        ``version_keys``); returns how many documents went.

        Args:
            source_id: The source to remove; None with ``version_keys`` removes those versions of any source.
            tenant_id: Restrict to this tenant.
            version_keys: Restrict to these ``source_id@source_version`` keys.
        """

        def doomed(d: dict[str, Any]) -> bool:
            return (
                (source_id is None or d["source_id"] == source_id)
                and (tenant_id is None or d.get("tenant_id") == tenant_id)
                and (version_keys is None or d.get("version_key") in version_keys)
            )

        gone = [c for c, d in self._children.items() if doomed(d)]
        for cid in gone:
            del self._children[cid]
            del self._vectors[cid]
        pgone = [c for c, d in self._parents.items() if doomed(d)]
        for cid in pgone:
            del self._parents[cid]
        self._dirty = True
        self._packed = None
        self._embedding = None
        self._commit = None
        return len(gone) + len(pgone)

    def tenants(self) -> set[str]:
        """The tenants that have chunks in this index."""
        return {str(d.get("tenant_id")) for d in self._children.values()}

    def lineage_counts(self, tenant_id: str, source_id: str) -> dict[str, int]:
        """Children and parents of a tenant's source still stored (verifies a delete).

        Args:
            tenant_id: The tenant.
            source_id: The source.
        """

        def n(docs: dict[str, dict[str, Any]]) -> int:
            return sum(1 for d in docs.values() if d["source_id"] == source_id and d.get("tenant_id") == tenant_id)

        return {"chunks": n(self._children), "parents": n(self._parents)}

    # -- reads ---------------------------------------------------------------------------------
    def with_bm25_query(self, bm25_fields: Sequence[str], tie_breaker: float) -> EmbeddedBackend:
        """A read-only view of this index that queries other ``multi_match`` fields, boosts and ``tie_breaker`` --
        query-time settings on Elasticsearch, so changing them needs no new index there, and none here (the view
        shares the per-field BM25 indexes and the vectors; a field not indexed yet is built by the view on first
        use). ``es-rag tune`` scores many query set-ups on one index this way.

        The view must not be written to, nor the index it came from while the view is read.

        Args:
            bm25_fields: Fields with boosts (``title^2``).
            tie_breaker: ``best_fields`` tie_breaker.
        """
        import copy

        self._refresh()
        view = copy.copy(self)
        view._fields = field_weights(tuple(bm25_fields))
        view.tie_breaker = float(tie_breaker)
        view._field_lock = threading.Lock()  # a field the index lacks is built by the view, for the view
        return view

    def refresh(self) -> None:
        """Build the search structures (BM25 per field, the vector matrix) now rather than on the next read."""
        self._refresh()

    def prepare_search(self) -> None:
        """Build every BM25 field a search may read (the configured ones and their per-language subfields) now: after
        a commit their analysed tokens are saved with it, so the next cold search reads them instead of analysing
        every chunk (``es-rag ingest`` calls it after saving)."""
        self._refresh()
        for fld, _ in self._fields:
            base = fld.partition(".")[0]
            for name in (base, *(f"{base}.{code}" for code in self.languages if base in LANGUAGE_FIELDS)):
                self._field_index(name)
        for fld in EXACT_CHANNEL_FIELDS:
            self._ident_field(fld)

    def _refresh(self) -> None:
        if not self._dirty:
            return
        with self._refresh_lock:  # two concurrent reads of a changed store: one builds, the other waits
            if not self._dirty:
                return
            ids = list(self._children)
            docs = [self._children[c] for c in ids]
            # One float32 copy of the vectors (a 48 MB file makes 286 MB of them: three transient copies and two kept
            # were most of an ingest's memory). Rows kNN reads as they are stored -- unit length already for cosine
            # (sentence-transformers normalises), or any rows for the other similarities -- are the stored vectors
            # themselves: each chunk's vector becomes a view of its row, and no second copy is kept.
            matrix = np.zeros((0, self.dims or 0), np.float32)
            shared = False
            if ids:
                packed = self._packed
                if packed is not None and packed[0] == ids and packed[1].dtype == np.float32:
                    stacked, owned = packed[1], False  # the vectors are its rows already (a save or a load)
                else:
                    stacked, owned = np.stack([self._vectors[c] for c in ids], dtype=np.float32), True
                shared = self.similarity is not Similarity.COSINE or unit_rows(stacked)
                matrix = stacked if shared else knn_rows(stacked, self.similarity, in_place=owned)
                shared = shared and owned
            # The filter columns, built with the matrix in the same row order (es_rag.embedded.columns).
            columns = FilterColumns(docs)
            indices: dict[str, Any] = {fld: self._build_field(fld, docs) for fld, _ in self._fields}
            # published only when complete: a read never sees new ids with an old matrix or a half-built BM25
            self._ids, self._matrix, self._bm25, self._columns = ids, matrix, indices, columns
            if shared:
                self._vectors = {c: matrix[i] for i, c in enumerate(ids)}
                self._packed = (ids, matrix)
            self._ident_index = {}  # built lazily by _ident_field: the exact channel's token lists and postings
            self._groups = None  # built lazily by _neighbor_groups
            self._dirty = False

    def count(self, flt: SearchFilter | None = None) -> int:
        """Number of child chunks stored (only those ``flt`` allows, when given).

        Args:
            flt: Optional hard filter.
        """
        if flt is None:
            return len(self._children)
        flt = self.snapshot_versions(flt)
        self._refresh()
        return int(np.count_nonzero(self._mask(flt))) if self._ids else 0

    def snapshot_versions(self, flt: SearchFilter) -> SearchFilter:
        """``flt`` with the tenant's active-version snapshot from the registry (:mod:`es_rag.versions.registry`).

        A filter that already carries a snapshot (the pipeline gates once per call) is returned as it is.

        Args:
            flt: The caller's hard filter.
        """
        if flt.versions is not None:
            return flt
        return flt.with_versions(VersionSnapshot.from_doc(flt.tenant_id, self.versions.get(flt.tenant_id)))

    def embedding_state(self, refresh: bool = False) -> EmbeddingState:
        """Which ``embedding_version`` values the stored chunks carry (counted once after each write).

        Args:
            refresh: Count again.
        """
        state = self._embedding
        if state is None or refresh:
            versions: dict[str, int] = {}
            unversioned = 0
            for doc in self._children.values():
                version = doc.get("embedding_version")
                if version is None:
                    unversioned += 1
                else:
                    versions[str(version)] = versions.get(str(version), 0) + 1
            where = (str(self.directory),) if self.directory is not None else ()
            state = EmbeddingState(versions, unversioned, where)
            self._embedding = state
        return state

    def version_store(self) -> EmbeddedVersionStore:
        """Version switches and source deletes on this store."""
        return EmbeddedVersionStore(self)

    def all_hits(self) -> list[Hit]:
        """Every child chunk as a hit, in storage order (the evaluation reads passage texts from them)."""
        self._refresh()
        return [self._hit(i) for i in range(len(self._ids))]

    def _mask(self, flt: SearchFilter) -> np.ndarray:
        """The rows of the current index state that ``flt`` allows: numpy operations over the filter columns, or
        ``flt.matches`` per chunk when the filter's predicate is not the one the columns encode."""
        if FilterColumns.vectorises(flt):
            return self._columns.mask(flt)
        return exact_mask(flt, [self._children[c] for c in self._ids])

    def _neighbor_groups(self) -> dict[tuple[Any, Any, Any], list[dict[str, Any]]]:
        """Children by ``(source_id, source_version, parent_id)`` in ``start_offset`` order, built once per index
        state (the first neighbour expansion after a write), so an anchor reads its group instead of every chunk."""
        self._refresh()
        groups = self._groups
        if groups is None:
            groups = {}
            for d in self._children.values():
                groups.setdefault((d["source_id"], d.get("source_version"), d.get("parent_id")), []).append(d)
            for members in groups.values():
                members.sort(key=lambda d: int(d.get("start_offset") or 0))
            self._groups = groups
        return groups

    def _hit(self, i: int) -> Hit:
        cid = self._ids[i]
        return Hit.from_source(self._children[cid], vector=self._vectors[cid])

    def knn(self, query_vector: np.ndarray, flt: SearchFilter, k: int, *, mask: np.ndarray | None = None) -> list[Hit]:
        """Exact filtered kNN, scored as Elasticsearch scores the configured similarity (:func:`knn_scores`).

        Args:
            query_vector: Query embedding.
            flt: Hard filter, applied before the top k.
            k: Number of hits.
            mask: Precomputed filter mask (internal reuse).
        """
        self._refresh()
        if not self._ids:
            return []
        mask = self._mask(flt) if mask is None else mask
        q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._matrix.shape[1]:
            raise ConfigError(f"query vector has {q.shape[0]} dims, the index holds {self._matrix.shape[1]}")
        rows, scores = filtered_knn(self._matrix, q, self.similarity, np.flatnonzero(mask), k)
        return [self._hit(int(i)).replace(dense_score=float(s)) for i, s in zip(rows, scores, strict=True)]

    def retrieve(
        self, query_text: str, query_vector: np.ndarray | None, flt: SearchFilter, settings: Settings
    ) -> Retrieval:
        """BM25 and kNN channels with the same filter; fusion is left to the client-side RRF.

        Args:
            query_text: The query.
            query_vector: The query embedding, or None for BM25 only.
            flt: Hard filter.
            settings: Candidate counts.
        """
        flt = self.snapshot_versions(flt)
        self._refresh()
        mask = self._mask(flt) if self._ids else np.zeros(0, dtype=bool)
        plan = plan_search(query_text, query_vector, settings, native_available=False)
        k = settings.retrieve.candidate_k
        channels: dict[str, list[Hit]] = {}
        took: dict[str, float] = {}
        for name in plan.channels:
            t0 = time.perf_counter()
            if name == "bm25":
                fields = plan.bm25.fields if plan.bm25 is not None else None
                channels[name] = self.bm25(query_text, flt, k, mask=mask, fields=fields)
            elif name == "dense" and query_vector is not None:
                channels[name] = self.knn(query_vector, flt, k, mask=mask)
            elif name == "exact":
                channels[name] = self.exact(list(plan.identifiers), flt, k, mask=mask)
            took[name] = (time.perf_counter() - t0) * 1000
        notes = plan.notes
        return Retrieval(channels=channels, fused=None, path="embedded", took_ms=took, notes=notes)

    def get_parents(self, parent_ids: Sequence[str], flt: SearchFilter) -> dict[str, Hit]:
        """Parents by id, only those the filter allows.

        Args:
            parent_ids: Parent chunk ids.
            flt: Hard filter.
        """
        out = {}
        flt = self.snapshot_versions(flt)
        for pid in parent_ids:
            doc = self._parents.get(pid)
            if doc is not None and flt.matches(doc):
                out[pid] = Hit.from_source(doc)
        return out

    def get_neighbors(self, anchors: Sequence[Hit], flt: SearchFilter, window: int) -> dict[str, list[Hit]]:
        """Up to ``window`` children before and after each anchor (same source, version and parent),
        only those the filter allows, in document order.

        Args:
            anchors: Selected child hits.
            flt: Hard filter.
            window: Children per side.
        """
        out: dict[str, list[Hit]] = {}
        flt = self.snapshot_versions(flt)
        groups = self._neighbor_groups() if anchors and window >= 1 else {}
        for a in anchors:
            if a.start_offset is None or window < 1:
                continue
            same = [d for d in groups.get((a.source_id, a.source_version, a.parent_id), ()) if flt.matches(d)]
            before = [d for d in same if int(d["start_offset"]) < a.start_offset][-window:]
            after = [d for d in same if int(d["start_offset"]) > a.start_offset][:window]
            out[a.chunk_id] = [Hit.from_source(d) for d in before + after]
        return out
