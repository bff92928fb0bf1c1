"""Unit tests of :class:`es_rag.elasticsearch.backend.ElasticsearchBackend` against a fake node.

The client is a real ``elasticsearch.Elasticsearch`` 9.x; only its node is replaced by
:class:`tests.support.es_transport.FakeNode`, which records every request and answers canned bodies shaped like real
Elasticsearch responses. So these tests see what goes on the wire (paths, NDJSON lines, headers) and
exercise the client's own serialisation, retries and ``helpers.streaming_bulk``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from elastic_transport import ConnectionError as TransportConnectionError  # noqa: E402
from elasticsearch import UnsupportedProductError  # noqa: E402

from es_rag.backend import Retrieval  # noqa: E402
from es_rag.elasticsearch.assets import ASSET_VERSION, index_creation_requests, obsolete_asset_paths, setup_requests  # noqa: E402
from es_rag.elasticsearch.backend import ElasticsearchBackend  # noqa: E402
from es_rag.elasticsearch.probe import decide_native_rrf  # noqa: E402
from es_rag.errors import ClusterError, ConfigError  # noqa: E402
from es_rag.filters import SearchFilter  # noqa: E402
from es_rag.records import Chunk  # noqa: E402
from es_rag.settings import Settings  # noqa: E402
from tests.support.es_transport import (  # noqa: E402
    FakeNode,
    RecordedRequest,
    acknowledged,
    bulk_actions,
    bulk_item_fail_processor,
    bulk_item_ok,
    bulk_item_rejected,
    bulk_responder,
    bulk_response,
    cluster_routes,
    component_template_missing,
    error_body,
    fail_processor_message,
    hit,
    index_already_exists,
    index_created,
    index_not_found_error,
    knn_dims_mismatch_error,
    make_backend,
    msearch_response,
    rejected_execution_error,
    rrf_license_error,
    search_response,
    unauthorized_error,
)
from tests.support.page_fields import PAGE_FIELDS_UPDATE  # noqa: E402

# ja:cjk: every analyzer concrete, so setup sends no probe (a bare ja asks the cluster whether kuromoji is installed)
SETTINGS = Settings(
    candidate_k=20,
    num_candidates=40,
    rerank_k=10,
    context_k=5,
    rank_constant=42,
    rerank_model=None,
    languages="en,ja:cjk",
)
CHUNKS_INDEX = SETTINGS.chunk_index  # es-rag-chunks
SEARCH = f"/{CHUNKS_INDEX}/_search"
MSEARCH = f"/{CHUNKS_INDEX}/_msearch"
FLT = SearchFilter("acme", ("eng",))
VALIDITY = {
    "bool": {
        "must_not": [
            {"range": {"meta.valid_from": {"gt": "now/d"}}},
            {"range": {"meta.valid_to": {"lt": "now/d"}}},
        ]
    }
}
"""Every search's validity clause at the request's day (es_rag.metadata.Validity, written out by hand)."""
FLT_CLAUSES = [{"term": {"tenant_id": "acme"}}, {"terms": {"acl": ["eng", "public"]}}, VALIDITY]
QVEC = np.array([0.1, -0.2, 0.3, 0.4], dtype=np.float32)


def doc(chunk_id: str, tenant: str = "acme", **extra: Any) -> dict[str, Any]:
    """A stored chunk document as the ingest pipeline leaves it."""
    src = {
        "chunk_id": chunk_id,
        "source_id": f"src-{chunk_id}",
        "source_version": "v1",
        "parent_id": f"p-{chunk_id}",
        "heading_path": ["Guide", "Keys"],
        "start_offset": 0,
        "end_offset": 42,
        "chunker_version": "structure-1",
        "embedding_version": "minilm@1",
        "tenant_id": tenant,
        "acl": ["public"],
        "title": "Guide",
        "text": f"text of {chunk_id}",
        "token_count": 9,
        "content_hash": "ab" * 32,
        "vector": [0.1, 0.2, 0.3, 0.4],
    }
    src.update(extra)
    return src


def chunk(
    chunk_id: str,
    *,
    tenant: str = "acme",
    source_path: str | None = None,
    text: str | None = None,
    kind: str = "child",
    vector: bool = True,
) -> Chunk:
    body = text if text is not None else f"text of {chunk_id}"
    return Chunk(
        chunk_id=chunk_id,
        source_id=f"src-{chunk_id}",
        source_version="v1",
        parent_id=None if kind == "parent" else f"p-{chunk_id}",
        heading_path=("Guide",),
        start_offset=0,
        end_offset=len(body),
        chunker_version="structure-1",
        tenant_id=tenant,
        acl=("public",),
        title="Guide",
        text=body,
        token_count=4,
        kind=kind,
        source_path=source_path or f"docs/{chunk_id}.md",
        embedding_version="minilm@1" if vector else None,
        vector=np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32) if vector else None,
    )


def backend_on(
    *,
    version: str = "9.1.0",
    license_type: str = "trial",
    license_status: str = "active",
    settings: Settings = SETTINGS,
    **routes_kw: Any,
) -> tuple[ElasticsearchBackend, FakeNode]:
    return make_backend(
        settings,
        cluster_routes(
            settings, version=version, license_type=license_type, license_status=license_status, **routes_kw
        ),
    )


def probed(**kw: Any) -> tuple[ElasticsearchBackend, FakeNode]:
    """A backend that has already probed its cluster; the node's record is cleared."""
    backend, node = backend_on(**kw)
    backend.probe()
    node.reset()
    return backend, node


