"""``es-rag selftest``: the first thing to run on a cluster. It proves, on the user's own cluster and settings,
that every request es_rag sends is accepted and does what it should, then removes everything it made.

Under a throwaway prefix (``es-rag-selftest-<random>``, never the product's indices) it

1. connects and probes (version, licence, privileges);
2. runs ``setup`` with the configured analyzer, similarity, index options and vector mode;
3. ingests a small built-in corpus (two tenants, an ACL-restricted document, an identifier) through the ingest
   pipeline and the version registry;
4. checks that every document landed, that ``content_hash`` is the documented fingerprint, that the pipeline set
   ``_id``, ``ingested_at`` and the vector;
5. runs every retrieval path the cluster supports: client RRF over ``_msearch``, the native ``rrf`` and ``linear``
   retrievers when licensed, the exact-match channel, the stored search template, and the server-side vectors of
   ``inference`` / ``semantic_text`` when configured;
6. checks that tenants and ACL groups stay isolated, that a re-ingest switches versions, and that
   ``delete-source`` leaves nothing;
7. deletes every index, template, pipeline and script it created -- also after a failure or Ctrl-C.

Vectors come from a model-free hashing embedder (:class:`HashingEmbedder`): the check is of the cluster and of
es_rag's requests, not of an embedding model, and needs nothing downloaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from es_rag.backend import content_hash
from es_rag.elasticsearch.assets import setup_paths
from es_rag.errors import ClusterError, EsRagError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.settings import Settings, VectorMode

SELFTEST_PREFIX = "es-rag-selftest-"
"""Every name the selftest creates starts with this; cleanup refuses anything else."""
TENANT_A, TENANT_B = "selftest-acme", "selftest-globex"
QUERY = "rotate api keys"


class WhitespaceTokenizer:
    """Whitespace-separated tokens (a :class:`~es_rag.encoders.tokenizer.Tokenizer` that needs no model)."""

    name = "whitespace"
    max_tokens: int | None = None

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character span of every token.

        Args:
            text: The text.
        """
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]

    def count(self, text: str) -> int:
        """Number of tokens.

        Args:
            text: The text.
        """
        return len(text.split())


class HashingEmbedder:
    """A model-free embedder: signed feature hashing of lower-cased words into ``dims`` components, unit length
    (valid for every similarity, ``dot_product`` included). Texts that share words get close vectors.

    Args:
        dims: Vector size (the configured ``vector_dims``).
    """

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.version = f"selftest-hashing-{dims}"

    def embed_query(self, text: str) -> np.ndarray:
        """The vector of one text.

        Args:
            text: The text.
        """
        vec = np.zeros(self.dims, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "little")
            vec[h % self.dims] += 1.0 if (h >> 63) & 1 else -1.0
        if not np.any(vec):
            vec[0] = 1.0
        out: np.ndarray = vec / np.linalg.norm(vec)
        return out

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of several texts, one row each.

        Args:
            texts: The texts.
        """
        return np.stack([self.embed_query(t) for t in texts]) if texts else np.zeros((0, self.dims), np.float32)


def corpus(version: str = "1") -> list[Any]:
    """The built-in corpus: two tenants with look-alike content, an ACL-restricted document and an identifier."""
    from es_rag.ingest import SourceDoc

    handbook = (
        "# Security handbook\n\n## API keys\n\nRotate API keys every "
        + ("90" if version == "1" else "60")
        + " days in Settings > API. Error E1042 means the key has expired.\n\n"
        "## Devices\n\nA remote wipe removes every token from a lost laptop.\n"
    )
    return [
        SourceDoc("handbook.md", handbook, TENANT_A, ("public",), source_version=version, title="Security handbook"),
        SourceDoc(
            "finance.md",
            "# Payments\n\nThe payment provider key is rotated by the finance team every quarter.\n",
            TENANT_A,
            ("finance",),
            source_version="1",
            title="Payments",
        ),
        SourceDoc(
            "handbook.md",
            "# Security handbook\n\nRotate API keys every 30 days. Globex uses hardware tokens for API keys.\n",
            TENANT_B,
            ("public",),
            source_version="1",
            title="Security handbook",
        ),
    ]


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: str
    """``pass``, ``fail`` or ``skip``."""
    detail: str
    ms: float = 0.0


@dataclass
class SelftestReport:
    """Every check, in order, and where it ran."""

    url: str
    prefix: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed."""
        return all(c.status != "fail" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"url": self.url, "prefix": self.prefix, "ok": self.ok, "checks": [asdict(c) for c in self.checks]}

    def table(self) -> str:
        """A fixed-width table."""
        width = max(len(c.name) for c in self.checks) if self.checks else 10
        lines = [f"es-rag selftest on {self.url} (prefix {self.prefix})", ""]
        for c in self.checks:
            lines.append(f"{c.status.upper():<5} {c.name:<{width}}  {c.detail}")
        failed = sum(1 for c in self.checks if c.status == "fail")
        skipped = sum(1 for c in self.checks if c.status == "skip")
        passed = len(self.checks) - failed - skipped
        lines += ["", f"{passed} passed, {failed} failed, {skipped} skipped"]
        return "\n".join(lines)


