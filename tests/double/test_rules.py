"""The strict double refuses what Elasticsearch refuses: one test per rule, each naming the source that defines
it (elastic/elasticsearch; the quoted lines are in the research notes of issue 11 and in the rule's docstring).
Expected values come from Elasticsearch's own tests where they exist (fingerprint vectors, REST YAML cases)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.support.double.cluster import Role, StrictCluster
from tests.support.double.glob import globs_intersect
from tests.support.double.ingest import (
    InferenceEndpoint,
    IngestContext,
    IngestFailure,
    Painless,
    fingerprint,
    java_utc_timestamp,
    parse_pipeline,
    run_pipeline,
)

ANALYSIS = {
    "index": {
        "analysis": {
            "analyzer": {"my_text": {"type": "standard"}},
        }
    }
}


def call(
    cl: StrictCluster, method: str, path: str, body: Any = None, query: str = "", **headers: str
) -> tuple[int, Any]:
    return cl.handle(method, path, query, body, {k.lower(): v for k, v in headers.items()})


def reason(resp: tuple[int, Any]) -> str:
    return str(resp[1]["error"]["reason"])


# ---------------------------------------------------------------------------------------------- templates
def test_component_template_is_validated_alone() -> None:
    """MetadataIndexTemplateService.addComponentTemplate: "Immediate validation of the component template only";
    FieldMapper.analyzerParam: ``analyzer [x] has not been configured in mappings`` wrapped by MapperService as
    ``Failed to parse mapping: ...`` (kibana#128209 reports the same 400 from a real component PUT)."""
    cl = StrictCluster()
    assert call(cl, "PUT", "_component_template/settings-only", {"template": {"settings": ANALYSIS}})[0] == 200
    mapping = {"properties": {"t": {"type": "text", "analyzer": "my_text"}}}
    refused = call(cl, "PUT", "_component_template/mappings-only", {"template": {"mappings": mapping}})
    assert refused[0] == 400
    assert refused[1]["error"]["type"] == "mapper_parsing_exception"
    assert reason(refused) == "Failed to parse mapping: analyzer [my_text] has not been configured in mappings"
    both = {"template": {"settings": ANALYSIS, "mappings": mapping}}
    assert call(cl, "PUT", "_component_template/self-contained", both)[0] == 200


def test_unknown_setting_and_bad_similarity_are_refused() -> None:
    """IndexScopedSettings.validate (unknown setting); SimilarityService (type is case-sensitive, BM25 takes only
    k1/b/discount_overlaps) -- MetadataIndexTemplateServiceTests.testAddComponentTemplate expects the IAE."""
    cl = StrictCluster()
    bad = call(cl, "PUT", "_component_template/x", {"template": {"settings": {"invalid": "invalid"}}})
    assert bad[0] == 400 and "unknown setting [index.invalid]" in reason(bad)
    lower = {"index": {"similarity": {"default": {"type": "bm25"}}}}
    assert reason(call(cl, "PUT", "_component_template/x", {"template": {"settings": lower}})) == (
        "Unknown Similarity type [bm25] for [default]"
    )
    extra = {"index": {"similarity": {"default": {"type": "BM25", "k2": 1}}}}
    assert "Unknown settings for similarity of type [BM25]" in reason(
        call(cl, "PUT", "_component_template/x", {"template": {"settings": extra}})
    )


def test_index_template_refuses_missing_components_and_same_priority_overlap() -> None:
    """putIndexTemplateV2 / validateV2TemplateRequest (missing components, InvalidIndexTemplateException) and
    findConflictingV2Templates (the message MetadataIndexTemplateServiceTests asserts); different priorities pass."""
    cl = StrictCluster()
    missing = call(cl, "PUT", "_index_template/blue", {"index_patterns": ["blue*"], "composed_of": ["nope"]})
    assert missing[1]["error"]["type"] == "invalid_index_template_exception"
    assert reason(missing) == (
        "index_template [blue] invalid, cause [index template [blue] specifies component templates [nope] that do "
        "not exist]"
    )
    assert call(cl, "PUT", "_index_template/foo", {"index_patterns": ["egg*", "baz"]})[0] == 200
    clash = call(cl, "PUT", "_index_template/foo2", {"index_patterns": ["abc", "baz*"]})
    assert reason(clash) == (
        "index template [foo2] has index patterns [abc, baz*] matching patterns from existing templates [foo] with "
        "patterns (foo => [egg*, baz]) that have the same priority [0], multiple index templates may not match "
        "during index creation, please use a different priority"
    )
    assert call(cl, "PUT", "_index_template/foo2", {"index_patterns": ["abc", "baz*"], "priority": 1})[0] == 200


def test_built_in_templates_take_part_in_the_overlap_check() -> None:
    """The built-in ``logs`` template (StackTemplateRegistry, ``logs-*-*`` at priority 100) conflicts with a user
    template on an overlapping pattern at the same priority; es_rag's 500 does not conflict but takes over."""
    cl = StrictCluster()
    assert "matching patterns from existing templates [logs]" in reason(
        call(cl, "PUT", "_index_template/mine", {"index_patterns": ["logs-rag-*"], "priority": 100})
    )


def test_a_component_in_use_cannot_be_deleted() -> None:
    """``component templates [x] cannot be removed as they are still in use by index templates [y]``."""
    cl = StrictCluster()
    call(cl, "PUT", "_component_template/c", {"template": {"settings": ANALYSIS}})
    call(cl, "PUT", "_index_template/t", {"index_patterns": ["t*"], "composed_of": ["c"]})
    assert "still in use by index templates [t]" in reason(call(cl, "DELETE", "_component_template/c"))


def test_the_composite_is_validated() -> None:
    """validateCompositeTemplate: ``composable template [x] template after composition with component templates
    [..] is invalid`` wrapping the mapping failure."""
    cl = StrictCluster()
    call(cl, "PUT", "_component_template/m", {"template": {"mappings": {"properties": {"n": {"type": "keyword"}}}}})
    body = {
        "index_patterns": ["t*"],
        "composed_of": ["m"],
        "template": {"mappings": {"properties": {"x": {"type": "text", "analyzer": "nowhere"}}}},
    }
    resp = call(cl, "PUT", "_index_template/t", body)
    assert reason(resp) == "composable template [t] template after composition with component templates [m] is invalid"
    assert "analyzer [nowhere]" in resp[1]["error"]["caused_by"]["reason"]


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("abc*", "ab*", True),
        ("es-rag-chunks*", "es-rag-selftest-1-chunks*", False),
        ("es-rag-chunks*", "es-rag-chunks-x-chunks*", True),
        ("logs-*-*", "logs-foo-chunks*", True),
        ("logs-*-*", "logs-chunks*", True),  # logs-chunks-1 matches both
        ("logs-*-*", "logs-chunks", False),
        ("es-rag-versions", "es-rag-chunks*", False),
        ("*", "anything", True),
    ],
)
def test_pattern_overlap_is_automaton_intersection(a: str, b: str, overlap: bool) -> None:
    """``Regex.simpleMatchToAutomaton`` + ``Operations.intersection`` non-empty."""
    assert globs_intersect(a, b) is overlap
    assert globs_intersect(b, a) is overlap