def child_retriever(child: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(kind, body)`` of an rrf child, with or without the weighted ``{"retriever": ...}`` wrapper."""
    inner = child["retriever"] if "retriever" in child else child
    ((kind, body),) = inner.items()
    return kind, body


def ok_msearch(bm25_ids: list[str], dense_ids: list[str]) -> dict[str, Any]:
    return msearch_response(
        [
            search_response([hit(doc(i), 10.0 - n) for n, i in enumerate(bm25_ids)]),
            search_response([hit(doc(i), 0.99 - n / 100) for n, i in enumerate(dense_ids)]),
        ]
    )


# =============================================================================================
# probe: which fusion path the licence and the version allow
# =============================================================================================
def test_probe_trial_95_allows_native_rrf() -> None:
    backend, node = backend_on(version="9.5.0", license_type="trial")
    caps = backend.probe()
    assert caps.native_rrf is True
    assert "trial" in caps.native_rrf_reason
    assert (caps.version, caps.license_type, caps.license_status) == ("9.5.0", "trial", "active")
    assert backend.fusion_path() == "native"
    # the probe asked the cluster what it is, and nothing else changed state
    assert node.lines()[:4] == ["GET /", "GET /_license", "GET /_inference/_all", "GET /_nodes/plugins"]
    assert {r.method for r in node.requests} == {"GET"}
    assert node.requests[0].headers["accept"] == "application/vnd.elasticsearch+json; compatible-with=9"
    # cached: a second probe sends nothing, refresh=True probes again
    sent = len(node.requests)
    backend.probe()
    assert len(node.requests) == sent
    backend.probe(refresh=True)
    assert len(node.requests) == 2 * sent


def test_probe_basic_uses_client_fusion() -> None:
    backend, _ = backend_on(version="9.5.0", license_type="basic")
    caps = backend.probe()
    assert caps.native_rrf is False
    assert "basic" in caps.native_rrf_reason
    assert backend.fusion_path() == "client"


@pytest.mark.parametrize("license_type", ["gold", "platinum"])
def test_probe_paid_licences_below_enterprise_use_client_fusion(license_type: str) -> None:
    backend, _ = backend_on(version="9.1.0", license_type=license_type)
    assert backend.probe().native_rrf is False
    assert backend.fusion_path() == "client"


def test_probe_enterprise_815_is_gated_by_version() -> None:
    backend, _ = backend_on(version="8.15.3", license_type="enterprise")
    caps = backend.probe()
    assert caps.native_rrf is False
    assert "8.15.3" in caps.native_rrf_reason and "8.16" in caps.native_rrf_reason
    assert backend.fusion_path() == "client"


def test_probe_enterprise_816_is_the_first_native_version() -> None:
    backend, _ = backend_on(version="8.16.0", license_type="enterprise")
    assert backend.probe().native_rrf is True
    assert backend.fusion_path() == "native"


@pytest.mark.parametrize("license_type", ["trial", "enterprise"])
def test_probe_expired_licence_uses_client_fusion(license_type: str) -> None:
    backend, _ = backend_on(version="9.1.0", license_type=license_type, license_status="expired")
    caps = backend.probe()
    assert caps.native_rrf is False
    assert "expired" in caps.native_rrf_reason
    assert backend.fusion_path() == "client"


@pytest.mark.parametrize(
    ("version", "ltype", "status", "native"),
    [
        ("9.0.0", "enterprise", "active", True),
        ("8.16.0-SNAPSHOT", "trial", "active", True),
        ("8.15.99", "trial", "active", False),
        ("7.17.25", "enterprise", "active", False),
        ("9.1.0", "basic", "active", False),
        ("9.1.0", "trial", "invalid", False),
    ],
)
def test_decide_native_rrf_table(version: str, ltype: str, status: str, native: bool) -> None:
    assert decide_native_rrf(version, ltype, status)[0] is native


def test_fusion_native_on_basic_raises_config_error_naming_the_reason() -> None:
    settings = SETTINGS.replace(fusion_path="native")
    backend, node = backend_on(license_type="basic", settings=settings)
    with pytest.raises(ConfigError) as err:
        backend.fusion_path()
    msg = str(err.value)
    assert "fusion_path=native" in msg
    assert "basic" in msg and "rrf retriever" in msg  # the probe's reason is in the message
    # retrieve refuses too, before any search is sent
    node.reset()
    with pytest.raises(ConfigError):
        backend.retrieve("rotate keys", QVEC, FLT, settings)
    assert not node.calls("POST")


def test_fusion_client_setting_never_uses_native_rrf_even_on_trial() -> None:
    settings = SETTINGS.replace(fusion_path="client")
    backend, node = backend_on(license_type="trial", settings=settings)
    node.route("POST", MSEARCH, (200, ok_msearch(["a"], ["a"])))
    ret = backend.retrieve("rotate keys", QVEC, FLT, settings)
    assert ret.path == "client-rrf"
    assert not node.calls("POST", SEARCH)


# =============================================================================================
# retrieve: native rrf (one _search) and client (one _msearch), same hard filter everywhere
# =============================================================================================
def test_native_retrieve_sends_one_search_with_the_filter_inside_every_child() -> None:
    backend, node = probed(license_type="trial")
    node.route("POST", SEARCH, (200, search_response([hit(doc("c1"), 0.0325), hit(doc("c2"), 0.0161)])))
    ret = backend.retrieve("how do I rotate api keys", QVEC, FLT, SETTINGS)

    assert node.lines() == [f"POST {SEARCH}"]
    body = node.requests[0].body
    assert "query" not in body and "knn" not in body and "post_filter" not in body
    rrf = body["retriever"]["rrf"]
    assert rrf["rank_constant"] == 42 and rrf["rank_window_size"] == 20
    kinds = {}
    for child in rrf["retrievers"]:
        kind, inner = child_retriever(child)
        kinds[kind] = inner
        assert inner["filter"] == FLT_CLAUSES, f"{kind} child lacks the hard filter"
    assert set(kinds) == {"standard", "knn"}
    assert kinds["standard"]["query"]["multi_match"]["query"] == "how do I rotate api keys"
    knn = kinds["knn"]
    assert knn["field"] == "vector" and knn["k"] == 20 and knn["num_candidates"] == 40
    assert knn["query_vector"] == pytest.approx([0.1, -0.2, 0.3, 0.4])
    assert body["size"] == 20

    assert isinstance(ret, Retrieval)
    assert ret.path == "native-rrf" and ret.channels == {} and ret.notes == []
    assert [h.chunk_id for h in ret.fused or []] == ["c1", "c2"]
    assert ret.fused is not None and ret.fused[0].fused_score == pytest.approx(0.0325)
    assert ret.fused[0].tenant_id == "acme" and ret.fused[0].parent_id == "p-c1"
    assert ret.took_ms == {"search": 4.0}
    assert [r.path for r in ret.requests] == [f"{CHUNKS_INDEX}/_search"]


def test_native_retrieve_with_metadata_filter_and_weights_keeps_filter_in_each_child() -> None:
    settings = SETTINGS.replace(channel_weights={"bm25": 2.0, "dense": 0.5})
    backend, node = probed(version="9.2.0", license_type="enterprise", settings=settings)
    node.route("POST", SEARCH, (200, search_response([])))
    flt = SearchFilter("acme", ("eng", "ops"), metadata={"lang": ("en", "de")})
    backend.retrieve("q", QVEC, flt, settings)
    expected = [
        {"term": {"tenant_id": "acme"}},
        {"terms": {"acl": ["eng", "ops", "public"]}},
        {"terms": {"lang": ["en", "de"]}},
        VALIDITY,
    ]
    children = node.requests[0].body["retriever"]["rrf"]["retrievers"]
    assert [c["weight"] for c in children] == [2.0, 0.5]
    for child in children:
        assert child_retriever(child)[1]["filter"] == expected


def test_weighted_rrf_before_9_2_takes_the_client_path() -> None:
    """Weighted rrf children need RRFRetrieverComponent (rrf_retriever.weighted_support, 9.2); 9.1 refuses them."""
    settings = SETTINGS.replace(channel_weights={"bm25": 2.0, "dense": 0.5})
    backend, node = probed(version="9.1.0", license_type="enterprise", settings=settings)
    node.route("POST", MSEARCH, (200, ok_msearch(["c1"], ["c1"])))
    ret = backend.retrieve("q", QVEC, FLT, settings)
    assert node.lines() == [f"POST {MSEARCH}"] and ret.path == "client-rrf"
    assert ret.notes == [
        "weighted rrf needs Elasticsearch >= 9.2 (rrf_retriever.weighted_support), the cluster is 9.1.0: client path"
    ]


def test_linear_sends_normalizers_per_child_only() -> None:
    """9.1 refuses a top-level normalizer next to retrievers ("[linear] [normalizer] cannot be provided when
    [retrievers] is specified"); per-child normalizers work from 8.18."""
    settings = SETTINGS.replace(fusion_method="linear", score_normalizer="minmax")
    backend, node = probed(version="9.1.0", license_type="enterprise", settings=settings)
    node.route("POST", SEARCH, (200, search_response([])))
    backend.retrieve("q", QVEC, FLT, settings)
    linear = node.requests[0].body["retriever"]["linear"]
    assert "normalizer" not in linear
    assert [c["normalizer"] for c in linear["retrievers"]] == ["minmax", "minmax"]


def test_client_retrieve_sends_one_msearch_whose_bodies_each_carry_the_filter() -> None:
    backend, node = probed(license_type="basic")
    node.route("POST", MSEARCH, (200, ok_msearch(["c1", "c2"], ["c2", "c3"])))
    ret = backend.retrieve("rotate keys", QVEC, FLT, SETTINGS)

    assert node.lines() == [f"POST {MSEARCH}"]
    req = node.requests[0]
    assert req.headers["content-type"] == "application/vnd.elasticsearch+x-ndjson; compatible-with=9"
    lines = req.body
    assert isinstance(lines, list) and len(lines) == 4
    assert lines[0] == {"index": CHUNKS_INDEX} and lines[2] == {"index": CHUNKS_INDEX}
    bm25, dense = lines[1], lines[3]
    assert bm25["query"]["bool"]["filter"] == FLT_CLAUSES
    assert bm25["query"]["bool"]["must"][0]["multi_match"]["query"] == "rotate keys"
    assert bm25["size"] == 20
    assert dense["knn"]["filter"] == FLT_CLAUSES
    assert dense["knn"]["k"] == 20 and dense["knn"]["num_candidates"] == 40
    assert "query" not in dense
    for body in (bm25, dense):
        assert "post_filter" not in body

    assert ret.path == "client-rrf" and ret.fused is None and ret.notes == []
    assert [h.chunk_id for h in ret.channels["bm25"]] == ["c1", "c2"]
    assert [h.chunk_id for h in ret.channels["dense"]] == ["c2", "c3"]
    assert ret.channels["bm25"][0].bm25_score == pytest.approx(10.0)
    assert ret.channels["dense"][0].dense_score == pytest.approx(0.99)
    assert ret.channels["dense"][0].bm25_score is None
    assert ret.took_ms["msearch"] == 7.0


def test_retrieve_without_vector_sends_bm25_only_msearch() -> None:
    backend, node = probed(license_type="trial")
    node.route("POST", MSEARCH, (200, msearch_response([search_response([hit(doc("c1"), 3.0)])])))
    ret = backend.retrieve("rotate keys", None, FLT, SETTINGS)
    assert node.lines() == [f"POST {MSEARCH}"]
    assert len(node.requests[0].body) == 2
    assert node.requests[0].body[1]["query"]["bool"]["filter"] == FLT_CLAUSES
    assert ret.path == "bm25-only"


def test_licence_403_on_native_search_falls_back_to_msearch_and_sticks() -> None:
    backend, node = probed(license_type="trial")
    node.route("POST", SEARCH, (403, rrf_license_error()))
    node.route("POST", MSEARCH, (200, ok_msearch(["c1"], ["c2"])))

    ret = backend.retrieve("rotate keys", QVEC, FLT, SETTINGS)
    assert node.lines() == [f"POST {SEARCH}", f"POST {MSEARCH}"]
    assert ret.path == "client-rrf"
    assert set(ret.channels) == {"bm25", "dense"}
    assert len(ret.notes) == 1
    note = ret.notes[0]
    assert "licence" in note and "403" in note and "_msearch" in note
    caps = backend.probe()
    assert caps.native_rrf is False
    assert "licence error at query time" in caps.native_rrf_reason
    assert backend.fusion_path() == "client"
    # the fallback carries the same filter
    assert node.requests[1].body[1]["query"]["bool"]["filter"] == FLT_CLAUSES
    assert node.requests[1].body[3]["knn"]["filter"] == FLT_CLAUSES

    node.reset()
    ret2 = backend.retrieve("another query", QVEC, FLT, SETTINGS)
    assert node.lines() == [f"POST {MSEARCH}"], "the next query must go straight to the client path"
    assert ret2.path == "client-rrf"


def test_privilege_403_on_native_search_is_not_mistaken_for_a_licence_error() -> None:
    backend, node = probed(license_type="trial")
    node.route("POST", SEARCH, (403, unauthorized_error()))
    node.route("POST", MSEARCH, (200, ok_msearch(["c1"], ["c1"])))
    ret = backend.retrieve("q", QVEC, FLT, SETTINGS)
    assert ret.path == "client-rrf"
    assert len(ret.notes) == 1 and ret.notes[0].startswith("native rrf refused")
    assert "licence" not in ret.notes[0]
    assert backend.probe().native_rrf is True  # not a licence problem: the next query tries native again


def test_msearch_dense_item_error_yields_bm25_only_with_a_note() -> None:
    backend, node = probed(license_type="basic")
    node.route(
        "POST",
        MSEARCH,
        (
            200,
            msearch_response(
                [
                    search_response([hit(doc("c1"), 5.0), hit(doc("c2"), 4.0)]),
                    knn_dims_mismatch_error(CHUNKS_INDEX, query_dims=4, doc_dims=384),
                ]
            ),
        ),
    )
    ret = backend.retrieve("rotate keys", QVEC, FLT, SETTINGS)
    assert ret.path == "bm25-only"
    assert list(ret.channels) == ["bm25"]
    assert [h.chunk_id for h in ret.channels["bm25"]] == ["c1", "c2"]
    assert len(ret.notes) == 1
    assert "dense" in ret.notes[0] and "different number of dimensions [4]" in ret.notes[0]


def test_every_channel_failing_raises_cluster_error_with_the_server_response() -> None:
    backend, node = probed(license_type="basic")
    resp = msearch_response([index_not_found_error(CHUNKS_INDEX), knn_dims_mismatch_error(CHUNKS_INDEX)])
    node.route("POST", MSEARCH, (200, resp))
    with pytest.raises(ClusterError) as err:
        backend.retrieve("rotate keys", QVEC, FLT, SETTINGS)
    assert err.value.response == resp
    msg = str(err.value)
    assert "bm25" in msg and "dense" in msg and "no such index" in msg


def test_msearch_http_error_raises_cluster_error_with_status_and_body() -> None:
    backend, node = probed(license_type="basic")
    node.route("POST", MSEARCH, (404, index_not_found_error(CHUNKS_INDEX)))
    with pytest.raises(ClusterError) as err:
        backend.retrieve("q", QVEC, FLT, SETTINGS)
    assert err.value.status == 404
    assert err.value.response == index_not_found_error(CHUNKS_INDEX)
    assert "no such index" in str(err.value)


def test_connection_error_raises_cluster_error() -> None:
    backend, node = probed(license_type="basic")
    node.connection_error()
    with pytest.raises(ClusterError) as err:
        backend.retrieve("q", QVEC, FLT, SETTINGS)
    assert "unreachable" in str(err.value)
    assert isinstance(err.value.__cause__, TransportConnectionError)
    assert node.calls("POST", MSEARCH), "the search was attempted"


def test_probe_of_an_unreachable_cluster_raises_cluster_error() -> None:
    backend, node = make_backend(SETTINGS, routes={})
    node.connection_error()
    with pytest.raises(ClusterError, match="unreachable"):
        backend.probe()


def test_responses_without_the_product_header_are_refused() -> None:
    backend, node = backend_on()
    node.product_header = False
    with pytest.raises(ClusterError) as err:
        backend.probe()
    assert isinstance(err.value.__cause__, UnsupportedProductError)


# =============================================================================================
# _source and the exclude_vectors switch (parsed from 9.1 and 8.19, FetchSourceContext)
# =============================================================================================
@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("8.18.2", False),
        ("8.19.3", True),
        ("9.0.5", False),
        ("9.1.4", True),
        ("9.2.0", True),
        ("9.5.0", True),
        ("10.0.0", True),
    ],
)
def test_vectors_in_source_param_follows_the_version(version: str, expected: bool) -> None:
    backend, _ = backend_on(version=version, license_type="basic")
    assert backend.probe().vectors_in_source_param is expected


