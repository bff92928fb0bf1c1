"""The exact-match channel's index of one field (the mirror of Elasticsearch's ``<field>.ident`` subfield): every
document's identifier tokens as ids in one flat int32 array, their lengths, and postings (token -> documents) in
compressed sparse rows.

Kept compact on purpose: Python lists of token strings and a dict of posting lists took about 2 KB per chunk, the
largest part of the embedded index's memory after the vectors (issue 31: a 48 MB file must ingest in under 2 GB).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int32)


class IdentIndex:
    """Identifier tokens of one field for every document, in row order.

    Args:
        docs_tokens: Each document's tokens (:func:`es_rag.embedded.analyzers.identifier_analyzer`), in row order.
    """

    ARRAYS = ("lengths", "_offsets", "_flat", "_docs", "_indptr")
    """What :meth:`save` writes, one ``.npy`` each (read back memory-mapped), besides the vocabulary."""

    def __init__(self, docs_tokens: Iterable[Sequence[str]] = ()) -> None:
        vocab: dict[str, int] = {}
        rows: list[np.ndarray] = []
        for tokens in docs_tokens:
            rows.append(np.fromiter((vocab.setdefault(t, len(vocab)) for t in tokens), np.int32, len(tokens)))
        self.vocab = vocab
        lengths = [len(r) for r in rows]
        self.lengths = np.asarray(lengths, dtype=np.float64)
        """Tokens per document (BM25's field length)."""
        self._offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self._offsets[1:])
        self._flat = np.concatenate(rows) if rows else _EMPTY
        unique = [np.unique(r) for r in rows]
        del rows
        terms = np.concatenate(unique) if unique else _EMPTY
        docs = np.repeat(np.arange(len(unique), dtype=np.int32), [len(u) for u in unique])
        order = np.argsort(terms, kind="stable")
        self._docs = docs[order]
        self._indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms, minlength=len(vocab)), out=self._indptr[1:])

    def save(self, folder: Path, stem: str) -> list[str]:
        """Write the arrays and the vocabulary as ``<stem><name>.npy`` and ``<stem>vocab.json`` in ``folder``; returns
        the file names.

        Args:
            folder: Where.
            stem: The files' common prefix.
        """
        names = []
        for name in self.ARRAYS:
            names.append(f"{stem}{name.lstrip('_')}.npy")
            np.save(folder / names[-1], getattr(self, name), allow_pickle=False)
        names.append(f"{stem}vocab.json")
        (folder / names[-1]).write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        return names

    @classmethod
    def load(cls, folder: Path, stem: str) -> IdentIndex:
        """Read what :meth:`save` wrote, the arrays memory-mapped.

        Args:
            folder: Where.
            stem: The files' common prefix.
        """
        out = cls()
        for name in cls.ARRAYS:
            setattr(out, name, np.load(folder / f"{stem}{name.lstrip('_')}.npy", mmap_mode="r", allow_pickle=False))
        out.vocab = json.loads((folder / f"{stem}vocab.json").read_text(encoding="utf-8"))
        return out

    def __len__(self) -> int:
        return len(self.lengths)

    def phrase_ids(self, phrase: Sequence[str]) -> np.ndarray | None:
        """The phrase's token ids; None when a token occurs in no document (then no document holds the phrase).

        Args:
            phrase: Analysed tokens.
        """
        ids = [self.vocab.get(t) for t in phrase]
        if not ids or any(i is None for i in ids):
            return None
        return np.asarray(ids, dtype=np.int32)

    def candidates(self, ids: np.ndarray) -> np.ndarray:
        """The documents holding every token of ``ids`` (sorted row numbers)."""
        out = self._docs[self._indptr[ids[0]] : self._indptr[ids[0] + 1]]
        for t in ids[1:]:
            out = np.intersect1d(out, self._docs[self._indptr[t] : self._indptr[t + 1]], assume_unique=True)
        return out

    def phrase_freq(self, row: int, ids: np.ndarray) -> int:
        """How often the phrase ``ids`` occurs contiguously in document ``row``."""
        tokens = self._flat[self._offsets[row] : self._offsets[row + 1]]
        n = len(ids)
        if len(tokens) < n:
            return 0
        if n == 1:
            return int(np.count_nonzero(tokens == ids[0]))
        windows = np.lib.stride_tricks.sliding_window_view(tokens, n)
        return int(np.count_nonzero((windows == ids).all(axis=1)))
