"""A small FastAPI service over one :class:`es_rag.RagClient`: ``POST /search``, ``POST /ingest``, ``GET /health``.

The pattern it shows:

* **One client per process**, created at startup (the lifespan) and closed at shutdown; the handlers are plain
  ``def`` functions, which FastAPI runs in its thread pool, and the client is thread-safe.
* **The tenant and the ACL groups come from the request's auth, never from its body.** A bearer token is looked up
  in a token table (a JSON file of SHA-256 digests of the tokens, so the file holds no secret); the entry names the
  caller's tenant, groups and whether it may ingest. A request body has no tenant field: one that sends one is
  refused (422). No token or an unknown one: 401.

Run it (see docs/apps.md)::

    ES_RAG_INDEX_DIR=./idx ES_RAG_TOKENS=examples/fastapi_app/tokens.example.json \\
        uvicorn examples.fastapi_app.app:app

``ES_URL`` (with ``ES_API_KEY``, or ``ES_USERNAME``/``ES_PASSWORD``, and ``ES_CA_CERTS``) puts it on a cluster
instead of the embedded index folder ``ES_RAG_INDEX_DIR``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from es_rag import RagClient
from es_rag.errors import ClusterError, ConfigError, InputError
from es_rag.integrations import hit_metadata

PUBLIC = "public"


# ---------------------------------------------------------------------------------------------- auth
@dataclass(frozen=True)
class Principal:
    """Who a token belongs to: the only source of a request's tenant and groups.

    Attributes:
        name: The caller, for logs.
        tenant: The caller's tenant.
        groups: The caller's ACL groups (``public`` is always added by the search).
        ingest: Whether the caller may ingest (into its own tenant, with ACL groups it holds).
    """

    name: str
    tenant: str
    groups: tuple[str, ...]
    ingest: bool = False


def token_digest(token: str) -> str:
    """The SHA-256 hex digest of ``token``: what the token table stores.

    Args:
        token: The bearer token.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_tokens(path: str | Path) -> dict[str, Principal]:
    """The token table: ``{"tokens": [{"name", "sha256", "tenant", "groups", "ingest"}, ...]}``, keyed by digest.

    Args:
        path: The JSON file.

    Raises:
        ConfigError: A missing or malformed file; an entry without a name, a 64-hex ``sha256`` or a tenant, with
            groups that are not a list of strings, or a digest given twice (each error names the entry and field).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"token table {path}: {exc}") from exc
    entries = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f'token table {path}: expected {{"tokens": [...]}}')
    table: dict[str, Principal] = {}
    for i, entry in enumerate(entries):
        where = f"token table {path}: tokens[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected an object")
        digest, tenant, groups = entry.get("sha256"), entry.get("tenant"), entry.get("groups", [])
        if not isinstance(entry.get("name"), str) or not entry["name"].strip():
            raise ConfigError(f"{where}: field 'name': missing or empty")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ConfigError(f"{where}: field 'sha256': expected the token's SHA-256 as 64 lowercase hex digits")
        if not isinstance(tenant, str) or not tenant.strip():
            raise ConfigError(f"{where}: field 'tenant': missing or empty")
        if not isinstance(groups, list) or not all(isinstance(g, str) and g.strip() for g in groups):
            raise ConfigError(f"{where}: field 'groups': expected a list of group names")
        if not isinstance(entry.get("ingest", False), bool):
            raise ConfigError(f"{where}: field 'ingest': expected true or false")
        if digest in table:
            raise ConfigError(f"{where}: field 'sha256': the same token is listed twice")
        table[digest] = Principal(entry["name"], tenant, tuple(groups), entry.get("ingest", False))
    return table


_bearer = HTTPBearer(auto_error=False)


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """The caller of ``request``, from its ``Authorization: Bearer <token>`` header.

    Args:
        request: The request.
        credentials: The parsed header; None when it is missing or not a bearer token.

    Raises:
        HTTPException: 401 for a missing or unknown token.
    """
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token", headers=challenge)
    found: Principal | None = request.app.state.tokens.get(token_digest(credentials.credentials))
    if found is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid token", headers=challenge)
    return found


Caller = Annotated[Principal, Depends(principal)]


def rag_client(request: Request) -> RagClient:
    """The process's one client, made by the lifespan.

    Args:
        request: The request.
    """
    client: RagClient = request.app.state.rag
    return client


# module level: ``from __future__ import annotations`` makes the handlers' annotations strings, resolved here
Rag = Annotated[RagClient, Depends(rag_client)]


# ---------------------------------------------------------------------------------------------- configuration
def client_from_env() -> RagClient:
    """The client the environment asks for: ``ES_URL`` (credentials as ``es-rag --es``), else the embedded index
    folder ``ES_RAG_INDEX_DIR``.

    Raises:
        ConfigError: Neither is set.
    """
    url = os.environ.get("ES_URL")
    if url:
        return RagClient.from_url(url, ca_certs=os.environ.get("ES_CA_CERTS"))
    index_dir = os.environ.get("ES_RAG_INDEX_DIR")
    if not index_dir:
        raise ConfigError("set ES_URL (an Elasticsearch cluster) or ES_RAG_INDEX_DIR (an embedded index folder)")
    return RagClient.open(index_dir)


def tokens_from_env() -> dict[str, Principal]:
    """The token table in the file ``ES_RAG_TOKENS``.

    Raises:
        ConfigError: ``ES_RAG_TOKENS`` is not set, or the file is malformed.
    """
    path = os.environ.get("ES_RAG_TOKENS")
    if not path:
        raise ConfigError("ES_RAG_TOKENS: set it to the token table's JSON file (see docs/apps.md)")
    return load_tokens(path)


# ---------------------------------------------------------------------------------------------- API
class SearchRequest(BaseModel):
    """``POST /search``: no tenant or groups here, they come from the token."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, pattern=r"\S")
    metadata: dict[str, str | list[str]] | None = None


