"""The protocol every backend implements and the records it returns."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from es_rag.errors import InputError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.records import Chunk, Hit
from es_rag.settings import Settings
from es_rag.versions.store import VersionStore

REQUIRED_FIELDS = ("chunk_id", "tenant_id", "source_id", "text")
"""The fields the ingest pipeline refuses a document without (same order as its ``fail`` processors)."""


def validate_chunk_source(doc: dict[str, Any], *, document: str) -> None:
    """Apply the ingest pipeline's required-field checks on the client side.

    Args:
        doc: The document body.
        document: Name of the document for the error message.

    Raises:
        InputError: Naming the first missing field.
    """
    for name in REQUIRED_FIELDS:
        value = doc.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise InputError(document, name, "missing required field")


CONTENT_HASH_METHOD = "SHA-256"
"""The ``method`` of the chunk pipeline's ``fingerprint`` processor (``ingest_pipelines/_lineage.j2``)."""


def content_hash(text: str, *, method: str = CONTENT_HASH_METHOD) -> str:
    """``content_hash`` exactly as the ingest pipeline's ``fingerprint`` processor writes it for
    ``{"fields": ["text"], "method": "SHA-256"}``, so every backend stores the same value.

    ``FingerprintProcessor`` (modules/ingest-common) hashes the field *values* only, each as a ``0x00`` delimiter
    followed by its UTF-8 bytes, with no salt unless one is configured, and writes the standard padded Base64 of
    the digest (not hex). For one string field that is ``base64(sha256(b"\\x00" + text.encode("utf-8")))``.

    Args:
        text: The chunk text.
        method: ``SHA-256`` (the pipeline's), or ``SHA-1``/``MD5``/``SHA-512`` (other fingerprint methods, to
            check the layout against Elasticsearch's own test vectors).
    """
    algorithm = {"MD5": "md5", "SHA-1": "sha1", "SHA-256": "sha256", "SHA-512": "sha512"}[method]
    digest = hashlib.new(algorithm, b"\x00" + text.encode("utf-8")).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass
class IndexReport:
    """Outcome of a bulk write: how many documents landed and every failure with its reason."""

    indexed: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)

    def merge(self, other: IndexReport) -> None:
        """Add ``other``'s counts and failures to this report.

        Args:
            other: Another report.
        """
        self.indexed += other.indexed
        self.failed.extend(other.failed)


@dataclass
class Retrieval:
    """What a backend returned for one query.

    Attributes:
        channels: Per channel (``bm25``, ``dense``), the hits best first, each with its channel score.
        fused: The fused list when the backend fused natively (native ``rrf``), else None.
        path: ``native-rrf``, ``client-rrf``, ``bm25-only`` or ``embedded``.
        requests: The requests sent (for the trace and ``explain``).
        took_ms: Server-side time per request, when reported.
        notes: Fallbacks taken and why.
        licence_fallback: The native retriever was refused by the licence at query time and the client path served
            the query instead.
        es_reranker: The inference endpoint whose ``text_similarity_reranker`` ordered ``fused`` (then each hit
            carries ``rerank_score`` and ``reranker_model = "es:<id>"``), None when Elasticsearch did not rerank.
        es_rerank_fallback: Why a configured Elasticsearch rerank did not happen (the local cross-encoder
            reranks instead), None when it happened or was not configured.
        diversified: ``diversify`` parameters when Elasticsearch chose ``fused`` by MMR, else None.
        mmr_note: Why MMR runs client-side, when ``mmr_path`` is not ``client``.
    """

    channels: dict[str, list[Hit]]
    fused: list[Hit] | None
    path: str
    requests: list[EsRequest] = field(default_factory=list)
    took_ms: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    licence_fallback: bool = False
    es_reranker: str | None = None
    es_rerank_fallback: str | None = None
    diversified: dict[str, Any] | None = None
    mmr_note: str | None = None


class SearchBackend(Protocol):
    """A store that indexes chunks and answers filtered BM25 + kNN retrieval."""

    name: str

    def index(self, chunks: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> IndexReport:
        """Write children (with vectors) and parents; idempotent by chunk_id."""
        ...

    def retrieve(
        self, query_text: str, query_vector: np.ndarray | None, flt: SearchFilter, settings: Settings
    ) -> Retrieval:
        """Run every channel with the same hard filter."""
        ...

    def get_parents(self, parent_ids: Sequence[str], flt: SearchFilter) -> dict[str, Hit]:
        """Fetch parent sections by id, under the same hard filter."""
        ...

    def get_neighbors(self, anchors: Sequence[Hit], flt: SearchFilter, window: int) -> dict[str, list[Hit]]:
        """Per anchor chunk_id, up to ``window`` children before and after it (same source, version
        and parent), under the same hard filter, in document order."""
        ...

    def count(self, flt: SearchFilter | None = None) -> int:
        """Number of child chunks stored (only those ``flt`` allows, when given)."""
        ...

    def snapshot_versions(self, flt: SearchFilter) -> SearchFilter:
        """``flt`` with a snapshot of the tenant's active-version snapshot (the registry read once); a filter that
        already carries one is returned as it is. The pipeline calls it once per search."""
        ...

    def version_store(self) -> VersionStore:
        """Version switches (begin -> write -> refresh -> commit/purge) and source deletes on this backend."""
        ...

    def flush(self) -> None:
        """Make every write so far durable (the embedded store writes its files; Elasticsearch has nothing
        buffered)."""
        ...
