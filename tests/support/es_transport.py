"""A fake Elasticsearch node for unit tests of :mod:`es_rag.elasticsearch.backend`.

Built the way elasticsearch-py tests its own client (``test_elasticsearch/test_transport.py``
``DummyNode``): a :class:`elastic_transport.BaseNode` subclass passed as ``node_class=`` to
``Elasticsearch("http://localhost:9200", node_class=FakeNode)``. Everything above the node is the
real client: serialisation (JSON and NDJSON), compatibility headers, the product check, the
transport's retries, ``helpers.streaming_bulk``, ``indices.exists`` (HEAD).

The node

* records every request (:class:`RecordedRequest`: method, path, query, headers, decoded body;
  NDJSON bodies decode to a list of dicts);
* answers from a routing table keyed by ``(METHOD, path regex)``; the most recently added matching
  route wins, so a test overrides the defaults of :func:`cluster_routes` by adding its own;
* lets a route answer a *sequence* (``[(429, ...), (200, ...)]``: one per request, the last one
  repeats), a callable ``(RecordedRequest) -> (status, body)``, or an exception (e.g.
  :class:`elastic_transport.ConnectionError`) to simulate an unreachable cluster;
* always sends ``X-Elastic-Product: Elasticsearch`` (the client refuses 2xx answers without it);
* raises :class:`UnroutedRequest` (an ``AssertionError`` that no layer swallows) for a request no
  route matches, so a test never passes on an answer nobody wrote.

Canned bodies below copy the shapes of real Elasticsearch 8.x/9.x responses (REST API docs and the
YAML REST tests of elastic/elasticsearch): root info, ``_license``, ``_inference/_all``,
``_nodes/plugins``, ``_index_template``, ``_component_template``, ``_ingest/pipeline``, ``_search``,
``_msearch`` (with an item error), ``_bulk`` (per-item errors, including the
``fail_processor_exception`` an ingest ``fail`` processor produces), the 403 that the
``rrf`` retriever answers on a non-compliant licence
(``LicenseUtils.newComplianceException("Reciprocal Rank Fusion (RRF)")``) and the 429
``es_rejected_execution_exception``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_transport import ApiResponseMeta, BaseNode, HttpHeaders, NodeConfig
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport._node import NodeApiResponse
from elasticsearch import Elasticsearch

from es_rag.elasticsearch.aliases import embedding_versions_request, layout_request
from es_rag.elasticsearch.assets import (
    ASSET_VERSION,
    SCRIPT_VERSION_RE,
    obsolete_asset_paths,
    resolved_settings,
    setup_requests,
)
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.settings import Analyzer, Settings

ES_JSON = "application/vnd.elasticsearch+json;compatible-with=9"
"""Content-Type a 9.x server answers with when the request asked for compatibility mode."""

Body = Mapping[str, Any] | Sequence[Any] | bytes | str | None
Canned = tuple[int, Body]
Responder = Canned | Callable[["RecordedRequest"], Canned] | BaseException
RouteValue = Responder | list[Responder]


class UnroutedRequest(AssertionError):
    """A request reached the fake node and no route answers it."""


@dataclass
class RecordedRequest:
    """One request as the node received it."""

    method: str
    path: str
    """Path without the query string, with its leading slash (``/es-rag-chunks/_search``)."""
    query: str
    headers: dict[str, str]
    """Lower-cased header names."""
    body: Any
    """Decoded body: a dict, a list of dicts for NDJSON, None when empty."""
    raw: bytes | None

    @property
    def line(self) -> str:
        """``METHOD /path`` (handy in assertion messages)."""
        return f"{self.method} {self.path}"


@dataclass
class _Route:
    method: str
    pattern: re.Pattern[str]
    responders: list[Responder]
    hits: int = 0

    def next(self) -> Responder:
        responder = self.responders[min(self.hits, len(self.responders) - 1)]
        self.hits += 1
        return responder


def _decode(raw: bytes | None, content_type: str) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8")
    if "ndjson" in content_type:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _encode(body: Body) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body).encode("utf-8")


class FakeNode(BaseNode):
    """A node that records requests and answers them from a routing table (see module docstring)."""

    def __init__(self, config: NodeConfig):
        super().__init__(config)
        self.requests: list[RecordedRequest] = []
        self._routes: list[_Route] = []
        self.product_header = True
        self.server_major: int | None = None
        """Set to 8 to answer like an 8.x server: requests sent with ``compatible-with=9`` headers get
        the HTTP 400 ``media_type_header_exception`` before any route is consulted."""

    # -- configuration ---------------------------------------------------------------------------
    def route(self, method: str, path_regex: str, value: RouteValue) -> FakeNode:
        """Answer ``method`` requests whose path (no query string, leading ``/`` optional in the regex)
        fully matches ``path_regex``. ``value``: ``(status, body)``, a callable, an exception, or a
        list of those answered in order (the last one repeats). Later routes win over earlier ones.
        """
        responders = list(value) if isinstance(value, list) else [value]
        if not responders:
            raise ValueError("a route needs at least one response")
        pattern = re.compile("/?" + path_regex.lstrip("/"))
        self._routes.append(_Route(method.upper(), pattern, responders))
        return self

    def queue(self, method: str, path_regex: str, *responses: Responder) -> FakeNode:
        """Answer the next requests to this route with ``responses`` in order (the last one repeats)."""
        return self.route(method, path_regex, list(responses))

    def routes(self, table: Mapping[tuple[str, str], RouteValue]) -> FakeNode:
        """Add a whole routing table ``{(METHOD, path_regex): value}`` (in its order)."""
        for (method, path_regex), value in table.items():
            self.route(method, path_regex, value)
        return self

    def connection_error(
        self, method: str = ".*", path_regex: str = ".*", message: str = "Connection refused"
    ) -> FakeNode:
        """Make matching requests fail as if the TCP connection were refused."""
        exc = TransportConnectionError(f"[Errno 111] {message}")
        self._routes.append(_Route(method, re.compile("/?" + path_regex.lstrip("/")), [exc]))
        return self

    # -- inspection ------------------------------------------------------------------------------
    def calls(self, method: str | None = None, path_regex: str | None = None) -> list[RecordedRequest]:
        """Recorded requests, optionally only those matching ``method`` and ``path_regex`` (full match)."""
        pattern = re.compile("/?" + path_regex.lstrip("/")) if path_regex is not None else None
        return [
            r
            for r in self.requests
            if (method is None or r.method == method.upper()) and (pattern is None or pattern.fullmatch(r.path))
        ]

    def lines(self) -> list[str]:
        """Every request as ``METHOD /path``, in order."""
        return [r.line for r in self.requests]

    def reset(self) -> None:
        """Forget the recorded requests (routes stay)."""
        self.requests.clear()

    # -- BaseNode ---------------------------------------------------------------------------------
    def perform_request(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: HttpHeaders | None = None,
        request_timeout: Any = None,
    ) -> NodeApiResponse:
        path, _, query = target.partition("?")
        hdrs = {k.lower(): v for k, v in (headers or {}).items()}
        rec = RecordedRequest(
            method=method.upper(),
            path=path,
            query=query,
            headers=hdrs,
            body=_decode(body, hdrs.get("content-type", "")),
            raw=body,
        )
        self.requests.append(rec)
        if (
            self.server_major is not None
            and self.server_major < 9
            and any("compatible-with=9" in hdrs.get(h, "") for h in ("accept", "content-type"))
        ):
            return self._answer(rec, (400, media_type_header_error(self.server_major)))
        for r in reversed(self._routes):
            if re.fullmatch(r.method, rec.method) and r.pattern.fullmatch(path):
                responder = r.next()
                break
        else:
            raise UnroutedRequest(
                f"FakeNode: no route for {rec.line} (query {query!r}); requests so far: {self.lines()}"
            )
        if isinstance(responder, BaseException):
            # a fresh instance per request: the transport chains retried errors onto the one it raises
            raise type(responder)(*responder.args)
        return self._answer(rec, responder(rec) if callable(responder) else responder)

    def _answer(self, rec: RecordedRequest, canned: Canned) -> NodeApiResponse:
        status, payload = canned
        resp_headers = {"content-type": ES_JSON}
        if self.product_header:
            resp_headers["x-elastic-product"] = "Elasticsearch"
        raw = b"" if rec.method == "HEAD" else _encode(payload)
        meta = ApiResponseMeta(
            status=status, http_version="1.1", headers=HttpHeaders(resp_headers), duration=0.0, node=self.config
        )
        return NodeApiResponse(meta, raw)


# ---------------------------------------------------------------------------------------------
# canned bodies (shapes of real Elasticsearch responses)
# ---------------------------------------------------------------------------------------------
def error_body(
    status: int, err_type: str, reason: str, *, caused_by: Mapping[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """The REST error envelope: ``{"error": {"root_cause": [...], "type", "reason", ...}, "status"}``."""
    cause = {"type": err_type, "reason": reason, **extra}
    error: dict[str, Any] = {"root_cause": [dict(cause)], **cause}
    if caused_by is not None:
        error["caused_by"] = dict(caused_by)
    return {"error": error, "status": status}


def root_info(version: str = "9.1.0") -> dict[str, Any]:
    """``GET /``."""
    major = int(version.split(".")[0])
    return {
        "name": "es01",
        "cluster_name": "docker-cluster",
        "cluster_uuid": "j0XJe4VNTvq-AMbjasX_hg",
        "version": {
            "number": version,
            "build_flavor": "default",
            "build_type": "docker",
            "build_hash": "ca1a70216fbdefbef3c65b1dff04903ea5964ef5",
            "build_date": "2025-08-11T15:04:41.449624592Z",
            "build_snapshot": False,
            "lucene_version": "10.2.2" if major >= 9 else "9.12.0",
            "minimum_wire_compatibility_version": "8.19.0" if major >= 9 else "7.17.0",
            "minimum_index_compatibility_version": "8.0.0" if major >= 9 else "7.0.0",
        },
        "tagline": "You Know, for Search",
    }


def license_info(license_type: str = "trial", status: str = "active") -> dict[str, Any]:
    """``GET _license`` (basic licences have no expiry date)."""
    lic: dict[str, Any] = {
        "status": status,
        "uid": "cbff45e7-c553-41f7-ae4f-9205eabd80xx",
        "type": license_type,
        "issue_date": "2025-10-20T22:05:12.332Z",
        "issue_date_in_millis": 1760997912332,
        "max_nodes": 1000,
        "max_resource_units": None,
        "issued_to": "docker-cluster",
        "issuer": "elasticsearch",
        "start_date_in_millis": -1,
    }
    if license_type != "basic":
        lic["expiry_date"] = "2025-11-19T22:05:12.332Z"
        lic["expiry_date_in_millis"] = 1763589912332
    if license_type == "enterprise":
        lic["max_nodes"] = None
        lic["max_resource_units"] = 20
    return {"license": lic}


def inference_all(
    ids: Iterable[str] = (".elser-2-elasticsearch", ".multilingual-e5-small-elasticsearch"),
) -> dict[str, Any]:
    """``GET _inference/_all``: the preconfigured endpoints of a 9.x cluster."""
    endpoints = []
    for inference_id in ids:
        sparse = "elser" in inference_id
        endpoints.append(
            {
                "inference_id": inference_id,
                "task_type": "sparse_embedding" if sparse else "text_embedding",
                "service": "elasticsearch",
                "service_settings": {
                    "num_threads": 1,
                    "model_id": ".elser_model_2" if sparse else ".multilingual-e5-small",
                    "adaptive_allocations": {
                        "enabled": True,
                        "min_number_of_allocations": 0,
                        "max_number_of_allocations": 32,
                    },
                },
                "chunking_settings": {"strategy": "sentence", "max_chunk_size": 250, "sentence_overlap": 1},
            }
        )
    return {"endpoints": endpoints}


def nodes_plugins(plugins: Iterable[str] = (), version: str = "9.1.0") -> dict[str, Any]:
    """``GET _nodes/plugins`` with the given plugin names installed on the single node."""
    infos = [
        {
            "name": name,
            "version": version,
            "elasticsearch_version": version,
            "java_version": "21",
            "description": {
                "analysis-kuromoji": "The Japanese (kuromoji) Analysis plugin integrates Lucene kuromoji "
                "analysis module into elasticsearch.",
                "analysis-icu": "The ICU Analysis plugin integrates the Lucene ICU module into Elasticsearch, "
                "adding ICU-related analysis components.",
            }.get(name, f"The {name} plugin."),
            "classname": "org.elasticsearch.plugin.analysis." + name.split("-", 1)[-1] + ".Plugin",
            "extended_plugins": [],
            "has_native_controller": False,
            "licensed": False,
        }
        for name in plugins
    ]
    return {
        "_nodes": {"total": 1, "successful": 1, "failed": 0},
        "cluster_name": "docker-cluster",
        "nodes": {
            "SRZpKFZdQguhhvifmN6UVA": {
                "name": "es01",
                "transport_address": "172.18.0.2:9300",
                "host": "172.18.0.2",
                "ip": "172.18.0.2",
                "version": version,
                "build_flavor": "default",
                "build_type": "docker",
                "build_hash": "ca1a70216fbdefbef3c65b1dff04903ea5964ef5",
                "roles": ["data", "ingest", "master", "ml", "transform"],
                "attributes": {"ml.config_version": "12.0.0", "xpack.installed": "true"},
                "plugins": infos,
                "modules": [
                    {
                        "name": "ingest-common",
                        "version": version,
                        "elasticsearch_version": version,
                        "java_version": "21",
                        "description": "Module for ingest processors that do not "
                        "require additional security permissions or have large dependencies and resources",
                        "classname": "org.elasticsearch.ingest.common.IngestCommonPlugin",
                        "extended_plugins": ["lang-painless"],
                        "has_native_controller": False,
                        "licensed": False,
                    }
                ],
            }
        },
    }


def acknowledged() -> dict[str, Any]:
    """PUT of a template or a pipeline."""
    return {"acknowledged": True}


def index_created(index: str) -> dict[str, Any]:
    """``PUT <index>``."""
    return {"acknowledged": True, "shards_acknowledged": True, "index": index}


def index_already_exists(index: str) -> dict[str, Any]:
    """``PUT <index>`` when it exists (HTTP 400)."""
    return error_body(
        400,
        "resource_already_exists_exception",
        f"index [{index}/S9Jz0Uq5SJuH8h0_Cu1dNg] already exists",
        index_uuid="S9Jz0Uq5SJuH8h0_Cu1dNg",
        index=index,
    )


def index_template_got(name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET _index_template/<name>``."""
    return {"index_templates": [{"name": name, "index_template": copy.deepcopy(dict(body))}]}