@pytest.mark.parametrize("license_type", ["trial", "basic"])
@pytest.mark.parametrize(("version", "expected"), [("8.18.2", False), ("9.2.0", True)])
def test_search_source_follows_vectors_in_source_param(license_type: str, version: str, expected: bool) -> None:
    backend, node = probed(version=version, license_type=license_type)
    node.route("POST", SEARCH, (200, search_response([])))
    node.route("POST", MSEARCH, (200, ok_msearch([], [])))
    backend.retrieve("q", QVEC, FLT, SETTINGS)
    req = node.requests[-1]
    bodies = [req.body] if isinstance(req.body, dict) else req.body[1::2]
    assert bodies
    for body in bodies:
        src = body["_source"]
        assert "vector" in src["includes"]
        if expected:
            assert src["exclude_vectors"] is False
        else:
            assert "exclude_vectors" not in src


# =============================================================================================
# index(): bulk through the ingest pipeline, per-item failures, 429 retries
# =============================================================================================
def _fail_missing_tenant(bad_id: str):  # type: ignore[no-untyped-def]
    def item_for(op: str, meta: dict[str, Any], src: dict[str, Any] | None) -> dict[str, Any] | None:
        if meta["_id"] == bad_id:
            return bulk_item_fail_processor(
                meta["_index"], bad_id, fail_processor_message("tenant_id", bad_id, f"src-{bad_id}")
            )
        return None

    return item_for