class _Stop(Exception):
    """A check failed that later checks depend on."""


class _Runner:
    def __init__(self, report: SelftestReport) -> None:
        self.report = report

    def check(self, name: str, fn: Callable[[], tuple[str, str] | str], *, fatal: bool = False) -> bool:
        """Run one check: ``fn`` returns a detail (pass) or ``(status, detail)``; an exception is a fail."""
        t0 = time.perf_counter()
        try:
            out = fn()
            status, detail = ("pass", out) if isinstance(out, str) else out
        except (AssertionError, EsRagError) as exc:
            status, detail = "fail", str(exc) or type(exc).__name__
        self.report.checks.append(Check(name, status, detail, round((time.perf_counter() - t0) * 1000, 1)))
        if status == "fail" and fatal:
            raise _Stop(name)
        return status != "fail"

    def skip(self, name: str, why: str) -> None:
        self.report.checks.append(Check(name, "skip", why))


def throwaway_settings(settings: Settings) -> Settings:
    """The user's settings under a fresh selftest prefix, with small candidate counts and no reranker."""
    return settings.replace(
        index_prefix=f"{SELFTEST_PREFIX}{uuid.uuid4().hex[:8]}",
        rerank_model=None,
        candidate_k=10,
        num_candidates=20,
        rerank_k=10,
        context_k=5,
        token_budget=400,
        chunk_max_tokens=64,
        chunk_overlap=0,
        expand_mode="none",
    )


def run_selftest(backend: Any, *, keep: bool = False) -> SelftestReport:
    """Run every check on ``backend`` (an :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend` whose
    settings carry a :func:`throwaway_settings` prefix) and clean up.

    Args:
        backend: The backend.
        keep: Leave the throwaway indices and assets in place (to look at them); cleanup is skipped.

    Raises:
        EsRagError: The backend's prefix is not a selftest prefix (nothing is touched).
    """
    s: Settings = backend.settings
    if not s.index.prefix.startswith(SELFTEST_PREFIX):
        raise EsRagError(f"selftest runs only under a {SELFTEST_PREFIX}* prefix, got {s.index.prefix!r}")
    report = SelftestReport(url=getattr(backend, "url", "?"), prefix=s.index.prefix)
    run = _Runner(report)
    created = False
    try:
        with _sigterm_as_interrupt():
            run.check("connect", lambda: _connect(backend), fatal=True)
            run.check("privileges", lambda: _privileges(backend))
            if backend.settings.encoder.inference_id:
                run.check("inference endpoint", lambda: _inference_endpoint(backend), fatal=True)
            created = True  # from here on something may exist: clean up whatever happens
            run.check("setup", lambda: _setup(backend), fatal=True)
            _exercise(backend, run)
    except _Stop:
        pass
    finally:
        if created and not keep:
            run.check("cleanup", lambda: cleanup(backend))
        elif created:
            run.skip("cleanup", f"--keep: left in place; remove with es-rag selftest --cleanup {s.index.prefix}")
    return report


