"""The CLI against real and doubled clusters: one-line errors, the cluster checked before any model is loaded,
connection options and their environment variables, and doctor's privilege report."""

from __future__ import annotations

from typing import Any

import pytest

from es_rag.cli import build_parser, main
from es_rag.cli.options import connection_kwargs
from es_rag.settings import Settings
from tests.support.double.client import strict_backend
from tests.support.double.cluster import Role, StrictCluster
from tests.support.double.http import serve


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    ("argv", "rc", "needle"),
    [
        (["doctor", "--es", "localhost:9200"], 2, "needs a scheme: use http://localhost:9200"),
        (["doctor", "--es", "http://127.0.0.1:9"], 3, "cluster unreachable at http://127.0.0.1:9"),
        (["setup", "--es", "http://localhost:9200", "--ca-certs", "/x.crt"], 2, "need an https:// URL"),
    ],
)
def test_connection_problems_are_one_line_errors(
    argv: list[str], rc: int, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = _run(argv, capsys)
    assert code == rc
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("command", [["search", "q", "--tenant", "t"], ["ingest", "README.md", "--tenant", "t"]])
def test_the_cluster_is_checked_before_a_model_is_loaded(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreachable cluster is reported at once, not after loading an embedding model (which here does not even
    exist on the hub, unreachable here: loading it would fail differently)."""
    argv = [*command, "--es", "http://127.0.0.1:9", "--embedding-model", "nobody/no-such-model"]
    code, _out, err = _run(argv, capsys)
    assert code == 3 and "cluster unreachable" in err and "model" not in err, err


def test_401_names_the_credentials_to_set(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = StrictCluster(users={"elastic": ("right", ("superuser",))}, roles={"superuser": Role(cluster=("all",))})
    monkeypatch.setenv("ES_USERNAME", "elastic")
    monkeypatch.setenv("ES_PASSWORD", "wrong")
    with serve(cluster) as url:
        code, _out, err = _run(["doctor", "--es", url], capsys)
    assert code == 3 and "authentication failed" in err and "ES_API_KEY" in err and len(err.strip().splitlines()) == 1


def test_connection_options_fall_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_CA_CERTS", "/etc/es/http_ca.crt")
    monkeypatch.setenv("ES_CLOUD_ID", "dep:abc")
    args = build_parser().parse_args(["search", "q", "--tenant", "t"])
    got = connection_kwargs(args)
    assert got["ca_certs"] == "/etc/es/http_ca.crt" and got["cloud_id"] == "dep:abc" and got["verify_certs"] is True
    args = build_parser().parse_args(["search", "q", "--tenant", "t", "--ca-certs", "/mine.crt", "--insecure"])
    got = connection_kwargs(args)
    assert got["ca_certs"] == "/mine.crt" and got["verify_certs"] is False


def test_timeouts_reach_the_settings() -> None:
    from es_rag.cli.options import settings_from_args

    args = build_parser().parse_args(
        ["ingest", "doc.md", "--tenant", "t", "--request-timeout", "5", "--bulk-timeout", "90"]
    )
    s = settings_from_args(args)
    assert (s.connection.request_timeout, s.connection.bulk_timeout) == (5.0, 90.0)
    # search sends no bulk: it has no --bulk-timeout
    assert main(["search", "q", "--tenant", "t", "--bulk-timeout", "90"]) == 2


def _roles() -> dict[str, Role]:
    names = ("es-rag-*",)
    return {
        "admin": Role(cluster=("manage",), indices=((("*",), ("all",)),)),
        "searcher": Role(indices=((names, ("read",)),)),
        "ingester": Role(indices=((names, ("read", "write", "maintenance")),)),
    }


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("admin", {"search": "ok", "ingest": "ok", "setup": "ok"}),
        ("searcher", {"search": "ok", "ingest": "missing: index write", "setup": "missing: cluster manage"}),
        ("ingester", {"search": "ok", "ingest": "ok", "setup": "missing: cluster manage"}),
    ],
)
def test_doctor_names_the_privileges_each_use_lacks(user: str, expected: dict[str, str]) -> None:
    cluster = StrictCluster(users={u: ("pw", (u,)) for u in _roles()}, roles=_roles())
    backend, _, _ = strict_backend(Settings(), cluster, basic_auth=(user, "pw"))
    report: dict[str, Any] = backend.privileges()
    assert report["user"] == user
    for use, start in expected.items():
        assert report[use].startswith(start), (use, report[use])
    assert report["monitor"].startswith("held" if user == "admin" else "missing (optional")


def test_doctor_with_security_off_says_so() -> None:
    backend, _, _ = strict_backend(Settings(), StrictCluster())
    assert backend.privileges()["check"].startswith("unknown (security disabled")


def test_setup_stops_before_sending_anything_when_another_template_overlaps() -> None:
    cluster = StrictCluster()
    cluster.handle("PUT", "_index_template/app", "", {"index_patterns": ["es-rag-chunks-*"], "priority": 500}, {})
    backend, node, _ = strict_backend(Settings(), cluster)
    from es_rag.errors import ConfigError

    with pytest.raises(ConfigError, match=r"index template 'app' .* overlaps 'es-rag-chunks'"):
        backend.setup()
    assert not node.calls("PUT")


@pytest.mark.parametrize("prefix", ["logs", "logs-rag", "metrics-x", "ai-index-kb", "traces-app"])
def test_prefixes_that_would_take_built_in_indices_are_refused(prefix: str) -> None:
    """StackTemplateRegistry & co. install logs-*-*, metrics-*-*, ... (priority 100-140; ai-index-idx-* at 500):
    es_rag's priority-500 templates would take their indices over."""
    from es_rag.errors import ConfigError

    with pytest.raises(ConfigError, match="built-in templates own"):
        Settings(index_prefix=prefix)
    Settings(index_prefix=f"rag-{prefix}")  # fine


@pytest.mark.parametrize("use", ["search", "ingest", "setup"])
def test_each_documented_role_is_enough_for_its_use(use: str) -> None:
    """The least privileges of docs/cluster.md (ROLE_PRIVILEGES), run against the double's privilege model."""
    import random as rnd

    from es_rag.elasticsearch.probe import ROLE_PRIVILEGES
    from es_rag.filters import SearchFilter
    from es_rag.pipeline import RagPipeline
    from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer, random_corpus

    s = Settings(vector_dims=DIMS, rerank_model=None, candidate_k=10, num_candidates=20, rerank_k=10, context_k=3)
    need = ROLE_PRIVILEGES[use]
    names = (f"{s.index.prefix}-*",)
    roles = {
        "admin": Role(cluster=("all",), indices=((("*",), ("all",)),)),
        use: Role(cluster=tuple(need["cluster"]), indices=((names, tuple(need["index"])),)),
    }
    cluster = StrictCluster(users={"admin": ("pw", ("admin",)), "u": ("pw", (use,))}, roles=roles)
    corpus = random_corpus(rnd.Random(2), n_children=12)
    if use != "setup":
        admin, _, _ = strict_backend(s, cluster, setup=True, basic_auth=("admin", "pw"))
    backend, _, _ = strict_backend(s, cluster, basic_auth=("u", "pw"))
    if use == "setup":
        assert all(r["acknowledged"] in (True, "exists") for r in backend.setup())
    elif use == "ingest":
        from es_rag.chunking import StructureChunker
        from es_rag.ingest import SourceDoc, ingest_documents

        chunker = StructureChunker(WordTokenizer(), max_tokens=30, overlap=0)
        for version in ("1", "2"):
            doc = SourceDoc("g.md", f"# A\n\nalpha {version}", "acme", ("public",), source_version=version)
            report = ingest_documents([doc], chunker=chunker, embedder=RandomEmbedder(), backend=backend)
            assert report.failed == [] and report.warnings == [], report
    else:
        assert admin.index(corpus.children, corpus.parents).failed == []
        cluster.refresh_all()
        pipe = RagPipeline(backend, embedder=RandomEmbedder(), settings=s, tokenizer=WordTokenizer())
        assert pipe.search("sync error", SearchFilter("acme", ("support",))).candidates
    assert backend.privileges()[use] == "ok"
