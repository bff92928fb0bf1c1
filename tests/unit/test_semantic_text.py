"""``vector_mode`` (client / inference / semantic_text): settings, assets, search bodies, the backend on a
fake cluster, and section ingestion for server-side chunking.

The ingest pipelines cannot run here; :func:`simulate_set_remove` executes their ``set`` / ``remove``
processors with the semantics of Elasticsearch's ``SetProcessor`` (``copy_from`` reads the source field
with ``ignoreMissing = ignore_empty_value``; a null or empty value is then skipped when
``ignore_empty_value`` is true) so the embedding input can be compared with ``Chunk.embed_text``.
``tests/live/test_live_ingest.py`` runs the real pipelines.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from es_rag.elasticsearch.assets import CHUNK_PIPELINE_ASSET, render_asset, setup_requests
from es_rag.elasticsearch.bodies import search_requests
from es_rag.elasticsearch.probe import semantic_text_support
from es_rag.elasticsearch.responses import locate_server_chunk
from es_rag.errors import ConfigError, InputError
from es_rag.filters import SearchFilter
from es_rag.ingest import section_units
from es_rag.query import channel_plan
from es_rag.records import Chunk, Hit
from es_rag.settings import SEMANTIC_FIELD, Settings, VectorMode
from tests.support.double.ingest import InferenceEndpoint, IngestContext, parse_pipeline, run_pipeline
from tests.support.es_transport import (
    cluster_routes,
    hit,
    make_backend,
    msearch_response,
    search_response,
)

E5 = ".multilingual-e5-small-elasticsearch"
SEM = Settings(
    analyzer="standard",
    inference_id=E5,
    vector_mode="semantic_text",
    candidate_k=20,
    num_candidates=40,
    rerank_k=10,
    context_k=5,
    rerank_model=None,
)
FLT = SearchFilter("acme", ("eng",))
VALIDITY = {
    "bool": {
        "must_not": [
            {"range": {"meta.valid_from": {"gt": "now/d"}}},
            {"range": {"meta.valid_to": {"lt": "now/d"}}},
        ]
    }
}
"""Every search's validity clause at the request's day (es_rag.metadata.Validity, written out by hand)."""
FLT_CLAUSES = [{"term": {"tenant_id": "acme"}}, {"terms": {"acl": ["eng", "public"]}}, VALIDITY]
SECTION_TEXT = "Keys rotate every 90 days. To rotate now, open Settings > API and press Rotate."
SEARCH = f"/{SEM.chunk_index}/_search"
MSEARCH = f"/{SEM.chunk_index}/_msearch"


# =============================================================================================
# settings
# =============================================================================================
def test_vector_mode_resolution() -> None:
    assert Settings().encoder.vectors is VectorMode.CLIENT
    assert Settings(inference_id="e5").encoder.vectors is VectorMode.INFERENCE
    assert Settings(inference_id="e5", vector_mode="semantic_text").encoder.vectors is VectorMode.SEMANTIC_TEXT
    assert Settings(inference_id="e5", vector_mode="INFERENCE").encoder.vectors is VectorMode.INFERENCE
    # replace keeps an unset mode derived from inference_id
    assert Settings().replace(inference_id="e5").encoder.vectors is VectorMode.INFERENCE
    assert Settings(inference_id="e5", vector_mode="semantic_text").pipeline_id == "es-rag-chunks-semantic"
    assert Settings(inference_id="e5").pipeline_id == "es-rag-chunks-inference"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vector_mode": "dense"}, "valid values: client, inference, semantic_text"),
        ({"vector_mode": "client", "inference_id": "e5"}, "would be unused"),
        ({"vector_mode": "semantic_text"}, "needs inference_id"),
        ({"vector_mode": "inference"}, "needs inference_id"),
        ({"semantic_chunking": "paragraph"}, "valid values: sentence, word, none"),
        ({"semantic_max_chunk_size": 19}, "20..300"),
        ({"semantic_max_chunk_size": 301}, "20..300"),
        ({"semantic_overlap": 2}, "0 or 1"),
        ({"semantic_chunking": "word", "semantic_max_chunk_size": 9}, "10..300"),
        ({"semantic_chunking": "word", "semantic_max_chunk_size": 100, "semantic_overlap": 51}, "at most half"),
        ({"semantic_overlap": -1}, ">= 0"),
    ],
)
def test_vector_settings_are_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings(**kwargs)


def test_chunking_settings_bodies() -> None:
    assert SEM.encoder.semantic_chunking_settings() == {
        "strategy": "sentence",
        "max_chunk_size": 250,
        "sentence_overlap": 1,
    }
    word = SEM.replace(semantic_chunking="word", semantic_max_chunk_size=100, semantic_overlap=50)
    assert word.encoder.semantic_chunking_settings() == {"strategy": "word", "max_chunk_size": 100, "overlap": 50}
    # NoneChunkingSettings accepts `strategy` only (any other key is rejected by Elasticsearch)
    assert SEM.replace(semantic_chunking="none").encoder.semantic_chunking_settings() == {"strategy": "none"}
    assert SEM.replace(semantic_chunking="endpoint").encoder.semantic_chunking_settings() is None


# =============================================================================================
# assets
# =============================================================================================
def _mapping(settings: Settings) -> dict[str, Any]:
    props: dict[str, Any] = render_asset("index_templates", "component-chunks", settings)["template"]["mappings"][
        "properties"
    ]
    return props


def test_semantic_mapping_replaces_the_vector_field() -> None:
    props = _mapping(SEM)
    assert "vector" not in props
    assert props[SEMANTIC_FIELD] == {
        "type": "semantic_text",
        "inference_id": E5,
        "chunking_settings": {"strategy": "sentence", "max_chunk_size": 250, "sentence_overlap": 1},
    }
    assert _mapping(SEM.replace(semantic_chunking="endpoint"))[SEMANTIC_FIELD] == {
        "type": "semantic_text",
        "inference_id": E5,
    }
    assert _mapping(SEM.replace(semantic_chunking="none"))[SEMANTIC_FIELD]["chunking_settings"] == {"strategy": "none"}
    client = _mapping(Settings(analyzer="standard"))
    assert SEMANTIC_FIELD not in client and client["vector"]["type"] == "dense_vector"


def test_setup_installs_the_pipeline_of_the_mode() -> None:
    for settings, asset in (
        (Settings(analyzer="standard"), "chunks"),
        (Settings(analyzer="standard", inference_id=E5), "chunks-inference"),
        (SEM, "chunks-semantic"),
    ):
        assert CHUNK_PIPELINE_ASSET[settings.encoder.vectors] == asset
        (pipeline,) = [r for r in setup_requests(settings) if r.path == f"_ingest/pipeline/{settings.pipeline_id}"]
        assert pipeline.body == render_asset("ingest_pipelines", asset, settings)
        index_tpl = next(r for r in setup_requests(settings) if r.path == f"_index_template/{settings.chunk_index}")
        assert index_tpl.body["template"]["settings"]["index"]["default_pipeline"] == settings.pipeline_id


def run_pipeline_on(body: dict[str, Any], doc: dict[str, Any], *endpoints: InferenceEndpoint) -> dict[str, Any]:
    """Run a rendered pipeline on ``doc`` with the strict double's ingest executor (Elasticsearch's processor
    semantics: ``set``/``copy_from``/``ignore_empty_value``, ``remove``, ``rename``, ``fingerprint``, the
    ``inference`` output shape, Painless ``if`` conditions evaluated)."""
    out = dict(doc)
    meta: dict[str, Any] = {"_index": "es-rag-chunks", "_id": None}
    run_pipeline(parse_pipeline("under-test", body), out, meta, IngestContext({e.inference_id: e for e in endpoints}))
    return out


def _chunk(contextual: str | None) -> Chunk:
    return Chunk(
        chunk_id="c1",
        source_id="guide.md",
        source_version="v1",
        parent_id="p1",
        heading_path=("Guide", "Keys"),
        start_offset=10,
        end_offset=10 + len(SECTION_TEXT),
        chunker_version="structure-2",
        tenant_id="acme",
        acl=("public",),
        title="Guide",
        text=SECTION_TEXT,
        token_count=20,
        contextual_text=contextual,
    )


@pytest.mark.parametrize("contextual", [None, "Guide\nGuide > Keys\n\n" + SECTION_TEXT, "visible text only"])
def test_server_side_embedding_input_is_chunk_embed_text(contextual: str | None) -> None:
    chunk = _chunk(contextual)
    # inference pipeline: the processor reads a temporary field that is removed afterwards
    inf = render_asset("ingest_pipelines", "chunks-inference", Settings(analyzer="standard", inference_id=E5))
    (proc,) = [p["inference"] for p in inf["processors"] if "inference" in p]
    assert proc["input_output"] == [{"input_field": "_es_rag_embed_input", "output_field": "vector"}]
    endpoint = InferenceEndpoint(E5, dims=4)
    done = run_pipeline_on(inf, chunk.to_source(include_vector=False), endpoint)
    assert endpoint.calls == [chunk.embed_text]  # the model read exactly Chunk.embed_text
    assert len(done["vector"]) == 4
    # neither the temporary input nor the model_id the processor writes at the root reaches the strict mapping
    assert "_es_rag_embed_input" not in done and "model_id" not in done
    # semantic_text pipeline: the semantic_text field gets the same text
    sem = render_asset("ingest_pipelines", "chunks-semantic", SEM)
    assert run_pipeline_on(sem, chunk.to_source(include_vector=False))[SEMANTIC_FIELD] == chunk.embed_text


def test_embedding_input_order_matters_for_the_simulation() -> None:
    """The executor is not vacuous: with the two ``set`` processors swapped, ``text`` would win."""
    sem = render_asset("ingest_pipelines", "chunks-semantic", SEM)["processors"]
    sets = [p for p in sem if "set" in p and p["set"].get("field") == SEMANTIC_FIELD]
    assert [p["set"]["copy_from"] for p in sets] == ["text", "contextual_text"]
    chunk = _chunk("contextual")
    swapped = run_pipeline_on({"processors": list(reversed(sets))}, chunk.to_source())
    assert swapped[SEMANTIC_FIELD] == SECTION_TEXT


# =============================================================================================
# search bodies
# =============================================================================================
def test_channel_plan_runs_the_semantic_channel_without_a_client_vector() -> None:
    assert channel_plan("reset password", None, SEM) == ["bm25", "dense"]
    assert channel_plan("reset password", None, Settings(analyzer="standard")) == ["bm25"]


def test_native_body_uses_the_semantic_query_with_the_filter_in_every_child() -> None:
    (req,) = search_requests("rotate keys", None, FLT, SEM, native=True)
    text = json.dumps(req.body)
    assert '"knn"' not in text and "query_vector" not in text and "post_filter" not in text
    children = req.body["retriever"]["rrf"]["retrievers"]
    assert [c["standard"]["_name"] for c in children] == ["bm25", "dense"]
    assert children[1]["standard"]["query"] == {"semantic": {"field": SEMANTIC_FIELD, "query": "rotate keys"}}
    for child in children:
        assert child["standard"]["filter"] == FLT_CLAUSES
    assert req.body["highlight"] == {
        "fields": {SEMANTIC_FIELD: {"type": "semantic", "number_of_fragments": 1, "order": "score"}}
    }


def test_client_body_uses_the_semantic_query_with_the_filter_in_every_search() -> None:
    (req,) = search_requests("E1042 rotate keys", None, FLT, SEM, native=False)
    lines = req.body
    assert [lines[i] for i in (0, 2, 4)] == [{"index": SEM.chunk_index}] * 3
    bm25, dense, exact = lines[1], lines[3], lines[5]
    assert dense["query"]["bool"] == {
        "must": [{"semantic": {"field": SEMANTIC_FIELD, "query": "E1042 rotate keys"}}],
        "filter": FLT_CLAUSES,
    }
    assert "knn" not in dense and "highlight" in dense
    for item in (bm25, exact):
        assert item["query"]["bool"]["filter"] == FLT_CLAUSES and "highlight" not in item


# =============================================================================================
# backend on a fake cluster
# =============================================================================================
def _section_doc(chunk_id: str = "s1", **extra: Any) -> dict[str, Any]:
    src = {
        "chunk_id": chunk_id,
        "source_id": "guide.md",
        "source_version": "v1",
        "heading_path": ["Guide", "Keys"],
        "start_offset": 100,
        "end_offset": 100 + len(SECTION_TEXT),
        "chunker_version": "parent-child-2",
        "tenant_id": "acme",
        "acl": ["public"],
        "title": "Guide",
        "text": SECTION_TEXT,
        "token_count": 20,
    }
    src.update(extra)
    return src


def _semantic_hit(doc: dict[str, Any], score: float, fragment: str | None) -> dict[str, Any]:
    out = hit(doc, score, index=SEM.chunk_index)
    if fragment is not None:
        out["highlight"] = {SEMANTIC_FIELD: [fragment]}
    return out


def test_native_semantic_retrieve_narrows_hits_to_the_server_chunk() -> None:
    backend, node = make_backend(SEM, cluster_routes(SEM, license_type="trial"))
    backend.probe()
    node.reset()
    fragment = "To rotate now, open Settings > API and press Rotate."
    node.route(
        "POST",
        SEARCH,
        (
            200,
            search_response(
                [_semantic_hit(_section_doc("s1"), 0.03, fragment), _semantic_hit(_section_doc("s2"), 0.02, None)]
            ),
        ),
    )
    ret = backend.retrieve("rotate keys", None, FLT, SEM)
    assert node.lines() == [f"POST {SEARCH}"]
    body = node.requests[0].body
    assert body["retriever"]["rrf"]["retrievers"][1]["standard"]["query"]["semantic"]["query"] == "rotate keys"
    assert ret.fused is not None and [h.chunk_id for h in ret.fused] == ["s1", "s2"]
    narrowed, whole = ret.fused
    assert narrowed.text == fragment
    at = SECTION_TEXT.index(fragment)
    assert (narrowed.start_offset, narrowed.end_offset) == (100 + at, 100 + at + len(fragment))
    assert whole.text == SECTION_TEXT and whole.start_offset == 100
    assert any("1 of 2 hits narrowed" in n for n in ret.notes)


def test_client_semantic_retrieve_gives_each_document_one_span_in_every_channel() -> None:
    backend, node = make_backend(SEM, cluster_routes(SEM, license_type="basic"))
    fragment = "Keys rotate every 90 days."
    node.route(
        "POST",
        MSEARCH,
        (
            200,
            msearch_response(
                [
                    search_response([hit(_section_doc("s1"), 7.0, index=SEM.chunk_index)]),
                    search_response([_semantic_hit(_section_doc("s1"), 0.9, fragment)]),
                ]
            ),
        ),
    )
    ret = backend.retrieve("rotate keys", None, FLT, SEM)
    lines = node.calls("POST", MSEARCH)[0].body
    assert lines[3]["query"]["bool"]["must"][0] == {"semantic": {"field": SEMANTIC_FIELD, "query": "rotate keys"}}
    assert lines[3]["query"]["bool"]["filter"] == FLT_CLAUSES
    assert ret.path == "client-rrf"
    assert ret.channels["bm25"][0].text == fragment == ret.channels["dense"][0].text
    assert ret.channels["bm25"][0].start_offset == ret.channels["dense"][0].start_offset == 100
    assert ret.channels["bm25"][0].bm25_score == pytest.approx(7.0)


def test_locate_server_chunk_keeps_the_section_when_the_chunk_is_not_a_span_of_text() -> None:
    section = Hit.from_source(_section_doc())
    assert locate_server_chunk(section, "Guide\nGuide > Keys\n\nKeys rotate") is section  # contextual prefix
    assert locate_server_chunk(section, SECTION_TEXT) is section  # one chunk = the whole section
    assert locate_server_chunk(section, "") is section


def test_a_located_server_chunk_drops_the_sections_visible_text() -> None:
    """An HTML section's ``visible_text`` describes the whole section; the located fragment is a literal span of the
    stored text, so it is shown as itself."""
    section = Hit.from_source({**_section_doc(), "visible_text": "the whole section's visible text"})
    located = locate_server_chunk(section, "Keys rotate")
    assert located.text == located.display_text == "Keys rotate" and located.visible_text is None


def test_index_in_semantic_mode_sends_no_vector_and_leaves_the_field_to_the_pipeline() -> None:
    from tests.support.es_transport import bulk_actions, bulk_responder

    backend, node = make_backend(SEM, cluster_routes(SEM))
    node.route("PUT|POST", r"/_bulk", bulk_responder())
    unit = _chunk("contextual").with_vector(np.ones(4, dtype=np.float32), "client@1")
    report = backend.index([unit])
    assert report.indexed == 1 and not report.failed
    ((op, meta, source),) = bulk_actions(node.calls(path_regex=r"/_bulk")[0])
    assert op == "index" and meta["_index"] == SEM.chunk_index
    assert source is not None and "vector" not in source and SEMANTIC_FIELD not in source
    assert source["contextual_text"] == "contextual"


@pytest.mark.parametrize(
    ("version", "license_type", "inference_id", "usable", "reason"),
    [
        ("9.1.0", "trial", E5, True, "text_embedding"),
        ("9.5.0", "enterprise", ".elser-2-elasticsearch", True, "sparse_embedding"),
        ("9.1.0", "basic", E5, False, "enterprise or trial"),
        ("9.0.3", "trial", E5, False, "chunking_settings"),
        ("8.19.2", "enterprise", E5, True, "text_embedding"),
        ("9.1.0", "trial", "my-missing", False, "not found"),
    ],
)
def test_doctor_says_whether_semantic_text_is_usable(
    version: str, license_type: str, inference_id: str, usable: bool, reason: str
) -> None:
    settings = SEM.replace(inference_id=inference_id)
    backend, _ = make_backend(settings, cluster_routes(settings, version=version, license_type=license_type))
    report = backend.doctor()
    sem = report["semantic_text"]
    assert sem["usable"] is usable and reason in sem["reason"]
    assert set(sem["endpoints"]) == {E5, ".elser-2-elasticsearch"}
    paths = report["paths"]
    assert paths["vector_mode"] == "semantic_text"
    assert "semantic query" in paths["knn"] and "semantic_text" in paths["vectors"]
    assert ("NOT USABLE" in paths["vectors"]) is (not usable)


def test_doctor_in_client_mode_lists_semantic_candidates() -> None:
    settings = Settings(analyzer="standard")
    backend, _ = make_backend(settings, cluster_routes(settings))
    report = backend.doctor()
    assert report["paths"]["vector_mode"] == "client" and report["paths"]["knn"] == "elasticsearch knn"
    assert report["semantic_text"]["usable"] is False
    assert E5 in report["semantic_text"]["reason"]
    caps = backend.probe()
    assert caps.inference_endpoint_info[E5] == {
        "task_type": "text_embedding",
        "service": "elasticsearch",
        "dimensions": "",
        "model_id": ".multilingual-e5-small",  # read for the embedding check of vector_mode inference
    }
    assert semantic_text_support(caps, E5)["usable"] is True


# =============================================================================================
# ingestion of sections
# =============================================================================================
def test_section_units_are_parents_or_parentless_chunks() -> None:
    parent = Chunk(**{**_chunk(None).__dict__, "chunk_id": "p1", "kind": "parent", "parent_id": None})
    child = _chunk(None)
    other = Chunk(**{**_chunk(None).__dict__, "chunk_id": "o1", "source_id": "flat.txt", "parent_id": None})
    assert [c.chunk_id for c in section_units([child, other], [parent])] == ["p1", "o1"]


def test_server_chunking_refuses_a_client_embedder() -> None:
    from es_rag.ingest import ingest_documents

    with pytest.raises(InputError, match="embedder=None"):
        ingest_documents([], chunker=object(), embedder=object(), backend=object(), server_chunking=True)  # type: ignore[arg-type]
