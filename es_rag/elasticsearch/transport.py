"""What es_rag asks of the ``elasticsearch`` client and reads from its answers: the REST compatibility of the installed
client, the headers, a URL's checks, and an error answer as one :class:`~es_rag.errors.ClusterError` line (a licence
refusal told apart)."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from es_rag.elasticsearch.responses import error_reason
from es_rag.errors import ClusterError, ConfigError, LicenseError
from es_rag.redact import redact_url


def client_major() -> int:
    """Major version of the installed ``elasticsearch`` client: the REST compatibility we ask for.

    The 9.x client talks to 9.x clusters; for an 8.x cluster install the 8.x client
    (``pip install 'elasticsearch>=8.18,<9'``), with which es_rag sends ``compatible-with=8``.
    """
    import importlib.metadata

    return int(importlib.metadata.version("elasticsearch").split(".")[0])


def request_headers(ndjson: bool, has_body: bool) -> dict[str, str]:
    major = client_major()
    headers = {"accept": f"application/vnd.elasticsearch+json; compatible-with={major}"}
    if has_body:
        kind = "x-ndjson" if ndjson else "json"
        headers["content-type"] = f"application/vnd.elasticsearch+{kind}; compatible-with={major}"
    return headers


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


def api_error(what: str, status: int, body: Any, url: str) -> ClusterError:
    """The :class:`ClusterError` for an error status, in one line that says what to do."""
    if status == 403 and is_licence_refusal(body):
        return LicenseError(
            f"{what}: licence does not allow this request ({error_reason(body)})", status=403, response=body
        )
    if status == 401:
        return ClusterError(
            f"{what}: authentication failed at {url}: set ES_API_KEY, or ES_USERNAME and ES_PASSWORD "
            f"({error_reason(body)})",
            status=401,
            response=body,
        )
    if status == 403:
        return ClusterError(f"{what}: permission denied: {error_reason(body)}", status=403, response=body)
    text = str(body).lower()
    if status == 400 and "media_type_header_exception" in text:
        return ClusterError(
            f"{what}: the cluster refuses REST compatibility with the installed elasticsearch client "
            f"{client_major()}.x ({error_reason(body)}); for an 8.x cluster install the 8.x client: "
            "pip install 'elasticsearch>=8.18,<9'",
            status=400,
            response=body,
        )
    return ClusterError(f"{what} failed: {error_reason(body)}", status=status, response=body)


def exception_cause(exc: BaseException) -> str:
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


def check_url(url: str | None) -> str:
    """An Elasticsearch URL with scheme, host and port, or a :class:`ConfigError` that shows the right form."""
    given = (url or "").strip().rstrip("/")
    raw = redact_url(given)  # what the messages below show
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
        given_port = parsed.netloc.rpartition("@")[2].rpartition(":")[2]
        what = "is out of range (1-65535)" if given_port.isdigit() else "is not a number"
        raise ConfigError(f"Elasticsearch URL {raw!r}: the port {what}") from None
    if port == 0:
        raise ConfigError(f"Elasticsearch URL {raw!r}: the port is out of range (1-65535)")
    if port is None and parsed.scheme == "http":
        raise ConfigError(f"Elasticsearch URL {raw!r} has no port: Elasticsearch listens on 9200, e.g. {raw}:9200")
    return given


def client_url(client: Any) -> str:
    """The first node's address of a client, for messages."""
    try:
        node = client.transport.node_pool.all()[0]
        return redact_url(str(node.base_url))
    except Exception:  # a stand-in client in tests
        return "the cluster"
