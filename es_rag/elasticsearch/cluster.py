"""The connection to a cluster: building the client (TLS, credentials, Elastic Cloud), sending one
request (429 backoff, timeouts, errors mapped to :mod:`es_rag.errors`), the probe (version, licence,
plugins, inference endpoints, privileges) and what the probe decides (native fusion, semantic_text)."""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from es_rag.backend import EmbeddingState
from es_rag.elasticsearch.assets import setup_paths
from es_rag.elasticsearch.probe import (
    ASSET_PRIVILEGE,
    ROLE_PRIVILEGES,
    UNKNOWN_VERSION,
    Capabilities,
    decide_native_rrf,
    exclude_vectors_accepted,
    installed_text_analyzers,
    installed_version,
    privileges_request,
    version_tuple,
)
from es_rag.elasticsearch.responses import error_reason
from es_rag.elasticsearch.transport import (
    api_error as api_error,
)
from es_rag.elasticsearch.transport import (
    check_url as check_url,
)
from es_rag.elasticsearch.transport import (  # re-exported: callers import them from here
    client_major as client_major,
)
from es_rag.elasticsearch.transport import (
    client_url as client_url,
)
from es_rag.elasticsearch.transport import (
    exception_cause as exception_cause,
)
from es_rag.elasticsearch.transport import (
    is_licence_refusal as is_licence_refusal,
)
from es_rag.elasticsearch.transport import (
    request_headers as request_headers,
)
from es_rag.errors import ClusterError, ClusterTimeout, ClusterUnreachable, ConfigError
from es_rag.es_request import EsRequest
from es_rag.flows import adrive, drive
from es_rag.redact import redact_url, split_userinfo
from es_rag.settings import FusionPath, Settings

TRANSPORT_RETRY_STATUSES = (502, 503, 504)
"""What the transport may resend at once. Not 429: elastic-transport resends a status with no wait at all
(``Transport.perform_request``; elastic-transport-python#197), so a full queue got four requests in a row;
:meth:`ElasticsearchBackend.send` and the bulk helper wait before resending a 429."""


SEND_429_RETRIES = 3


SEND_429_BACKOFF = 0.5
"""A 429 answered to :meth:`ElasticsearchBackend.send` is resent after ``b``, ``2b``, ``4b`` seconds, ``b`` drawn from
``[SEND_429_BACKOFF / 2, SEND_429_BACKOFF]``."""


C = TypeVar("C", bound="ClusterClient")
R = TypeVar("R")


@dataclass(frozen=True)
class Send:
    """One request a flow asks its driver to send; the driver answers with the parsed body (or throws the
    :class:`~es_rag.errors.ClusterError` that :meth:`ClusterClient.send` raises into the flow).

    Attributes:
        request: The request, built by a pure body builder.
        ignore: HTTP statuses answered as a body instead of raised.
    """

    request: EsRequest
    ignore: tuple[int, ...] = ()


Flow = Generator[Send, Any, R]
"""Request logic without I/O: a generator that yields each :class:`Send` and receives its body. The same flow runs
on a synchronous client (:func:`drive`) and on an ``AsyncElasticsearch`` (:func:`adrive`), so both send the same
bodies in the same order and read the answers the same way."""


def is_async_client(client: Any) -> bool:
    """Whether ``client`` is an ``elasticsearch.AsyncElasticsearch`` (its ``perform_request`` is a coroutine
    function).

    Args:
        client: A client.
    """
    return inspect.iscoroutinefunction(getattr(client, "perform_request", None))


_RETRY = object()


