"""What the registry's asset versions 10 and 11 send, as the strict double answers it: a field added to a live index by
``PUT <index>/_mapping`` (``MapperService.merge``), a type change refused, and a composite aggregation over a keyword
that is ``index: false`` (doc values kept) accepted where ``doc_values: false`` is refused."""

from __future__ import annotations

from typing import Any

import pytest

from es_rag.elasticsearch.assets import registry_mapping_request
from es_rag.settings import Settings
from es_rag.versions.registry import source_listing_request
from tests.support.double.cluster import StrictCluster
from tests.support.page_fields import PAGE_FIELDS_UPDATE

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


def test_a_registry_of_asset_version_10_is_written_without_digests_until_setup_adds_the_field(
    caplog: pytest.LogCaptureFixture, minilm_tokenizer: object
) -> None:
    """Asset version 11 adds ``digests`` (what each served source holds). A registry index created before refuses it
    (``dynamic: strict``): the ingest writes the registry without it, warns once, and embeds unchanged sources again;
    after setup's ``PUT _mapping`` the digests are recorded and an unchanged re-run embeds nothing."""
    from es_rag.chunking import make_chunker
    from es_rag.ingest import SourceDoc, ingest_documents
    from tests.support.corpus import RandomEmbedder
    from tests.support.es_cluster import cluster_backend

    backend, _, cluster = cluster_backend(S)
    registry = S.index_name("versions")
    cluster.indices.pop(registry)
    for name in [n for n in cluster.index_templates if n.endswith("versions")]:  # (else it maps digests again)
        assert cluster.handle("DELETE", f"/_index_template/{name}", "", None, {})[0] == 200
    v10 = registry_mapping_request(S).body["properties"]
    v10.pop("digests")
    body = {"mappings": {"dynamic": "strict", "properties": v10}}
    assert cluster.handle("PUT", f"/{registry}", "", body, {})[0] == 200
    chunker = make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=24, overlap=4)
    docs = [SourceDoc("guide", "# G\n\nWipes need a token.\n", tenant_id="acme", acl=("p",), source_version="v1")]
    with caplog.at_level("WARNING"):
        first = ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
        again = ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    assert first.failed == again.failed == [] and first.indexed > 0 and again.unchanged == []
    assert [r.getMessage() for r in caplog.records].count(
        f"version registry {registry} predates asset version 11 (no 'digests' field): every ingest embeds unchanged "
        "sources again; run `es-rag setup` once"
    ) == 1
    assert "digests" not in cluster.docs(registry)["acme"]
    update = registry_mapping_request(S)
    assert cluster.handle("PUT", f"/{registry}/_mapping", "", update.body, {})[0] == 200
    backend.registry_without_digests = False  # what a new process (the next ingest after setup) starts with
    ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    assert list(cluster.docs(registry)["acme"]["digests"]) == ["guide"]
    # the field is an object Elasticsearch stores and never parses (ObjectMapper's `enabled: false`, the form of
    # `active` and `writing`); `enabled` on a leaf type is refused by FieldMapper.Builder.parse
    wrong = {"properties": {"digests2": {"type": "keyword", "enabled": False}}}
    status, answer = cluster.handle("PUT", f"/{registry}/_mapping", "", wrong, {})
    assert status == 400 and "unknown parameter [enabled] on mapper [digests2] of type [keyword]" in str(answer)
    last = ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    assert last.unchanged == ["guide"] and last.indexed == 0


def test_a_get_with_source_includes_returns_only_those_fields() -> None:
    """The search's registry read (``registry_get_request(snapshot=True)``): ``RestGetAction`` parses
    ``_source_includes`` with ``FetchSourceContext.parseFromRestRequest`` (comma-separated); a parameter it does not
    consume is refused by ``BaseRestHandler.handleRequest`` (``unrecognized``)."""
    from es_rag.versions.registry import registry_get_request

    cluster = StrictCluster()
    assert cluster.handle("PUT", "/es-rag-versions", "", {}, {})[0] == 200
    doc = {"tenant_id": "acme", "active": {"a": "1"}, "hidden": ["b@2"], "digests": {"a": "sha256:x"}}
    cluster.handle("PUT", "/es-rag-versions/_doc/acme", "", doc, {})
    req = registry_get_request(S, "acme", snapshot=True)
    path, _, query = req.path.partition("?")
    status, answer = cluster.handle("GET", f"/{path}", query, None, {})
    assert status == 200 and answer["_source"] == {"hidden": ["b@2"]}
    # the wrong variant: the old singular spelling is no parameter of the GET API; BaseRestHandler refuses it
    status, answer = cluster.handle("GET", f"/{path}", "_source_include=hidden", None, {})
    assert status == 400 and answer["error"]["type"] == "illegal_argument_exception"
    reason = answer["error"]["reason"]
    assert reason.startswith(f"request [/{path}] contains unrecognized parameter: [_source_include] -> did you mean")
    assert "_source_includes" in reason