# ---------------------------------------------------------------------------------------------- mappings
def _mapping(vector: dict[str, Any]) -> dict[str, Any]:
    return {"template": {"mappings": {"properties": {"v": {"type": "dense_vector", **vector}}}}}


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        ({"dims": 5000}, "The number of dimensions should be in the range [1, 4096] but was [5000]"),
        ({"dims": 3, "index_options": {"type": "int4_hnsw"}}, "int4_hnsw only supports even dimensions; provided=3"),
        ({"dims": 42, "index_options": {"type": "bbq_hnsw"}}, "bbq_hnsw does not support dimensions fewer than 64"),
        ({"dims": 8, "index_options": {"type": "hnsw", "rescore_vector": {"oversample": 2}}}, "unsupported parameters"),
        ({"dims": 8, "index_options": {"type": "int8_hnsw", "rescore_vector": {"oversample": 0.5}}}, "exactly 0"),
        ({"dims": 8, "index_options": {"type": "nope"}}, "Unknown vector index options type [nope] for field [v]"),
        ({"dims": 8, "similarity": "dot"}, "Unknown value [dot] for field [similarity]"),
        ({"dims": 8, "cosine": True}, "unknown parameter [cosine] on mapper [v] of type [dense_vector]"),
    ],
)
def test_dense_vector_mapping_rules(vector: dict[str, Any], message: str) -> None:
    """DenseVectorFieldMapper: dims range, VectorIndexType dims rules, rescore_vector only on quantized types with
    oversample 0 or [1, 10], similarity enum, unknown parameters."""
    resp = call(StrictCluster(), "PUT", "_component_template/v", _mapping(vector))
    assert resp[0] == 400 and message in reason(resp), resp


