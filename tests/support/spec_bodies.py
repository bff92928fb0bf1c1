"""Every request body ``es_rag`` can send to Elasticsearch, as :class:`~tests.support.spec_check.SpecCase` s.

The bodies are produced by the package's own builders, never written by hand:

* setup: :func:`es_rag.elasticsearch.assets.setup_requests` (ingest pipelines, component and index templates) and
  :func:`es_rag.elasticsearch.assets.index_creation_requests` (index creation PUTs), for every configuration variant
  that changes a rendered asset (inference pipeline, analyzer, similarity, index prefix, vector dims);
* search: :func:`es_rag.elasticsearch.bodies.search_requests` on both fusion paths (native ``rrf`` ``_search`` and
  client ``_msearch``), with and without a query vector (BM25-only fallback), with channel weights
  (weighted RRF), with metadata filters and with ``vectors_in_source_param`` True and False;
* neighbour expansion: :func:`es_rag.elasticsearch.bodies.neighbors_request` (``_msearch``, two searches per anchor)
  under every filter, which :meth:`ElasticsearchBackend.get_neighbors` sends unchanged;
* backend-only bodies: the ``get_parents`` ``_search``, the ``_count`` body and the ``_bulk`` body of
  :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend` are built inline in the backend (there is
  no pure builder for them), so they are captured by calling the backend with recording clients: a tiny
  fake with ``perform_request`` (what the backend's ``send`` calls) and, for ``_bulk`` (sent through
  ``elasticsearch.helpers.streaming_bulk``, which needs a real client), a subclass of the official client
  whose ``perform_request`` records instead of sending. The probe's bodyless ``GET`` requests are
  recorded too; :func:`~tests.support.spec_check.run_tsc` lists them as skipped.

:func:`all_cases` returns the :class:`SpecCase` list; :func:`all_bodies` returns the same cases with the
settings, filter and kind each came from (used by the structural tests).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from elasticsearch.dsl import Q

from es_rag.elasticsearch.assets import (
    added_fields_request,
    index_creation_requests,
    registry_mapping_request,
    search_template_requests,
    search_template_source,
    setup_requests,
)
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.elasticsearch.bodies import neighbors_request, search_requests
from es_rag.elasticsearch.probe import privileges_request
from es_rag.elasticsearch.search_template import (
    render_search_template,
    search_template_params,
    search_template_request,
)
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.metadata import MetadataSchema, Validity, parse_filters
from es_rag.records import Chunk
from es_rag.settings import Analyzer, Settings, Similarity
from es_rag.versions.registry import (
    RegistryState,
    VersionSnapshot,
    lineage_count_requests,
    purge_requests,
    refresh_request,
    registry_index,
    registry_put_request,
    source_listing_request,
)
from tests.support.spec_check import SpecCase

QUERY = "How do I reset my password?"

# ------------------------------------------------------------------------------ configuration variants

#: Settings variants that change a rendered setup asset (name -> settings).
SETUP_VARIANTS: dict[str, Settings] = {
    "default": Settings(),
    "inference=my-e5": Settings(inference_id="my-e5"),
    # (auto is resolved before rendering: es_rag.elasticsearch.assets.resolve_analyzer; rendering it unresolved raises)
    **{f"analyzer={a.value}": Settings(analyzer=a) for a in Analyzer if a not in (Analyzer.STANDARD, Analyzer.AUTO)},
    **{f"similarity={s.value}": Settings(similarity=s) for s in Similarity if s is not Similarity.COSINE},
    "prefix=acme-kb": Settings(index_prefix="acme-kb"),
    # per-language multi-fields (es_rag.languages): none, and kuromoji for ja (the plugin's analyzer) with zh
    "languages=none": Settings(languages="none"),
    "languages=en,ja:kuromoji,zh": Settings(languages="en,ja:kuromoji,zh"),
    "dims=8": Settings(vector_dims=8),
    "dims=1024": Settings(vector_dims=1024),
    # dense_vector index_options: always explicit (9.1+ would pick bbq_hnsw at >= 384 dims), rescore where it applies
    "index=int8_hnsw": Settings(vector_index_type="int8_hnsw"),
    "index=int8_hnsw+oversample=2": Settings(vector_index_type="int8_hnsw", vector_rescore_oversample=2.0),
    "index=bbq_hnsw": Settings(vector_index_type="bbq_hnsw"),
    "index=int4_flat": Settings(vector_index_type="int4_flat"),
    "prefix=acme-kb+inference=my-e5": Settings(index_prefix="acme-kb", inference_id="my-e5"),
    # vector_mode semantic_text: semantic_text mapping with field-level chunking_settings, chunks-semantic
    # pipeline. (strategy "none" is left out: Elasticsearch's NoneChunkingSettings accepts only `strategy`,
    # while the 9.5.1 types require `max_chunk_size`; tests/unit/test_semantic_text.py pins that body.)
    "semantic_text=e5+sentence": Settings(inference_id="my-e5", vector_mode="semantic_text"),
    "semantic_text=e5+word": Settings(
        inference_id="my-e5",
        vector_mode="semantic_text",
        semantic_chunking="word",
        semantic_max_chunk_size=120,
        semantic_overlap=40,
    ),
    "semantic_text=elser+endpoint-chunking": Settings(
        inference_id=".elser-2-elasticsearch", vector_mode="semantic_text", semantic_chunking="endpoint"
    ),
}

#: Settings variants of the search bodies (name -> settings).
SEARCH_VARIANTS: dict[str, Settings] = {
    "default": Settings(),
    "weights=bm25:1,dense:2": Settings(channel_weights={"bm25": 1.0, "dense": 2.0}),
    "weights=dense:0.5": Settings(channel_weights={"dense": 0.5}),  # bm25 weight defaults to 1.0
    # QUERY is English: routed to the .en subfields by default; here the base fields
    "query-language=none": Settings(query_language="none"),
    "prefix=acme-kb": Settings(index_prefix="acme-kb"),
    "dims=8": Settings(vector_dims=8),
    "dims=1024": Settings(vector_dims=1024),
    "k=10,nc=500,rc=20": Settings(candidate_k=10, num_candidates=500, rerank_k=10, context_k=3, rank_constant=20),
}

_SCHEMA = MetadataSchema()

#: Hard filters of the search bodies (name -> filter).
FILTERS: dict[str, SearchFilter] = {
    "public-only": SearchFilter("acme"),
    "acl=support": SearchFilter("acme", ("support",)),
    # the active-version gate the pipeline adds (es_rag.versions.registry): a terms lookup in every retriever
    "acl=support+versions": SearchFilter("acme", ("support",)).with_versions(
        VersionSnapshot("acme", index=registry_index(Settings()))
    ),
    "acl=support,eng+metadata": SearchFilter(
        "globex",
        ("support", "eng"),
        # keyword fields of the chunk mapping (the mapping is `dynamic: strict`)
        metadata={"source_id": ("handbook", "faq"), "chunker_version": ("structure-v1",)},
    ),
    # seed 004's "EU regulations tag, 2023 or later", a type exclusion and a fixed validity day
    "conditions+as-of": SearchFilter(
        "acme",
        conditions=parse_filters(["tags=eu-regulation", "published>=2023", "doc_type!=draft,archived"], _SCHEMA),
        validity=Validity("2026-04-30"),
    ),
    "no-validity": SearchFilter("acme", validity=None),
    # an app's elasticsearch.dsl queries (issue 32 item 4): type-checked and placed like the built-in clauses
    "dsl-queries": SearchFilter(
        "acme",
        validity=None,
        queries=(
            Q("range", **{"meta.published": {"gte": "now-1y/d"}}) & ~Q("term", **{"meta.doc_type": "draft"}),
            {"exists": {"field": "meta.url"}},
        ),
    ),
}


#: The clauses each filter must put in every retriever, written out by hand from the requirement (tenant term, the
#: caller's groups plus ``public``, metadata terms, the version gate's terms lookup on the registry document), never
#: computed by ``SearchFilter.to_es`` -- the code under test.
_VALID_NOW = {
    "bool": {
        "must_not": [
            {"range": {"meta.valid_from": {"gt": "now/d"}}},
            {"range": {"meta.valid_to": {"lt": "now/d"}}},
        ]
    }
}
FILTER_CLAUSES: dict[str, list[dict[str, Any]]] = {
    "public-only": [{"term": {"tenant_id": "acme"}}, {"terms": {"acl": ["public"]}}, _VALID_NOW],
    "acl=support": [{"term": {"tenant_id": "acme"}}, {"terms": {"acl": ["support", "public"]}}, _VALID_NOW],
    "acl=support+versions": [
        {"term": {"tenant_id": "acme"}},
        {"terms": {"acl": ["support", "public"]}},
        _VALID_NOW,
        {
            "bool": {
                "must_not": [
                    {"terms": {"version_key": {"index": "es-rag-versions", "id": "acme", "path": "hidden"}}},
                    {"terms": {"source_id": {"index": "es-rag-versions", "id": "acme", "path": "superseded"}}},
                ]
            }
        },
    ],
    "acl=support,eng+metadata": [
        {"term": {"tenant_id": "globex"}},
        {"terms": {"acl": ["support", "eng", "public"]}},
        {"terms": {"source_id": ["handbook", "faq"]}},
        {"terms": {"chunker_version": ["structure-v1"]}},
        _VALID_NOW,
    ],
    "conditions+as-of": [
        {"term": {"tenant_id": "acme"}},
        {"terms": {"acl": ["public"]}},
        {"terms": {"meta.tags": ["eu-regulation"]}},
        {"range": {"meta.published": {"gte": "2023-01-01||/y"}}},
        {"bool": {"must_not": [{"terms": {"meta.doc_type": ["draft", "archived"]}}]}},
        {
            "bool": {
                "must_not": [
                    {"range": {"meta.valid_from": {"gt": "2026-04-30||/d"}}},
                    {"range": {"meta.valid_to": {"lt": "2026-04-30||/d"}}},
                ]
            }
        },
    ],
    "no-validity": [{"term": {"tenant_id": "acme"}}, {"terms": {"acl": ["public"]}}],
    "dsl-queries": [
        {"term": {"tenant_id": "acme"}},
        {"terms": {"acl": ["public"]}},
        {
            "bool": {
                "must": [{"range": {"meta.published": {"gte": "now-1y/d"}}}],
                "must_not": [{"term": {"meta.doc_type": "draft"}}],
            }
        },
        {"exists": {"field": "meta.url"}},
    ],
}


def literal_clauses(flt: SearchFilter) -> list[dict[str, Any]]:
    """The hand-written clauses of one of :data:`FILTERS`."""
    (name,) = [n for n, f in FILTERS.items() if f is flt]
    return FILTER_CLAUSES[name]


def query_vector(dims: int) -> list[float]:
    """A deterministic, non-zero query vector of ``dims`` components."""
    return [round(((i * 37) % 101) / 101.0 - 0.5, 4) or 0.125 for i in range(dims)]


# ------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class BodyCase:
    """One request with the context it was built from.

    Attributes:
        case: The request as a spec case.
        kind: ``pipeline``, ``component_template``, ``index_template``, ``create_index``, ``search``
            (native ``rrf``/standard retriever ``_search``), ``msearch`` (client path), ``get_parents``,
            ``neighbors`` (neighbour-expansion ``_msearch``), ``count``, ``bulk``, ``script`` (stored search
            template PUT), ``search_template``, ``lineage`` or ``probe`` (bodyless GET).
        settings: Settings the body was built with.
        flt: The hard filter of a search / get_parents / neighbors body, else None.
        asset: For setup requests the asset's file name (e.g. ``component-chunk-mappings``).
    """

    case: SpecCase
    kind: str
    settings: Settings
    flt: SearchFilter | None = None
    asset: str | None = None


#: Setup request path prefix -> (kind, asset file-name prefix).
_SETUP_KINDS = {
    "_ingest/pipeline/": ("pipeline", ""),
    "_component_template/": ("component_template", "component-"),
    "_index_template/": ("index_template", "index-"),
    "_scripts/": ("script", "search-template-"),  # search_templates/hybrid.mustache -> search-template-hybrid
}


def _setup_kind_and_asset(path: str, settings: Settings) -> tuple[str, str]:
    """Kind and asset file name of a setup request.

    ``_component_template/<prefix>-chunk-mappings`` -> ``("component_template", "component-chunk-mappings")``.
    """
    for route, (kind, file_prefix) in _SETUP_KINDS.items():
        if path.startswith(route):
            name = path[len(route) :]
            if not name.startswith(settings.index.prefix + "-"):
                raise AssertionError(f"setup request {path} does not carry the index prefix")
            return kind, file_prefix + name[len(settings.index.prefix) + 1 :]
    raise AssertionError(f"setup request {path}: unknown kind; update tests/support/spec_bodies.py")


def _case(name: str, req: EsRequest) -> SpecCase:
    return SpecCase(name, req.method, req.path, req.body)


def setup_bodies() -> list[BodyCase]:
    """Every setup and index-creation request for every :data:`SETUP_VARIANTS` entry."""
    out: list[BodyCase] = []
    for vname, settings in SETUP_VARIANTS.items():
        for req in setup_requests(settings):
            kind, asset = _setup_kind_and_asset(req.path, settings)
            out.append(BodyCase(_case(f"setup[{vname}] {kind} {asset}", req), kind, settings, asset=asset))
        for req in index_creation_requests(settings):
            out.append(BodyCase(_case(f"setup[{vname}] create index {req.path}", req), "create_index", settings))
        req = registry_mapping_request(settings)
        out.append(BodyCase(_case(f"setup[{vname}] registry mapping {req.path}", req), "put_mapping", settings))
        for kind in ("chunks", "parents"):  # the page fields of asset version 13 on an existing index
            req = added_fields_request(settings, kind)
            out.append(BodyCase(_case(f"setup[{vname}] added fields {req.path}", req), "put_mapping", settings))
    return out


QUERY_EXACT = "What does error E1042 in sync_engine.start() mean?"


def channel_bodies() -> list[BodyCase]:
    """Exact-match channel, linear fusion and the stored search template (issue 4 variants)."""
    out: list[BodyCase] = []
    fname = "acl=support,eng+metadata"
    flt = FILTERS[fname]
    variants = {
        "default": Settings(),
        "linear-minmax": Settings(fusion_method="linear", channel_weights={"dense": 2.0}),
        "linear-l2_norm": Settings(fusion_method="linear", score_normalizer="l2_norm"),
        "rrf-weighted": Settings(channel_weights={"bm25": 1.0, "dense": 1.5, "exact": 2.0}),
    }
    for sname, settings in variants.items():
        for native in (True, False):
            for with_vector in (True, False):
                vec = query_vector(settings.encoder.dims) if with_vector else None
                (req,) = search_requests(QUERY_EXACT, vec, flt, settings, native=native)
                name = (
                    f"search[{sname}] exact-channel {'native' if native else 'client msearch'} "
                    f"{'vector' if with_vector else 'no-vector'} filter={fname}"
                )
                out.append(BodyCase(_case(name, req), "search" if native else "msearch", settings, flt=flt))
        if sname.startswith("linear"):
            (req,) = search_requests(QUERY, query_vector(settings.encoder.dims), flt, settings, native=True)
            name = f"search[{sname}] native linear vector filter={fname}"
            out.append(BodyCase(_case(name, req), "search", settings, flt=flt))
    settings = Settings()
    for req in search_template_requests(settings):
        out.append(BodyCase(_case("stored search template PUT _scripts", req), "script", settings))
    for query in (QUERY, QUERY_EXACT):
        vec = query_vector(settings.encoder.dims)
        req = search_template_request(query, vec, flt, settings)
        label = "exact" if query == QUERY_EXACT else "plain"
        out.append(BodyCase(_case(f"search template call {label}", req), "search_template", settings, flt=flt))
        rendered = render_search_template(search_template_source(), search_template_params(query, vec, flt, settings))
        req = EsRequest("POST", f"{settings.chunk_index}/_search", rendered)
        out.append(BodyCase(_case(f"search template rendered {label}", req), "search", settings, flt=flt))
    return out


#: The settings of the semantic_text search bodies.
SEMANTIC_SETTINGS: dict[str, Settings] = {
    "semantic_text": Settings(inference_id="my-e5", vector_mode="semantic_text"),
    "semantic_text+weights": Settings(
        inference_id="my-e5", vector_mode="semantic_text", channel_weights={"bm25": 1.0, "dense": 2.0}
    ),
    "semantic_text+linear": Settings(inference_id="my-e5", vector_mode="semantic_text", fusion_method="linear"),
}


def semantic_bodies() -> list[BodyCase]:
    """``vector_mode=semantic_text``: the ``semantic`` query replaces kNN on both fusion paths, under
    every filter, with and without the exact channel (no client vector: the cluster embeds the query)."""
    out: list[BodyCase] = []
    for sname, settings in SEMANTIC_SETTINGS.items():
        for fname, flt in FILTERS.items():
            if sname != "semantic_text" and fname != "acl=support,eng+metadata":
                continue
            for query in (QUERY, QUERY_EXACT):
                for native in (True, False):
                    (req,) = search_requests(query, None, flt, settings, native=native)
                    name = (
                        f"search[{sname}] {'native' if native else 'client msearch'} "
                        f"{'exact-channel' if query == QUERY_EXACT else 'plain'} filter={fname}"
                    )
                    out.append(BodyCase(_case(name, req), "search" if native else "msearch", settings, flt=flt))
    return out


def search_bodies() -> list[BodyCase]:
    """Search requests of both fusion paths across settings, filters, vector presence and ``_source`` mode.

    The default settings get the full grid (path x vector x vectors_in_source_param x filter); the other
    settings variants get both paths with and without a vector, under the metadata filter.
    """
    out: list[BodyCase] = []

    def add(
        sname: str,
        settings: Settings,
        fname: str,
        flt: SearchFilter,
        *,
        native: bool,
        with_vector: bool,
        vsp: bool,
    ) -> None:
        vec = query_vector(settings.encoder.dims) if with_vector else None
        (req,) = search_requests(QUERY, vec, flt, settings, native=native, vectors_in_source_param=vsp)
        name = (
            f"search[{sname}] {'native' if native else 'client msearch'} "
            f"{'vector' if with_vector else 'bm25-only'} filter={fname} "
            f"exclude_vectors={'sent' if vsp else 'omitted'}"
        )
        out.append(BodyCase(_case(name, req), "search" if native else "msearch", settings, flt=flt))

    default = SEARCH_VARIANTS["default"]
    for fname, flt in FILTERS.items():
        for native in (True, False):
            for with_vector in (True, False):
                for vsp in (True, False):
                    add("default", default, fname, flt, native=native, with_vector=with_vector, vsp=vsp)
    fname = "acl=support,eng+metadata"
    for sname, settings in SEARCH_VARIANTS.items():
        if sname == "default":
            continue
        for native in (True, False):
            for with_vector in (True, False):
                add(sname, settings, fname, FILTERS[fname], native=native, with_vector=with_vector, vsp=True)
    out.extend(rerank_bodies())
    return out


def rerank_bodies() -> list[BodyCase]:
    """Native bodies wrapped in Elasticsearch's ``text_similarity_reranker`` (with and without ``min_score``, over
    ``rrf``, ``linear`` and a single channel) and in ``diversify`` (over the reranker and over plain fusion):
    ``TextSimilarityReranker`` and ``DiversifyRetriever`` of the official types."""
    out: list[BodyCase] = []
    flt = FILTERS["acl=support,eng+metadata"]
    rerank = Settings(rerank_inference_id="my-rerank")
    variants: list[tuple[str, Settings, bool, bool, bool]] = [
        ("rerank rrf", rerank, True, True, False),
        ("rerank rrf min_score", Settings(rerank_inference_id="my-rerank", rerank_min_score=0.25), True, True, False),
        ("rerank linear", Settings(rerank_inference_id="my-rerank", fusion_method="linear"), True, True, False),
        ("rerank bm25-only", rerank, False, True, False),
        ("diversify rerank", Settings(rerank_inference_id="my-rerank", mmr_path="native"), True, True, True),
        ("diversify rrf", Settings(mmr_path="native", rerank_model="none"), True, False, True),
    ]
    for name, settings, with_vector, es_rerank, diversify in variants:
        vec = query_vector(settings.encoder.dims) if with_vector else None
        (req,) = search_requests(QUERY, vec, flt, settings, native=True, es_rerank=es_rerank, diversify=diversify)
        out.append(BodyCase(_case(f"search[{name}] native", req), "search", settings, flt=flt))
    return out


# ------------------------------------------------------------------------------ recording clients


class RecordingClient:
    """Fake ``elasticsearch.Elasticsearch`` for :meth:`ElasticsearchBackend.send`: records every
    ``perform_request`` call and answers from ``responder(method, path, body)`` (default: an empty dict)."""

    def __init__(self, responder: Callable[[str, str, Any], Any] | None = None) -> None:
        self.calls: list[EsRequest] = []
        self._responder = responder or (lambda method, path, body: {})

    def perform_request(self, method: str, path: str, headers: Any = None, body: Any = None) -> Any:
        self.calls.append(EsRequest(method, path.lstrip("/"), body))
        return SimpleNamespace(body=self._responder(method, path, body))

    def options(self, **_options: Any) -> RecordingClient:
        """Per-call options (retries, timeouts) do not change what is recorded: the same client."""
        return self


def _probe_responder(version: str = "9.2.0", license_type: str = "trial") -> Callable[[str, str, Any], Any]:
    def respond(method: str, path: str, body: Any = None) -> Any:
        p = path.strip("/")
        if p == "":
            return {"version": {"number": version}}
        if p == "_license":
            return {"license": {"type": license_type, "status": "active"}}
        if p == "_inference/_all":
            return {"endpoints": []}
        if p == "_nodes/plugins":
            return {"nodes": {}}
        if p.endswith("/_msearch"):
            # one response per search (header + body pairs), as Elasticsearch answers
            return {"took": 1, "responses": [{"took": 1, "hits": {"hits": []}}] * (len(body or []) // 2)}
        if p.endswith("/_search"):
            return {"took": 1, "hits": {"hits": []}}
        if p.endswith("/_count"):
            return {"count": 0}
        return {}

    return respond


def backend_calls(
    settings: Settings,
    action: Callable[[ElasticsearchBackend], Any],
    *,
    version: str = "9.2.0",
    license_type: str = "trial",
) -> list[EsRequest]:
    """Run ``action`` on a backend over a :class:`RecordingClient`; return the requests it sent.

    Args:
        settings: Backend settings.
        action: Called with the backend (e.g. ``lambda b: b.count()``).
        version: Elasticsearch version the fake cluster reports to the probe.
        license_type: Licence the fake cluster reports (``trial``/``enterprise`` allow native rrf).
    """
    client = RecordingClient(_probe_responder(version, license_type))
    action(ElasticsearchBackend(client, settings))
    return client.calls


def _recording_es_class(calls: list[EsRequest]) -> type:
    """A subclass of the official client whose ``perform_request`` records into ``calls``.

    ``helpers.streaming_bulk`` needs a real client (``options()``, ``transport.serializers``, ``_otel``);
    it serialises every bulk line to bytes before ``client.bulk`` hands them to ``perform_request``.
    """
    from elasticsearch import Elasticsearch

    class _RecordingElasticsearch(Elasticsearch):
        def perform_request(
            self,
            method: str,
            path: str,
            *,
            params: Any = None,
            headers: Any = None,
            body: Any = None,
            endpoint_id: Any = None,
            path_parts: Any = None,
        ) -> Any:
            lines = [json.loads(x) if isinstance(x, (bytes, str)) else x for x in (body or [])]
            calls.append(EsRequest(method, path.lstrip("/"), lines))
            items = [
                {next(iter(line)): {"_id": next(iter(line.values())).get("_id"), "status": 201}} for line in lines[0::2]
            ]
            return SimpleNamespace(body={"took": 1, "errors": False, "items": items})

    return _RecordingElasticsearch


def _chunks(settings: Settings) -> tuple[list[Chunk], list[Chunk]]:
    common: dict[str, Any] = dict(
        source_id="handbook",
        source_version="v3",
        chunker_version="structure-v1",
        tenant_id="acme",
        acl=("support",),
        title="Account help",
        source_path="docs/handbook.md",
    )
    parent = Chunk(
        chunk_id="p-1",
        parent_id=None,
        heading_path=("Account", "Password"),
        start_offset=0,
        end_offset=120,
        text="To reset your password, open Settings > Security.",
        token_count=12,
        kind="parent",
        **common,
    )
    child = Chunk(
        chunk_id="c-1",
        parent_id="p-1",
        heading_path=("Account", "Password"),
        start_offset=0,
        end_offset=60,
        text="To reset your password, open Settings.",
        token_count=8,
        **common,
    )
    if settings.encoder.inference_id is None:  # else the ingest pipeline's inference processor / semantic_text embeds
        child = child.with_vector(
            np.asarray(query_vector(settings.encoder.dims), dtype=np.float32),
            "sentence-transformers/all-MiniLM-L6-v2@rev",
        )
    return [child], [parent]


def bulk_requests(settings: Settings) -> list[EsRequest]:
    """The ``_bulk`` request(s) :meth:`ElasticsearchBackend.index` sends for one child and one parent."""
    calls: list[EsRequest] = []
    client = _recording_es_class(calls)("http://es-rag.invalid:9200")
    children, parents = _chunks(settings)
    report = ElasticsearchBackend(client, settings).index(children, parents)
    if report.failed or report.indexed != 2:
        raise AssertionError(f"recorded bulk did not index both documents: {report}")
    return calls


def backend_bodies() -> list[BodyCase]:
    """get_parents ``_search``, ``_count``, ``_bulk`` and the probe's bodyless GETs, as the backend sends."""
    out: list[BodyCase] = []
    for sname, settings in (("default", Settings()), ("prefix=acme-kb", Settings(index_prefix="acme-kb"))):
        for fname, flt in FILTERS.items():

            def parents(b: ElasticsearchBackend, flt: SearchFilter = flt) -> Any:
                return b.get_parents(["p-1", "p-2"], flt)

            (req,) = backend_calls(settings, parents)
            out.append(
                BodyCase(
                    _case(f"backend[{sname}] get_parents filter={fname}", req),
                    "get_parents",
                    settings,
                    flt=flt,
                )
            )
        (req,) = backend_calls(settings, lambda b: b.count())
        out.append(BodyCase(_case(f"backend[{sname}] count", req), "count", settings))
    for sname, settings in (
        ("default", Settings()),
        ("inference=my-e5", Settings(inference_id="my-e5")),
        ("semantic_text=my-e5", SEMANTIC_SETTINGS["semantic_text"]),
    ):
        for i, req in enumerate(bulk_requests(settings)):
            out.append(BodyCase(_case(f"backend[{sname}] bulk #{i + 1}", req), "bulk", settings))
    settings = Settings()
    for req in backend_calls(settings, lambda b: b.probe()):
        out.append(BodyCase(_case(f"backend[default] probe GET /{req.path}", req), "probe", settings))
    return out


