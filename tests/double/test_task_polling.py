"""A delete-by-query still running when a ``GET _tasks/<id>`` poll's wait ends (issue 29, second review).

``TransportGetTaskAction.getRunningTaskFromNode`` fails a ``wait_for_completion=true`` poll whose ``timeout``
passes with ``ElasticsearchTimeoutException("Timed out waiting for completion of task")``, answered 429 since 9.0
(``ElasticsearchTimeoutException.status`` returns ``TOO_MANY_REQUESTS``) and 500 before. es_rag used to resend
the 429 three times and raise, leaving the source ``active`` while Elasticsearch went on deleting it.
"""

from __future__ import annotations

from typing import Any

import pytest

from es_rag.chunking import StructureChunker
from es_rag.elasticsearch import versions as es_versions
from es_rag.elasticsearch.versions import EsVersionStore
from es_rag.errors import ClusterError
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster

S = Settings(vector_dims=DIMS, rerank_model=None, candidate_k=10, num_candidates=20, rerank_k=10, context_k=3)


def _store(version: str) -> tuple[Any, StrictCluster, EsVersionStore]:
    backend, node, cluster = strict_backend(S, StrictCluster(version=version), setup=True)
    doc = SourceDoc("guide.md", "# A\n\nAlpha one.\n\n# B\n\nBeta two.", "acme", ("public",), source_version="v1")
    ingest_documents(
        [doc],
        chunker=StructureChunker(WordTokenizer(), max_tokens=30, overlap=0),
        embedder=RandomEmbedder(),
        backend=backend,
    )
    return node, cluster, EsVersionStore(backend)


@pytest.mark.parametrize(("version", "status"), [("9.5.0", 429), ("8.18.0", 500)])
def test_a_poll_that_times_out_on_a_running_task_polls_again(version: str, status: int) -> None:
    node, cluster, store = _store(version)
    cluster.task_polls_before_done = 4  # more than the 429 resends es_rag allows any request
    node.reset()
    out = store.delete_source("acme", "guide.md")
    assert out["remaining"] == {"chunks": 0, "parents": 0}
    polls = node.calls("GET", "_tasks/.*")
    dbq = node.calls("POST", ".*/_delete_by_query")
    # four timed-out polls per task, then the result: nothing raised
    assert len(polls) == 5 * len(dbq)
    assert all("wait_for_completion=true" in r.query for r in polls)
    assert store.state("acme").active == {}


def test_the_double_answers_a_timed_out_poll_as_elasticsearch_does() -> None:
    _node, cluster, _unused = _store("9.5.0")
    cluster.task_polls_before_done = 1
    status, body = cluster.handle(
        "POST", f"{S.chunk_index}/_delete_by_query", "conflicts=proceed&wait_for_completion=false", {}, {}
    )
    assert status == 200
    task = body["task"]
    status, body = cluster.handle("GET", f"_tasks/{task}", "wait_for_completion=true&timeout=30s", None, {})
    assert status == 429
    assert body["error"]["type"] == "elasticsearch_timeout_exception"
    assert body["error"]["reason"] == "Timed out waiting for completion of task"


def test_a_delete_still_running_at_the_deadline_leaves_the_source_hidden_never_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _node, cluster, store = _store("9.5.0")
    cluster.task_polls_before_done = 10**6
    monkeypatch.setattr(es_versions, "TASK_TIMEOUT_S", 0.0)
    with pytest.raises(ClusterError, match="still running"):
        store.delete_source("acme", "guide.md")
    state = store.state("acme")
    assert "guide.md" not in state.active
    assert state.hidden == ["guide.md@v1"]


def test_a_finished_task_without_a_stored_result_is_not_read_as_a_clean_purge(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``completed: true`` with neither ``response`` nor ``error`` (issue 43, item 2): the outcome is unknown. Here
    the background delete did nothing (a task cut short, its result lost); es_rag used to count 0 failures and
    forget the hidden keys, serving the source's chunks again. Now the same delete runs in the foreground, and only
    its clean answer lets the keys go."""
    node, cluster, store = _store("9.5.0")
    cluster.task_results_stored = False
    handle = cluster.handle

    def background_deletes_do_nothing(method: str, path: str, query: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("_delete_by_query") and "wait_for_completion=false" in query:
            task_id = f"double-node-id:{next(cluster._task_ids)}"
            cluster.tasks[task_id] = {"polls": 0, "response": {"deleted": 0, "failures": []}}
            return 200, {"task": task_id}
        return handle(method, path, query, *args, **kwargs)

    cluster.handle = background_deletes_do_nothing  # type: ignore[method-assign]
    node.reset()
    with caplog.at_level("WARNING"):
        out = store.delete_source("acme", "guide.md")
    assert out["remaining"] == {"chunks": 0, "parents": 0}
    assert not [d for d in cluster.docs(S.chunk_index).values() if d["source_id"] == "guide.md"]
    foreground = [r for r in node.calls("POST", ".*/_delete_by_query") if "wait_for_completion=true" in r.query]
    assert foreground, "the delete was not run again"
    assert any("finished without a stored result" in r.getMessage() for r in caplog.records)
    assert store.state("acme").hidden == []


def test_the_double_answers_a_lost_task_result_as_elasticsearch_does() -> None:
    _node, cluster, _unused = _store("9.5.0")
    cluster.task_results_stored = False
    _status, body = cluster.handle(
        "POST", f"{S.chunk_index}/_delete_by_query", "conflicts=proceed&wait_for_completion=false", {}, {}
    )
    status, got = cluster.handle("GET", f"_tasks/{body['task']}", "wait_for_completion=true", None, {})
    assert status == 200 and got["completed"] is True and "response" not in got and "error" not in got