@pytest.mark.parametrize(
    ("version", "dims", "expected"),
    [
        ("9.5.0", 384, {"type": "bbq_hnsw", "m": 16, "ef_construction": 100, "rescore_vector": {"oversample": 3.0}}),
        ("9.5.0", 128, {"type": "int8_hnsw", "m": 16, "ef_construction": 100}),
        ("9.0.0", 384, {"type": "int8_hnsw", "m": 16, "ef_construction": 100}),
    ],
)
def test_dense_vector_defaults_depend_on_the_version(version: str, dims: int, expected: dict[str, Any]) -> None:
    """Unset index_options: 9.1+ ``bbq_hnsw`` with oversample 3.0 at dims >= 384 (PR #129825,
    BBQ_DIMS_DEFAULT_THRESHOLD), else ``int8_hnsw`` (DEFAULT_DENSE_VECTOR_TO_INT8_HNSW, 8.14);
    search.vectors/41_knn_search_bbq_hnsw.yml "default oversample value" asserts 3.0."""
    cl = StrictCluster(version=version)
    call(cl, "PUT", "idx", {"mappings": {"properties": {"v": {"type": "dense_vector", "dims": dims}}}})
    _, got = call(cl, "GET", "idx/_mapping")
    assert got["idx"]["mappings"]["properties"]["v"]["index_options"] == expected


def test_strict_mapping_refuses_unmapped_fields_a_pipeline_adds() -> None:
    """StrictDynamicMappingException: ``mapping set to strict, dynamic introduction of [f] within [_doc] is not
    allowed`` (400), also for a field an ingest pipeline wrote."""
    cl = StrictCluster()
    call(cl, "PUT", "_ingest/pipeline/adds", {"processors": [{"set": {"field": "extra", "value": "x"}}]})
    settings = {"index": {"default_pipeline": "adds"}}
    call(
        cl,
        "PUT",
        "s",
        {"settings": settings, "mappings": {"dynamic": "strict", "properties": {"a": {"type": "keyword"}}}},
    )
    _, resp = call(cl, "POST", "_bulk", [{"index": {"_index": "s", "_id": "1"}}, {"a": "x"}])
    item = resp["items"][0]["index"]
    assert item["status"] == 400
    assert item["error"]["type"] == "strict_dynamic_mapping_exception"
    assert "dynamic introduction of [extra] within [_doc] is not allowed" in item["error"]["reason"]


def test_index_time_vector_checks() -> None:
    """DenseVectorFieldMapper index-time checks: dims (``checkDimensionExceeded`` when the vector is longer), cosine
    zero magnitude, dot_product unit length, each wrapped by ``DocumentParser.wrapInDocumentParsingException``
    (``failed to parse: ``) with ``Preview of invalid vector`` (audit W17)."""
    cl = StrictCluster()
    props = {"c": {"type": "dense_vector", "dims": 2, "similarity": "cosine"}}
    props["d"] = {"type": "dense_vector", "dims": 2, "similarity": "dot_product"}
    call(cl, "PUT", "v", {"mappings": {"properties": props}})
    lines = [
        {"index": {"_index": "v", "_id": "1"}},
        {"c": [1.0, 0.0, 0.0]},
        {"index": {"_index": "v", "_id": "2"}},
        {"c": [0.0, 0.0]},
        {"index": {"_index": "v", "_id": "3"}},
        {"d": [0.5, 0.5]},
        {"index": {"_index": "v", "_id": "4"}},
        {"d": [0.6, 0.8], "c": [3.0, 4.0]},
    ]
    _, resp = call(cl, "POST", "_bulk", lines)
    reasons = [i["index"].get("error", {}).get("reason", "") for i in resp["items"]]
    assert reasons[0] == (
        "failed to parse: The [dense_vector] field [c] in doc [document with id '1'] has more dimensions than "
        "defined in the mapping [2]"
    )
    assert reasons[1] == (
        "failed to parse: The [cosine] similarity does not support vectors with zero magnitude. Preview of invalid "
        "vector: [0.0, 0.0]"
    )
    assert reasons[2].startswith("failed to parse: The [dot_product] similarity can only be used with unit-length")
    assert reasons[3] == ""


# ---------------------------------------------------------------------------------------------- ingest
# FingerprintProcessorTests (modules/ingest-common/src/test/.../FingerprintProcessorTests.java): field names
# sorted, values only, each 0x00 + bytes, standard Base64. (No fingerprint REST YAML test exists.)
FINGERPRINT_VECTORS = [
    (["barValue", "fooValue"], "SHA-1", "", "IgxzmZVknx4+Og/eUpvIlqH9PdI="),  # testBasic (bar < foo)
    (["foo"], "SHA-1", "", "WoyqQDn9vALAGmScjA9Z2yg7sos="),  # testIgnoreMissing 1
    (["foo", "foo"], "SHA-1", "", "vjq2RyU5UA8vzeM5gIbfrOGir7w="),  # testIgnoreMissing 2
    (["foo"], "SHA-1", "salt", "rWTTCYvRPQAzKXydmKwyC+//dmM="),  # testSalt
    (["bar", "foo"], "MD5", "", "b+3QyaPYdnUF1lb5IKE+1g=="),  # testMethod
    (["bar", "foo"], "SHA-1", "", "SX/93t223OurJvgMUOCtSl9hcpg="),
    (["bar", "foo"], "SHA-256", "", "zDQYTy34tBlmNedlDdn++N7NN+wBY15mCoPDINmUxXc="),
    (
        ["bar", "foo"],
        "SHA-512",
        "",
        "xNIpYyJzRmg5R0T44ZORC2tgh8N4tVtTFzD5AdBqxmdOuRUjibQQ64lgefkbuZFl8Hv9ze9U6PAmrlgJPcRPGA==",
    ),
]


