"""The lexical channels of the embedded backend: BM25 per field (``multi_match`` ``best_fields`` with its
tie-breaker, per-language subfields) and the exact-match channel over the identifier subfields, each built once per
index state and, for a committed index, saved with the commit and read memory-mapped (:mod:`es_rag.embedded.caches`).

A mixin of :class:`~es_rag.embedded.backend.EmbeddedBackend`, which holds the documents, the filter and the refresh.

BM25 is Lucene's ``BM25Similarity`` as Elasticsearch runs it on one shard (:func:`lucene_scores`): bm25s lays out the
index, then its scores are recomputed with Lucene's statistics (a document whose field has no term is not counted) and
with each document's length as Lucene stores it, in one byte (:func:`lucene_length`). ``tests/lucene`` compares the
scores with real Lucene's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.embedded import caches
from es_rag.embedded.analyzers import get_analyzer, identifier_analyzer
from es_rag.embedded.ident import IdentIndex
from es_rag.embedded.topk import top_k
from es_rag.filters import SearchFilter
from es_rag.languages import LANGUAGE_FIELDS
from es_rag.records import Hit
from es_rag.settings import Analyzer

EXACT_CHANNEL_FIELDS = ("text", "title", "heading_path")
"""The fields the exact-match channel reads, as Elasticsearch's ``<field>.ident`` subfields."""


def field_weights(fields: Sequence[str]) -> list[tuple[str, float]]:
    """``("title^2", "text")`` -> ``[("title", 2.0), ("text", 1.0)]``."""
    out = []
    for spec in fields:
        name, _, boost = spec.partition("^")
        out.append((name, float(boost) if boost else 1.0))
    return out


