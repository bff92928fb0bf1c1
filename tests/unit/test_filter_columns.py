"""The embedded backend's vectorised filter mask (:mod:`es_rag.embedded.columns`) hides exactly what
:meth:`es_rag.filters.SearchFilter.matches` hides.

The oracle (:func:`_visible`) is written here from the raw stored fields -- tenant equal, an ACL keyword among
the caller's groups plus ``public``, a keyword of every metadata field among the allowed values, version key
not hidden -- never through the code under test. The documents are raw dictionaries as a JSON file can hold
them (fields missing, None, numbers, lists with numbers or None, empty ACL lists), because an index reloaded
from disk may have been written by another tool; a second property drives the backend through its public writes
(ingest, re-ingest, version begin/commit/purge, delete-source, flush and reopen) and checks every state.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.embedded.columns import Codes, FilterColumns, Postings
from es_rag.filters import SearchFilter
from es_rag.records import Chunk
from es_rag.versions.registry import VersionSnapshot

_MISSING = object()


def _field(common: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly an ordinary value, sometimes an odd one (None, a number, a list with numbers), sometimes absent."""
    return st.one_of(common, common, common, odd, st.just(_MISSING))


raw_doc_st = st.fixed_dictionaries(
    {
        "tenant_id": _field(
            st.sampled_from(("acme", "globex")),
            st.one_of(st.none(), st.integers(0, 2), st.booleans(), st.lists(st.sampled_from(("acme", 1)), max_size=2)),
        ),
        "acl": _field(
            st.lists(st.sampled_from(("public", "eng", "hr")), max_size=3),  # [] = no group at all
            st.one_of(
                st.none(),
                st.sampled_from(("public", "eng")),
                st.lists(st.one_of(st.none(), st.integers(0, 1), st.sampled_from(("None", "1", "eng"))), max_size=3),
            ),
        ),
        "version_key": _field(
            st.sampled_from(("s@1", "s@2", "t@1")),
            st.one_of(st.none(), st.integers(0, 2), st.lists(st.sampled_from(("s@1", "s@2")), min_size=1, max_size=2)),
        ),
        "lang": _field(
            st.sampled_from(("en", "ja")),
            st.one_of(st.none(), st.lists(st.sampled_from(("en", "ja", "de")), max_size=2), st.integers(0, 1)),
        ),
        "tags": _field(st.lists(st.sampled_from(("a", "b")), max_size=2), st.one_of(st.booleans(), st.floats(1, 1))),
    }
).map(lambda d: {k: v for k, v in d.items() if v is not _MISSING})
TENANTS = ("acme", "globex", "1", "True")
GROUPS = ("eng", "hr", "None", "1")  # "" and " " are refused by SearchFilter (es_rag.principals)
META_VALUES = ("en", "ja", "de", "0", "1", "True", "a", "1.0")
HIDDEN = ("s@1", "s@2", "1", "None", "['s@1']", "x@9", 1)  # 1: a registry hand-edited to a number hides nothing


def _keywords(value: Any) -> set[str]:
    """What a keyword field holds, read from the raw value: nothing when absent, each element of a list, else the
    value; compared as text (a number 1 stored in a keyword field is the term ``"1"``)."""
    if value is None:
        return set()
    items = value if isinstance(value, list) else [value]
    return {str(item) for item in items}


def _visible(
    doc: Mapping[str, Any],
    tenant: str,
    groups: Iterable[str],
    metadata: Mapping[str, Iterable[str]],
    hidden: set[str] | None,
) -> bool:
    """The oracle, from the raw fields only."""
    if doc.get("tenant_id") != tenant:
        return False
    if not _keywords(doc.get("acl")) & (set(groups) | {"public"}):
        return False
    for name, allowed in metadata.items():
        if not _keywords(doc.get(name)) & set(allowed):
            return False
    key = doc.get("version_key")
    return hidden is None or key is None or str(key) not in hidden


filter_st = st.fixed_dictionaries(
    {
        "groups": st.lists(st.sampled_from(GROUPS), max_size=3),
        "metadata": st.dictionaries(
            st.sampled_from(("lang", "tags", "version_key", "never_stored")),
            st.one_of(st.sampled_from(META_VALUES), st.lists(st.sampled_from(META_VALUES), min_size=1, max_size=3)),
            max_size=2,
        ),
        "hidden": st.one_of(st.none(), st.sets(st.sampled_from(HIDDEN), min_size=1, max_size=3)),
        "lookup": st.booleans(),
    }
)


