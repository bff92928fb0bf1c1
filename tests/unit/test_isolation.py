"""Property: no hit from another tenant, ACL group or metadata value appears on any retrieval path.

Hypothesis generates corpora across tenants / ACL groups / metadata values whose texts share the query's
words and identifiers (so every channel *would* return the forbidden documents without the filter), then
runs the client path on :class:`EmbeddedBackend` -- all channels, dense down (no vector), the exact channel,
and linear fusion -- through :func:`es_rag.stages.fusion.fuse_channels`, and checks every candidate and every
fused hit against the filter. The native bodies for the same filter are checked structurally: every child
retriever of the ``rrf`` / ``linear`` retriever and every ``_msearch`` search carries the filter clauses.
"""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag.elasticsearch.bodies import search_requests
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.records import Chunk
from es_rag.settings import Settings
from es_rag.stages.fusion import fuse_channels

TENANTS = ("acme", "globex", "initech")
GROUPS = ("public", "support", "eng", "hr")
LANGS = ("en", "ja")
WORDS = ("sync", "error", "E1042", "sync_engine.start()", "password", "reset", "ERR-42", "policy")
QUERIES = ("sync error E1042", "reset password", "sync_engine.start() fails with ERR-42", "policy")
DIMS = 4

doc_st = st.fixed_dictionaries(
    {
        "tenant": st.sampled_from(TENANTS),
        "acl": st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2, unique=True),
        "lang": st.sampled_from(LANGS),
        "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
        "vec": st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=DIMS, max_size=DIMS),
    }
)


def _corpus(docs: list[dict]) -> EmbeddedBackend:  # type: ignore[type-arg]
    backend = EmbeddedBackend(dims=DIMS)
    chunks = []
    for i, d in enumerate(docs):
        text = " ".join(d["words"])
        vec = np.asarray(d["vec"], dtype=np.float32)
        if not np.any(vec):
            vec[0] = 1.0
        chunks.append(
            Chunk(
                chunk_id=f"c{i}",
                source_id=f"src-{d['lang']}",
                source_version="v1",
                parent_id=None,
                heading_path=("Guide",),
                start_offset=0,
                end_offset=len(text),
                chunker_version="t",
                tenant_id=d["tenant"],
                acl=tuple(d["acl"]),
                title=d["words"][0],
                text=text,
                token_count=len(d["words"]),
            ).with_vector(vec, "test")
        )
    report = backend.index(chunks)
    assert not report.failed
    return backend


def _visible(doc: dict, tenant: str, groups: list[str], sources: list[str]) -> bool:  # type: ignore[type-arg]
    """The requirement, from the generated raw fields (never through ``SearchFilter``): same tenant, an ACL group
    of the caller's or ``public``, and the source named when a source filter is set."""
    return (
        doc["tenant"] == tenant
        and bool(set(doc["acl"]) & {*groups, "public"})
        and (not sources or f"src-{doc['lang']}" in sources)
    )


def _clauses(clauses: list[dict]) -> set[tuple[str, str, frozenset[str]]]:  # type: ignore[type-arg]
    """Filter clauses as comparable facts: (query type, field, values)."""
    out = set()
    for clause in clauses:
        ((kind, spec),) = clause.items()
        if kind == "bool":  # the validity clause: compared as written
            out.add((kind, json.dumps(spec, sort_keys=True), frozenset()))
            continue
        ((fld, value),) = spec.items()
        out.add((kind, fld, frozenset(value if isinstance(value, list) else [value])))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(doc_st, min_size=1, max_size=14),
    tenant=st.sampled_from(TENANTS),
    groups=st.lists(st.sampled_from(GROUPS[1:]), max_size=2, unique=True),
    sources=st.lists(st.sampled_from([f"src-{lang}" for lang in LANGS]), max_size=1),
    query=st.sampled_from(QUERIES),
    qvec=st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=DIMS, max_size=DIMS),
    dense_down=st.booleans(),
    linear=st.booleans(),
)
def test_no_hit_crosses_tenant_acl_or_metadata(docs, tenant, groups, sources, query, qvec, dense_down, linear) -> None:  # type: ignore[no-untyped-def]
    flt = SearchFilter(tenant, tuple(groups), metadata={"source_id": tuple(sources)} if sources else {})
    backend = _corpus(docs)
    s = Settings(
        vector_dims=DIMS,
        candidate_k=5,
        num_candidates=10,
        rerank_k=5,
        context_k=2,
        fusion_method="linear" if linear else "rrf",
    )
    vec = None if dense_down or not any(qvec) else np.asarray(qvec, dtype=np.float32)
    ret = backend.retrieve(query, vec, flt, s)
    allowed = {f"c{i}" for i, d in enumerate(docs) if _visible(d, tenant, groups, sources)}
    for name, hits in ret.channels.items():
        leaked = [h.chunk_id for h in hits if h.chunk_id not in allowed]
        assert not leaked, f"channel {name} leaked {leaked}"
        assert all(h.tenant_id == flt.tenant_id for h in hits)
    if vec is None:
        assert "dense" not in ret.channels
    fused = fuse_channels(ret.channels, s)
    assert {h.chunk_id for h in fused} <= allowed
    # The same filter inside every child of the native and client bodies, written out from the raw inputs.
    expected = {("term", "tenant_id", frozenset([tenant])), ("terms", "acl", frozenset([*groups, "public"]))}
    if sources:
        expected.add(("terms", "source_id", frozenset(sources)))
    validity = {
        "must_not": [
            {"range": {"meta.valid_from": {"gt": "now/d"}}},
            {"range": {"meta.valid_to": {"lt": "now/d"}}},
        ]
    }
    expected.add(("bool", json.dumps(validity, sort_keys=True), frozenset()))
    for native in (True, False):
        (req,) = search_requests(query, vec, flt, s, native=native)
        bodies = req.body[1::2] if not native else [req.body]
        for body in bodies:
            assert "post_filter" not in body
            if "knn" in body:
                assert _clauses(body["knn"]["filter"]) == expected
            elif "query" in body:
                assert _clauses(body["query"]["bool"]["filter"]) == expected
            else:
                retriever = body["retriever"]
                compound = retriever.get("rrf") or retriever.get("linear")
                children = compound["retrievers"] if compound else [retriever]
                for child in children:
                    inner = child.get("retriever", child)
                    (kind,) = inner
                    assert _clauses(inner[kind]["filter"]) == expected, kind


def test_exact_channel_finds_identifiers_only_inside_the_filter() -> None:
    docs = [
        {"tenant": "acme", "acl": ["support"], "lang": "en", "words": ["error", "E1042"], "vec": [1, 0, 0, 0]},
        {"tenant": "globex", "acl": ["public"], "lang": "en", "words": ["E1042", "E1042"], "vec": [1, 0, 0, 0]},
        {"tenant": "acme", "acl": ["hr"], "lang": "en", "words": ["E1042"], "vec": [1, 0, 0, 0]},
        {"tenant": "acme", "acl": ["public"], "lang": "en", "words": ["sync", "error"], "vec": [1, 0, 0, 0]},
    ]
    backend = _corpus(docs)
    ret = backend.retrieve("what is E1042", None, SearchFilter("acme", ("support",)), Settings(vector_dims=DIMS))
    assert [h.chunk_id for h in ret.channels["exact"]] == ["c0"]
    assert ret.channels["exact"][0].exact_score is not None and ret.channels["exact"][0].exact_score > 0
    assert any("exact channel" in n for n in ret.notes)
