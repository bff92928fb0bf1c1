"""``es_rag.RagClient``: one object for apps, and the thread safety it promises.

Oracles are literal: the ids a tiny corpus must return for a query (each document has a word no other has), the
requests the strict double recorded, the lock a thread is seen waiting on.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.encoders.tokenizer import tokenizer_lock


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
