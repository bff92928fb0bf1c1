"""The strict double's aliases refuse what Elasticsearch refuses (issue 19 item 8: blue-green swaps). Each test names
the Elasticsearch source or REST YAML test (``rest-api-spec/src/yamlRestTest/resources/rest-api-spec/test/
indices.update_aliases/*.yml``) that defines the rule; a refused ``POST _aliases`` applies none of its actions.

Replayed with ``ES_YAML_TESTS`` (``tests/double/test_yaml_runner.py``), ``30_remove_index_and_replace_with_alias.yml``
and ``40_must_exist.yml`` pass on the double (6 cases), except "Single result per input action", skipped as a double
limit (wildcards in alias actions)."""

from __future__ import annotations

from typing import Any

from tests.support.double.cluster import StrictCluster


def call(cl: StrictCluster, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return cl.handle(method, path, "", body, {})


def aliases(cl: StrictCluster, *actions: dict[str, Any]) -> tuple[int, Any]:
    return call(cl, "POST", "_aliases", {"actions": list(actions)})


def cluster(*indices: str) -> StrictCluster:
    cl = StrictCluster()
    for name in indices:
        assert call(cl, "PUT", name, {})[0] == 200
    return cl


def error(resp: tuple[int, Any]) -> tuple[int, str, str]:
    return resp[0], resp[1]["error"]["type"], resp[1]["error"]["reason"]


def test_remove_with_must_exist_of_a_missing_alias_fails_whole() -> None:
    """``40_must_exist.yml`` "Remove alias with must_exist": catch ``missing`` (404), and the ``add`` of test_alias3
    in the same request is not applied."""
    cl = cluster("test_index")
    assert aliases(cl, {"add": {"index": "test_index", "aliases": "test_alias1"}}) == (
        200,
        {"acknowledged": True, "errors": False},
    )
    swap = ({"remove": {"index": "test_index", "alias": "test_alias1", "must_exist": True}},)
    assert aliases(cl, *swap, {"add": {"index": "test_index", "alias": "test_alias2"}})[0] == 200
    assert call(cl, "HEAD", "test_alias1")[0] == 404 and call(cl, "HEAD", "test_alias2")[0] == 200
    assert call(cl, "HEAD", "_alias/test_alias1")[0] == 404 and call(cl, "HEAD", "_alias/test_alias2")[0] == 200
    assert call(cl, "GET", "_alias/test_alias1") == (404, {"error": "alias [test_alias1] missing", "status": 404})
    assert call(cl, "GET", "_alias/test_alias2") == (200, {"test_index": {"aliases": {"test_alias2": {}}}})
    refused = aliases(cl, *swap, {"add": {"index": "test_index", "alias": "test_alias3"}})
    assert error(refused) == (404, "aliases_not_found_exception", "aliases [test_alias1] missing")
    assert "test_alias3" not in cl.aliases


def test_remove_without_must_exist_is_a_partial_success() -> None:
    """``40_must_exist.yml`` "Partial success with must_exist == null (default)" (8.14+): ``errors: true``, the
    failed action 404 ``aliases_not_found_exception`` in ``action_results``, the others applied."""
    cl = cluster("test_index")
    status, body = aliases(
        cl,
        {"add": {"index": "test_index", "aliases": "test_alias1"}},
        {"remove": {"index": "test_index", "aliases": "test_non_existing"}},
    )
    assert status == 200 and body["errors"] is True
    assert body["action_results"][0]["status"] == 200
    assert body["action_results"][1]["status"] == 404
    assert body["action_results"][1]["action"] == {
        "type": "remove",
        "indices": ["test_index"],
        "aliases": ["test_non_existing"],
    }
    assert body["action_results"][1]["error"]["type"] == "aliases_not_found_exception"
    assert "test_alias1" in cl.aliases


def test_must_exist_only_on_remove() -> None:
    """``40_must_exist.yml`` "Alias must_exist only on remove": ``add`` and ``remove_index`` with ``must_exist`` are
    a bad request."""
    cl = cluster("test_index")
    assert aliases(cl, {"add": {"index": "test_index", "aliases": "a", "must_exist": True}})[0] == 400
    assert aliases(cl, {"remove_index": {"index": "test_index", "must_exist": True}})[0] == 400
    assert cl.aliases == {} and "test_index" in cl.indices


def test_an_alias_cannot_take_an_existing_index_name() -> None:
    """``AliasValidator.validateAlias``: ``Invalid alias name [x]: an index or data stream exists with the same name
    as the alias`` (400 ``invalid_alias_name_exception``); the concrete-to-alias migration therefore needs
    ``remove_index`` in the same request (``30_remove_index_and_replace_with_alias.yml``)."""
    cl = cluster("test", "test_2")
    refused = aliases(cl, {"add": {"index": "test_2", "alias": "test"}})
    assert error(refused) == (
        400,
        "invalid_alias_name_exception",
        "Invalid alias name [test]: an index or data stream exists with the same name as the alias",
    )
    ok = aliases(
        cl, {"add": {"index": "test_2", "aliases": ["test", "test_write"]}}, {"remove_index": {"index": "test"}}
    )
    assert ok[0] == 200
    assert sorted(cl.indices) == ["test_2"] and cl.aliases["test"] == {"test_2": {}}
    # indices.get on the alias answers with the index it points to
    assert list(call(cl, "GET", "test")[1]) == ["test_2"]


def test_an_index_cannot_take_an_alias_name() -> None:
    """``MetadataCreateIndexService.validateIndexOrAliasName``: ``Invalid index name [x], already exists as alias``."""
    cl = cluster("a")
    aliases(cl, {"add": {"index": "a", "alias": "b"}})
    assert error(call(cl, "PUT", "b", {}))[:2] == (400, "invalid_index_name_exception")


def test_remove_index_and_delete_refuse_an_alias() -> None:
    """``IndexNameExpressionResolver``: ``The provided expression [x] matches an alias, specify the corresponding
    concrete indices instead.`` -- for ``remove_index`` and for ``DELETE /<alias>``; nothing is deleted."""
    cl = cluster("a")
    aliases(cl, {"add": {"index": "a", "alias": "b"}})
    for resp in (aliases(cl, {"remove_index": {"index": "b"}}), call(cl, "DELETE", "b")):
        assert error(resp) == (
            400,
            "illegal_argument_exception",
            "The provided expression [b] matches an alias, specify the corresponding concrete indices instead.",
        )
    assert "a" in cl.indices and cl.aliases == {"b": {"a": {}}}


def test_missing_index_in_an_action() -> None:
    """``index_not_found_exception`` (404) for an action on an index that does not exist; nothing applied."""
    cl = cluster("a")
    resp = aliases(cl, {"add": {"index": "a", "alias": "x"}}, {"add": {"index": "nope", "alias": "y"}})
    assert error(resp)[:2] == (404, "index_not_found_exception") and cl.aliases == {}


def test_writes_through_an_alias_need_one_write_index() -> None:
    """``IndexNameExpressionResolver``: an alias over one index writes to it; over several without
    ``is_write_index: true`` a write is refused ("no write index is defined for alias"); two write indices are an
    error (``IndexAbstraction.Alias``: "has more than one write index")."""
    cl = cluster("one", "two")
    aliases(cl, {"add": {"index": "one", "alias": "w"}})
    assert call(cl, "PUT", "w/_doc/1", {"f": "x"})[1]["_index"] == "one"
    aliases(cl, {"add": {"index": "two", "alias": "w"}})
    refused = call(cl, "PUT", "w/_doc/2", {"f": "y"})
    assert refused[0] == 400 and "no write index is defined for alias [w]" in refused[1]["error"]["reason"]
    both = aliases(
        cl,
        {"add": {"index": "one", "alias": "w", "is_write_index": True}},
        {"add": {"index": "two", "alias": "w", "is_write_index": True}},
    )
    assert error(both) == (400, "illegal_state_exception", "alias [w] has more than one write index [one,two]")
    aliases(cl, {"add": {"index": "two", "alias": "w", "is_write_index": True}})
    assert call(cl, "PUT", "w/_doc/3", {"f": "z"})[1]["_index"] == "two"


def test_reads_resolve_aliases_and_wildcards() -> None:
    """A search, count, refresh or document GET through an alias reaches the index behind it; ``GET <expr>/_alias``
    lists every index the expression reaches with its aliases (``{}`` when none)."""
    cl = cluster("g1", "g2")
    aliases(cl, {"add": {"index": "g2", "alias": "live", "is_write_index": True}})
    call(cl, "PUT", "live/_doc/1", {"f": "x"})
    call(cl, "POST", "live/_refresh")
    assert call(cl, "GET", "live/_doc/1")[1]["_index"] == "g2"
    assert call(cl, "POST", "live/_count", {})[1]["count"] == 1
    assert call(cl, "GET", "g*/_alias")[1] == {
        "g1": {"aliases": {}},
        "g2": {"aliases": {"live": {"is_write_index": True}}},
    }


def test_terms_and_missing_aggregations() -> None:
    """``TermsAggregationBuilder`` (buckets by count, then key; ``_index`` is aggregatable) and
    ``MissingAggregationBuilder`` (documents without the field): what the embedding check sends."""
    cl = StrictCluster()
    for name in ("a", "b"):
        call(cl, "PUT", name, {"mappings": {"properties": {"v": {"type": "keyword"}}}})
    for index, doc_id, version in (("a", "1", "m1"), ("a", "2", "m1"), ("b", "3", "m2"), ("b", "4", None)):
        call(cl, "PUT", f"{index}/_doc/{doc_id}", {} if version is None else {"v": version})
    call(cl, "POST", "_refresh")
    body = {
        "size": 0,
        "aggs": {
            "versions": {"terms": {"field": "v", "size": 10}},
            "none": {"missing": {"field": "v"}},
            "indices": {"terms": {"field": "_index"}},
        },
    }
    aggs = call(cl, "POST", "a,b/_search", body)[1]["aggregations"]
    assert aggs["versions"]["buckets"] == [{"key": "m1", "doc_count": 2}, {"key": "m2", "doc_count": 1}]
    assert aggs["none"] == {"doc_count": 1}
    assert aggs["indices"]["buckets"] == [{"key": "a", "doc_count": 2}, {"key": "b", "doc_count": 2}]
