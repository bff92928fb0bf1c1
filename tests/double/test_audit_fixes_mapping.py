"""Regression tests for the mapping, analysis and document rules the double-rule audit found wrong
(``reports/double-rule-audit.md``, W9-W17). Each test names the Elasticsearch source that defines the behaviour
(elastic/elasticsearch unless noted) and fails on the double as it was before the fix."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.double.cluster import StrictCluster


def call(cl: StrictCluster, method: str, path: str, body: Any = None, query: str = "") -> tuple[int, Any]:
    return cl.handle(method, path, query, body, {})


def reason(resp: tuple[int, Any]) -> str:
    assert resp[0] >= 400, resp
    return str(resp[1]["error"]["reason"])


def vector_index(cl: StrictCluster, options: dict[str, Any], dims: int = 64, name: str = "v") -> tuple[int, Any]:
    field = {"type": "dense_vector", "dims": dims, "index_options": options}
    return call(cl, "PUT", name, {"mappings": {"properties": {"f": field}}})


# ------------------------------------------------------------------------------------------------------------ W9
@pytest.mark.parametrize("itype", ["int8_hnsw", "bbq_hnsw", "hnsw", "flat"])
def test_w9_on_disk_rescore_is_unknown_before_9_3(itype: str) -> None:
    """PR #138492 "Enable bfloat16 and on-disk rescoring" (9.3; elasticsearch-specification ``@availability stack
    since=9.3.0``): before it ``on_disk_rescore`` is left for ``MappingParser.checkNoRemainingFields`` (``has
    unsupported parameters``) on every type, the quantized HNSW ones included."""
    refused = vector_index(StrictCluster(version="9.2.0"), {"type": itype, "on_disk_rescore": True})
    assert reason(refused) == (
        "Failed to parse mapping: Mapping definition for [f] has unsupported parameters:  [on_disk_rescore : true]"
    )


def test_w9_on_disk_rescore_from_9_3() -> None:
    """DenseVectorFieldMapper.VectorIndexType (9.3): every type removes ``on_disk_rescore``; HNSW/FLAT/INT8_FLAT/
    INT4_FLAT/BBQ_FLAT throw ``"on_disk_rescore is only supported for indexed and quantized vector types"`` only when
    it is true; the quantized HNSW types keep it."""
    cl = StrictCluster(version="9.3.0")
    assert vector_index(cl, {"type": "int8_hnsw", "on_disk_rescore": True}, name="a")[0] == 200
    assert vector_index(cl, {"type": "hnsw", "on_disk_rescore": False}, name="b")[0] == 200
    for i, itype in enumerate(("hnsw", "flat", "int8_flat", "bbq_flat")):
        refused = vector_index(cl, {"type": itype, "on_disk_rescore": True}, name=f"c{i}")
        assert reason(refused) == (
            "Failed to parse mapping: on_disk_rescore is only supported for indexed and quantized vector types"
        )


# ----------------------------------------------------------------------------------------------------------- W10
def test_w10_bbq_disk_from_9_2() -> None:
    """VectorIndexType.BBQ_DISK("bbq_disk", true), GA 9.2 (PR #135299, docs ``applies_to stack: ga 9.2``): the
    mapping is accepted with ``cluster_size`` (``ES920DiskBBQVectorsFormat`` 64..65536: ``cluster_size must be between
    64 and 65536, got: N``), ``default_visit_percentage`` and ``rescore_vector`` (default oversample 3.0), no 64-dims
    minimum; a kNN search on it is a double limit (IVF scoring is not modelled); 9.1 does not know the type."""
    cl = StrictCluster(version="9.2.0")
    assert vector_index(cl, {"type": "bbq_disk", "cluster_size": 128, "default_visit_percentage": 5}, dims=4)[0] == 200
    shown = call(cl, "GET", "v/_mapping")[1]["v"]["mappings"]["properties"]["f"]["index_options"]
    assert shown["rescore_vector"] == {"oversample": 3.0}
    assert reason(vector_index(cl, {"type": "bbq_disk", "cluster_size": 10}, name="w")) == (
        "Failed to parse mapping: cluster_size must be between 64 and 65536, got: 10"
    )
    assert reason(vector_index(cl, {"type": "bbq_disk", "default_visit_percentage": 150}, name="x")) == (
        "Failed to parse mapping: default_visit_percentage must be between 0.0 and 100.0, got: 150.0 for field [f]"
    )
    call(cl, "PUT", "v/_doc/1", {"f": [0.1, 0.2, 0.3, 0.4]}, query="refresh=true")
    knn = {"knn": {"field": "f", "query_vector": [0.1, 0.2, 0.3, 0.4], "k": 1, "num_candidates": 1}}
    assert call(cl, "POST", "v/_search", knn)[1]["error"]["type"] == "strict_double_unsupported"
    assert "Unknown vector index options type [bbq_disk]" in reason(
        vector_index(StrictCluster(version="9.1.0"), {"type": "bbq_disk"})
    )


def test_w10_flat_index_threshold_from_9_4() -> None:
    """``flat_index_threshold`` on the HNSW types and bbq_disk: PR #141074 (merged for v9.4.0; docs PR #158074,
    elasticsearch-specification #6290 ``@availability stack since=9.4.0``); unsupported before."""
    assert vector_index(StrictCluster(version="9.4.0"), {"type": "hnsw", "flat_index_threshold": 500})[0] == 200
    assert "unsupported parameters:  [flat_index_threshold : 500]" in reason(
        vector_index(StrictCluster(version="9.3.0"), {"type": "hnsw", "flat_index_threshold": 500})
    )


# ----------------------------------------------------------------------------------------------------------- W11
def test_w11_bbq_default_oversample_on_8_19() -> None:
    """DenseVectorFieldMapper.defaultOversampleForBBQ: ``onOrAfter(DEFAULT_OVERSAMPLE_VALUE_FOR_BBQ) ||
    between(DEFAULT_OVERSAMPLE_VALUE_FOR_BBQ_BACKPORT_8_X, UPGRADE_TO_LUCENE_10_0_0)``; the backport index version
    8_530_0_00 follows ADD_RESCORE_PARAMS_TO_QUANTIZED_VECTORS_BACKPORT_8_X (8_528_0_00, 8.19) in IndexVersions."""
    cl = StrictCluster(version="8.19.0")
    assert vector_index(cl, {"type": "bbq_hnsw"})[0] == 200
    shown = call(cl, "GET", "v/_mapping")[1]["v"]["mappings"]["properties"]["f"]["index_options"]
    assert shown["rescore_vector"] == {"oversample": 3.0}


# ----------------------------------------------------------------------------------------------------------- W12
@pytest.mark.parametrize(("version", "known"), [("9.1.0", True), ("8.19.0", True), ("9.0.0", False)])
def test_w12_semantic_text_index_options(version: str, known: bool) -> None:
    """SemanticTextFieldMapper ``index_options``: PR #119967 (9.1) and its backport PR #129626 ("[8.19] Add
    index_options to semantic_text field mappings"). The double does not model them: a double limit where
    Elasticsearch has the parameter, ``unknown parameter`` where it does not."""
    field = {"type": "semantic_text", "index_options": {"dense_vector": {"type": "int8_hnsw"}}}
    resp = call(StrictCluster(version=version), "PUT", "s", {"mappings": {"properties": {"f": field}}})
    if known:
        assert resp[1]["error"]["type"] == "strict_double_unsupported"
    else:
        assert (
            reason(resp)
            == "Failed to parse mapping: unknown parameter [index_options] on mapper [f] of type [semantic_text]"
        )


# ----------------------------------------------------------------------------------------------------------- W13
@pytest.mark.parametrize("ftype", ["integer", "long", "float", "double", "boolean", "date"])
def test_w13_every_field_mapper_takes_multi_fields(ftype: str) -> None:
    """FieldMapper.Builder.parse: ``fields`` (TypeParsers.parseMultiField) and ``copy_to`` are read for every field
    mapper before its own parameters; ``script`` / ``on_script_error`` are real parameters (double limits)."""
    cl = StrictCluster()
    field = {"type": ftype, "fields": {"raw": {"type": "keyword"}}}
    assert call(cl, "PUT", "m", {"mappings": {"properties": {"f": field}}})[0] == 200
    scripted = {"type": ftype, "script": {"source": "emit(1)"}}
    resp = call(cl, "PUT", "n", {"mappings": {"properties": {"f": scripted}}})
    assert resp[1]["error"]["type"] == "strict_double_unsupported"


# ------------------------------------------------------------------------------------------------------- W14/15
@pytest.mark.parametrize(
    ("analyzer", "message"),
    [
        ({"type": "custom"}, "Custom Analyzer [a] must be configured with a tokenizer"),
        ({"type": "custom", "tokenizer": "nope"}, "Custom Analyzer [a] failed to find tokenizer under name [nope]"),
        ({"tokenizer": "standard", "filter": ["nope"]}, "Custom Analyzer [a] failed to find filter under name [nope]"),
    ],
)
def test_w14_w15_custom_analyzer_messages(analyzer: dict[str, Any], message: str) -> None:
    """AnalysisRegistry sends ``type: custom`` (or a tokenizer without type) to CustomAnalyzerProvider, whose build
    (AnalyzerComponents.createComponents) throws ``"Custom Analyzer [" + name + "] must be configured with a
    tokenizer"``, ``... failed to find tokenizer under name [t]``, ``... failed to find filter under name [f]``."""
    settings = {"analysis": {"analyzer": {"a": analyzer}}}
    resp = call(StrictCluster(), "PUT", "x", {"settings": settings})
    assert (resp[1]["error"]["type"], reason(resp)) == ("illegal_argument_exception", message)


# ----------------------------------------------------------------------------------------------------------- W16
def test_w16_redefining_a_built_in_similarity_is_a_settings_error() -> None:
    """IndexScopedSettings: ``Setting.groupSetting("index.similarity.", validator)`` whose validator throws
    ``"illegal value for [index.similarity." + key + "] cannot redefine built-in similarity"`` when the settings are
    validated (ScopedSettingsTests expects ``illegal value for [index.similarity.boolean] cannot redefine built-in
    similarity``), before SimilarityService is built."""
    settings = {"index": {"similarity": {"BM25": {"type": "BM25", "b": 0.5}}}}
    resp = call(StrictCluster(), "PUT", "x", {"settings": settings})
    assert reason(resp) == "illegal value for [index.similarity.BM25] cannot redefine built-in similarity"


# ----------------------------------------------------------------------------------------------------------- W17
def test_w17_vector_document_errors() -> None:
    """DocumentParser.wrapInDocumentParsingException: ``new DocumentParsingException(location, "failed to parse: " +
    e.getMessage(), e)`` around DenseVectorFieldMapper's IAEs; FloatElement.checkVectorMagnitude appends
    ``appendErrorElements`` (`` Preview of invalid vector: [`` first five ``Float.toString`` values, ``, ...`` at
    five or more); DenseVectorFieldMapperTests.testDotProductWithInvalidNorm expects
    ``[-12.1, 2.7, -4.0, 1.05, 10.0, ...]``."""
    cl = StrictCluster()
    props = {
        "c": {"type": "dense_vector", "dims": 4, "similarity": "cosine"},
        "d": {"type": "dense_vector", "dims": 6, "similarity": "dot_product"},
    }
    call(cl, "PUT", "v", {"mappings": {"properties": props}})
    short = call(cl, "PUT", "v/_doc/1", {"c": [1.0, 2.0, 3.0]})
    assert short[1]["error"]["type"] == "document_parsing_exception"
    assert reason(short) == (
        "failed to parse: The [dense_vector] field [c] in doc [document with id '1'] has a different number of "
        "dimensions [3] than defined in the mapping [4]"
    )
    assert short[1]["error"]["caused_by"]["type"] == "illegal_argument_exception"
    zero = call(cl, "PUT", "v/_doc/2", {"c": [0.0, 0.0, 0.0, 0.0]})
    assert reason(zero) == (
        "failed to parse: The [cosine] similarity does not support vectors with zero magnitude. Preview of invalid "
        "vector: [0.0, 0.0, 0.0, 0.0]"
    )
    norm = call(cl, "PUT", "v/_doc/3", {"d": [-12.1, 2.7, -4, 1.05, 10.0, 29.9]})
    assert reason(norm) == (
        "failed to parse: The [dot_product] similarity can only be used with unit-length vectors. Preview of invalid "
        "vector: [-12.1, 2.7, -4.0, 1.05, 10.0, ...]"
    )
