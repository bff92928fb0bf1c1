"""Tests of the spec-conformance harness (tests.support.spec_check) with hand-written request bodies.

All positive cases are compiled in one tsc run and all negative (misspelt) cases in a second one; both
runs are module-scoped fixtures. Needs ``npm ci --prefix spec`` (the harness raises, it never skips).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.spec_check import (
    DEFAULT_SPEC_DIR,
    SpecCase,
    SpecToolchainError,
    TscResult,
    misspell_one_key,
    render_ts,
    run_tsc,
    to_typed,
)

INDEX = "rag-chunks"

# (a) native RRF retriever: standard (multi_match + filter list) and knn (with filter) children.
RRF_SEARCH: dict[str, Any] = {
    "retriever": {
        "rrf": {
            "retrievers": [
                {
                    "standard": {
                        "query": {
                            "multi_match": {
                                "query": "how do I rotate api keys",
                                "fields": ["title^2", "body"],
                                "type": "best_fields",
                            }
                        },
                        "filter": [
                            {"term": {"tenant_id": "acme"}},
                            {"terms": {"doc_type": ["guide", "faq"]}},
                        ],
                    }
                },
                {
                    "knn": {
                        "field": "embedding",
                        "query_vector": [0.12, -0.5, 0.33, 0.08],
                        "k": 50,
                        "num_candidates": 200,
                        "filter": [
                            {"term": {"tenant_id": "acme"}},
                            {"terms": {"doc_type": ["guide", "faq"]}},
                        ],
                    }
                },
            ],
            "rank_constant": 60,
            "rank_window_size": 100,
        }
    },
    "size": 20,
    "_source": ["chunk_id", "doc_id", "title", "body"],
}

# (b) _msearch: BM25 search (bool + filter) and a top-level knn search with filter.
MSEARCH: list[dict[str, Any]] = [
    {"index": INDEX},
    {
        "size": 50,
        "query": {
            "bool": {
                "must": [{"match": {"body": {"query": "rotate api keys"}}}],
                "filter": [{"term": {"tenant_id": "acme"}}, {"range": {"published": {"gte": "2024-01-01"}}}],
            }
        },
        "_source": False,
    },
    {"index": INDEX},
    {
        "size": 50,
        "knn": {
            "field": "embedding",
            "query_vector": [0.12, -0.5, 0.33, 0.08],
            "k": 50,
            "num_candidates": 200,
            "filter": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}]}},
        },
        "_source": False,
    },
]

# (c) ingest pipeline: set / fingerprint / fail with `if`, date + set of {{_ingest.timestamp}}.
PIPELINE: dict[str, Any] = {
    "description": "es_rag chunk lineage",
    "processors": [
        {"set": {"field": "lineage.source", "value": "{{{_index}}}", "override": False}},
        {
            "fingerprint": {
                "fields": ["doc_id", "chunk_index", "body"],
                "target_field": "lineage.chunk_hash",
                "method": "SHA-256",
                "if": "ctx.body != null",
            }
        },
        {"fail": {"message": "chunk without doc_id", "if": "ctx.doc_id == null"}},
        {"set": {"field": "lineage.ingested_at", "value": "{{_ingest.timestamp}}"}},
        {
            "date": {
                "field": "published",
                "formats": ["ISO8601", "yyyy-MM-dd"],
                "target_field": "published",
                "ignore_failure": True,
            }
        },
    ],
    "on_failure": [{"set": {"field": "lineage.error", "value": "{{_ingest.on_failure_message}}"}}],
    "_meta": {"managed_by": "es_rag", "version": 1},
}

# (d) composable index template with a dense_vector field.
INDEX_TEMPLATE: dict[str, Any] = {
    "index_patterns": ["rag-chunks-*"],
    "composed_of": ["rag-settings", "rag-lineage"],
    "priority": 200,
    "_meta": {"managed_by": "es_rag"},
    "template": {
        "settings": {"number_of_shards": 1, "index": {"default_pipeline": "rag-chunks"}},
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "chunk_id": {"type": "keyword"},
                "tenant_id": {"type": "keyword"},
                "title": {"type": "text", "fields": {"raw": {"type": "keyword", "ignore_above": 256}}},
                "body": {"type": "text", "analyzer": "english"},
                "embedding": {
                    "type": "dense_vector",
                    "dims": 384,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {"type": "int8_hnsw", "m": 16, "ef_construction": 100},
                },
            },
        },
    },
}

# Valid bodies for the remaining routes (checks that to_typed's shapes match the installed types).
EXTRA_VALID: list[SpecCase] = [
    SpecCase(
        "component template",
        "PUT",
        "/_component_template/rag-lineage",
        {"template": {"mappings": {"properties": {"lineage": {"type": "object"}}}}, "version": 3},
    ),
    SpecCase(
        "simulate pipeline",
        "POST",
        "/_ingest/pipeline/rag-chunks/_simulate?verbose=true",
        {"docs": [{"_index": INDEX, "_id": "1", "_source": {"doc_id": "d1", "body": "x"}}]},
    ),
    SpecCase(
        "stored search template",
        "PUT",
        "/_scripts/rag-bm25",
        {"script": {"lang": "mustache", "source": {"query": {"match": {"body": "{{q}}"}}, "size": 10}}},
    ),
    SpecCase(
        "stored search template (string source)",
        "PUT",
        "/_scripts/rag-bm25-k",
        {"script": {"lang": "mustache", "source": '{"query": {"match": {"body": "{{q}}"}}, "size": {{k}}}'}},
    ),
    SpecCase(
        "search template (index)",
        "POST",
        f"/{INDEX}/_search/template",
        {"id": "rag-bm25", "params": {"q": "x"}},
    ),
    SpecCase("search template (no index)", "GET", "/_search/template", {"id": "rag-bm25", "params": {"k": 5}}),
    SpecCase("delete by query", "POST", f"/{INDEX}/_delete_by_query", {"query": {"term": {"doc_id": "d1"}}}),
    SpecCase(
        "aliases",
        "POST",
        "/_aliases",
        {
            "actions": [
                {"remove": {"index": "*", "alias": "rag"}},
                {"add": {"index": "rag-chunks-2", "alias": "rag"}},
            ]
        },
    ),
    SpecCase(
        "create index",
        "PUT",
        "/rag-chunks-2",
        {"settings": {"number_of_replicas": 0}, "aliases": {"rag": {}}},
    ),
    SpecCase("count", "POST", f"/{INDEX}/_count", {"query": {"term": {"tenant_id": "acme"}}}),
    SpecCase(
        "weighted rrf + linear",
        "POST",
        f"/{INDEX}/_search",
        {
            "retriever": {
                "rrf": {
                    "retrievers": [
                        {"retriever": {"standard": {"query": {"match": {"body": "x"}}}}, "weight": 2.0},
                        {"knn": {"field": "embedding", "query_vector": [0.1, 0.2], "k": 5}},
                        {
                            "linear": {
                                "retrievers": [
                                    {
                                        "retriever": {"standard": {"query": {"match_all": {}}}},
                                        "weight": 0.3,
                                        "normalizer": "minmax",
                                    }
                                ],
                                "rank_window_size": 50,
                            }
                        },
                    ]
                }
            }
        },
    ),
]

VALID: list[SpecCase] = [
    SpecCase("(a) rrf search", "POST", f"/{INDEX}/_search", RRF_SEARCH),
    SpecCase("(b) msearch", "POST", f"/{INDEX}/_msearch", MSEARCH),
    SpecCase("(c) ingest pipeline", "PUT", "/_ingest/pipeline/rag-chunks", PIPELINE),
    SpecCase("(d) index template", "PUT", "/_index_template/rag-chunks", INDEX_TEMPLATE),
    *EXTRA_VALID,
    SpecCase("cluster info", "GET", "/"),
    SpecCase("license", "GET", "/_license"),
]
BODYLESS = {"cluster info", "license"}

# (e) one misspelt key deep in each body: (case name, base case, path of keys).
MISSPELLINGS: list[tuple[str, SpecCase, list[str | int]]] = [
    ("(a) knn num_candidates", VALID[0], ["retriever", "rrf", "retrievers", 1, "knn", "num_candidates"]),
    ("(a) rrf rank_constant", VALID[0], ["retriever", "rrf", "rank_constant"]),
    ("(a) standard filter", VALID[0], ["retriever", "rrf", "retrievers", 0, "standard", "filter"]),
    (
        "(a) terms in filter list",
        VALID[0],
        ["retriever", "rrf", "retrievers", 0, "standard", "filter", 1, "terms"],
    ),
    ("(a) knn filter", VALID[0], ["retriever", "rrf", "retrievers", 1, "knn", "filter"]),
    ("(b) bool filter", VALID[1], [1, "query", "bool", "filter"]),
    ("(b) knn num_candidates", VALID[1], [3, "knn", "num_candidates"]),
    ("(c) fingerprint processor", VALID[2], ["processors", 1, "fingerprint"]),
    ("(c) fail if", VALID[2], ["processors", 2, "fail", "if"]),
    ("(c) date formats", VALID[2], ["processors", 4, "date", "formats"]),
    (
        "(d) dense_vector similarity",
        VALID[3],
        ["template", "mappings", "properties", "embedding", "similarity"],
    ),
    (
        "(d) index_options type",
        VALID[3],
        ["template", "mappings", "properties", "embedding", "index_options", "type"],
    ),
    ("(d) composed_of", VALID[3], ["composed_of"]),
]


def _misspelt_case(name: str, base: SpecCase, path: list[str | int]) -> SpecCase:
    return SpecCase(f"misspelt {name}", base.method, base.path, misspell_one_key(base.body, path))


MISSPELT: list[SpecCase] = [_misspelt_case(*m) for m in MISSPELLINGS]
WRONG_VALUE = SpecCase("wrong value type", "POST", f"/{INDEX}/_search", {"size": "twenty", "query": {"match_all": {}}})


@pytest.fixture(scope="module")
def valid_run() -> TscResult:
    return run_tsc(VALID)


@pytest.fixture(scope="module")
def invalid_run() -> TscResult:
    return run_tsc([*MISSPELT, WRONG_VALUE])


# ---------------------------------------------------------------- tsc runs


def test_valid_bodies_pass(valid_run: TscResult) -> None:
    assert valid_run.ok, "\n".join(valid_run.errors)
    assert valid_run.errors == []
    assert valid_run.returncode == 0
    assert set(valid_run.skipped) == BODYLESS


@pytest.mark.parametrize("case", [c for c in VALID if c.name not in BODYLESS], ids=lambda c: c.name)
def test_each_valid_case_is_compiled(valid_run: TscResult, case: SpecCase) -> None:
    assert f"// case: {case.name} | {case.method} {case.path}" in valid_run.source


def test_invalid_run_fails(invalid_run: TscResult) -> None:
    assert not invalid_run.ok
    assert invalid_run.returncode != 0
    assert "<harness>" not in invalid_run.errors_by_case, invalid_run.errors_by_case.get("<harness>")
    assert set(invalid_run.errors_by_case) == {c.name for c in [*MISSPELT, WRONG_VALUE]}


@pytest.mark.parametrize(("name", "base", "path"), MISSPELLINGS, ids=[m[0] for m in MISSPELLINGS])
def test_misspelling_is_caught_and_attributed(
    invalid_run: TscResult, name: str, base: SpecCase, path: list[str | int]
) -> None:
    case_name = f"misspelt {name}"
    errors = invalid_run.errors_by_case.get(case_name, [])
    assert errors, f"no tsc error for {case_name}; all errors:\n" + "\n".join(invalid_run.errors)
    wrong_key = next(k for k in misspell_one_key({path[-1]: 0}, [path[-1]]))
    assert any(wrong_key in e for e in errors), f"error does not name {wrong_key!r}:\n" + "\n".join(errors)
    assert all(e.startswith(f"{case_name} [{base.method} {base.path}]") for e in errors)


def test_wrong_value_type_is_caught(invalid_run: TscResult) -> None:
    errors = invalid_run.errors_by_case[WRONG_VALUE.name]
    assert any("TS2322" in e and "size" in e for e in errors), errors


# ---------------------------------------------------------------- routing (no tsc)


@pytest.mark.parametrize(
    ("method", "path", "body", "type_name", "expected"),
    [
        (
            "PUT",
            "/_component_template/ct",
            {"template": {}},
            "ClusterPutComponentTemplateRequest",
            {"name": "ct", "template": {}},
        ),
        (
            "PUT",
            "_index_template/it",
            {"priority": 1},
            "IndicesPutIndexTemplateRequest",
            {"name": "it", "priority": 1},
        ),
        (
            "PUT",
            "/_ingest/pipeline/p1",
            {"processors": []},
            "IngestPutPipelineRequest",
            {"id": "p1", "processors": []},
        ),
        (
            "POST",
            "/_ingest/pipeline/p1/_simulate",
            {"docs": []},
            "IngestSimulateRequest",
            {"id": "p1", "docs": []},
        ),
        ("POST", "/_ingest/pipeline/_simulate", {"docs": []}, "IngestSimulateRequest", {"docs": []}),
        ("PUT", "/_scripts/s1", {"script": {}}, "PutScriptRequest", {"id": "s1", "script": {}}),
        ("POST", "/_search/template", {"id": "s1"}, "SearchTemplateRequest", {"id": "s1"}),
        ("GET", "/ix/_search/template", {"id": "s1"}, "SearchTemplateRequest", {"index": "ix", "id": "s1"}),
        ("POST", "/ix/_search?typed_keys=true", {"size": 1}, "SearchRequest", {"index": "ix", "size": 1}),
        ("GET", "/a,b/_search", {"size": 1}, "SearchRequest", {"index": "a,b", "size": 1}),
        (
            "POST",
            "/ix/_msearch",
            [{}, {"size": 1}],
            "MsearchRequest",
            {"index": "ix", "searches": [{}, {"size": 1}]},
        ),
        ("POST", "/ix/_delete_by_query", {"query": {}}, "DeleteByQueryRequest", {"index": "ix", "query": {}}),
        ("POST", "/_aliases", {"actions": []}, "IndicesUpdateAliasesRequest", {"actions": []}),
        ("PUT", "/ix", {"mappings": {}}, "IndicesCreateRequest", {"index": "ix", "mappings": {}}),
        ("POST", "/ix/_count", {"query": {}}, "CountRequest", {"index": "ix", "query": {}}),
        (
            "PUT",
            "/ix/_settings",
            {"index": {}},
            "IndicesPutSettingsRequest",
            {"index": "ix", "settings": {"index": {}}},
        ),
    ],
)
def test_to_typed_routes(method: str, path: str, body: Any, type_name: str, expected: dict[str, Any]) -> None:
    assert to_typed(SpecCase("r", method, path, body)) == (type_name, expected)


@pytest.mark.parametrize("path", ["/", "/_license", "/_cluster/health", "/ix"])
def test_bodyless_get_is_not_typed(path: str) -> None:
    assert to_typed(SpecCase("g", "GET", path)) is None


@pytest.mark.parametrize(
    ("method", "path", "body", "match"),
    [
        ("POST", "/_cluster/reroute", {}, r"POST /_cluster/reroute"),
        ("GET", "/_license", {"x": 1}, r"GET /_license"),
        ("PUT", "/ix/_search", {"size": 1}, r"not for method PUT"),
        ("POST", "/_ingest/pipeline/p1", {"processors": []}, r"not for method POST"),
        ("POST", "/ix/_search", {"index": "other"}, r"collide with path parameter"),
        ("POST", "/ix/_msearch", {"size": 1}, r"must be a list"),
        ("POST", "/ix/_search", [{"size": 1}], r"must be a JSON object"),
    ],
)
def test_to_typed_rejects(method: str, path: str, body: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        to_typed(SpecCase("bad", method, path, body))


def test_unknown_route_is_not_skipped_by_run_tsc() -> None:
    with pytest.raises(ValueError, match=r"_cluster/reroute"):
        run_tsc([VALID[0], SpecCase("reroute", "POST", "/_cluster/reroute", {"commands": []})])


# ---------------------------------------------------------------- rendering


def test_render_ts_layout() -> None:
    src = render_ts([VALID[0], SpecCase("x/y 1", "POST", "/ix/_count", {"query": {"match_all": {}}}), VALID[-1]])
    lines = src.splitlines()
    assert "import type * as T from '@elastic/elasticsearch/lib/api/types'" in lines
    assert f"// case: (a) rrf search | POST /{INDEX}/_search" in lines
    assert "export const case_a_rrf_search: T.SearchRequest = {" in lines
    assert "// case: x/y 1 | POST /ix/_count" in lines
    assert "export const case_x_y_1: T.CountRequest = {" in lines
    assert "license" not in src  # bodyless GET left out
    # the literal is the JSON of the merged object
    start = lines.index("export const case_x_y_1: T.CountRequest = {")
    end = next(i for i in range(start, len(lines)) if lines[i] == "};")
    literal = "\n".join(lines[start : end + 1]).split(" = ", 1)[1].rstrip(";")
    assert json.loads(literal) == {"index": "ix", "query": {"match_all": {}}}


def test_render_ts_rejects_duplicate_names_and_non_json() -> None:
    with pytest.raises(ValueError, match="duplicate case name"):
        render_ts([VALID[0], VALID[0]])
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        render_ts([SpecCase("nan", "POST", "/ix/_search", {"min_score": float("nan")})])


def test_identifiers_are_unique() -> None:
    src = render_ts([SpecCase("a-b", "POST", "/ix/_count", {}), SpecCase("a b", "POST", "/ix/_count", {})])
    assert "export const case_a_b: T.CountRequest" in src
    assert "export const case_a_b_2: T.CountRequest" in src


# ---------------------------------------------------------------- misspell_one_key


def test_misspell_one_key_renames_exactly_one_key_in_place() -> None:
    out = misspell_one_key(RRF_SEARCH, ["retriever", "rrf", "retrievers", 1, "knn", "num_candidates"])
    knn = out["retriever"]["rrf"]["retrievers"][1]["knn"]
    assert list(knn) == ["field", "query_vector", "k", "num_candidats", "filter"]
    assert RRF_SEARCH["retriever"]["rrf"]["retrievers"][1]["knn"]["num_candidates"] == 200  # input untouched
    assert out["retriever"]["rrf"]["retrievers"][0] == RRF_SEARCH["retriever"]["rrf"]["retrievers"][0]


@pytest.mark.parametrize(
    ("key", "wrong"),
    [
        ("rank_constant", "rank_constnt"),
        ("similarity", "similarty"),
        ("fingerprint", "fingerprnt"),
        ("k", "kx"),
    ],
)
def test_default_misspellings(key: str, wrong: str) -> None:
    assert misspell_one_key({key: 1}, [key]) == {wrong: 1}


def test_misspell_one_key_explicit_and_errors() -> None:
    assert misspell_one_key([{"a": {"b": 1}}], [0, "a", "b"], new_key="bb") == [{"a": {"bb": 1}}]
    with pytest.raises(ValueError, match="not found"):
        misspell_one_key({"a": {}}, ["x", "b"])
    with pytest.raises(ValueError, match="out of range"):
        misspell_one_key([{}], [3, "a"])
    with pytest.raises(ValueError, match="no dict key"):
        misspell_one_key({"a": {}}, ["a", "b"])
    with pytest.raises(ValueError, match="not a new key"):
        misspell_one_key({"ab": 1, "b": 2}, ["ab"], new_key="b")
    with pytest.raises(ValueError, match="at least"):
        misspell_one_key({"a": 1}, [])


# ---------------------------------------------------------------- toolchain errors


def test_missing_node_modules_says_npm_ci(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text((DEFAULT_SPEC_DIR / "package.json").read_text())
    with pytest.raises(SpecToolchainError, match=r"npm ci --prefix"):
        run_tsc(VALID[:1], spec_dir=tmp_path)


def test_stale_node_modules_says_npm_ci(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text((DEFAULT_SPEC_DIR / "package.json").read_text())
    (tmp_path / "node_modules" / ".bin").mkdir(parents=True)
    (tmp_path / "node_modules" / ".bin" / "tsc").write_text("")
    for pkg, version in (("@elastic/elasticsearch", "9.0.0"), ("typescript", "5.0.0")):
        (tmp_path / "node_modules" / pkg).mkdir(parents=True)
        (tmp_path / "node_modules" / pkg / "package.json").write_text(json.dumps({"version": version}))
    with pytest.raises(SpecToolchainError, match=r"9\.0\.0 is installed .*npm ci --prefix"):
        run_tsc(VALID[:1], spec_dir=tmp_path)


def test_spec_dir_without_package_json(tmp_path: Path) -> None:
    with pytest.raises(SpecToolchainError, match=r"package\.json"):
        run_tsc(VALID[:1], spec_dir=tmp_path)
