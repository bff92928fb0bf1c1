"""``es-rag selftest`` end to end: the real CLI over real sockets against the strict double (``tests/double/http``),
in every vector mode, licence and supported version; and its failure paths (nothing reachable, missing
privileges, a failing check, Ctrl-C), after each of which nothing it created is left behind.

``tests/live/test_live_selftest.py`` runs the same code against a real cluster (``ES_URL``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import es_rag.selftest as selftest
from es_rag.cli import main
from tests.support.double.cluster import Role, StrictCluster
from tests.support.double.http import serve
from tests.support.double.ingest import InferenceEndpoint

E5 = ".multilingual-e5-small-elasticsearch"
MINILM = "minilm-eland"
"""An endpoint serving the client's query encoder (all-MiniLM-L6-v2, uploaded with eland): in vector mode inference
the documents' and the queries' vectors then come from one model, which the embedding check requires."""


def _cluster(**kw: Any) -> StrictCluster:
    return StrictCluster(
        endpoints=[
            InferenceEndpoint(E5, dims=384),
            InferenceEndpoint(MINILM, dims=384, model_id="sentence-transformers__all-minilm-l6-v2"),
        ],
        **kw,
    )


def _leftovers(cluster: StrictCluster) -> list[str]:
    user_templates = [t for t, b in cluster.index_templates.items() if not b.get("_built_in")]
    return sorted(
        [*cluster.indices, *user_templates, *cluster.component_templates, *cluster.pipelines, *cluster.scripts]
    )


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    def go(cluster: StrictCluster, *argv: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        with serve(cluster) as url:
            rc = main(["selftest", "--es", url, "--json", *argv])
        out = capsys.readouterr().out
        return rc, json.loads(out) if out.strip().startswith("{") else {"raw": out}

    yield go


def _status(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


@pytest.mark.parametrize(
    ("version", "licence", "argv", "skipped"),
    [
        ("9.5.0", "trial", [], set()),
        ("9.5.0", "basic", [], {"native rrf retriever", "native linear retriever", "stored search template"}),
        ("9.5.0", "trial", ["--inference-id", MINILM], set()),
        ("9.5.0", "trial", ["--vector-mode", "semantic_text", "--inference-id", E5], {"stored search template"}),
        ("9.1.0", "trial", ["--vector-index-type", "int8_hnsw"], set()),
        ("8.18.0", "enterprise", ["--similarity", "dot_product"], set()),
        ("9.5.0", "trial", ["--analyzer", "english", "--vector-index-type", "bbq_hnsw"], set()),
    ],
)
def test_selftest_passes_on_a_strict_node(
    run: Any, version: str, licence: str, argv: list[str], skipped: set[str]
) -> None:
    cluster = _cluster(version=version, license_type=licence)
    rc, report = run(cluster, *argv)
    status = _status(report)
    assert rc == 0 and report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
    assert {n for n, st in status.items() if st == "skip"} == skipped
    assert {"setup", "ingest", "lineage and content_hash", "tenant and ACL isolation", "version switch"} <= {
        n for n, st in status.items() if st == "pass"
    }
    assert report["prefix"].startswith("es-rag-selftest-") and status["cleanup"] == "pass"
    assert _leftovers(cluster) == []


def test_selftest_refuses_an_inference_endpoint_of_another_model(run: Any) -> None:
    """Issue 19 item 8: in vector mode inference Elasticsearch embeds the documents (here with multilingual-e5-small)
    and the client the queries (all-MiniLM-L6-v2): selftest shows the mismatch, naming both, and cleans up."""
    cluster = _cluster()
    rc, report = run(cluster, "--inference-id", E5)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert rc == 1 and failed
    assert all("inference:" + E5 in c["detail"] and "all-MiniLM-L6-v2" in c["detail"] for c in failed)
    assert "multilingual-e5-small" in failed[0]["detail"] and "es-rag reindex" in failed[0]["detail"]
    assert _leftovers(cluster) == []


def test_selftest_fails_clearly_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["selftest", "--es", "http://127.0.0.1:9"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  connect  GET /: cluster unreachable at http://127.0.0.1:9" in out
    assert "0 passed, 1 failed" in out


def test_selftest_names_missing_privileges_and_leaves_nothing(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    roles = {"reader": Role(indices=((("es-rag-selftest-*",), ("read",)),))}
    cluster = _cluster(users={"app": ("pw", ("reader",))}, roles=roles)
    monkeypatch.setenv("ES_USERNAME", "app")
    monkeypatch.setenv("ES_PASSWORD", "pw")
    rc, report = run(cluster)
    status = _status(report)
    assert rc == 1 and status["privileges"] == "fail" and status["setup"] == "fail"
    detail = {c["name"]: c["detail"] for c in report["checks"]}
    assert "setup missing: cluster manage" in detail["privileges"]
    assert "permission denied" in detail["setup"]
    assert _leftovers(cluster) == []


def test_a_failing_check_still_cleans_up(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(pipe: Any) -> str:
        raise AssertionError("tenant B saw tenant A (simulated)")

    monkeypatch.setattr(selftest, "_isolation", broken)
    cluster = _cluster()
    rc, report = run(cluster)
    assert rc == 1 and _status(report)["tenant and ACL isolation"] == "fail"
    assert _status(report)["cleanup"] == "pass" and _leftovers(cluster) == []


def test_ctrl_c_cleans_up_and_exits_130(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(pipe: Any) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(selftest, "_isolation", interrupted)
    cluster = _cluster()
    with serve(cluster) as url:
        assert main(["selftest", "--es", url]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert _leftovers(cluster) == []


def test_keep_then_cleanup(run: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster()
    rc, report = run(cluster, "--keep")
    assert rc == 0 and _status(report)["cleanup"] == "skip"
    prefix = report["prefix"]
    assert f"{prefix}-chunks" in cluster.indices
    with serve(cluster) as url:
        assert main(["selftest", "--es", url, "--cleanup", prefix]) == 0
        assert main(["selftest", "--es", url, "--cleanup", "es-rag"]) == 2  # never the product's prefix
    assert _leftovers(cluster) == []


def test_cleanup_refuses_a_product_prefix() -> None:
    from es_rag.elasticsearch.backend import ElasticsearchBackend
    from es_rag.errors import EsRagError
    from es_rag.settings import Settings

    backend = ElasticsearchBackend.connect("http://127.0.0.1:9", Settings())
    with pytest.raises(EsRagError, match="refusing to delete anything outside es-rag-selftest-"):
        selftest.cleanup(backend)
    with pytest.raises(EsRagError, match="selftest runs only under"):
        selftest.run_selftest(backend)


def test_selftest_checks_the_configured_inference_endpoint(run: Any) -> None:
    """The server-side embedding path (issue 20): the endpoint must exist and embed a probe into vector_dims (an
    endpoint serving the query encoder's model, so the embedding check passes too)."""
    cluster = _cluster(version="9.5.0", license_type="trial")
    rc, report = run(cluster, "--inference-id", MINILM)
    detail = {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert rc == 0 and detail["inference endpoint"][0] == "pass"
    assert "embeds the probe into" in detail["inference endpoint"][1]
    rc, report = run(_cluster(version="9.5.0", license_type="trial"), "--inference-id", "no-such-endpoint")
    detail = {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert rc == 1 and detail["inference endpoint"][0] == "fail"
    assert "no-such-endpoint" in detail["inference endpoint"][1] and "setup" not in detail  # fatal: nothing created
