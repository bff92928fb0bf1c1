"""The client layer under real conditions (issue 11): retries with backoff, lost responses, counts, timeouts,
licence vs privilege refusals, delete-by-query conflicts and tasks, least privilege, connection errors.

The transport facts behind these tests were measured with elasticsearch-py 9.5.1 / elastic-transport 9.4.2: the
transport resends a status in ``retry_on_status`` (default 429, 502, 503, 504) at once, with no wait
(``Transport.perform_request``; elastic-transport-python#197); ``helpers.streaming_bulk`` sleeps through
``elasticsearch.helpers.actions.time.sleep``; a ``ConnectionError`` is resent by the transport.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from elastic_transport import ConnectionError as TransportConnectionError

from es_rag.elasticsearch.backend import BULK_MAX_RETRIES, ElasticsearchBackend
from es_rag.elasticsearch.cluster import is_licence_refusal
from es_rag.elasticsearch.versions import EsVersionStore
from es_rag.errors import ClusterError, ClusterUnreachable, ConfigError, LicenseError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer, random_corpus
from tests.support.double.client import strict_backend
from tests.support.double.cluster import Role, StrictCluster
from tests.support.es_transport import rejected_execution_error, rrf_license_error, unauthorized_error

S = Settings(vector_dims=DIMS, rerank_model=None, candidate_k=10, num_candidates=20, rerank_k=10, context_k=3)


@pytest.fixture
def helper_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    import elasticsearch.helpers.actions as actions

    calls: list[float] = []
    monkeypatch.setattr(actions.time, "sleep", lambda s: calls.append(s))
    return calls


@pytest.fixture
def send_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    import es_rag.elasticsearch.cluster as cluster_mod

    calls: list[float] = []
    monkeypatch.setattr(cluster_mod.time, "sleep", lambda s: calls.append(s))
    return calls


# ---------------------------------------------------------------------------------------------- 429
def test_a_persistent_bulk_429_is_resent_only_by_the_helper_with_waits(helper_sleeps: list[float]) -> None:
    backend, node, _ = strict_backend(S, setup=True)
    node.reset()
    node.route("POST|PUT", "_bulk", (429, rejected_execution_error()))
    corpus = random_corpus(random.Random(5), n_children=3)
    report = backend.index(corpus.children)
    bulks = node.calls(None, "_bulk")
    # one request per helper attempt: the transport no longer resends the 429 by itself
    assert len(bulks) == 1 + BULK_MAX_RETRIES
    assert len(helper_sleeps) == BULK_MAX_RETRIES and helper_sleeps == sorted(helper_sleeps)
    assert helper_sleeps[0] > 0 and helper_sleeps[1] == pytest.approx(2 * helper_sleeps[0])
    assert report.indexed == 0 and len(report.failed) == 3


def test_a_search_429_is_resent_after_a_doubling_wait(send_sleeps: list[float]) -> None:
    backend, node, cluster = strict_backend(S, setup=True)
    backend.probe()
    node.reset()
    node.queue(
        "POST", ".*/_count", (429, rejected_execution_error()), (429, rejected_execution_error()), cluster.respond
    )
    assert backend.count(SearchFilter("acme")) == 0
    assert len(node.calls("POST", ".*/_count")) == 3
    assert len(send_sleeps) == 2 and 0.25 <= send_sleeps[0] <= 0.5 and send_sleeps[1] == 2 * send_sleeps[0]


# ---------------------------------------------------------------------------------------------- lost registry response
def test_a_lost_registry_write_response_still_retires_and_purges_the_old_version() -> None:
    """The registry PUT is applied, its response lost: the transport resends it, the server answers 409 (the
    sequence number moved), es_rag re-reads. ``retired`` comes from the first read, so the old version is still
    purged and the listeners still hear of it."""
    from es_rag.chunking import StructureChunker
    from es_rag.ingest import SourceDoc, ingest_documents

    backend, node, cluster = strict_backend(S, setup=True)
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)

    def doc(version: str) -> SourceDoc:
        return SourceDoc(
            "guide.md", f"# Sync\n\nThe sync engine retries ({version}).", "acme", ("public",), source_version=version
        )

    ingest_documents([doc("v1")], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    registry_path = f"{S.index.prefix}-versions/_doc/acme"
    puts: list[int] = []

    def apply_then_lose(req: Any) -> Any:
        answer = cluster.respond(req)
        puts.append(answer[0])
        if len(puts) == 2:  # the commit of v2: applied by the server, the answer never arrives
            raise TransportConnectionError("Connection reset by peer")
        return answer

    node.route("PUT", registry_path, apply_then_lose)

    class Listener:
        def __init__(self) -> None:
            self.retired: list[tuple[str, str, str]] = []

        def on_retired(self, tenant_id: str, source_id: str, source_version: str) -> None:
            self.retired.append((tenant_id, source_id, source_version))

        def on_deleted(self, tenant_id: str, source_id: str) -> None:
            raise AssertionError("not deleted")

    listener = Listener()
    report = ingest_documents(
        [doc("v2")], chunker=chunker, embedder=RandomEmbedder(), backend=backend, listeners=[listener]
    )
    # begin (200), commit applied (200, answer lost), the transport's resend (409), es_rag's re-read and rewrite
    # (200), then the forget after the purge (200)
    assert puts[:4] == [200, 200, 409, 200]
    assert report.switched == [{"tenant_id": "acme", "source_id": "guide.md", "version": "v2", "retired": "v1"}]
    assert listener.retired == [("acme", "guide.md", "v1")]
    cluster.refresh_all()
    assert {d["source_version"] for d in cluster.docs(S.chunk_index).values()} == {"v2"}  # v1 purged
    assert cluster.docs(f"{S.index.prefix}-versions")["acme"]["hidden"] == []


# ---------------------------------------------------------------------------------------------- counts / fatal
def test_bulk_counts_what_landed_before_a_transport_failure() -> None:
    backend, node, cluster = strict_backend(S, setup=True)
    corpus = random_corpus(random.Random(7), n_children=450)
    calls: list[int] = []

    def second_bulk_fails(req: Any) -> Any:
        calls.append(1)
        if len(calls) >= 2:
            raise TransportConnectionError("Connection refused")
        return cluster.respond(req)

    node.route("POST|PUT", "_bulk", second_bulk_fails)
    with pytest.raises(ClusterUnreachable, match=r"\(200 documents were indexed before the failure\)"):
        backend.index(corpus.children)


@pytest.mark.parametrize("status", [401, 403, 413])
def test_bulk_stops_at_a_refusal_no_retry_can_fix(status: int) -> None:
    backend, node, _ = strict_backend(S, setup=True)
    node.reset()
    body = {"error": {"type": "security_exception", "reason": "no"}, "status": status}
    node.route("POST|PUT", "_bulk", (status, body))
    corpus = random_corpus(random.Random(8), n_children=450)  # three bulk requests' worth
    with pytest.raises(ClusterError, match=f"HTTP {status}") as info:
        backend.index(corpus.children)
    assert info.value.status == status
    assert len(node.calls(None, "_bulk")) == 1  # stopped: not one failure per document per chunk


# ---------------------------------------------------------------------------------------------- licence vs privilege
def test_licence_refusal_is_recognised_by_its_type_and_metadata_only() -> None:
    """LicenseUtils.newComplianceException: 403 security_exception, ``current license is non-compliant for [..]``,
    ``license.expired.feature``; AuthorizationDenialMessages: a 403 security_exception about privileges."""
    assert is_licence_refusal(rrf_license_error())
    assert not is_licence_refusal(unauthorized_error())
    mentions = {
        "error": {"type": "security_exception", "reason": "action [cluster:monitor/xpack/license/get] is unauthorized"}
    }
    assert not is_licence_refusal(mentions)  # the word "license" in a privilege error is not a licence refusal


def test_a_search_only_key_searches_with_client_fusion() -> None:
    """Least privilege: ``read`` on the es_rag indices and nothing else. The probe meets 403s on GET /, _license,
    _nodes/plugins and the asset GETs, records them, and the search goes the client path (no licence error)."""
    roles = {
        "admin": Role(cluster=("manage",), indices=((("*",), ("all",)),)),
        "searcher": Role(indices=(((f"{S.index.prefix}-*",), ("read",)),)),
    }
    cluster = StrictCluster(
        version="9.5.0", users={"elastic": ("pw", ("admin",)), "app": ("pw", ("searcher",))}, roles=roles
    )
    admin, _, _ = strict_backend(S, cluster, setup=True, basic_auth=("elastic", "pw"))
    corpus = random_corpus(random.Random(3), n_children=20)
    assert admin.index(corpus.children, corpus.parents).failed == []
    cluster.refresh_all()
    app, _node, _ = strict_backend(S, cluster, basic_auth=("app", "pw"))
    caps = app.probe()
    assert caps.version == "unknown" and caps.native_rrf is False
    assert set(caps.unreadable) >= {"/", "_license", "_nodes/plugins"}
    assert "needs cluster privilege monitor" in caps.unreadable["_license"]
    assert caps.vectors_in_source_param is None
    pipe = RagPipeline(app, embedder=RandomEmbedder(), settings=S, tokenizer=WordTokenizer())
    result = pipe.search("sync error", SearchFilter("acme", ("support",)))
    assert result.trace.paths["retrieval"] == "client-rrf"
    assert caps.vectors_in_source_param is True  # 9.5 accepted exclude_vectors: learned from the first search
    with pytest.raises(ClusterError, match="permission denied") as info:
        app.index(corpus.children[:1])
    assert not isinstance(info.value, LicenseError)


def test_a_version_unknown_cluster_before_9_1_learns_to_leave_exclude_vectors_out() -> None:
    roles = {
        "admin": Role(cluster=("manage",), indices=((("*",), ("all",)),)),
        "r": Role(indices=((("*",), ("read",)),)),
    }
    cluster = StrictCluster(version="9.0.0", users={"elastic": ("pw", ("admin",)), "app": ("pw", ("r",))}, roles=roles)
    admin, _, _ = strict_backend(S, cluster, setup=True, basic_auth=("elastic", "pw"))
    corpus = random_corpus(random.Random(3), n_children=10)
    assert admin.index(corpus.children, corpus.parents).failed == []
    cluster.refresh_all()
    app, node, _ = strict_backend(S, cluster, basic_auth=("app", "pw"))
    pipe = RagPipeline(app, embedder=RandomEmbedder(), settings=S, tokenizer=WordTokenizer())
    result = pipe.search("sync error", SearchFilter("acme", ("support",)))
    assert result.candidates and app.probe().vectors_in_source_param is False
    msearches = node.calls("POST", ".*/_msearch")
    assert len(msearches) == 2 and "exclude_vectors" not in str(msearches[-1].body)
    node.reset()
    pipe.search("device wipe", SearchFilter("acme"))
    assert len(node.calls("POST", ".*/_msearch")) == 1  # learned once


# ---------------------------------------------------------------------------------------------- delete by query
def _store_with_versions() -> tuple[ElasticsearchBackend, Any, StrictCluster, EsVersionStore]:
    from es_rag.chunking import StructureChunker
    from es_rag.ingest import SourceDoc, ingest_documents

    backend, node, cluster = strict_backend(S, setup=True)
    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    for version in ("v1", "v2"):
        doc = SourceDoc(
            "guide.md",
            f"# A\n\nAlpha {version}.\n\n# B\n\nBeta {version}.",
            "acme",
            ("public",),
            source_version=version,
        )
        ingest_documents([doc], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    return backend, node, cluster, EsVersionStore(backend)


def test_delete_by_query_runs_as_a_task_and_is_polled() -> None:
    _backend, node, cluster, store = _store_with_versions()
    node.reset()
    cluster.task_polls_before_done = 0
    out = store.delete_source("acme", "guide.md")
    assert out["remaining"] == {"chunks": 0, "parents": 0} and out["conflicts"] == 0
    dbq = node.calls("POST", ".*/_delete_by_query")
    assert dbq and all("wait_for_completion=false" in r.query for r in dbq)
    assert len(node.calls("GET", "_tasks/.*")) == len(dbq)


def test_conflicting_documents_are_retried_then_kept_hidden_never_forgotten() -> None:
    """delete_by_query/10_basic.yml: with conflicts=proceed a document changed since the delete's search is not
    deleted and counts in version_conflicts. Forgetting its key would serve it again."""
    _backend, node, cluster, store = _store_with_versions()
    chunks = cluster.indices[S.chunk_index]
    # a concurrent writer: before every delete round, one chunk of the source is rewritten (changed since the
    # refresh the delete searches), so that chunk conflicts in every round
    first = next(d for d, doc in chunks.docs.items() if doc.source.get("source_id") == "guide.md")
    original = cluster._delete_by_query

    def touch_then_delete(names: str, params: Any, body: Any, p: Any) -> Any:
        cluster.handle("PUT", f"{S.chunk_index}/_doc/{first}", "pipeline=_none", dict(chunks.docs[first].source), {})
        return original(names, params, body, p)

    cluster._delete_by_query = touch_then_delete  # type: ignore[method-assign]
    out = store.delete_source("acme", "guide.md")
    assert out["conflicts"] == 1 and out["remaining"]["chunks"] >= 1
    state = cluster.docs(f"{S.index.prefix}-versions")["acme"]
    assert "guide.md" not in state["active"] and "guide.md@v2" in state["hidden"]  # the leftover stays hidden
    assert len(node.calls("POST", f"{S.chunk_index}/_delete_by_query")) >= 3  # retried (after a refresh) each time


def test_a_purge_that_conflicts_once_succeeds_on_the_retry() -> None:
    _backend, _node, cluster, store = _store_with_versions()
    chunks = cluster.indices[S.chunk_index]
    original = cluster._delete_by_query
    rounds: list[int] = []

    def conflict_once(names: str, params: Any, body: Any, p: Any) -> Any:
        rounds.append(1)
        if len(rounds) == 1:
            victim = next(iter(chunks.docs))
            cluster.handle(
                "PUT", f"{S.chunk_index}/_doc/{victim}", "pipeline=_none", dict(chunks.docs[victim].source), {}
            )
        return original(names, params, body, p)

    cluster._delete_by_query = conflict_once  # type: ignore[method-assign]
    result = store.purge("acme", [("guide.md", "v2")])
    assert result.clean and result.kept_hidden == [] and len(rounds) == 4  # 2 indices x 2 rounds
    assert "guide.md@v2" not in cluster.docs(f"{S.index.prefix}-versions")["acme"]["hidden"]


def test_without_the_monitor_privilege_the_delete_runs_in_the_foreground() -> None:
    roles = {
        "admin": Role(cluster=("manage",), indices=((("*",), ("all",)),)),
        "ingest": Role(indices=(((f"{S.index.prefix}-*",), ("read", "write", "maintenance")),)),
    }
    cluster = StrictCluster(users={"elastic": ("pw", ("admin",)), "ing": ("pw", ("ingest",))}, roles=roles)
    strict_backend(S, cluster, setup=True, basic_auth=("elastic", "pw"))
    backend, node, _ = strict_backend(S, cluster, basic_auth=("ing", "pw"))
    from es_rag.chunking import StructureChunker
    from es_rag.ingest import SourceDoc, ingest_documents

    chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
    for version in ("v1", "v2"):
        doc = SourceDoc("guide.md", f"# A\n\nAlpha {version}.", "acme", ("public",), source_version=version)
        report = ingest_documents([doc], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
        assert report.failed == [] and report.warnings == []
    cluster.refresh_all()
    assert {d["source_version"] for d in cluster.docs(S.chunk_index).values()} == {"v2"}
    dbq = [r.query for r in node.calls("POST", ".*/_delete_by_query")]
    assert any("wait_for_completion=true" in q for q in dbq)  # the rerun after GET _tasks answered 403


# ---------------------------------------------------------------------------------------------- connecting
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:9200", "needs a scheme: use http://localhost:9200 or https://localhost:9200"),
        ("http://localhost", "has no port"),
        ("", "no Elasticsearch URL"),
        ("ftp://x:1", "the scheme must be http or https"),
    ],
)
def test_a_bad_url_is_a_one_line_config_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ElasticsearchBackend.connect(url, S)


def test_tls_options_need_https_and_cloud_id_excludes_a_url() -> None:
    with pytest.raises(ConfigError, match="need an https:// URL"):
        ElasticsearchBackend.connect("http://localhost:9200", S, ca_certs="/tmp/ca.crt")
    with pytest.raises(ConfigError, match="not both"):
        ElasticsearchBackend.connect("https://x:9243", S, cloud_id="dep:abc")


def test_explicit_credentials_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_API_KEY", "env-key")
    backend = ElasticsearchBackend.connect("http://localhost:9200", S, username="u", password="p")
    header = backend.client._headers["authorization"]
    assert header.startswith("Basic ")
    backend = ElasticsearchBackend.connect("http://localhost:9200", S)
    assert backend.client._headers["authorization"] == "ApiKey env-key"


def test_an_unreachable_cluster_names_the_url_and_the_cause() -> None:
    backend = ElasticsearchBackend.connect("http://127.0.0.1:9", S)
    with pytest.raises(ClusterUnreachable, match=r"cluster unreachable at http://127\.0\.0\.1:9: .*(refused|Errno)"):
        backend.send(EsRequest("GET", ""))
    backend.close()


def test_a_server_that_is_not_elasticsearch_is_named_so() -> None:
    backend, node, _ = strict_backend(S)
    node.product_header = False
    with pytest.raises(ClusterError, match="not Elasticsearch"):
        backend.send(EsRequest("GET", ""))


def test_the_backend_closes_its_client() -> None:
    with ElasticsearchBackend.connect("http://127.0.0.1:9", S) as backend:
        client = backend.client
    with pytest.raises(ClusterUnreachable):
        ElasticsearchBackend(client, S).send(EsRequest("GET", ""))


def test_concurrent_probes_read_the_cluster_once() -> None:
    import threading

    backend, node, _ = strict_backend(S, setup=True)
    node.reset()
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(backend.probe())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is results[0] for r in results) and results[0] is not None
    assert len(node.calls("GET", "/?")) == 1
