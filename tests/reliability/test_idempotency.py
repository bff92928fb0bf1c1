"""Idempotency and lineage on both backends: re-ingest leaves the same documents, delete-source leaves 0
chunks, 0 parents and 0 cache entries, and a version switch never serves both versions or none (observed
after every write the Elasticsearch fake receives and after every embedded write)."""

from __future__ import annotations

from typing import Any

import pytest

from es_rag.chunking import make_chunker
from es_rag.cross_encoder.result_cache import ResultCache
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, delete_source, ingest_documents
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.corpus import DIMS, OverlapReranker, RandomEmbedder, WordTokenizer
from tests.support.es_cluster import cluster_backend

S = Settings(vector_dims=DIMS, candidate_k=8, num_candidates=16, rerank_k=8, context_k=4, token_budget=400)
TEXT = "# Guide\n\n## Sync\n\nThe sync engine retries E1042.\n\n## Wipe\n\nRemote wipe needs a token.\n"


def _doc(version: str, text: str = TEXT, source: str = "guide", tenant: str = "acme") -> SourceDoc:
    return SourceDoc(source_id=source, text=text, tenant_id=tenant, acl=("public",), source_version=version)


def _make(kind: str) -> tuple[Any, Any]:
    if kind == "embedded":
        b = EmbeddedBackend(dims=DIMS)
        return b, lambda: (
            {k: _strip(v) for k, v in b._children.items()},
            {k: _strip(v) for k, v in b._parents.items()},
        )
    backend, _, cluster = cluster_backend(S)
    return backend, lambda: (
        {k: _strip(v) for k, v in cluster.docs(S.chunk_index).items()},
        {k: _strip(v) for k, v in cluster.docs(S.parent_index).items()},
    )


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "ingested_at"}


@pytest.fixture(scope="module")
def chunker(minilm_tokenizer: Any) -> Any:
    return make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=24, overlap=4)


@pytest.mark.parametrize("kind", ["embedded", "elasticsearch"])
def test_reingesting_the_same_source_twice_leaves_the_same_documents(kind: str, chunker: Any) -> None:
    backend, snapshot = _make(kind)
    docs = [_doc("v1"), _doc("v1", "Other source text about wipes.\n", source="faq"), _doc("v1", tenant="globex")]
    r1 = ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    first = snapshot()
    r2 = ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    second = snapshot()
    assert r1.failed == r2.failed == [] and r1.indexed > 0
    # incremental ingest (issue 31), on both backends: the registry records the digest of what each source holds, and
    # a source with the same digest is neither embedded nor written again
    assert r2.indexed == 0 and sorted(r2.unchanged) == ["faq", "guide", "guide"]
    assert len(first[0]) == r1.chunks and len(first[1]) == r1.parents > 0
    assert second == first  # same ids, same content, same hashes: nothing duplicated, nothing lost
    assert r2.switched == []  # same version: rewritten in place, no switch


@pytest.mark.parametrize("kind", ["embedded", "elasticsearch"])
def test_delete_source_leaves_zero_chunks_parents_and_cache_entries(kind: str, chunker: Any) -> None:
    backend, snapshot = _make(kind)
    docs = [_doc("v1"), _doc("v1", "Wipe text in the faq.\n", source="faq"), _doc("v1", tenant="globex")]
    ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    cache = ResultCache(64)
    pipe = RagPipeline(
        backend,
        embedder=RandomEmbedder(),
        settings=S,
        tokenizer=WordTokenizer(),
        reranker=OverlapReranker(),
        cache=cache,
    )
    for q in ("sync engine", "remote wipe token", "E1042", "wipe faq"):
        pipe.search(q, SearchFilter("acme"))
        pipe.search(q, SearchFilter("globex"))
    before = len(cache)
    assert before == 8
    out = delete_source(backend, "acme", "guide", listeners=[cache])
    assert out["remaining"] == {"chunks": 0, "parents": 0} and out["deleted"] > 0
    children, parents = snapshot()
    assert not [d for d in children.values() if (d["tenant_id"], d["source_id"]) == ("acme", "guide")]
    assert not [d for d in parents.values() if (d["tenant_id"], d["source_id"]) == ("acme", "guide")]
    assert any(d["tenant_id"] == "globex" and d["source_id"] == "guide" for d in children.values())
    # no cached result computed over acme/guide survives; the others do
    tags = cache._sources.values()
    assert not [t for t in tags if any(x[:2] == ("acme", "guide") for x in t)]
    assert 0 < len(cache) < before
    # and searching again serves nothing of it
    for q in ("sync engine", "remote wipe token", "E1042"):
        assert all(h.source_id != "guide" for h in pipe.search(q, SearchFilter("acme")).candidates)


