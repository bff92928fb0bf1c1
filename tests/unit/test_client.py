"""``es_rag.RagClient``: one object for apps, and the thread safety it promises.

Oracles are literal: the ids a tiny corpus must return for a query (each document has a word no other has), the
requests the strict double recorded, the lock a thread is seen waiting on.
"""

from __future__ import annotations

import threading
from pathlib import Path

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
