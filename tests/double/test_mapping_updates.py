"""What the registry's asset version 10 sends, as the strict double answers it: a field added to a live index by
``PUT <index>/_mapping`` (``MapperService.merge``), a type change refused, and a composite aggregation over a keyword
that is ``index: false`` (doc values kept) accepted where ``doc_values: false`` is refused."""

from __future__ import annotations

import pytest

from es_rag.elasticsearch.assets import registry_mapping_request
from es_rag.settings import Settings
from es_rag.versions.registry import source_listing_request
from tests.support.double.cluster import StrictCluster

S = Settings(vector_dims=4)


def _registry_of_asset_version_9(cluster: StrictCluster) -> str:
    body = {"mappings": {"dynamic": "strict", "properties": {"tenant_id": {"type": "keyword"}}}}
    assert cluster.handle("PUT", "/old-versions", "", body, {})[0] == 200
    return "old-versions"


def test_put_mapping_adds_a_field_to_a_live_index_and_refuses_a_type_change() -> None:
    cluster = StrictCluster()
    index = _registry_of_asset_version_9(cluster)
    doc = {"tenant_id": "acme", "retired": ["guide@v1"]}
    status, answer = cluster.handle("PUT", f"/{index}/_doc/acme", "", doc, {})
    assert status == 400 and answer["error"]["type"] == "strict_dynamic_mapping_exception"  # before the update
    update = registry_mapping_request(S)
    assert cluster.handle("PUT", f"/{index}/_mapping", "", update.body, {}) == (200, {"acknowledged": True})
    assert cluster.handle("PUT", f"/{index}/_doc/acme", "", doc, {})[0] in (200, 201)
    assert cluster.handle("PUT", f"/{index}/_mapping", "", update.body, {})[0] == 200  # idempotent: setup again
    # FieldMapper's merge check; Elasticsearch's mapper tests expect exactly this form of message
    status, answer = cluster.handle("PUT", f"/{index}/_mapping", "", {"properties": {"retired": {"type": "text"}}}, {})
    assert (
        status == 400
        and answer["error"]["reason"] == "mapper [retired] cannot be changed from type [keyword] to [text]"
    )


@pytest.mark.parametrize("doc_values, ok", [(None, True), (False, False)])
def test_a_composite_over_an_unindexed_keyword_needs_its_doc_values(doc_values: bool | None, ok: bool) -> None:
    cluster = StrictCluster()
    spec = {"type": "keyword", "index": False, **({"doc_values": doc_values} if doc_values is not None else {})}
    props = {"tenant_id": {"type": "keyword"}, "source_id": {"type": "keyword"}, "source_path": spec}
    assert cluster.handle("PUT", "/docs", "", {"mappings": {"properties": props}}, {})[0] == 200
    src = {"tenant_id": "acme", "source_id": "a.md", "source_path": "/kb/a.md"}
    cluster.handle("PUT", "/docs/_doc/1", "", src, {})
    cluster.refresh_all()
    req = source_listing_request("acme", "docs", fields=("source_id", "source_path"))
    status, answer = cluster.handle(req.method, f"/{req.path}", "", req.body, {})
    if ok:
        buckets = answer["aggregations"]["sources"]["buckets"]
        assert status == 200 and buckets == [{"key": {"source_id": "a.md", "source_path": "/kb/a.md"}, "doc_count": 1}]
    else:
        assert status == 400 and "Use doc values instead" in answer["error"]["reason"]
