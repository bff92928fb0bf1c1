"""``es_rag.RagClient``: one object for apps, and the thread safety it promises.

Oracles are literal: the ids a tiny corpus must return for a query (each document has a word no other has), the
requests the strict double recorded, the lock a thread is seen waiting on.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from es_rag import RagClient, SearchResult, Settings
from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.encoders.tokenizer import tokenizer_lock
from es_rag.errors import ConfigError, EsRagError
from es_rag.ingest import IngestReport


def _blocked_while_held(lock: threading.RLock, call: object) -> tuple[bool, bool]:
    """Run ``call`` in a thread while ``lock`` is held here: (finished while held, finished after release)."""
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        done.set()

    with lock:
        worker = threading.Thread(target=run)
        worker.start()
        early = done.wait(0.3)
    late = done.wait(30)
    worker.join()
    assert not errors, errors
    return early, late


# ---------------------------------------------------------------------------------------------- shared models
def test_embedding_counting_and_chunking_wait_for_the_one_lock_of_their_shared_tokenizer(
    tiny_bi_encoder: Path,
) -> None:
    """The embedder and its HFTokenizer wrap one tokenizer object: without a common lock, ``count`` of a long text
    during ``embed_query`` of another made the embedding untruncated (torch: size 802 vs 128), and the pipeline
    silently fell back to BM25 only."""
    embedder = SentenceTransformerEmbedder(str(tiny_bi_encoder))
    embedder.warm_up()
    tok = embedder.tokenizer()
    lock = tokenizer_lock(embedder.model.tokenizer)
    calls = {
        "embed_query": lambda: embedder.embed_query("remote wipe"),
        "embed_documents": lambda: embedder.embed_documents(["remote wipe", "fox"]),
        "count": lambda: tok.count("the quick brown fox"),
        "token_spans": lambda: tok.token_spans("the quick brown fox"),
    }
    for name, call in calls.items():
        assert _blocked_while_held(lock, call) == (False, True), name


def test_reranker_scoring_waits_for_its_tokenizer_lock(tiny_cross_encoder: Path) -> None:
    from es_rag.cross_encoder.model import CrossEncoderReranker

    reranker = CrossEncoderReranker(str(tiny_cross_encoder))
    reranker.warm_up()
    lock = tokenizer_lock(reranker.model.tokenizer)
    assert _blocked_while_held(lock, lambda: reranker.score("fox", [("", "the quick brown fox")])) == (False, True)


def test_concurrent_reads_of_a_changed_embedded_store_build_its_index_once_and_see_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of a store a write had changed rebuilt its index (12 BM25 builds for 4 readers here), and a later
    reader's rebuild starts with ``self._bm25 = {}``: an earlier reader already scoring could find no BM25 index
    and return no hits. BM25 indexing is slowed to open that window."""
    import time

    import bm25s

    from es_rag.embedded.backend import EmbeddedBackend
    from es_rag.filters import SearchFilter
    from tests.support.contract import corpus

    children, parents = corpus()
    store = EmbeddedBackend(tmp_path / "idx", dims=4)
    store.index(children, parents)
    store.flush()
    reopened = EmbeddedBackend(tmp_path / "idx")  # freshly loaded: its search structures are not built yet
    real_index = bm25s.BM25.index
    builds: list[int] = []

    def slow_index(self: object, *args: object, **kwargs: object) -> object:
        builds.append(1)
        time.sleep(0.05)
        return real_index(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bm25s.BM25, "index", slow_index)
    flt = SearchFilter("acme")
    results: list[list[str]] = []

    def read() -> None:
        results.append([h.chunk_id for h in reopened.bm25("password reset", flt, 10)])

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # acme's public chunks with "password" or "reset": a1 and a2 (a4 is legal-only, g1 is globex's)
    assert [sorted(r) for r in results] == [["a1", "a2"]] * 4
    assert len(builds) == 3  # title, heading_path, text: built once, not once per reader


# ---------------------------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def settings(tiny_bi_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=None, candidate_k=10, num_candidates=20,
        rerank_k=8, context_k=4, chunk_max_tokens=60, chunk_overlap=0,
    )  # fmt: skip


DOCS = {
    "guide.md": "# Passwords\n\nReset the password from the login page. The reset link expires after one hour.\n",
    "sync.md": "# Sync\n\nSync stops when the token expires; sign in again to renew the token.\n",
    ".hidden.md": "# Hidden\n\npassword notes nobody should index\n",
    "slides.pptx": "PK\x03\x04",
}
POLICY = {"policy.md": "# Legal hold\n\nLegal hold keeps the password history.\n"}
GLOBEX = {"guide.md": "# Passwords\n\nGlobex resets the password by phone.\n"}


