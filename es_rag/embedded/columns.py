"""The embedded backend's filter columns: :meth:`es_rag.filters.SearchFilter.matches` as numpy operations.

Building a query's filter mask by calling ``matches`` on every chunk cost O(N) Python work per query (about two
seconds per query at a million chunks, ``benchmarks/embedded_growth_bench.py``). :class:`FilterColumns` holds, for
the child chunks in row order, one column per field the filter tests, so a mask is a few numpy operations:

* ``tenant_id``: an integer code per row (:class:`Codes`), for rows whose stored value *is* a string (``matches``
  compares with ``!=``, so a list or a number never equals a tenant); the mask is one comparison;
* ``acl`` and every ``metadata`` field: postings (:class:`Postings`: the rows holding each value, one integer array
  sorted by value code, with offsets), the values converted as ``matches`` converts them
  (:func:`es_rag.filters.keyword_values`: absent/None -> none, list -> ``str`` of each element, scalar -> its
  ``str``); the mask scatters the rows of the values asked for; metadata columns are built on first use of the
  field, once per index state;
* ``version_key``: a code per row of ``str(value)``, none for a missing key (a document without one is never
  hidden); the hidden keys are read from the query's :class:`~es_rag.versions.registry.VersionSnapshot`, never
  stored in a column, so a version switch (a registry write) needs no rebuild; the mask is one gather through a
  table of the hidden codes, whatever their number.

The columns are derived state: :class:`~es_rag.embedded.backend.EmbeddedBackend` builds them in ``_refresh`` from
the stored documents in the order of its vector matrix, after every write (``index``, ``delete_source``, the purge
of a version) and every load from disk -- the same moment and the same order as the matrix and the BM25 index.

A filter whose predicate is not the one encoded here -- a subclass overriding ``SearchFilter.matches`` or
``VersionSnapshot.allows`` -- is not vectorised (:meth:`FilterColumns.vectorises` is False); the backend then
evaluates ``matches`` per chunk, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from es_rag.filters import SearchFilter, keyword_values
from es_rag.metadata import Condition, Validity, now_ms, parse_instant, stored_values, term_key
from es_rag.versions.registry import VERSION_KEY_FIELD, VersionSnapshot


class Postings:
    """The rows holding each value of one keyword column.

    Args:
        values_per_row: For each row, the values it holds (duplicates allowed).
    """

    def __init__(self, values_per_row: Iterable[Iterable[str]]) -> None:
        codes: dict[str, int] = {}
        flat_codes: list[int] = []
        flat_rows: list[int] = []
        for row, values in enumerate(values_per_row):
            for value in values:
                code = codes.setdefault(value, len(codes))
                flat_codes.append(code)
                flat_rows.append(row)
        code_arr = np.asarray(flat_codes, dtype=np.int64)
        row_arr = np.asarray(flat_rows, dtype=np.int64)
        order = np.argsort(code_arr, kind="stable")  # stable: rows stay ascending within a value
        self.codes = codes
        self.rows = row_arr[order].astype(np.int32)
        counts = np.bincount(code_arr, minlength=len(codes))
        self.offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)])

    def rows_of(self, value: str) -> np.ndarray:
        """The rows holding ``value`` (ascending; empty when none does).

        Args:
            value: The value.
        """
        code = self.codes.get(value)
        if code is None:
            return self.rows[:0]
        return self.rows[self.offsets[code] : self.offsets[code + 1]]

    def any_of(self, values: Iterable[str], n_rows: int) -> np.ndarray:
        """Boolean mask of the rows holding at least one of ``values``.

        Args:
            values: The values asked for.
            n_rows: Number of rows of the column.
        """
        out = np.zeros(n_rows, dtype=bool)
        for value in values:
            out[self.rows_of(value)] = True
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the two arrays (the value dictionary's strings are shared with the stored documents)."""
        return int(self.rows.nbytes + self.offsets.nbytes)