#: Every odd stored shape at least once, whatever the random draw: a list, a number and a bool where a string is
#: expected, a list-valued version key, empty/None/scalar ACLs, a float keyword, documents missing fields.
EDGE_DOCS = [
    {"tenant_id": ["acme"], "acl": ["public"]},
    {"tenant_id": 1, "acl": "public"},
    {"tenant_id": True, "acl": ["public"], "version_key": "s@1"},
    {"tenant_id": "acme", "acl": [], "version_key": "s@2"},
    {"tenant_id": "acme", "acl": None},
    {"tenant_id": "acme"},
    {"acl": ["public"]},
    {"tenant_id": "acme", "acl": [None, 1], "version_key": ["s@1"], "lang": ["en", "de"]},
    {"tenant_id": "acme", "acl": "eng", "version_key": 1, "tags": 1.0},
    {"tenant_id": "acme", "acl": ["hr", "public"], "lang": 1, "tags": True},
    {"tenant_id": "globex", "acl": ["public"], "version_key": None, "lang": "en"},
]
EDGE_FILTERS = [
    {"groups": [], "metadata": {}, "hidden": None, "lookup": False},
    {"groups": ["None", "1"], "metadata": {}, "hidden": {"s@1", "1", 1}, "lookup": False},
    {"groups": ["eng"], "metadata": {"tags": "1.0"}, "hidden": {"['s@1']"}, "lookup": True},
    {"groups": ["hr"], "metadata": {"lang": ["1", "de"], "never_stored": "x"}, "hidden": None, "lookup": False},
    {"groups": ["hr"], "metadata": {"lang": ["1", "de"], "tags": ["True"]}, "hidden": {"s@2"}, "lookup": False},
]


@settings(max_examples=300, deadline=None)
@example(docs=EDGE_DOCS, filters=EDGE_FILTERS)
@given(docs=st.lists(raw_doc_st, max_size=30), filters=st.lists(filter_st, min_size=1, max_size=4))
def test_vectorised_mask_equals_the_per_chunk_predicate(docs, filters) -> None:  # type: ignore[no-untyped-def]
    columns = FilterColumns(docs)
    for spec, tenant in ((spec, tenant) for spec in filters for tenant in TENANTS):
        flt = SearchFilter(tenant, tuple(spec["groups"]), metadata=spec["metadata"])
        hidden = spec["hidden"]
        if hidden is not None:
            index = "reg-versions" if spec["lookup"] else None  # the lookup form hides the same keys here
            flt = flt.with_versions(VersionSnapshot(tenant, index=index, hidden=frozenset(hidden)))
        assert FilterColumns.vectorises(flt)
        mask = columns.mask(flt)
        allowed = {k: [v] if isinstance(v, str) else v for k, v in spec["metadata"].items()}
        expected = [_visible(d, tenant, spec["groups"], allowed, hidden) for d in docs]
        assert mask.dtype == bool and mask.shape == (len(docs),)
        assert mask.tolist() == expected, (tenant, spec)
        assert [flt.matches(d) for d in docs] == expected  # the reference semantics agree with the oracle too


def test_postings_rows_per_value_and_memory() -> None:
    col = Postings([["a", "b"], [], ["b", "b"], ["a"]])
    assert col.rows_of("a").tolist() == [0, 3]
    assert col.rows_of("b").tolist() == [0, 2, 2]
    assert col.rows_of("zzz").tolist() == []
    assert col.any_of(["b", "zzz"], 4).tolist() == [True, False, True, False]
    assert col.nbytes == col.rows.nbytes + col.offsets.nbytes > 0
    assert Postings([]).any_of(["a"], 0).tolist() == []


def test_codes_one_value_per_row() -> None:
    col = Codes(["a", None, "b", "a"])
    assert col.row_code.tolist() == [0, -1, 1, 0]
    assert col.equals("a").tolist() == [True, False, False, True]
    assert col.equals("zzz").tolist() == [False] * 4
    assert col.isin({"b", "zzz", 1}).tolist() == [False, False, True, False]  # "no value" (-1) is never in
    assert col.isin(set()).tolist() == [False] * 4
    assert col.nbytes == 16


# -- the backend keeps its columns in step with every write -------------------------------------------------------
DIMS = 4
B_TENANTS = ("acme", "globex")
B_GROUPS = ("public", "eng", "hr")
B_SOURCES = ("guide", "faq")

chunk_st = st.fixed_dictionaries(
    {
        "cid": st.integers(0, 11),
        "tenant": st.sampled_from(B_TENANTS),
        "acl": st.lists(st.sampled_from(B_GROUPS), max_size=2, unique=True),  # empty ACL: visible to nobody
        "source": st.sampled_from(B_SOURCES),
        "version": st.sampled_from(("v1", "v2")),
        "lang": st.sampled_from(("en", "ja")),
    }
)
op_st = st.one_of(
    st.tuples(st.just("index"), st.lists(chunk_st, min_size=1, max_size=4)),
    st.tuples(st.just("begin"), st.sampled_from(B_TENANTS), st.sampled_from(B_SOURCES), st.sampled_from(("v1", "v2"))),
    st.tuples(st.just("commit"), st.sampled_from(B_TENANTS), st.sampled_from(B_SOURCES), st.sampled_from(("v1", "v2"))),
    st.tuples(st.just("purge"), st.sampled_from(B_TENANTS), st.sampled_from(B_SOURCES), st.sampled_from(("v1", "v2"))),
    st.tuples(st.just("delete"), st.sampled_from(B_TENANTS), st.sampled_from(B_SOURCES)),
    st.tuples(st.just("reopen")),
)
flt_st = st.tuples(
    st.sampled_from(B_TENANTS),
    st.lists(st.sampled_from(B_GROUPS[1:]), max_size=2, unique=True),
    st.lists(st.sampled_from(("en", "ja")), max_size=2, unique=True),
)


