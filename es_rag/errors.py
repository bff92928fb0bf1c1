"""Error hierarchy: every error es_rag raises derives from :class:`EsRagError`."""

from __future__ import annotations

from typing import Any


class EsRagError(Exception):
    """Root of every error raised by es_rag."""


class ConfigError(EsRagError, ValueError):
    """A setting is missing or invalid; the message names the setting and the valid values."""


class InputError(EsRagError, ValueError):
    """A document is unusable; names the document and the field that is wrong.

    Args:
        document: Identifier of the offending document (path, source_id or line reference).
        field: The field (or aspect, e.g. ``encoding``) that is wrong.
        reason: Human-readable explanation.
    """

    def __init__(self, document: str, field: str, reason: str) -> None:
        self.document = document
        self.field = field
        self.reason = reason
        super().__init__(f"{document}: field '{field}': {reason}")

    def as_dict(self) -> dict[str, str]:
        """Return the error as a JSON-able report row."""
        return {"document": self.document, "field": self.field, "reason": self.reason}


class ClusterError(EsRagError):
    """Elasticsearch answered with an error, or could not be reached.

    Args:
        message: What es_rag was doing and what went wrong.
        status: HTTP status, when the cluster answered.
        response: The server's response body, kept verbatim for diagnosis.
    """

    def __init__(self, message: str, *, status: int | None = None, response: Any = None) -> None:
        self.status = status
        self.response = response
        super().__init__(message if status is None else f"{message} (HTTP {status})")


class LicenseError(ClusterError):
    """The cluster's licence does not allow a feature (e.g. the native ``rrf`` retriever on Basic)."""


class ClusterUnreachable(ClusterError):
    """No HTTP answer: connection refused, DNS, TLS handshake; the request may not have reached the cluster."""


class BulkStopped(ClusterError):
    """A bulk run stopped part-way on a refusal no retry can fix (401, 403, 413).

    Args:
        what: What stopped, and why.
        indexed: Documents the cluster acknowledged before it stopped: every worker's, and, once the ingest has
            added them (:meth:`with_total`), the earlier batches' of the run.
        status: HTTP status.
        response: The server's error.
    """

    after = "were indexed before it stopped"

    def __init__(self, what: str, *, indexed: int, status: int | None = None, response: Any = None) -> None:
        self.what = what
        self.indexed = indexed
        super().__init__(f"{what} ({indexed} documents {self.after})", status=status, response=response)

    def with_total(self, indexed: int) -> BulkStopped:
        """The same error counting ``indexed`` documents (the whole run's)."""
        return type(self)(self.what, indexed=indexed, status=self.status, response=self.response)


class ClusterTimeout(ClusterError):
    """No answer within the request timeout; the cluster may still have done the work."""


class EmbeddingMismatch(ConfigError):
    """The index's vectors come from another embedding model than the query encoder (kNN would compare vectors of two
    models); the message names both versions and the command that rebuilds the index."""


class ModelLoadError(EsRagError):
    """A model (embedder, cross-encoder, tokenizer) could not be loaded."""


class MissingDependencyError(EsRagError, ImportError):
    """An optional dependency is missing; the message names the pip extra that installs it."""


class BulkUnreachable(BulkStopped, ClusterUnreachable):
    """The transport failed part-way through a bulk run; ``indexed`` as in :class:`BulkStopped`."""

    after = "were indexed before the failure"