def _connect(backend: Any) -> str:
    caps = backend.probe(refresh=True)
    unreadable = f"; not readable: {', '.join(sorted(caps.unreadable))}" if caps.unreadable else ""
    return f"Elasticsearch {caps.version}, licence {caps.license_type} ({caps.license_status}){unreadable}"


def _privileges(backend: Any) -> tuple[str, str]:
    got = backend.privileges()
    if "check" in got:
        return "pass", got["check"]
    lacking = {k: v for k, v in got.items() if k in ("search", "ingest", "setup") and v != "ok"}
    if lacking:
        return "fail", f"user {got.get('user')}: " + "; ".join(f"{k} {v}" for k, v in lacking.items())
    return "pass", f"user {got.get('user')}: search, ingest and setup allowed; monitor {got.get('monitor')}"


def _setup(backend: Any) -> str:
    rows = backend.setup()
    bad = [r for r in rows if r["acknowledged"] not in (True, "exists")]
    assert not bad, f"not acknowledged: {bad}"
    return f"{len(rows)} requests acknowledged (templates, pipelines, stored search template, indices)"


def _exercise(backend: Any, run: _Runner) -> None:
    from es_rag.chunking import StructureChunker
    from es_rag.ingest import ingest_documents
    from es_rag.pipeline import RagPipeline

    s: Settings = backend.settings
    mode = s.encoder.vectors
    embedder = HashingEmbedder(s.encoder.dims)
    chunker = StructureChunker(WhitespaceTokenizer(), max_tokens=s.chunking.max_tokens, overlap=0)
    state: dict[str, Any] = {}

    def ingest() -> str:
        report = ingest_documents(
            corpus(),
            chunker=chunker,
            embedder=embedder if mode is VectorMode.CLIENT else None,
            backend=backend,
            server_chunking=mode is VectorMode.SEMANTIC_TEXT,
        )
        assert not report.failed, "; ".join(f"{f['document']}: {f['reason']}" for f in report.failed[:3])
        state["report"] = report
        return f"{report.chunks} chunks and {report.parents} parents of {report.sources} sources through the pipeline"

    if not run.check("ingest", ingest):
        return
    run.check("documents landed", lambda: _landed(backend, state["report"]))
    run.check("lineage and content_hash", lambda: _lineage(backend))
    run.check("vectors", lambda: _vectors(backend))
    pipe = RagPipeline(
        backend,
        embedder=None if mode is VectorMode.SEMANTIC_TEXT else embedder,
        settings=s,
        tokenizer=WhitespaceTokenizer(),
    )
    caps = backend.probe()
    paths: list[tuple[str, Settings, str | None]] = [
        ("client fusion (_msearch + RRF)", s.replace(fusion_path="client"), None)
    ]
    native_skip = None if caps.native_rrf else caps.native_rrf_reason
    paths.append(("native rrf retriever", s.replace(fusion_path="native"), native_skip))
    version = tuple(int(p) for p in caps.version.split("-")[0].split(".") if p.isdigit())
    linear_skip = native_skip or (
        None if version >= (8, 18) else f"Elasticsearch {caps.version} has no linear retriever"
    )
    paths.append(
        (
            "native linear retriever",
            s.replace(fusion_path="native", fusion_method="linear", score_normalizer="minmax"),
            linear_skip,
        )
    )
    for name, settings, skip in paths:
        if skip:
            run.skip(name, skip)
        else:
            run.check(name, functools.partial(_retrieval, pipe, settings))
    run.check("exact-match channel", lambda: _exact(backend, embedder))
    if mode is not VectorMode.SEMANTIC_TEXT and caps.native_rrf:
        run.check("stored search template", lambda: _template(backend, embedder))
    else:
        run.skip("stored search template", native_skip or f"not templated for vector_mode {mode.value}")
    run.check("tenant and ACL isolation", lambda: _isolation(pipe))
    run.check("version switch", lambda: _switch(backend, pipe, chunker, embedder))
    run.check("delete-source", lambda: _delete(backend))