@pytest.mark.parametrize(("values", "method", "salt", "expected"), FINGERPRINT_VECTORS)
def test_fingerprint_matches_elasticsearch_test_vectors(
    values: list[str], method: str, salt: str, expected: str
) -> None:
    assert fingerprint(values, method, salt) == expected


def test_fingerprint_of_an_object_matches_the_docs_example() -> None:
    """docs/reference/enrich-processor/fingerprint-processor.md: map keys sorted, ``0x00`` + key then the value."""
    user = {"last_name": "Smith", "first_name": "John", "date_of_birth": "1980-01-15", "is_active": True}
    assert fingerprint([user], "SHA-1", "") == "WbSUPW4zY1PBPehh2AA/sSxiRjw="


def _run(processors: list[dict[str, Any]], doc: dict[str, Any], *endpoints: InferenceEndpoint) -> dict[str, Any]:
    out = dict(doc)
    run_pipeline(
        parse_pipeline("p", {"processors": processors}),
        out,
        {"_index": "i", "_id": "1"},
        IngestContext({e.inference_id: e for e in endpoints}),
    )
    return out


def test_pipeline_parsing_refuses_unknown_processors_and_parameters() -> None:
    """ConfigurationUtils.readProcessor: ``No processor type exists with name [x]``; unknown parameters;
    required properties."""
    cl = StrictCluster()
    assert reason(call(cl, "PUT", "_ingest/pipeline/p", {"processors": [{"sett": {"field": "a"}}]})) == (
        "No processor type exists with name [sett]"
    )
    unknown = call(cl, "PUT", "_ingest/pipeline/p", {"processors": [{"set": {"field": "a", "value": 1, "foo": 2}}]})
    assert reason(unknown) == "processor [set] doesn't support one or more provided configuration parameters [foo]"
    assert reason(call(cl, "PUT", "_ingest/pipeline/p", {"processors": [{"fail": {}}]})) == (
        "[message] required property is missing"
    )
    method = call(
        cl, "PUT", "_ingest/pipeline/p", {"processors": [{"fingerprint": {"fields": ["a"], "method": "sha-256"}}]}
    )
    assert "[method] [sha-256] must be one of the supported hash methods" in reason(method)


def test_set_copy_from_semantics() -> None:
    """SetProcessor: a missing copy_from source fails (``field [x] not present as part of path [x]``) unless
    ignore_empty_value; ingest-common 270_set_processor.yml "Test set processor with copy_from"."""
    assert _run([{"set": {"field": "b", "copy_from": "a"}}], {"a": {"x": [1]}})["b"] == {"x": [1]}
    with pytest.raises(IngestFailure, match=r"field \[a\] not present as part of path \[a\]"):
        _run([{"set": {"field": "b", "copy_from": "a"}}], {})
    kept = _run([{"set": {"field": "b", "copy_from": "a", "ignore_empty_value": True}}], {"b": "no change", "a": ""})
    assert kept["b"] == "no change"


def test_fail_renders_its_message_and_fails_with_500() -> None:
    """FailProcessor: mustache over the document; bulk item ``fail_processor_exception`` with status 500."""
    with pytest.raises(IngestFailure) as info:
        _run([{"fail": {"message": "bad {{{a}}} {{{missing}}}!"}}], {"a": "x"})
    assert (info.value.status, info.value.err_type, info.value.reason) == (500, "fail_processor_exception", "bad x !")


def test_if_conditions_are_evaluated_not_assumed() -> None:
    """ConditionalProcessor: the condition runs on every document; a null result fails (no truthiness)."""
    procs = [{"set": {"if": "ctx.v == null", "field": "v", "value": "set"}}]
    assert _run(procs, {})["v"] == "set"
    assert _run(procs, {"v": "kept"})["v"] == "kept"
    blank = "def v = ctx['f']; return v == null || (v instanceof String && v.trim().isEmpty());"
    assert Painless(blank).evaluate({"f": "  "}) is True
    assert Painless(blank).evaluate({"f": "x"}) is False
    with pytest.raises(IngestFailure, match="runtime error"):
        _run([{"set": {"if": "ctx.v", "field": "w", "value": 1}}], {})