class ClusterClient:
    """Sends es_rag's requests to a cluster through an ``elasticsearch.Elasticsearch`` client and learns what the
    cluster offers (:meth:`probe`).

    The client is the caller's (an app's connection pool, auth and TLS) or built by :meth:`connect`; every request
    goes through :meth:`send`, which sets its own retry and timeout options per call. Use it as a context
    manager, or call :meth:`close`, to release the connections.

    An ``elasticsearch.AsyncElasticsearch`` is accepted too: it serves the ``a``-prefixed coroutines (:meth:`asend`,
    :meth:`aprobe` and the backend's ``aretrieve``...), which run the same request flows as their synchronous twins
    (:func:`drive` / :func:`adrive`); the synchronous methods then raise a :class:`ConfigError` that says so.

    Args:
        client: A configured ``Elasticsearch`` or ``AsyncElasticsearch`` (tests pass one whose transport returns
            canned responses).
        settings: Index names, candidate counts, fusion path.
        url: The cluster address, for messages (read from the client when not given).
    """

    def __init__(self, client: Any, settings: Settings, *, url: str | None = None) -> None:
        self.async_io = is_async_client(client)
        """Whether the client is an ``AsyncElasticsearch`` (the pipeline awaits the ``a``-prefixed methods)."""
        self.client: Any = None if self.async_io else client
        self.aclient: Any = client if self.async_io else None
        self.settings = settings
        self.url = url or client_url(client)
        self._caps: Capabilities | None = None
        self._embedding: EmbeddingState | None = None
        self._probe_lock = threading.Lock()
        self._aprobing: asyncio.Task[Capabilities] | None = None

    @classmethod
    def connect(
        cls: type[C],
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
    ) -> C:
        """Build a client for ``url`` (or an Elastic Cloud ``cloud_id``).

        Credentials: explicit ones first (``api_key``, else ``username``/``password``, else the URL's user-info,
        percent-decoded), then the environment (``ES_API_KEY``, else ``ES_USERNAME``/``ES_PASSWORD``); an
        environment variable never overrides an explicit credential. Basic auth goes in a header, as UTF-8 (x-pack's
        ``UsernamePasswordToken.extractToken`` decodes it with ``CharArrays.utf8BytesToChars``; the client's own
        ``basic_auth`` takes ASCII only), so the client's URL never holds the password. The client resends only
        502/503/504 at once (never 429, which :meth:`send` and the bulk helper retry with backoff) and uses
        ``settings.connection.request_timeout``.

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
        from elastic_transport.client_utils import basic_auth_to_header
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
            url = check_url(url)
            shown = redact_url(url)  # every message, report and repr is built from it
            # The client gets the user-info as basic auth, never inside its URL: a password may hold "/" or "@",
            # which a URL parser reads as the path or the host, and no transport error can quote it back.
            url, url_user, url_password = split_userinfo(url)
            if url_password is not None and not (api_key or (username and password)):
                username = urllib.parse.unquote(url_user or "")
                password = urllib.parse.unquote(url_password)
            if url.startswith("http://") and (ca_certs or ssl_assert_fingerprint):
                raise ConfigError(f"--ca-certs / --ssl-assert-fingerprint need an https:// URL, got {shown}")
        if ca_certs:
            kwargs["ca_certs"] = ca_certs
        if ssl_assert_fingerprint:
            kwargs["ssl_assert_fingerprint"] = ssl_assert_fingerprint
        if not verify_certs:
            kwargs["ssl_show_warn"] = False  # --insecure is explicit; the CLI says so once
        if api_key:
            kwargs["api_key"] = api_key
        elif username and password:
            kwargs["headers"] = {"authorization": basic_auth_to_header((username, password))}
        elif os.environ.get("ES_API_KEY"):
            kwargs["api_key"] = os.environ["ES_API_KEY"]
        elif os.environ.get("ES_USERNAME") and os.environ.get("ES_PASSWORD"):
            kwargs["headers"] = {
                "authorization": basic_auth_to_header((os.environ["ES_USERNAME"], os.environ["ES_PASSWORD"]))
            }
        try:
            client = Elasticsearch(None if cloud_id else url, **kwargs)
        except ValueError as exc:
            raise ConfigError(f"cannot connect to {shown}: {exc}") from None
        return cls(client, settings, url=shown)

    def close(self) -> None:
        """Close the client's connections (the backend cannot be used afterwards); an ``AsyncElasticsearch`` is
        closed by :meth:`aclose`."""
        if self.client is not None:
            self.client.close()

    async def aclose(self) -> None:
        """Close the ``AsyncElasticsearch`` client's connections (the synchronous client's too, when that is
        the one held)."""
        if self.aclient is not None:
            await self.aclient.close()
        else:
            self.close()

    def __enter__(self: C) -> C:
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
            ConfigError: This backend holds an ``AsyncElasticsearch`` (use the ``a``-prefixed methods).
        """
        if self.client is None:
            raise ConfigError(
                f"{request.method} /{request.path}: this backend holds an AsyncElasticsearch client, which serves "
                "only the async calls (RagClient.asearch); ingest, delete, explain, selftest and the synchronous "
                "search need an elasticsearch.Elasticsearch client"
            )
        headers = request_headers(request.is_ndjson, request.body is not None)
        client = self.client.options(**self._options(timeout))
        wait = SEND_429_BACKOFF * (1.0 - 0.5 * random.random())
        for attempt in range(SEND_429_RETRIES + 1):
            try:
                resp = client.perform_request(request.method, "/" + request.path, headers=headers, body=request.body)
                return resp.body
            except Exception as exc:
                body = self._failed(exc, request, ignore, timeout, retry=attempt < SEND_429_RETRIES)
                if body is _RETRY:
                    time.sleep(wait)
                    wait *= 2
                    continue
                return body
        raise AssertionError("unreachable")  # pragma: no cover

    async def asend(self, request: EsRequest, *, ignore: Sequence[int] = (), timeout: float | None = None) -> Any:
        """:meth:`send` on the ``AsyncElasticsearch`` client: the same headers, options, 429 waits (without
        blocking the event loop) and errors.

        Args:
            request: The request.
            ignore: HTTP statuses returned as a body instead of raised.
            timeout: Seconds for this request (default ``settings.connection.request_timeout``).

        Raises:
            ConfigError: This backend holds a synchronous client (use :meth:`send`).
        """
        if self.aclient is None:
            raise ConfigError(
                f"{request.method} /{request.path}: this backend holds a synchronous elasticsearch client; "
                "asend needs an AsyncElasticsearch"
            )
        headers = request_headers(request.is_ndjson, request.body is not None)
        client = self.aclient.options(**self._options(timeout))
        wait = SEND_429_BACKOFF * (1.0 - 0.5 * random.random())
        for attempt in range(SEND_429_RETRIES + 1):
            try:
                resp = await client.perform_request(
                    request.method, "/" + request.path, headers=headers, body=request.body
                )
                return resp.body
            except Exception as exc:
                body = self._failed(exc, request, ignore, timeout, retry=attempt < SEND_429_RETRIES)
                if body is _RETRY:
                    await asyncio.sleep(wait)
                    wait *= 2
                    continue
                return body
        raise AssertionError("unreachable")  # pragma: no cover

    def send_step(self, step: Send) -> Any:
        """:meth:`send` for a flow's :class:`Send` (what :func:`drive` calls).

        Args:
            step: The request and the statuses it ignores.
        """
        return self.send(step.request, ignore=step.ignore)

    async def asend_step(self, step: Send) -> Any:
        """:meth:`asend` for a flow's :class:`Send` (what :func:`adrive` awaits).

        Args:
            step: The request and the statuses it ignores.
        """
        return await self.asend(step.request, ignore=step.ignore)

    @staticmethod
    def _options(timeout: float | None) -> dict[str, Any]:
        options: dict[str, Any] = {"retry_on_status": TRANSPORT_RETRY_STATUSES}
        if timeout is not None:
            options["request_timeout"] = timeout
        return options

    def _failed(
        self, exc: Exception, request: EsRequest, ignore: Sequence[int], timeout: float | None, *, retry: bool
    ) -> Any:
        """What a failed send does: the error body of an ignored status, ``_RETRY`` for a 429 with retries left;
        otherwise it raises the mapped :mod:`es_rag.errors` error (:meth:`send` lists them)."""
        from elastic_transport import TlsError
        from elasticsearch import ApiError, ConnectionTimeout, TransportError, UnsupportedProductError

        what = f"{request.method} /{request.path}"
        if isinstance(exc, UnsupportedProductError):
            raise ClusterError(
                f"{self.url} answered, but it is not Elasticsearch (no X-Elastic-Product header): check the URL "
                "and the port (Elasticsearch listens on 9200 by default; Kibana on 5601 is not it)",
                status=exc.meta.status,
            ) from exc
        if isinstance(exc, ApiError):
            status = exc.meta.status
            if status in ignore:
                return exc.body
            if status == 429 and retry:
                return _RETRY
            raise api_error(what, status, exc.body, self.url) from exc
        if isinstance(exc, ConnectionTimeout):
            limit = timeout if timeout is not None else self.settings.connection.request_timeout
            raise ClusterTimeout(
                f"{what}: timed out after {limit:g} s without an answer from {self.url} (the cluster may still "
                "have done the work; --request-timeout / --bulk-timeout set the limits)"
            ) from exc
        if isinstance(exc, TlsError):
            raise ClusterUnreachable(
                f"TLS with {self.url} failed: {exception_cause(exc)}. "
                "Pass the cluster's CA (--ca-certs, ES_CA_CERTS: "
                "Elasticsearch 9 writes config/certs/http_ca.crt) or its certificate fingerprint "
                "(--ssl-assert-fingerprint); --insecure skips verification on a throwaway dev cluster"
            ) from exc
        if isinstance(exc, TransportError):
            raise ClusterUnreachable(f"{what}: cluster unreachable at {self.url}: {exception_cause(exc)}") from exc
        raise exc

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
                caps = drive(self._probe_flow(), self.send_step)
                self._caps = caps
            return caps

    def version(self) -> tuple[int, ...] | None:
        """The cluster's version as ``(major, minor, patch)`` from :meth:`probe`; None where ``GET /`` was not
        readable (a key without ``monitor``)."""
        caps = self.probe()
        return version_tuple(caps.version) if caps.version != UNKNOWN_VERSION else None

    async def aprobe(self, *, refresh: bool = False) -> Capabilities:
        """:meth:`probe` on the ``AsyncElasticsearch`` client: the same requests, read once; coroutines that ask
        while it runs wait for the same probe.

        Args:
            refresh: Probe again even if cached.
        """
        caps = self._caps
        if caps is not None and not refresh:
            return caps
        loop = asyncio.get_running_loop()
        pending = self._aprobing
        if pending is None or pending.get_loop() is not loop or refresh:
            pending = self._aprobing = loop.create_task(adrive(self._probe_flow(), self.asend_step))
        try:
            caps = await asyncio.shield(pending)
        finally:
            if self._aprobing is pending and pending.done():
                self._aprobing = None
        with self._probe_lock:
            self._caps = caps
        return caps

    def _probe_flow(self) -> Flow[Capabilities]:
        unreadable: dict[str, str] = {}

        def get(path: str, privilege: str, ignore: tuple[int, ...] = ()) -> Flow[Any]:
            resp = yield Send(EsRequest("GET", path), ignore=(403, *ignore))
            if isinstance(resp, dict) and resp.get("status") == 403 and "error" in resp:
                unreadable[path or "/"] = f"HTTP 403: needs {privilege} ({error_reason(resp)})"
                return None
            return resp

        root = yield from get("", "cluster privilege monitor")
        version = str(root.get("version", {}).get("number", "0")) if isinstance(root, dict) else UNKNOWN_VERSION
        lic_resp = yield from get("_license", "cluster privilege monitor", (404,))
        if lic_resp is None:
            ltype, lstatus = "unknown", "unknown"
        else:
            lic = (lic_resp.get("license") or {}) if isinstance(lic_resp, dict) else {}
            ltype, lstatus = str(lic.get("type", "unknown")), str(lic.get("status", "unknown"))
        native, reason = decide_native_rrf(version, ltype, lstatus)
        if "_license" in unreadable:
            reason = f"licence unreadable ({unreadable['_license']}): client fusion"
        try:
            inf = yield from get("_inference/_all", "cluster privilege monitor_inference", (400, 404))
            raw_endpoints = inf.get("endpoints", []) if isinstance(inf, dict) else []
        except ClusterError:
            raw_endpoints = []
        endpoints = [str(e.get("inference_id", "?")) for e in raw_endpoints]
        endpoint_info = {
            str(e.get("inference_id", "?")): {
                "task_type": str(e.get("task_type", "unknown")),
                "service": str(e.get("service", "unknown")),
                "dimensions": str((e.get("service_settings") or {}).get("dimensions", "")),
                "model_id": str((e.get("service_settings") or {}).get("model_id", "")),
            }
            for e in raw_endpoints
        }
        plugins_resp = yield from get("_nodes/plugins", "cluster privilege monitor")
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
            got = yield from get(path, ASSET_PRIVILEGE[path.split("/", 1)[0]], (404,))
            assets[path] = installed_version(path, got)
            installed[path] = got
        known = version != UNKNOWN_VERSION
        return Capabilities(
            version=version,
            license_type=ltype,
            license_status=lstatus,
            native_rrf=native,
            native_rrf_reason=reason,
            vectors_in_source_param=exclude_vectors_accepted(version_tuple(version)) if known else None,
            inference_endpoints=endpoints,
            inference_endpoint_info=endpoint_info,
            analysis_plugins=plugins,
            installed_assets=assets,
            installed_analyzers=installed_text_analyzers(installed, self.settings),
            unreadable=unreadable,
        )

    def privileges(self) -> dict[str, str]:
        """Which uses (search, ingest, setup) the caller's credentials allow on this prefix's indices, and what
        each lacks, from ``POST _security/user/_has_privileges`` (which needs no privilege of its own)."""
        request = privileges_request(self.settings)
        names = request.body["index"][0]["names"]
        resp = self.send(request, ignore=(400, 403, 404, 500))
        if not isinstance(resp, dict) or "error" in resp or "index" not in resp:
            reason = error_reason(resp) if isinstance(resp, dict) else str(resp)
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
        if (settings or self.settings).fusion.path is FusionPath.CLIENT:
            return "client"
        return self.fusion_path_of(self.probe(), settings)

    def fusion_path_of(self, caps: Capabilities, settings: Settings | None = None) -> str:
        """:meth:`fusion_path` decided from a probe already made (no request).

        Args:
            caps: The cluster's capabilities.
            settings: Settings whose ``fusion_path`` applies (per-call override).
        """
        mode = (settings or self.settings).fusion.path
        if mode is FusionPath.CLIENT:
            return "client"
        if mode is FusionPath.NATIVE:
            if not caps.native_rrf:
                raise ConfigError(
                    f"fusion_path=native requested but {caps.native_rrf_reason}; use --fusion-path client or auto"
                )
            return "native"
        return "native" if caps.native_rrf else "client"