def _landed(backend: Any, report: Any) -> str:
    backend.send(EsRequest("POST", f"{backend.settings.chunk_index},{backend.settings.parent_index}/_refresh"))
    counts = {t: backend.count(backend.snapshot_versions(SearchFilter(t, ("finance",)))) for t in (TENANT_A, TENANT_B)}
    written = report.indexed - report.parents  # retrieval units (sections in semantic_text mode)
    assert sum(counts.values()) == written, f"{written} chunks written, {sum(counts.values())} searchable"
    return f"{sum(counts.values())} chunks searchable ({counts[TENANT_A]} + {counts[TENANT_B]} in the two tenants)"


def _first_chunk(backend: Any) -> dict[str, Any]:
    body = {"size": 1, "query": {"term": {"tenant_id": TENANT_A}}, "_source": {"excludes": []}}
    hits = backend.send(EsRequest("POST", f"{backend.settings.chunk_index}/_search", body))["hits"]["hits"]
    assert hits, "no chunk found"
    doc_id = hits[0]["_id"]
    params = "?_source_exclude_vectors=false" if backend.probe().vectors_in_source_param else ""
    got = backend.send(EsRequest("GET", f"{backend.settings.chunk_index}/_doc/{doc_id}{params}"))
    return dict(got)


def _lineage(backend: Any) -> str:
    got = _first_chunk(backend)
    src = got["_source"]
    assert got["_id"] == src["chunk_id"], f"_id {got['_id']} is not the chunk_id {src['chunk_id']}"
    expected = content_hash(src["text"])
    assert src.get("content_hash") == expected, (
        f"content_hash {src.get('content_hash')!r} differs from the documented fingerprint {expected!r}"
    )
    assert src.get("ingested_at"), "the pipeline did not set ingested_at"
    assert src.get("version_key") == f"{src['source_id']}@{src['source_version']}", "version_key missing"
    return "_id = chunk_id, content_hash = base64(sha256(0x00 + text)), ingested_at and version_key set"


INFERENCE_PROBE = "es_rag selftest probe: how is a password reset?"
"""The text the configured inference endpoint is asked to embed."""


def _inference_endpoint(backend: Any) -> str:
    """The server-side embedding path (``--inference-id``, ``inference`` or ``semantic_text`` vector mode): the
    endpoint exists (``GET _inference/<id>``) and embeds a probe text (``POST _inference/<task_type>/<id>``) into
    ``vector_dims`` dimensions (a dense ``text_embedding`` endpoint) or a non-empty sparse vector."""
    from es_rag.errors import ClusterError
    from es_rag.es_request import EsRequest

    s: Settings = backend.settings
    endpoint = s.encoder.inference_id
    try:
        got = backend.send(EsRequest("GET", f"_inference/{endpoint}"))
    except ClusterError as exc:
        raise AssertionError(f"inference endpoint {endpoint!r} not found or not readable: {exc}") from None
    found = [e for e in got.get("endpoints", []) if e.get("inference_id") == endpoint]
    assert found, f"inference endpoint {endpoint!r} not listed by GET _inference/{endpoint}"
    task = str(found[0].get("task_type", "text_embedding"))
    answer = backend.send(EsRequest("POST", f"_inference/{task}/{endpoint}", {"input": [INFERENCE_PROBE]}))
    if task == "text_embedding":
        rows = answer.get("text_embedding") or []
        assert rows and "embedding" in rows[0], f"{endpoint} returned no text_embedding for the probe: {answer}"
        dims = len(rows[0]["embedding"])
        assert dims == s.encoder.dims, (
            f"{endpoint} embeds into {dims} dimensions, vector_dims is {s.encoder.dims}: pass --vector-dims {dims}"
        )
        return f"{endpoint} ({task}, {found[0].get('service', '?')}) embeds the probe into {dims} dimensions"
    if task == "sparse_embedding":
        rows = answer.get("sparse_embedding") or []
        assert rows and rows[0].get("embedding"), f"{endpoint} returned no sparse_embedding for the probe: {answer}"
        return f"{endpoint} ({task}) embeds the probe into {len(rows[0]['embedding'])} weighted tokens"
    raise AssertionError(f"{endpoint} is a {task} endpoint: vectors need text_embedding or sparse_embedding")


