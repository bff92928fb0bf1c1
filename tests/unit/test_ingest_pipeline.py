"""Streaming and pipelined ingest (issue 20 parts 2-3): documents read lazily, embedded and indexed batch by batch;
batch N+1 embedded while batch N is indexed (one background writer, a bounded queue); 429s resent with backoff;
concurrent bulk requests; every failure reported per document, no document lost or written twice."""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from es_rag.backend import IndexReport
from es_rag.chunking import StructureChunker
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.errors import ClusterError
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.records import Chunk
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer
from tests.support.es_cluster import cluster_backend
from tests.support.es_transport import bulk_item_rejected, rejected_execution_error

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda sigma omega".split()


def _docs(n: int, *, seed: int = 0, tenant: str = "acme") -> list[SourceDoc]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        paras = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))) for _ in range(3))
        text = f"# Doc {i}\n\n{paras}\n"
        out.append(
            SourceDoc(
                source_id=f"d{i}.md", text=text, tenant_id=tenant, acl=("public",), source_version="v1",
                source_path=f"d{i}.md", fmt="markdown",
            )
        )  # fmt: skip
    return out


def _chunker() -> StructureChunker:
    return StructureChunker(WordTokenizer(), max_tokens=12, overlap=2)


class Recording(EmbeddedBackend):
    """An embedded backend that records each write and can hold it until told to go on."""

    def __init__(self, consumed: list[int] | None = None, **kw: Any) -> None:
        super().__init__(None, dims=DIMS, **kw)
        self.consumed = consumed
        self.writes: list[tuple[int, int | None]] = []  # (children in the write, documents read when it began)
        self.gate: threading.Event | None = None
        self.fail_at: int | None = None

    def index(self, chunks: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> IndexReport:
        self.writes.append((len(chunks), self.consumed[0] if self.consumed else None))
        if self.fail_at is not None and len(self.writes) == self.fail_at:
            raise ClusterError("bulk indexing stopped: HTTP 403 (test)", status=403)
        if self.gate is not None:
            assert self.gate.wait(10), "the writer was never released"
        return super().index(chunks, parents)


def _lazy(docs: list[SourceDoc], consumed: list[int]) -> Iterator[SourceDoc]:
    for d in docs:
        consumed[0] += 1
        yield d


def _state(backend: EmbeddedBackend) -> dict[str, Any]:
    return {
        "children": {k: {f: v for f, v in d.items() if f != "ingested_at"} for k, d in backend._children.items()},
        "vectors": {k: v.tolist() for k, v in backend._vectors.items()},
        "parents": sorted(backend._parents),
        "versions": backend.versions,
    }


@pytest.mark.parametrize("queue_size", [0, 1, 2])
def test_documents_are_read_lazily_and_written_batch_by_batch(queue_size: int) -> None:
    docs = _docs(40)
    consumed = [0]
    backend = Recording(consumed)
    report = ingest_documents(
        _lazy(docs, consumed),
        chunker=_chunker(),
        embedder=RandomEmbedder(),
        backend=backend,
        batch_size=16,
        queue_size=queue_size,
    )
    assert report.failed == [] and report.sources == 40
    sizes = [n for n, _ in backend.writes]
    assert all(n == 16 for n in sizes[:-1]) and 0 < sizes[-1] <= 16 and sum(sizes) == report.chunks
    # the first batch was written while most documents were still unread: the corpus is never held whole
    first_seen = backend.writes[0][1]
    assert first_seen is not None and first_seen < 10 < len(docs)
    assert len(backend.writes) >= 5
    assert {s["source_id"] for s in report.switched} == {d.source_id for d in docs}


def test_pipelined_and_sequential_ingest_write_the_same_index() -> None:
    docs = _docs(30, seed=4)
    states, reports = [], []
    for queue_size in (0, 3):
        backend = EmbeddedBackend(None, dims=DIMS)
        r = ingest_documents(
            iter(docs), chunker=_chunker(), embedder=RandomEmbedder(), backend=backend, batch_size=7,
            queue_size=queue_size,
        )  # fmt: skip
        states.append(_state(backend))
        reports.append((r.indexed, r.chunks, r.parents, r.sources, r.failed, r.switched))
    assert states[0] == states[1] and reports[0] == reports[1]
    assert reports[0][0] == reports[0][1] + reports[0][2]  # every child and parent landed once


class GatedEmbedder(RandomEmbedder):
    def __init__(self) -> None:
        self.calls = 0
        self.started: list[threading.Event] = [threading.Event() for _ in range(100)]

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.started[self.calls].set()
        self.calls += 1
        return super().embed_documents(texts)


def test_batch_n_plus_1_is_embedded_while_batch_n_is_indexed() -> None:
    """The first write waits until the second batch's embedding has begun: only a pipelined ingest gets past it."""
    embedder = GatedEmbedder()
    backend = Recording()
    overlapped: list[bool] = []
    original = backend.index

    def index(chunks: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> IndexReport:
        if not overlapped:
            overlapped.append(embedder.started[1].wait(5))
        return original(chunks, parents)

    backend.index = index  # type: ignore[method-assign]
    ingest_documents(
        iter(_docs(20)), chunker=_chunker(), embedder=embedder, backend=backend, batch_size=8, queue_size=1
    )
    assert overlapped == [True]


def test_a_slow_indexer_holds_embedding_back_backpressure() -> None:
    embedder = GatedEmbedder()
    backend = Recording()
    backend.gate = threading.Event()
    done = threading.Event()
    result: list[Any] = []

    def run() -> None:
        result.append(
            ingest_documents(
                iter(_docs(40)), chunker=_chunker(), embedder=embedder, backend=backend, batch_size=8, queue_size=1
            )
        )
        done.set()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)  # the writer is stuck on batch 1: at most batch 1 (writing), 2 (queued), 3 (waiting) embedded
    assert embedder.calls == 3 and not done.is_set()
    backend.gate.set()
    t.join(20)
    assert done.is_set() and result[0].failed == [] and embedder.calls > 3


def test_a_writer_error_stops_the_ingest_and_serves_nothing_new() -> None:
    backend = Recording()
    backend.fail_at = 2
    embedder = GatedEmbedder()
    with pytest.raises(ClusterError, match="HTTP 403"):
        ingest_documents(
            iter(_docs(40)), chunker=_chunker(), embedder=embedder, backend=backend, batch_size=8, queue_size=2
        )
    assert embedder.calls <= 2 + 2 + 1  # stopped soon after the failure, not after reading everything
    assert backend.versions["acme"]["active"] == {}  # begun (hidden), never committed: nothing new is served
    assert backend.count(SearchFilter("acme")) == 0


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", lambda s: calls.append(s))
    return calls


@pytest.mark.parametrize("concurrency", [1, 3])
def test_429s_are_resent_and_every_document_lands_once_with_failures_per_document(
    sleeps: list[float], concurrency: int
) -> None:
    """The strict cluster double rejects whole bulks (429) twice, rejects a third of the documents (429) on their
    first try, and refuses one chunk for good (400). Every other document is indexed exactly once, the refused one
    is reported with its document, field and chunk, and its source keeps no half-written version."""
    settings = Settings(vector_dims=DIMS, bulk_concurrency=concurrency)
    backend, node, cluster = cluster_backend(settings)
    node.queue(
        "POST|PUT", "_bulk", (429, rejected_execution_error()), (429, rejected_execution_error()), cluster.respond
    )
    tries: dict[str, int] = {}
    docs = _docs(25, seed=9)
    bad_source, bad_chunk = "d7.md", []

    def fault(op: str, meta: dict[str, Any], src: dict[str, Any] | None) -> dict[str, Any] | None:
        doc_id = meta["_id"]
        tries[doc_id] = tries.get(doc_id, 0) + 1
        if src is not None and src.get("source_id") == bad_source and meta["_index"] == settings.chunk_index:
            bad_chunk.append(doc_id) if not bad_chunk else None
            if doc_id == bad_chunk[0]:
                error = {
                    "type": "document_parsing_exception",
                    "reason": "failed to parse field [vector] of type [dense_vector]",
                }
                return {op: {"_index": meta["_index"], "_id": doc_id, "status": 400, "error": error}}
        if tries[doc_id] == 1 and zlib.crc32(doc_id.encode()) % 3 == 0:
            return bulk_item_rejected(meta["_index"], doc_id)
        return None

    cluster.bulk_fault = fault
    report = ingest_documents(
        iter(docs), chunker=_chunker(), embedder=RandomEmbedder(), backend=backend, batch_size=20, queue_size=2
    )
    assert len(report.failed) == 1, report.failed
    failure = report.failed[0]
    assert failure["document"] == bad_source and failure["field"] == "vector"
    assert failure["reason"].startswith(f"chunk {bad_chunk[0]}:")
    assert len(sleeps) >= 3 and any(n > 1 for n in tries.values())  # whole-bulk and per-document 429s, waited for
    assert {s["source_id"] for s in report.switched} == {d.source_id for d in docs} - {bad_source}
    # nothing lost, nothing doubled: the chunks stored per source are exactly what the chunker makes of it
    expected = {}
    for d in docs:
        made = _chunker().chunk(d.text, source_id=d.source_id, source_version="v1", tenant_id="acme", acl=("public",))
        expected[d.source_id] = sorted(c.chunk_id for c in made if c.kind == "child")
    stored: dict[str, list[str]] = {}
    for doc_id, src in cluster.docs(settings.chunk_index).items():
        stored.setdefault(src["source_id"], []).append(doc_id)
    assert {k: sorted(v) for k, v in stored.items()} == {k: v for k, v in expected.items() if k != bad_source}
    assert report.indexed == sum(len(v) for v in expected.values()) - 1 + report.parents
    assert all(src["source_id"] != bad_source for src in cluster.docs(settings.parent_index).values())


# ------------------------------------------------------------------------- counts with several workers (issue 33)
def _refuse_from(cluster: Any, nth: int, status: int) -> tuple[Any, list[int]]:
    """A ``_bulk`` route: the strict double answers every request before the ``nth`` (1-based), then ``status``."""
    seen: list[int] = []
    lock = threading.Lock()

    def respond(req: Any) -> Any:
        with lock:
            seen.append(len(req.body) // 2)  # documents in this request (action + source lines)
            n = len(seen)
        if n >= nth:
            return status, {"error": {"type": "security_exception", "reason": "refused"}, "status": status}
        return cluster.respond(req)

    return respond, seen


def _children(n: int) -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"c{i}",
            source_id=f"s{i // 10}.md",
            source_version="v1",
            parent_id=None,
            heading_path=(),
            start_offset=0,
            end_offset=4,
            chunker_version="t",
            tenant_id="acme",
            acl=("public",),
            title="s",
            text="text",
            token_count=1,
        ).with_vector(np.ones(DIMS, np.float32), "e1")
        for i in range(n)
    ]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_refusal_after_the_first_request_counts_what_every_worker_landed(concurrency: int) -> None:
    settings = Settings(vector_dims=DIMS, bulk_concurrency=concurrency)
    backend, node, cluster = cluster_backend(settings)
    respond, seen = _refuse_from(cluster, 3, 403)
    node.route("POST|PUT", "_bulk", respond)
    children = _children(900)  # five requests of 200 (or fewer)
    with pytest.raises(ClusterError, match="HTTP 403") as info:
        backend.index(children)
    cluster.refresh_all()
    stored = len(cluster.docs(settings.chunk_index))
    assert stored > 0 and info.value.indexed == stored  # type: ignore[attr-defined]
    assert f"({stored} documents were indexed before it stopped)" in str(info.value)
    # after the refusal no new request: the refused one, and at most the workers' others already in flight
    assert len(seen) <= 3 + max(0, concurrency - 1)