def test_inference_output_shape() -> None:
    """InferenceProcessor + InferenceResults.writeResultToField: the vector at output_field and model_id next to
    it (the root for a dotless output field), appended when the target exists."""
    e5 = InferenceEndpoint("e5", dims=4)
    out = _run(
        [{"inference": {"model_id": "e5", "input_output": [{"input_field": "t", "output_field": "vector"}]}}],
        {"t": "hi"},
        e5,
    )
    assert len(out["vector"]) == 4 and out["model_id"] == "e5"
    nested = _run(
        [{"inference": {"model_id": "e5", "input_output": [{"input_field": "t", "output_field": "ml.vec"}]}}],
        {"t": "hi", "model_id": "mine"},
        e5,
    )
    assert nested["ml"]["model_id"] == "e5" and nested["model_id"] == "mine"
    with pytest.raises(IngestFailure, match=r"field \[t\] not present"):
        _run([{"inference": {"model_id": "e5", "input_output": [{"input_field": "t", "output_field": "v"}]}}], {}, e5)


def test_ingest_timestamp_renders_like_java() -> None:
    """ZonedDateTime.toString (issue #97314: seconds left out when zero)."""
    from datetime import datetime, timezone

    assert (
        java_utc_timestamp(datetime(2024, 5, 1, 12, 34, 56, 123456, tzinfo=timezone.utc))
        == "2024-05-01T12:34:56.123456Z"
    )
    assert (
        java_utc_timestamp(datetime(2024, 5, 1, 12, 34, 56, 123000, tzinfo=timezone.utc)) == "2024-05-01T12:34:56.123Z"
    )
    assert java_utc_timestamp(datetime(2024, 5, 1, 12, 34, tzinfo=timezone.utc)) == "2024-05-01T12:34Z"


# ---------------------------------------------------------------------------------------------- search gates
def _searchable(cl: StrictCluster) -> None:
    props = {"t": {"type": "text"}, "k": {"type": "keyword"}, "v": {"type": "dense_vector", "dims": 2}}
    call(cl, "PUT", "s", {"mappings": {"properties": props}})
    lines = []
    for i, (t, v) in enumerate([("alpha beta", [1.0, 0.0]), ("beta gamma", [0.0, 1.0]), ("gamma", [0.7, 0.7])]):
        lines += [{"index": {"_index": "s", "_id": str(i)}}, {"t": t, "k": f"k{i}", "v": v}]
    call(cl, "POST", "_bulk", lines, query="refresh=true")


RRF = {
    "rrf": {
        "retrievers": [
            {"standard": {"query": {"match": {"t": "beta"}}}},
            {"knn": {"field": "v", "query_vector": [1.0, 0.0], "k": 3, "num_candidates": 3}},
        ],
        "rank_window_size": 10,
    }
}


def test_rrf_needs_an_enterprise_licence() -> None:
    """RRFRetrieverBuilder.fromXContent: LicenseUtils.newComplianceException("Reciprocal Rank Fusion (RRF)");
    rank-rrf license/100_license.yml asserts 403 security_exception and the reason; the metadata key loses ``es.``."""
    cl = StrictCluster(license_type="basic")
    _searchable(cl)
    status, body = call(cl, "POST", "s/_search", {"retriever": RRF})
    assert status == 403
    assert body["error"]["type"] == "security_exception"
    assert body["error"]["reason"] == "current license is non-compliant for [Reciprocal Rank Fusion (RRF)]"
    assert body["error"]["license.expired.feature"] == "Reciprocal Rank Fusion (RRF)"


def test_rrf_scores_and_weighted_children_by_version() -> None:
    """RRF ``sum(weight / (rank_constant + rank))``; wrapped ``{retriever, weight}`` children from 9.2
    (rrf_retriever.weighted_support, 320_rrf_weighted_retriever.yml); <= 9.1 parses each child as a named
    retriever and fails on ``retriever``."""
    cl = StrictCluster(version="9.5.0")
    _searchable(cl)
    _, body = call(cl, "POST", "s/_search", {"retriever": RRF, "size": 3})
    scores = {h["_id"]: h["_score"] for h in body["hits"]["hits"]}
    assert scores["0"] == pytest.approx(1 / 61 + 1 / 61)  # rank 1 in both (bm25: doc 0 ties doc 1, inserted first)
    weighted = {
        "rrf": {**RRF["rrf"], "retrievers": [{"retriever": r, "weight": 2.0} for r in RRF["rrf"]["retrievers"]]}
    }
    assert call(cl, "POST", "s/_search", {"retriever": weighted})[0] == 200
    old = StrictCluster(version="9.1.0")
    _searchable(old)
    resp = call(old, "POST", "s/_search", {"retriever": weighted})
    assert resp[0] == 400 and resp[1]["error"]["caused_by"]["reason"] == "unknown field [retriever]"