def _vectors(backend: Any) -> tuple[str, str] | str:
    s: Settings = backend.settings
    if s.encoder.vectors is VectorMode.SEMANTIC_TEXT:
        flt = backend.snapshot_versions(SearchFilter(TENANT_A))
        ret = backend.retrieve(QUERY, None, flt, s.replace(fusion_path="client", exact_channel="off"))
        hits = ret.channels.get("dense", [])
        assert hits, f"the semantic query on the semantic_text field found nothing ({ret.notes})"
        endpoint = s.encoder.inference_id
        return f"semantic_text chunked and embedded by {endpoint}; the semantic query finds {len(hits)} hit(s)"
    src = _first_chunk(backend)["_source"]
    vec = src.get("vector")
    if vec is None:
        return "skip", "the cluster leaves vectors out of _source and GET cannot ask for them (version < 9.2 unknown)"
    assert len(vec) == s.encoder.dims, f"stored vector has {len(vec)} dims, vector_dims is {s.encoder.dims}"
    if s.encoder.vectors is VectorMode.INFERENCE:
        assert src.get("embedding_version") == f"inference:{s.encoder.inference_id}", src.get("embedding_version")
        ret = backend.retrieve(
            "",
            np.asarray(vec, dtype=np.float32),
            backend.snapshot_versions(SearchFilter(TENANT_A, ("finance",))),
            s.replace(fusion_path="client", exact_channel="off"),
        )
        top = ret.channels.get("dense", [])
        assert top and top[0].chunk_id == src["chunk_id"], "kNN with a stored vector did not find its own chunk first"
        return f"{len(vec)}-dim vectors written by the inference processor ({s.encoder.inference_id}); kNN finds them"
    return (
        f"{len(vec)}-dim client vectors stored ({s.index.similarity.value}, index_options {s.index.vector_index_type})"
    )


def _retrieval(pipe: Any, settings: Settings) -> str:
    from es_rag.pipeline import RagPipeline

    p = RagPipeline(pipe.backend, embedder=pipe.embedder, settings=settings, tokenizer=pipe.tokenizer)
    result = p.search(QUERY, SearchFilter(TENANT_A))
    path = result.trace.paths.get("retrieval", "?")
    sources = [(h.tenant_id, h.source_id) for h in result.candidates]
    assert (TENANT_A, "handbook.md") in sources, f"{path}: the handbook was not found ({sources})"
    assert all(t == TENANT_A for t, _ in sources), f"{path}: another tenant's chunk was returned"
    assert "finance.md" not in {sid for _, sid in sources}, f"{path}: an ACL-restricted chunk was returned"
    retrieve = result.trace.record("retrieve")
    notes = list(retrieve.info.get("notes", [])) if retrieve else []
    fallback = [n for n in notes if "refused" in n or "client path" in n]
    assert not fallback or settings.fusion.path.value != "native", f"{path}: fell back: {fallback[0]}"
    return f"{path}: {len(result.candidates)} candidates, the handbook among them, no other tenant or group"


def _exact(backend: Any, embedder: HashingEmbedder) -> str:
    s: Settings = backend.settings
    q = "what does error E1042 mean"
    vec = None if s.encoder.vectors is VectorMode.SEMANTIC_TEXT else embedder.embed_query(q)
    ret = backend.retrieve(q, vec, backend.snapshot_versions(SearchFilter(TENANT_A)), s.replace(fusion_path="client"))
    hits = ret.channels.get("exact", [])
    assert hits and hits[0].source_id == "handbook.md", f"exact channel found {[h.source_id for h in hits]}"
    return f"identifier E1042 found by match_phrase on the .ident subfields ({len(hits)} hit(s))"


