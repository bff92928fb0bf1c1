"""Real Lucene for ``tests/lucene`` and ``scripts/lucene-compare.py``: one JVM running
``tests/lucene/java/LuceneOracle.java`` (Lucene 10.5, built by ``scripts/lucene-oracle.sh``), asked JSON-lines
questions over a pipe for a whole test session (:func:`lucene`, session-scoped).

The JVM answers as Elasticsearch's built-ins would: the ``standard``, ``english``, ``cjk`` and ``kuromoji`` analyzers
as their providers configure them, BM25 as ``LegacyBM25Similarity`` (Lucene's ``BM25Similarity`` times ``k1 + 1``)
over one segment, kNN as ``DenseVectorFieldMapper`` maps each similarity onto Lucene's ``VectorSimilarityFunction``.

Without a cached jar (``make lucene-deps``) or a Java 21+ JDK the tests skip with the reason, or fail when
``ES_RAG_REQUIRE_LUCENE=1`` (CI: ``.ci/run``). The real corpora (:func:`eval_root`) are optional the same way: a test
over one that is absent skips and names the path it looked for.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "lucene-oracle.sh"
REQUIRE_ENV = "ES_RAG_REQUIRE_LUCENE"
"""``1``: a missing jar or JDK fails the oracle tests instead of skipping them."""

BATCH_TEXTS = 2000
"""Texts per ``analyze`` request: keeps each JSON line a few MB."""
JVM_FLAGS = ["--add-modules", "jdk.incubator.vector", "-XX:+UseSerialGC", "-Xmx2g"]
"""The vector module as Elasticsearch enables it (Lucene's SIMD similarity code); one collector, heap enough."""


class OracleUnavailable(RuntimeError):
    """No Lucene jar in the cache or no Java 21+ JDK: the reason is the message."""


def locate() -> tuple[str, str]:
    """``(java binary, classpath)`` of the built oracle, compiling the Java sources when they changed (the build script
    with ``--no-download``: a test run never downloads the jar).

    Raises:
        OracleUnavailable: The script's reason, when it has no jar or no Java 21+.
    """
    try:
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--no-download"], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise OracleUnavailable(f"{BUILD_SCRIPT.name}: {err}") from err
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode != 0 or "java" not in found or "classpath" not in found:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise OracleUnavailable(f"Lucene oracle unavailable: {last.removeprefix('lucene-oracle: ')}")
    return found["java"], found["classpath"]


class LuceneOracle:
    """The running JVM: each method sends one request and waits for its answer line.

    Args:
        java: Java 21+ binary.
        classpath: Compiled oracle classes and the Lucene jar.
    """

    def __init__(self, java: str, classpath: str) -> None:
        self._stderr = tempfile.TemporaryFile()  # a pipe nobody reads could fill and stall the JVM
        self._proc = subprocess.Popen(
            [java, *JVM_FLAGS, "-cp", classpath, "LuceneOracle"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )
        self.version = str(self.request("ping")["lucene"])

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request/answer round trip.

        Args:
            op: ``analyze``, ``bm25``, ``knn_exact``, ``hnsw_recall``, ``smallfloat`` or ``ping``.
            **fields: The request's fields (see ``LuceneOracle.java``).

        Raises:
            RuntimeError: The JVM died or answered with an error (its message or trace included).
        """
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except OSError as err:
            raise RuntimeError(f"Lucene oracle died: {err}\n{self._stderr_tail()}") from err
        if not line:
            raise RuntimeError(f"Lucene oracle exited ({self._proc.poll()}):\n{self._stderr_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"Lucene oracle failed on {op}: {answer['error']}")
        return answer

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-4000:]

    def analyze(self, analyzer: str, texts: Sequence[str]) -> list[list[str]]:
        """The terms Lucene's ``analyzer`` gives each text.

        Args:
            analyzer: ``standard``, ``english``, ``cjk`` or ``kuromoji``.
            texts: The texts.
        """
        out: list[list[str]] = []
        for start in range(0, len(texts), BATCH_TEXTS):
            batch = list(texts[start : start + BATCH_TEXTS])
            out += self.request("analyze", analyzer=analyzer, texts=batch)["tokens"]
        return out

    def bm25(
        self,
        fields: dict[str, str],
        docs: Sequence[dict[str, str]],
        queries: Sequence[str],
        *,
        query_fields: Sequence[tuple[str, float]] | None = None,
        tie_breaker: float = 0.0,
        k1: float = 1.2,
        b: float = 0.75,
        top: int = 10,
        all_scores: bool = False,
    ) -> dict[str, Any]:
        """Elasticsearch's BM25 scores (``LegacyBM25Similarity``: already times ``k1 + 1``) of ``multi_match``
        ``best_fields`` queries over an index of ``docs``.

        Args:
            fields: Field -> analyzer name.
            docs: Each document's field texts; a document's id is its position.
            queries: Query texts.
            query_fields: ``(field, boost)`` searched; None: every field of ``fields`` at boost 1.
            tie_breaker: ``best_fields`` tie breaker.
            k1: BM25 k1.
            b: BM25 b.
            top: Hits per query (Lucene's order: score, then doc id).
            all_scores: Also every matching document's score (``all_ids``, ``all_scores``).

        Returns:
            ``{"results": [{"ids", "scores", ("all_ids", "all_scores")}], "stats": {field: {"doc_count",
            "sum_total_term_freq"}}}``.
        """
        qf = [[f, 1.0] for f in fields] if query_fields is None else [[f, w] for f, w in query_fields]
        return self.request(
            "bm25",
            fields=fields,
            docs=list(docs),
            queries=list(queries),
            query_fields=qf,
            tie_breaker=tie_breaker,
            k1=k1,
            b=b,
            top=top,
            all=all_scores,
        )

    def knn_exact(self, similarity: str, vectors: Any, queries: Any, k: int) -> list[dict[str, Any]]:
        """Exact kNN as Elasticsearch scores ``similarity``: per query ``ids``/``scores`` (top k) and ``all``.

        Args:
            similarity: ``cosine``, ``dot_product``, ``l2_norm`` or ``max_inner_product``.
            vectors: Document vectors (rows).
            queries: Query vectors (rows).
            k: Hits per query.
        """
        rows = [[float(x) for x in v] for v in vectors]
        qs = [[float(x) for x in q] for q in queries]
        results: list[dict[str, Any]] = self.request("knn_exact", similarity=similarity, vectors=rows, queries=qs, k=k)[
            "results"
        ]
        return results

    def small_float(self, ints: Sequence[int]) -> tuple[list[int], list[int]]:
        """Lucene's ``SmallFloat.intToByte4`` (unsigned) and ``byte4ToInt`` of it, per int.

        Args:
            ints: Non-negative document lengths.
        """
        answer = self.request("smallfloat", ints=[int(i) for i in ints])
        return answer["bytes"], answer["decoded"]

    def close(self) -> None:
        """Ends the JVM (closing its stdin ends its loop) and waits for it."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()


def start() -> LuceneOracle:
    """A started oracle; without one, skips the test (fails it under ``ES_RAG_REQUIRE_LUCENE=1``)."""
    try:
        return LuceneOracle(*locate())
    except OracleUnavailable as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{err} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def lucene() -> Iterator[LuceneOracle]:
    """One Lucene JVM for the whole session (per xdist worker)."""
    oracle = start()
    yield oracle
    oracle.close()


# -- the real corpora ------------------------------------------------------------------------------------------------
def eval_root() -> Path:
    """Where the shared evaluation sets live: ``$ES_RAG_EVAL_DIR``, else ``../shared/eval`` beside the repository."""
    given = os.environ.get("ES_RAG_EVAL_DIR")
    return Path(given) if given else ROOT.parent / "shared" / "eval"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of one JSON-lines file."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def repo_corpus(name: str) -> list[dict[str, Any]]:
    """A BEIR corpus kept in the repository: ``eval/<name>/corpus.jsonl`` (``en-debian-docs``, ``ja-debian-docs``)."""
    return read_jsonl(ROOT / "eval" / name / "corpus.jsonl")


def repo_queries(name: str) -> list[dict[str, Any]]:
    """The queries of a repository BEIR set (``eval/<name>/queries.jsonl``)."""
    return read_jsonl(ROOT / "eval" / name / "queries.jsonl")


def scifact_dir() -> Path:
    """The SciFact folder (``corpus-*.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``)."""
    return eval_root() / "scifact"


def scifact_corpus() -> list[dict[str, Any]]:
    """SciFact's 5,183 abstracts in file order; skips when absent."""
    paths = sorted(scifact_dir().glob("corpus-*.jsonl"))
    if not paths:
        pytest.skip(f"SciFact not found at {scifact_dir()} (set ES_RAG_EVAL_DIR)")
    return [d for p in paths for d in read_jsonl(p)]


def scifact_test_queries() -> list[dict[str, Any]]:
    """SciFact's test queries (the ids of ``qrels/test.tsv``, in ``queries.jsonl`` order); skips when absent."""
    qrels = scifact_dir() / "qrels" / "test.tsv"
    if not qrels.is_file():
        pytest.skip(f"SciFact qrels not found at {qrels} (set ES_RAG_EVAL_DIR)")
    ids = {line.split("\t")[0] for line in qrels.read_text(encoding="utf-8").splitlines()[1:] if line.strip()}
    return [q for q in read_jsonl(scifact_dir() / "queries.jsonl") if q["_id"] in ids]


def ja_wiki_docs() -> list[str]:
    """The Japanese Wikipedia articles of ``rag-ja-train/docs`` (Markdown, name order); skips when absent."""
    folder = eval_root() / "rag-ja-train" / "docs"
    paths = sorted(folder.glob("*.md"))
    if not paths:
        pytest.skip(f"rag-ja-train not found at {folder} (set ES_RAG_EVAL_DIR)")
    return [p.read_text(encoding="utf-8") for p in paths]


def corpus_texts(name: str) -> list[str]:
    """The field texts of one real corpus, as the analyzer tests read them: ``title`` then ``text`` of each document
    (``en-debian-docs``, ``ja-debian-docs``, ``scifact``), or each article (``rag-ja-train``); skips when absent.

    Args:
        name: The corpus.
    """
    if name == "rag-ja-train":
        return ja_wiki_docs()
    docs = scifact_corpus() if name == "scifact" else repo_corpus(name)
    return [d[f] for d in docs for f in ("title", "text") if d.get(f)]


# -- analyzer comparison ---------------------------------------------------------------------------------------------
def mirror(analyzer: str) -> Callable[[str], list[str]]:
    """The embedded mirror of an Elasticsearch analyzer (``standard``, ``english``, ``cjk``)."""
    from es_rag.embedded.analyzers import get_analyzer

    return get_analyzer(analyzer)


@dataclass(frozen=True)
class TokenDiff:
    """One differing span of a text's token stream: Lucene's tokens there and the mirror's."""

    text: int
    lucene: tuple[str, ...]
    mirror: tuple[str, ...]


def token_diffs(oracle: LuceneOracle, analyzer: str, texts: Sequence[str]) -> tuple[int, list[TokenDiff]]:
    """``(tokens Lucene gave, differing spans)`` of the mirror of ``analyzer`` against Lucene over ``texts``.

    Args:
        oracle: The running oracle.
        analyzer: ``standard``, ``english`` or ``cjk``.
        texts: The texts.
    """
    fn = mirror(analyzer)
    lucene_tokens = oracle.analyze(analyzer, texts)
    diffs: list[TokenDiff] = []
    for i, (text, want) in enumerate(zip(texts, lucene_tokens, strict=True)):
        got = fn(text)
        if got == want:
            continue
        ops = difflib.SequenceMatcher(a=want, b=got, autojunk=False).get_opcodes()
        diffs += [TokenDiff(i, tuple(want[a0:a1]), tuple(got[b0:b1])) for op, a0, a1, b0, b1 in ops if op != "equal"]
    return sum(map(len, lucene_tokens)), diffs


@dataclass(frozen=True)
class KnownDiff:
    """A token difference the mirror is known to have: a ``witness`` text showing it, the spans Lucene and the mirror
    give there, and the cause."""

    witness: str
    analyzer: str
    lucene: tuple[str, ...]
    mirror: tuple[str, ...]
    cause: str


KNOWN_TOKEN_DIFFS: list[KnownDiff] = []
"""Token differences with a known cause. Empty: the last one (non-Emoji pictographs such as U+266A, which Lucene's
grammar makes <EMOJI> tokens of and the regex package's Extended_Pictographic left out) is gone since
es_rag/embedded/tokenizer.py takes Lucene's own list."""
"""The differences ``tests/lucene`` accepts (any other fails them); each witness must still show its difference."""


def known_cause(analyzer: str, diff: TokenDiff) -> str | None:
    """The cause of a differing span when :data:`KNOWN_TOKEN_DIFFS` lists it, else None."""
    for known in KNOWN_TOKEN_DIFFS:
        if (known.analyzer, known.lucene, known.mirror) == (analyzer, diff.lucene, diff.mirror):
            return known.cause
    return None


# -- BM25 comparison -------------------------------------------------------------------------------------------------
def embedded_backend(
    docs: Sequence[Mapping[str, Any]],
    analyzer: str,
    *,
    bm25_fields: Sequence[str] = ("text",),
    tie_breaker: float = 0.0,
) -> Any:
    """An in-memory :class:`~es_rag.embedded.backend.EmbeddedBackend` over ``docs`` (``title``, ``text``,
    ``heading_path``; chunk id ``d<position>``, tenant ``t``, a one-dim vector), no language subfields.

    Args:
        docs: The documents.
        analyzer: Its analyzer (``standard``, ``english``, ``cjk``).
        bm25_fields: ``field^boost`` searched.
        tie_breaker: ``best_fields`` tie breaker.
    """
    import numpy as np

    from es_rag.embedded.backend import EmbeddedBackend

    backend = EmbeddedBackend(dims=1, analyzer=analyzer, bm25_fields=bm25_fields, tie_breaker=tie_breaker, languages=[])
    one = np.ones(1, dtype=np.float32)
    chunks = [
        _chunk(i, d.get("title") or "", d.get("text", ""), d.get("heading_path") or (), one) for i, d in enumerate(docs)
    ]
    report = backend.index(chunks)
    assert not report.failed, report.failed
    return backend


def _chunk(i: int, title: str, text: str, heading_path: Sequence[str], vector: Any) -> Any:
    """Document ``i`` as a chunk the embedded backend indexes: id ``d<i>``, tenant ``t``, public."""
    from es_rag.records import Chunk

    return Chunk(
        chunk_id=f"d{i}",
        source_id=f"s{i}",
        source_version="1",
        parent_id=None,
        heading_path=tuple(heading_path),
        start_offset=0,
        end_offset=len(text),
        chunker_version="lucene-oracle",
        tenant_id="t",
        acl=("public",),
        title=title,
        text=text,
        token_count=1,
        vector=vector,
    )


@dataclass
class Bm25Agreement:
    """How the embedded backend's BM25 agrees with Lucene's over a query set."""

    queries: int = 0
    top10_identical: int = 0
    top10_tied: int = 0
    """Top 10 the same up to documents whose scores tie (within the tolerance) where the ids differ."""
    scores_compared: int = 0
    max_rel: float = 0.0
    full_queries: int = 0
    """Queries whose every matching document was compared (not just the embedded top 100)."""
    matched_set_differs: int = 0
    worst: list[str] = field(default_factory=list)


def compare_bm25(
    oracle: LuceneOracle,
    docs: Sequence[Mapping[str, Any]],
    queries: Sequence[str],
    analyzer: str,
    *,
    fields: Sequence[tuple[str, float]] = (("text", 1.0),),
    tie_breaker: float = 0.0,
    full_every: int = 10,
    tol: float = 1e-5,
) -> Bm25Agreement:
    """The embedded backend's ``bm25`` against Lucene's ``multi_match`` ``best_fields`` over the same documents: per
    query the top 10 ids, the scores of the embedded top 100, and for every ``full_every``-th query the scores of every
    matching document (the embedded backend asked for all of them) and the set of matching documents.

    Args:
        oracle: The running oracle.
        docs: Documents (``title``, ``text``, ``heading_path``).
        queries: Query texts.
        analyzer: The analyzer of every field.
        fields: ``(field, boost)`` searched.
        tie_breaker: ``best_fields`` tie breaker.
        full_every: Every n-th query is compared over all its matching documents (0: none).
        tol: Relative score tolerance for ties.
    """
    from es_rag.filters import SearchFilter

    names = [f for f, _ in fields]
    backend = embedded_backend(
        docs, analyzer, bm25_fields=[f if w == 1.0 else f"{f}^{w:g}" for f, w in fields], tie_breaker=tie_breaker
    )
    lucene_docs = [{f: d.get(f) for f in names} for d in docs]
    answer = oracle.bm25(
        dict.fromkeys(names, analyzer),
        lucene_docs,
        queries,
        query_fields=fields,
        tie_breaker=tie_breaker,
        k1=backend.k1,
        b=backend.b,
        top=10,
        all_scores=True,
    )
    flt = SearchFilter("t")
    out = Bm25Agreement()
    for n, (query, want) in enumerate(zip(queries, answer["results"], strict=True)):
        full = bool(full_every) and n % full_every == 0
        hits = backend.bm25(query, flt, len(docs) if full else 100)
        got = [(int(h.chunk_id[1:]), float(h.bm25_score)) for h in hits]
        lucene_all = dict(zip(want["all_ids"], want["all_scores"], strict=True))
        out.queries += 1
        ids = [i for i, _ in got[:10]]
        out.top10_identical += ids == want["ids"]
        out.top10_tied += ids == want["ids"] or _tied(ids, want["ids"], want["scores"], lucene_all, tol)
        for i, score in got:
            ref = lucene_all.get(i, 0.0)
            rel = abs(score - ref) / max(abs(ref), 1e-12)
            out.scores_compared += 1
            if rel > out.max_rel:
                out.max_rel = rel
                out.worst = [f"query {query!r}: doc {i} embedded {score!r}, Lucene {ref!r}"]
        if full:
            out.full_queries += 1
            out.matched_set_differs += {i for i, _ in got} != set(lucene_all)
    return out


def _tied(ids: list[int], want: list[int], want_scores: list[float], lucene_all: dict[int, float], tol: float) -> bool:
    """Whether ``ids`` is Lucene's top ``want`` but for documents that swap places with an equal Lucene score."""
    if len(ids) != len(want):
        return False
    return all(
        got_id == want_id or abs(lucene_all.get(got_id, 0.0) - ref) <= tol * max(ref, 1e-12)
        for got_id, want_id, ref in zip(ids, want, want_scores, strict=True)
    )


# -- kNN comparison --------------------------------------------------------------------------------------------------
def knn_vectors(seed: int, n: int, dims: int, similarity: str, *, near_unit: bool = False) -> Any:
    """Seeded Gaussian float32 vectors: unit rows for ``dot_product`` (Elasticsearch refuses others), else norms
    spread over 0.5..2 but never within 1e-3 of 1 (Elasticsearch does not normalise such a cosine vector: the known
    difference ``near_unit`` shows, unit rows scaled by 1 +- up to 4e-4).

    Args:
        seed: RNG seed.
        n: Rows.
        dims: Dimensions.
        similarity: The similarity they are for.
        near_unit: Rows of almost unit length.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, dims))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    if near_unit:
        v *= 1.0 + rng.uniform(-4e-4, 4e-4, size=(n, 1))
    elif similarity != "dot_product":
        norms = rng.uniform(0.5, 2.0, size=(n, 1))
        v *= np.where(np.abs(norms**2 - 1) <= 2e-3, 1.1 * norms, norms)
    return v.astype(np.float32)


@dataclass
class KnnAgreement:
    """How the embedded backend's exact kNN agrees with Lucene's scores."""

    queries: int = 0
    scores_compared: int = 0
    max_diff: float = 0.0
    """Largest ``|embedded - Lucene| / max(1, |Lucene|)``: absolute for scores up to 1, relative above."""
    top10_identical: int = 0


def compare_knn(oracle: LuceneOracle, similarity: str, vectors: Any, queries: Any) -> KnnAgreement:
    """The embedded backend's ``knn`` (every document's score, and the top 10) against Lucene's exact scores.

    Args:
        oracle: The running oracle.
        similarity: ``cosine``, ``dot_product``, ``l2_norm`` or ``max_inner_product``.
        vectors: Document vectors (float32 rows).
        queries: Query vectors.
    """
    import numpy as np

    from es_rag.embedded.backend import EmbeddedBackend
    from es_rag.filters import SearchFilter

    backend = EmbeddedBackend(dims=vectors.shape[1], similarity=similarity, languages=[])
    backend.index([_chunk(i, "", "x", (), v) for i, v in enumerate(vectors)])
    out = KnnAgreement()
    for q, want in zip(queries, oracle.knn_exact(similarity, vectors, queries, 10), strict=True):
        hits = backend.knn(q, SearchFilter("t"), len(vectors))
        got = np.zeros(len(vectors))
        for h in hits:
            got[int(h.chunk_id[1:])] = float(h.dense_score)
        ref = np.asarray(want["all"])
        out.queries += 1
        out.scores_compared += len(ref)
        out.max_diff = max(out.max_diff, float(np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref)))))
        out.top10_identical += [int(h.chunk_id[1:]) for h in hits[:10]] == want["ids"]
    return out
