"""The REST routes Elasticsearch registers for the paths es_rag uses, with their methods
(``rest-api-spec/src/main/resources/rest-api-spec/api/*.json``), so the double answers a known path with a wrong
method as ``RestController.handleUnsupportedHttpMethod`` does: HTTP 405 and a plain string error
``Incorrect HTTP method for uri [/x] and method [M], allowed: [A, B]``. A path no route matches stays a 400
``no handler found for uri [/x] and method [M]`` (``RestController.handleBadRequest``).

``{x}`` matches one path segment (``PathTrie`` wildcards); every other segment matches literally. As
``RestController.tryAllHandlers`` does, the allowed methods are those of every route that matches the path (an
explicit one and a wildcard one alike): ``PUT /_aliases`` is not a 405, it reaches create-index.
"""

from __future__ import annotations

ROUTES: dict[str, frozenset[str]] = {
    "/": frozenset({"GET", "HEAD"}),
    "/{index}": frozenset({"GET", "HEAD", "PUT", "DELETE"}),
    "/{index}/_doc": frozenset({"POST"}),
    "/{index}/_doc/{id}": frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"}),
    "/{index}/_create/{id}": frozenset({"PUT", "POST"}),
    "/_bulk": frozenset({"PUT", "POST"}),
    "/{index}/_bulk": frozenset({"PUT", "POST"}),
    "/_search": frozenset({"GET", "POST"}),
    "/{index}/_search": frozenset({"GET", "POST"}),
    "/_msearch": frozenset({"GET", "POST"}),
    "/{index}/_msearch": frozenset({"GET", "POST"}),
    "/_count": frozenset({"GET", "POST"}),
    "/{index}/_count": frozenset({"GET", "POST"}),
    "/{index}/_delete_by_query": frozenset({"POST"}),
    "/_search/template": frozenset({"GET", "POST"}),
    "/{index}/_search/template": frozenset({"GET", "POST"}),
    "/_render/template": frozenset({"GET", "POST"}),
    "/_render/template/{id}": frozenset({"GET", "POST"}),
    "/_scripts/{id}": frozenset({"GET", "PUT", "POST", "DELETE"}),
    "/_tasks/{task_id}": frozenset({"GET"}),
    "/_license": frozenset({"GET", "PUT", "POST", "DELETE"}),
    "/{index}/_mapping": frozenset({"GET", "PUT", "POST"}),
    "/{index}/_settings": frozenset({"GET", "PUT"}),
    "/_refresh": frozenset({"GET", "POST"}),
    "/{index}/_refresh": frozenset({"GET", "POST"}),
    "/_aliases": frozenset({"GET", "POST"}),
    "/_alias/{name}": frozenset({"GET", "HEAD"}),
    "/{index}/_alias": frozenset({"GET", "HEAD"}),
    "/{index}/_alias/{name}": frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"}),
    "/_index_template/{name}": frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"}),
    "/_component_template/{name}": frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"}),
    "/_ingest/pipeline/{id}": frozenset({"GET", "PUT", "DELETE"}),
    "/_ingest/pipeline/_simulate": frozenset({"GET", "POST"}),
    "/_ingest/pipeline/{id}/_simulate": frozenset({"GET", "POST"}),
    "/_inference/{inference_id}": frozenset({"GET", "PUT", "POST", "DELETE"}),
    "/_inference/{task_type}/{inference_id}": frozenset({"GET", "PUT", "POST", "DELETE"}),
    "/_nodes/{metric}": frozenset({"GET"}),
    "/_security/_authenticate": frozenset({"GET"}),
    "/_security/user/_has_privileges": frozenset({"GET", "POST"}),
}


def _matches(template: str, path: str) -> bool:
    want = [p for p in template.strip("/").split("/") if p]
    got = [p for p in path.strip("/").split("/") if p]
    if len(want) != len(got):
        return False
    return all(w == g or (w.startswith("{") and w.endswith("}")) for w, g in zip(want, got, strict=True))


def allowed_methods(path: str) -> frozenset[str]:
    """The methods of every route that matches ``path`` (empty: no route does)."""
    out: set[str] = set()
    for template, methods in ROUTES.items():
        if _matches(template, path):
            out |= methods
    return frozenset(out)


def method_not_allowed(method: str, path: str, *, before_routing: bool = False) -> tuple[int, dict[str, object]] | None:
    """``(405, body)`` when a route matches ``path`` but not ``method``; None otherwise.

    Args:
        method: The request's method.
        path: The request's path (no query string).
        before_routing: Checked before the double routes the request (as Elasticsearch does, so ``GET
            ix/_delete_by_query`` is a 405 whether ``ix`` exists or not). Then a path that only the bare
            ``/{index}`` route matches is left to the double: the table lists the paths es_rag uses, not every
            one-segment API Elasticsearch has (``POST /_reindex``).
    """
    if before_routing and not any(t != "/{index}" and _matches(t, path) for t in ROUTES):
        return None
    allowed = allowed_methods(path)
    if not allowed or method in allowed:
        return None
    uri = "/" + path.strip("/")
    shown = ", ".join(sorted(allowed))
    return 405, {
        "error": f"Incorrect HTTP method for uri [{uri}] and method [{method}], allowed: [{shown}]",
        "status": 405,
    }
