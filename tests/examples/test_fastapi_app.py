"""``examples/fastapi_app``: the tenant comes from the bearer token, never the body; tenant A's documents never
reach tenant B; searches return cited chunks; one client lives from startup to shutdown. Run with FastAPI's
TestClient (the lifespan runs inside ``with TestClient(app)``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from es_rag import RagClient
from es_rag.errors import ConfigError
from examples.fastapi_app.app import Principal, create_app, load_tokens, token_digest
from tests.support.apps import ACME_SUPPORT, GLOBEX_PUBLIC, GLOBEX_WORD, tiny_settings
from tests.support.context import excerpts

ALICE, BOB, CAROL = "token-alice", "token-bob", "token-carol"
TOKENS = {
    token_digest(ALICE): Principal("alice", "acme", ("support",), ingest=True),
    token_digest(BOB): Principal("bob", "globex", (), ingest=True),
    token_digest(CAROL): Principal("carol", "acme", ("support",), ingest=False),
}


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def made() -> list[RagClient]:
    return []


@pytest.fixture
def api(tiny_bi_encoder: Path, made: list[RagClient]):  # type: ignore[no-untyped-def]
    def factory() -> RagClient:
        made.append(RagClient.open(None, tiny_settings(tiny_bi_encoder)))
        return made[-1]

    with TestClient(create_app(client_factory=factory, tokens=lambda: TOKENS)) as client:
        yield client


def test_one_client_is_made_at_startup_and_closed_at_shutdown(tiny_bi_encoder: Path, made: list[RagClient]) -> None:
    def factory() -> RagClient:
        made.append(RagClient.open(None, tiny_settings(tiny_bi_encoder)))
        return made[-1]

    app = create_app(client_factory=factory, tokens=lambda: TOKENS)
    assert made == []  # nothing is built with the app
    with TestClient(app) as client:
        assert client.get("/health").json() == {"status": "ok"}
        client.post("/search", json={"query": "password"}, headers=auth(ALICE))
        assert len(made) == 1 and not made[0].closed
    assert len(made) == 1 and made[0].closed


def test_tenant_a_documents_never_reach_tenant_b_and_a_gets_cited_chunks(api: TestClient) -> None:
    ingested = api.post("/ingest", json={"documents": ACME_SUPPORT, "acl": ["support"]}, headers=auth(ALICE))
    assert ingested.status_code == 200, ingested.text
    assert ingested.json()["sources"] == 2 and ingested.json()["failed"] == []

    as_b = api.post("/search", json={"query": "reset the password login page"}, headers=auth(BOB))
    assert as_b.status_code == 200 and as_b.json()["hits"] == [] and as_b.json()["context"] == ""

    as_a = api.post("/search", json={"query": "reset the password login page"}, headers=auth(ALICE)).json()
    hits = as_a["hits"]
    assert hits and {h["tenant_id"] for h in hits} == {"acme"}
    assert {h["source_id"] for h in hits} <= set(ACME_SUPPORT)
    assert any("Reset the password from the login page" in h["text"] for h in hits)
    for h in hits:  # each hit's citation id labels its text in the packed context
        shown = {e.citation_id: e for e in excerpts(as_a["context"])}[h["citation"]]
        assert f" source={h['source_id']}" in shown.header and shown.text == h["text"]
        assert h["text"] in as_a["context"] and h["scores"]["final"] is not None

    # B's own document is B's alone
    assert api.post("/ingest", json={"documents": GLOBEX_PUBLIC}, headers=auth(BOB)).json()["sources"] == 1
    as_a_again = api.post("/search", json={"query": "Globex password phone hotline"}, headers=auth(ALICE)).json()
    assert as_a_again["hits"] and not any(GLOBEX_WORD in h["text"] for h in as_a_again["hits"])
    as_b_again = api.post("/search", json={"query": "Globex password phone hotline"}, headers=auth(BOB)).json()
    assert {h["tenant_id"] for h in as_b_again["hits"]} == {"globex"}


def test_missing_or_invalid_auth_is_401(api: TestClient) -> None:
    for headers in ({}, auth("not-a-token"), {"Authorization": "Basic YWxpY2U6cHc="}, {"Authorization": "Bearer"}):
        for path, body in (("/search", {"query": "password"}), ("/ingest", {"documents": {"a.md": "# A"}})):
            r = api.post(path, json=body, headers=headers)
            assert r.status_code == 401, (path, headers, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
    assert api.get("/health").status_code == 200  # health needs no token


def test_the_body_cannot_name_a_tenant_or_groups(api: TestClient) -> None:
    api.post("/ingest", json={"documents": GLOBEX_PUBLIC}, headers=auth(BOB))
    for extra in ({"tenant": "globex"}, {"tenant_id": "globex"}, {"acl": ["public"]}):
        r = api.post("/search", json={"query": "Globex password", **extra}, headers=auth(ALICE))
        assert r.status_code == 422 and "Extra inputs are not permitted" in r.text, extra
    r = api.post("/ingest", json={"documents": {"x.md": "# X"}, "tenant": "globex"}, headers=auth(ALICE))
    assert r.status_code == 422


def test_ingest_needs_the_right_and_the_groups_it_grants(api: TestClient) -> None:
    r = api.post("/ingest", json={"documents": ACME_SUPPORT}, headers=auth(CAROL))
    assert r.status_code == 403 and r.json()["detail"] == "carol may not ingest"
    r = api.post("/ingest", json={"documents": ACME_SUPPORT, "acl": ["legal"]}, headers=auth(ALICE))
    assert r.status_code == 403 and r.json()["detail"] == "acl: alice is not in group(s) ['legal']"
    r = api.post("/ingest", json={"documents": ACME_SUPPORT, "format": "pdf"}, headers=auth(ALICE))
    assert r.status_code == 400 and "format: invalid value 'pdf'" in r.json()["detail"]
    r = api.post("/search", json={"query": "password", "metadata": {"acl": "legal"}}, headers=auth(ALICE))
    assert r.status_code == 400 and "'acl' is set by tenant_id/groups" in r.json()["detail"]
    assert api.post("/search", json={"query": "   "}, headers=auth(ALICE)).status_code == 422


def test_the_token_table_file_holds_digests_and_each_error_names_the_entry_and_field(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app" / "tokens.example.json"
    table = load_tokens(example)
    assert table[token_digest("demo-acme-support")] == Principal("alice", "acme", ("support",), ingest=True)
    assert table[token_digest("demo-globex")] == Principal("bob", "globex", (), ingest=False)
    assert "demo-acme-support" not in example.read_text()  # the file holds no token

    path = tmp_path / "t.json"
    good = {"name": "a", "sha256": token_digest("x"), "tenant": "acme", "groups": ["g"]}
    cases = {
        "field 'tenant': missing or empty": {**good, "tenant": ""},
        "field 'sha256': expected the token's SHA-256": {**good, "sha256": "x"},
        "field 'groups': expected a list of group names": {**good, "groups": "g"},
        "field 'name': missing or empty": {**good, "name": None},
        "field 'ingest': expected true or false": {**good, "ingest": "yes"},
    }
    for message, entry in cases.items():
        path.write_text(json.dumps({"tokens": [good | {"sha256": token_digest("y")}, entry]}))
        with pytest.raises(ConfigError, match=rf"tokens\[1\]: {message}"):
            load_tokens(path)
    path.write_text(json.dumps({"tokens": [good, good]}))
    with pytest.raises(ConfigError, match=r"tokens\[1\]: field 'sha256': the same token is listed twice"):
        load_tokens(path)
