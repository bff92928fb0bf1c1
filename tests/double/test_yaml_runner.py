"""The YAML replay runner (``tests/support/double/yaml_runner.py``) on small cases written here, and the replay of
Elasticsearch's own REST YAML tests when ``ES_YAML_TESTS`` points at a folder holding them (they are not part of
this repository: ``scripts/replay-es-yaml.py`` documents how they are laid out)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.double.cluster import StrictCluster
from tests.support.double.yaml_runner import (
    CHANGES,
    KNOWN_FAILURES,
    CaseResult,
    case_key,
    choose_version,
    failure_site,
    run_file,
    run_tree,
    split_path,
)


def run_yaml(tmp_path: Path, text: str, name: str = "suite/01_cases.yml") -> dict[str, CaseResult]:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return {c.name: c for c in run_file(path).cases}


SETUP = """
setup:
  - do:
      indices.create:
        index: books
        body:
          mappings:
            properties:
              title: { type: text }
              tag: { type: keyword }
              pages: { type: integer }
  - do:
      bulk:
        refresh: true
        index: books
        body:
          - '{"index": {"_id": "a"}}'
          - '{"title": "red fox", "tag": "animal", "pages": 10}'
          - '{"index": {"_id": "b"}}'
          - '{"title": "blue sky", "tag": "nature", "pages": 20}'
"""


def test_do_match_length_set_and_assertions_pass(tmp_path: Path) -> None:
    results = run_yaml(
        tmp_path,
        SETUP
        + """
---
"searching":
  - do:
      search:
        index: books
        body: { query: { term: { tag: animal } } }
  - match: { hits.total.value: 1 }
  - match: { hits.hits.0._id: "a" }
  - match: { hits.hits.0._id: "/^[a-z]$/" }
  - length: { hits.hits: 1 }
  - set: { hits.hits.0._id: first }
  - is_true: hits.hits.0._source.title
  - is_false: hits.hits.0._source.missing
  - exists: hits.hits.0._source.pages
  - not_exists: hits.hits.0._source.nope
  - gt: { hits.hits.0._source.pages: 5 }
  - lte: { hits.hits.0._source.pages: 10 }
  - close_to: { hits.hits.0._source.pages: { value: 10.001, error: 0.01 } }
  - contains: { hits.hits: { _id: "a" } }
  - do:
      get:
        index: books
        id: $first
  - match: { _source.tag: animal }
  - match: { _id: "${first}" }
""",
    )
    assert results["searching"].outcome == "PASS", results["searching"]


def test_catch_values(tmp_path: Path) -> None:
    results = run_yaml(
        tmp_path,
        SETUP
        + """
---
"errors are caught":
  - do:
      catch: missing
      get:
        index: books
        id: nope
  - do:
      catch: bad_request
      search:
        index: books
        body: { query: { no_such_query: {} } }
  - match: { error.type: parsing_exception }
  - do:
      catch: /unknown query \\[no_such_query\\]/
      search:
        index: books
        body: { query: { no_such_query: {} } }
  - do:
      catch: conflict
      create:
        index: books
        id: a
        body: { tag: again }
  - do:
      ingest.delete_pipeline:
        id: absent
        ignore: 404
---
"a catch that does not happen fails":
  - do:
      catch: missing
      get:
        index: books
        id: a
---
"request is any other error":
  - do:
      catch: request
      search:
        index: books
        body: { query: { no_such_query: {} } }
""",
    )
    assert results["errors are caught"].outcome == "PASS", results["errors are caught"]
    failed = results["a catch that does not happen fails"]
    assert failed.outcome == "FAIL" and "expected catch [missing] but got 200" in failed.detail
    assert failure_site(failed.detail) == "test step 1 (do) get"
    # ``request`` excludes 400 (bad_request has its own catch), as the Java runner's table does
    assert results["request is any other error"].outcome == "FAIL"


def test_a_wrong_match_fails_at_its_step(tmp_path: Path) -> None:
    results = run_yaml(
        tmp_path,
        SETUP
        + """
