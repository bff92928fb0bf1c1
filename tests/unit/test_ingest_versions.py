"""Ingestion: version switch without a both/neither window, lineage delete, JSONL/HTML loading, per-document
errors and truncation warnings -- on the embedded backend (persisted, reopened) and, for the request
sequence, on the Elasticsearch backend over a recording transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_rag.chunking import StructureChunker, make_chunker
from es_rag.cli import main
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.elasticsearch.versions import EsVersionStore
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.errors import ClusterError
from es_rag.filters import SearchFilter
from es_rag.ingest import IngestReport, SourceDoc, delete_source, ingest_documents, load_files
from es_rag.settings import Settings
from es_rag.versions.registry import RegistryState, VersionSnapshot
from tests.support.spec_bodies import RecordingClient


@pytest.fixture(scope="module")
def embedder(tiny_bi_encoder: Path) -> SentenceTransformerEmbedder:
    emb = SentenceTransformerEmbedder(str(tiny_bi_encoder))
    emb.warm_up()
    return emb


def _doc(text: str, version: str, source_id: str = "guide") -> SourceDoc:
    return SourceDoc(source_id=source_id, text=text, tenant_id="acme", acl=("public",), source_version=version)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def on_retired(self, tenant_id: str, source_id: str, source_version: str) -> None:
        self.events.append(("retired", tenant_id, source_id, source_version))

    def on_deleted(self, tenant_id: str, source_id: str) -> None:
        self.events.append(("deleted", tenant_id, source_id))


def _versions_served(backend: EmbeddedBackend) -> set[str]:
    flt = backend.snapshot_versions(SearchFilter("acme"))
    return {d["source_version"] for d in backend._children.values() if flt.matches(d)}


def test_reingest_switches_version_and_persists(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    chunker = StructureChunker(embedder.tokenizer(), max_tokens=40, overlap=5)
    backend = EmbeddedBackend(tmp_path, dims=embedder.dims)
    listener = Recorder()
    r1 = ingest_documents(
        [_doc("# G\n\nOld text about wipes.\n", "v1")], chunker=chunker, embedder=embedder, backend=backend
    )
    assert r1.switched == [{"tenant_id": "acme", "source_id": "guide", "version": "v1", "retired": ""}]
    assert _versions_served(backend) == {"v1"}
    backend.flush()

    reopened = EmbeddedBackend(tmp_path, dims=embedder.dims)
    assert _versions_served(reopened) == {"v1"}
    r2 = ingest_documents(
        [_doc("# G\n\nNew text about remote wipe.\n", "v2")],
        chunker=chunker,
        embedder=embedder,
        backend=reopened,
        listeners=[listener],
    )
    assert r2.switched[0]["retired"] == "v1"
    assert listener.events == [("retired", "acme", "guide", "v1")]
    assert _versions_served(reopened) == {"v2"}
    assert {d["source_version"] for d in reopened._children.values()} == {"v2"}  # v1 purged
    digests = reopened.versions["acme"].pop("digests")  # what v2 holds: the next run of the same text skips it
    assert list(digests) == ["guide"] and digests["guide"].startswith("sha256:")
    assert reopened.versions["acme"] == {"tenant_id": "acme", "active": {"guide": "v2"}, "hidden": []}
    hits = reopened.retrieve("remote wipe", embedder.embed_query("remote wipe"), SearchFilter("acme"), Settings())
    assert {h.source_version for hs in hits.channels.values() for h in hs} == {"v2"}

    # same version again: rewritten in place, nothing retired
    r3 = ingest_documents(
        [_doc("# G\n\nNew text about remote wipe.\n", "v2")], chunker=chunker, embedder=embedder, backend=reopened
    )
    assert r3.switched == [] and _versions_served(reopened) == {"v2"}


def test_no_window_where_both_or_neither_are_served(embedder) -> None:  # type: ignore[no-untyped-def]
    """Observe what a search would serve after every backend write of a re-ingest."""
    chunker = StructureChunker(embedder.tokenizer(), max_tokens=40, overlap=5)
    backend = EmbeddedBackend(None, dims=embedder.dims)
    ingest_documents([_doc("# G\n\nVersion one text.\n", "v1")], chunker=chunker, embedder=embedder, backend=backend)
    seen: list[set[str]] = []
    for name in ("index", "delete_source"):
        original = getattr(backend, name)

        def spy(*a: Any, _orig: Any = original, **k: Any) -> Any:
            out = _orig(*a, **k)
            seen.append(_versions_served(backend))
            return out

        setattr(backend, name, spy)
    ingest_documents([_doc("# G\n\nVersion two text.\n", "v2")], chunker=chunker, embedder=embedder, backend=backend)
    assert seen and all(len(s) == 1 for s in seen), seen  # never both, never neither
    assert seen[0] == {"v1"} and seen[-1] == {"v2"}


def test_failed_new_version_keeps_old_served(embedder) -> None:  # type: ignore[no-untyped-def]
    chunker = StructureChunker(embedder.tokenizer(), max_tokens=40, overlap=5)
    backend = EmbeddedBackend(None, dims=embedder.dims)
    ingest_documents([_doc("# G\n\nVersion one.\n", "v1")], chunker=chunker, embedder=embedder, backend=backend)

    class NaNEmbedder:
        version = "nan"

        def embed_documents(self, texts: list[str]) -> Any:
            import numpy as np

            return np.full((len(texts), embedder.dims), np.nan, dtype=np.float32)

    report = ingest_documents(
        [_doc("# G\n\nVersion two.\n", "v2")], chunker=chunker, embedder=NaNEmbedder(), backend=backend
    )
    assert report.failed and report.failed[0]["field"] == "vector"
    assert _versions_served(backend) == {"v1"}
    assert backend.versions["acme"]["hidden"] == []  # partial v2 purged
    assert {d["source_version"] for d in backend._parents.values()} == {"v1"}


def test_delete_source_removes_all_lineage(tmp_path: Path, embedder, capsys) -> None:  # type: ignore[no-untyped-def]
    chunker = StructureChunker(embedder.tokenizer(), max_tokens=40, overlap=5)
    backend = EmbeddedBackend(tmp_path, dims=embedder.dims)
    docs = [_doc("# A\n\nAlpha.\n\n# B\n\nBeta.\n", "v1"), _doc("# K\n\nKeep me.\n", "v1", "keep")]
    ingest_documents(docs, chunker=chunker, embedder=embedder, backend=backend)
    listener = Recorder()
    result = delete_source(backend, "acme", "guide", listeners=[listener])
    assert result == {"deleted": 4, "remaining": {"chunks": 0, "parents": 0}, "conflicts": 0, "failures": []}
    assert listener.events == [("deleted", "acme", "guide")]
    assert "guide" not in backend.versions["acme"]["active"]
    assert backend.count(SearchFilter("acme")) == 1
    backend.flush()
    rc = main(["delete-source", "keep", "--tenant", "acme", "--index-dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert rc == 0 and out["remaining"] == {"chunks": 0, "parents": 0} and out["deleted"] == 2
    assert EmbeddedBackend(tmp_path).count() == 0


def test_load_jsonl_html_and_errors(tmp_path: Path, minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.jsonl").write_text(
        "\n".join(
            [
                json.dumps({"id": "r1", "text": "Row one text.", "title": "R1"}),
                "{not json",
                json.dumps({"id": "r3"}),
                json.dumps({"source_id": "r4", "text": "<h1>H</h1><p>x</p>", "format": "html", "acl": "eng"}),
                json.dumps({"id": "r5", "text": "t", "format": "pdf"}),
            ]
        ),
        encoding="utf-8",
    )
    (tmp_path / "b.html").write_text("<h1>Doc</h1><p>Body.</p>", encoding="utf-8")
    report = IngestReport()
    docs = load_files([tmp_path], tenant_id="acme", acl=["public"], report=report)
    assert [(d.source_id, d.fmt) for d in docs] == [
        ("r1", "plain"),
        ("r4", "html"),
        ("b.html", "html"),  # ids are paths relative to the folder given
    ]
    assert docs[1].acl == ("eng",)
    assert [(f["document"].rsplit("/", 1)[-1], f["field"]) for f in report.failed] == [
        ("a.jsonl:2", "json"),
        ("a.jsonl:3", "text"),
        ("a.jsonl:5", "format"),
    ]
    assert report.timings["parse"] > 0


def test_truncation_is_reported(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from es_rag.ingest import chunk_documents

    # a title longer than the model's input leaves no room: the chunk is reported, never cut silently
    chunker = make_chunker(minilm_tokenizer, strategy="structure", max_tokens=64, contextual=True)
    doc = SourceDoc("s", "# H\n\nBody text.\n", "acme", ("public",), "v1", title="word " * 400)
    report = IngestReport()
    children, _ = chunk_documents([doc], chunker, report)
    assert children and report.warnings
    assert report.warnings[0]["field"] == "contextual_text" and "would be truncated" in report.warnings[0]["reason"]


def test_gate_in_filter_and_predicate() -> None:
    gate = VersionSnapshot("acme", index="es-rag-versions", hidden=frozenset({"g@v1"}))
    flt = SearchFilter("acme").with_versions(gate)
    assert flt.to_es()[-1] == {
        "bool": {
            "must_not": [
                {"terms": {"version_key": {"index": "es-rag-versions", "id": "acme", "path": "hidden"}}},
                {"terms": {"source_id": {"index": "es-rag-versions", "id": "acme", "path": "superseded"}}},
            ]
        }
    }
    base = {"tenant_id": "acme", "acl": ["public"]}
    assert not flt.matches({**base, "version_key": "g@v1"})
    assert flt.matches({**base, "version_key": "g@v2"}) and flt.matches(base)
    inline = VersionSnapshot("acme", hidden=frozenset({"b", "a"})).to_es()
    assert inline == {"bool": {"must_not": [{"terms": {"version_key": ["a", "b"]}}]}}


def test_registry_state_machine() -> None:
    st = RegistryState("acme")
    assert st.begin("g", "v1") and st.hidden == ["g@v1"]
    assert st.commit("g", "v1") is None and st.hidden == [] and st.active == {"g": "v1"}
    assert not st.begin("g", "v1")  # same version: in place
    assert st.begin("g", "v2") and st.hidden == ["g@v2"]
    assert st.commit("g", "v2") == "g@v1" and st.hidden == ["g@v1"]
    st.forget(["g@v1"])
    st.drop_source("g")
    assert st.to_doc() == {"tenant_id": "acme", "active": {}, "hidden": []}


def test_es_store_request_sequence_and_conflict_retry() -> None:
    settings = Settings()
    state: dict[str, Any] = {"doc": None, "seq": 0, "conflicts": 1}

    def respond(method: str, path: str, body: Any = None) -> Any:
        p = path.strip("/")
        if p.startswith("es-rag-versions/_doc/acme") and method == "GET":
            if state["doc"] is None:
                return {"found": False}
            return {"found": True, "_source": state["doc"], "_seq_no": state["seq"], "_primary_term": 1}
        if p.startswith("es-rag-versions/_doc/acme") and method == "PUT":
            state["doc"], state["seq"] = body, state["seq"] + 1
            return {"result": "updated"}
        if "_delete_by_query" in p:
            return {"deleted": 3}
        if p.endswith("_count"):
            return {"count": 0}
        return {}

    client = RecordingClient(respond)
    store = EsVersionStore(ElasticsearchBackend(client, settings))
    assert store.begin("acme", [("g", "v1")]) == [("g", "v1")]
    store.refresh()
    assert store.commit("acme", [("g", "v1")]) == []
    store.begin("acme", [("g", "v2")])
    assert store.commit("acme", [("g", "v2")]) == [("g", "v1")]
    assert state["doc"]["hidden"] == ["g@v1"]
    purged = store.purge("acme", [("g", "v1")])
    assert purged.deleted == 6 and purged.clean and purged.kept_hidden == []
    assert state["doc"] == {"tenant_id": "acme", "active": {"g": "v2"}, "hidden": []}
    assert store.delete_source("acme", "g") == {
        "deleted": 6,
        "remaining": {"chunks": 0, "parents": 0},
        "conflicts": 0,
        "failures": [],
    }
    paths = [f"{c.method} {c.path}" for c in client.calls]
    assert paths[:2] == ["GET es-rag-versions/_doc/acme", "PUT es-rag-versions/_doc/acme?op_type=create"]
    assert "POST es-rag-chunks,es-rag-parents/_refresh" in paths
    assert "PUT es-rag-versions/_doc/acme?if_seq_no=1&if_primary_term=1" in paths
    dbq = [c for c in client.calls if "_delete_by_query" in c.path]
    assert dbq[0].body == {
        "query": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}, {"terms": {"version_key": ["g@v1"]}}]}}
    }

    # a 409 on the registry write is retried with a fresh read
    class Conflict(RecordingClient):
        def perform_request(self, method: str, path: str, headers: Any = None, body: Any = None) -> Any:
            if method == "PUT" and state["conflicts"]:
                state["conflicts"] -= 1
                raise ClusterError("version conflict", status=409)
            return super().perform_request(method, path, headers, body)

    store2 = EsVersionStore(ElasticsearchBackend(Conflict(respond), settings))
    store2.begin("acme", [("g", "v3")])
    assert "g@v3" in state["doc"]["hidden"] and state["conflicts"] == 0


def test_es_gate_reaches_parents_and_count_bodies() -> None:
    """One registry read per call; its hidden keys inlined into every later request of that call."""

    def answer(method: str, path: str, body: Any) -> Any:
        if path.split("?")[0].endswith("/_doc/acme"):
            return {"found": True, "_seq_no": 3, "_primary_term": 1, "_source": {"hidden": ["s@v2", "s@v0"]}}
        return {"hits": {"hits": []}, "count": 0}

    client = RecordingClient(answer)
    backend = ElasticsearchBackend(client, Settings())
    flt = backend.snapshot_versions(SearchFilter("acme"))
    backend.get_parents(["p"], flt)
    backend.count(flt)
    inline = {"terms": {"version_key": ["s@v0", "s@v2"]}}
    # a search reads only what its snapshot needs of the registry, not the active versions and digests of every source
    registry = "es-rag-versions/_doc/acme?_source_includes=hidden,superseded"
    paths = [registry, "es-rag-parents/_search", "es-rag-chunks/_count"]
    assert [c.path for c in client.calls] == paths
    for call in client.calls[1:]:
        assert {"bool": {"must_not": [inline]}} in call.body["query"]["bool"]["filter"], call