#: Anchors of the neighbour-expansion bodies: a child with its full lineage, and one without version
#: and parent (each leaves its term clause out of the restriction).
NEIGHBOR_ANCHORS: dict[str, list[Any]] = {
    "anchor=full": [
        SimpleNamespace(chunk_id="c-2", source_id="handbook", source_version="v3", parent_id="p-1", start_offset=120)
    ],
    "anchors=full+bare": [
        SimpleNamespace(chunk_id="c-2", source_id="handbook", source_version="v3", parent_id="p-1", start_offset=120),
        SimpleNamespace(chunk_id="c-9", source_id="faq", source_version=None, parent_id=None, start_offset=0),
    ],
}


def neighbor_bodies() -> list[BodyCase]:
    """The ``_msearch`` of neighbour expansion (:func:`es_rag.elasticsearch.bodies.neighbors_request`)
    under every filter: two searches per anchor (children before it, children after it), each under the hard filter."""
    out: list[BodyCase] = []
    settings = Settings()
    for aname, anchors in NEIGHBOR_ANCHORS.items():
        for fname, flt in FILTERS.items():
            for window in (1, 2):
                req = neighbors_request(anchors, flt, settings, window=window)
                name = f"neighbors[{aname}] window={window} filter={fname}"
                out.append(BodyCase(_case(name, req), "neighbors", settings, flt=flt))
    return out


