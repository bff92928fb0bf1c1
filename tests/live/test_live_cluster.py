"""Live-cluster tests of the Elasticsearch backend (skipped unless ``ES_URL`` is set).

They check what only a real cluster can tell: that the rendered templates and pipeline are accepted
and behave (``_simulate``), that the hard filter really hides the other tenant on every fusion path the
licence allows, that client-side RRF over ``_msearch`` reproduces the native ``rrf`` retriever, and
that re-ingesting is idempotent.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from es_rag.backend import Retrieval  # noqa: E402
from es_rag.elasticsearch.assets import ASSET_VERSION, setup_requests  # noqa: E402
from es_rag.elasticsearch.backend import ElasticsearchBackend  # noqa: E402
from es_rag.es_request import EsRequest  # noqa: E402
from es_rag.filters import SearchFilter  # noqa: E402
from es_rag.records import Chunk, Hit  # noqa: E402
from es_rag.settings import Settings  # noqa: E402
from es_rag.stages.fusion import reciprocal_rank_fusion  # noqa: E402

QUERY = "rotate api keys"
QVEC = np.array([1.0, 0.1, 0.0, 0.0], dtype=np.float32)

# (chunk_id, tenant, acl, text, vector): both tenants hold look-alike content, and tenant B's vectors
# sit closest to the query vector, so any leak through either channel would show up at the top.
_ROWS: list[tuple[str, str, tuple[str, ...], str, list[float]]] = [
    ("acme-1", "acme", ("public",), "How to rotate api keys every 90 days.", [0.9, 0.3, 0.1, 0.1]),
    ("acme-2", "acme", ("public",), "API keys: create, rotate and revoke keys.", [0.6, 0.6, 0.2, 0.1]),
    ("acme-3", "acme", ("public",), "Rotate credentials after an incident.", [0.3, 0.9, 0.2, 0.1]),
    ("acme-4", "acme", ("public",), "Keys for the office are at reception.", [0.1, 0.2, 0.9, 0.3]),
    ("acme-5", "acme", ("public",), "The sync engine retries failed uploads.", [0.8, 0.1, 0.5, 0.2]),
    ("acme-6", "acme", ("public",), "Api gateway limits and quotas.", [0.2, 0.2, 0.2, 0.9]),
    ("acme-fin", "acme", ("finance",), "Rotate api keys of the payment provider.", [0.95, 0.2, 0.0, 0.1]),
    ("globex-1", "globex", ("public",), "Rotate api keys: rotate api keys now.", [1.0, 0.1, 0.0, 0.0]),
    ("globex-2", "globex", ("public",), "How to rotate api keys every 30 days.", [0.99, 0.12, 0.0, 0.01]),
    ("globex-3", "globex", ("public",), "Api keys rotate rotate rotate.", [0.98, 0.1, 0.05, 0.0]),
]
ACME_PUBLIC = {r[0] for r in _ROWS if r[1] == "acme" and "public" in r[2]}
GLOBEX = {r[0] for r in _ROWS if r[1] == "globex"}


def refresh(backend: ElasticsearchBackend) -> None:
    """Make every write visible to search (``POST <index>/_refresh``)."""
    s = backend.settings
    backend.send(EsRequest("POST", f"{s.chunk_index},{s.parent_index}/_refresh"))


def make_chunks() -> list[Chunk]:
    chunks = []
    for chunk_id, tenant, acl, text, vector in _ROWS:
        chunks.append(
            Chunk(
                chunk_id=chunk_id,
                source_id=f"{tenant}-handbook",
                source_version="2025-01",
                parent_id=None,
                heading_path=("Handbook", "Security"),
                start_offset=0,
                end_offset=len(text),
                chunker_version="structure-1",
                tenant_id=tenant,
                acl=acl,
                title="Security handbook",
                text=text,
                token_count=len(text.split()),
                source_path=f"{tenant}/handbook.md",
                embedding_version="hand-made",
                vector=np.asarray(vector, dtype=np.float32),
            )
        )
    return chunks


def backend_with(base: ElasticsearchBackend, **changes: Any) -> ElasticsearchBackend:
    """A second backend on the same client and prefix, with other settings (and its own probe cache)."""
    return ElasticsearchBackend(base.client, base.settings.replace(**changes))


def all_hits(ret: Retrieval) -> list[Hit]:
    return list(ret.fused or []) + [h for hits in ret.channels.values() for h in hits]


def simulate(backend: ElasticsearchBackend, source: dict[str, Any], doc_id: str = "placeholder-id") -> dict[str, Any]:
    body = {"docs": [{"_index": backend.settings.chunk_index, "_id": doc_id, "_source": source}]}
    resp = backend.send(EsRequest("POST", f"_ingest/pipeline/{backend.settings.pipeline_id}/_simulate", body))
    (item,) = resp["docs"]
    return dict(item)


@pytest.fixture(scope="module")
def ingested(installed: ElasticsearchBackend) -> ElasticsearchBackend:
    report = installed.index(make_chunks())
    assert report.failed == [], report.failed
    assert report.indexed == len(_ROWS)
    refresh(installed)
    return installed


def fusion_paths(backend: ElasticsearchBackend) -> list[str]:
    caps = backend_with(backend).probe()
    return ["client", "native"] if caps.native_rrf else ["client"]


# ---------------------------------------------------------------------------------------------
@pytest.mark.live
def test_setup_twice_is_idempotent_and_doctor_sees_current_assets(installed: ElasticsearchBackend) -> None:
    s = installed.settings
    for _ in range(2):
        rows = installed.setup()
        assets = rows[: len(setup_requests(s))]
        assert [r["acknowledged"] for r in assets] == [True] * len(assets), rows
        assert [r["acknowledged"] for r in rows[len(assets) :]] == ["exists", "exists"], rows

    report = backend_with(installed).doctor()  # fresh probe, not the cached one
    assert report["assets"]["missing_or_stale"] == {}
    installed_assets = report["cluster"]["installed_assets"]
    assert set(installed_assets) == {r.path for r in setup_requests(s)}
    assert set(installed_assets.values()) == {ASSET_VERSION}  # the stored search template's marker included
    assert f"_scripts/{s.index.prefix}-hybrid" in installed_assets
    # the analyzer read back from the installed component templates, per text field
    assert report["analysis"]["check"].startswith("ok"), report["analysis"]
    assert report["analysis"]["installed"]["chunks"]["text"] == f"{s.index.analyzer.value} (es_rag_text)"

    # the index templates really applied: the chunk index writes through the chunk pipeline
    got = installed.send(EsRequest("GET", f"{s.chunk_index}/_settings"))
    index_settings = next(iter(got.values()))["settings"]["index"]
    assert index_settings["default_pipeline"] == s.pipeline_id
    mapping = next(iter(installed.send(EsRequest("GET", f"{s.chunk_index}/_mapping")).values()))
    assert mapping["mappings"]["properties"]["vector"]["dims"] == 4


@pytest.mark.live
def test_pipeline_simulate_sets_id_hash_and_time(installed: ElasticsearchBackend) -> None:
    chunk = make_chunks()[0]
    item = simulate(installed, chunk.to_source())
    assert "error" not in item, item
    doc = item["doc"]
    assert doc["_id"] == chunk.chunk_id
    src = doc["_source"]
    assert isinstance(src["content_hash"], str) and src["content_hash"]
    assert src["ingested_at"]
    # the hash depends on the text only
    same = simulate(installed, {**chunk.to_source(), "title": "another title"})["doc"]["_source"]
    other = simulate(installed, {**chunk.to_source(), "text": chunk.text + "!"})["doc"]["_source"]
    assert same["content_hash"] == src["content_hash"]
    assert other["content_hash"] != src["content_hash"]


@pytest.mark.live
@pytest.mark.parametrize(
    ("field", "value"), [("tenant_id", None), ("tenant_id", "   "), ("source_id", None), ("text", None), ("text", "")]
)
def test_pipeline_simulate_refuses_a_doc_without_a_required_field(
    installed: ElasticsearchBackend, field: str, value: str | None
) -> None:
    source = make_chunks()[0].to_source()
    if value is None:
        source.pop(field)
    else:
        source[field] = value
    item = simulate(installed, source)
    assert "doc" not in item, item
    error = item["error"]
    assert error["type"] == "fail_processor_exception"
    assert f"'{field}'" in error["reason"]


@pytest.mark.live
def test_bulk_through_the_pipeline_reports_a_doc_missing_tenant(installed: ElasticsearchBackend) -> None:
    """A document that slips past the client-side check is refused by the pipeline and reported."""
    source = make_chunks()[0].to_source()
    source.pop("tenant_id")
    source["chunk_id"] = "no-tenant"
    resp = installed.send(
        EsRequest("POST", "_bulk", [{"index": {"_index": installed.settings.chunk_index, "_id": "no-tenant"}}, source])
    )
    assert resp["errors"] is True
    item = resp["items"][0]["index"]
    assert item["error"]["type"] == "fail_processor_exception"
    assert "'tenant_id'" in item["error"]["reason"]


@pytest.mark.live
def test_search_never_crosses_tenants_on_any_allowed_fusion_path(ingested: ElasticsearchBackend) -> None:
    for path in fusion_paths(ingested):
        backend = backend_with(ingested, fusion_path=path)
        for tenant, own in (("acme", ACME_PUBLIC), ("globex", GLOBEX)):
            ret = backend.retrieve(QUERY, QVEC, SearchFilter(tenant), backend.settings)
            assert ret.path == ("native-rrf" if path == "native" else "client-rrf"), (path, ret.notes)
            hits = all_hits(ret)
            assert hits, f"{path}: no hits for {tenant}"
            assert {h.tenant_id for h in hits} == {tenant}, f"{path}: another tenant leaked into {tenant}"
            assert {h.chunk_id for h in hits} <= own, f"{path}: {sorted({h.chunk_id for h in hits} - own)}"
        # ACL: the finance chunk only for a caller in the finance group
        public_only = {
            h.chunk_id for h in all_hits(backend.retrieve(QUERY, QVEC, SearchFilter("acme"), backend.settings))
        }
        with_finance = {
            h.chunk_id
            for h in all_hits(backend.retrieve(QUERY, QVEC, SearchFilter("acme", ("finance",)), backend.settings))
        }
        assert "acme-fin" not in public_only
        assert "acme-fin" in with_finance
        assert not with_finance & GLOBEX


@pytest.mark.live
def test_client_rrf_over_msearch_equals_native_rrf(ingested: ElasticsearchBackend) -> None:
    caps = backend_with(ingested).probe()
    if not caps.native_rrf:
        pytest.skip(f"native rrf not allowed on this cluster: {caps.native_rrf_reason}")
    s: Settings = ingested.settings
    flt = SearchFilter("acme")

    client = backend_with(ingested, fusion_path="client")
    ret_c = client.retrieve(QUERY, QVEC, flt, client.settings)
    assert set(ret_c.channels) == {"bm25", "dense"}, ret_c.notes
    lists = [[h.chunk_id for h in ret_c.channels["bm25"]], [h.chunk_id for h in ret_c.channels["dense"]]]
    assert lists[0] != lists[1], "test data should give the two channels different orders"
    fused = reciprocal_rank_fusion(lists, rank_constant=s.fusion.rank_constant, rank_window_size=s.retrieve.candidate_k)
    client_scores = {f.id: f.score for f in fused}

    native = backend_with(ingested, fusion_path="native")
    ret_n = native.retrieve(QUERY, QVEC, flt, native.settings)
    assert ret_n.path == "native-rrf" and ret_n.fused is not None
    native_ids = [h.chunk_id for h in ret_n.fused]

    assert set(native_ids) == set(client_scores)
    for h in ret_n.fused:  # Elasticsearch computes 1/(k+rank) in float32
        assert h.fused_score == pytest.approx(client_scores[h.chunk_id], rel=1e-5)
    ordered = [client_scores[i] for i in native_ids]
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(ordered)), "native order disagrees with client RRF"

    # top results: the same ids at every score level (ties may be ordered differently)
    def levels(ids: list[str]) -> list[set[str]]:
        out: dict[float, set[str]] = {}
        for i in ids:
            out.setdefault(round(client_scores[i], 7), set()).add(i)
        return [out[k] for k in sorted(out, reverse=True)]

    assert levels(native_ids)[:3] == levels([f.id for f in fused])[:3]


@pytest.mark.live
def test_reingesting_the_same_chunks_keeps_the_count(ingested: ElasticsearchBackend) -> None:
    before = ingested.count()
    assert before == len(_ROWS)
    report = ingested.index(make_chunks())
    assert report.failed == [] and report.indexed == len(_ROWS)
    refresh(ingested)
    assert ingested.count() == before
    got = ingested.send(EsRequest("GET", f"{ingested.settings.chunk_index}/_doc/acme-1"))
    assert got["_id"] == "acme-1" and got["_source"]["tenant_id"] == "acme"
