"""What a probe learns about a cluster and what it decides: the :class:`Capabilities` record (version, licence,
plugins, inference endpoints, installed assets and analyzers, privileges), native fusion by version and licence,
``semantic_text`` support, inference endpoint problems, and the privileges es_rag's requests need. Pure
functions over the probe's answers; :meth:`es_rag.elasticsearch.cluster.ClusterClient.probe` sends the requests."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from es_rag.elasticsearch.assets import SCRIPT_VERSION_RE
from es_rag.es_request import EsRequest
from es_rag.settings import Settings
from es_rag.settings.indexing import since_9_1_or_8_19
from es_rag.versions.registry import registry_index

UNKNOWN_VERSION = "unknown"
"""``Capabilities.version`` when ``GET /`` is not allowed (no ``monitor`` privilege)."""


ASSET_PRIVILEGE = {
    "_ingest": "cluster privilege read_pipeline or manage_pipeline",
    "_component_template": "cluster privilege manage_index_templates or monitor",
    "_index_template": "cluster privilege manage_index_templates or monitor",
    "_scripts": "cluster privilege manage",
}


ROLE_PRIVILEGES: dict[str, dict[str, list[str]]] = {
    "search": {"cluster": [], "index": ["read"]},
    "es_rerank": {"cluster": ["monitor", "monitor_inference"], "index": ["read"]},
    "ingest": {"cluster": [], "index": ["read", "write", "maintenance"]},
    "setup": {"cluster": ["manage"], "index": ["create_index", "view_index_metadata", "indices:admin/mapping/put"]},
    "reindex": {
        "cluster": ["manage"],
        "index": ["read", "write", "maintenance", "create_index", "view_index_metadata", "manage", "delete_index"],
    },
}
"""The least privileges of each use, on the chunk, parent and registry indices (docs/cluster.md):

* search: ``read`` (searches, parents, neighbours, the registry GET);
* es_rerank: a search with ``--rerank-inference-id`` wraps the native fusion retriever, which needs cluster
  ``monitor`` (the version and licence), and ``text_similarity_reranker`` runs ``GetInferenceModelAction``
  (``cluster:monitor/xpack/inference/get``) as the caller (``TextSimilarityRankFeaturePhaseRankCoordinatorContext``):
  ``monitor_inference``, which ``monitor`` includes and a role of action patterns may lack;
