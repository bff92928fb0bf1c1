"""Elasticsearch backend: probes the cluster, installs assets, bulk-indexes and searches.

Bodies come from :mod:`es_rag.elasticsearch.bodies` and :mod:`es_rag.elasticsearch.assets` (pure
functions); this module only sends them and reads the answers. The probe decides the fusion path:
the native ``rrf`` retriever when the licence allows it (Enterprise or trial, Elasticsearch >= 8.16),
else client-side RRF over one ``_msearch`` round trip. A licence error at query time switches to the client path and
says so.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from es_rag.backend import IndexReport, Retrieval, validate_chunk_source
from es_rag.elasticsearch.assets import (
    ASSET_VERSION,
    KUROMOJI_PLUGIN,
    SCRIPT_VERSION_RE,
    AnalyzerChoice,
    index_creation_requests,
    obsolete_asset_paths,
    resolve_analyzer,
    setup_paths,
    setup_requests,
    template_conflicts,
)
from es_rag.elasticsearch.bodies import count_request, neighbors_request, parents_request, search_requests
from es_rag.elasticsearch.versions import EsVersionStore
from es_rag.errors import ClusterError, ClusterTimeout, ClusterUnreachable, ConfigError, InputError, LicenseError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.query import native_blocker, plan_search, semantic_mode
from es_rag.records import Chunk, Hit
from es_rag.settings import SEMANTIC_FIELD, Analyzer, FusionPath, Settings, VectorMode
from es_rag.versions.registry import VersionGate, registry_get_request, registry_index

BULK_MAX_RETRIES = 3
BULK_INITIAL_BACKOFF = 1.0
BULK_MAX_BACKOFF = 30.0
BULK_BACKOFF_JITTER = 0.5
"""Bulk 429 retries: at most ``BULK_MAX_RETRIES``, waiting ``b * 2**n`` seconds (capped at ``BULK_MAX_BACKOFF``)
where ``b`` is drawn per bulk call from ``[(1 - BULK_BACKOFF_JITTER) * BULK_INITIAL_BACKOFF,
BULK_INITIAL_BACKOFF]``: writers rejected by the same full queue do not all retry at the same instant."""


def bulk_initial_backoff() -> float:
    """The first 429 retry wait of one bulk call, with jitter (see ``BULK_BACKOFF_JITTER``)."""
    return BULK_INITIAL_BACKOFF * (1.0 - BULK_BACKOFF_JITTER * random.random())


TRANSPORT_RETRY_STATUSES = (502, 503, 504)
"""What the transport may resend at once. Not 429: elastic-transport resends a status with no wait at all
(``Transport.perform_request``; elastic-transport-python#197), so a full queue got four requests in a row;
:meth:`ElasticsearchBackend.send` and the bulk helper wait before resending a 429."""
SEND_429_RETRIES = 3
SEND_429_BACKOFF = 0.5
"""A 429 answered to :meth:`ElasticsearchBackend.send` is resent after ``b``, ``2b``, ``4b`` seconds, ``b`` drawn from
``[SEND_429_BACKOFF / 2, SEND_429_BACKOFF]``."""
UNKNOWN_VERSION = "unknown"
"""``Capabilities.version`` when ``GET /`` is not allowed (no ``monitor`` privilege)."""
_ASSET_PRIVILEGE = {
    "_ingest": "cluster privilege read_pipeline or manage_pipeline",
    "_component_template": "cluster privilege manage_index_templates or monitor",
    "_index_template": "cluster privilege manage_index_templates or monitor",
    "_scripts": "cluster privilege manage",
}
ROLE_PRIVILEGES: dict[str, dict[str, list[str]]] = {
    "search": {"cluster": [], "index": ["read"]},
    "ingest": {"cluster": [], "index": ["read", "write", "maintenance"]},
    "setup": {"cluster": ["manage"], "index": ["create_index", "view_index_metadata"]},
}
"""The least privileges of each use, on the chunk, parent and registry indices (docs/cluster.md):

* search: ``read`` (searches, parents, neighbours, the registry GET);
* ingest: ``read`` (registry, delete-by-query's search), ``write`` (bulk, registry writes, deletes) and
  ``maintenance`` (the refresh before a version switch);
* setup: cluster ``manage`` (templates, pipelines, and the stored script, which only ``manage`` allows), index
  ``create_index`` and ``view_index_metadata`` (whether the indices exist).

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
    body = {"cluster": ["manage", "monitor"], "index": [{"names": names, "privileges": index_privs}]}
    return EsRequest("POST", "_security/user/_has_privileges", body)


BULK_FATAL_STATUSES = (401, 403, 413)
"""Statuses after which a bulk run stops: resending or going on cannot help (credentials, privileges, size)."""
NATIVE_RRF_MIN_VERSION = (8, 16)
EXCLUDE_VECTORS_MIN_VERSION = (9, 2)
NATIVE_RRF_LICENSES = {"enterprise", "trial"}
SEMANTIC_TEXT_LICENSES = {"enterprise", "trial"}
"""Licences on which Elasticsearch runs ``semantic_text`` inference at index time for every inference
service (``ShardBulkInferenceActionFilter`` checks ``InferencePlugin.INFERENCE_API_FEATURE``, an
Enterprise feature); recent versions license the Elastic Inference Service (service ``elastic``) on Basic."""
SEMANTIC_TEXT_TASK_TYPES = {"text_embedding", "sparse_embedding"}
"""Inference task types a ``semantic_text`` field accepts."""


def _client_major() -> int:
    """Major version of the installed ``elasticsearch`` client: the REST compatibility we ask for.

    The 9.x client talks to 9.x clusters; for an 8.x cluster install the 8.x client
    (``pip install 'elasticsearch>=8.18,<9'``), with which es_rag sends ``compatible-with=8``.
    """
    import importlib.metadata

    return int(importlib.metadata.version("elasticsearch").split(".")[0])


def _headers(ndjson: bool, has_body: bool) -> dict[str, str]:
    major = _client_major()
    headers = {"accept": f"application/vnd.elasticsearch+json; compatible-with={major}"}
    if has_body:
        kind = "x-ndjson" if ndjson else "json"
        headers["content-type"] = f"application/vnd.elasticsearch+{kind}; compatible-with={major}"
    return headers


def _version_tuple(number: str) -> tuple[int, ...]:
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
    """Whether searches send ``_source.exclude_vectors`` (9.2+); None when the version is unknown (learned from the
    first search's answer)."""
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
    if _version_tuple(version) < NATIVE_RRF_MIN_VERSION:
        return False, f"Elasticsearch {version} < 8.16 has no rrf retriever"
    if license_status != "active":
        return False, f"licence {license_type} is {license_status}"
    if license_type not in NATIVE_RRF_LICENSES:
        return False, f"licence {license_type} does not include the rrf retriever (needs enterprise or trial)"
    return True, f"licence {license_type} on Elasticsearch {version} allows the rrf retriever"


class ElasticsearchBackend:
    """Sends es_rag's requests to a cluster through an ``elasticsearch.Elasticsearch`` client.

    The client is the caller's (an app's connection pool, auth and TLS) or built by :meth:`connect`; every request
    goes through :meth:`send`, which sets its own retry and timeout options per call. Use the backend as a context
    manager, or call :meth:`close`, to release the connections.

    Args:
        client: A configured client (tests pass one whose transport returns canned responses).
        settings: Index names, candidate counts, fusion mode.
        url: The cluster address, for messages (read from the client when not given).
    """

    name = "elasticsearch"

    def __init__(self, client: Any, settings: Settings, *, url: str | None = None) -> None:
        self.client = client
        self.settings = settings
        self.url = url or _client_url(client)
        self._caps: Capabilities | None = None
        self._probe_lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        url: str | None,
        settings: Settings,
        *,
        api_key: str | None = None,
        username: str | None = None,
        password: str | None = None,
        verify_certs: bool = True,
        ca_certs: str | None = None,
        ssl_assert_fingerprint: str | None = None,
        cloud_id: str | None = None,
    ) -> ElasticsearchBackend:
        """Build a client for ``url`` (or an Elastic Cloud ``cloud_id``).

        Credentials: explicit ones first (``api_key``, else ``username``/``password``), then the environment
        (``ES_API_KEY``, else ``ES_USERNAME``/``ES_PASSWORD``); an environment variable never overrides an explicit
        credential. The client resends only 502/503/504 at once (never 429, which :meth:`send` and the bulk helper
        retry with backoff) and uses ``settings.connection.request_timeout``.

        Args:
            url: ``http(s)://host:port``; None with ``cloud_id``.
            settings: Settings (request timeout among them).
            api_key: API key (base64 ``id:key``).
            username: Basic-auth user.
            password: Basic-auth password.
            verify_certs: Verify TLS certificates (``--insecure`` turns it off).
            ca_certs: CA bundle that signed the cluster's certificate (Elasticsearch 9 starts with its own CA:
                ``config/certs/http_ca.crt``).
            ssl_assert_fingerprint: SHA-256 fingerprint of the cluster's certificate (instead of a CA).
            cloud_id: Elastic Cloud deployment id (instead of ``url``).

        Raises:
            ConfigError: A URL without a scheme, host or port; TLS options on ``http://``; url and cloud_id together.
        """
        from elasticsearch import Elasticsearch

        kwargs: dict[str, Any] = {
            "request_timeout": settings.connection.request_timeout,
            "retry_on_status": TRANSPORT_RETRY_STATUSES,
            "verify_certs": verify_certs,
        }
        if cloud_id:
            if url:
                raise ConfigError(
                    "give either an Elasticsearch URL (--es) or an Elastic Cloud id (--cloud-id), not both"
                )
            kwargs["cloud_id"] = cloud_id
            shown = f"Elastic Cloud deployment {cloud_id.split(':', 1)[0]}"
        else:
            url = _check_url(url)
            shown = url
            if url.startswith("http://") and (ca_certs or ssl_assert_fingerprint):
                raise ConfigError(f"--ca-certs / --ssl-assert-fingerprint need an https:// URL, got {url}")
        if ca_certs:
            kwargs["ca_certs"] = ca_certs
        if ssl_assert_fingerprint:
            kwargs["ssl_assert_fingerprint"] = ssl_assert_fingerprint
        if not verify_certs:
            kwargs["ssl_show_warn"] = False  # --insecure is explicit; the CLI says so once
        if api_key:
            kwargs["api_key"] = api_key
        elif username and password:
            kwargs["basic_auth"] = (username, password)
        elif os.environ.get("ES_API_KEY"):
            kwargs["api_key"] = os.environ["ES_API_KEY"]
        elif os.environ.get("ES_USERNAME") and os.environ.get("ES_PASSWORD"):
            kwargs["basic_auth"] = (os.environ["ES_USERNAME"], os.environ["ES_PASSWORD"])
        try:
            client = Elasticsearch(None if cloud_id else url, **kwargs)
        except ValueError as exc:
            raise ConfigError(f"cannot connect to {shown}: {exc}") from None
        return cls(client, settings, url=shown)

    def close(self) -> None:
        """Close the client's connections (the backend cannot be used afterwards)."""
        self.client.close()

    def __enter__(self) -> ElasticsearchBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -----------------------------------------------------------------------------
    def send(self, request: EsRequest, *, ignore: Sequence[int] = (), timeout: float | None = None) -> Any:
        """Send one request and return the parsed body.

        The transport resends 502/503/504 at once; a 429 (a full queue) is resent here after a jittered,
        doubling wait, at most ``SEND_429_RETRIES`` times (every request es_rag sends is idempotent). A
        connection error is resent by the transport; a timeout never is (the cluster may have done the work).

        Args:
            request: The request.
            ignore: HTTP statuses returned as a body instead of raised.
            timeout: Seconds for this request (default ``settings.connection.request_timeout``).

        Raises:
            LicenseError: The licence does not allow the request (``LicenseUtils.newComplianceException``).
            ClusterUnreachable: No answer: refused, DNS, TLS (the message says which).
            ClusterTimeout: No answer in time.
            ClusterError: Any other error status (401 with a credentials hint, 403 with the missing privilege).
        """
        from elastic_transport import TlsError
        from elasticsearch import ApiError, ConnectionTimeout, TransportError, UnsupportedProductError

        headers = _headers(request.is_ndjson, request.body is not None)
        options: dict[str, Any] = {"retry_on_status": TRANSPORT_RETRY_STATUSES}
        if timeout is not None:
            options["request_timeout"] = timeout
        client = self.client.options(**options)
        what = f"{request.method} /{request.path}"
        wait = SEND_429_BACKOFF * (1.0 - 0.5 * random.random())
        for attempt in range(SEND_429_RETRIES + 1):
            try:
                resp = client.perform_request(request.method, "/" + request.path, headers=headers, body=request.body)
                return resp.body
            except UnsupportedProductError as exc:
                raise ClusterError(
                    f"{self.url} answered, but it is not Elasticsearch (no X-Elastic-Product header): check the URL "
                    "and the port (Elasticsearch listens on 9200 by default; Kibana on 5601 is not it)",
                    status=exc.meta.status,
                ) from exc
            except ApiError as exc:
                status = exc.meta.status
                if status in ignore:
                    return exc.body
                if status == 429 and attempt < SEND_429_RETRIES:
                    time.sleep(wait)
                    wait *= 2
                    continue
                raise _api_error(what, status, exc.body, self.url) from exc
            except ConnectionTimeout as exc:
                limit = timeout if timeout is not None else self.settings.connection.request_timeout
                raise ClusterTimeout(
                    f"{what}: timed out after {limit:g} s without an answer from {self.url} (the cluster may still "
                    "have done the work; --request-timeout / --bulk-timeout set the limits)"
                ) from exc
            except TlsError as exc:
                raise ClusterUnreachable(
                    f"TLS with {self.url} failed: {_cause(exc)}. Pass the cluster's CA (--ca-certs, ES_CA_CERTS: "
                    "Elasticsearch 9 writes config/certs/http_ca.crt) or its certificate fingerprint "
                    "(--ssl-assert-fingerprint); --insecure skips verification on a throwaway dev cluster"
                ) from exc
            except TransportError as exc:
                raise ClusterUnreachable(f"{what}: cluster unreachable at {self.url}: {_cause(exc)}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # -- probe / doctor --------------------------------------------------------------------------
    def probe(self, *, refresh: bool = False) -> Capabilities:
        """Version, licence, inference endpoints, analysis plugins and installed asset versions, read once
        (thread-safe) and cached.

        Works with a least-privilege key: every GET that needs more than ``read`` (``monitor`` for ``/``,
        ``_license`` and ``_nodes/plugins``, ``monitor_inference``, template and pipeline privileges) tolerates a
        403, which is recorded in ``Capabilities.unreadable`` and leads to the safe choice (client fusion, version
        features probed on first use); a 403 is never read as a licence refusal.

        Args:
            refresh: Probe again even if cached.
        """
        with self._probe_lock:
            caps = self._caps
            if caps is None or refresh:
                caps = self._probe()
                self._caps = caps
            return caps

    def _probe(self) -> Capabilities:
        unreadable: dict[str, str] = {}

        def get(path: str, privilege: str, ignore: tuple[int, ...] = ()) -> Any:
            resp = self.send(EsRequest("GET", path), ignore=(403, *ignore))
            if isinstance(resp, dict) and resp.get("status") == 403 and "error" in resp:
                unreadable[path or "/"] = f"HTTP 403: needs {privilege} ({_reason(resp)})"
                return None
            return resp

        root = get("", "cluster privilege monitor")
        version = str(root.get("version", {}).get("number", "0")) if isinstance(root, dict) else UNKNOWN_VERSION
        lic_resp = get("_license", "cluster privilege monitor", (404,))
        if lic_resp is None:
            ltype, lstatus = "unknown", "unknown"
        else:
            lic = (lic_resp.get("license") or {}) if isinstance(lic_resp, dict) else {}
            ltype, lstatus = str(lic.get("type", "unknown")), str(lic.get("status", "unknown"))
        native, reason = decide_native_rrf(version, ltype, lstatus)
        if "_license" in unreadable:
            reason = f"licence unreadable ({unreadable['_license']}): client fusion"
        try:
            inf = get("_inference/_all", "cluster privilege monitor_inference", (400, 404))
            raw_endpoints = inf.get("endpoints", []) if isinstance(inf, dict) else []
        except ClusterError:
            raw_endpoints = []
        endpoints = [str(e.get("inference_id", "?")) for e in raw_endpoints]
        endpoint_info = {
            str(e.get("inference_id", "?")): {
                "task_type": str(e.get("task_type", "unknown")),
                "service": str(e.get("service", "unknown")),
                "dimensions": str((e.get("service_settings") or {}).get("dimensions", "")),
            }
            for e in raw_endpoints
        }
        plugins_resp = get("_nodes/plugins", "cluster privilege monitor")
        plugins = sorted(
            {
                p.get("name", "")
                for node in (plugins_resp or {}).get("nodes", {}).values()
                for p in node.get("plugins", [])
                if p.get("name", "").startswith("analysis-")
            }
        )
        assets: dict[str, int | None] = {}
        installed: dict[str, Any] = {}
        for path in setup_paths(self.settings):  # paths only: works with analyzer=auto unresolved
            got = get(path, _ASSET_PRIVILEGE[path.split("/", 1)[0]], (404,))
            assets[path] = _installed_version(path, got)
            installed[path] = got
        known = version != UNKNOWN_VERSION
        return Capabilities(
            version=version,
            license_type=ltype,
            license_status=lstatus,
            native_rrf=native,
            native_rrf_reason=reason,
            vectors_in_source_param=_version_tuple(version) >= EXCLUDE_VECTORS_MIN_VERSION if known else None,
            inference_endpoints=endpoints,
            inference_endpoint_info=endpoint_info,
            analysis_plugins=plugins,
            installed_assets=assets,
            installed_analyzers=installed_text_analyzers(installed, self.settings),
            unreadable=unreadable,
        )

    def resolve_analyzer(self) -> AnalyzerChoice:
        """The analyzer the templates get on this cluster: ``auto`` resolved against the probed plugins and
        the ``language`` setting (:func:`es_rag.elasticsearch.assets.resolve_analyzer`), any other value as
        configured."""
        index = self.settings.index
        return resolve_analyzer(index.analyzer, plugins=self.probe().analysis_plugins, language=index.language)

    def doctor(self) -> dict[str, Any]:
        """The probe plus the path each stage will take, and the text analysis as installed (``analyzer=auto``
        resolved as ``setup`` would)."""
        caps = self.probe()
        s = self.settings
        try:
            fusion = self.fusion_path()
            if fusion == "native":
                version = _version_tuple(caps.version) if caps.version != UNKNOWN_VERSION else None
                blocker = native_blocker(s, version)
                fusion = (
                    f"client ({blocker})"
                    if blocker
                    else f"native {s.fusion.method} retriever ({caps.native_rrf_reason})"
                )
            else:
                fusion = f"client {s.fusion.method} over _msearch ({caps.native_rrf_reason})"
        except ConfigError as exc:
            fusion = f"ERROR: {exc}"
        expected = ASSET_VERSION
        stale = {k: v for k, v in caps.installed_assets.items() if v != expected}
        semantic = semantic_text_support(caps, s.encoder.inference_id)
        mode = s.encoder.vectors
        if mode is VectorMode.SEMANTIC_TEXT:
            vectors = (
                f"elasticsearch semantic_text field '{SEMANTIC_FIELD}' ({s.encoder.inference_id}): server-side chunking"
            )
            vectors += f" {s.encoder.semantic_chunking_settings() or 'as the endpoint'} and embedding of whole sections"
            knn = f"elasticsearch semantic query on '{SEMANTIC_FIELD}' (query embedded by {s.encoder.inference_id})"
            if not semantic["usable"]:
                vectors += f" -- NOT USABLE: {semantic['reason']}"
        elif mode is VectorMode.INFERENCE:
            vectors = f"elasticsearch inference processor ({s.encoder.inference_id}) on contextual_text else text"
            knn = f"elasticsearch knn (query embedded client-side by {s.encoder.model})"
            if s.encoder.inference_id not in caps.inference_endpoints:
                vectors += f" -- inference endpoint {s.encoder.inference_id!r} not found on the cluster"
        else:
            vectors = f"client-side sentence-transformers ({s.encoder.model})"
            knn = "elasticsearch knn"
        privileges = self.privileges()
        try:
            setup_check = "; ".join(self.preflight()) or "ok: nothing would be refused"
        except ClusterError as exc:
            setup_check = f"not checked: {exc}"
        analysis = analysis_report(caps, s)
        analyzer = str(analysis["configured"])
        if analyzer == "kuromoji" and KUROMOJI_PLUGIN not in caps.analysis_plugins:
            analyzer += f" -- MISSING plugin {KUROMOJI_PLUGIN}: use --analyzer cjk or install the plugin"
        return {
            "cluster": caps.to_dict(),
            "privileges": privileges,
            "setup_preflight": setup_check,
            "assets": {"expected_version": expected, "missing_or_stale": stale},
            "analysis": analysis,
            "semantic_text": semantic,
            "paths": {
                "vector_mode": mode.value,
                "chunking": (
                    "python (sections) + elasticsearch semantic_text (chunks)"
                    if mode is VectorMode.SEMANTIC_TEXT
                    else "python"
                ),
                "vectors": vectors,
                "bm25": f"elasticsearch multi_match (analyzer {analyzer})",
                "knn": knn,
                "fusion": fusion,
                "rerank": f"python cross-encoder ({s.rerank.model})" if s.rerank.model else "disabled",
                "select/pack": "python (mmr, per-source cap, token budget)",
            },
        }

    def privileges(self) -> dict[str, str]:
        """Which uses (search, ingest, setup) the caller's credentials allow on this prefix's indices, and what
        each lacks, from ``POST _security/user/_has_privileges`` (which needs no privilege of its own)."""
        request = privileges_request(self.settings)
        names = request.body["index"][0]["names"]
        resp = self.send(request, ignore=(400, 403, 404, 500))
        if not isinstance(resp, dict) or "error" in resp or "index" not in resp:
            reason = _reason(resp) if isinstance(resp, dict) else str(resp)
            return {"check": f"unknown (security disabled, or _has_privileges unavailable: {reason})"}
        cluster = resp.get("cluster") or {}
        index = resp.get("index") or {}
        out = {"user": str(resp.get("username", "?"))}
        for use, need in ROLE_PRIVILEGES.items():
            missing = [f"cluster {c}" for c in need["cluster"] if not cluster.get(c)]
            for name in names:
                missing += [f"index {p} on {name}" for p in need["index"] if not (index.get(name) or {}).get(p)]
            out[use] = "ok" if not missing else "missing: " + ", ".join(missing)
        out["monitor"] = (
            "held"
            if cluster.get("monitor")
            else "missing (optional: version and licence unreadable -> client fusion; deletes run in the foreground)"
        )
        return out

    def fusion_path(self, settings: Settings | None = None) -> str:
        """``native`` or ``client`` for this cluster and ``settings`` (default: the backend's).

        Args:
            settings: Settings whose ``fusion_path`` applies (per-call override).
        """
        mode = (settings or self.settings).fusion.path
        if mode is FusionPath.CLIENT:
            return "client"
        caps = self.probe()
        if mode is FusionPath.NATIVE:
            if not caps.native_rrf:
                raise ConfigError(
                    f"fusion_path=native requested but {caps.native_rrf_reason}; use --fusion-path client or auto"
                )
            return "native"
        return "native" if caps.native_rrf else "client"

    # -- setup --------------------------------------------------------------------------------
    def setup(self, *, create_indices: bool = True) -> list[dict[str, Any]]:
        """Install pipelines, templates and the stored search template (idempotent PUTs) and create the
        indices if absent. ``analyzer=auto`` is resolved against the cluster first (:meth:`resolve_analyzer`).

        Args:
            create_indices: Also create the chunk and parent indices.
        """
        settings = self.settings
        if settings.index.analyzer is Analyzer.AUTO:  # the probe is needed only to resolve auto
            settings = settings.replace(analyzer=self.resolve_analyzer().analyzer)
        problems = self.preflight()
        if problems:
            raise ConfigError("setup would be refused, nothing was sent: " + "; ".join(problems))
        results = []
        for req in setup_requests(settings):
            resp = self.send(req)
            results.append({"request": f"{req.method} {req.path}", "acknowledged": resp.get("acknowledged")})
        for path in obsolete_asset_paths(settings):  # replaced by the self-contained components (asset version 6)
            got = self.send(EsRequest("GET", path), ignore=(403, 404))
            if _component_meta(got).get("managed_by") == "es_rag":
                self.send(EsRequest("DELETE", path))
                results.append({"request": f"DELETE {path}", "acknowledged": "obsolete es_rag component removed"})
        if create_indices:
            for req in index_creation_requests(self.settings):
                if self._index_exists(req.path):
                    results.append({"request": f"{req.method} {req.path}", "acknowledged": "exists"})
                    continue
                resp = self.send(req, ignore=(400,))
                if isinstance(resp, dict) and "error" in resp:
                    if "resource_already_exists" in str(resp):
                        results.append({"request": f"{req.method} {req.path}", "acknowledged": "exists"})
                        continue
                    raise ClusterError(f"creating {req.path} failed: {_reason(resp)}", status=400, response=resp)
                results.append({"request": f"{req.method} {req.path}", "acknowledged": resp.get("acknowledged")})
        self._caps = None  # installed asset versions changed: the next probe must look again
        return results

    def preflight(self) -> list[str]:
        """What a cluster would refuse of this setup, found before anything is sent (setup then stops at once
        instead of half way): an index template at priority 500 whose patterns overlap es_rag's (Elasticsearch
        refuses overlapping templates of equal priority, ``MetadataIndexTemplateService.findConflictingV2Templates``),
        and an inference endpoint that is missing, of the wrong task type, or of other dimensions than
        ``vector_dims`` (the ``dense_vector`` mapping would refuse every embedding).
        """
        s = self.settings
        problems = template_conflicts(s, self.send(EsRequest("GET", "_index_template"), ignore=(403, 404)))
        if s.encoder.vectors is VectorMode.INFERENCE:
            problems += inference_endpoint_problems(self.probe(), s)
        elif s.encoder.vectors is VectorMode.SEMANTIC_TEXT:
            support = semantic_text_support(self.probe(), s.encoder.inference_id)
            if not support["usable"]:
                problems.append(f"vector_mode semantic_text: {support['reason']}")
        return problems

    def _index_exists(self, name: str) -> bool:
        # The client answers HEAD with a boolean body (404 is "absent", not an error).
        return self.send(EsRequest("HEAD", name)) is True

    # -- writes -------------------------------------------------------------------------------
    def _actions(
        self, chunks: Iterable[Chunk], index: str, include_vector: bool, failed: list[dict[str, str]]
    ) -> Iterable[dict[str, Any]]:
        for c in chunks:
            doc = c.to_source(include_vector=include_vector)
            if c.source_path is not None:
                doc["source_path"] = c.source_path
            try:
                validate_chunk_source(doc, document=c.source_path or c.source_id or c.chunk_id)
            except InputError as err:
                failed.append(err.as_dict())
                continue
            yield {"_op_type": "index", "_index": index, "_id": c.chunk_id, "_source": doc}

    def index(self, chunks: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> IndexReport:
        """Bulk-index children and parents through the ingest pipelines.

        ``helpers.streaming_bulk`` resends 429s (whole request or single documents) after a jittered, doubling
        wait; the client it gets resends only 502/503/504 itself, and waits
        ``settings.connection.bulk_timeout`` per request.
        Every acknowledged document is counted as the stream yields it, so a failure part-way still reports how
        many landed. A 401, 403 or 413 (credentials, privileges, request size) stops the run with a clear error
        instead of failing every remaining document the same way.

        Args:
            chunks: Child chunks (with vectors unless the cluster embeds).
            parents: Parent sections.

        Raises:
            ClusterError: A non-retryable refusal or a transport failure, with the count already indexed.
        """
        from elasticsearch import TransportError, helpers

        report = IndexReport()
        server_embeds = self.settings.encoder.vectors is not VectorMode.CLIENT
        client = self.client.options(
            retry_on_status=TRANSPORT_RETRY_STATUSES, request_timeout=self.settings.connection.bulk_timeout
        )
        for docs, index in ((chunks, self.settings.chunk_index), (parents, self.settings.parent_index)):
            if not docs:
                continue
            by_id = {c.chunk_id: c for c in docs}
            actions = self._actions(docs, index, not server_embeds, report.failed)
            stream = helpers.streaming_bulk(
                client,
                actions,
                raise_on_error=False,
                raise_on_exception=False,
                max_retries=BULK_MAX_RETRIES,
                initial_backoff=bulk_initial_backoff(),
                max_backoff=BULK_MAX_BACKOFF,
                chunk_size=200,
            )
            try:
                for ok, item in stream:
                    info = next(iter(item.values()))
                    if ok:
                        report.indexed += 1
                        continue
                    status = info.get("status")
                    error = info.get("error", {})
                    if status in BULK_FATAL_STATUSES:
                        raise ClusterError(
                            f"bulk indexing into {index} stopped: {_fatal_bulk_reason(status, info)} "
                            f"({report.indexed} documents were indexed before)",
                            status=status,
                            response=error if isinstance(error, dict) else str(error),
                        )
                    doc_id = str(info.get("_id"))
                    chunk = by_id.get(doc_id)
                    report.failed.append(
                        {
                            "document": (chunk.source_path or chunk.source_id) if chunk else doc_id,
                            "field": _failed_field(error),
                            "reason": f"chunk {doc_id}: {_reason(error)}",
                        }
                    )
            except TransportError as exc:
                raise ClusterUnreachable(
                    f"bulk indexing into {index} failed: cluster unreachable at {self.url}: {_cause(exc)} "
                    f"({report.indexed} documents were indexed before the failure)"
                ) from exc
        return report

    # -- reads --------------------------------------------------------------------------------
    def gated(self, flt: SearchFilter) -> SearchFilter:
        """``flt`` with a snapshot of the tenant's active-version gate: the registry document read once (a
        real-time GET) and its hidden keys inlined (:mod:`es_rag.versions.registry`), so every request built from the
        returned filter serves the same committed version of each source.
        :meth:`es_rag.pipeline.RagPipeline.search` calls it once per search, before any other backend call;
        the backend sends the filter it is given.

        Args:
            flt: The caller's hard filter.

        Raises:
            ClusterError: The registry index is missing (``es-rag setup`` creates it) or unreadable.
        """
        if flt.versions is not None:  # already a snapshot: a search reads the registry once
            return flt
        resp = self.send(registry_get_request(self.settings, flt.tenant_id), ignore=(404,))
        if isinstance(resp, dict) and "error" in resp:
            raise ClusterError(
                f"version registry {registry_index(self.settings)} cannot be read: {_reason(resp)} (run es-rag setup)",
                status=404,
                response=resp,
            )
        found = isinstance(resp, dict) and resp.get("found")
        hidden = ((resp.get("_source") or {}).get("hidden") or []) if found else []
        return flt.with_versions(VersionGate(flt.tenant_id, hidden=frozenset(str(k) for k in hidden)))

    def version_store(self) -> EsVersionStore:
        """Version switches and source deletes on this cluster (the registry index and ``_delete_by_query``)."""
        return EsVersionStore(self)

    def retrieve(
        self, query_text: str, query_vector: np.ndarray | None, flt: SearchFilter, settings: Settings
    ) -> Retrieval:
        """Native rrf (one ``_search``) or client-side channels (one ``_msearch``) with the same filters.

        Args:
            query_text: The query.
            query_vector: Its embedding, or None for BM25 only.
            flt: Hard filter, inside every child retriever.
            settings: Candidate counts and fusion mode.
        """
        caps = self.probe()
        version = _version_tuple(caps.version) if caps.version != UNKNOWN_VERSION else None
        plan = plan_search(
            query_text,
            query_vector,
            settings,
            native_available=self.fusion_path(settings) == "native",
            version=version,
        )
        notes = plan.notes
        method = plan.method
        native = plan.native
        if native:
            try:
                resp, reqs = self._search(query_text, query_vector, flt, settings, native=True, channels=plan.channels)
                fused = [
                    _hit_from_es(h).replace(rrf_score=h.get("_score"), final_score=h.get("_score"))
                    for h in resp.get("hits", {}).get("hits", [])
                ]
                if semantic_mode(settings):
                    notes.append(_server_chunk_note(resp.get("hits", {}).get("hits", [])))
                return Retrieval(
                    channels={},
                    fused=fused,
                    path=f"native-{method}",
                    requests=reqs,
                    took_ms={"search": float(resp.get("took", 0))},
                    notes=notes,
                )
            except LicenseError as exc:
                caps.native_rrf = False
                caps.native_rrf_reason = f"licence error at query time: {exc}"
                notes.append(
                    f"native {method} refused by licence (HTTP 403): switched to client-side {method} over _msearch "
                    "for this and every later query"
                )
            except ClusterError as exc:
                # only a 4xx is the cluster refusing this body; a timeout, an unreachable cluster or a 5xx is raised
                # (re-sending after a timeout doubles the load of a cluster that is already slow)
                if exc.status is None or not 400 <= exc.status < 500:
                    raise
                notes.append(f"native {method} refused ({exc}): retried on the client path, one search per channel")
        resp, reqs = self._search(query_text, query_vector, flt, settings, native=False, channels=plan.channels)
        channels: dict[str, list[Hit]] = {}
        took: dict[str, float] = {"msearch": float(resp.get("took", 0))}
        errors = []
        responses = resp.get("responses", [])
        if len(responses) != len(plan.channels):
            raise ClusterError(
                f"_msearch returned {len(responses)} responses for {len(plan.channels)} searches", response=resp
            )
        for name, item in zip(plan.channels, responses, strict=True):
            if "error" in item:
                errors.append(f"{name}: {_reason(item['error'])}")
                notes.append(f"channel {name} failed ({_reason(item['error'])}): fused without it")
                continue
            attr = CHANNEL_SCORE_FIELD[name]
            channels[name] = [
                _hit_from_es(h).replace(**{attr: h.get("_score")}) for h in item.get("hits", {}).get("hits", [])
            ]
            took[name] = float(item.get("took", 0))
        if not channels:
            raise ClusterError("every retrieval channel failed: " + "; ".join(errors), response=resp)
        if semantic_mode(settings) and "dense" in channels:
            # the semantic highlight narrowed the dense hits to their best server-side chunk: give the same
            # document the same span in every channel, so fusion keeps one consistent version of it
            spans = {h.chunk_id: h for h in channels["dense"]}
            for name in channels:
                channels[name] = [
                    h.replace(
                        text=spans[h.chunk_id].text,
                        start_offset=spans[h.chunk_id].start_offset,
                        end_offset=spans[h.chunk_id].end_offset,
                        token_count=spans[h.chunk_id].token_count,
                    )
                    if name != "dense" and h.chunk_id in spans
                    else h
                    for h in channels[name]
                ]
            dense_raw: dict[str, Any] = next(
                (
                    item
                    for n, item in zip(plan.channels, responses, strict=True)
                    if n == "dense" and "error" not in item
                ),
                {},
            )
            notes.append(_server_chunk_note(dense_raw.get("hits", {}).get("hits", [])))
        path = f"client-{method}" if len(channels) > 1 else f"{next(iter(channels))}-only"
        return Retrieval(channels=channels, fused=None, path=path, requests=reqs, took_ms=took, notes=notes)

    def _search(
        self,
        query_text: str,
        query_vector: np.ndarray | None,
        flt: SearchFilter,
        settings: Settings,
        *,
        native: bool,
        channels: Sequence[str],
    ) -> tuple[dict[str, Any], list[EsRequest]]:
        """Build and send one search (native ``_search`` or client ``_msearch``); returns the response and the
        requests sent. When the version is unknown (no ``monitor`` privilege) the first search sends
        ``_source.exclude_vectors``; a cluster before 9.2 refuses it (``Unknown key for a VALUE_BOOLEAN in
        [exclude_vectors].``, the whole request or every ``_msearch`` item), which is learned once and the search
        resent without it."""
        caps = self.probe()

        def build() -> list[EsRequest]:
            return search_requests(
                query_text,
                query_vector,
                flt,
                settings,
                native=native,
                vectors_in_source_param=caps.vectors_in_source_param is not False,
                channels=channels,
            )

        reqs = build()
        resp: dict[str, Any] | None
        try:
            resp = dict(self.send(reqs[0]))
        except ClusterError as exc:
            if not (caps.vectors_in_source_param is None and exc.status == 400 and "exclude_vectors" in str(exc)):
                raise
            resp = None
        if caps.vectors_in_source_param is None:
            items = [] if resp is None else resp.get("responses", [])
            refused = resp is None or any("exclude_vectors" in str(i.get("error", "")) for i in items)
            caps.vectors_in_source_param = not refused
            if refused:
                reqs = build()
                resp = dict(self.send(reqs[0]))
        assert resp is not None
        return resp, reqs

    def get_parents(self, parent_ids: Sequence[str], flt: SearchFilter) -> dict[str, Hit]:
        """Parents by id under the same hard filter (a parent of another tenant is never returned).

        Args:
            parent_ids: Parent chunk ids.
            flt: Hard filter.
        """
        if not parent_ids:
            return {}
        req = parents_request(parent_ids, flt, self.settings)
        resp = self.send(req)
        return {h["_id"]: _hit_from_es(h) for h in resp.get("hits", {}).get("hits", [])}

    def get_neighbors(self, anchors: Sequence[Hit], flt: SearchFilter, window: int) -> dict[str, list[Hit]]:
        """Up to ``window`` children before and after each anchor (same source, version and parent),
        under the same hard filter, in document order; one ``_msearch``.

        Args:
            anchors: Selected child hits.
            flt: Hard filter.
            window: Children per side.
        """
        anchors = [a for a in anchors if a.start_offset is not None]
        if not anchors or window < 1:
            return {}
        resp = self.send(neighbors_request(anchors, flt, self.settings, window=window))
        responses = resp.get("responses", [])
        if len(responses) != 2 * len(anchors):
            raise ClusterError(f"_msearch returned {len(responses)} responses for {2 * len(anchors)} searches")
        out: dict[str, list[Hit]] = {}
        for i, a in enumerate(anchors):
            before, after = responses[2 * i], responses[2 * i + 1]
            for item in (before, after):
                if "error" in item:
                    raise ClusterError(f"neighbour search failed: {_reason(item['error'])}", response=item)
            prev = [_hit_from_es(h) for h in before.get("hits", {}).get("hits", [])][::-1]
            nxt = [_hit_from_es(h) for h in after.get("hits", {}).get("hits", [])]
            out[a.chunk_id] = prev + nxt
        return out

    def flush(self) -> None:
        """Nothing to do: every bulk has returned, and the version switch refreshes before it commits."""

    def count(self, flt: SearchFilter | None = None) -> int:
        """Number of child chunks in the chunk index (only those ``flt`` allows, when given).

        Args:
            flt: Optional hard filter; without it every tenant's chunks are counted (admin use).
        """
        resp = self.send(count_request(flt, self.settings))
        return int(resp.get("count", 0))


CHANNEL_SCORE_FIELD = {"bm25": "bm25_score", "dense": "dense_score", "exact": "exact_score"}
"""The :class:`~es_rag.records.Hit` field each channel's raw ``_score`` goes to."""


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
    version = _version_tuple(caps.version)
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


def locate_server_chunk(section: Hit, fragment: str) -> Hit:
    """Narrow a section hit to the server-side chunk the ``semantic`` highlighter returned.

    Elasticsearch stores ``semantic_text`` chunks as offsets into the field value but does not return
    them; the highlighter returns the chunk's text. When that text is a span of the section's ``text``
    (always so when the field was filled from ``text``; for ``contextual_text`` only when the chunk lies
    in the part equal to the source), the hit becomes that span with source offsets, so
    ``source[start_offset:end_offset] == text`` still holds. Otherwise (chunk spans a contextual prefix,
    HTML visible text) the whole section is kept: its lineage stays exact, the chunk is not located.

    Args:
        section: The hit as stored (a whole section).
        fragment: The best chunk's text from ``highlight.<semantic field>[0]``.
    """
    if not fragment or section.start_offset is None:
        return section
    at = section.text.find(fragment)
    if at < 0 or len(fragment) == len(section.text):
        return section
    start = section.start_offset + at
    return section.replace(text=fragment, start_offset=start, end_offset=start + len(fragment), token_count=None)


def _hit_from_es(raw: dict[str, Any]) -> Hit:
    source = dict(raw.get("_source", {}))
    source.setdefault("chunk_id", raw.get("_id"))
    hit = Hit.from_source(source)
    fragments = (raw.get("highlight") or {}).get(SEMANTIC_FIELD) or []
    return locate_server_chunk(hit, str(fragments[0])) if fragments else hit


def _server_chunk_note(raw_hits: list[dict[str, Any]]) -> str:
    """Trace note: how many semantic hits were narrowed to their best server-side chunk."""
    with_fragment = [h for h in raw_hits if (h.get("highlight") or {}).get(SEMANTIC_FIELD)]
    located = sum(1 for h in with_fragment if _hit_from_es(h).text != str((h.get("_source") or {}).get("text", "")))
    return (
        f"semantic_text: {located} of {len(raw_hits)} hits narrowed to their best server-side chunk "
        f"({len(with_fragment)} highlighted; the rest keep the whole section)"
    )


def _reason(error: Any) -> str:
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict):
            cause = inner.get("caused_by") or {}
            reason = inner.get("reason") or inner.get("type") or str(inner)
            if isinstance(cause, dict) and cause.get("reason"):
                return f"{reason}: {cause['reason']}"
            return str(reason)
        return str(inner)
    return str(error)


def _failed_field(error: Any) -> str:
    text = _reason(error)
    for name in ("tenant_id", "source_id", "chunk_id", "text", "vector"):
        if f"'{name}'" in text or f"[{name}]" in text:
            return name
    return "document"


def _installed_version(path: str, got: Any) -> int | None:
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
    "parents": {...}}``; a component that is not installed is left out.

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
            if spec.get("type") == "text":
                fields[fname] = _describe_analyzer(str(spec.get("analyzer", "standard")), definitions)
            for sub, sub_spec in (spec.get("fields") or {}).items():
                if isinstance(sub_spec, dict) and sub_spec.get("type") == "text":
                    sub_analyzer = str(sub_spec.get("analyzer", "standard"))
                    fields[f"{fname}.{sub}"] = _describe_analyzer(sub_analyzer, definitions)
        out[label] = fields
    return out


def analysis_report(caps: Capabilities, settings: Settings) -> dict[str, Any]:
    """The ``analysis`` section of ``doctor``: analyzer configured (``auto`` resolved as ``setup`` would),
    whether kuromoji is present, the analyzer of every text field as installed, and whether they agree.

    Args:
        caps: The probe.
        settings: The configured analyzer and corpus language.
    """
    choice = resolve_analyzer(settings.index.analyzer, plugins=caps.analysis_plugins, language=settings.index.language)
    configured = choice.analyzer.value
    installed = caps.installed_analyzers
    main = sorted({v for fields in installed.values() for k, v in fields.items() if "." not in k})
    if not installed:
        check = "text analysis not installed: run es-rag setup"
    elif main == [f"{configured} (es_rag_text)"]:
        check = f"ok: every main text field uses {configured}"
    else:
        check = (
            f"MISMATCH: installed {main}, configured {configured}; a changed analyzer needs es-rag setup "
            "and a new index (reindex): index templates apply at index creation"
        )
    return {
        "configured": configured,
        "configured_as": settings.index.analyzer.value,
        "reason": choice.reason,
        "kuromoji_plugin": "installed" if KUROMOJI_PLUGIN in caps.analysis_plugins else "not installed",
        "installed": installed,
        "check": check,
    }


def is_licence_refusal(body: Any) -> bool:
    """Whether an error body is a licence refusal: ``LicenseUtils.newComplianceException`` answers 403
    ``security_exception`` with reason ``current license is non-compliant for [<feature>]`` and the metadata
    ``es.license.expired.feature`` (rendered without ``es.``). A privilege 403 is also a ``security_exception``
    but has neither.

    Args:
        body: The response body.
    """
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or err.get("type") != "security_exception":
        return False
    return "license.expired.feature" in err or str(err.get("reason", "")).startswith(
        "current license is non-compliant for ["
    )


def _api_error(what: str, status: int, body: Any, url: str) -> ClusterError:
    """The :class:`ClusterError` for an error status, in one line that says what to do."""
    if status == 403 and is_licence_refusal(body):
        return LicenseError(f"{what}: licence does not allow this request ({_reason(body)})", status=403, response=body)
    if status == 401:
        return ClusterError(
            f"{what}: authentication failed at {url}: set ES_API_KEY, or ES_USERNAME and ES_PASSWORD ({_reason(body)})",
            status=401,
            response=body,
        )
    if status == 403:
        return ClusterError(f"{what}: permission denied: {_reason(body)}", status=403, response=body)
    text = str(body).lower()
    if status == 400 and "media_type_header_exception" in text:
        return ClusterError(
            f"{what}: the cluster refuses REST compatibility with the installed elasticsearch client "
            f"{_client_major()}.x ({_reason(body)}); for an 8.x cluster install the 8.x client: "
            "pip install 'elasticsearch>=8.18,<9'",
            status=400,
            response=body,
        )
    return ClusterError(f"{what} failed: {_reason(body)}", status=status, response=body)


def _cause(exc: BaseException) -> str:
    """The innermost cause of a transport error, in words (``[Errno 111] Connection refused``)."""
    inner: BaseException = exc
    while inner.__cause__ is not None or (inner.__context__ is not None and not inner.__suppress_context__):
        nxt = inner.__cause__ or inner.__context__
        assert nxt is not None
        inner = nxt
    text = str(inner) or type(inner).__name__
    m = re.search(
        r"(\[Errno -?\d+\][^')\"]*|CERTIFICATE_VERIFY_FAILED[^')\"]*|[Nn]ame or service not known|"
        r"timed out|Fingerprints did not match[^')\"]*|WRONG_VERSION_NUMBER[^')\"]*)",
        text,
    )
    return m.group(1).strip() if m else text[:300]


def _check_url(url: str | None) -> str:
    """An Elasticsearch URL with scheme, host and port, or a :class:`ConfigError` that shows the right form."""
    raw = (url or "").strip().rstrip("/")
    if not raw:
        raise ConfigError("no Elasticsearch URL: pass --es http://localhost:9200 (or --cloud-id)")
    parsed = urllib.parse.urlsplit(raw if "://" in raw else "")
    if "://" in raw and parsed.scheme not in ("http", "https"):
        raise ConfigError(f"Elasticsearch URL {raw!r}: the scheme must be http or https")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"Elasticsearch URL {raw!r} needs a scheme: use http://{raw} or https://{raw} (Elasticsearch 9 serves "
            "https with its own CA by default)"
        )
    try:
        port = parsed.port
    except ValueError:
        raise ConfigError(f"Elasticsearch URL {raw!r}: the port is not a number") from None
    if port is None and parsed.scheme == "http":
        raise ConfigError(f"Elasticsearch URL {raw!r} has no port: Elasticsearch listens on 9200, e.g. {raw}:9200")
    return raw


def _client_url(client: Any) -> str:
    """The first node's address of a client, for messages."""
    try:
        node = client.transport.node_pool.all()[0]
        return str(node.base_url)
    except Exception:  # a stand-in client in tests
        return "the cluster"


def _fatal_bulk_reason(status: int, info: dict[str, Any]) -> str:
    """A bulk refusal that no retry fixes, in words."""
    error = info.get("error", {})
    text = _reason(error) if isinstance(error, dict) else str(error)
    if status == 401:
        return f"authentication failed (HTTP 401): set ES_API_KEY, or ES_USERNAME and ES_PASSWORD ({text})"
    if status == 403:
        return f"permission denied (HTTP 403): ingest needs the index privileges write and read ({text})"
    return f"request too large (HTTP 413): fewer or smaller documents per bulk ({text})"


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


def _component_meta(got: Any) -> dict[str, Any]:
    """``_meta`` of a ``GET _component_template/<name>`` answer ({} when missing)."""
    if not isinstance(got, dict):
        return {}
    items = got.get("component_templates") or []
    meta = (items[0].get("component_template") or {}).get("_meta") if items else None
    return meta if isinstance(meta, dict) else {}