@pytest.mark.parametrize("status", [401, 403, 413])
def test_a_refusal_of_the_first_request_stops_every_worker_after_one_response(status: int) -> None:
    backend, node, cluster = cluster_backend(Settings(vector_dims=DIMS, bulk_concurrency=5))
    respond, seen = _refuse_from(cluster, 1, status)
    node.route("POST|PUT", "_bulk", respond)
    children = _children(25)
    with pytest.raises(ClusterError, match=f"HTTP {status}") as info:
        backend.index(children)
    assert len(seen) == 1 and info.value.indexed == 0  # type: ignore[attr-defined]


def test_the_count_in_a_stop_message_is_the_whole_run() -> None:
    settings = Settings(vector_dims=DIMS, bulk_concurrency=2)
    backend, node, cluster = cluster_backend(settings)
    respond, seen = _refuse_from(cluster, 4, 403)
    node.route("POST|PUT", "_bulk", respond)
    with pytest.raises(ClusterError, match="HTTP 403") as info:
        ingest_documents(
            iter(_docs(40, seed=5)),
            chunker=_chunker(),
            embedder=RandomEmbedder(),
            backend=backend,
            batch_size=8,
            queue_size=0,
        )
    cluster.refresh_all()
    stored = len(cluster.docs(settings.chunk_index)) + len(cluster.docs(settings.parent_index))
    assert len(seen) >= 4 and stored > 8  # earlier batches landed
    assert f"({stored} documents were indexed before it stopped)" in str(info.value)