def _chunk(c: dict[str, Any]) -> Chunk:
    text = f"{c['lang']} words {c['cid']}"
    return Chunk(
        chunk_id=f"{c['tenant']}-c{c['cid']}",
        source_id=c["source"],
        source_version=c["version"],
        parent_id=None,
        heading_path=("H",),
        start_offset=0,
        end_offset=len(text),
        chunker_version="t",
        tenant_id=c["tenant"],
        acl=tuple(c["acl"]),
        title="",
        text=text,
        token_count=3,
        source_path=c["lang"],
    ).with_vector(np.asarray([1.0, 0.5, 0.25, float(c["cid"])], dtype=np.float32), "t")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_st, min_size=1, max_size=8), filters=st.lists(flt_st, min_size=1, max_size=3))
def test_backend_mask_follows_every_write_and_reload(ops, filters) -> None:  # type: ignore[no-untyped-def]
    stored: dict[str, dict[str, Any]] = {}  # the test's own record of what is stored: chunk id -> raw fields
    with tempfile.TemporaryDirectory() as tmp:
        backend = EmbeddedBackend(Path(tmp), dims=DIMS)
        for op in ops:
            kind = op[0]
            if kind == "index":
                assert not backend.index([_chunk(c) for c in op[1]]).failed
                stored.update({f"{c['tenant']}-c{c['cid']}": c for c in op[1]})
            elif kind in ("begin", "commit", "purge"):
                getattr(backend.version_store(), kind)(op[1], [(op[2], op[3])])
                if kind == "purge":
                    stored = {k: c for k, c in stored.items() if (c["tenant"], c["source"], c["version"]) != op[1:]}
            elif kind == "delete":
                backend.version_store().delete_source(op[1], op[2])
                stored = {k: c for k, c in stored.items() if (c["tenant"], c["source"]) != op[1:]}
            else:
                backend.flush()
                backend = EmbeddedBackend(Path(tmp), dims=DIMS)
            for tenant, groups, langs in filters:
                flt = SearchFilter(tenant, tuple(groups), metadata={"source_path": tuple(langs)} if langs else {})
                hidden = set(backend.version_store().state(tenant).hidden)
                expected = {
                    k
                    for k, c in stored.items()
                    if c["tenant"] == tenant
                    and set(c["acl"]) & {*groups, "public"}
                    and (not langs or c["lang"] in langs)
                    and f"{c['source']}@{c['version']}" not in hidden
                }
                got = backend.knn(np.ones(DIMS, np.float32), backend.snapshot_versions(flt), len(stored) + 1)
                assert {h.chunk_id for h in got} == expected, (op, tenant, groups, langs)


class _EvenOffsetsOnly(SearchFilter):
    """A filter whose predicate the columns do not encode."""

    def matches(self, source: Mapping[str, Any]) -> bool:
        return super().matches(source) and int(source["chunk_id"].rsplit("c", 1)[1]) % 2 == 0


class _NothingHidden(VersionSnapshot):
    def allows(self, source: Any) -> bool:
        return True


def test_a_filter_with_its_own_predicate_takes_the_per_chunk_path() -> None:
    backend = EmbeddedBackend(dims=DIMS)
    chunks = [
        {"cid": i, "tenant": "acme", "acl": ["public"], "source": "guide", "version": "v1", "lang": "en"}
        for i in range(6)
    ]
    assert not backend.index([_chunk(c) for c in chunks]).failed
    plain = SearchFilter("acme")
    own = _EvenOffsetsOnly("acme")
    assert FilterColumns.vectorises(plain) and not FilterColumns.vectorises(own)
    got = backend.knn(np.ones(DIMS, np.float32), own, 10)
    assert sorted(h.chunk_id for h in got) == ["acme-c0", "acme-c2", "acme-c4"]
    assert len(backend.knn(np.ones(DIMS, np.float32), plain, 10)) == 6
    # A snapshot subclass with another allows(): also per chunk, and its answer is the one applied.
    hides_all_v1 = VersionSnapshot("acme", hidden=frozenset({"guide@v1"}))
    assert backend.knn(np.ones(DIMS, np.float32), plain.with_versions(hides_all_v1), 10) == []
    own_snapshot = plain.with_versions(_NothingHidden("acme", hidden=frozenset({"guide@v1"})))
    assert not FilterColumns.vectorises(own_snapshot)
    assert len(backend.knn(np.ones(DIMS, np.float32), own_snapshot, 10)) == 6
