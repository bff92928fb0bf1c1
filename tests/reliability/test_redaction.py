"""No password from a URL (or from ``ES_PASSWORD`` / ``ES_API_KEY``) in any output (issue 33, item 5): one test per
channel: CLI errors (refused, 401), ``doctor --json``, ``selftest --json``, ``RagClient``'s ``repr``, exception texts,
the CLI's warnings, and the library's log records."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from es_rag import RagClient
from es_rag.cli import main
from es_rag.elasticsearch.cluster import check_url
from es_rag.errors import ConfigError, EsRagError
from es_rag.redact import redact, redact_url
from tests.support.double.cluster import Role, StrictCluster
from tests.support.double.http import serve

SECRET = "Sup3r-s3cret"


def with_userinfo(url: str, password: str = SECRET) -> str:
    return url.replace("://", f"://elastic:{password}@")


@pytest.fixture
def secured() -> StrictCluster:
    return StrictCluster(users={"elastic": (SECRET, ("superuser",))}, roles={"superuser": Role(cluster=("all",))})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("http://elastic:pw1234@es:9200", "http://elastic:***@es:9200"),
        ("https://u:p%40ss@host:443/prefix", "https://u:***@host:443/prefix"),
        ("http://es:9200", "http://es:9200"),
        ("http://user@es:9200", "http://user@es:9200"),  # no password, nothing to hide
        ("elastic:pw1234@es:9200", "elastic:***@es:9200"),  # no scheme
    ],
)
def test_redact_url_masks_only_the_password(text: str, expected: str) -> None:
    assert redact_url(text) == expected


def test_redact_masks_urls_headers_and_environment_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_API_KEY", "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==")
    text = (
        "at http://a:b-c@h:1 and https://x:y@z:2/p; Authorization: Basic ZWxhc3RpYzpwdw== "
        "key VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw=="
    )
    assert redact(text) == "at http://a:***@h:1 and https://x:***@z:2/p; Authorization: Basic *** key ***"


def test_cli_error_on_a_refused_connection(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["search", "q", "--tenant", "t", "--es", with_userinfo("http://127.0.0.1:9")])
    err = capsys.readouterr().err
    assert code == 3 and "cluster unreachable at http://elastic:***@127.0.0.1:9" in err and SECRET not in err


def test_cli_error_on_401(capsys: pytest.CaptureFixture[str], secured: StrictCluster) -> None:
    with serve(secured) as url:
        code = main(["doctor", "--es", with_userinfo(url, "wrong-pass")])
    err = capsys.readouterr().err
    assert code == 3 and "authentication failed" in err and "wrong-pass" not in err and "elastic:***@" in err


def test_cli_errors_about_the_url_itself(capsys: pytest.CaptureFixture[str]) -> None:
    for url in ("http://elastic:" + SECRET + "@es", "ftp://elastic:" + SECRET + "@es:21", "elastic:" + SECRET + "@es"):
        assert main(["search", "q", "--tenant", "t", "--es", url]) != 0
        err = capsys.readouterr().err
        assert SECRET not in err and "***" in err, err
    with pytest.raises(ConfigError) as info:
        check_url("http://elastic:" + SECRET + "@es")
    assert SECRET not in str(info.value)


def test_doctor_json(
    capsys: pytest.CaptureFixture[str], secured: StrictCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = secured.handle

    def drop_alias_reads(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("/_alias"):  # the connection drops: doctor's error names the URL
            raise ConnectionAbortedError("dropped by the test")
        return handle(method, path, *args, **kwargs)

    monkeypatch.setattr(secured, "handle", drop_alias_reads)
    with serve(secured) as url:
        main(["doctor", "--es", with_userinfo(url), "--json"])
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert "elastic:***@" in out + err


def test_selftest_json(capsys: pytest.CaptureFixture[str], secured: StrictCluster) -> None:
    with serve(secured) as url:
        main(["selftest", "--es", with_userinfo(url), "--json"])
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert json.loads(out)["url"].startswith("http://elastic:***@127.0.0.1:")


def test_ragclient_repr_and_its_errors(secured: StrictCluster) -> None:
    with serve(secured) as url:
        rag = RagClient.from_url(with_userinfo(url))
        try:
            assert SECRET not in repr(rag) and "elastic:***@" in repr(rag)
        finally:
            rag.close()
    rag = RagClient.from_url(with_userinfo("http://127.0.0.1:9"))
    with pytest.raises(EsRagError) as info:
        rag.search("q", tenant="t")
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    rag.close()


def test_warnings_and_log_records(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ES_PASSWORD", SECRET)
    from es_rag.cli import _show_warnings

    _show_warnings()
    from es_rag.pipeline import log  # the library's loggers carry the redacting filter

    with caplog.at_level(logging.WARNING):
        log.warning("retrying http://elastic:%s@es:9200 with %s", SECRET, SECRET)
    assert SECRET not in capsys.readouterr().err
    assert caplog.records and all(SECRET not in r.getMessage() for r in caplog.records)  # an app's handler too
    assert "http://elastic:***@es:9200 with ***" in caplog.records[-1].getMessage()