# ------------------------------------------------------------------------------ incremental ingest (issue 31)
class CountingEmbedder(RandomEmbedder):
    def __init__(self) -> None:
        self.texts = 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().embed_documents(texts)


def test_a_rerun_of_unchanged_sources_embeds_nothing_and_changes_nothing() -> None:
    """Issue 31: an unchanged re-run re-embedded everything (131 s, then 145 s). A source whose chunks the index
    already serves exactly (same ids, text, offsets, ACL, metadata, chunker, model) is skipped."""
    backend = EmbeddedBackend(None, dims=DIMS)
    docs = _docs(12)
    first = CountingEmbedder()
    ingest_documents(iter(docs), chunker=_chunker(), embedder=first, backend=backend, corpus_language="en")
    before = _state(backend)
    again = CountingEmbedder()
    report = ingest_documents(iter(docs), chunker=_chunker(), embedder=again, backend=backend, corpus_language="en")
    assert first.texts > 0 and again.texts == 0
    assert report.unchanged == [d.source_id for d in docs] and report.indexed == 0 and report.switched == []
    assert _state(backend) == before


def test_a_changed_source_acl_or_chunker_is_embedded_again() -> None:
    backend = EmbeddedBackend(None, dims=DIMS)
    docs = _docs(6)
    ingest_documents(iter(docs), chunker=_chunker(), embedder=RandomEmbedder(), backend=backend, corpus_language="en")
    edited = [docs[0].__class__(**{**docs[0].__dict__, "text": docs[0].text + "\n\nOne more line.\n",
                                   "source_version": "v-edited"}), *docs[1:]]  # fmt: skip
    regrouped = [*edited[:2], edited[2].__class__(**{**edited[2].__dict__, "acl": ("legal",)}), *edited[3:]]
    counting = CountingEmbedder()
    report = ingest_documents(
        iter(regrouped), chunker=_chunker(), embedder=counting, backend=backend, corpus_language="en"
    )
    assert sorted(set(d.source_id for d in docs) - set(report.unchanged)) == sorted(
        [docs[0].source_id, docs[2].source_id]
    )  # the edited text, the new ACL
    assert {s["source_id"] for s in report.switched} == {docs[0].source_id}  # same version, new ACL: no switch
    assert {tuple(d["acl"]) for d in backend._children.values() if d["source_id"] == docs[2].source_id} == {("legal",)}
    other = CountingEmbedder()
    smaller = StructureChunker(WordTokenizer(), max_tokens=8, overlap=0)
    report = ingest_documents(iter(regrouped), chunker=smaller, embedder=other, backend=backend, corpus_language="en")
    assert report.unchanged == [] and other.texts > 0  # another chunk size: every source again


def test_the_progress_bar_counts_towards_the_chunks_read_so_far(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: the bar showed '0chunk' with no total or ETA. (stderr is no terminal here: the log form, every
    display kept by an interval of 0; es_rag.progress)"""
    from es_rag import progress

    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
    backend = EmbeddedBackend(None, dims=DIMS)
    report = ingest_documents(
        iter(_docs(5)), chunker=_chunker(), embedder=RandomEmbedder(), backend=backend, progress=True,
        corpus_language="en",
    )  # fmt: skip
    children = report.chunks
    err = capsys.readouterr().err
    assert children > 0 and f"{children}/{children}" in err and "embed+index" in err
