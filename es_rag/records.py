"""The records every stage passes along: :class:`Chunk` (indexed) and :class:`Hit` (retrieved)."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Fields every chunk document carries in Elasticsearch (seed 000's lineage list plus bookkeeping).
LINEAGE_FIELDS = (
    "chunk_id",
    "source_id",
    "source_version",
    "parent_id",
    "heading_path",
    "start_offset",
    "end_offset",
    "chunker_version",
    "embedding_version",
    "tenant_id",
    "acl",
)


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """A child chunk (retrieval unit) or a parent section (generation unit) with its lineage.

    ``text == source_text[start_offset:end_offset]`` always holds for the text the source is chunked from: a Markdown,
    reStructuredText or plain file as read, an HTML page's visible text (:attr:`es_rag.chunking.html.HtmlLayout.clean`).
    ``visible_text`` is set only on HTML chunks of indexes written before that (their ``text`` is the markup span);
    None = ``text`` is what a reader or a model should see.
    """

    chunk_id: str
    source_id: str
    source_version: str
    parent_id: str | None
    heading_path: tuple[str, ...]
    start_offset: int
    end_offset: int
    chunker_version: str
    tenant_id: str
    acl: tuple[str, ...]
    title: str
    text: str
    token_count: int
    kind: str = "child"
    source_path: str | None = None
    embedding_version: str | None = None
    contextual_text: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    visible_text: str | None = None
    language: str | None = None
    """ISO 639-1 language of the chunk's document (:func:`es_rag.languages.document_language`), None when unknown."""
    page_start: int | None = None
    """First page (1-based) the chunk's text is on, for a paged source (PDF); None for the others."""
    page_end: int | None = None
    """Last page (1-based) the chunk's text is on (``== page_start`` when it stays on one page)."""
    page_label_start: str | None = None
    """The printed label of ``page_start`` (PDF ``/PageLabels``: ``iv``, ``8``, ``A-3``) when the document labels its
    pages; None otherwise (citations then name the 1-based page)."""
    page_label_end: str | None = None
    """The printed label of ``page_end``."""
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def version_key(self) -> str:
        """``source_id@source_version``: what the active-version snapshot (:mod:`es_rag.versions.registry`)
        filters on."""
        return f"{self.source_id}@{self.source_version}"

    @property
    def embed_text(self) -> str:
        """The text the embedding model reads: ``contextual_text`` when set, else ``text``."""
        return self.contextual_text if self.contextual_text is not None else self.text

    def to_source(self, *, include_vector: bool = True) -> dict[str, Any]:
        """The document body as written to Elasticsearch (before the ingest pipeline adds hash and time).

        Args:
            include_vector: Put the vector in the body (False when the cluster computes it).
        """
        doc: dict[str, Any] = {
            "chunk_id": self.chunk_id,
            "source_id": self.source_id,
            "source_version": self.source_version,
            "heading_path": list(self.heading_path),
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "chunker_version": self.chunker_version,
            "tenant_id": self.tenant_id,
            "acl": list(self.acl),
            "title": self.title,
            "text": self.text,
            "token_count": self.token_count,
            "version_key": self.version_key,
        }
        if self.contextual_text is not None:
            doc["contextual_text"] = self.contextual_text
        if self.visible_text is not None:
            doc["visible_text"] = self.visible_text
        if self.parent_id is not None:
            doc["parent_id"] = self.parent_id
        if self.embedding_version is not None:
            doc["embedding_version"] = self.embedding_version
        if self.language is not None:
            doc["language"] = self.language
        if self.page_start is not None:
            doc["page_start"] = self.page_start
            doc["page_end"] = self.page_end if self.page_end is not None else self.page_start
        if self.page_label_start is not None:
            doc["page_label_start"] = self.page_label_start
            doc["page_label_end"] = self.page_label_end if self.page_label_end is not None else self.page_label_start
        if self.meta:
            doc["meta"] = dict(self.meta)
        if include_vector and self.vector is not None:
            doc["vector"] = [float(x) for x in self.vector]
        return doc

    def with_vector(self, vector: np.ndarray, embedding_version: str) -> Chunk:
        """Return a copy carrying ``vector`` computed by ``embedding_version``.

        Args:
            vector: The embedding.
            embedding_version: Model name and revision that produced it.
        """
        return dataclasses.replace(self, vector=vector, embedding_version=embedding_version)