# ------------------------------------------------------------------------------ entry points


def lineage_bodies() -> list[BodyCase]:
    """Version registry PUTs, refresh, ``_delete_by_query`` and ``_count`` of :mod:`es_rag.versions.registry` (the
    registry GET has no body to check)."""
    settings = Settings()
    state = RegistryState("acme", {"handbook": "v3"}, ["handbook@v2"])
    reqs = [
        ("registry create", registry_put_request(settings, state, seq_no=None, primary_term=None)),
        ("registry put if_seq_no", registry_put_request(settings, state, seq_no=7, primary_term=1)),
        ("refresh", refresh_request(settings)),
        *[(f"purge keys #{i}", r) for i, r in enumerate(purge_requests(settings, "acme", keys=["handbook@v2"]))],
        *[(f"delete source #{i}", r) for i, r in enumerate(purge_requests(settings, "acme", source_id="handbook"))],
        *[(f"count lineage #{i}", r) for i, r in enumerate(lineage_count_requests(settings, "acme", "handbook"))],
        ("has privileges (doctor)", privileges_request(settings)),
        ("sources listing", source_listing_request("acme", settings.chunk_index)),
        ("sources listing with pages", source_listing_request("acme", settings.chunk_index, pages=True)),
        (
            "source paths (ingest --sync)",
            source_listing_request("acme", settings.chunk_index, fields=("source_id", "source_path")),
        ),
        (
            "sources listing after",
            source_listing_request("acme", settings.parent_index, after={"source_id": "a", "source_version": "v1"}),
        ),
    ]
    return [BodyCase(_case(f"lineage[default] {name}", req), "lineage", settings) for name, req in reqs]