def test_index_reports_a_fail_processor_rejection_and_counts_the_rest() -> None:
    backend, node = backend_on()
    node.route("POST|PUT", "_bulk", bulk_responder(_fail_missing_tenant("c2")))
    chunks = [chunk("c1"), chunk("c2", source_path="docs/retention.md"), chunk("c3")]

    report = backend.index(chunks)

    assert report.indexed == 2
    assert len(report.failed) == 1
    row = report.failed[0]
    assert row["document"] == "docs/retention.md"
    assert row["field"] == "tenant_id"
    assert "c2" in row["reason"] and "missing required field 'tenant_id'" in row["reason"]

    (bulk,) = node.calls(None, "_bulk")
    assert bulk.headers["content-type"] == "application/vnd.elasticsearch+x-ndjson; compatible-with=9"
    actions = bulk_actions(bulk)
    assert [(op, meta["_index"], meta["_id"]) for op, meta, _ in actions] == [
        ("index", CHUNKS_INDEX, "c1"),
        ("index", CHUNKS_INDEX, "c2"),
        ("index", CHUNKS_INDEX, "c3"),
    ]
    src = actions[1][2]
    assert src is not None
    assert src["chunk_id"] == "c2" and src["tenant_id"] == "acme"
    assert src["source_path"] == "docs/retention.md"
    assert src["vector"] == [0.5, 0.5, 0.5, 0.5]