---
"wrong count":
  - do:
      count:
        index: books
  - match: { count: 3 }
""",
    )
    case = results["wrong count"]
    assert case.outcome == "FAIL"
    assert failure_site(case.detail) == "test step 2 (match) [count]"
    assert "expected 3 but was 2" in case.detail


def test_skip_and_requires_sections(tmp_path: Path) -> None:
    results = run_yaml(
        tmp_path,
        """
---
"old versions only":
  - skip:
      version: "8.0.0 - "
      reason: not on a modern cluster
  - do:
      info: {}
---
"needs a feature the double lacks":
  - requires:
      cluster_features: [ "some.unknown_feature" ]
      reason: new
  - do:
      info: {}
---
"needs a runner feature":
  - requires:
      test_runner_features: [ capabilities ]
      capabilities:
        - method: GET
          path: /_search
          capabilities: [ x ]
      reason: cap
  - do:
      info: {}
---
"runs on 9.1":
  - requires:
      cluster_features: [ "linear_retriever.l2_norm" ]
      reason: l2
  - skip:
      version: "9.2.0 - "
      reason: before 9.2
  - do:
      info: {}
  - match: { version.number: "9.1.0" }
""",
    )
    assert results["old versions only"].outcome == "SKIP"
    assert results["old versions only"].reason == "skip version [8.0.0 -]"
    assert results["needs a feature the double lacks"].reason == "unknown cluster feature some.unknown_feature"
    assert results["needs a runner feature"].reason == "runner feature capabilities not supported"
    assert results["runs on 9.1"].outcome == "PASS", results["runs on 9.1"]
    assert results["runs on 9.1"].version == "9.1.0"


def test_version_choice() -> None:
    assert choose_version([]) == "9.5.0"
    assert choose_version([("requires", {"cluster_features": "gte_v8.15.0"})]) == "9.5.0"
    assert choose_version([("skip", {"version": " - 9.0.99"})]) == "9.5.0"
    assert choose_version([("skip", {"version": "9.0.0 - "})]) == "8.18.0"
    assert choose_version([("requires", {"cluster_features": ["rrf_retriever.weighted_support"]})]) == "9.5.0"


def test_double_limits_and_unrouted_apis_skip(tmp_path: Path) -> None:
    results = run_yaml(
        tmp_path,
        SETUP
        + """
---
"an option the double does not implement":
  - do:
      search:
        index: books
        body: { query: { match_all: {} }, collapse: { field: tag } }
---
"an api the double does not route":
  - do:
      cluster.health: {}
""",
    )
    limit = results["an option the double does not implement"]
    assert limit.outcome == "SKIP" and limit.reason == "double limit: the [collapse] search option"
    assert results["an api the double does not route"].reason == "api cluster.health not supported by the double"


def test_teardown_runs_and_a_body_may_be_a_json_string(tmp_path: Path) -> None:
    results = run_yaml(
        tmp_path,
        """
---
teardown:
  - do:
      ingest.delete_pipeline:
        id: p
---
"pipeline":
  - do:
      ingest.put_pipeline:
        id: p
        body: >
          { "processors": [ { "set": { "field": "x", "value": "{{y}}" } } ] }
  - match: { acknowledged: true }
  - do:
      index:
        index: docs
        id: "1"
        pipeline: p
        body: { y: "z" }
  - do:
      get:
        index: docs
        id: "1"
  - match: { _source.x: z }
---
"teardown fails when the pipeline is missing":
  - do:
      info: {}
""",
    )
    assert results["pipeline"].outcome == "PASS", results["pipeline"]
    missing = results["teardown fails when the pipeline is missing"]
    assert missing.outcome == "FAIL" and missing.detail.startswith("teardown step 1 (do)")


def test_escaped_dots_in_paths(tmp_path: Path) -> None:
    assert split_path(r"_source.a\.b.0") == ["_source", "a.b", "0"]
    results = run_yaml(
        tmp_path,
        """
