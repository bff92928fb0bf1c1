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
    indices: tuple[str, ...] = ()
    """The concrete indices the hits came from (Elasticsearch's ``_index``; empty on the embedded backend)."""


@dataclass(frozen=True)
class EmbeddingState:
    """Which model's vectors an index holds, read once per backend (:meth:`SearchBackend.embedding_state`).

    Attributes:
        versions: ``embedding_version`` -> number of chunks carrying it.
        unversioned: Chunks without ``embedding_version`` (written by another tool).
        indices: The concrete indices read (Elasticsearch: the generation behind the alias), or the folder.
        endpoint_model: In vector mode ``inference``: the ``model_id`` of the inference endpoint (None: unknown).
    """

    versions: dict[str, int]
    unversioned: int = 0
    indices: tuple[str, ...] = ()
    endpoint_model: str | None = None


def model_key(name: str) -> str:
    """A model name compared across namings: the last path part, lower-cased, without a leading ``.`` or a platform
    suffix, and eland's ``__`` read as ``/`` (``sentence-transformers/all-MiniLM-L6-v2``,
    ``sentence-transformers__all-minilm-l6-v2`` and ``all-minilm-l6-v2`` agree; so do
    ``intfloat/multilingual-e5-small`` and ``.multilingual-e5-small_linux-x86_64``).

    Args:
        name: A model name, hub id, eland model id or Elasticsearch built-in model id.
    """
    last = name.replace("__", "/").rstrip("/").rsplit("/", 1)[-1].lower().lstrip(".")
    for suffix in ("_linux-x86_64",):
        last = last.removesuffix(suffix)
    return last.split("@", 1)[0]


REINDEX_HINT = "rebuild the index with the query encoder: es-rag reindex PATHS --tenant T (docs/operations.md)"


def check_embedding(
    state: EmbeddingState, settings: Settings, query_version: str | None, *, use: str = "queries are embedded"
) -> str | None:
    """Refuse to query an index whose vectors another model made; return a warning (or None) when the check cannot
    decide.

    * ``client`` vectors: every chunk's ``embedding_version`` must equal the query encoder's version, or that
      version + :data:`~es_rag.encoders.late.LATE_SUFFIX` (late-chunked vectors of the same model: queries are embedded
      by the plain model either way).
    * ``inference`` vectors: chunks carry ``inference:<inference_id>``, written by the ingest pipeline; queries are
      embedded client-side by ``embedding_model``, so the endpoint must be the configured one and its ``model_id``
      must name the same model (:func:`model_key`).
    * ``semantic_text``: Elasticsearch embeds documents and queries with the field's endpoint: nothing to check.
    * Several versions in one index: refused (a half-rebuilt index).
    * Chunks without a version and none with one: a warning, not a refusal (documents of other tools; es_rag cannot
      tell); an empty index passes.

    Args:
        state: What the index holds.
        settings: The vector mode, inference endpoint and embedding model.
        query_version: The query encoder's version (``Embedder.version``); None when queries are not embedded.
        use: What ``query_version`` is used for, in the message (ingest checks its own model the same way).

    Raises:
        EmbeddingMismatch: The vectors and the query encoder disagree.
    """
    from es_rag.errors import EmbeddingMismatch
    from es_rag.settings import VectorMode

    mode = settings.encoder.vectors
    if mode is VectorMode.SEMANTIC_TEXT or query_version is None:
        return None
    where = ", ".join(state.indices) or "the index"
    if len(state.versions) > 1:
        found = ", ".join(f"{v} ({n} chunks)" for v, n in sorted(state.versions.items()))
        raise EmbeddingMismatch(
            f"{where} holds vectors of several embedding models ({found}); {use} by {query_version}: {REINDEX_HINT}"
        )
    if not state.versions:
        if state.unversioned:
            return (
                f"{where}: {state.unversioned} chunks carry no embedding_version (written by another tool?): "
                f"cannot check that their vectors come from the query encoder {query_version}"
            )
        return None
    (stored,) = state.versions
    if mode is VectorMode.INFERENCE:
        expected = f"inference:{settings.encoder.inference_id}"
        if stored != expected:
            raise EmbeddingMismatch(
                f"{where} holds vectors of embedding_version {stored}, but vector_mode inference with inference_id "
                f"{settings.encoder.inference_id} expects {expected}: {REINDEX_HINT}"
            )
        client = (
            f"{settings.encoder.model} ({query_version})" if query_version != settings.encoder.model else query_version
        )
        if state.endpoint_model is None:
            raise EmbeddingMismatch(
                f"{where} holds vectors of {stored}; {use} client-side by {client}, and the "
                f"endpoint's model_id is unreadable (GET _inference needs monitor_inference), so es_rag cannot tell "
                "that both are one model: grant monitor_inference, or set --embedding-model to the endpoint's model"
            )
        if model_key(state.endpoint_model) != model_key(settings.encoder.model):
            raise EmbeddingMismatch(
                f"{where} holds vectors of {stored} (model {state.endpoint_model}), but {use} "
                f"client-side by {client}: set --embedding-model to the endpoint's model, or {REINDEX_HINT}"
            )
        return None
    from es_rag.encoders.late import late_version

    if stored not in (query_version, late_version(query_version)):
        raise EmbeddingMismatch(
            f"{where} holds vectors of embedding_version {stored}, but {use} by {query_version}: "
            f"{REINDEX_HINT}, or query with --embedding-model matching the index"
        )
    return None


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

    def embedding_state(self, refresh: bool = False) -> EmbeddingState:
        """Which ``embedding_version`` values the chunk index holds, read once and cached (``refresh`` reads again;
        every write of this backend drops the cache)."""
        ...

    def flush(self) -> None:
        """Make every write so far durable (the embedded store writes its files; Elasticsearch has nothing
        buffered)."""
        ...


def why_empty(backend: Any, flt: SearchFilter) -> str | None:
    """Why a search retrieved nothing at all, in words that name the fix; None when the caller's scope holds chunks
    (a query that matches none of them is an answer, not an error). Asked only after an empty retrieval: one or two
    counts (one ``_count`` each on Elasticsearch).

    Args:
        backend: The backend searched (a backend without ``count``, such as the async view, is not asked).
        flt: The caller's hard filter.
    """
    count = getattr(backend, "count", None)
    if count is None:
        return None
    url = getattr(backend, "url", None)
    if url is not None and hasattr(backend, "settings"):
        where = f"{backend.settings.chunk_index} on {url}"
    else:
        where = str(getattr(backend, "directory", None) or "the index")
    if count() == 0:
        return (
            f"{where} holds no chunks: nothing has been ingested there (es-rag ingest PATH --tenant {flt.tenant_id} "
            "with the same --index-dir or --es; RagClient.ingest)"
        )
    tenants = getattr(backend, "tenants", None)
    if callable(tenants):
        known = sorted(tenants())
        if flt.tenant_id not in known:
            shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
            return f"tenant {flt.tenant_id!r} has no chunks in {where} (its tenants: {shown}): check the tenant"
    groups = ", ".join(flt.groups)
    if count(SearchFilter(flt.tenant_id, flt.groups)) == 0:
        return (
            f"tenant {flt.tenant_id!r} has no chunk in {where} that the groups {groups} may read: check the tenant "
            f"and the ACL groups (es-rag sources --tenant {flt.tenant_id} lists its sources)"
        )
    if (flt.metadata or flt.conditions) and count(flt) == 0:
        return (
            f"the metadata filters exclude every chunk tenant {flt.tenant_id!r} may read in {where}: check their "
            "fields and values (es-rag search --help, 'Filters')"
        )
    return None