class Codes:
    """A single-valued column: an integer code per row (-1: the row has no value) and the value -> code dictionary.

    Args:
        values: For each row, its value or None.
    """

    def __init__(self, values: Iterable[str | None]) -> None:
        codes: dict[str, int] = {}
        self.row_code = np.fromiter(
            (-1 if v is None else codes.setdefault(v, len(codes)) for v in values), dtype=np.int32
        )
        self.codes = codes

    def equals(self, value: str) -> np.ndarray:
        """Boolean mask of the rows whose value is ``value``.

        Args:
            value: The value asked for.
        """
        code = self.codes.get(value)
        if code is None:
            return np.zeros(len(self.row_code), dtype=bool)
        out: np.ndarray = self.row_code == code
        return out

    def isin(self, values: Iterable[Any]) -> np.ndarray:
        """Boolean mask of the rows whose value is one of ``values`` (one gather, whatever their number).

        Args:
            values: The values asked for (a value that is no code, e.g. not a string, matches no row).
        """
        table = np.zeros(len(self.codes) + 1, dtype=bool)  # the last slot, index -1, is "no value": never set
        table[[c for c in map(self.codes.get, values) if c is not None]] = True
        return table[self.row_code]

    @property
    def nbytes(self) -> int:
        """Bytes of the code array."""
        return int(self.row_code.nbytes)