---
"dotted key":
  - do:
      indices.create:
        index: docs
        body: { mappings: { properties: { "a.b": { type: keyword } } } }
  - do:
      index:
        index: docs
        id: "1"
        refresh: true
        body: { "a.b": 1 }
  - do:
      search:
        index: docs
        body: { query: { match_all: {} } }
  - match: { hits.hits.0._source.a\\.b: 1 }
""",
    )
    assert results["dotted key"].outcome == "PASS", results["dotted key"]


def test_licence_tests_run_on_a_basic_licence(tmp_path: Path) -> None:
    text = """
---
"licence":
  - do:
      license.get: {}
  - match: { license.type: basic }
"""
    results = run_yaml(tmp_path, text, name="x-pack/plugin/rank-rrf/src/yamlRestTest/test/license/01_licence.yml")
    assert results["licence"].outcome == "PASS", results["licence"]
    assert run_yaml(tmp_path, text)["licence"].outcome == "FAIL"  # elsewhere: trial


def test_known_failures_name_documented_changes() -> None:
    for (key, case), ids in KNOWN_FAILURES.items():
        assert key.count("/") == 1 and key.endswith(".yml"), key
        assert case and ids and all(i in CHANGES for i in ids), (key, case)


@pytest.mark.skipif(
    not os.environ.get("ES_YAML_TESTS"),
    reason="set ES_YAML_TESTS to a folder holding Elasticsearch's REST YAML tests under their repository paths "
    "(see scripts/replay-es-yaml.py); they are not part of this repository",
)
def test_replay_elasticsearch_yaml_tests() -> None:
    """No case of Elasticsearch's own tests FAILs on the double except the documented ones
    (:data:`~tests.support.double.yaml_runner.KNOWN_FAILURES`, each naming the change it needs); a documented case that
    passes must leave the list."""
    root = Path(os.environ["ES_YAML_TESTS"])
    results = run_tree(root)
    assert results, f"no *.yml under {root}"
    cases = [(case_key(r.path), c) for r in results for c in r.cases]
    unexplained = [f"{key} :: {c.name}: {c.detail}" for key, c in cases if c.outcome == "FAIL" and (key, c.name)
                   not in KNOWN_FAILURES]  # fmt: skip
    assert not unexplained, "\n".join(unexplained)
    stale = [f"{key} :: {c.name}" for key, c in cases if c.outcome == "PASS" and (key, c.name) in KNOWN_FAILURES]
    assert not stale, "now passing, remove from KNOWN_FAILURES:\n" + "\n".join(stale)


# -- rules the replay added to the double (each proven by the Elasticsearch YAML case named) --------------------
def _call(cl: StrictCluster, method: str, path: str, body: Any = None, query: str = "") -> tuple[int, Any]:
    return cl.handle(method, path, query, body, {})


def test_search_rules_added_by_the_replay() -> None:
    """``fields``, ``constant_score``, ``term`` on analyzed text, the retriever total, the kNN similarity threshold
    and ``track_total_hits: false`` (rrf/300_rrf_retriever.yml, linear/10_linear_retriever.yml,
    search.vectors/40_knn_search.yml)."""
    cl = StrictCluster()
    mapping = {"properties": {"text": {"type": "text"}, "kw": {"type": "keyword"}, "v": {"type": "dense_vector",
               "dims": 1, "similarity": "l2_norm"}}}  # fmt: skip
    assert _call(cl, "PUT", "t", {"mappings": mapping})[0] == 200
    for i, (text, kw, v) in enumerate([("term term", "a", 0.0), ("other", "a", 1.0), ("term", "b", 2.0)], 1):
        _call(cl, "PUT", f"t/_doc/{i}", {"text": text, "kw": kw, "v": [v]}, "refresh=true")
    _, resp = _call(cl, "POST", "t/_search", {"query": {"term": {"text": "term"}}, "fields": ["kw", "text"]})
    assert [h["_id"] for h in resp["hits"]["hits"]] == ["1", "3"]  # BM25: tf 2 in a 2-term doc beats tf 1
    assert resp["hits"]["hits"][0]["fields"] == {"kw": ["a"], "text": ["term term"]}
    _, resp = _call(cl, "POST", "t/_search", {"query": {"constant_score": {"filter": {"term": {"kw": "a"}},
                    "boost": 3.0}}, "track_total_hits": False})  # fmt: skip
    assert {h["_score"] for h in resp["hits"]["hits"]} == {3.0} and "total" not in resp["hits"]
    knn = {"field": "v", "query_vector": [0.0], "k": 3, "num_candidates": 3, "similarity": 1.5}
    _, resp = _call(cl, "POST", "t/_search", {"knn": knn})
    assert [h["_id"] for h in resp["hits"]["hits"]] == ["1", "2"]  # l2 distance <= 1.5
    children = [
        {"standard": {"query": {"term": {"kw": "a"}}}},
        {"knn": {"field": "v", "query_vector": [2.0], "k": 1, "num_candidates": 1}},
    ]
    rrf = {"rrf": {"retrievers": children, "rank_window_size": 1}}
    _, resp = _call(cl, "POST", "t/_search", {"retriever": rrf, "size": 1})
    assert resp["hits"]["total"]["value"] == 3  # every child's matches count, not only the ranked window
    status, resp = _call(cl, "POST", "t/_search", {"query": {"function_score": {}}})
    assert status == 400 and resp["error"]["type"] == "strict_double_unsupported"


def test_mapping_and_ingest_rules_added_by_the_replay() -> None:
    """Dynamic mapping, ``index: true`` on dense_vector, registered types and settings as double limits
    (delete_by_query/10_basic.yml, search.vectors/80_dense_vector_indexed_by_default.yml,
    indices.put_index_template/15_composition.yml); empty ``on_failure`` and the ``bytes`` processor
    (ingest/50_on_failure.yml, ingest/210_conditional_processor.yml)."""
    cl = StrictCluster()
    _call(cl, "PUT", "d/_doc/1", {"user": "kimchy", "n": 3, "when": "2021-01-01T00:00:00Z", "o": {"b": True}})
    props = _call(cl, "GET", "d/_mapping")[1]["d"]["mappings"]["properties"]
    assert props["user"] == {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
    assert (props["n"], props["when"], props["o"]) == (
        {"type": "long"},
        {"type": "date"},
        {"properties": {"b": {"type": "boolean"}}},
    )
    _call(cl, "POST", "d/_refresh")
    assert _call(cl, "POST", "d/_count", {"query": {"match": {"user": "kimchy"}}})[1]["count"] == 1
    _call(cl, "PUT", "v", {"mappings": {"properties": {"x": {"type": "dense_vector", "dims": 3}}}})
    assert _call(cl, "GET", "v/_mapping")[1]["v"]["mappings"]["properties"]["x"]["index"] is True
    for body in ({"mappings": {"properties": {"n": {"type": "nested"}}}}, {"settings": {"index.mode": "time_series"}}):
        status, resp = _call(cl, "PUT", "w", body)
        assert status == 400 and resp["error"]["type"] == "strict_double_unsupported"
    assert _call(cl, "PUT", "w", {"settings": {"index.priority": 17}})[0] == 200
    status, resp = _call(cl, "PUT", "_ingest/pipeline/p", {"processors": [], "on_failure": []})
    assert status == 400 and resp["error"]["reason"] == "pipeline [p] cannot have an empty on_failure option defined"
    status, resp = _call(
        cl, "PUT", "_ingest/pipeline/p", {"processors": [{"fail": {"message": "m", "on_failure": []}}]}
    )
    assert status == 400 and resp["error"]["reason"] == "[on_failure] processors list cannot be empty"
    _call(cl, "PUT", "_ingest/pipeline/b", {"processors": [{"bytes": {"field": "s", "target_field": "n"}}]})
    _call(cl, "PUT", "e/_doc/1", {"s": "2kb"}, "pipeline=b")
    assert _call(cl, "GET", "e/_doc/1")[1]["_source"]["n"] == 2048