class IngestRequest(BaseModel):
    """``POST /ingest``: documents ``{source_id: text}`` into the caller's tenant; ``acl`` = groups allowed to read
    them, among the caller's own groups and ``public``."""

    model_config = ConfigDict(extra="forbid")

    documents: dict[str, str] = Field(min_length=1)
    format: str = "markdown"
    acl: list[str] = Field(default_factory=lambda: [PUBLIC])


def _http_error(exc: ConfigError | InputError | ClusterError) -> HTTPException:
    """400 for what the caller sent (a bad metadata filter, format or document), 502 when the cluster failed."""
    if isinstance(exc, ClusterError):
        return HTTPException(status.HTTP_502_BAD_GATEWAY, f"search backend: {exc}")
    return HTTPException(status.HTTP_400_BAD_REQUEST, str(exc))


def create_app(
    *,
    client_factory: Callable[[], RagClient] = client_from_env,
    tokens: Callable[[], Mapping[str, Principal]] = tokens_from_env,
) -> FastAPI:
    """The service. Nothing is built here: the client and the token table are made at startup and the client is
    closed at shutdown.

    Args:
        client_factory: Makes the one client of the process (default: from the environment).
        tokens: Loads the token table, digest -> principal (default: the file ``ES_RAG_TOKENS``).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.tokens = dict(tokens())
        app.state.rag = client_factory()
        try:
            yield
        finally:
            app.state.rag.close()

    app = FastAPI(title="es_rag example", lifespan=lifespan)

    @app.get("/health")
    def health(client: Rag) -> dict[str, str]:
        if client.closed:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "shutting down")
        return {"status": "ok"}

    @app.post("/search")
    def search(body: SearchRequest, caller: Caller, client: Rag) -> dict[str, Any]:
        try:
            result = client.search(body.query, tenant=caller.tenant, acl=caller.groups, metadata=body.metadata)
        except (ConfigError, InputError, ClusterError) as exc:
            raise _http_error(exc) from exc
        labels = {c.chunk_id: c.citation_id for c in result.context.citations}
        return {
            "status": result.status,
            "context": result.context.text,
            "hits": [
                {"text": h.display_text, **hit_metadata(h, citation=labels.get(h.chunk_id), status=result.status)}
                for h in result.hits
            ],
        }

    @app.post("/ingest")
    def ingest(body: IngestRequest, caller: Caller, client: Rag) -> dict[str, Any]:
        if not caller.ingest:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"{caller.name} may not ingest")
        foreign = [g for g in body.acl if g != PUBLIC and g not in caller.groups]
        if foreign:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"acl: {caller.name} is not in group(s) {foreign}")
        try:
            report = client.ingest_texts(body.documents, tenant=caller.tenant, acl=body.acl, format=body.format)
        except (ConfigError, InputError, ClusterError) as exc:
            raise _http_error(exc) from exc
        return {"sources": report.sources, "chunks": report.chunks, "failed": report.failed}

    return app


app = create_app()
"""What ``uvicorn examples.fastapi_app.app:app`` serves (configured from the environment at startup)."""