def test_linear_top_level_normalizer_by_version() -> None:
    """LinearRetrieverBuilder 9.1: ``[linear] [normalizer] cannot be provided when [retrievers] is specified``;
    9.2 accepts it as the children's default; per-child normalizers work from 8.18."""
    child = [{"retriever": r, "weight": 1.0, "normalizer": "minmax"} for r in RRF["rrf"]["retrievers"]]
    body = {"retriever": {"linear": {"retrievers": child, "rank_window_size": 10, "normalizer": "minmax"}}}
    v91 = StrictCluster(version="9.1.0")
    _searchable(v91)
    assert "cannot be provided when [retrievers] is specified" in reason(call(v91, "POST", "s/_search", body))
    del body["retriever"]["linear"]["normalizer"]
    assert call(v91, "POST", "s/_search", body)[0] == 200
    l2 = {"retriever": {"linear": {"retrievers": [{**child[0], "normalizer": "l2_norm"}], "rank_window_size": 10}}}
    v90 = StrictCluster(version="9.0.0")
    _searchable(v90)
    refused = call(v90, "POST", "s/_search", l2)  # ScoreNormalizer.valueOf in the component's field parser (W7)
    assert reason(refused) == "[linear] failed to parse field [retrievers]"
    assert refused[1]["error"]["caused_by"]["caused_by"]["reason"] == "Unknown normalizer [l2_norm]"


def test_unknown_keys_are_refused() -> None:
    """SearchSourceBuilder (``Unknown key for a START_OBJECT in [x].``), AbstractQueryBuilder (``unknown query``),
    ObjectParser errorOnUnknown (``[rrf] unknown field [x]``), RetrieverBuilder (``unknown retriever [x]``)."""
    cl = StrictCluster()
    _searchable(cl)
    assert reason(call(cl, "POST", "s/_search", {"quer": {}})) == "Unknown key for a START_OBJECT in [quer]."
    assert reason(call(cl, "POST", "s/_search", {"query": {"matchh": {}}})) == "unknown query [matchh]"
    assert reason(call(cl, "POST", "s/_search", {"retriever": {"rrf": {**RRF["rrf"], "windw": 1}}})) == (
        "[rrf] unknown field [windw]"
    )
    assert reason(call(cl, "POST", "s/_search", {"retriever": {"fuse": {}}})) == "unknown retriever [fuse]"
    both = call(cl, "POST", "s/_search", {"retriever": RRF, "query": {"match_all": {}}})
    assert reason(both) == "Validation Failed: 1: cannot specify [retriever] and [query];"  # audit W1


def test_exclude_vectors_exists_from_9_2() -> None:
    """FetchSourceContext ``exclude_vectors``: parsed from 9.1 / 8.19 (transport version
    ``search_source_exclude_vectors_param`` 9092000 / 8841046), vectors left out by default from 9.2; 9.0 and
    older: ``Unknown key for a VALUE_BOOLEAN in [exclude_vectors].``"""
    new = StrictCluster(version="9.2.0")
    _searchable(new)
    _, default = call(new, "POST", "s/_search", {"query": {"ids": {"values": ["0"]}}})
    assert "v" not in default["hits"]["hits"][0]["_source"]
    _, kept = call(
        new, "POST", "s/_search", {"query": {"ids": {"values": ["0"]}}, "_source": {"exclude_vectors": False}}
    )
    assert kept["hits"]["hits"][0]["_source"]["v"] == [1.0, 0.0]
    parsed = StrictCluster(version="9.1.0")
    _searchable(parsed)
    _, kept = call(
        parsed, "POST", "s/_search", {"query": {"ids": {"values": ["0"]}}, "_source": {"exclude_vectors": False}}
    )
    assert kept["hits"]["hits"][0]["_source"]["v"] == [1.0, 0.0]
    _, default = call(parsed, "POST", "s/_search", {"query": {"ids": {"values": ["0"]}}})
    assert default["hits"]["hits"][0]["_source"]["v"] == [1.0, 0.0]  # 9.1 keeps vectors in _source by default
    old = StrictCluster(version="9.0.0")
    _searchable(old)
    assert reason(call(old, "POST", "s/_search", {"_source": {"exclude_vectors": False}})) == (
        "Unknown key for a VALUE_BOOLEAN in [exclude_vectors]."
    )