def index_template_missing(name: str) -> dict[str, Any]:
    """``GET _index_template/<name>`` on a missing template (HTTP 404)."""
    return error_body(404, "resource_not_found_exception", f"index template matching [{name}] not found")


def component_template_got(name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET _component_template/<name>``."""
    return {"component_templates": [{"name": name, "component_template": copy.deepcopy(dict(body))}]}


def component_template_missing(name: str) -> dict[str, Any]:
    """``GET _component_template/<name>`` on a missing template (HTTP 404)."""
    return error_body(404, "resource_not_found_exception", f"component template matching [{name}] not found")


def pipeline_got(pipeline_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``GET _ingest/pipeline/<id>``: the definitions keyed by id."""
    return {pipeline_id: copy.deepcopy(dict(body))}


def script_got(script_id: str, put_body: Mapping[str, Any], version: int | None = ASSET_VERSION) -> dict[str, Any]:
    """``GET _scripts/<id>`` of a stored mustache template installed with ``put_body``; its leading
    ``{{! es_rag asset_version N }}`` marker says ``version`` (None: no marker, as a hand-made install)."""
    source = str(put_body["script"]["source"])
    source = SCRIPT_VERSION_RE.sub("", source, count=1).lstrip("\n")
    if version is not None:
        source = f"{{{{! es_rag asset_version {version} }}}}\n{source}"
    return {"_id": script_id, "found": True, "script": {"lang": put_body["script"]["lang"], "source": source}}


def script_missing(script_id: str) -> dict[str, Any]:
    """``GET _scripts/<id>`` of a script that does not exist (HTTP 404)."""
    return {"_id": script_id, "found": False}


PIPELINE_MISSING: dict[str, Any] = {}
"""``GET _ingest/pipeline/<id>`` on a missing pipeline answers HTTP 404 with an empty object."""


def hit(doc: Mapping[str, Any], score: float | None, *, index: str = "es-rag-chunks") -> dict[str, Any]:
    """One ``hits.hits`` entry; ``_id`` is the chunk id (the ingest pipeline sets it)."""
    return {"_index": index, "_id": str(doc["chunk_id"]), "_score": score, "_source": dict(doc)}


def search_response(hits: Sequence[Mapping[str, Any]], *, took: int = 4) -> dict[str, Any]:
    """A ``_search`` response around ``hits`` (entries built by :func:`hit`)."""
    scores = [h["_score"] for h in hits if h.get("_score") is not None]
    return {
        "took": took,
        "timed_out": False,
        "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
        "hits": {
            "total": {"value": len(hits), "relation": "eq"},
            "max_score": max(scores) if scores else None,
            "hits": [dict(h) for h in hits],
        },
    }


def msearch_response(items: Sequence[Mapping[str, Any]], *, took: int = 7) -> dict[str, Any]:
    """An ``_msearch`` response: each item a search response with ``status`` or an error object."""
    responses = []
    for item in items:
        item = dict(item)
        item.setdefault("status", 200)
        responses.append(item)
    return {"took": took, "responses": responses}


def knn_dims_mismatch_error(index: str = "es-rag-chunks", query_dims: int = 3, doc_dims: int = 384) -> dict[str, Any]:
    """What a kNN search with a wrong-sized query vector answers (as a whole response or an _msearch item)."""
    reason = (
        f"The query vector has a different number of dimensions [{query_dims}] than the document vectors [{doc_dims}]."
    )
    iae = {"type": "illegal_argument_exception", "reason": reason}
    body = error_body(
        400,
        "search_phase_execution_exception",
        "all shards failed",
        caused_by={**iae, "caused_by": dict(iae)},
        phase="dfs",
        grouped=True,
        failed_shards=[{"shard": 0, "index": index, "node": "SRZpKFZdQguhhvifmN6UVA", "reason": dict(iae)}],
    )
    body["error"]["root_cause"] = [dict(iae)]
    return body


def index_not_found_error(index: str = "es-rag-chunks") -> dict[str, Any]:
    """Search on a missing index (HTTP 404)."""
    meta: dict[str, Any] = {
        "resource.type": "index_or_alias",
        "resource.id": index,
        "index_uuid": "_na_",
        "index": index,
    }
    return error_body(404, "index_not_found_exception", f"no such index [{index}]", **meta)


RRF_FEATURE = "Reciprocal Rank Fusion (RRF)"


def rrf_license_error() -> dict[str, Any]:
    """HTTP 403 of ``RRFRetrieverBuilder.fromXContent`` on a licence without the feature
    (``LicenseUtils.newComplianceException`` -> ``security_exception`` with ``license.expired.feature``)."""
    meta: dict[str, Any] = {"license.expired.feature": RRF_FEATURE}
    return error_body(403, "security_exception", f"current license is non-compliant for [{RRF_FEATURE}]", **meta)


def unauthorized_error(index: str = "es-rag-chunks") -> dict[str, Any]:
    """HTTP 403 that is about privileges, not the licence."""
    return error_body(
        403,
        "security_exception",
        f"action [indices:data/read/search] is unauthorized for user [rag_reader] with "
        f"effective roles [rag_reader] on indices [{index}], this action is granted by the "
        f"index privileges [read,all]",
    )


def rejected_execution_error() -> dict[str, Any]:
    """HTTP 429 of a whole request rejected by a full thread pool queue."""
    return error_body(
        429,
        "es_rejected_execution_exception",
        "rejected execution of org.elasticsearch.action.support.replication."
        "TransportWriteAction$1@6c1b5b5 on EsThreadPoolExecutor[name = es01/write, "
        "queue capacity = 10000, org.elasticsearch.common.util.concurrent.EsThreadPoolExecutor"
        "@3b5a2d9b[Running, pool size = 8, active threads = 8, queued tasks = 10000, "
        "completed tasks = 2031781]]",
    )


def media_type_header_error(server_major: int = 8) -> dict[str, Any]:
    """HTTP 400 of an 8.x server to a request sent with ``compatible-with=9`` headers."""
    return error_body(
        400,
        "media_type_header_exception",
        "Invalid media-type value on headers [Accept, Content-Type]",
        caused_by={
            "type": "status_exception",
            "reason": f"Accept version must be either version {server_major} or "
            f"{server_major - 1}, but found 9. "
            "Accept=application/vnd.elasticsearch+json; compatible-with=9",
        },
    )


# -- _bulk ------------------------------------------------------------------------------------
def bulk_item_ok(index: str, doc_id: str, *, op: str = "index", seq_no: int = 0) -> dict[str, Any]:
    """A successful ``_bulk`` item."""
    return {
        op: {
            "_index": index,
            "_id": doc_id,
            "_version": 1,
            "result": "created",
            "_shards": {"total": 2, "successful": 1, "failed": 0},
            "_seq_no": seq_no,
            "_primary_term": 1,
            "status": 201,
        }
    }


def bulk_item_fail_processor(index: str, doc_id: str, message: str, *, op: str = "index") -> dict[str, Any]:
    """A ``_bulk`` item refused by an ingest ``fail`` processor (status 500, ``fail_processor_exception``)."""
    return {
        op: {
            "_index": index,
            "_id": doc_id,
            "status": 500,
            "error": {"type": "fail_processor_exception", "reason": message},
        }
    }


def fail_processor_message(field_name: str, chunk_id: str, source_id: str, what: str = "chunk") -> str:
    """The message es_rag's pipeline ``fail`` processors render (see ingest_pipelines/_lineage.j2)."""
    return (
        f"es_rag: {what} document (chunk_id '{chunk_id}', source_id '{source_id}') "
        f"is missing required field '{field_name}'"
    )


def bulk_item_rejected(index: str, doc_id: str, *, op: str = "index") -> dict[str, Any]:
    """A ``_bulk`` item rejected by a full write queue (status 429)."""
    err = rejected_execution_error()["error"]
    return {
        op: {"_index": index, "_id": doc_id, "status": 429, "error": {"type": err["type"], "reason": err["reason"]}}
    }


def bulk_response(items: Sequence[Mapping[str, Any]], *, took: int = 30, ingest_took: int = 2) -> dict[str, Any]:
    """A ``_bulk`` response; ``errors`` is true when any item has an ``error``."""
    errors = any("error" in next(iter(item.values())) for item in items)
    return {"errors": errors, "took": took, "ingest_took": ingest_took, "items": [dict(i) for i in items]}


def bulk_actions(req: RecordedRequest) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """``(op, action metadata, source)`` per action of a recorded ``_bulk`` request."""
    lines = list(req.body or [])
    out = []
    i = 0
    while i < len(lines):
        op, meta = next(iter(lines[i].items()))
        src = None
        if op != "delete":
            src = lines[i + 1]
            i += 1
        out.append((op, meta, src))
        i += 1
    return out


def bulk_responder(
    item_for: Callable[[str, dict[str, Any], dict[str, Any] | None], Mapping[str, Any] | None] = lambda op, meta, src: (
        None
    ),
) -> Callable[[RecordedRequest], Canned]:
    """A ``_bulk`` route answering each action of the request: ``item_for(op, meta, source)`` returns a
    custom item or None for a plain success."""

    def respond(req: RecordedRequest) -> Canned:
        items = []
        for seq, (op, meta, src) in enumerate(bulk_actions(req)):
            custom = item_for(op, meta, src)
            items.append(
                dict(custom)
                if custom is not None
                else bulk_item_ok(meta.get("_index", "?"), str(meta.get("_id")), op=op, seq_no=seq)
            )
        return 200, bulk_response(items)

    return respond


# ---------------------------------------------------------------------------------------------
# routing tables and the backend factory
# ---------------------------------------------------------------------------------------------
def installed_asset_routes(
    settings: Settings,
    *,
    version: int | None = ASSET_VERSION,
    missing: Iterable[str] = (),
    plugins: Iterable[str] = (),
) -> dict[tuple[str, str], RouteValue]:
    """GET routes for every asset of :func:`es_rag.elasticsearch.assets.setup_requests`, answering the rendered body
    with ``_meta.version`` set to ``version`` (None: no ``_meta.version``; the stored script carries the
    version in its source marker instead); paths in ``missing`` answer 404. ``analyzer=auto`` is installed
    as ``setup`` would resolve it on a cluster with ``plugins``.
    """
    table: dict[tuple[str, str], RouteValue] = {}
    missing = set(missing)
    if settings.index.analyzer is Analyzer.AUTO:  # what setup would have installed on this cluster
        settings = resolved_settings(settings, plugins=plugins)
    for req in setup_requests(settings):
        name = req.path.rsplit("/", 1)[-1]
        body = copy.deepcopy(req.body)
        if req.path.startswith("_scripts/"):
            table[("GET", re.escape(req.path))] = (
                (404, script_missing(name)) if req.path in missing else (200, script_got(name, body, version))
            )
            continue
        if version is None:
            body.get("_meta", {}).pop("version", None)
        else:
            body.setdefault("_meta", {})["version"] = version
        if req.path.startswith("_ingest/pipeline/"):
            got: Canned = (404, PIPELINE_MISSING) if req.path in missing else (200, pipeline_got(name, body))
        elif req.path.startswith("_component_template/"):
            got = (
                (404, component_template_missing(name))
                if req.path in missing
                else (200, component_template_got(name, body))
            )
        else:
            got = (404, index_template_missing(name)) if req.path in missing else (200, index_template_got(name, body))
        table[("GET", re.escape(req.path))] = got
    return table


def cluster_routes(
    settings: Settings | None = None,
    *,
    version: str = "9.1.0",
    license_type: str = "trial",
    license_status: str = "active",
    plugins: Iterable[str] = (),
    asset_version: int | None = ASSET_VERSION,
    missing_assets: Iterable[str] = (),
    inference_ids: Iterable[str] = (".elser-2-elasticsearch", ".multilingual-e5-small-elasticsearch"),
) -> dict[tuple[str, str], RouteValue]:
    """Everything :meth:`ElasticsearchBackend.probe` asks, answered for one cluster."""
    settings = settings or Settings()
    plugins = list(plugins)
    table: dict[tuple[str, str], RouteValue] = {
        ("GET", ""): (200, root_info(version)),
        ("GET", "_license"): (200, license_info(license_type, license_status)),
        ("GET", "_inference/_all"): (200, inference_all(inference_ids)),
        ("GET", "_nodes/plugins"): (200, nodes_plugins(plugins, version)),
        ("GET", "_index_template"): (200, {"index_templates": []}),
        ("POST", "_security/user/_has_privileges"): has_privileges_answer("elastic", granted=True),
    }
    # the index section of doctor: the layout setup creates (concrete indices) and an empty chunk index
    table[("GET", re.escape(layout_request(settings).path))] = (
        200,
        {f"{settings.index.prefix}-{role}": {"aliases": {}} for role in ("chunks", "parents", "versions")},
    )
    table[("POST", re.escape(embedding_versions_request(settings).path))] = (
        200,
        {
            "took": 1,
            "hits": {"total": {"value": 0, "relation": "eq"}, "hits": []},
            "aggregations": {
                "versions": {"buckets": []},
                "unversioned": {"doc_count": 0},
                "indices": {"buckets": []},
            },
        },
    )
    for path in obsolete_asset_paths(settings):
        table[("GET", re.escape(path))] = (404, component_template_missing(path.rsplit("/", 1)[-1]))
    table.update(installed_asset_routes(settings, version=asset_version, missing=missing_assets, plugins=plugins))
    return table


def has_privileges_answer(username: str, *, granted: bool) -> Callable[[RecordedRequest], Canned]:
    """``POST _security/user/_has_privileges`` answering every requested privilege with ``granted``
    (``TransportHasPrivilegesAction``: ``{"username", "has_all_requested", "cluster", "index", "application"}``)."""

    def respond(req: RecordedRequest) -> Canned:
        body = req.body or {}
        cluster = {c: granted for c in body.get("cluster", [])}
        index = {
            name: {p: granted for p in entry.get("privileges", [])}
            for entry in body.get("index", [])
            for name in entry.get("names", [])
        }
        return 200, {
            "username": username,
            "has_all_requested": granted,
            "cluster": cluster,
            "index": index,
            "application": {},
        }

    return respond


def make_client(**client_kwargs: Any) -> tuple[Elasticsearch, FakeNode]:
    """A real ``Elasticsearch`` client whose only node is a :class:`FakeNode`."""
    client = Elasticsearch("http://localhost:9200", node_class=FakeNode, **client_kwargs)
    node = client.transport.node_pool.all()[0]
    assert isinstance(node, FakeNode)
    return client, node


def make_backend(
    settings: Settings | None = None, routes: Mapping[tuple[str, str], RouteValue] | None = None, **client_kwargs: Any
) -> tuple[ElasticsearchBackend, FakeNode]:
    """An :class:`ElasticsearchBackend` on a fake cluster; ``routes`` defaults to :func:`cluster_routes`
    (a 9.1 trial cluster with current assets). Add or override routes later with ``node.route``."""
    settings = settings or Settings()
    client, node = make_client(**client_kwargs)
    node.routes(cluster_routes(settings) if routes is None else routes)
    return ElasticsearchBackend(client, settings), node
