"""Elasticsearch's error envelope, raised by every rule of the strict double.

Every rule that refuses a request raises :class:`EsError` with the HTTP status, the exception type and the
reason Elasticsearch gives, and the source file that defines it (``source``: kept out of the response
body, it is the citation the tests read). ``ElasticsearchException.generateThrowableXContent`` renders
``{"error": {"root_cause": [...], "type", "reason", ...metadata, "caused_by"}, "status"}``; metadata keys
lose their ``es.`` prefix in the body (``es.license.expired.feature`` -> ``license.expired.feature``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class EsError(Exception):
    """A refusal the double answers as Elasticsearch does.

    Args:
        status: HTTP status.
        err_type: Elasticsearch exception type (``mapper_parsing_exception``, ...).
        reason: The exception message.
        source: Elasticsearch source file / REST test that defines this refusal (the citation).
        caused_by: Optional nested cause ``{"type", "reason"}``.
        **metadata: Extra fields of the error object (``license.expired.feature``, ``index``, ...).
    """

    def __init__(
        self,
        status: int,
        err_type: str,
        reason: str,
        *,
        source: str,
        caused_by: dict[str, Any] | None = None,
        **metadata: Any,
    ) -> None:
        super().__init__(f"{status} {err_type}: {reason}")
        self.status = status
        self.err_type = err_type
        self.reason = reason
        self.source = source
        self.caused_by = caused_by
        self.metadata = metadata

    def error_object(self) -> dict[str, Any]:
        """The ``error`` object (also a ``_bulk`` item's ``error`` and an ``_msearch`` item's)."""
        cause: dict[str, Any] = {"type": self.err_type, "reason": self.reason, **self.metadata}
        root = (
            self.caused_by
            if self.caused_by is not None and self.err_type.endswith("_phase_execution_exception")
            else cause
        )
        out: dict[str, Any] = {"root_cause": [dict(root)], **cause}
        if self.caused_by is not None:
            out["caused_by"] = dict(self.caused_by)
        return out

    def body(self) -> dict[str, Any]:
        """The response body."""
        return {"error": self.error_object(), "status": self.status}


def bad_request(err_type: str, reason: str, *, source: str, **extra: Any) -> EsError:
    """HTTP 400 with ``err_type``."""
    return EsError(400, err_type, reason, source=source, **extra)


def validation_failed(errors: list[str], *, source: str) -> EsError:
    """HTTP 400 ``action_request_validation_exception``: every error of one request validation, numbered in one
    message (``ValidationException.getMessage``: ``"Validation Failed: " + (i + 1) + ": " + error + ";"`` for each,
    no separator in between)."""
    listed = "".join(f"{i}: {e};" for i, e in enumerate(errors, start=1))
    return EsError(400, "action_request_validation_exception", f"Validation Failed: {listed}", source=source)


def parse_error(parser: str, field: str, *, source: str) -> EsError:
    """``x_content_parse_exception`` ``[<parser>] unknown field [<field>]`` of an ObjectParser that errors on
    unknown fields (``ObjectParser.throwFailedToParse`` / ``SuggestingErrorOnUnknown``: ``"[%s] unknown field
    [%s]%s"``); the double leaves out the ``[line:col]`` location prefix and the did-you-mean suffix."""
    return EsError(400, "x_content_parse_exception", f"[{parser}] unknown field [{field}]", source=source)


class DoubleLimit(EsError):
    """Something Elasticsearch may accept that the double cannot evaluate: refused (HTTP 400) with a reason
    that says so, never silently accepted."""

    def __init__(self, what: str) -> None:
        super().__init__(
            400,
            "strict_double_unsupported",
            f"the strict test double does not implement {what}; extend tests/double or use a live cluster",
            source="tests/double (a double refuses what it cannot evaluate)",
        )


def java_str(value: Any) -> str:
    """``Object.toString()`` / ``String.valueOf`` of a parsed JSON value as Java prints it (``Boolean``, ``Map``,
    ``List``), for messages that quote a value and for the REST test runner's comparisons."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if not value.is_integer() or abs(value) >= 1e7 else f"{value:.1f}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={java_str(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(java_str(v) for v in value) + "]"
    return str(value)