def test_knn_bounds() -> None:
    """KnnSearchBuilder: ``[num_candidates] cannot be less than [k]``, ``cannot exceed [10000]``."""
    cl = StrictCluster()
    _searchable(cl)
    knn = {"field": "v", "query_vector": [1.0, 0.0], "k": 5, "num_candidates": 2}
    assert reason(call(cl, "POST", "s/_search", {"knn": knn})) == "[num_candidates] cannot be less than [k]"
    knn["num_candidates"] = 10001
    assert reason(call(cl, "POST", "s/_search", {"knn": knn})) == "[num_candidates] cannot exceed [10000]"


def test_terms_lookup_is_fetched_once_per_clause() -> None:
    """TermsQueryBuilder.doRewrite registers one GET per clause occurrence (no cross-clause cache); the lookup is
    realtime; a missing lookup index fails the whole search (150_rewrite_on_coordinator.yml)."""
    cl = StrictCluster()
    _searchable(cl)
    call(cl, "PUT", "reg/_doc/t", {"hidden": ["k1"]})
    lookup = {"terms": {"k": {"index": "reg", "id": "t", "path": "hidden"}}}
    body = {"query": {"bool": {"must_not": [lookup], "filter": [{"bool": {"must_not": [dict(lookup)]}}]}}}
    _, resp = call(cl, "POST", "s/_search", body)
    assert cl.lookups == 2
    assert {h["_id"] for h in resp["hits"]["hits"]} == {"0", "2"}
    assert reason(
        call(cl, "POST", "s/_search", {"query": {"terms": {"k": {"index": "none", "id": "t", "path": "h"}}}})
    ) == ("no such index [none]")


def test_searches_see_the_refreshed_state_get_is_realtime() -> None:
    cl = StrictCluster()
    call(cl, "PUT", "r", {"mappings": {"properties": {"a": {"type": "keyword"}}}})
    call(cl, "PUT", "r/_doc/1", {"a": "x"})
    assert call(cl, "POST", "r/_count", {})[1]["count"] == 0
    assert call(cl, "GET", "r/_doc/1")[1]["found"] is True
    call(cl, "POST", "r/_refresh")
    assert call(cl, "POST", "r/_count", {})[1]["count"] == 1


def test_delete_by_query_conflicts_and_tasks() -> None:
    """modules/reindex delete_by_query/10_basic.yml "Response for version conflict with conflicts=proceed": a
    document changed since the search is not deleted and counts in version_conflicts; ``wait_for_completion=false``
    answers ``{"task": "node:id"}``, read back with ``GET _tasks/<id>`` (TaskResult)."""
    cl = StrictCluster()
    call(cl, "PUT", "d", {"mappings": {"properties": {"a": {"type": "keyword"}}}})
    call(cl, "PUT", "d/_doc/1", {"a": "x"}, query="refresh=true")
    call(cl, "PUT", "d/_doc/1", {"a": "x"})  # changed after the last refresh
    status, resp = call(cl, "POST", "d/_delete_by_query", {"query": {"match_all": {}}}, query="conflicts=proceed")
    assert (status, resp["deleted"], resp["version_conflicts"], resp["failures"]) == (200, 0, 1, [])
    status, aborted = call(cl, "POST", "d/_delete_by_query", {"query": {"match_all": {}}})
    assert status == 409 and aborted["failures"][0]["cause"]["type"] == "version_conflict_engine_exception"
    call(cl, "POST", "d/_refresh")
    _, task = call(cl, "POST", "d/_delete_by_query", {"query": {"match_all": {}}}, query="wait_for_completion=false")
    _, done = call(cl, "GET", f"_tasks/{task['task']}")
    assert done["completed"] is True and done["response"]["deleted"] == 1


# ---------------------------------------------------------------------------------------------- security
def _secured() -> StrictCluster:
    roles = {
        "reader": Role(indices=((("es-rag-*",), ("read",)),)),
        "admin": Role(cluster=("manage",), indices=((("*",), ("all",)),)),
    }
    users = {"elastic": ("pw", ("admin",)), "rag_reader": ("pw", ("reader",))}
    return StrictCluster(users=users, roles=roles)


def _basic(user: str, pw: str = "pw") -> str:
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