@pytest.mark.parametrize("kind", ["embedded", "elasticsearch"])
def test_a_version_switch_never_serves_both_versions_or_none(kind: str, chunker: Any) -> None:
    backend, _ = _make(kind)
    ingest_documents(
        [_doc("v1", TEXT.replace("retries", "v1 retries"))], chunker=chunker, embedder=RandomEmbedder(), backend=backend
    )
    observed: list[set[str]] = []

    def served() -> set[str]:
        flt = backend.snapshot_versions(SearchFilter("acme"))
        ret = backend.retrieve("sync engine retries wipe token", None, flt, S)
        parents = backend.get_parents(["__none__"], flt)
        assert parents == {}
        return {h.source_version or "" for hs in ret.channels.values() for h in hs}

    if kind == "embedded":
        for name in ("index", "delete_source"):
            original = getattr(backend, name)

            def spy(*a: Any, _orig: Any = original, **k: Any) -> Any:
                out = _orig(*a, **k)
                observed.append(served())
                return out

            setattr(backend, name, spy)
        store_versions = backend.versions

        class Watch(dict):  # type: ignore[type-arg]
            def __setitem__(self, key: str, value: Any) -> None:
                super().__setitem__(key, value)
                observed.append(served())

        backend.versions = Watch(store_versions)
    else:
        cluster = backend.client.transport.node_pool.all()[0]._routes[0].responders[0].__self__
        cluster.after_write.append(lambda label: observed.append(served()))
    for version in ("v2", "v3", "v4"):
        text = TEXT.replace("retries", f"{version} retries")
        report = ingest_documents([_doc(version, text)], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
        assert report.switched and report.switched[0]["version"] == version
    assert len(observed) >= 12, observed  # several writes per re-ingest were observed
    assert all(len(s) == 1 for s in observed), observed  # never both, never none
    assert observed[-1] == {"v4"}
    assert [s for s in observed if s] == observed


@pytest.mark.parametrize("kind", ["embedded", "elasticsearch"])
def test_the_same_source_in_two_tenants_keeps_both_copies(kind: str, chunker: Any) -> None:
    """Regression: chunk ids did not include the tenant, so the second tenant's ingest of the same file
    (same path, same content-derived version) overwrote the first tenant's chunks."""
    backend, snapshot = _make(kind)
    r = ingest_documents(
        [_doc("v1", tenant="acme"), _doc("v1", tenant="globex")],
        chunker=chunker,
        embedder=RandomEmbedder(),
        backend=backend,
    )
    children, parents = snapshot()
    assert len(children) == r.chunks and len(parents) == r.parents
    per_tenant = {t: sum(1 for d in children.values() if d["tenant_id"] == t) for t in ("acme", "globex")}
    assert per_tenant["acme"] == per_tenant["globex"] == r.chunks // 2 > 0
    assert backend.count(SearchFilter("acme")) == backend.count(SearchFilter("globex")) == r.chunks // 2


@pytest.mark.parametrize("kind", ["embedded", "elasticsearch"])
def test_a_purge_a_crash_interrupted_is_finished_by_the_next_ingest(
    kind: str, chunker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: a crash after the switch but before the purge of the retired version finished left its chunks,
    parents and hidden key stored forever. The switch now lists what it retires (``retired``) in the same registry
    write; the next ingest of the tenant, of any source, deletes it."""
    backend, state = _make(kind)
    store_type = type(backend.version_store())
    ingest = {"chunker": chunker, "embedder": RandomEmbedder(), "backend": backend}
    ingest_documents([_doc("v1")], **ingest)
    real = store_type.purge_retired

    def killed(self: Any, tenant_id: str, also: Any = ()) -> Any:
        raise KeyboardInterrupt("killed between the switch and the purge")

    monkeypatch.setattr(store_type, "purge_retired", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest_documents([_doc("v2", TEXT.replace("token", "passcode"))], **ingest)
    registry = backend.version_store().state("acme")
    assert registry.active == {"guide": "v2"} and registry.retired == ["guide@v1"] == registry.hidden
    chunks, parents = state()
    assert {d["source_version"] for d in chunks.values()} == {"v1", "v2"}  # v1 still stored, hidden
    monkeypatch.setattr(store_type, "purge_retired", real)
    ingest_documents([_doc("w1", "# Other\n\nAnother source.\n", source="other")], **ingest)
    registry = backend.version_store().state("acme")
    assert registry.retired == [] and registry.hidden == []
    chunks, parents = state()
    assert {d["source_version"] for d in (*chunks.values(), *parents.values()) if d["source_id"] == "guide"} == {"v2"}


def test_a_registry_of_asset_version_9_still_switches_and_setup_adds_the_field(
    chunker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A registry index created before asset version 10 has no ``retired`` field, and its ``dynamic: strict``
    mapping refuses it: the switch is written without it (as before) with one warning naming ``es-rag setup``, and
    setup's ``PUT _mapping`` adds the field to the live index."""
    from tests.support.double.mapping import parse_mapping

    backend, _, cluster = cluster_backend(S)
    registry = cluster.indices[S.index_name("versions")]
    old = registry.mapping.to_dict()
    del old["properties"]["retired"]
    registry.mapping = parse_mapping(old, analysis=registry.analysis, version=cluster.version_tuple)
    ingest = {"chunker": chunker, "embedder": RandomEmbedder(), "backend": backend}
    ingest_documents([_doc("v1")], **ingest)
    with caplog.at_level("WARNING"):
        ingest_documents([_doc("v2", TEXT.replace("token", "passcode"))], **ingest)
    assert "predates asset version 10" in caplog.text and "es-rag setup" in caplog.text
    state = backend.version_store().state("acme")
    assert state.active == {"guide": "v2"} and state.hidden == [] and state.retired == []  # purged all the same
    backend.setup()
    assert registry.mapping.to_dict()["properties"]["retired"] == {"type": "keyword"}