def _page(value: Any) -> int | None:
    """A stored page number as an int (None when absent; Elasticsearch may hand back a float or a string)."""
    return None if value is None else int(value)


def page_label(
    page_start: int | None, page_end: int | None, label_start: str | None = None, label_end: str | None = None
) -> str:
    """How a citation names its pages: ``p. 14``, ``pp. 14-15``, or ``""`` for a source without pages. A document
    that labels its pages (PDF ``/PageLabels``) is cited by the labels it prints (``p. 8`` for its 15th page,
    ``pp. iv-1``).

    Args:
        page_start: First page (1-based), None when the source has none.
        page_end: Last page.
        label_start: The printed label of the first page, when the document has labels.
        label_end: The printed label of the last page.
    """
    if page_start is None:
        return ""
    if label_start is not None:
        first, last = label_start, label_end if label_end is not None else label_start
        same = page_end is None or page_end == page_start
    else:
        first, last = str(page_start), str(page_end if page_end is not None else page_start)
        same = first == last
    return f"p. {first}" if same else f"pp. {first}-{last}"


def _label(value: Any) -> str | None:
    """A stored page label as a string (None when absent)."""
    return None if value is None else str(value)


CHANNEL_SCORE_FIELD = {"bm25": "bm25_score", "dense": "dense_score", "exact": "exact_score"}
"""The :class:`Hit` field holding each retrieval channel's own score."""


@dataclass(frozen=True, kw_only=True)
class Hit:
    """One retrieved candidate and the score every stage gave it (None = stage did not score it).

    ``text`` is the stored span (``source[start_offset:end_offset]``; an HTML page's visible text); ``visible_text`` is
    set only on HTML chunks an earlier version wrote as markup. What the reranker and the LLM read is
    :attr:`display_text`.
    """

    chunk_id: str
    source_id: str
    text: str
    tenant_id: str
    parent_id: str | None = None
    source_version: str | None = None
    title: str = ""
    heading_path: tuple[str, ...] = ()
    start_offset: int | None = None
    end_offset: int | None = None
    acl: tuple[str, ...] = ()
    token_count: int | None = None
    content_hash: str | None = None
    chunker_version: str | None = None
    embedding_version: str | None = None
    source_path: str | None = None
    language: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    page_label_start: str | None = None
    page_label_end: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)
    bm25_score: float | None = None
    dense_score: float | None = None
    exact_score: float | None = None
    fused_score: float | None = None
    rerank_score: float | None = None
    calibrated_score: float | None = None
    boost_score: float | None = None
    final_score: float | None = None
    ranks: Mapping[str, int] = field(default_factory=dict)
    retrieval_sources: tuple[str, ...] = ()
    reranker_model: str | None = None
    truncated: bool | None = None
    expanded_from: tuple[str, ...] = ()
    visible_text: str | None = None

    @property
    def display_text(self) -> str:
        """The text a reader, the cross-encoder and the LLM see: ``visible_text`` when the chunk has one (an HTML chunk
        an earlier version wrote as markup), else ``text`` (every chunk written now, HTML included)."""
        return self.visible_text if self.visible_text is not None else self.text

    def replace(self, **changes: Any) -> Hit:
        """Return a copy with ``changes`` applied.

        Args:
            **changes: Fields to override.
        """
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_source(cls, source: Mapping[str, Any], *, vector: np.ndarray | None = None) -> Hit:
        """Build a hit from a stored chunk document (Elasticsearch ``_source`` or embedded store).

        Args:
            source: The stored document.
            vector: The stored vector, when returned.
        """
        raw_vector = source.get("vector")
        if vector is None and raw_vector is not None:
            vector = np.asarray(raw_vector, dtype=np.float32)
        return cls(
            chunk_id=str(source["chunk_id"]),
            source_id=str(source["source_id"]),
            text=str(source.get("text", "")),
            tenant_id=str(source.get("tenant_id", "")),
            parent_id=source.get("parent_id"),
            source_version=source.get("source_version"),
            title=str(source.get("title", "")),
            heading_path=tuple(source.get("heading_path") or ()),
            start_offset=source.get("start_offset"),
            end_offset=source.get("end_offset"),
            acl=tuple(source.get("acl") or ()),
            token_count=source.get("token_count"),
            content_hash=source.get("content_hash"),
            chunker_version=source.get("chunker_version"),
            embedding_version=source.get("embedding_version"),
            source_path=source.get("source_path"),
            language=None if source.get("language") is None else str(source["language"]),
            page_start=_page(source.get("page_start")),
            page_end=_page(source.get("page_end", source.get("page_start"))),
            page_label_start=_label(source.get("page_label_start")),
            page_label_end=_label(source.get("page_label_end", source.get("page_label_start"))),
            meta=dict(source.get("meta") or {}),
            vector=vector,
            visible_text=None if source.get("visible_text") is None else str(source["visible_text"]),
        )

    def scores(self) -> dict[str, float | None]:
        """Every stage's score, keyed by stage name."""
        return {
            "bm25": self.bm25_score,
            "dense": self.dense_score,
            "exact": self.exact_score,
            "fusion": self.fused_score,
            "rerank": self.rerank_score,
            "calibrated": self.calibrated_score,
            "boost": self.boost_score,
            "final": self.final_score,
        }