class RangeColumn:
    """The values of one date or number field under ``meta`` as parallel arrays (row, value), so a range is one
    comparison and a scatter; a row matches when one of its values does (:meth:`es_rag.metadata.Condition.matches`).

    Args:
        docs: The stored documents, in row order.
        name: The field under ``meta``.
        kind: ``date`` (values as epoch milliseconds), ``integer`` or ``float``.
    """

    def __init__(self, docs: Sequence[Mapping[str, Any]], name: str, kind: str) -> None:
        rows: list[int] = []
        values: list[float] = []
        for row, doc in enumerate(docs):
            for value in stored_values(doc, name):
                try:
                    point = float(parse_instant(str(value))) if kind == "date" else float(value)
                except (TypeError, ValueError):
                    continue  # not a value of the field's type: no bound matches it (in_range says the same)
                rows.append(row)
                values.append(point)
        self.kind = kind
        self.rows = np.asarray(rows, dtype=np.int64)
        self.values = np.asarray(values, dtype=np.float64)

    def within(self, bounds: Mapping[str, Any], n_rows: int, *, now: int) -> np.ndarray:
        """Rows holding a value inside every bound (``op -> bound``, the rendered form of the query).

        Args:
            bounds: ``gt``/``gte``/``lt``/``lte`` -> bound.
            n_rows: Rows of the column.
            now: The request's ``now`` (epoch ms).
        """
        from es_rag.metadata import resolve_bound

        keep = np.ones(len(self.values), dtype=bool)
        for op, bound in bounds.items():
            limit = float(resolve_bound(str(bound), op, now_ms=now)) if self.kind == "date" else float(bound)
            if op == "gt":
                keep &= self.values > limit
            elif op == "gte":
                keep &= self.values >= limit
            elif op == "lt":
                keep &= self.values < limit
            else:
                keep &= self.values <= limit
        out = np.zeros(n_rows, dtype=bool)
        out[self.rows[keep]] = True
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the two arrays."""
        return int(self.rows.nbytes + self.values.nbytes)


class FilterColumns:
    """Filter columns of the documents ``docs`` (row ``i`` = ``docs[i]``).

    Args:
        docs: The stored child chunks, in the order of the rows the mask addresses.
    """

    def __init__(self, docs: Sequence[Mapping[str, Any]]) -> None:
        self._docs = docs
        self.n_rows = len(docs)
        tenants = (d.get("tenant_id") for d in docs)
        self.tenant = Codes(t if isinstance(t, str) else None for t in tenants)
        versions = (d.get(VERSION_KEY_FIELD) for d in docs)
        self.version = Codes(None if v is None else str(v) for v in versions)
        self._keywords: dict[str, Postings] = {"acl": Postings(keyword_values(d.get("acl")) for d in docs)}
        self._sources: Codes | None = None
        self._ranges: dict[tuple[str, str], RangeColumn] = {}
        self._terms: dict[tuple[str, str], Postings] = {}

    def source(self) -> Codes:
        """The ``source_id`` column (built on first use: only superseded sources need it)."""
        if self._sources is None:
            ids = (d.get("source_id") for d in self._docs)
            self._sources = Codes(None if v is None else str(v) for v in ids)
        return self._sources

    def range_column(self, name: str, kind: str) -> RangeColumn:
        """The range column of ``meta.<name>`` (built on first use).

        Args:
            name: Field under ``meta``.
            kind: Its type.
        """
        column = self._ranges.get((name, kind))
        if column is None:
            column = self._ranges[(name, kind)] = RangeColumn(self._docs, name, kind)
        return column

    def term_column(self, name: str, kind: str) -> Postings:
        """The terms of ``meta.<name>`` (:func:`es_rag.metadata.term_key`), built on first use.

        Args:
            name: Field under ``meta``.
            kind: Its type.
        """
        column = self._terms.get((name, kind))
        if column is None:
            column = Postings([term_key(kind, v) for v in stored_values(d, name)] for d in self._docs)
            self._terms[(name, kind)] = column
        return column

    def condition(self, cond: Condition, *, now: int) -> np.ndarray:
        """The rows ``cond`` accepts.

        Args:
            cond: A metadata condition.
            now: The request's ``now`` (epoch ms).
        """
        if cond.bounds:
            return self.range_column(cond.field, cond.type).within(cond.bounds, self.n_rows, now=now)
        hit = self.term_column(cond.field, cond.type).any_of({term_key(cond.type, v) for v in cond.values}, self.n_rows)
        return hit if cond.op == "eq" else ~hit

    def validity(self, validity: Validity, *, now: int) -> np.ndarray:
        """The rows valid on the day ``validity`` names (:meth:`es_rag.metadata.Validity.matches`).

        Args:
            validity: The predicate.
            now: The request's ``now`` (epoch ms).
        """
        early = self.range_column("valid_from", "date").within({"gt": validity.anchor}, self.n_rows, now=now)
        late = self.range_column("valid_to", "date").within({"lt": validity.anchor}, self.n_rows, now=now)
        out: np.ndarray = ~(early | late)
        return out

    def keyword(self, field: str) -> Postings:
        """The keyword column of ``field`` (built on first use).

        Args:
            field: A stored field.
        """
        column = self._keywords.get(field)
        if column is None:
            column = Postings(keyword_values(d.get(field)) for d in self._docs)
            self._keywords[field] = column
        return column

    @staticmethod
    def vectorises(flt: Any) -> bool:
        """Whether ``flt``'s predicate is the one these columns encode (``SearchFilter.matches`` with
        ``VersionSnapshot.allows``); anything else must be evaluated per document.

        Args:
            flt: The hard filter of a query.
        """
        if getattr(type(flt), "matches", None) is not SearchFilter.matches or bool(getattr(flt, "queries", None)):
            return False  # (an app's query filters are evaluated per document, es_rag.query_filters)
        versions = getattr(flt, "versions", None)
        return versions is None or getattr(type(versions), "allows", None) is VersionSnapshot.allows

    def mask(self, flt: SearchFilter, *, at: int | None = None) -> np.ndarray:
        """The rows ``flt.matches`` accepts, as a boolean array (only for filters :meth:`vectorises` accepts).

        Args:
            flt: The hard filter.
            at: The request's ``now`` in epoch ms (None: the current time).
        """
        out = self.tenant.equals(flt.tenant_id)
        out &= self.keyword("acl").any_of(flt.groups, self.n_rows)
        for field, values in flt.metadata.items():
            out &= self.keyword(field).any_of(values, self.n_rows)
        if flt.versions is not None and flt.versions.hidden:
            # A non-str hidden entry is no value of the column: it hides nothing, as in VersionSnapshot.allows.
            out &= ~self.version.isin(flt.versions.hidden)
        if flt.versions is not None and flt.versions.superseded:
            out &= ~self.source().isin(flt.versions.superseded)
        if flt.conditions or flt.validity is not None:
            now = now_ms() if at is None else at
            for cond in flt.conditions:
                out &= self.condition(cond, now=now)
            if flt.validity is not None:
                out &= self.validity(flt.validity, now=now)
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the columns' arrays built so far."""
        extra = sum(c.nbytes for c in self._ranges.values()) + sum(c.nbytes for c in self._terms.values())
        extra += self._sources.nbytes if self._sources is not None else 0
        return self.tenant.nbytes + self.version.nbytes + sum(c.nbytes for c in self._keywords.values()) + extra


def exact_mask(flt: Any, docs: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The reference path: ``flt.matches`` called on every document (O(N) Python).

    Args:
        flt: Anything with ``matches(source) -> bool``.
        docs: The documents, in row order.
    """
    matches: Callable[[Mapping[str, Any]], bool] = flt.matches
    return np.fromiter((matches(d) for d in docs), dtype=bool, count=len(docs))
