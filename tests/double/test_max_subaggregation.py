"""The double's ``max`` sub-aggregation of a composite (what ``es-rag sources`` sends for a PDF's page count),
against Elasticsearch's REST test ``rest-api-spec/.../test/search.aggregation/110_max_metric.yml``: the value of an
integer field is a double ("Basic test": ``value: 151.0``), a field no document has gives a null value ("Missing
field without missing param": ``is_false: aggregations.the_missing_max.value``), and a keyword field is a bad
request ("Aggregating wrong datatype test": ``catch: bad_request``)."""

from __future__ import annotations

from typing import Any

from tests.support.double.cluster import StrictCluster


def _cluster() -> StrictCluster:
    cluster = StrictCluster()
    mappings = {"properties": {"sid": {"type": "keyword"}, "int_field": {"type": "integer"}, "kw": {"type": "keyword"}}}
    status, body = cluster.handle("PUT", "test_1", "", {"mappings": mappings}, {})
    assert status == 200, body
    for i, (sid, value) in enumerate([("a", 1), ("a", 151), ("b", None), ("b", None), ("c", 51)]):
        doc: dict[str, Any] = {"sid": sid, "kw": "foo"}
        if value is not None:
            doc["int_field"] = value
        status, body = cluster.handle("PUT", f"test_1/_doc/{i}", "refresh=true", doc, {})
        assert status in (200, 201), body
    return cluster


def _search(cluster: StrictCluster, field: str) -> tuple[int, Any]:
    aggs = {
        "s": {
            "composite": {"sources": [{"sid": {"terms": {"field": "sid"}}}]},
            "aggs": {"m": {"max": {"field": field}}},
        }
    }
    return cluster.handle("POST", "test_1/_search", "", {"size": 0, "aggs": aggs}, {})


def test_max_per_bucket_is_a_double_and_null_where_no_document_has_the_field() -> None:
    status, body = _search(_cluster(), "int_field")
    assert status == 200, body
    got = {b["key"]["sid"]: b["m"]["value"] for b in body["aggregations"]["s"]["buckets"]}
    assert got == {"a": 151.0, "b": None, "c": 51.0} and isinstance(got["a"], float)


def test_an_unmapped_field_gives_null_and_a_keyword_field_is_a_bad_request() -> None:
    cluster = _cluster()
    status, body = _search(cluster, "foo")
    assert status == 200 and all(b["m"]["value"] is None for b in body["aggregations"]["s"]["buckets"])
    status, body = _search(cluster, "kw")
    assert status == 400 and "is not supported for aggregation [max]" in str(body)