@dataclass
class StageRecord:
    """What one stage did: how many hits in and out, which it dropped and why, and how long it took."""

    name: str
    in_count: int = 0
    out_count: int = 0
    dropped: list[dict[str, str]] = field(default_factory=list)
    ms: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0
    """When the stage started (``time.time_ns()``), for spans exported after the search (:mod:`es_rag.telemetry`);
    not in :meth:`to_dict`."""

    def drop(self, hit_id: str, reason: str) -> None:
        """Record that ``hit_id`` left the pipeline here.

        Args:
            hit_id: chunk_id of the dropped hit.
            reason: Why it was dropped.
        """
        self.dropped.append({"id": hit_id, "reason": reason})

    def to_dict(self) -> dict[str, Any]:
        """JSON form used by ``search --json``."""
        out: dict[str, Any] = {
            "name": self.name,
            "in": self.in_count,
            "out": self.out_count,
            "dropped": list(self.dropped),
            "ms": round(self.ms, 3),
        }
        if self.info:
            out["info"] = self.info
        return out


@dataclass
class Trace:
    """Per-stage records plus the path each stage took (native/client fusion, reranker fallback, ...)."""

    stages: list[StageRecord] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str, in_count: int = 0) -> Iterator[StageRecord]:
        """Time a stage and append its record.

        Args:
            name: Stage name.
            in_count: Hits entering the stage.
        """
        record = StageRecord(name=name, in_count=in_count, start_ns=time.time_ns())
        start = time.perf_counter()
        try:
            yield record
        finally:
            record.ms = (time.perf_counter() - start) * 1000.0
            self.stages.append(record)

    def record(self, name: str) -> StageRecord | None:
        """The record of stage ``name``, None when it did not run.

        Args:
            name: Stage name (``retrieve``, ``fusion``, ``rerank``, ...).
        """
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON form used by ``search --json``."""
        return {"stages": [s.to_dict() for s in self.stages], "paths": dict(self.paths)}


_DIGEST_RE = re.compile(r"(?:sha(?:1|256|512)|md5|blake2b?):[0-9a-f]{8,}|[0-9a-f]{32,}", re.IGNORECASE)


def is_content_digest(version: str) -> bool:
    """Whether a source version is a content digest (``sha256:…``, the version ``ingest`` gives a file without
    one, or a bare hex hash of 32+ digits): an internal identifier, meaningless to a model or a reader.

    Args:
        version: A ``source_version``.
    """
    return _DIGEST_RE.fullmatch(version.strip()) is not None
