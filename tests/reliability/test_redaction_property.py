"""No password in any output, whatever characters it holds (issue 43, item 6).

Passwords are drawn from the whole printable ASCII range (``/``, ``@``, ``:``, ``?``, ``#``, ``%``, quotes and spaces
included), some with percent-encodings in them. Each one goes, inside a URL, through every command that takes
``--es`` (refused connection), ``doctor --json`` with ``ES_URL``, the URL checks that refuse a scheme or a port,
``RagClient``'s ``repr`` and its search error, the library's log records and :func:`es_rag.redact.redact` over the
forms a message quotes it in. Neither the password as typed nor its percent-decoded form may appear.

Before the fix a password holding ``/`` was printed in full: ``http://elastic:S3cret/PW@127.0.0.1:9`` read as host
``elastic``, port ``S3cret``.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag import RagClient
from es_rag.cli import main
from es_rag.elasticsearch.cluster import check_url
from es_rag.errors import ConfigError, EsRagError
from es_rag.redact import get_logger, redact, redact_url

PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))
REFUSED = "http://127.0.0.1:9"  # nothing listens on the discard port: every command fails to connect


def _distinct_enough(password: str) -> bool:
    # "        " or "00000000" would match text that has nothing to do with the secret (JSON indentation, ids)
    return len(set(password)) >= 4 and len(password.strip()) >= 6


_pieces = st.one_of(
    st.text(alphabet=PRINTABLE, min_size=1, max_size=6),
    st.sampled_from([f"%{b:02X}" for b in (0x2F, 0x40, 0x3A, 0x25, 0x23, 0x3F, 0x20, 0x22)]),
)
PASSWORDS = st.lists(_pieces, min_size=2, max_size=8).map("".join).filter(_distinct_enough)


def with_password(url: str, password: str) -> str:
    return url.replace("://", f"://elastic:{password}@", 1)


def forms(password: str) -> set[str]:
    """The secret as typed and percent-decoded: neither may be shown."""
    decoded = urllib.parse.unquote(password)
    return {p for p in (password, decoded) if _distinct_enough(p)}


def assert_clean(text: str, password: str, where: str) -> None:
    for secret in forms(password):
        assert secret not in text, f"{where}: {secret!r} shown in {text[:400]!r}"


COMMANDS: dict[str, list[str]] = {
    "ingest": ["ingest", "{docs}", "--tenant", "t"],
    "search": ["search", "q", "--tenant", "t"],
    "explain": ["explain", "q", "--tenant", "t"],
    "setup": ["setup"],
    "selftest": ["selftest", "--json"],
    "doctor": ["doctor", "--json"],
    "sources": ["sources", "--tenant", "t", "--json"],
    "delete-source": ["delete-source", "s1", "--tenant", "t", "--json"],
    "reindex": ["reindex", "--status", "--json"],
    "eval": ["eval", "--golden", "{golden}", "--tenant", "t", "--json"],
    "calibrate": ["calibrate", "--golden", "{golden}", "--tenant", "t", "--dry-run", "--json"],
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("redaction")
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("# A\n\nSome text about the alpha.\n", encoding="utf-8")
    golden = root / "golden.jsonl"
    golden.write_text(json.dumps({"question": "alpha?", "gold": ["a.md"]}) + "\n", encoding="utf-8")
    return {"docs": str(root / "docs"), "golden": str(golden)}


def argv(command: str, inputs: dict[str, str], url: str) -> list[str]:
    return [part.format(**inputs) for part in COMMANDS[command]] + ["--es", url]


def test_every_command_that_takes_es_is_covered() -> None:
    from es_rag.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    takes_es = {name for name, p in sub.choices.items() if any("--es" in a.option_strings for a in p._actions)}
    assert takes_es == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_reaches_the_connection(
    command: str, inputs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands' argv get past argument checks and fail on the refused connection (exit 3), so the property
    below exercises their connection error path, not a usage error."""
    code = main(argv(command, inputs, with_password(REFUSED, "S3cret/PW@x")))
    out, err = capsys.readouterr()
    assert code in (1, 3), out + err  # selftest reports a failed check (1), the rest an unreachable cluster (3)
    assert "cluster unreachable at http://elastic:***@127.0.0.1:9" in out + err
    assert_clean(out + err, "S3cret/PW@x", command)


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(password=PASSWORDS)
def test_no_password_in_the_library_outputs(password: str, caplog: pytest.LogCaptureFixture) -> None:
    """1,000 passwords through the URL checks, RagClient's repr and search error, a log record and free text."""
    url = with_password(REFUSED, password)
    # the URL checks: a wrong scheme, no port, a port that is not one, a port out of range
    for bad in (
        with_password("ftp://127.0.0.1:21", password),
        with_password("http://127.0.0.1", password),
        with_password("http://127.0.0.1:x9", password),
        with_password("http://127.0.0.1:99999", password),
    ):
        with pytest.raises(ConfigError) as info:
            check_url(bad)
        assert_clean(str(info.value), password, f"check_url({bad!r})")
    rag = RagClient.from_url(url)
    try:
        assert_clean(repr(rag), password, "repr(RagClient)")
        with pytest.raises(EsRagError) as error:
            rag.search("q", tenant="t")
        assert_clean(str(error.value) + repr(error.value), password, "RagClient.search")
    finally:
        rag.close()
    with caplog.at_level(logging.WARNING):
        get_logger("es_rag.test").warning("retrying %s", url)
    assert_clean(caplog.records[-1].getMessage(), password, "log record")
    caplog.clear()
    for text in (f"at {url} now", repr(url), json.dumps({"url": url}), f"{redact_url(url)} and {url}"):
        assert_clean(redact(text), password, "redact")


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(password=PASSWORDS, command=st.sampled_from(sorted(COMMANDS)))
def test_no_password_in_any_command_output(
    password: str,
    command: str,
    inputs: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every command that takes --es (each drawn about 90 times), and doctor --json reading ES_URL."""
    url = with_password(REFUSED, password)
    capsys.readouterr()
    main(argv(command, inputs, url))
    monkeypatch.setenv("ES_URL", url)
    main(["doctor", "--json"])
    monkeypatch.delenv("ES_URL")
    out, err = capsys.readouterr()
    assert_clean(out + err, password, command)


@pytest.mark.parametrize(
    "url, expected",
    [
        ("http://elastic:S3cret/PW@127.0.0.1:9", "http://elastic:***@127.0.0.1:9"),
        ("http://elastic:a@b@host:9200", "http://elastic:***@host:9200"),
        ("https://u:p#q?r@host:443/prefix", "https://u:***@host:443/prefix"),
        ("http://elastic:sp ace@host:9200", "http://elastic:***@host:9200"),
    ],
)
def test_the_user_info_ends_at_the_last_at_sign(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert check_url(url) == url  # accepted: the client gets user and password apart from the URL


def test_a_password_with_a_slash_authenticates(tmp_path: Path) -> None:
    """Not only hidden: the client sends it (percent-decoded) as basic auth, apart from the URL."""
    from tests.support.double.cluster import Role, StrictCluster
    from tests.support.double.http import serve

    for password in ("S3cret/P@ss%word", "Grüße:#?/1"):  # non-ASCII too: the client's basic_auth refused it
        cluster = StrictCluster(
            users={"elastic": (password, ("superuser",))}, roles={"superuser": Role(cluster=("all",))}
        )
        with serve(cluster) as base:
            for given in (password, urllib.parse.quote(password, safe="")):
                rag = RagClient.from_url(with_password(base, given))
                try:
                    assert rag._backend.client.info()["version"]["number"]
                finally:
                    rag.close()


def test_port_messages() -> None:
    with pytest.raises(ConfigError, match="the port is out of range"):
        check_url("http://127.0.0.1:99999")
    with pytest.raises(ConfigError, match="the port is not a number"):
        check_url("http://127.0.0.1:nine")