def _template(backend: Any, embedder: HashingEmbedder) -> str:
    from es_rag.elasticsearch.search_template import search_template_request

    s: Settings = backend.settings
    flt = backend.snapshot_versions(SearchFilter(TENANT_A))
    vectors_param = backend.probe().vectors_in_source_param is not False
    req = search_template_request(QUERY, embedder.embed_query(QUERY), flt, s, vectors_in_source_param=vectors_param)
    hits = backend.send(req)["hits"]["hits"]
    tenants = {h["_source"]["tenant_id"] for h in hits}
    assert hits and tenants == {TENANT_A}, f"stored template returned tenants {tenants}"
    return f"POST {req.path} with the stored {s.index.prefix}-hybrid template: {len(hits)} hits, one tenant"


def _isolation(pipe: Any) -> str:
    other = pipe.search(QUERY, SearchFilter(TENANT_B))
    assert other.candidates and all(h.tenant_id == TENANT_B for h in other.candidates), "tenant B saw tenant A"
    finance = pipe.search("payment provider key finance team", SearchFilter(TENANT_A, ("finance",)))
    assert any(h.source_id == "finance.md" for h in finance.candidates), "group finance cannot see its document"
    public = pipe.search("payment provider key finance team", SearchFilter(TENANT_A))
    assert all(h.source_id != "finance.md" for h in public.candidates), "a caller without finance saw its document"
    return "each tenant sees only its own chunks; the finance document only with group finance"


def _switch(backend: Any, pipe: Any, chunker: Any, embedder: HashingEmbedder) -> str:
    from es_rag.ingest import ingest_documents

    s: Settings = backend.settings
    report = ingest_documents(
        corpus("2")[:1],
        chunker=chunker,
        embedder=embedder if s.encoder.vectors is VectorMode.CLIENT else None,
        backend=backend,
        server_chunking=s.encoder.vectors is VectorMode.SEMANTIC_TEXT,
    )
    assert report.switched and report.switched[0]["retired"] == "1", f"no switch: {report.switched}"
    assert not report.warnings, report.warnings[0]["reason"]
    result = pipe.search(QUERY, SearchFilter(TENANT_A))
    versions = {h.source_version for h in result.candidates if h.source_id == "handbook.md"}
    assert versions == {"2"}, f"served versions {versions}, expected only 2"
    return "re-ingest switched handbook.md to version 2; version 1 purged, never served"


def _delete(backend: Any) -> str:
    from es_rag.ingest import delete_source

    out = delete_source(backend, TENANT_A, "finance.md")
    assert out["remaining"] == {"chunks": 0, "parents": 0}, (
        f"remaining {out['remaining']} ({out.get('conflicts')} conflicts)"
    )
    return f"finance.md: {out['deleted']} documents deleted, 0 remaining"


def cleanup(backend: Any) -> str:
    """Delete the indices, templates, pipelines and stored script of the backend's selftest prefix (never a
    wildcard, never another prefix); a 404 is fine.

    Args:
        backend: The backend whose settings carry the selftest prefix.
    """
    s: Settings = backend.settings
    if not s.index.prefix.startswith(SELFTEST_PREFIX):
        raise EsRagError(f"refusing to delete anything outside {SELFTEST_PREFIX}*: {s.index.prefix!r}")
    paths = [s.chunk_index, s.parent_index, f"{s.index.prefix}-versions", *reversed(setup_paths(s))]
    failed = []
    for path in paths:
        try:
            backend.send(EsRequest("DELETE", path), ignore=(404,))
        except ClusterError as exc:
            failed.append(f"{path}: {exc}")
    assert not failed, "; ".join(failed)
    return f"deleted {len(paths)} indices and assets under {s.index.prefix}"


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a container stop) unwinds like Ctrl-C, so cleanup runs (main thread only)."""

    def raise_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, raise_interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