def test_authentication_and_authorization_errors() -> None:
    """AuthenticationService (401 with WWW-Authenticate) and AuthorizationDenialMessages.actionDenied (403)."""
    cl = _secured()
    assert call(cl, "GET", "")[0] == 401
    assert call(cl, "GET", "", Authorization=_basic("elastic", "bad"))[0] == 401
    assert call(cl, "GET", "", Authorization=_basic("elastic"))[0] == 200
    status, body = call(cl, "GET", "_license", Authorization=_basic("rag_reader"))
    assert status == 403
    assert body["error"]["reason"] == (
        "action [cluster:monitor/xpack/license/get] is unauthorized for user [rag_reader] with effective roles "
        "[reader], this action is granted by the cluster privileges [monitor,manage,all]"
    )
    assert "license.expired.feature" not in body["error"]  # a privilege 403 is not a licence refusal
    _, priv = call(
        cl,
        "POST",
        "_security/user/_has_privileges",
        {"cluster": ["monitor"], "index": [{"names": ["es-rag-chunks"], "privileges": ["read", "write"]}]},
        Authorization=_basic("rag_reader"),
    )
    assert priv["cluster"] == {"monitor": False}
    assert priv["index"]["es-rag-chunks"] == {"read": True, "write": False}


def test_every_response_carries_the_product_header_over_http() -> None:
    """RestController adds ``X-elastic-product: Elasticsearch`` to every response (also errors)."""
    import urllib.error
    import urllib.request

    from tests.support.double.http import serve

    with serve(StrictCluster()) as url:
        with urllib.request.urlopen(url + "/") as resp:
            assert resp.headers["X-Elastic-Product"] == "Elasticsearch"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url + "/missing-index/_search")
        assert info.value.headers["X-Elastic-Product"] == "Elasticsearch"
        assert info.value.code == 404


def test_rename_semantics() -> None:
    """RenameProcessor: a missing field fails (``field [x] doesn't exist``, audit W24) unless
    ignore_missing; an existing target fails unless override (the inference pipeline renames is_truncated)."""
    assert _run([{"rename": {"field": "a", "target_field": "b"}}], {"a": 1}) == {"b": 1}
    assert _run([{"rename": {"field": "a", "target_field": "b", "ignore_missing": True}}], {"c": 1}) == {"c": 1}
    with pytest.raises(IngestFailure, match=r"field \[a\] doesn't exist"):
        _run([{"rename": {"field": "a", "target_field": "b"}}], {})
    with pytest.raises(IngestFailure, match=r"field \[b\] already exists"):
        _run([{"rename": {"field": "a", "target_field": "b"}}], {"a": 1, "b": 2})


def test_composite_aggregation_pages_terms_buckets_in_key_order() -> None:
    """search.aggregation/230_composite.yml ("Composite aggregation with after"): buckets in key order (keywords as
    UTF-8 bytes), ``size`` per page, ``after`` excludes keys up to it, ``after_key`` = the last bucket's key; an
    unknown composite field is refused (``CompositeAggregationBuilder``'s parser), and so is a terms source on a
    ``text`` field (``TextFieldMapper``: fielddata disabled)."""
    cl = StrictCluster()
    call(cl, "PUT", "c", {"mappings": {"properties": {"s": {"type": "keyword"}, "v": {"type": "keyword"}}}})
    for i, (s, v) in enumerate([("b", "1"), ("a", "2"), ("a", "1"), ("b", "1"), ("é", "1")]):
        call(cl, "PUT", f"c/_doc/{i}", {"s": s, "v": v})
    call(cl, "POST", "c/_refresh")
    comp: dict[str, Any] = {"size": 2, "sources": [{"s": {"terms": {"field": "s"}}}, {"v": {"terms": {"field": "v"}}}]}
    page = call(cl, "POST", "c/_search", {"size": 0, "aggs": {"x": {"composite": comp}}})[1]["aggregations"]["x"]
    assert page["buckets"] == [
        {"key": {"s": "a", "v": "1"}, "doc_count": 1},
        {"key": {"s": "a", "v": "2"}, "doc_count": 1},
    ]
    assert page["after_key"] == {"s": "a", "v": "2"}
    nxt = call(cl, "POST", "c/_search", {"size": 0, "aggs": {"x": {"composite": {**comp, "after": page["after_key"]}}}})
    assert [b["key"]["s"] for b in nxt[1]["aggregations"]["x"]["buckets"]] == ["b", "é"]
    bad = call(cl, "POST", "c/_search", {"size": 0, "aggs": {"x": {"composite": {**comp, "sizes": 3}}}})
    assert bad[0] == 400 and "unknown field [sizes]" in reason(bad)
    # a text field has no fielddata (TextFieldMapper): es_rag's listing must aggregate the keyword fields
    call(cl, "PUT", "t", {"mappings": {"properties": {"body": {"type": "text"}}}})
    on_text = {"size": 0, "aggs": {"x": {"composite": {"sources": [{"b": {"terms": {"field": "body"}}}]}}}}
    refused = call(cl, "POST", "t/_search", on_text)
    assert refused[0] == 400 and reason(refused).startswith("Fielddata is disabled on [body] in [t].")