GENERATION = "20261201t000000-0123abcd"


def bluegreen_bodies() -> list[BodyCase]:
    """Blue-green reindex (:mod:`es_rag.elasticsearch.aliases`): a generation's index creation (the registry with its
    body given), the embedding check's aggregation search, the ``_aliases`` swap from aliases and the migration swap
    from concrete indices (``remove_index``), and the layout GET / generation DELETE (bodyless)."""
    from es_rag.elasticsearch.aliases import (
        Layout,
        delete_generation_request,
        embedding_versions_request,
        layout_request,
        swap_request,
    )

    settings = Settings()
    gen = settings.replace(index_generation=GENERATION)
    full = ["chunks", "parents", "versions"]
    aliased = Layout(
        live={r: f"es-rag-{r}-20261101t000000-0123abcd" for r in full},
        generations={GENERATION: full, "20261101t000000-0123abcd": full},
    )
    legacy = Layout(live={r: f"es-rag-{r}" for r in full}, legacy=list(full), generations={GENERATION: full})
    reqs = [
        *[(f"create generation index {r.path}", r) for r in index_creation_requests(gen)],
        ("embedding versions (live names)", embedding_versions_request(settings)),
        ("embedding versions (generation)", embedding_versions_request(gen)),
        ("swap", swap_request(settings, aliased, GENERATION)),
        ("swap migrate", swap_request(settings, legacy, GENERATION, migrate=True)),
        ("layout", layout_request(settings)),
        ("delete generation", delete_generation_request(settings, GENERATION)),
    ]
    return [BodyCase(_case(f"bluegreen[default] {name}", req), "bluegreen", gen) for name, req in reqs]


def all_bodies() -> list[BodyCase]:
    """Every body case with its context (see :class:`BodyCase`)."""
    return [
        *bluegreen_bodies(),
        *setup_bodies(),
        *search_bodies(),
        *channel_bodies(),
        *semantic_bodies(),
        *backend_bodies(),
        *neighbor_bodies(),
        *lineage_bodies(),
    ]


def all_cases() -> list[SpecCase]:
    """Every request es_rag can send, across the configuration variants, as spec cases (unique names)."""
    cases = [b.case for b in all_bodies()]
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise AssertionError(f"duplicate case names: {dupes}")
    return cases


def find_case(name: str, cases: Sequence[SpecCase] | None = None) -> SpecCase:
    """The case called ``name``."""
    for c in cases if cases is not None else all_cases():
        if c.name == name:
            return c
    raise KeyError(name)