class LexicalChannels:
    """BM25 and exact-match over the backend's documents (see the module)."""

    directory: Path | None
    k1: float
    b: float
    analyzer: Analyzer | None
    languages: dict[str, Analyzer]
    tie_breaker: float
    _analyze: Callable[[str], list[str]]
    _fields: list[tuple[str, float]]
    _field_lock: threading.Lock
    _bm25: dict[str, Any]
    _ident_index: dict[str, IdentIndex]
    _ids: list[str]
    _children: dict[str, dict[str, Any]]
    _commit: int | None

    def _refresh(self) -> None:
        raise NotImplementedError

    def _mask(self, flt: SearchFilter) -> np.ndarray:
        raise NotImplementedError

    def _hit(self, i: int) -> Hit:
        raise NotImplementedError

    def _field_analyzer(self, fld: str) -> Callable[[str], list[str]] | None:
        """The analyzer of a BM25 field: the configured one for a base field, the language's mirror for a
        per-language subfield (``text.en``), None for a field the index does not have."""
        base, _, sub = fld.partition(".")
        if not sub:
            return self._analyze
        if base in LANGUAGE_FIELDS and sub in self.languages:
            return get_analyzer(self.languages[sub])
        return None

    def _field_index(self, fld: str) -> Any | None:
        """The BM25 index of one field (base field or per-language subfield) of the current index state, built on
        first use; None when the field does not exist or is empty in every document."""
        self._refresh()
        if fld in self._bm25:
            return self._bm25[fld]
        with self._field_lock:
            if fld not in self._bm25:
                built = self._build_field(fld, [self._children[c] for c in self._ids])
                self._bm25 = {**self._bm25, fld: built}  # a new dict: a concurrent read keeps a consistent one
        return self._bm25[fld]

    def _build_field(self, fld: str, docs: Sequence[dict[str, Any]]) -> Any | None:
        """The BM25 index of one field over ``docs``; for a committed index read from (or saved to) its cache,
        memory-mapped (:func:`es_rag.embedded.caches.cached_bm25`); None when the field is empty everywhere."""
        analyze = self._field_analyzer(fld)
        if analyze is None:
            return None

        def build() -> Any | None:
            import bm25s
            from bm25s.tokenization import Tokenized

            # each chunk's tokens become int32 ids at once: lists of token strings for every chunk were the peak of
            # an ingest's memory (about 60 bytes a token)
            base = fld.partition(".")[0]
            vocab: dict[str, int] = {}
            ids = []
            for d in docs:
                value = d.get(base) or ""
                tokens = analyze(" ".join(value) if isinstance(value, list) else str(value))
                ids.append(np.fromiter((vocab.setdefault(t, len(vocab)) for t in tokens), np.int32, len(tokens)))
            if not vocab:  # bm25s cannot index a field that is empty in every document
                return None
            model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
            model.index(Tokenized(ids=ids, vocab=vocab), show_progress=False)
            lucene_scores(model, ids, self.k1, self.b)
            return model

        if self.directory is None or self._commit is None:
            return build()
        ids = [str(d.get("chunk_id")) for d in docs]
        return caches.cached_bm25(self.directory, self._commit, fld, self._analyzer_name(fld), ids, build)

    def _analyzer_name(self, fld: str) -> str:
        sub = fld.partition(".")[2]
        return self.languages[sub].value if sub else (self.analyzer.value if self.analyzer else "default")

    def _ident_field(self, fld: str) -> IdentIndex:
        """The exact channel's index of one field (:class:`~es_rag.embedded.ident.IdentIndex`), built once per index
        state, not per query."""
        self._refresh()
        cached = self._ident_index.get(fld)
        if cached is None:
            docs = [self._children[cid] for cid in self._ids]

            def build() -> IdentIndex:
                values = (d.get(fld) or "" for d in docs)  # analysed one chunk at a time, straight into ids
                return IdentIndex(identifier_analyzer(" ".join(v) if isinstance(v, list) else str(v)) for v in values)

            if self.directory is None or self._commit is None:
                cached = build()
            else:
                ids = [str(d.get("chunk_id")) for d in docs]
                cached = caches.cached_ident(self.directory, self._commit, fld, ids, build)
            self._ident_index = {**self._ident_index, fld: cached}
        return cached

    def bm25(
        self,
        query_text: str,
        flt: SearchFilter,
        k: int,
        *,
        mask: np.ndarray | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Filtered BM25 top k (multi_match best_fields over the fields, with tie_breaker).

        Args:
            query_text: The query.
            flt: Hard filter, applied before the top k.
            k: Number of hits.
            mask: Precomputed filter mask (internal reuse).
            fields: ``field^boost`` items to search (a query language's subfields, :func:`es_rag.query.bm25_route`);
                None: the configured ``bm25_fields``.
        """
        self._refresh()
        if not self._ids:
            return []
        mask = self._mask(flt) if mask is None else mask
        best = np.zeros(len(self._ids), dtype=np.float64)
        total = np.zeros(len(self._ids), dtype=np.float64)
        analysed: dict[Callable[[str], list[str]], list[str]] = {}
        for fld, boost in self._fields if fields is None else field_weights(fields):
            model = self._field_index(fld)
            analyze = self._field_analyzer(fld)
            if model is None or analyze is None:
                continue
            tokens = analysed.get(analyze)
            if tokens is None:
                tokens = analysed[analyze] = analyze(query_text)
            if not tokens:
                continue
            known = _scorable_tokens(model, tokens)
            if not known:
                continue
            # bm25s "lucene" omits the (k1 + 1) numerator; Elasticsearch's LegacyBM25Similarity keeps it
            # (explain shows it as "boost 2.2" at k1 1.2), so scores here equal the cluster's.
            field_scores = boost * (self.k1 + 1.0) * np.asarray(model.get_scores(known), dtype=np.float64)
            best = np.maximum(best, field_scores)
            total += field_scores
        if self.tie_breaker:
            best = best + self.tie_breaker * (total - best)
        best[~mask] = 0.0
        matched = np.flatnonzero(best > 0)  # a rare term matches few: rank those, not a tail of zeros
        return [self._hit(int(i)).replace(bm25_score=float(best[i])) for i in matched[top_k(best[matched], k)]]

    def exact(
        self, identifiers: Sequence[str], flt: SearchFilter, k: int, *, mask: np.ndarray | None = None
    ) -> list[Hit]:
        """Filtered exact-match top k: the mirror of :func:`es_rag.elasticsearch.bodies.exact_query`.

        Each identifier is a phrase of :func:`~es_rag.embedded.analyzers.identifier_analyzer` matched contiguously
        in the same tokens of ``text``, ``title`` and ``heading_path`` (the ``.ident`` subfields); a
        document matches when any phrase occurs; its score sums, per (identifier, field) clause, Lucene's
        BM25 with the phrase as the term (phrase frequency, document frequency over the whole index).

        Args:
            identifiers: Identifier-like query tokens.
            flt: Hard filter, applied before the top k.
            k: Number of hits.
            mask: Precomputed filter mask (internal reuse).
        """
        self._refresh()
        if not self._ids or not identifiers:
            return []
        mask = self._mask(flt) if mask is None else mask
        n_docs = len(self._ids)
        scores = np.zeros(n_docs, dtype=np.float64)
        for fld in EXACT_CHANNEL_FIELDS:
            index = self._ident_field(fld)
            lengths = index.lengths
            avg = float(lengths.mean()) if n_docs and lengths.mean() > 0 else 1.0
            for ident in identifiers:
                ids = index.phrase_ids(identifier_analyzer(ident))
                if ids is None:
                    continue
                freq = np.zeros(n_docs, dtype=np.float64)
                for i in index.candidates(ids):  # only documents holding every token of the phrase can contain it
                    freq[i] = index.phrase_freq(int(i), ids)
                df = int(np.count_nonzero(freq))
                if df == 0:
                    continue
                idf = np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
                norm = self.k1 * (1.0 - self.b + self.b * lengths / avg)
                scores += np.where(freq > 0, idf * freq * (self.k1 + 1.0) / (freq + norm), 0.0)
        scores[~mask] = 0.0
        matched = np.flatnonzero(scores > 0)
        return [self._hit(int(i)).replace(exact_score=float(scores[i])) for i in matched[top_k(scores[matched], k)]]


def _scorable_tokens(model: Any, tokens: list[str]) -> list[str]:
    """The query tokens a bm25s model can score.

    bm25s keeps ``""`` in ``vocab_dict`` with an id past the end of its score matrix (one row per indexed
    term, ``len(indptr) - 1``), and ``get_scores`` raises for such an id; an empty string is never a term
    of Elasticsearch's index either, so both are dropped here rather than trusted.
    """
    vocab: dict[str, int] = model.vocab_dict
    n_terms = len(model.scores["indptr"]) - 1
    return [t for t in tokens if t and vocab.get(t, n_terms) < n_terms]


# -- Lucene's BM25 statistics ------------------------------------------------------------------------------------------
# org.apache.lucene.util.SmallFloat (lucene/core): BM25Similarity.computeNorm stores a document's field length as
# intToByte4(length), one byte, and scores with byte4ToInt of that byte (its LENGTH_TABLE). Lengths below
# _NUM_FREE_VALUES are exact; longer ones keep their 4 most significant bits (up to 12.5% shorter).
_MAX_INT4 = 231
"""``SmallFloat.longToInt4(Integer.MAX_VALUE)``."""
_NUM_FREE_VALUES = 255 - _MAX_INT4
_TF_BLOCK = 8_192
"""Documents per block when :func:`lucene_scores` counts term frequencies."""
_SCORE_CHUNK = 1 << 20
"""Entries per step when :func:`lucene_scores` writes the scores (bounded float64 temporaries)."""


def _long_to_int4(i: int) -> int:
    """``SmallFloat.longToInt4``: a 4-bit mantissa (implicit leading bit) and a 4-bit exponent."""
    num_bits = i.bit_length()
    if num_bits < 4:
        return i
    shift = num_bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    """``SmallFloat.int4ToLong``."""
    bits = i & 0x07
    shift = (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


def int_to_byte4(i: int) -> int:
    """``SmallFloat.intToByte4`` as an unsigned byte (0..255).

    Args:
        i: A non-negative length.
    """
    if i < 0:
        raise ValueError(f"length {i} is negative")
    return i if i < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _long_to_int4(i - _NUM_FREE_VALUES)


def byte4_to_int(b: int) -> int:
    """``SmallFloat.byte4ToInt`` of an unsigned byte (capped at ``Integer.MAX_VALUE`` as Lucene caps it).

    Args:
        b: 0..255.
    """
    return b if b < _NUM_FREE_VALUES else min(_NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES), 2**31 - 1)


def lucene_length(lengths: np.ndarray) -> np.ndarray:
    """Field lengths as Lucene's BM25 reads them back from the norm: ``byte4ToInt(intToByte4(n))`` per length.

    Args:
        lengths: Token counts (non-negative ints).
    """
    values, inverse = np.unique(np.asarray(lengths, dtype=np.int64), return_inverse=True)
    decoded = np.fromiter((byte4_to_int(int_to_byte4(int(v))) for v in values), np.int64, len(values))
    return decoded[inverse.reshape(-1)]


def lucene_scores(model: Any, ids: Sequence[np.ndarray], k1: float, b: float) -> None:
    """Replaces the term scores of a bm25s index (``model.scores``: one CSC column per term id, rows are documents)
    with Lucene's ``BM25Similarity`` without its ``k1 + 1`` (bm25s's ``lucene`` method, which the query multiplies
    back): ``idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` where, as in Lucene,

    - ``idf = log(1 + (docCount - df + 0.5) / (df + 0.5))`` and ``docCount`` counts the documents whose field has a
      term (bm25s counts every document);
    - ``avgdl = sumTotalTermFreq / docCount`` over the true lengths (bm25s: the mean over every document);
    - ``dl`` is :func:`lucene_length` of the document's length (bm25s: the true one, up to 12.5% longer; scores
      were up to 9% off on the debian-docs sets, ``reports/lucene-oracle.md``).

    Args:
        model: A ``bm25s.BM25`` indexed from ``ids``.
        ids: Each document's token ids, in index order.
        k1: BM25 k1.
        b: BM25 b.
    """
    scores = model.scores
    indptr = np.asarray(scores["indptr"], dtype=np.int64)
    docs = scores["indices"]
    n_docs, n_terms = len(ids), len(indptr) - 1
    lengths = np.fromiter((len(t) for t in ids), np.int64, n_docs)
    doc_count = int(np.count_nonzero(lengths))
    if doc_count == 0:
        return
    avgdl = float(np.float32(lengths.sum() / doc_count))  # Lucene keeps avgdl as a float
    # tf of every entry, a block of documents at a time. bm25s's CSC holds each column's rows (documents) in
    # ascending order (bm25s.scoring._np_csc_*: sorted by (term, doc)), so a block's (term, doc) pairs, sorted by
    # term then document, are the next entries of each of their columns: entry = indptr[term] + filled[term] + rank
    # of the pair among its term's pairs in the block. Memory: one float32 per entry and per-block temporaries.
    tf = np.zeros(len(docs), dtype=np.float32)
    filled = np.zeros(n_terms, dtype=np.int64)
    for start in range(0, n_docs, _TF_BLOCK):
        block = ids[start : start + _TF_BLOCK]
        block_lengths = lengths[start : start + len(block)]
        if not block_lengths.any():
            continue
        owners = np.repeat(np.arange(len(block), dtype=np.int64), block_lengths)
        tokens = np.concatenate([np.asarray(t, dtype=np.int64) for t in block])
        keys, counts = np.unique(tokens * len(block) + owners, return_counts=True)
        del owners, tokens
        terms = keys // len(block)
        first = np.searchsorted(terms, terms, side="left")
        tf[indptr[terms] + filled[terms] + (np.arange(len(terms)) - first)] = counts
        present, per_term = np.unique(terms, return_counts=True)
        filled[present] += per_term
    df = np.diff(indptr)
    idf = np.log(1.0 + (doc_count - df + 0.5) / (df + 0.5)).astype(np.float32).astype(np.float64)
    norm = k1 * (1.0 - b + b * lucene_length(lengths) / avgdl)
    data = scores["data"]
    for lo in range(0, len(data), _SCORE_CHUNK):
        hi = min(lo + _SCORE_CHUNK, len(data))
        terms = np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1
        f = tf[lo:hi].astype(np.float64)
        data[lo:hi] = (idf[terms] * f / (f + norm[docs[lo:hi]])).astype(model.dtype)
