"""Every body es_rag can send conforms to Elastic's official request types, and keeps its invariants.

(a) all bodies of :func:`bodies.all_cases` compile in ONE ``tsc`` run; (b) a misspelt typed key deep in a
representative real body is caught and attributed to its case (all mutants in a second, single run);
(c) the chunk mapping maps every lineage field and every asset carries ``_meta.version``; (d) every
search body carries the exact hard-filter clauses (tenant term, ACL terms, metadata terms) in every
retriever, kNN clause and bool query. Needs ``npm ci --prefix spec`` (the harness raises, never skips).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from es_rag.elasticsearch.assets import ASSET_VERSION
from es_rag.elasticsearch.bodies import search_requests
from es_rag.filters import SearchFilter
from es_rag.settings import SEMANTIC_FIELD, Settings, VectorMode
from tests.support.spec_check import SpecCase, TscResult, misspell_one_key, run_tsc

try:  # rootdir-relative import when tests/ is importable, else pytest's rootdir-less "prepend" mode
    from tests.support.spec_bodies import (
        FILTERS,
        QUERY,
        SETUP_VARIANTS,
        BodyCase,
        all_bodies,
        all_cases,
        backend_calls,
        literal_clauses,
        query_vector,
    )
except ImportError:  # pragma: no cover - depends on how pytest was started
    from bodies import (  # type: ignore[no-redef]
        FILTERS,
        QUERY,
        SETUP_VARIANTS,
        BodyCase,
        all_bodies,
        all_cases,
        backend_calls,
        literal_clauses,
        query_vector,
    )

BODIES: list[BodyCase] = all_bodies()
CASES: list[SpecCase] = all_cases()
BY_NAME: dict[str, BodyCase] = {b.case.name: b for b in BODIES}

LINEAGE_FIELDS = (
    "chunk_id",
    "source_id",
    "source_version",
    "parent_id",
    "heading_path",
    "start_offset",
    "end_offset",
    "chunker_version",
    "embedding_version",
    "tenant_id",
    "acl",
    "title",
    "text",
    "token_count",
    "content_hash",
    "ingested_at",
    "vector",
)
ASSET_KINDS = {"pipeline", "component_template", "index_template"}
SEARCH_KINDS = {"search", "msearch", "get_parents", "neighbors"}


# =============================================================================== (a) one tsc run


@pytest.fixture(scope="module")
def all_run() -> TscResult:
    return run_tsc(CASES)


def test_case_inventory() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    kinds = {b.kind for b in BODIES}
    assert kinds == {
        "pipeline",
        "component_template",
        "index_template",
        "create_index",
        "put_mapping",
        "search",
        "msearch",
        "get_parents",
        "neighbors",
        "count",
        "bulk",
        "probe",
        "script",
        "search_template",
        "lineage",
        "bluegreen",
    }
    # every setup variant contributes its six assets (two pipelines, two self-contained components, two index
    # templates), the version-registry template, the stored search template (PUT _scripts) and three
    # index-creation PUTs (chunks, parents, versions) and the registry's mapping update (an existing registry gains
    # the fields added since: asset version 10), and the chunk and parent indices' (the page fields: asset version 13)
    for vname in SETUP_VARIANTS:
        assert sum(1 for b in BODIES if b.case.name.startswith(f"setup[{vname}] ")) == 14, vname
        scripts = [b for b in BODIES if b.case.name.startswith(f"setup[{vname}] script ")]
        assert [b.case.path for b in scripts] == [f"_scripts/{b.settings.index.prefix}-hybrid" for b in scripts]
        assert len(scripts) == 1, vname


def test_every_body_passes_tsc(all_run: TscResult) -> None:
    assert all_run.ok, f"{len(all_run.errors)} tsc error(s):\n" + "\n".join(all_run.errors)
    assert all_run.returncode == 0
    # bodyless: the probe's GETs, and blue-green's layout GET and generation DELETE
    bodyless = {b.case.name for b in BODIES if b.kind == "probe" or (b.kind == "bluegreen" and b.case.body is None)}
    assert set(all_run.skipped) == bodyless
    assert {b.case.name for b in BODIES if b.kind == "bluegreen" and b.case.body is None} == {
        "bluegreen[default] layout",
        "bluegreen[default] delete generation",
    }
    for b in BODIES:
        if b.case.name not in bodyless:
            assert f"// case: {b.case.name} | " in all_run.source, b.case.name


# =============================================================================== (b) misspellings

_D = "setup[default] "
NATIVE = "search[default] native vector filter=acl=support exclude_vectors=sent"
WEIGHTED = "search[weights=bm25:1,dense:2] native vector filter=acl=support,eng+metadata exclude_vectors=sent"
NATIVE_BM25 = "search[default] native bm25-only filter=acl=support exclude_vectors=omitted"
MSEARCH = "search[default] client msearch vector filter=acl=support exclude_vectors=sent"
MSEARCH_NO_EXCL = "search[default] client msearch vector filter=acl=support exclude_vectors=omitted"
NEIGHBORS = "neighbors[anchors=full+bare] window=2 filter=acl=support,eng+metadata"
SEM_NATIVE = "search[semantic_text] native plain filter=acl=support"
SEM_MSEARCH = "search[semantic_text] client msearch plain filter=acl=support"
SEM_MAPPING = "setup[semantic_text=e5+word] component_template component-chunks"
MISSPELLINGS: list[tuple[str, list[str | int]]] = [
    (SEM_NATIVE, ["retriever", "rrf", "retrievers", 1, "standard", "query", "semantic", "field"]),
    (SEM_NATIVE, ["highlight", "fields", SEMANTIC_FIELD, "number_of_fragments"]),
    (SEM_MSEARCH, [3, "query", "bool", "must", 0, "semantic", "query"]),
    (SEM_MAPPING, ["template", "mappings", "properties", SEMANTIC_FIELD, "inference_id"]),
    (SEM_MAPPING, ["template", "mappings", "properties", SEMANTIC_FIELD, "chunking_settings", "max_chunk_size"]),
    (_D + "pipeline chunks", ["processors", 5, "fingerprint", "target_field"]),
    (_D + "pipeline chunks", ["processors", 4, "set", "copy_from"]),
    (_D + "pipeline chunks", ["processors", 0, "fail", "if"]),
    (_D + "pipeline parents", ["processors", 1, "fail", "message"]),
    (
        "setup[inference=my-e5] pipeline chunks-inference",
        ["processors", 9, "inference", "input_output", 0, "output_field"],
    ),
    ("setup[inference=my-e5] pipeline chunks-inference", ["processors", 9, "inference", "model_id"]),
    ("setup[inference=my-e5] pipeline chunks-inference", ["processors", 8, "set", "field"]),
    (_D + "component_template component-chunks", ["template", "settings"]),
    (_D + "component_template component-parents", ["template", "settings"]),
    (
        _D + "component_template component-chunks",
        ["template", "mappings", "properties", "vector", "similarity"],
    ),
    (
        _D + "component_template component-chunks",
        ["template", "mappings", "properties", "vector", "index_options", "type"],
    ),
    (
        _D + "component_template component-chunks",
        ["template", "mappings", "properties", "heading_path", "fields", "keyword", "ignore_above"],
    ),
    (_D + "component_template component-chunks", ["template", "mappings", "dynamic"]),
    (
        _D + "component_template component-parents",
        ["template", "mappings", "properties", "text", "analyzer"],
    ),
    (_D + "index_template index-chunks", ["composed_of"]),
    (_D + "index_template index-parents", ["index_patterns"]),
    (_D + "index_template index-parents", ["template", "settings"]),
    (
        NATIVE,
        ["retriever", "rrf", "retrievers", 1, "knn", "num_candidates"],
    ),
    (
        NATIVE,
        ["retriever", "rrf", "rank_window_size"],
    ),
    (
        NATIVE,
        ["retriever", "rrf", "retrievers", 0, "standard", "query", "multi_match", "fields"],
    ),
    (
        NATIVE,
        ["retriever", "rrf", "retrievers", 1, "knn", "filter", 0, "term"],
    ),
    (NATIVE, ["_source", "exclude_vectors"]),
    (
        WEIGHTED,
        ["retriever", "rrf", "retrievers", 1, "weight"],
    ),
    (
        NATIVE_BM25,
        ["retriever", "standard", "filter"],
    ),
    (MSEARCH, [0, "index"]),
    (
        MSEARCH,
        [1, "query", "bool", "filter"],
    ),
    (MSEARCH, [3, "knn", "k"]),
    (
        MSEARCH_NO_EXCL,
        [3, "knn", "query_vector"],
    ),
    (
        MSEARCH,
        [1, "_source", "includes"],
    ),
    ("backend[default] get_parents filter=acl=support", ["query", "bool", "filter", 0, "ids", "values"]),
    (NEIGHBORS, [1, "query", "bool", "filter"]),
    (NEIGHBORS, [3, "_source", "excludes"]),
    ("backend[default] count", ["query", "match_all"]),
    ("backend[default] bulk #1", [0, "index", "_index"]),
]
# Not covered: the index-creation PUTs have an empty body (the templates supply everything), so there
# is no key to misspell; `_meta`, index `settings` content and `set.value` are untyped (see spec_check).


def _mutant_name(base: str, path: list[str | int]) -> str:
    return f"misspelt {'.'.join(map(str, path))} in {base}"


def _mutants() -> list[SpecCase]:
    out = []
    for base, path in MISSPELLINGS:
        c = BY_NAME[base].case
        out.append(SpecCase(_mutant_name(base, path), c.method, c.path, misspell_one_key(c.body, path)))
    return out


@pytest.fixture(scope="module")
def mutant_run() -> TscResult:
    return run_tsc(_mutants())


def test_misspellings_cover_every_body_kind() -> None:
    kinds = {BY_NAME[base].kind for base, _ in MISSPELLINGS}
    assert kinds == {
        "pipeline",
        "component_template",
        "index_template",
        "search",
        "msearch",
        "get_parents",
        "neighbors",
        "count",
        "bulk",
    }


def test_mutant_run_fails_only_on_mutants(mutant_run: TscResult) -> None:
    assert not mutant_run.ok
    assert "<harness>" not in mutant_run.errors_by_case, mutant_run.errors_by_case.get("<harness>")
    assert set(mutant_run.errors_by_case) <= {c.name for c in _mutants()}


def _params() -> list[Any]:
    # _bulk bodies are checked through their action lines (T.BulkOperationContainer[]): spec_check
    # emits them separately because BulkRequest.operations collapses to unknown[].
    return [pytest.param(base, path, id=_mutant_name(base, path)) for base, path in MISSPELLINGS]


@pytest.mark.parametrize(("base", "path"), _params())
def test_misspelt_real_body_is_caught(mutant_run: TscResult, base: str, path: list[str | int]) -> None:
    name = _mutant_name(base, path)
    errors = mutant_run.errors_by_case.get(name, [])
    assert errors, f"no tsc error for {name}; all errors:\n" + "\n".join(mutant_run.errors)
    wrong = next(iter(misspell_one_key({path[-1]: 0}, [path[-1]])))
    assert any(wrong in e for e in errors), f"no error names {wrong!r}:\n" + "\n".join(errors)
    c = BY_NAME[base].case
    assert all(e.startswith(f"{name} [{c.method} {c.path}]") for e in errors)


# =============================================================================== (c) assets


def _chunk_mapping_cases() -> list[BodyCase]:
    return [b for b in BODIES if b.asset == "component-chunks"]


@pytest.mark.parametrize("body_case", _chunk_mapping_cases(), ids=lambda b: b.case.name)
def test_chunk_mapping_maps_every_lineage_field(body_case: BodyCase) -> None:
    props = body_case.case.body["template"]["mappings"]["properties"]
    # semantic_text mode stores no client vector: the semantic_text field holds the server's embeddings
    fields = [
        f
        for f in LINEAGE_FIELDS
        if not (f == "vector" and body_case.settings.encoder.vectors is VectorMode.SEMANTIC_TEXT)
    ]
    missing = [f for f in fields if f not in props]
    assert not missing, f"lineage fields not mapped: {missing}"
    for f in fields:
        assert "type" in props[f], f
    s = body_case.settings
    if s.encoder.vectors is VectorMode.SEMANTIC_TEXT:
        assert "vector" not in props
        expected: dict[str, Any] = {"type": "semantic_text", "inference_id": s.encoder.inference_id}
        if s.encoder.semantic_chunking_settings() is not None:
            expected["chunking_settings"] = s.encoder.semantic_chunking_settings()
        assert props[SEMANTIC_FIELD] == expected
    else:
        assert SEMANTIC_FIELD not in props
        assert props["vector"] == {
            "type": "dense_vector",
            "dims": s.encoder.dims,
            "index": True,
            "similarity": s.index.similarity.value,
            "index_options": s.index.vector_index_options(),
        }
    assert body_case.case.body["template"]["mappings"]["dynamic"] == "strict"


@pytest.mark.parametrize("body_case", [b for b in BODIES if b.kind in ASSET_KINDS], ids=lambda b: b.case.name)
def test_every_asset_has_meta_version(body_case: BodyCase) -> None:
    meta = body_case.case.body.get("_meta")
    assert isinstance(meta, dict), "no _meta"
    assert meta.get("version") == ASSET_VERSION
    assert isinstance(meta["version"], int) and not isinstance(meta["version"], bool)
    assert meta.get("managed_by") == "es_rag"


def test_asset_variants_render_their_settings() -> None:
    for b in BODIES:
        s, body = b.settings, b.case.body
        if b.asset in ("component-chunks", "component-parents"):
            # each component defines the analyzers its own mappings name (validated alone when PUT)
            assert body["template"]["settings"]["index"]["analysis"]["analyzer"]["es_rag_text"] == {
                "type": s.index.analyzer.value
            }
        elif b.asset == "index-chunks":
            assert body["template"]["settings"]["index"]["default_pipeline"] == s.pipeline_id
            assert body["index_patterns"] == [f"{s.index.prefix}-chunks*"]
            assert body["composed_of"] == [f"{s.index.prefix}-chunks"]
        elif b.asset == "chunks-inference":
            (inf,) = [p["inference"] for p in body["processors"] if "inference" in p]
            assert inf["model_id"] == s.encoder.inference_id
            # the embedding input is contextual_text when set, else text (Chunk.embed_text), via a temporary
            # field that two Painless-free set processors fill and a remove processor drops
            assert inf["input_output"] == [{"input_field": "_es_rag_embed_input", "output_field": "vector"}]
            sets = [p["set"] for p in body["processors"] if p.get("set", {}).get("field") == "_es_rag_embed_input"]
            assert sets == [
                {
                    "tag": "embed_input_text",
                    "description": sets[0]["description"],
                    "field": "_es_rag_embed_input",
                    "copy_from": "text",
                },
                {
                    "tag": "embed_input_contextual_text",
                    "description": sets[1]["description"],
                    "field": "_es_rag_embed_input",
                    "copy_from": "contextual_text",
                    "ignore_empty_value": True,
                },
            ]
            # InferenceProcessor writes model_id (and is_truncated) next to the output field: the root, which is
            # dynamic: strict, so the pipeline maps is_truncated to embedding_truncated and drops model_id
            removes = [p["remove"] for p in body["processors"] if "remove" in p]
            assert [(r["field"], r["ignore_missing"]) for r in removes] == [(["_es_rag_embed_input", "model_id"], True)]
            renames = [p["rename"] for p in body["processors"] if "rename" in p]
            assert [(r["field"], r["target_field"]) for r in renames] == [("is_truncated", "embedding_truncated")]
            assert b.case.path == f"_ingest/pipeline/{s.index.prefix}-chunks-inference"
        elif b.asset == "chunks":
            assert not any("inference" in p for p in body["processors"])
        elif b.asset == "chunks-semantic":
            assert s.encoder.vectors is VectorMode.SEMANTIC_TEXT
            assert b.case.path == f"_ingest/pipeline/{s.index.prefix}-chunks-semantic"
            assert not any("inference" in p for p in body["processors"])  # semantic_text embeds, not a processor
            fills = [
                p["set"]["copy_from"] for p in body["processors"] if p.get("set", {}).get("field") == SEMANTIC_FIELD
            ]
            assert fills == ["text", "contextual_text"]


# =============================================================================== (d) hard filters

_HOLDERS = ("standard", "knn", "bool")
_KNOWN_RETRIEVERS = {"standard", "knn", "rrf", "linear", "text_similarity_reranker", "diversify"}
"""``text_similarity_reranker`` and ``diversify`` hold no filter themselves: they wrap one retriever whose children
carry it (a wrapper's own ``filter`` would be pushed down the same way, ``RetrieverBuilder.preFilterQueryBuilders``)."""


def filter_holders(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``standard`` retriever, ``knn`` (retriever or search clause) and ``bool`` query in ``node``.

    Yields ``(dotted path, the holder's dict)``; filter lists themselves are not descended into (their
    clauses are checked by value). Raises on a retriever kind the checks below do not understand.
    """
    if isinstance(node, dict):
        for key, value in node.items():
            here = (*path, key)
            if key == "filter":
                continue
            containers = []
            if key == "retriever" and isinstance(value, dict):
                containers = [value]
            elif key == "retrievers" and isinstance(value, list):  # rrf entries: container or {retriever, weight}
                containers = [e["retriever"] if "retriever" in e else e for e in value]
            for container in containers:
                unknown = set(container) - _KNOWN_RETRIEVERS
                assert not unknown, f"{'.'.join(map(str, here))}: unchecked retriever kind(s) {unknown}"
            if key in _HOLDERS and isinstance(value, dict):
                yield ".".join(map(str, here)), value
            yield from filter_holders(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from filter_holders(item, (*path, i))


def _search_items(b: BodyCase) -> list[dict[str, Any]]:
    """The search bodies inside a request: the _search body, or every second _msearch line."""
    if b.kind in ("msearch", "neighbors"):
        headers, items = b.case.body[0::2], b.case.body[1::2]
        assert headers == [{"index": b.settings.chunk_index}] * len(items)
        return list(items)
    return [b.case.body]


def _expected_holders(b: BodyCase, item: dict[str, Any]) -> int:
    if b.kind in ("get_parents", "neighbors"):
        return 1  # one bool query
    if b.kind == "msearch":
        return 1  # bm25 item: one bool; dense item: one knn
    retriever = item["retriever"]
    while "diversify" in retriever or "text_similarity_reranker" in retriever:  # one wrapped retriever
        ((_kind, spec),) = retriever.items()
        assert "filter" not in spec  # the filter stays on the children
        retriever = spec["retriever"]
    for compound in ("rrf", "linear"):
        if compound in retriever:
            return len(retriever[compound]["retrievers"])  # one holder per child (bm25, dense, exact)
    return 1  # a single standard retriever


def assert_hard_filters(body_case: BodyCase) -> None:
    """Every retriever / kNN clause / bool query of every search in the request carries the SearchFilter."""
    flt = body_case.flt
    assert isinstance(flt, SearchFilter)
    expected = literal_clauses(flt)  # written out by hand, not SearchFilter.to_es()
    tenant, acl = expected[0], expected[1]
    assert "public" in acl["terms"]["acl"]
    for item in _search_items(body_case):
        assert "post_filter" not in json.dumps(item)
        holders = list(filter_holders(item))
        assert len(holders) == _expected_holders(body_case, item), [p for p, _ in holders]
        for where, holder in holders:
            got = holder.get("filter")
            assert isinstance(got, list), f"{where}: no filter list"
            assert tenant in got, f"{where}: tenant term missing: {got}"
            assert acl in got, f"{where}: acl terms missing: {got}"
            missing = [c for c in expected if c not in got]
            assert not missing, f"{where}: filter clauses missing: {missing}"
            if body_case.kind == "get_parents":
                assert got == [{"ids": {"values": ["p-1", "p-2"]}}, *expected]
            elif body_case.kind == "neighbors":
                # the anchor's own source / version / section and the side of it, then the SearchFilter
                restriction = got[: len(got) - len(expected)]
                assert got[len(restriction) :] == expected, f"{where}: SearchFilter not intact: {got}"
                assert restriction and restriction[0] == {"term": {"source_id": restriction[0]["term"]["source_id"]}}
                for clause in restriction[1:-1]:
                    assert list(clause) == ["term"], f"{where}: unexpected clause {clause}"
                    assert list(clause["term"]) in (["source_version"], ["parent_id"]), f"{where}: {clause}"
                side = restriction[-1]
                assert list(side) == ["range"] and list(side["range"]) == ["start_offset"], f"{where}: {side}"
                assert list(side["range"]["start_offset"]) in (["lt"], ["gt"]), f"{where}: {side}"
            else:
                assert got == expected, f"{where}: extra clauses beyond the SearchFilter: {got}"


@pytest.mark.parametrize("body_case", [b for b in BODIES if b.kind in SEARCH_KINDS], ids=lambda b: b.case.name)
def test_every_retriever_knn_and_bool_carries_the_exact_filter(body_case: BodyCase) -> None:
    assert_hard_filters(body_case)


@pytest.mark.parametrize(
    ("base", "mutate"),
    [
        (
            NATIVE,
            lambda b: b["retriever"]["rrf"]["retrievers"][1]["knn"].pop("filter"),
        ),
        (
            NATIVE,
            lambda b: b["retriever"]["rrf"]["retrievers"][0]["standard"]["filter"].pop(1),
        ),
        (
            WEIGHTED,
            lambda b: b["retriever"]["rrf"]["retrievers"][1]["retriever"]["knn"]["filter"].pop(),
        ),
        (
            NATIVE,
            lambda b: b["retriever"]["rrf"]["retrievers"].append({"linear": {"retrievers": []}}),
        ),
        (
            "search[default] exact-channel native vector filter=acl=support,eng+metadata",
            lambda b: b["retriever"]["rrf"]["retrievers"][2]["standard"].pop("filter"),
        ),
        (
            "search[linear-minmax] exact-channel native vector filter=acl=support,eng+metadata",
            lambda b: b["retriever"]["linear"]["retrievers"][1]["retriever"]["knn"]["filter"].pop(0),
        ),
        (
            "search[default] exact-channel client msearch vector filter=acl=support,eng+metadata",
            lambda b: b[5]["query"]["bool"].pop("filter"),
        ),
        (
            "search template rendered exact",
            lambda b: b["retriever"]["rrf"]["retrievers"][2]["standard"]["filter"].pop(0),
        ),
        (
            MSEARCH,
            lambda b: b[3]["knn"].pop("filter"),
        ),
        (
            SEM_NATIVE,
            lambda b: b["retriever"]["rrf"]["retrievers"][1]["standard"].pop("filter"),
        ),
        (
            SEM_MSEARCH,
            lambda b: b[3]["query"]["bool"]["filter"].pop(1),
        ),
        (
            MSEARCH,
            lambda b: b[1]["query"]["bool"]["filter"].pop(0),
        ),
        (
            MSEARCH,
            lambda b: b[1].update(query={"multi_match": b[1]["query"]["bool"]["must"][0]["multi_match"]}),
        ),
        (
            MSEARCH,
            lambda b: b[1].update(post_filter={"term": {"tenant_id": "acme"}}),
        ),
        (
            "backend[default] get_parents filter=acl=support",
            lambda b: b["query"]["bool"]["filter"][2]["terms"]["acl"].remove("public"),
        ),
        (NEIGHBORS, lambda b: b[5]["query"]["bool"].pop("filter")),
        (NEIGHBORS, lambda b: b[7]["query"]["bool"]["filter"].pop()),
        (NEIGHBORS, lambda b: b[1]["query"]["bool"]["filter"].remove({"term": {"tenant_id": "globex"}})),
        (NEIGHBORS, lambda b: b[3]["query"]["bool"]["filter"].insert(1, {"match_all": {}})),
    ],
    ids=[
        "knn-no-filter",
        "standard-no-acl",
        "weighted-knn-no-acl",
        "unknown-retriever",
        "exact-child-no-filter",
        "linear-knn-no-tenant",
        "msearch-exact-no-filter",
        "template-exact-no-tenant",
        "msearch-knn-no-filter",
        "semantic-child-no-filter",
        "msearch-semantic-no-acl",
        "msearch-bool-no-tenant",
        "msearch-unfiltered-query",
        "post-filter",
        "parents-acl-without-public",
        "neighbors-no-filter",
        "neighbors-no-metadata-clause",
        "neighbors-no-tenant",
        "neighbors-foreign-clause",
    ],
)
def test_filter_walker_catches_a_missing_clause(base: str, mutate: Any) -> None:
    b = BY_NAME[base]
    body = copy.deepcopy(b.case.body)
    mutate(body)
    broken = dataclasses.replace(b, case=dataclasses.replace(b.case, body=body))
    with pytest.raises(AssertionError):
        assert_hard_filters(broken)


def test_search_variants_cover_the_grid() -> None:
    searches = [b for b in BODIES if b.kind in ("search", "msearch")]
    grid = [b for b in searches if "exact-channel" not in b.case.name and "template" not in b.case.name]
    for flt in FILTERS.values():
        for kind in ("search", "msearch"):
            rows = [b for b in grid if b.kind == kind and b.flt == flt and b.settings == Settings()]
            assert len(rows) == 4  # vector / bm25-only x exclude_vectors sent / omitted
    bodies = [json.dumps(b.case.body) for b in searches]
    assert any('"exclude_vectors": false' in t for t in bodies)
    assert any('"exclude_vectors"' not in t for t in bodies)
    assert any('"weight": 2.0' in t for t in bodies)  # weighted rrf
    assert any('"standard"' in t and '"rrf"' not in t for t in bodies)  # bm25-only native
    assert any('"source_id": ["handbook", "faq"]' in t for t in bodies)  # metadata filter


# =============================================================================== backend = pure builders


@pytest.mark.parametrize(
    ("version", "license_type", "native", "vsp"),
    [
        ("9.2.0", "trial", True, True),
        ("9.0.3", "enterprise", True, False),
        ("9.2.0", "basic", False, True),
        ("8.17.0", "basic", False, False),
    ],
)
@pytest.mark.parametrize("with_vector", [True, False], ids=["vector", "bm25-only"])
def test_backend_retrieve_sends_the_pure_builders_bodies(
    version: str, license_type: str, native: bool, vsp: bool, with_vector: bool
) -> None:
    """The search bodies in all_cases() are exactly what ElasticsearchBackend.retrieve sends."""
    settings, flt = Settings(), FILTERS["acl=support"]
    vec = query_vector(settings.encoder.dims) if with_vector else None
    calls = backend_calls(
        settings,
        lambda b: b.retrieve(QUERY, None if vec is None else np.asarray(vec, dtype=np.float64), flt, settings),
        version=version,
        license_type=license_type,
    )
    sent = calls[-1]
    assert all(c.method == "GET" and c.body is None for c in calls[:-1])  # the probe
    expected = search_requests(QUERY, vec, flt, settings, native=native and with_vector, vectors_in_source_param=vsp)
    assert [sent] == expected
    # and the same body is one of the spec-checked cases
    assert any(c.method == sent.method and c.path == sent.path and c.body == sent.body for c in CASES)