def test_index_rejects_a_chunk_without_tenant_before_sending_it() -> None:
    backend, node = backend_on()
    node.route("POST|PUT", "_bulk", bulk_responder())
    report = backend.index([chunk("c1"), chunk("c2", tenant="  ")])
    assert report.indexed == 1
    assert report.failed == [{"document": "docs/c2.md", "field": "tenant_id", "reason": "missing required field"}]
    assert [meta["_id"] for _, meta, _ in bulk_actions(node.calls(None, "_bulk")[0])] == ["c1"]


def test_index_writes_parents_to_the_parent_index() -> None:
    backend, node = backend_on()
    node.route("POST|PUT", "_bulk", bulk_responder())
    report = backend.index([chunk("c1")], [chunk("p1", kind="parent", vector=False)])
    assert report.indexed == 2 and report.failed == []
    indices = [meta["_index"] for req in node.calls(None, "_bulk") for _, meta, _ in bulk_actions(req)]
    assert indices == [SETTINGS.chunk_index, SETTINGS.parent_index]
    parent_src = bulk_actions(node.calls(None, "_bulk")[-1])[0][2]
    assert parent_src is not None and "vector" not in parent_src and "parent_id" not in parent_src


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record (and skip) every ``time.sleep`` so bulk backoff costs nothing."""
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", lambda s: calls.append(s))
    return calls


def test_index_retries_items_rejected_with_429_then_succeeds(sleeps: list[float]) -> None:
    backend, node = backend_on()
    first = bulk_responder(
        lambda op, meta, src: bulk_item_rejected(meta["_index"], meta["_id"]) if meta["_id"] == "c2" else None
    )
    node.queue("POST|PUT", "_bulk", first, bulk_responder())

    report = backend.index([chunk("c1"), chunk("c2"), chunk("c3")])

    assert report.indexed == 3 and report.failed == []
    bulks = node.calls(None, "_bulk")
    assert len(bulks) == 2
    assert [meta["_id"] for _, meta, _ in bulk_actions(bulks[1])] == ["c2"], "only the rejected doc is resent"
    assert len(sleeps) == 1 and 0.5 <= sleeps[0] <= 1  # initial_backoff (with jitter) before the retry


def test_index_retries_a_whole_bulk_rejected_with_429(sleeps: list[float]) -> None:
    backend, node = backend_on()
    node.queue("POST|PUT", "_bulk", (429, rejected_execution_error()), bulk_responder())

    report = backend.index([chunk("c1"), chunk("c2")])

    assert report.indexed == 2 and report.failed == []
    bulks = node.calls(None, "_bulk")
    assert len(bulks) == 2
    assert bulk_actions(bulks[0]) == bulk_actions(bulks[1])
    assert all(s <= 1 for s in sleeps)


def test_index_gives_up_after_the_retries_and_reports_the_rejection(sleeps: list[float]) -> None:
    backend, node = backend_on()
    node.route(
        "POST|PUT",
        "_bulk",
        bulk_responder(
            lambda op, meta, src: bulk_item_rejected(meta["_index"], meta["_id"]) if meta["_id"] == "c2" else None
        ),
    )
    report = backend.index([chunk("c1"), chunk("c2")])
    assert report.indexed == 1
    assert len(report.failed) == 1
    assert report.failed[0]["document"] == "docs/c2.md"
    assert "rejected execution" in report.failed[0]["reason"]
    assert len(node.calls(None, "_bulk")) == 4  # first try + max_retries=3
    assert len(sleeps) == 3 and 0.5 <= sleeps[0] <= 1  # jittered initial_backoff, then doubled
    assert sleeps == [sleeps[0], 2 * sleeps[0], 4 * sleeps[0]]


def test_index_reports_a_vector_dims_rejection_on_the_vector_field() -> None:
    backend, node = backend_on()
    cause = (
        "The [dense_vector] field [vector] in doc [document with id 'c1'] "
        "has a different number of dimensions [4] than defined in the mapping [384]"
    )
    reason = "[1:341] failed to parse: " + cause
    node.route(
        "POST|PUT",
        "_bulk",
        bulk_responder(
            lambda op, meta, src: {
                op: {
                    "_index": meta["_index"],
                    "_id": meta["_id"],
                    "status": 400,
                    "error": {
                        "type": "document_parsing_exception",
                        "reason": reason,
                        "caused_by": {"type": "illegal_argument_exception", "reason": cause},
                    },
                }
            }
        ),
    )
    report = backend.index([chunk("c1")])
    assert report.indexed == 0
    assert report.failed[0]["field"] == "vector"


# =============================================================================================
# setup()
# =============================================================================================
def _setup_routes(node: FakeNode, settings: Settings = SETTINGS, *, exists: bool) -> None:
    node.route("GET", "_index_template", (200, {"index_templates": []}))  # setup's preflight: nothing overlaps
    for path in obsolete_asset_paths(settings):
        node.route("GET", path, (404, component_template_missing(path.rsplit("/", 1)[-1])))
    for req in setup_requests(settings):
        node.route("PUT", req.path.replace(".", r"\."), (200, acknowledged()))
    for req in index_creation_requests(settings):
        node.route("HEAD", req.path, (200 if exists else 404, None))
        node.route("PUT", req.path, (200, index_created(req.path)))


def test_setup_puts_every_asset_in_order_then_creates_the_indices() -> None:
    backend, node = make_backend(SETTINGS, routes={})
    _setup_routes(node, exists=False)

    results = backend.setup()

    expected = ["GET /_index_template"] + [f"PUT /{r.path}" for r in setup_requests(SETTINGS)]
    expected += [f"GET /{path}" for path in obsolete_asset_paths(SETTINGS)]
    expected += [
        f"HEAD /{SETTINGS.chunk_index}",
        f"PUT /{SETTINGS.chunk_index}",
        f"HEAD /{SETTINGS.parent_index}",
        f"PUT /{SETTINGS.parent_index}",
        f"HEAD /{SETTINGS.index.prefix}-versions",
        f"PUT /{SETTINGS.index.prefix}-versions",
    ]
    assert node.lines() == expected
    for sent, req in zip(node.requests[1:], setup_requests(SETTINGS), strict=False):
        assert sent.body == req.body
        if req.path.startswith("_scripts/"):  # a stored script has no _meta: the version leads its source
            assert sent.body["script"]["source"].startswith(f"{{{{! es_rag asset_version {ASSET_VERSION} }}}}\n")
        else:
            assert sent.body["_meta"]["version"] == ASSET_VERSION
    assert f"PUT /_scripts/{SETTINGS.index.prefix}-hybrid" in expected  # the stored search template
    assert node.calls("PUT", SETTINGS.chunk_index)[0].body == {}
    assert [r["acknowledged"] for r in results] == [True] * len(results)
    assert len(results) == len(expected) - 7  # one result per index, not per HEAD + PUT; no result for the GETs


def test_setup_again_when_the_indices_exist_does_not_fail() -> None:
    backend, node = make_backend(SETTINGS, routes={})
    _setup_routes(node, exists=True)
    registry = SETTINGS.index_name("versions")
    for name in (registry, SETTINGS.chunk_index, SETTINGS.parent_index):
        node.route("PUT", f"{name}/_mapping", (200, {"acknowledged": True}))
    layout = {SETTINGS.chunk_index: {"aliases": {}}, SETTINGS.parent_index: {"aliases": {}}, registry: {"aliases": {}}}
    node.route("GET", ".*/_alias", (200, layout))  # the legacy layout: no other generation to update
    results = backend.setup()
    assert not node.calls("PUT", SETTINGS.chunk_index) and not node.calls("PUT", SETTINGS.parent_index)
    assert [r["acknowledged"] for r in results[-6:]] == ["exists", True, "exists", True, "exists", True]
    assert len(node.calls("GET", ".*/_alias")) == 1
    # an existing registry gains the fields added since it was created (asset version 10: retired; 11: digests)
    (update,) = node.calls("PUT", f"{registry}/_mapping")
    assert (
        update.body["properties"]["retired"] == {"type": "keyword"} and update.body["_meta"]["version"] == ASSET_VERSION
    )
    assert update.body["properties"]["digests"] == {"type": "object", "enabled": False}
    # existing chunk and parent indices gain the page fields (asset version 13) and their labels (14), and nothing
    # else of their mapping
    for name in (SETTINGS.chunk_index, SETTINGS.parent_index):
        (pages,) = node.calls("PUT", f"{name}/_mapping")
        assert pages.body == PAGE_FIELDS_UPDATE
    assert len(node.calls("PUT")) == len(setup_requests(SETTINGS)) + 3


def test_setup_tolerates_an_index_created_concurrently() -> None:
    backend, node = make_backend(SETTINGS, routes={})
    _setup_routes(node, exists=False)
    node.route("PUT", SETTINGS.chunk_index, (400, index_already_exists(SETTINGS.chunk_index)))
    results = backend.setup()
    assert results[-3] == {"request": f"PUT {SETTINGS.chunk_index}", "acknowledged": "exists"}
    assert results[-1]["acknowledged"] is True


def test_setup_surfaces_a_real_index_creation_error() -> None:
    backend, node = make_backend(SETTINGS, routes={})
    _setup_routes(node, exists=False)
    err = error_body(400, "illegal_argument_exception", "unknown setting [index.foo]")
    node.route("PUT", SETTINGS.chunk_index, (400, err))
    with pytest.raises(ClusterError) as exc:
        backend.setup()
    assert exc.value.status == 400 and exc.value.response == err
    assert "unknown setting" in str(exc.value)


def test_setup_surfaces_a_rejected_pipeline() -> None:
    backend, node = make_backend(SETTINGS, routes={})
    _setup_routes(node, exists=False)
    err = error_body(
        400, "parse_exception", "[field] required property is missing", processor_type="set", property_name="field"
    )
    node.route("PUT", "_ingest/pipeline/.*", (400, err))
    with pytest.raises(ClusterError) as exc:
        backend.setup()
    assert exc.value.status == 400
    assert node.lines() == ["GET /_index_template", f"PUT /_ingest/pipeline/{SETTINGS.pipeline_id}"], (
        "setup stops at the first error"
    )


# =============================================================================================
# doctor()
# =============================================================================================
def test_doctor_reports_nothing_missing_when_assets_are_current() -> None:
    backend, _ = backend_on()
    report = backend.doctor()
    assert report["assets"] == {"expected_version": ASSET_VERSION, "missing_or_stale": {}}
    assert report["paths"]["fusion"].startswith("native rrf retriever (licence trial on Elasticsearch 9.1.0")
    assert set(report["cluster"]["installed_assets"]) == {r.path for r in setup_requests(SETTINGS)}


def test_doctor_reports_stale_and_missing_assets() -> None:
    stale_version = ASSET_VERSION + 1
    missing = f"_index_template/{SETTINGS.index.prefix}-parents"
    backend, _ = backend_on(asset_version=stale_version, missing_assets=[missing])
    report = backend.doctor()
    stale = report["assets"]["missing_or_stale"]
    assert set(stale) == {r.path for r in setup_requests(SETTINGS)}
    assert stale[missing] is None
    assert {v for k, v in stale.items() if k != missing} == {stale_version}


def test_doctor_reports_an_asset_without_meta_version_as_stale() -> None:
    backend, _ = backend_on(asset_version=None)
    stale = backend.doctor()["assets"]["missing_or_stale"]
    assert len(stale) == len(setup_requests(SETTINGS)) and set(stale.values()) == {None}


def test_doctor_lists_the_kuromoji_plugin_when_present() -> None:
    settings = SETTINGS.replace(analyzer="kuromoji")
    backend, _ = backend_on(settings=settings, plugins=["analysis-kuromoji", "analysis-icu", "repository-s3"])
    report = backend.doctor()
    assert report["cluster"]["analysis_plugins"] == ["analysis-icu", "analysis-kuromoji"]
    assert "kuromoji" in report["paths"]["bm25"] and "MISSING" not in report["paths"]["bm25"]


def test_doctor_flags_kuromoji_without_the_plugin() -> None:
    settings = SETTINGS.replace(analyzer="kuromoji")
    backend, _ = backend_on(settings=settings, plugins=[])
    report = backend.doctor()
    assert report["cluster"]["analysis_plugins"] == []
    assert "MISSING plugin analysis-kuromoji" in report["paths"]["bm25"]


def test_doctor_reports_the_inference_endpoint_path() -> None:
    settings = SETTINGS.replace(inference_id=".multilingual-e5-small-elasticsearch")
    backend, _ = backend_on(settings=settings)
    assert "inference processor" in backend.doctor()["paths"]["vectors"]
    settings = SETTINGS.replace(inference_id="my-e5")
    backend, _ = backend_on(settings=settings)
    assert "'my-e5' not found" in backend.doctor()["paths"]["vectors"]


def test_doctor_on_basic_reports_client_fusion() -> None:
    backend, _ = backend_on(license_type="basic")
    report = backend.doctor()
    assert report["paths"]["fusion"].startswith("client rrf over _msearch (licence basic does not include")
    assert report["cluster"]["native_rrf"] is False


# =============================================================================================
# count / get_parents
# =============================================================================================
def test_get_parents_applies_the_hard_filter() -> None:
    backend, node = backend_on()
    node.route(
        "POST",
        f"{SETTINGS.parent_index}/_search",
        (200, search_response([hit(doc("p1"), 0.0, index=SETTINGS.parent_index)])),
    )
    got = backend.get_parents(["p1", "p2"], FLT)
    assert list(got) == ["p1"]
    body = node.calls("POST", f"{SETTINGS.parent_index}/_search")[0].body
    assert body["query"]["bool"]["filter"] == [{"ids": {"values": ["p1", "p2"]}}, *FLT_CLAUSES]


def test_count_reads_the_count_api() -> None:
    backend, node = backend_on()
    node.route(
        "POST",
        f"{CHUNKS_INDEX}/_count",
        (200, {"count": 12, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}),
    )
    assert backend.count() == 12


# =============================================================================================
# known defects (strict xfail: they start failing, as a reminder, once fixed)
# =============================================================================================
def test_index_on_an_unreachable_cluster_raises_cluster_error() -> None:
    backend, node = backend_on()
    node.connection_error("POST|PUT", "/_bulk")
    with pytest.raises(ClusterError, match="unreachable"):
        backend.index([chunk("c1")])


def test_probe_of_an_8x_server_with_the_9x_client_names_the_fix() -> None:
    """The 9.x client cannot speak to 8.x (REST compatibility): the error says which client to install."""
    backend, node = backend_on(version="8.18.2", license_type="enterprise")
    node.server_major = 8
    with pytest.raises(ClusterError, match=r"pip install 'elasticsearch>=8.18,<9'"):
        backend.probe()


def test_probe_of_an_8x_server_with_the_8x_client_reaches_the_version_gate(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import es_rag.elasticsearch.cluster as cluster
    import es_rag.elasticsearch.transport as transport

    backend, node = backend_on(version="8.18.2", license_type="enterprise")
    node.server_major = 8
    for module in (cluster, transport):  # the probe's gate and the request headers
        monkeypatch.setattr(module, "client_major", lambda: 8)
    caps = backend.probe()
    assert caps.native_rrf is True and caps.vectors_in_source_param is False


def test_fake_8x_server_rejects_compat_9_headers_like_a_real_one() -> None:
    """Guards the fake used by the xfail above: its 8.x mode answers the real error."""
    backend, node = backend_on(version="8.18.2")
    node.server_major = 8
    with pytest.raises(ClusterError) as err:
        backend.probe()
    assert err.value.status == 400
    assert "media_type_header_exception" in str(err.value.response)
    assert "found 9" in str(err.value)


def test_fake_records_requests_it_cannot_route() -> None:
    """The fake never invents an answer: an unrouted request fails the test loudly."""
    from tests.support.es_transport import UnroutedRequest

    backend, node = make_backend(SETTINGS, routes={})
    with pytest.raises(UnroutedRequest):
        backend.count()
    assert node.lines() == [f"POST /{CHUNKS_INDEX}/_count"]
    assert isinstance(node.requests[0], RecordedRequest)


def test_bulk_response_helper_sets_errors_flag() -> None:
    ok = bulk_response([bulk_item_ok("i", "1")])
    bad = bulk_response([bulk_item_ok("i", "1"), bulk_item_fail_processor("i", "2", "boom")])
    assert ok["errors"] is False and bad["errors"] is True


# =============================================================================================
# get_neighbors (neighbour expansion)
# =============================================================================================
def test_get_neighbors_filters_every_search_and_foreign_tenant_hits_are_refused() -> None:
    from es_rag.records import Hit
    from es_rag.stages.expand import expand_neighbors

    backend, node = probed()
    anchor = Hit.from_source(doc("c2", start_offset=100, end_offset=142, parent_id="p-1", source_id="guide"))
    before = doc("c1", start_offset=50, end_offset=99, parent_id="p-1", source_id="guide", text="before")
    # a cluster that ignored the filter would answer another tenant's chunk: it must never reach the context
    foreign = doc("x9", tenant="globex", start_offset=143, end_offset=180, parent_id="p-1", source_id="guide")
    node.route(
        "POST",
        "_msearch",
        (200, msearch_response([search_response([hit(before, None)]), search_response([hit(foreign, None)])])),
    )

    result = expand_neighbors([anchor], backend, FLT, window=1)

    (req,) = node.calls("POST", "_msearch")
    headers, searches = req.body[0::2], req.body[1::2]
    assert headers == [{"index": CHUNKS_INDEX}] * 2
    same = [{"term": {"source_id": "guide"}}, {"term": {"source_version": "v1"}}, {"term": {"parent_id": "p-1"}}]
    for search, (op, order) in zip(searches, (("lt", "desc"), ("gt", "asc")), strict=True):
        assert search["query"]["bool"]["filter"] == [*same, {"range": {"start_offset": {op: 100}}}, *FLT_CLAUSES]
        assert search["sort"] == [{"start_offset": {"order": order}}]
        assert search["size"] == 1 and "post_filter" not in search
    assert result.info["refused_other_tenant"] == ["x9"]
    (merged,) = result.hits
    assert merged.expanded_from == ("c1", "c2")
    assert "globex" not in merged.text and merged.start_offset == 50 and merged.end_offset == 142


def test_get_neighbors_item_error_raises_cluster_error_with_the_item() -> None:
    from es_rag.records import Hit

    backend, node = probed()
    err = error_body(400, "illegal_argument_exception", "No mapping found for [start_offset] in order to sort on")
    node.route("POST", "_msearch", (200, msearch_response([search_response([]), {**err, "status": 400}])))
    anchor = Hit.from_source(doc("c2", start_offset=100))
    with pytest.raises(ClusterError, match="neighbour search failed: No mapping found"):
        backend.get_neighbors([anchor], FLT, 1)
