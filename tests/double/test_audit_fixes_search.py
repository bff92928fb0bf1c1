"""Regression tests for the search rules the double-rule audit found wrong (``reports/double-rule-audit.md``, W1-W8).
Each test names the Elasticsearch source that defines the behaviour (elastic/elasticsearch unless noted) and fails on
the double as it was before the fix."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.double.cluster import StrictCluster
from tests.support.double.yaml_runner import _has_feature


def call(cl: StrictCluster, method: str, path: str, body: Any = None, query: str = "") -> tuple[int, Any]:
    return cl.handle(method, path, query, body, {})


def error(resp: tuple[int, Any]) -> dict[str, Any]:
    assert resp[0] >= 400, resp
    err: dict[str, Any] = resp[1]["error"]
    return err


def searchable(version: str = "9.5.0") -> StrictCluster:
    cl = StrictCluster(version=version)
    props = {"t": {"type": "text"}, "k": {"type": "keyword"}, "v": {"type": "dense_vector", "dims": 2}}
    call(cl, "PUT", "s", {"mappings": {"properties": props}})
    lines: list[dict[str, Any]] = []
    for i, (t, v) in enumerate([("alpha beta", [1.0, 0.0]), ("beta gamma", [0.0, 1.0]), ("gamma", [0.7, 0.7])]):
        lines += [{"index": {"_index": "s", "_id": str(i)}}, {"t": t, "k": f"k{i}", "v": v}]
    call(cl, "POST", "_bulk", lines, query="refresh=true")
    return cl


STANDARD = {"standard": {"query": {"match": {"t": "beta"}}}}
KNN = {"knn": {"field": "v", "query_vector": [1.0, 0.0], "k": 3, "num_candidates": 3}}


def rrf(window: int, *children: dict[str, Any]) -> dict[str, Any]:
    return {"rrf": {"retrievers": list(children or (STANDARD, KNN)), "rank_window_size": window}}


# ------------------------------------------------------------------------------------------------------------ W1
def test_w1_retriever_conflicts_are_one_validation_error_listing_every_section() -> None:
    """SearchSourceBuilder.validate (8.16+, PR #110641 "the type ... will change from illegal_argument_exception to
    validation exception"): ``addValidationError("cannot specify [" + RETRIEVER + "] and " + specified)`` with
    ``specified`` listing query, knn, search_after, terminate_after, sort, rank, rescore in that order
    (RetrieverBuilderErrorTests). ``sort`` next to a retriever was accepted and applied."""
    cl = searchable()
    both = error(call(cl, "POST", "s/_search", {"retriever": rrf(10), "query": {"match_all": {}}, "knn": KNN["knn"]}))
    assert both["type"] == "action_request_validation_exception"
    assert both["reason"] == "Validation Failed: 1: cannot specify [retriever] and [query, knn];"
    sort = error(call(cl, "POST", "s/_search", {"retriever": STANDARD, "sort": ["k"]}))
    assert sort["reason"] == "Validation Failed: 1: cannot specify [retriever] and [sort];"
    after = error(call(cl, "POST", "s/_search", {"retriever": STANDARD, "search_after": [1], "terminate_after": 5}))
    assert after["reason"] == "Validation Failed: 1: cannot specify [retriever] and [search_after, terminate_after];"
    default = error(call(cl, "POST", "s/_search", {"retriever": STANDARD, "terminate_after": 0}))
    assert default["type"] == "strict_double_unsupported"  # 0 is DEFAULT_TERMINATE_AFTER: no conflict, a double limit


# ------------------------------------------------------------------------------------------------------------ W2
def test_w2_rank_window_size_against_size_is_a_validation_error() -> None:
    """CompoundRetrieverBuilder.validate: ``addValidationError(format("[%s] requires [%s: %d] be greater than or
    equal to [size: %d]", ...))`` against ``source.size()`` (-1 when the request sets no size, so never then), for
    rrf, linear and text_similarity_reranker alike; retriever errors come before ``cannot specify``; a child compound
    with a smaller window than its parent is refused (``to be smaller than or equal to its sub retriever's``)."""
    cl = searchable()
    small = error(call(cl, "POST", "s/_search", {"retriever": rrf(2), "size": 3}))
    assert small["type"] == "action_request_validation_exception"
    assert (
        small["reason"]
        == "Validation Failed: 1: [rrf] requires [rank_window_size: 2] be greater than or equal to [size: 3];"
    )
    assert call(cl, "POST", "s/_search", {"retriever": rrf(2)})[0] == 200  # no size: source.size() is -1
    linear = {"linear": {"retrievers": [{"retriever": STANDARD, "weight": 1.0}], "rank_window_size": 1}}
    assert error(call(cl, "POST", "s/_search", {"retriever": linear, "size": 4, "sort": ["k"]}))["reason"] == (
        "Validation Failed: 1: [linear] requires [rank_window_size: 1] be greater than or equal to [size: 4];"
        "2: cannot specify [retriever] and [sort];"
    )
    nested = error(call(cl, "POST", "s/_search", {"retriever": rrf(20, rrf(5), KNN)}))
    assert nested["reason"] == (
        "Validation Failed: 1: [rrf] requires [rank_window_size: 20] to be smaller than or equal to its sub "
        "retriever's rrf [rank_window_size: 5];"
    )


# ------------------------------------------------------------------------------------------------------------ W3
@pytest.mark.parametrize(
    ("value", "token"),
    [("x", "VALUE_STRING"), (3, "VALUE_NUMBER"), (2.5, "VALUE_NUMBER"), (True, "VALUE_BOOLEAN"), (None, "VALUE_NULL")],
)
def test_w3_unknown_scalar_keys_name_the_token(value: Any, token: str) -> None:
    """SearchSourceBuilder.parseXContent / throwUnknownKey: ``"Unknown key for a " + token + " in [" + name + "]."``
    with the ``XContentParser.Token`` (VALUE_STRING, VALUE_NUMBER, VALUE_BOOLEAN, VALUE_NULL), not ``VALUE``."""
    cl = searchable()
    assert error(call(cl, "POST", "s/_search", {"quer": value}))["reason"] == f"Unknown key for a {token} in [quer]."


@pytest.mark.parametrize("key", ["slice", "sub_searches"])
def test_w3_slice_and_sub_searches_are_real_keys(key: str) -> None:
    """SearchSourceBuilder.SLICE / SUB_SEARCHES_FIELD are parsed keys: the double cannot run them (a double limit),
    it must not call them unknown."""
    cl = searchable()
    resp = error(call(cl, "POST", "s/_search", {key: {"id": 0, "max": 2} if key == "slice" else []}))
    assert resp["type"] == "strict_double_unsupported"


# ------------------------------------------------------------------------------------------------------------ W4
def test_w4_unknown_multi_match_type_is_a_parse_exception() -> None:
    """MultiMatchQueryBuilder.Type.parse: ``throw new ElasticsearchParseException("failed to parse [{}] query type
    [{}]. unknown type.", NAME, value)``: type ``parse_exception``."""
    cl = searchable()
    body = {"query": {"multi_match": {"query": "a", "fields": ["t"], "type": "nope"}}}
    err = error(call(cl, "POST", "s/_search", body))
    assert (err["type"], err["reason"]) == (
        "parse_exception",
        "failed to parse [multi_match] query type [nope]. unknown type.",
    )


# ------------------------------------------------------------------------------------------------------------ W5
@pytest.mark.parametrize(
    ("query", "err_type", "reason"),
    [
        ({"bool": {"mustt": []}}, "x_content_parse_exception", "[bool] unknown field [mustt]"),
        (
            {"semantic": {"field": "t", "query": "a", "x": 1}},
            "x_content_parse_exception",
            "[semantic] unknown field [x]",
        ),
        ({"ids": {"values": ["1"], "x": 1}}, "parsing_exception", "[ids] unknown field [x]"),
        ({"match_all": {"x": 1}}, "parsing_exception", "[match_all] unknown field [x]"),
    ],
)
def test_w5_object_parser_queries_report_unknown_fields(query: dict[str, Any], err_type: str, reason: str) -> None:
    """BoolQueryBuilder ``new ObjectParser<>("bool", ...)`` and SemanticQueryBuilder's ConstructingObjectParser throw
    ``[name] unknown field [x]`` (x_content_parse_exception); IdsQueryBuilder / MatchAllQueryBuilder.fromXContent
    catch that IAE and rethrow ``new ParsingException(location, e.getMessage(), e)``."""
    cl = searchable()
    err = error(call(cl, "POST", "s/_search", {"query": query}))
    assert (err["type"], err["reason"]) == (err_type, reason)


def test_w5_bool_takes_adjust_pure_negative_and_semantic_takes_lenient() -> None:
    """BoolQueryBuilder declares ``adjust_pure_negative`` (false: a pure must_not bool is not given the match-all
    ``fixNegativeQueryIfNeeded`` adds); SemanticQueryBuilder declares ``lenient`` (TransportVersions
    SEMANTIC_QUERY_LENIENT, 8.18/9.0): ``false`` is the default behaviour, ``true`` a double limit."""
    cl = searchable()
    pure = {"bool": {"must_not": [{"term": {"k": "k0"}}]}}
    assert call(cl, "POST", "s/_search", {"query": pure})[1]["hits"]["total"]["value"] == 2
    kept = call(cl, "POST", "s/_search", {"query": {"bool": {**pure["bool"], "adjust_pure_negative": False}}})
    assert kept[1]["hits"]["total"]["value"] == 0
    lenient = error(
        call(cl, "POST", "s/_search", {"query": {"semantic": {"field": "t", "query": "a", "lenient": True}}})
    )
    assert lenient["type"] == "strict_double_unsupported"


# ------------------------------------------------------------------------------------------------------------ W6
def test_w6_empty_clause_and_second_key() -> None:
    """AbstractQueryBuilder.parseInnerQueryBuilder: ``{}`` -> ``IllegalArgumentException("query malformed, empty clause
    found at [" + parser.getTokenLocation() + "]")`` (the clause's closing brace, as elasticsearch-py's compact body
    puts it); a second key after a parsed clause -> ``ParsingException("[" + queryName + "] malformed query, expected
    [END_OBJECT] but found [" + token + "]")`` (SearchSourceBuilderTests.testMultipleQueryObjectsAreRejected)."""
    cl = searchable()
    empty = error(call(cl, "POST", "s/_search", {"query": {"bool": {"must": [{}]}}}))
    # {"query":{"bool":{"must":[{}]}}} -- the "}" of the empty clause is byte 28
    assert (empty["type"], empty["reason"]) == (
        "illegal_argument_exception",
        "query malformed, empty clause found at [1:28]",
    )
    top = error(call(cl, "POST", "s/_search", {"query": {}}))
    assert top["reason"] == "query malformed, empty clause found at [1:11]"
    two = error(call(cl, "POST", "s/_search", {"query": {"match": {"t": "a"}, "term": {"k": "b"}}}))
    assert (two["type"], two["reason"]) == (
        "parsing_exception",
        "[match] malformed query, expected [END_OBJECT] but found [FIELD_NAME]",
    )


# ------------------------------------------------------------------------------------------------------------ W7
def test_w7_linear_component_errors_are_wrapped_by_the_parsers() -> None:
    """LinearRetrieverComponent: ``ConstructingObjectParser("retriever-component")`` whose builder throws
    ``IllegalArgumentException("[weight] must be non-negative")`` (buildTarget: ``Failed to build [..] after last
    required field arrived``) and whose normalizer field parser calls ``ScoreNormalizer.valueOf`` (``Unknown normalizer
    [x]``, wrapped ``[retriever-component] failed to parse field [normalizer]``); LinearRetrieverBuilder's
    ``[retrievers]`` field parser wraps either as ``[linear] failed to parse field [retrievers]``."""
    cl = searchable()
    weight = {"linear": {"retrievers": [{"retriever": STANDARD, "weight": -1.0}]}}
    err = error(call(cl, "POST", "s/_search", {"retriever": weight}))
    assert (err["type"], err["reason"]) == ("x_content_parse_exception", "[linear] failed to parse field [retrievers]")
    assert err["caused_by"]["reason"] == "Failed to build [retriever-component] after last required field arrived"
    assert err["caused_by"]["caused_by"] == {
        "type": "illegal_argument_exception",
        "reason": "[weight] must be non-negative",
    }
    norm = {"linear": {"retrievers": [{"retriever": STANDARD, "normalizer": "zscore"}]}}
    err = error(call(cl, "POST", "s/_search", {"retriever": norm}))
    assert err["reason"] == "[linear] failed to parse field [retrievers]"
    assert err["caused_by"]["reason"] == "[retriever-component] failed to parse field [normalizer]"
    assert err["caused_by"]["caused_by"] == {
        "type": "illegal_argument_exception",
        "reason": "Unknown normalizer [zscore]",
    }


# ------------------------------------------------------------------------------------------------------------ W8
def test_w8_l2_norm_is_in_8_19() -> None:
    """PR #128972 "[8.19] Add L2 norm normalization support to linear retriever" (backport of #128504): an 8.19 node
    takes ``l2_norm``; 8.18 does not; the YAML runner's ``linear_retriever.l2_norm`` feature holds on 8.19."""
    body = {"retriever": {"linear": {"retrievers": [{"retriever": STANDARD, "normalizer": "l2_norm"}]}}}
    assert call(searchable("8.19.0"), "POST", "s/_search", body)[0] == 200
    assert error(call(searchable("8.18.0"), "POST", "s/_search", body))["caused_by"]["caused_by"]["reason"] == (
        "Unknown normalizer [l2_norm]"
    )
    assert _has_feature((8, 19, 0), "linear_retriever.l2_norm") and not _has_feature(
        (8, 18, 0), "linear_retriever.l2_norm"
    )