* ingest: ``read`` (registry, delete-by-query's search), ``write`` (bulk, registry writes, deletes) and
  ``maintenance`` (the refresh before a version switch);
* setup: cluster ``manage`` (templates, pipelines, and the stored script, which only ``manage`` allows), index
  ``create_index`` and ``view_index_metadata`` (whether the indices exist), and the action
  ``indices:admin/mapping/put``: setup adds the fields of later asset versions to indices that exist
  (``PUT <index>/_mapping``), which of the named index privileges only ``manage`` grants (``indices:admin/*``), and
  ``manage`` also deletes indices. A role may name an index action as a privilege (``IndexPrivilege.resolve``: a name
  ``ACTION_MATCHER`` accepts becomes ``actionToPattern(name)``), and ``_has_privileges`` resolves it the same way;
* reindex: setup's and ingest's privileges for the new generation, index ``manage`` (``POST _aliases`` needs
  ``indices:admin/aliases`` on the indices) and ``delete_index`` (``--migrate`` and ``--cleanup`` delete indices).

Cluster ``monitor`` is optional everywhere: without it the probe cannot read the version or the licence (client
fusion, version features learned from answers) and delete-by-query runs in the foreground instead of as a task."""


def privileges_request(settings: Settings) -> EsRequest:
    """``POST _security/user/_has_privileges`` asking for every privilege of :data:`ROLE_PRIVILEGES` (and
    ``monitor``) on the chunk, parent and registry indices (``SecurityHasPrivilegesRequest``).

    Args:
        settings: Gives the index names.
    """
    names = [settings.chunk_index, settings.parent_index, registry_index(settings)]
    index_privs = sorted({p for role in ROLE_PRIVILEGES.values() for p in role["index"]})
    cluster_privs = sorted({p for role in ROLE_PRIVILEGES.values() for p in role["cluster"]} | {"monitor"})
    body = {"cluster": cluster_privs, "index": [{"names": names, "privileges": index_privs}]}
    return EsRequest("POST", "_security/user/_has_privileges", body)


NATIVE_RRF_MIN_VERSION = (8, 16)


def exclude_vectors_accepted(version: tuple[int, ...]) -> bool:
    """Whether a search's ``_source.exclude_vectors`` parses on ``version``: 9.1+ and 8.19
    (``FetchSourceContext.EXCLUDE_VECTORS_FIELD``, transport version ``search_source_exclude_vectors_param``
    9092000 / 8841046, inside 9.1's and 8.19's ranges); 9.0 and 8.18 refuse the unknown key. 9.2 is where new
    indices leave vectors out of ``_source`` by default (``index.mapping.exclude_source_vectors``), so es_rag sends
    ``exclude_vectors: false`` wherever the key parses.

    Args:
        version: ``(major, minor, ...)``.
    """
    return since_9_1_or_8_19(version)


NATIVE_RRF_LICENSES = {"enterprise", "trial"}


SEMANTIC_TEXT_LICENSES = {"enterprise", "trial"}
"""Licences on which Elasticsearch runs ``semantic_text`` inference at index time for every inference
service (``ShardBulkInferenceActionFilter`` checks ``InferencePlugin.INFERENCE_API_FEATURE``, an
Enterprise feature); recent versions license the Elastic Inference Service (service ``elastic``) on Basic."""


SEMANTIC_TEXT_TASK_TYPES = {"text_embedding", "sparse_embedding"}
"""Inference task types a ``semantic_text`` field accepts."""


def version_tuple(number: str) -> tuple[int, ...]:
    parts = []
    for piece in number.split("-")[0].split("."):
        if piece.isdigit():
            parts.append(int(piece))
    return tuple(parts)


@dataclass
class Capabilities:
    """What the probe found and which path each stage will take."""

    version: str
    license_type: str
    license_status: str
    native_rrf: bool
    native_rrf_reason: str
    vectors_in_source_param: bool | None
    """Whether searches send ``_source.exclude_vectors`` (9.1+, 8.19); None when the version is unknown (learned
    from the first search's answer)."""
    inference_endpoints: list[str] = field(default_factory=list)
    inference_endpoint_info: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per endpoint id: ``task_type`` and ``service`` as ``GET _inference/_all`` reports them."""
    analysis_plugins: list[str] = field(default_factory=list)
    installed_assets: dict[str, int | None] = field(default_factory=dict)
    installed_analyzers: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per installed component (``chunks``, ``parents``): text field -> the analyzer it uses as installed (custom
    analyzers resolved through the component's own analysis settings), see :func:`installed_text_analyzers`."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """GET path -> why the probe could not read it (a 403: the privilege it needs)."""
    es_rerank_refused: str | None = None
    """Why the cluster refused the ``text_similarity_reranker`` retriever (a licence 403, an unknown retriever),
    learned at query time; from then on this backend reranks with the local cross-encoder."""
    diversify_refused: str | None = None
    """Why the cluster refused the ``diversify`` retriever, learned at query time (then: client MMR)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def decide_native_rrf(version: str, license_type: str, license_status: str) -> tuple[bool, str]:
    """Whether the native ``rrf`` retriever may be used, and why.

    Args:
        version: Elasticsearch version number.
        license_type: ``basic``, ``trial``, ``enterprise``, ...
        license_status: ``active`` or ``expired``.
    """
    if version == UNKNOWN_VERSION:
        return False, "version unknown (GET / needs the cluster privilege monitor): client fusion"
    if version_tuple(version) < NATIVE_RRF_MIN_VERSION:
        return False, f"Elasticsearch {version} < 8.16 has no rrf retriever"
    if license_status != "active":
        return False, f"licence {license_type} is {license_status}"
    if license_type not in NATIVE_RRF_LICENSES:
        return False, f"licence {license_type} does not include the rrf retriever (needs enterprise or trial)"
    return True, f"licence {license_type} on Elasticsearch {version} allows the rrf retriever"


def semantic_text_support(caps: Capabilities, inference_id: str | None) -> dict[str, Any]:
    """Whether ``vector_mode=semantic_text`` can work on this cluster with ``inference_id``, and why.

    Needs the endpoint (task type ``text_embedding`` or ``sparse_embedding``), Elasticsearch >= 9.1 (or
    8.19) for field-level ``chunking_settings``, and an Enterprise/trial licence -- except for Elastic
    Inference Service endpoints (service ``elastic``), which recent versions license on Basic.

    Args:
        caps: The probe.
        inference_id: The configured endpoint (None: list the usable ones only).
    """
    usable_ids = sorted(
        i for i, info in caps.inference_endpoint_info.items() if info.get("task_type") in SEMANTIC_TEXT_TASK_TYPES
    )
    out: dict[str, Any] = {"usable": False, "endpoints": usable_ids, "inference_id": inference_id}
    version = version_tuple(caps.version)
    licensed = caps.license_status == "active" and caps.license_type in SEMANTIC_TEXT_LICENSES
    if inference_id is None:
        out["reason"] = "no inference_id configured" + (f"; candidates: {', '.join(usable_ids)}" if usable_ids else "")
        return out
    info = caps.inference_endpoint_info.get(inference_id)
    if info is None:
        out["reason"] = f"inference endpoint {inference_id!r} not found (GET _inference/_all)"
    elif info.get("task_type") not in SEMANTIC_TEXT_TASK_TYPES:
        out["reason"] = (
            f"endpoint {inference_id!r} has task type {info.get('task_type')}; semantic_text needs "
            "text_embedding or sparse_embedding"
        )
    elif version < SEMANTIC_CHUNKING_MIN_VERSION and version[:2] != (8, 19):
        out["reason"] = f"Elasticsearch {caps.version} has no field-level chunking_settings (9.1 / 8.19 and later)"
    elif not licensed and info.get("service") != "elastic":
        out["reason"] = (
            f"licence {caps.license_type} ({caps.license_status}): semantic_text inference needs an active "
            "enterprise or trial licence (Elastic Inference Service endpoints excepted)"
        )
    else:
        out["usable"] = True
        out["reason"] = (
            f"endpoint {inference_id!r} ({info.get('task_type')}, service {info.get('service')}) on "
            f"Elasticsearch {caps.version}, licence {caps.license_type}"
        )
    return out


SEMANTIC_CHUNKING_MIN_VERSION = (9, 1)


def inference_endpoint_problems(caps: Capabilities, settings: Settings) -> list[str]:
    """Why the ``inference`` processor cannot fill the ``vector`` field with ``settings.encoder.inference_id``: missing
    endpoint, a task type other than ``text_embedding``, or ``service_settings.dimensions`` other than
    ``vector_dims`` (the ``dense_vector`` mapping refuses a vector of other dimensions for every document).

    Args:
        caps: The probe (``GET _inference/_all``).
        settings: ``inference_id`` and ``vector_dims``.
    """
    inference_id = settings.encoder.inference_id
    if "_inference/_all" in caps.unreadable:
        return []  # cannot tell without monitor_inference: setup goes on, selftest checks a real document
    info = caps.inference_endpoint_info.get(str(inference_id))
    if info is None:
        known = ", ".join(caps.inference_endpoints) or "none"
        return [f"inference endpoint {inference_id!r} not found (GET _inference/_all lists: {known})"]
    if info.get("task_type") != "text_embedding":
        return [
            f"inference endpoint {inference_id!r} has task type {info.get('task_type')}; vector_mode inference "
            "needs text_embedding"
        ]
    dims = str(info.get("dimensions") or "")
    if dims and dims.isdigit() and int(dims) != settings.encoder.dims:
        return [
            f"inference endpoint {inference_id!r} produces {dims}-dimension embeddings, vector_dims is "
            f"{settings.encoder.dims}: pass --vector-dims {dims} (and embed queries with the same model)"
        ]
    return []


def installed_version(path: str, got: Any) -> int | None:
    if not isinstance(got, dict) or "error" in got or got.get("status") == 404:
        return None
    name = path.rsplit("/", 1)[-1]
    if path.startswith("_ingest/pipeline/"):
        meta = (got.get(name) or {}).get("_meta") or {}
    elif path.startswith("_component_template/"):
        items = got.get("component_templates", [])
        meta = (items[0].get("component_template", {}).get("_meta") if items else None) or {}
    elif path.startswith("_index_template/"):
        items = got.get("index_templates", [])
        meta = (items[0].get("index_template", {}).get("_meta") if items else None) or {}
    elif path.startswith("_scripts/"):
        # a stored script has no _meta: es_rag writes the version in a leading mustache comment
        if not got.get("found"):
            return None
        m = SCRIPT_VERSION_RE.search(str((got.get("script") or {}).get("source", "")))
        return int(m.group(1)) if m else None
    else:
        meta = {}
    version = meta.get("version")
    return int(version) if isinstance(version, int) else None


def _component_body(got: Any) -> dict[str, Any]:
    """The ``template`` of a ``GET _component_template/<name>`` answer ({} when missing)."""
    if not isinstance(got, dict):
        return {}
    items = got.get("component_templates") or []
    if not items:
        return {}
    template = (items[0].get("component_template") or {}).get("template") or {}
    return template if isinstance(template, dict) else {}


def _analyzer_definitions(settings_body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``index.analysis.analyzer`` of an installed component's ``template``, nested or flat (``index.analysis...``)."""
    raw = settings_body.get("settings") or {}
    nested = ((raw.get("index") or {}).get("analysis") or {}).get("analyzer") or (raw.get("analysis") or {}).get(
        "analyzer"
    )
    if isinstance(nested, dict):
        return {k: v for k, v in nested.items() if isinstance(v, dict)}
    out: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():  # flat form: "index.analysis.analyzer.es_rag_text.type": "kuromoji"
        m = re.fullmatch(r"(?:index\.)?analysis\.analyzer\.([^.]+)\.(.+)", str(key))
        if m:
            out.setdefault(m.group(1), {})[m.group(2)] = value
    return out


def _describe_analyzer(name: str, definitions: dict[str, dict[str, Any]]) -> str:
    if name not in definitions:
        return name  # built-in (standard, whitespace, ...)
    kind = str(definitions[name].get("type", "custom"))
    if kind == "custom":
        return f"{name} (custom, tokenizer {definitions[name].get('tokenizer', '?')})"
    return f"{kind} ({name})"


def installed_text_analyzers(installed: dict[str, Any], settings: Settings) -> dict[str, dict[str, str]]:
    """Text field -> analyzer of the installed chunk and parent components, resolving es_rag's custom
    analyzers (``es_rag_text``) through the ``index.analysis`` settings of the same component (each
    component defines the analyzers its mappings name: it is validated alone when PUT).

    ``{"chunks": {"text": "kuromoji (es_rag_text)", "text.ident": "es_rag_identifier (custom, ...)", ...},
    "parents": {...}}``; a component that is not installed is left out, and so is a text field that is not indexed
    (``visible_text``: stored only, never analysed).

    Args:
        installed: ``GET`` answers of the setup paths (path -> body), as :meth:`ElasticsearchBackend.probe`
            collects them.
        settings: Gives the component names.
    """
    p = settings.index.prefix
    out: dict[str, dict[str, str]] = {}
    for label in ("chunks", "parents"):
        body = _component_body(installed.get(f"_component_template/{p}-{label}"))
        definitions = _analyzer_definitions(body)
        props = (body.get("mappings") or {}).get("properties")
        if not isinstance(props, dict):
            continue
        fields: dict[str, str] = {}
        for fname, spec in props.items():
            if not isinstance(spec, dict):
                continue
            if spec.get("type") == "text" and spec.get("index", True) is not False:  # a stored-only field: no analysis
                fields[fname] = _describe_analyzer(str(spec.get("analyzer", "standard")), definitions)
            for sub, sub_spec in (spec.get("fields") or {}).items():
                if isinstance(sub_spec, dict) and sub_spec.get("type") == "text":
                    sub_analyzer = str(sub_spec.get("analyzer", "standard"))
                    fields[f"{fname}.{sub}"] = _describe_analyzer(sub_analyzer, definitions)
        out[label] = fields
    return out
