"""The strict double's rules the second review found wrong (issue 29), each against Elasticsearch's source.

* ``integer`` / ``long`` ranges: ``NumberFieldMapper.NumberType.INTEGER.parse`` ("Value [x] is out of range for an
  integer"; ``IntegerFieldMapperTests.outOfRangeSpecs``); the double took 3000000000.
* dates: a ``date`` field's default format ``strict_date_optional_time||epoch_millis``
  (``DateFormatters.STRICT_DATE_OPTIONAL_TIME``): ``2026-04`` parses; ``2026-04-30 09:00:00`` and ``2026-W18-4`` do
  not. The double did the opposite (Python's ``datetime.fromisoformat``).
* a missing inference endpoint: 404 ``Inference endpoint not found [x]`` (``ModelRegistry``); the double raised a
  Python TypeError.
* a known path with a wrong method: 405 and a plain-string error (``RestController.handleUnsupportedHttpMethod``);
  the double answered 400.
* ``element_type: bfloat16``: accepted from 9.3 (``DenseVectorFieldMapper.ElementType.BFLOAT16``, PR #138492).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.double.cluster import StrictCluster
from tests.support.double.ingest import InferenceEndpoint


def _index(cluster: StrictCluster, properties: dict[str, Any]) -> None:
    status, body = cluster.handle("PUT", "ix", "", {"mappings": {"dynamic": "strict", "properties": properties}}, {})
    assert status == 200, body


@pytest.mark.parametrize(
    ("ftype", "value", "ok"),
    [
        ("integer", 2147483647, True),
        ("integer", 3000000000, False),
        ("integer", -2147483649, False),
        ("integer", "2147483648", False),
        ("integer", 12.7, True),  # coerce: truncated
        ("long", 9223372036854775807, True),
        ("long", 9223372036854775808, False),
    ],
)
def test_whole_numbers_out_of_their_range_are_refused(ftype: str, value: Any, ok: bool) -> None:
    cluster = StrictCluster()
    _index(cluster, {"n": {"type": ftype}})
    status, body = cluster.handle("PUT", "ix/_doc/1", "", {"n": value}, {})
    assert (status in (200, 201)) is ok, body
    if not ok:
        assert body["error"]["type"] == "document_parsing_exception"
        assert f"failed to parse field [n] of type [{ftype}]" in body["error"]["reason"]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("2026", True),
        ("2026-04", True),
        ("2026-04-30", True),
        ("2026-04-30T09", True),
        ("2026-04-30T09:00", True),
        ("2026-04-30T09:00:00Z", True),
        ("2026-04-30T09:00:00.123456789+02:00", True),
        ("2026-04-30T09:00:00+0530", True),
        ("1714464000000", True),
        (1714464000000, True),
        ("2026-04-30 09:00:00", False),
        ("2026-W18-4", False),
        ("2026-13-01", False),
        ("2026-02-30", False),
        ("20260430", True),  # epoch_millis: a number string, however it looks
        ("30/04/2026", False),
    ],
)
def test_dates_parse_as_strict_date_optional_time_or_epoch_millis(value: Any, ok: bool) -> None:
    cluster = StrictCluster()
    _index(cluster, {"d": {"type": "date"}})
    status, body = cluster.handle("PUT", "ix/_doc/1", "", {"d": value}, {})
    assert (status in (200, 201)) is ok, body


def test_a_range_query_reads_a_partial_date_as_its_first_instant() -> None:
    cluster = StrictCluster()
    _index(cluster, {"d": {"type": "date"}})
    for i, value in enumerate(("2026-04", "2026-03-31T23:59:59Z", "2026-05")):
        assert cluster.handle("PUT", f"ix/_doc/{i}", "refresh=true", {"d": value}, {})[0] in (200, 201)
    query = {"query": {"range": {"d": {"gte": "2026-04-01T00:00:00Z", "lt": "2026-05-01"}}}}
    status, body = cluster.handle("POST", "ix/_search", "", query, {})
    assert status == 200, body
    assert [h["_id"] for h in body["hits"]["hits"]] == ["0"]


def test_a_missing_inference_endpoint_is_a_404_not_a_crash() -> None:
    cluster = StrictCluster(endpoints=[InferenceEndpoint("e5", dims=4)])
    status, body = cluster.handle("POST", "_inference/text_embedding/gone", "", {"input": ["x"]}, {})
    assert status == 404
    assert body["error"]["type"] == "resource_not_found_exception"
    assert body["error"]["reason"] == "Inference endpoint not found [gone]"


def test_a_semantic_query_whose_endpoint_was_deleted_is_a_404() -> None:
    cluster = StrictCluster(endpoints=[InferenceEndpoint("e5", dims=4)])
    _index(cluster, {"s": {"type": "semantic_text", "inference_id": "e5"}})
    assert cluster.handle("PUT", "ix/_doc/1", "refresh=true", {"s": "alpha beta"}, {})[0] in (200, 201)
    cluster.endpoints.pop("e5")
    status, body = cluster.handle("POST", "ix/_search", "", {"query": {"semantic": {"field": "s", "query": "a"}}}, {})
    assert status == 404, body
    assert "Inference endpoint not found [e5]" in str(body)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "_tasks/n:1", "GET"),
        ("POST", "ix", "DELETE, GET, HEAD, PUT"),
        ("GET", "ix/_delete_by_query", "POST"),
        ("POST", "_ingest/pipeline/p", "DELETE, GET, PUT"),
    ],
)
def test_a_known_path_with_a_wrong_method_is_a_405(method: str, path: str, allowed: str) -> None:
    status, body = StrictCluster().handle(method, path, "", None, {})
    assert status == 405
    assert body == {
        "error": f"Incorrect HTTP method for uri [/{path}] and method [{method}], allowed: [{allowed}]",
        "status": 405,
    }


def test_an_unknown_path_is_still_a_400_no_handler() -> None:
    status, body = StrictCluster().handle("GET", "_nothing/here", "", None, {})
    assert status == 400
    assert body["error"]["reason"] == "no handler found for uri [/_nothing/here] and method [GET]"


@pytest.mark.parametrize(("version", "ok"), [("9.2.0", False), ("9.3.0", True), ("9.5.0", True)])
def test_bfloat16_vectors_exist_from_9_3(version: str, ok: bool) -> None:
    cluster = StrictCluster(version=version)
    mapping = {"mappings": {"properties": {"v": {"type": "dense_vector", "dims": 64, "element_type": "bfloat16"}}}}
    status, body = cluster.handle("PUT", "ix", "", mapping, {})
    assert (status == 200) is ok, body
    if ok:
        options = cluster.indices["ix"].mapping.fields["v"].params.get("index_options")
        assert options and options["type"] == "int8_hnsw"  # bfloat16 takes float's defaults (PR #145202)
    else:
        assert "available types are [float, byte, bit]" in body["error"]["reason"]