def _docs(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def visible(result: SearchResult) -> set[str]:
    """Sources a search could see: kNN returns every chunk the filter lets through (a handful here)."""
    return {h.source_id for h in result.candidates}


def bm25_top(result: SearchResult) -> str | None:
    """Source of the best BM25 hit (the only channel whose order the words decide)."""
    ids = result.channels.get("bm25") or []
    by_id = {h.chunk_id: h.source_id for h in result.candidates}
    return by_id.get(ids[0]) if ids else None


def _fill(rag: RagClient, tmp_path: Path) -> IngestReport:
    report = rag.ingest(_docs(tmp_path / "docs"), tenant="acme", acl="support")
    assert rag.ingest_texts(POLICY, tenant="acme", acl=["legal"]).sources == 1
    assert rag.ingest_texts(GLOBEX, tenant="globex").sources == 1
    return report


# ---------------------------------------------------------------------------------------------- embedded, end to end
def test_an_embedded_folder_ingests_searches_lists_and_deletes_like_the_cli(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from es_rag.cli import main

    idx = tmp_path / "idx"
    with RagClient.open(idx, settings) as rag:
        report = _fill(rag, tmp_path)
        assert (report.sources, report.failed) == (2, [])
        skipped = {Path(s["path"]).name: s["reason"] for s in report.skipped}
        assert skipped[".hidden.md"] == "hidden file" and skipped["slides.pptx"].startswith("unsupported file type")

        support = rag.search("password reset", tenant="acme", acl=["support"])
        assert visible(support) == {"guide.md", "sync.md"} and bm25_top(support) == "guide.md"
        assert support.hits and support.context.text and support.trace.paths["dense"] == "client-embedding"
        assert visible(rag.search("password", tenant="acme", acl=["support", "legal"])) == {
            "guide.md", "sync.md", "policy.md"
        }  # fmt: skip
        assert rag.search("password", tenant="acme").hits == []  # public only: nothing of acme is public
        globex = rag.search("password", tenant="globex")
        assert visible(globex) == {"guide.md"} and {h.tenant_id for h in globex.candidates} == {"globex"}
        assert "Globex" in globex.context.text

        assert [s.source_id for s in rag.sources("acme")] == ["guide.md", "policy.md", "sync.md"]
        gone = rag.delete_source("guide.md", tenant="acme")
        assert gone["deleted"] >= 2 and gone["remaining"] == {"chunks": 0, "parents": 0}
        assert visible(rag.search("password reset", tenant="acme", acl="support")) == {"sync.md"}
        assert [s.source_id for s in rag.sources("globex")] == ["guide.md"]  # the other tenant's guide.md stays

    # what the client wrote is the CLI's index: the CLI lists it
    assert main(["sources", "--tenant", "acme", "--index-dir", str(idx), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["source_id"] for s in listed["sources"]] == ["policy.md", "sync.md"]


def test_tenant_is_required_and_never_empty_in_every_call(settings: Settings) -> None:
    rag = RagClient.open(None, settings)
    with pytest.raises(TypeError, match="tenant"):
        rag.search("password")  # type: ignore[call-arg]
    calls = {
        "search": lambda t: rag.search("password", tenant=t),
        "explain": lambda t: rag.explain("password", tenant=t, vector=False),
        "ingest_texts": lambda t: rag.ingest_texts(POLICY, tenant=t),
        "ingest": lambda t: rag.ingest(["."], tenant=t),
        "delete_source": lambda t: rag.delete_source("guide.md", tenant=t),
        "sources": lambda t: rag.sources(t),
    }
    for name, call in calls.items():
        for bad in ("", "  ", None):
            with pytest.raises(ConfigError, match="tenant: every call needs a non-empty tenant"):
                call(bad)
            assert rag._embedder is None, name  # refused before any model loads


def test_one_acl_string_is_one_group_not_its_letters(settings: Settings) -> None:
    with RagClient.open(None, settings) as rag:
        rag.ingest_texts({"guide.md": DOCS["guide.md"]}, tenant="acme", acl="support")
        assert visible(rag.search("password", tenant="acme", acl="support")) == {"guide.md"}
        assert rag.search("password", tenant="acme", acl="s").hits == []  # "support" as letters would let "s" in


def test_settings_default_take_an_object_and_flat_overrides(settings: Settings, tmp_path: Path) -> None:
    assert RagClient.open(None).settings.select.context_k == Settings().select.context_k
    rag = RagClient.open(None, settings=Settings(context_k=3))
    assert rag.settings.select.context_k == 3
    assert RagClient.open(None, settings, context_k=2).settings.select.context_k == 2
    assert RagClient.open(None, context_k=2, rerank_k=5).settings.rerank.k == 5
    with pytest.raises(ConfigError, match="unknown setting 'contxt_k'; did you mean context_k"):
        RagClient.open(None, contxt_k=2)
    with pytest.raises(ConfigError, match=r"expected an es_rag\.Settings, got dict"):
        RagClient.open(None, {"context_k": 3})  # type: ignore[arg-type]
    with RagClient.open(tmp_path / "idx", settings) as small:
        small.ingest_texts(POLICY, tenant="acme")
    with RagClient.open(tmp_path / "idx") as follows:  # embedding_model auto: the index's own model (issue 31)
        assert (follows.settings.encoder.model, follows.settings.encoder.dims) == (settings.encoder.model, 32)
    with pytest.raises(ConfigError, match="index holds 32-dim vectors, settings say 384"):
        RagClient.open(tmp_path / "idx", Settings(embedding_model="other/model"))  # a model given is kept


def test_ingest_texts_reports_each_bad_document_and_indexes_the_rest(settings: Settings) -> None:
    with RagClient.open(None, settings) as rag:
        report = rag.ingest_texts(
            [("a.md", "# A\n\nalpha"), ("b.md", "  "), ("a.md", "# A again"), ("", "text"), ("c.md",)],  # type: ignore[list-item]
            tenant="acme",
        )
        assert report.sources == 1
        assert [(f["document"], f["field"]) for f in report.failed] == [
            ("b.md", "text"), ("a.md", "source_id"), ("texts[3]", "source_id"), ("texts[4]", "pair")
        ]  # fmt: skip
        with pytest.raises(ConfigError, match="format: invalid value 'pdf'; valid values: markdown, rst, plain"):
            rag.ingest_texts({"x": "y"}, tenant="acme", format="pdf")


def test_nothing_to_ingest_returns_the_report_without_loading_a_model(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import es_rag.wiring

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(es_rag.wiring, "build_embedder", refuse)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "slides.pptx").write_text("PK")
    with RagClient.open(tmp_path / "idx", settings) as rag:
        report = rag.ingest(tmp_path / "empty", tenant="acme")
        assert (report.sources, len(report.skipped)) == (0, 1)
        assert rag.ingest_texts({"x.md": ""}, tenant="acme").failed[0]["field"] == "text"
        assert rag.delete_source("nothing.md", tenant="acme")["deleted"] == 0  # deleting needs no model either
        assert rag.sources("acme") == []


def test_sync_deletes_what_the_folder_no_longer_has(settings: Settings, tmp_path: Path) -> None:
    docs = _docs(tmp_path / "docs")
    with RagClient.open(tmp_path / "idx", settings) as rag:
        rag.ingest(docs, tenant="acme", sync=True)
        (docs / "sync.md").unlink()
        report = rag.ingest(docs, tenant="acme", sync=True)
        assert [r["source_id"] for r in report.removed] == ["sync.md"]
        assert [s.source_id for s in rag.sources("acme")] == ["guide.md"]
        with pytest.raises(ConfigError, match="--sync follows folders"):
            rag.ingest(docs / "guide.md", tenant="acme", sync=True)


def test_a_write_keeps_what_another_process_wrote_to_the_folder_meanwhile(settings: Settings, tmp_path: Path) -> None:
    """The client opened the folder before ``es-rag ingest`` wrote to it; its own later ingest must not save its
    older copy over the CLI's documents (what the folder's write lock exists to prevent)."""
    from es_rag.cli import main

    idx = tmp_path / "idx"
    rag = RagClient.open(idx, settings)
    rag.ingest_texts(POLICY, tenant="acme")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "cli.md").write_text("# From the CLI\n\nWritten by another process.\n")
    flags = ["--embedding-model", settings.encoder.model, "--vector-dims", "32", "--chunk-max-tokens", "60"]
    assert main(["ingest", str(tmp_path / "cli"), "--tenant", "acme", "--index-dir", str(idx), *flags]) == 0
    rag.ingest_texts({"late.md": "# Late\n\nWritten after the CLI."}, tenant="acme")
    assert [s.source_id for s in rag.sources("acme")] == ["cli.md", "late.md", "policy.md"]
    assert [s.source_id for s in RagClient.open(idx, settings).sources("acme")] == ["cli.md", "late.md", "policy.md"]


def test_a_write_that_fails_leaves_the_folder_and_the_searches_as_they_were(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = tmp_path / "idx"
    rag = RagClient.open(idx, settings)
    rag.ingest_texts({"guide.md": DOCS["guide.md"]}, tenant="acme")
    before = sorted((p.name, p.read_bytes()) for p in idx.iterdir() if p.name != "write.lock")

    def broken(self: object, texts: object) -> None:
        raise RuntimeError("embedding failed mid-ingest")

    monkeypatch.setattr(SentenceTransformerEmbedder, "embed_documents", broken)
    with pytest.raises(RuntimeError, match="embedding failed mid-ingest"):
        rag.ingest_texts({"guide.md": "# Passwords\n\nA new version.", "sync.md": DOCS["sync.md"]}, tenant="acme")
    assert sorted((p.name, p.read_bytes()) for p in idx.iterdir() if p.name != "write.lock") == before
    assert visible(rag.search("password", tenant="acme")) == {"guide.md"}
    assert "login page" in rag.search("password", tenant="acme").context.text  # still the first version


def test_a_write_waits_for_the_folder_write_lock_another_process_holds(settings: Settings, tmp_path: Path) -> None:
    from filelock import FileLock

    idx = tmp_path / "idx"
    rag = RagClient.open(idx, settings)
    rag.ingest_texts(POLICY, tenant="acme")  # models loaded: the wait below is the lock's alone
    other = FileLock(str(idx / "write.lock"))  # what `es-rag ingest` holds in another process
    other.acquire()
    done = threading.Event()
    worker = threading.Thread(target=lambda: (rag.delete_source("policy.md", tenant="acme"), done.set()))
    worker.start()
    try:
        assert not done.wait(0.5)
        assert [s.source_id for s in rag.sources("acme")] == ["policy.md"]  # searches and listings go on meanwhile
    finally:
        other.release()
    assert done.wait(30)
    worker.join()
    assert rag.sources("acme") == []


# ---------------------------------------------------------------------------------------------- models and threads
def test_models_load_once_when_the_first_searches_arrive_together(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    import es_rag.wiring
    from es_rag.pipeline import RagPipeline

    loads: list[str] = []
    real_embedder, real_warm_up = es_rag.wiring.build_embedder, RagPipeline.warm_up

    def counted_embedder(*args: object, **kwargs: object) -> object:
        loads.append("embedder")
        time.sleep(0.2)  # a model load takes a while: every thread arrives during it
        return real_embedder(*args, **kwargs)  # type: ignore[arg-type]

    def counted_warm_up(self: RagPipeline) -> None:
        loads.append("pipeline")
        real_warm_up(self)

    monkeypatch.setattr(es_rag.wiring, "build_embedder", counted_embedder)
    monkeypatch.setattr(RagPipeline, "warm_up", counted_warm_up)
    rag = RagClient.open(None, settings)
    rag.ingest_texts({"guide.md": DOCS["guide.md"]}, tenant="acme")  # loads the embedder only
    assert loads == ["embedder"]
    results: list[SearchResult] = []
    threads = [threading.Thread(target=lambda: results.append(rag.search("password", tenant="acme"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == ["embedder", "pipeline"]
    assert [visible(r) for r in results] == [{"guide.md"}] * 6
    rag.ingest_texts({"sync.md": DOCS["sync.md"]}, tenant="acme")
    rag.explain("password", tenant="acme")
    assert loads == ["embedder", "pipeline"]


# Four writes; every state a search may see is one of the five the writes pass through, never a mixture.
WRITES = [("ingest", "n0"), ("ingest", "n1"), ("delete", "n0"), ("ingest", "n2")]
STATES = [set(), {"n0"}, {"n0", "n1"}, {"n1"}, {"n1", "n2"}]


def _searches_during_writes(rag: RagClient) -> list[tuple[frozenset[str], str | None, str]]:
    """Four threads search while this one writes :data:`WRITES`; returns (visible, BM25 top, dense path) per search.
    The new documents share no word with the query, so BM25's best is always guide.md."""
    seen: list[tuple[frozenset[str], str | None, str]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set() or len(seen) < 8:
            try:
                r = rag.search("password reset", tenant="acme", acl="support")
                assert {h.tenant_id for h in r.candidates} <= {"acme"}
                seen.append((frozenset(visible(r)), bm25_top(r), r.trace.paths["dense"]))
            except BaseException as exc:
                errors.append(exc)
                return

    rag.search("password reset", tenant="acme", acl="support")  # models loaded before the race starts
    threads = [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    for op, name in WRITES:
        if op == "ingest":
            report = rag.ingest_texts({name: f"# Device {name}\n\nKeep laptop {name} charged.\n"}, tenant="acme",
                                      acl="support")  # fmt: skip
            assert report.sources == 1 and not report.failed
        else:
            assert rag.delete_source(name, tenant="acme")["remaining"] == {"chunks": 0, "parents": 0}
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    return seen


@pytest.mark.parametrize("where", ["folder", "memory"])
def test_threads_search_while_one_writes_and_each_sees_a_whole_state(
    settings: Settings, tmp_path: Path, where: str
) -> None:
    with RagClient.open(tmp_path / "idx" if where == "folder" else None, settings) as rag:
        rag.ingest(_docs(tmp_path / "docs"), tenant="acme", acl="support")
        seen = _searches_during_writes(rag)
        base = {"guide.md", "sync.md"}
        assert {s for s, _, _ in seen} <= {frozenset(base | extra) for extra in STATES}
        assert {(top, dense) for _, top, dense in seen} == {("guide.md", "client-embedding")}  # no silent fallback
        assert visible(rag.search("password reset", tenant="acme", acl="support")) == base | {"n1", "n2"}


def test_threads_search_a_cluster_while_one_writes(settings: Settings) -> None:
    """The same race over real sockets: ``from_url`` against the strict double served over HTTP (one request at a
    time, as a node applies them), the client's connection pool shared by the threads."""
    from tests.support.double.cluster import StrictCluster
    from tests.support.double.http import serve

    # client fusion: the per-channel lists stay visible (native rrf returns only the fused list)
    with serve(StrictCluster()) as url, RagClient.from_url(url, settings, fusion_path="client") as rag:
        rag.backend.setup()
        rag.ingest_texts({n: DOCS[n] for n in ("guide.md", "sync.md")}, tenant="acme", acl="support")
        rag.ingest_texts(GLOBEX, tenant="globex", acl="support")
        seen = _searches_during_writes(rag)
        base = {"guide.md", "sync.md"}
        assert {s for s, _, _ in seen} <= {frozenset(base | extra) for extra in STATES}
        assert {(top, dense) for _, top, dense in seen} == {("guide.md", "client-embedding")}
        assert visible(rag.search("password reset", tenant="acme", acl="support")) == base | {"n1", "n2"}


# ---------------------------------------------------------------------------------------------- lifecycle
def test_close_leaves_the_apps_own_elasticsearch_client_open(settings: Settings) -> None:
    from elasticsearch import Elasticsearch

    from tests.support.double.cluster import StrictCluster
    from tests.support.double.http import serve

    with serve(StrictCluster()) as url:
        es = Elasticsearch(url)  # the app's client: its pool, auth and TLS
        with RagClient.from_elasticsearch(es, settings) as rag:
            assert rag.backend.client is es
            rag.backend.setup()
            rag.ingest_texts({"guide.md": DOCS["guide.md"]}, tenant="acme")
            assert visible(rag.search("password", tenant="acme")) == {"guide.md"}
        assert rag.closed
        assert es.info()["version"]["number"] == "9.5.0"  # still open: the app closes it
        es.close()


def test_close_closes_the_client_from_url_made(settings: Settings) -> None:
    from elasticsearch import ConnectionError as EsConnectionError

    from tests.support.double.cluster import StrictCluster
    from tests.support.double.http import serve

    with serve(StrictCluster()) as url:
        rag = RagClient.from_url(url, settings)
        es = rag.backend.client
        assert es.info()["version"]["number"] == "9.5.0"
        rag.close()
        with pytest.raises(EsConnectionError, match="Pool is closed"):
            es.info()


def test_every_call_after_close_raises_a_clear_error(settings: Settings, tmp_path: Path) -> None:
    rag = RagClient.open(tmp_path / "idx", settings)
    rag.ingest_texts(POLICY, tenant="acme")
    rag.close()
    rag.close()  # twice is fine
    calls = {
        "search": lambda: rag.search("password", tenant="acme"),
        "explain": lambda: rag.explain("password", tenant="acme", vector=False),
        "ingest": lambda: rag.ingest(tmp_path / "idx", tenant="acme"),
        "ingest_texts": lambda: rag.ingest_texts(POLICY, tenant="acme"),
        "delete_source": lambda: rag.delete_source("policy.md", tenant="acme"),
        "sources": lambda: rag.sources("acme"),
        "selftest": lambda: rag.selftest(),
        "with": lambda: rag.__enter__(),
    }
    for name, call in calls.items():
        with pytest.raises(EsRagError, match=r"RagClient\(embedded .*idx, closed\): the client is closed"):
            call()
        assert name
    assert [s.source_id for s in RagClient.open(tmp_path / "idx", settings).sources("acme")] == ["policy.md"]


def test_close_waits_for_a_running_search(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from es_rag.pipeline import RagPipeline

    rag = RagClient.open(None, settings)
    rag.ingest_texts({"guide.md": DOCS["guide.md"]}, tenant="acme")
    rag.search("password", tenant="acme")
    inside, release = threading.Event(), threading.Event()
    real_search = RagPipeline.search

    def held_search(self: RagPipeline, *args: object) -> SearchResult:
        inside.set()
        release.wait(30)
        return real_search(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(RagPipeline, "search", held_search)
    results: list[SearchResult] = []
    searcher = threading.Thread(target=lambda: results.append(rag.search("password", tenant="acme")))
    searcher.start()
    assert inside.wait(30)
    closer = threading.Thread(target=rag.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive() and not rag.closed  # close waits for the search in flight
    release.set()
    searcher.join()
    closer.join()
    assert rag.closed and visible(results[0]) == {"guide.md"}


def test_from_elasticsearch_refuses_what_is_not_a_client() -> None:
    with pytest.raises(
        ConfigError, match=r"takes an elasticsearch\.Elasticsearch or AsyncElasticsearch client, got str .*from_url"
    ):
        RagClient.from_elasticsearch("http://localhost:9200")
    with pytest.raises(ConfigError, match="needs a scheme"):
        RagClient.from_url("localhost:9200")


# ---------------------------------------------------------------------------------------------- explain, selftest
def test_explain_returns_what_the_cli_prints(capsys: pytest.CaptureFixture[str]) -> None:
    from es_rag.cli import main

    rag = RagClient.open(None)
    for fmt in ("console", "json"):
        capsys.readouterr()
        argv = ["explain", "reset password E1042", "--tenant", "acme", "--acl", "support", "--no-vector"]
        assert main([*argv, "--format", fmt]) == 0
        printed = capsys.readouterr().out
        text = rag.explain("reset password E1042", tenant="acme", acl="support", format=fmt, vector=False)
        assert printed == (text if fmt == "console" else text + "\n")
    assert rag._embedder is None  # vector=False loads no model


def test_explain_and_selftest_on_a_cluster(settings: Settings) -> None:
    from tests.support.double.client import strict_backend

    backend, node, cluster = strict_backend(settings, setup=True)
    with RagClient.from_elasticsearch(backend.client, settings) as rag:
        rag.ingest_texts({"guide.md": DOCS["guide.md"]}, tenant="acme")
        rag.ingest_texts({"guide.md": "# Passwords\n\nA second version."}, tenant="acme")
        node.reset()
        text = rag.explain("reset password", tenant="acme", acl="support")
        assert text.startswith("# version gate: 0 hidden key(s) read from es-rag-versions/_doc/acme\n")
        assert "native fusion: rrf retriever" in text and "client fusion" not in text  # the cluster's one path
        assert node.lines()[0] == "GET /es-rag-versions/_doc/acme"

        report = rag.selftest()
        assert report.ok, [c for c in report.checks if c.status == "fail"]
        assert report.prefix.startswith("es-rag-selftest-")
        assert {c.name: c.status for c in report.checks}["cleanup"] == "pass"
        assert not [i for i in cluster.indices if i.startswith("es-rag-selftest-")]
        assert visible(rag.search("password", tenant="acme")) == {"guide.md"}  # the app's own index untouched


def test_selftest_on_the_embedded_backend_refuses_instead_of_checking_nothing(settings: Settings) -> None:
    with pytest.raises(EsRagError, match="selftest checks an Elasticsearch cluster; this client is on the embedded"):
        RagClient.open(None, settings).selftest()


def test_importing_es_rag_and_opening_a_client_load_no_model(tmp_path: Path) -> None:
    import subprocess
    import sys

    probe = (
        "import sys, es_rag\n"
        "rag = es_rag.RagClient.open(sys.argv[1])\n"
        "rag.sources('acme'); rag.explain('q', tenant='acme', vector=False); rag.close()\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "idx")], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