def test_asset_versions_13_and_14_add_the_page_fields_to_an_older_chunk_index() -> None:
    """``setup`` over a chunk index of asset version 12: a PDF chunk's ``page_start`` is refused by its strict mapping
    (``DocumentParser``: ``strict_dynamic_mapping_exception``) until ``added_fields_request`` adds the two integer
    fields (``PUT <index>/_mapping``, ``MapperService.merge``; rest-api-spec ``indices.put_mapping/10_basic.yml``);
    the same request naming them another type on an index that has them is refused as a type change. Version 14's
    request sends all four page fields to an index of version 13, which has two of them: a field sent again with the
    same type and parameters merges as it is (``10_basic.yml``, "Test Create and update mapping": ``text1`` is put a
    second time as the same ``text``/``whitespace`` field and acknowledged; "Update per-field metadata": ``foo``
    re-sent as ``keyword``), while a label field sent as another type is refused like ``page_start``."""
    from es_rag.elasticsearch.assets import added_fields_request

    cluster = StrictCluster()
    body = {"mappings": {"dynamic": "strict", "properties": {"chunk_id": {"type": "keyword"}}}}
    assert cluster.handle("PUT", f"/{S.chunk_index}", "", body, {})[0] == 200
    doc = {"chunk_id": "c1", "page_start": 3, "page_end": 4}
    status, answer = cluster.handle("PUT", f"/{S.chunk_index}/_doc/c1", "", doc, {})
    assert status == 400 and answer["error"]["type"] == "strict_dynamic_mapping_exception"
    update = added_fields_request(S, "chunks")
    assert update.path == f"{S.chunk_index}/_mapping"
    assert update.body == PAGE_FIELDS_UPDATE
    assert cluster.handle("PUT", f"/{update.path}", "", update.body, {}) == (200, {"acknowledged": True})
    assert cluster.handle("PUT", f"/{S.chunk_index}/_doc/c1", "", doc, {})[0] in (200, 201)
    # an index of asset version 13 has the page fields but not their labels (14): a labelled chunk is refused until
    # the same request adds them; the fields it already has, sent unchanged, merge as they are (MapperService.merge)
    v13 = {"chunk_id": {"type": "keyword"}, "page_start": {"type": "integer"}, "page_end": {"type": "integer"}}
    assert cluster.handle("PUT", "/v13", "", {"mappings": {"dynamic": "strict", "properties": v13}}, {})[0] == 200
    labelled = {**doc, "page_label_start": "iv", "page_label_end": "1"}
    status, answer = cluster.handle("PUT", "/v13/_doc/c1", "", labelled, {})
    assert status == 400 and answer["error"]["type"] == "strict_dynamic_mapping_exception"
    assert cluster.handle("PUT", "/v13/_mapping", "", update.body, {}) == (200, {"acknowledged": True})
    status, answer = cluster.handle(
        "PUT", "/v13/_mapping", "", {"properties": {"page_label_start": {"type": "integer"}}}, {}
    )
    assert status == 400
    assert answer["error"]["reason"] == "mapper [page_label_start] cannot be changed from type [keyword] to [integer]"
    assert cluster.handle("PUT", "/v13/_doc/c1", "", labelled, {})[0] in (200, 201)
    wrong = {"properties": {"page_start": {"type": "keyword"}}}
    status, answer = cluster.handle("PUT", f"/{update.path}", "", wrong, {})
    assert (
        status == 400
        and answer["error"]["reason"] == "mapper [page_start] cannot be changed from type [integer] to [keyword]"
    )


@pytest.mark.parametrize(
    "update, reason",
    [
        (
            {"retired": {"type": "keyword", "index": False}},
            "Mapper for [retired] conflicts with existing mapper:\n\tCannot update parameter [index] from [true] to "
            "[false]",
        ),
        (
            {"retired": {"type": "keyword", "doc_values": False, "store": True}},
            "Mapper for [retired] conflicts with existing mapper:\n\tCannot update parameter [doc_values] from [true] "
            "to [false]\n\tCannot update parameter [store] from [false] to [true]",
        ),
    ],
)
def test_put_mapping_refuses_a_parameter_change_of_the_same_type(update: dict[str, Any], reason: str) -> None:
    """``FieldMapper.Conflicts``: a parameter that is not ``updateable()`` cannot change on a live field, even with its
    type kept (``FieldMapper.merge`` -> ``Parameter.merge`` -> ``conflicts.addConflict(name, existing, toMerge)``,
    then ``Conflicts.check``: "Mapper for [f] conflicts with existing mapper:" and one line per parameter). The
    double compared types only, so a future asset edit of this kind would have passed here and failed on a cluster
    (issue 43, item 4)."""
    cluster = StrictCluster()
    index = _registry_of_asset_version_9(cluster)
    assert cluster.handle("PUT", f"/{index}/_mapping", "", registry_mapping_request(S).body, {})[0] == 200
    status, answer = cluster.handle("PUT", f"/{index}/_mapping", "", {"properties": update}, {})
    assert status == 400 and answer["error"]["type"] == "illegal_argument_exception"
    assert answer["error"]["reason"] == reason


def test_put_mapping_accepts_what_is_updateable_and_the_same_mapping_again() -> None:
    cluster = StrictCluster()
    index = _registry_of_asset_version_9(cluster)
    body = registry_mapping_request(S).body
    assert cluster.handle("PUT", f"/{index}/_mapping", "", body, {})[0] == 200
    assert cluster.handle("PUT", f"/{index}/_mapping", "", body, {})[0] == 200  # setup again: nothing changes
    ignore = {"properties": {"retired": {"type": "keyword", "ignore_above": 256, "meta": {"unit": "key"}}}}
    assert cluster.handle("PUT", f"/{index}/_mapping", "", ignore, {})[0] == 200  # updateable parameters
