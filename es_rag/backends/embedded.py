"""Embedded reference backend: bm25s BM25 + exact (flat) numpy kNN, persisted to a directory.

It applies the same :class:`~es_rag.filters.SearchFilter` predicate as the Elasticsearch filter
clauses *before* taking the top k of each channel (as Elasticsearch's filtered queries and
filtered kNN do), and its channel lists are fused by the same client-side RRF. BM25 mirrors a
``multi_match`` ``best_fields`` query: one BM25 index per field (title, heading_path, text), the
document score is the best boosted field score. Scores are not bit-identical to Lucene's
(different analyzer), rankings of the same documents under the same filter are what it reproduces.

Tokenisation (used for all three fields): lower-cased Unicode word runs; runs of CJK characters
(kana, kanji, hangul) become overlapping bigrams, the scheme of Elasticsearch's ``cjk`` analyzer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.backends.base import IndexReport, Retrieval, content_hash, validate_chunk_source
from es_rag.config import Settings
from es_rag.errors import ConfigError, EsRagError, InputError
from es_rag.filters import SearchFilter
from es_rag.models import Chunk, Hit
from es_rag.queries import BM25_FIELDS

FORMAT_VERSION = 1
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff66-\uff9f]+")


def analyze(text: str) -> list[str]:
    """Tokens for BM25: lower-cased word runs, CJK runs as bigrams (single char if alone).

    Args:
        text: Text to analyze.
    """
    tokens: list[str] = []
    for word in _WORD_RE.findall(text.lower()):
        pos = 0
        for m in _CJK_RE.finditer(word):
            if m.start() > pos:
                tokens.append(word[pos : m.start()])
            run = m.group()
            tokens.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
            pos = m.end()
        if pos < len(word):
            tokens.append(word[pos:])
    return tokens


def _field_weights() -> list[tuple[str, float]]:
    out = []
    for spec in BM25_FIELDS:
        name, _, boost = spec.partition("^")
        out.append((name, float(boost) if boost else 1.0))
    return out


class EmbeddedBackend:
    """Local backend stored in ``directory`` (created on first write).

    Args:
        directory: Where chunks, parents and vectors are persisted; None keeps everything in memory.
        dims: Vector dimension (checked against stored data and every write).
        bm25_k1: BM25 k1 (Lucene default 1.2).
        bm25_b: BM25 b (Lucene default 0.75).
    """

    name = "embedded"

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        dims: int | None = None,
        bm25_k1: float = 1.2,
        bm25_b: float = 0.75,
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.dims = dims
        self.k1 = bm25_k1
        self.b = bm25_b
        self._children: dict[str, dict[str, Any]] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._parents: dict[str, dict[str, Any]] = {}
        self._dirty = True
        self._ids: list[str] = []
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._bm25: dict[str, Any] = {}
        if self.directory is not None and (self.directory / "meta.json").is_file():
            self._load()

    # -- persistence ---------------------------------------------------------------------------
    def _load(self) -> None:
        assert self.directory is not None
        meta = json.loads((self.directory / "meta.json").read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise EsRagError(f"{self.directory}: unsupported embedded index format {meta.get('format')!r}")
        stored_dims = meta.get("dims")
        if self.dims is not None and stored_dims is not None and stored_dims != self.dims:
            raise ConfigError(f"{self.directory}: index holds {stored_dims}-dim vectors, settings say {self.dims}")
        self.dims = stored_dims
        with open(self.directory / "chunks.jsonl", encoding="utf-8") as fh:
            children = [json.loads(line) for line in fh if line.strip()]
        matrix = np.load(self.directory / "vectors.npy") if children else np.zeros((0, 0), np.float32)
        for doc, vec in zip(children, matrix, strict=True):
            self._children[doc["chunk_id"]] = doc
            self._vectors[doc["chunk_id"]] = vec
        with open(self.directory / "parents.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    doc = json.loads(line)
                    self._parents[doc["chunk_id"]] = doc
        self._dirty = True

    def save(self) -> None:
        """Write the store to ``directory`` (atomic per file)."""
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        ids = list(self._children)
        tmp = self.directory / "chunks.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            for cid in ids:
                fh.write(json.dumps(self._children[cid], ensure_ascii=False) + "\n")
        tmp.replace(self.directory / "chunks.jsonl")
        matrix = np.stack([self._vectors[c] for c in ids]) if ids else np.zeros((0, self.dims or 0), np.float32)
        with open(self.directory / "vectors.npy.tmp", "wb") as fb:
            np.save(fb, matrix.astype(np.float32))
        (self.directory / "vectors.npy.tmp").replace(self.directory / "vectors.npy")
        tmp = self.directory / "parents.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            for doc in self._parents.values():
                fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
        tmp.replace(self.directory / "parents.jsonl")
        meta = {"format": FORMAT_VERSION, "dims": self.dims, "chunks": len(ids), "parents": len(self._parents)}
        (self.directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

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
        return report

    def delete_source(self, source_id: str) -> int:
        """Remove every child and parent of ``source_id``; returns how many documents went.

        Args:
            source_id: The source to remove.
        """
        gone = [c for c, d in self._children.items() if d["source_id"] == source_id]
        for cid in gone:
            del self._children[cid]
            del self._vectors[cid]
        pgone = [c for c, d in self._parents.items() if d["source_id"] == source_id]
        for cid in pgone:
            del self._parents[cid]
        self._dirty = True
        return len(gone) + len(pgone)

    # -- reads ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        if not self._dirty:
            return
        import bm25s

        self._ids = list(self._children)
        docs = [self._children[c] for c in self._ids]
        self._matrix = (
            np.stack([self._vectors[c] for c in self._ids]).astype(np.float32)
            if self._ids
            else np.zeros((0, self.dims or 0), np.float32)
        )
        self._bm25 = {}
        for fld, _ in _field_weights():
            corpus = []
            for d in docs:
                value = d.get(fld) or ""
                corpus.append(analyze(" ".join(value) if isinstance(value, list) else str(value)))
            if any(corpus):  # bm25s cannot index a field that is empty in every document
                model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
                model.index(corpus, show_progress=False)
                self._bm25[fld] = model
        self._dirty = False

    def count(self, flt: SearchFilter | None = None) -> int:
        """Number of child chunks stored (only those ``flt`` allows, when given).

        Args:
            flt: Optional hard filter.
        """
        if flt is None:
            return len(self._children)
        return sum(1 for doc in self._children.values() if flt.matches(doc))

    def _mask(self, flt: SearchFilter) -> np.ndarray:
        return np.fromiter((flt.matches(self._children[c]) for c in self._ids), dtype=bool, count=len(self._ids))

    def _hit(self, i: int) -> Hit:
        cid = self._ids[i]
        return Hit.from_source(self._children[cid], vector=self._vectors[cid])

    def bm25(self, query_text: str, flt: SearchFilter, k: int, *, mask: np.ndarray | None = None) -> list[Hit]:
        """Filtered BM25 top k (multi_match best_fields over title, heading_path, text).

        Args:
            query_text: The query.
            flt: Hard filter, applied before the top k.
            k: Number of hits.
            mask: Precomputed filter mask (internal reuse).
        """
        self._refresh()
        if not self._ids:
            return []
        mask = self._mask(flt) if mask is None else mask
        tokens = analyze(query_text)
        best = np.zeros(len(self._ids), dtype=np.float64)
        for fld, boost in _field_weights():
            model = self._bm25.get(fld)
            if model is None or not tokens:
                continue
            vocab = model.vocab_dict
            known = [t for t in tokens if t in vocab]
            if not known:
                continue
            best = np.maximum(best, boost * np.asarray(model.get_scores(known), dtype=np.float64))
        best[~mask] = 0.0
        order = np.argsort(-best, kind="stable")
        return [self._hit(int(i)).replace(bm25_score=float(best[i])) for i in order[:k] if best[i] > 0]

    def knn(self, query_vector: np.ndarray, flt: SearchFilter, k: int, *, mask: np.ndarray | None = None) -> list[Hit]:
        """Exact filtered kNN; scores as Elasticsearch's cosine similarity: (1 + cos) / 2.

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
        norms = np.linalg.norm(self._matrix, axis=1) * (np.linalg.norm(q) or 1.0)
        norms[norms == 0] = 1.0
        sims = (self._matrix @ q) / norms
        scores = (1.0 + sims.astype(np.float64)) / 2.0
        candidates = np.flatnonzero(mask)
        order = candidates[np.argsort(-scores[candidates], kind="stable")]
        return [self._hit(int(i)).replace(dense_score=float(scores[i])) for i in order[:k]]

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
        self._refresh()
        t0 = time.perf_counter()
        mask = self._mask(flt) if self._ids else np.zeros(0, dtype=bool)
        channels = {"bm25": self.bm25(query_text, flt, settings.candidate_k, mask=mask)}
        took = {"bm25": (time.perf_counter() - t0) * 1000}
        if query_vector is not None:
            t1 = time.perf_counter()
            channels["dense"] = self.knn(query_vector, flt, settings.candidate_k, mask=mask)
            took["dense"] = (time.perf_counter() - t1) * 1000
        return Retrieval(channels=channels, fused=None, path="embedded", took_ms=took)

    def get_parents(self, parent_ids: Sequence[str], flt: SearchFilter) -> dict[str, Hit]:
        """Parents by id, only those the filter allows.

        Args:
            parent_ids: Parent chunk ids.
            flt: Hard filter.
        """
        out = {}
        for pid in parent_ids:
            doc = self._parents.get(pid)
            if doc is not None and flt.matches(doc):
                out[pid] = Hit.from_source(doc)
        return out
