"""Spec conformance: type-check Elasticsearch request bodies with Elastic's official API types.

Every request body ``es_rag`` can send is described as a :class:`SpecCase` (HTTP method, path, body).
:func:`to_typed` maps the HTTP request onto the TypeScript request type of the official Node.js client
(``@elastic/elasticsearch`` 9.5.x, ``lib/api/types.d.ts``, generated from the Elasticsearch
specification), :func:`render_ts` emits one TypeScript module with one typed constant per case, and
:func:`run_tsc` compiles it with the pinned ``tsc --strict --noEmit`` from ``spec/node_modules`` and maps
every compiler error back to the case it falls in.

The TypeScript toolchain is pinned in ``spec/package.json`` / ``spec/package-lock.json``; install it with
``npm ci --prefix spec`` (Node >= 20; the client declares ``engines.node >= 22`` but only its ``.d.ts``
files are used here, so npm's EBADENGINE warning on Node 20 is harmless). This module is stdlib-only.

How HTTP requests map onto the 9.x request types (checked in the installed ``types.d.ts``):

* The 9.x request interfaces are *flat*: path parameters, query-string parameters and body fields are
  all top-level properties of one interface (e.g. ``SearchRequest`` has ``index``, ``size``, ``query``,
  ``retriever``, ...). Path parameters are therefore merged into the body object (``{index, ...body}``).
  A body key that collides with a path parameter raises :class:`ValueError`.
* Bodies that are not an object go into a named property: ``_msearch`` -> ``searches``
  (``MsearchRequestItem[] = (MsearchMultisearchHeader | SearchSearchRequestBody)[]``), ``_bulk`` ->
  ``operations``, ``{index}/_doc`` -> ``document``, ``{index}/_settings`` -> ``settings``.
* Path parameter names: templates use ``name`` (``ClusterPutComponentTemplateRequest``,
  ``IndicesPutIndexTemplateRequest``), pipelines and stored scripts use ``id`` (``IngestPutPipelineRequest``,
  ``IngestSimulateRequest``, ``PutScriptRequest``; the latter also ``context``), index APIs use ``index``.
* Query strings (``?refresh=true``) are stripped and not type-checked: URL values are untyped strings.
* Limitation: because of the flattening, a *query-string parameter name* placed in a body (e.g.
  ``"refresh"`` or ``"q"`` in a ``_delete_by_query`` body) is accepted by the type checker although
  Elasticsearch rejects it. Misspelt keys, wrong nesting and wrong value types are caught.
* Fields typed ``any`` in the spec are not checked below that point: ``_meta`` (``Metadata =
  Record<string, any>``), the ``set`` processor's ``value``, ``IngestDocument._source``, ``params`` of
  search templates, and document bodies (``IndexRequest.document`` is ``unknown``). Index ``settings``
  (``IndicesIndexSettings``) carry an index signature, so a misspelt setting name is *not* caught.
* TypeScript checks excess properties of a non-discriminated union against the union as a whole, so a
  key that is valid in a *sibling* member passes: ``{"standard": {...}, "weight": 2}`` as an RRF entry
  (``weight`` belongs to ``RRFRetrieverComponent``, not to a plain container) and a header key such as
  ``"preference"`` inside an ``_msearch`` body item are accepted. Misspelt keys are always caught.
* ``ScriptSource = string | SearchSearchRequestBody``: a mustache template given as an *object* is
  type-checked as a search body, so ``"size": "{{k}}"`` fails there (use the string form of ``source``
  for placeholders in non-string positions).

Verified by running tsc: a misspelt key anywhere in a query, retriever, knn, processor, mapping property
or ``index_options`` literal is reported (TS2353 "Object literal may only specify known properties"), as
are a wrong value type, a missing required key (``k`` of a ``knn`` retriever) and two retriever kinds in
one ``RetrieverContainer``. One tsc run (TypeScript 7, native) takes about 0.6 s regardless of the number
of cases in the tested range, so compile all cases in one :func:`run_tsc` call.

Findings about retrievers in ``@elastic/elasticsearch`` 9.5.1 (``lib/api/types.d.ts``):

* ``RetrieverContainer = ExactlyOne<RetrieverContainerExclusiveProps>`` with the keys ``standard``,
  ``knn``, ``rrf``, ``text_similarity_reranker``, ``rule``, ``rescorer``, ``linear``, ``pinned``,
  ``diversify``. ``ExactlyOne`` makes every other key ``?: never``, so a container with two retriever
  kinds (or none) is a type error.
* ``RRFRetriever.retrievers: RRFRetrieverEntry[]`` (required) where
  ``RRFRetrieverEntry = RetrieverContainer | RRFRetrieverComponent`` and
  ``RRFRetrieverComponent = {retriever: RetrieverContainer; weight?: float}``: items may be plain
  retriever containers *or* weighted ``{retriever, weight}`` objects (weighted RRF); both forms may be
  mixed in one list. Other keys: ``rank_constant?``, ``rank_window_size?``, ``query?``, ``fields?``.
* ``LinearRetriever`` exists: ``retrievers?: InnerRetriever[]`` with
  ``InnerRetriever = {retriever: RetrieverContainer; weight?: float; normalizer?: ScoreNormalizer}``,
  ``rank_window_size?``, ``query?``, ``fields?``, ``normalizer?``;
  ``ScoreNormalizer = 'none' | 'minmax' | 'l2_norm'``.
* All retrievers extend ``RetrieverBase = {filter?: QueryDslQueryContainer | QueryDslQueryContainer[];
  min_score?: float; _name?: string}``: the key is ``filter`` (one query or a list) for both the
  ``standard`` and the ``knn`` retriever.
* ``StandardRetriever``: ``query?``, ``search_after?``, ``terminate_after?``, ``sort?``, ``collapse?``
  plus the ``RetrieverBase`` keys.
* ``KnnRetriever``: ``field: string`` (required), ``query_vector?``, ``query_vector_builder?``,
  ``k: integer`` (**required**, unlike the top-level ``knn`` search option ``KnnSearch`` where ``k`` is
  optional), ``num_candidates?``, ``visit_percentage?``, ``similarity?``, ``rescore_vector?`` plus the
  ``RetrieverBase`` keys (``filter``, ``min_score``, ``_name``). The top-level ``KnnSearch`` (search
  option and ``_msearch`` bodies) also has ``filter``, ``boost``, ``inner_hits``, ``_name``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

__all__ = [
    "DEFAULT_SPEC_DIR",
    "TYPES_MODULE",
    "SpecCase",
    "SpecToolchainError",
    "TscResult",
    "misspell_one_key",
    "render_ts",
    "run_tsc",
    "to_typed",
]

#: The repository's ``spec/`` directory (``es_rag/../spec``).
DEFAULT_SPEC_DIR: Path = Path(__file__).resolve().parents[2] / "spec"

#: Module specifier of the official request/response types.
TYPES_MODULE = "@elastic/elasticsearch/lib/api/types"

_PINNED_PACKAGES = ("@elastic/elasticsearch", "typescript")
_BODYLESS_METHODS = frozenset({"GET", "HEAD", "DELETE"})
_HARNESS = "<harness>"


class SpecToolchainError(RuntimeError):
    """The pinned TypeScript toolchain in ``spec/`` is missing, stale or could not be run."""


@dataclass(frozen=True)
class SpecCase:
    """One HTTP request to Elasticsearch whose body is checked against the official types.

    Attributes:
        name: Unique, human-readable case name; compiler errors are reported under it.
        method: HTTP method (case-insensitive), e.g. ``"PUT"``.
        path: Request path, with or without a leading ``/``; a query string is ignored.
        body: JSON-able dict; for ``_msearch`` / ``_bulk`` a list of dicts (alternating header/body for
            ``_msearch``); ``None`` for a request without body.
    """

    name: str
    method: str
    path: str
    body: Any = None


@dataclass(frozen=True)
class TscResult:
    """Outcome of one ``tsc`` run over a list of cases.

    Attributes:
        ok: True when tsc exited 0 and reported no error.
        errors: One string per compiler error, each prefixed with the case it falls in
            (``"<case name> [METHOD path]: ..."``) or with ``<harness>`` when it lies outside any case.
        errors_by_case: The same errors grouped by case name (``<harness>`` for the rest).
        output: Raw stdout + stderr of tsc.
        returncode: tsc's exit status.
        source: The generated TypeScript module that was compiled.
        duration_s: Wall-clock seconds tsc took.
        command: The command line that was run.
        skipped: Names of the cases that were not compiled because they carry no body to check
            (:func:`to_typed` returned ``None``).
    """

    ok: bool
    errors: list[str]
    errors_by_case: dict[str, list[str]]
    output: str
    returncode: int
    source: str
    duration_s: float
    command: list[str]
    skipped: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Routing: HTTP request -> (TypeScript request type, object literal)
# --------------------------------------------------------------------------------------------------

_Builder = Callable[[dict[str, str], Any], dict[str, Any]]


def _merge(params: dict[str, str], body: Any, route: str) -> dict[str, Any]:
    """Merge path parameters into an object body the way the flat 9.x request types expect."""
    if body is None:
        return dict(params)
    if not isinstance(body, Mapping):
        raise ValueError(f"{route}: body must be a JSON object (dict), got {type(body).__name__}")
    clash = sorted(set(params) & set(body))
    if clash:
        raise ValueError(
            f"{route}: body key(s) {clash} collide with path parameter(s) of the same name; the typed "
            "request carries path parameters and body fields in one object"
        )
    return {**params, **body}


def _into(prop: str, *, want_list: bool) -> _Builder:
    """Builder that puts a non-object body (a list, a document) into property ``prop``."""

    def build(params: dict[str, str], body: Any) -> dict[str, Any]:
        if want_list and body is not None and not isinstance(body, list):
            raise ValueError(f"body for property {prop!r} must be a list, got {type(body).__name__}")
        out: dict[str, Any] = dict(params)
        if body is not None:
            out[prop] = body
        return out

    return build


@dataclass(frozen=True)
class _Route:
    methods: frozenset[str]
    pattern: re.Pattern[str]
    type_name: str
    build: _Builder | None = None  # None: _merge(params, body)


def _route(methods: str, pattern: str, type_name: str, build: _Builder | None = None) -> _Route:
    return _Route(frozenset(methods.split("|")), re.compile(f"^{pattern}$"), type_name, build)


_SEG = r"[^/]+"
_IDX = r"(?!_)[^/]+"  # an index name / expression: one segment not starting with "_"

# Order matters only for readability: the patterns are anchored and mutually exclusive.
_ROUTES: tuple[_Route, ...] = (
    _route("PUT|POST", rf"_component_template/(?P<name>{_SEG})", "ClusterPutComponentTemplateRequest"),
    _route("PUT|POST", rf"_index_template/(?P<name>{_SEG})", "IndicesPutIndexTemplateRequest"),
    _route("PUT", rf"_ingest/pipeline/(?P<id>(?!_simulate$){_SEG})", "IngestPutPipelineRequest"),
    _route("GET|POST", rf"_ingest/pipeline/(?:(?P<id>{_SEG})/)?_simulate", "IngestSimulateRequest"),
    _route("PUT|POST", rf"_scripts/(?P<id>{_SEG})(?:/(?P<context>{_SEG}))?", "PutScriptRequest"),
    _route("GET|POST", rf"(?:(?P<index>{_IDX})/)?_search/template", "SearchTemplateRequest"),
    _route("GET|POST", rf"(?:(?P<index>{_IDX})/)?_search", "SearchRequest"),
    _route("GET|POST", rf"(?:(?P<index>{_IDX})/)?_msearch", "MsearchRequest", _into("searches", want_list=True)),
    _route("GET|POST", rf"(?:(?P<index>{_IDX})/)?_count", "CountRequest"),
    _route("POST", rf"(?P<index>{_IDX})/_delete_by_query", "DeleteByQueryRequest"),
    _route("POST", rf"(?P<index>{_IDX})/_update_by_query", "UpdateByQueryRequest"),
    _route("POST", r"_reindex", "ReindexRequest"),
    _route("GET|POST", r"_security/user/_has_privileges", "SecurityHasPrivilegesRequest"),
    _route("POST", r"_aliases", "IndicesUpdateAliasesRequest"),
    _route("PUT|POST", rf"(?P<index>{_IDX})/_mapping", "IndicesPutMappingRequest"),
    _route(
        "PUT",
        rf"(?:(?P<index>{_IDX})/)?_settings",
        "IndicesPutSettingsRequest",
        _into("settings", want_list=False),
    ),
    _route(
        "PUT|POST",
        rf"(?P<index>{_IDX})/_doc(?:/(?P<id>{_SEG}))?",
        "IndexRequest",
        _into("document", want_list=False),
    ),
    _route("PUT|POST", rf"(?:(?P<index>{_IDX})/)?_bulk", "BulkRequest", _into("operations", want_list=True)),
    _route("POST", rf"(?:(?P<index>{_IDX})/)?_refresh", "IndicesRefreshRequest"),
    _route("PUT", rf"(?P<index>{_IDX})", "IndicesCreateRequest"),
)


def _normalise_path(path: str) -> str:
    """Strip the query string and surrounding slashes from a request path."""
    return path.split("?", 1)[0].split("#", 1)[0].strip("/")


def to_typed(case: SpecCase) -> tuple[str, dict[str, Any]] | None:
    """Map an HTTP request onto its official TypeScript request type and object literal.

    Args:
        case: The request. Its path may carry a leading ``/`` and a query string (ignored).

    Returns:
        ``(type_name, obj)`` where ``type_name`` is the name of the request interface in
        ``@elastic/elasticsearch/lib/api/types`` (e.g. ``"SearchRequest"``) and ``obj`` is the object to
        assign to it: path parameters merged with the body (``{"index": ..., **body}``), or the body
        placed in the property the type expects (``searches`` for ``_msearch``). ``None`` for a
        ``GET``/``HEAD``/``DELETE`` request without body (e.g. ``GET /``, ``GET _license``): there is no
        body to check, and the caller must skip it explicitly.

    Raises:
        ValueError: The route (method + path) is not known, the body has the wrong shape for it, or a
            body key collides with a path parameter. Unknown routes are never skipped silently.
    """
    method = case.method.upper()
    if method in _BODYLESS_METHODS and case.body is None:
        return None
    path = _normalise_path(case.path)
    route_desc = f"{method} /{path}"
    for route in _ROUTES:
        m = route.pattern.match(path)
        if m is None or method not in route.methods:
            continue
        params = {k: unquote(v) for k, v in m.groupdict().items() if v is not None}
        if route.build is None:
            return route.type_name, _merge(params, case.body, route_desc)
        try:
            return route.type_name, route.build(params, case.body)
        except ValueError as exc:
            raise ValueError(f"{route_desc}: {exc}") from None
    known = sorted({r.pattern.pattern for r in _ROUTES if r.pattern.match(path)})
    hint = f" (the path matches a known route, but not for method {method})" if known else ""
    raise ValueError(
        f"case {case.name!r}: no spec type known for route {route_desc}{hint}; "
        "add it to tests.support.spec_check._ROUTES"
    )


# --------------------------------------------------------------------------------------------------
# TypeScript rendering
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Span:
    case: SpecCase
    first_line: int  # 1-based, inclusive (the comment line)
    last_line: int  # 1-based, inclusive


def _identifier(name: str, taken: set[str]) -> str:
    """A TypeScript identifier derived from ``name``, unique within ``taken``."""
    base = "case_" + (re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "unnamed")
    ident, n = base, 2
    while ident in taken:
        ident, n = f"{base}_{n}", n + 1
    taken.add(ident)
    return ident


def _comment(text: str) -> str:
    """Make ``text`` safe for a single-line ``//`` comment."""
    return " ".join(text.split())


def _render(cases: Iterable[SpecCase]) -> tuple[str, list[_Span], list[SpecCase]]:
    """Render cases; return the source, each compiled case's line span, and the skipped cases."""
    lines = [
        "// Generated by tests.support.spec_check -- do not edit; compiled with tsc --strict --noEmit.",
        f"import type * as T from '{TYPES_MODULE}'",
        "",
    ]
    spans: list[_Span] = []
    skipped: list[SpecCase] = []
    names: set[str] = set()
    idents: set[str] = set()
    for case in cases:
        if case.name in names:
            raise ValueError(f"duplicate case name {case.name!r}: errors could not be attributed")
        names.add(case.name)
        typed = to_typed(case)
        if typed is None:
            skipped.append(case)
            continue
        type_name, obj = typed
        try:
            literal = json.dumps(obj, indent=2, ensure_ascii=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"case {case.name!r}: body is not JSON-serialisable: {exc}") from exc
        first = len(lines) + 1
        lines.append(f"// case: {_comment(case.name)} | {case.method.upper()} {_comment(case.path)}")
        lines.extend(f"export const {_identifier(case.name, idents)}: T.{type_name} = {literal};".split("\n"))
        if type_name == "BulkRequest":
            # BulkRequest.operations collapses to unknown[] (TDocument = unknown): check the action lines
            # on their own so a misspelt action or metadata key still fails.
            actions = json.dumps(_bulk_action_lines(case), indent=2, ensure_ascii=True)
            ident = _identifier(case.name + " actions", idents)
            lines.extend(f"export const {ident}: T.BulkOperationContainer[] = {actions};".split("\n"))
        spans.append(_Span(case, first, len(lines)))
        lines.append("")
    return "\n".join(lines) + "\n", spans, skipped


def _bulk_action_lines(case: SpecCase) -> list[Any]:
    """The action/metadata lines of a ``_bulk`` body: each ``index``/``create``/``update`` line is
    followed by a source line, ``delete`` is not."""
    if not isinstance(case.body, list):
        raise ValueError(f"case {case.name!r}: a _bulk body must be a list of NDJSON objects")
    actions: list[Any] = []
    i = 0
    while i < len(case.body):
        line = case.body[i]
        actions.append(line)
        op = next(iter(line), None) if isinstance(line, dict) and len(line) == 1 else None
        i += 1 if op == "delete" else 2
    return actions


def render_ts(cases: Iterable[SpecCase]) -> str:
    """Render one TypeScript module that assigns every case's request to its official type.

    Each case becomes a ``// case: <name> | <METHOD> <path>`` comment line followed by
    ``export const case_<name>: T.<Type> = <object literal>;``. The literal is emitted directly (as
    JSON), so TypeScript's excess-property checks apply to nested object literals too.

    Args:
        cases: The requests to render. Cases for which :func:`to_typed` returns ``None`` (bodyless
            ``GET``) are left out.

    Returns:
        The TypeScript source text.

    Raises:
        ValueError: A route is unknown, a body is malformed or not JSON-serialisable, or two cases share
            a name.
    """
    return _render(cases)[0]


# --------------------------------------------------------------------------------------------------
# Running tsc
# --------------------------------------------------------------------------------------------------

_DIAG = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+),(?P<col>\d+)\): (?P<sev>error|warning) (?P<code>TS\d+): (?P<msg>.*)$"
)


def _check_toolchain(spec_dir: Path) -> Path:
    """Return the pinned tsc executable; fail clearly if ``spec/node_modules`` is missing or stale."""
    fix = f"run `npm ci --prefix {spec_dir}` (from the repository root: `npm ci --prefix spec`)"
    pkg_json = spec_dir / "package.json"
    if not pkg_json.is_file():
        raise SpecToolchainError(f"{pkg_json} not found: spec_dir does not point to the spec/ project")
    node_modules = spec_dir / "node_modules"
    tsc = node_modules / ".bin" / ("tsc.cmd" if os.name == "nt" else "tsc")
    if not node_modules.is_dir() or not tsc.exists():
        raise SpecToolchainError(f"the TypeScript toolchain is not installed in {node_modules}; {fix}")
    pins = json.loads(pkg_json.read_text(encoding="utf-8")).get("devDependencies", {})
    for package in _PINNED_PACKAGES:
        installed_json = node_modules / package / "package.json"
        if not installed_json.is_file():
            raise SpecToolchainError(f"{package} is not installed in {node_modules}; {fix}")
        installed = json.loads(installed_json.read_text(encoding="utf-8")).get("version")
        pinned = pins.get(package)
        if pinned is not None and installed != pinned:
            raise SpecToolchainError(
                f"{package} {installed} is installed in {node_modules} but {pinned} is pinned; {fix}"
            )
    return tsc


def _attribute(output: str, spans: Sequence[_Span], source_lines: Sequence[str]) -> list[tuple[str, str]]:
    """Parse tsc diagnostics; return ``(case name, message)`` pairs (continuation lines folded in)."""
    found: list[tuple[str, str]] = []
    for raw in output.splitlines():
        if not raw.strip():
            continue
        m = _DIAG.match(raw)
        if m is None:
            if found and raw[:1].isspace():  # elaboration of the previous diagnostic
                owner, msg = found[-1]
                found[-1] = (owner, f"{msg}\n{raw.rstrip()}")
            elif raw.lstrip().startswith(("error", "warning")) or not found:
                found.append((_HARNESS, raw.strip()))
            continue
        line = int(m["line"])
        span = next((s for s in spans if s.first_line <= line <= s.last_line), None)
        text = source_lines[line - 1].strip() if 0 < line <= len(source_lines) else ""
        where = f"line {line} col {m['col']}"
        if span is None:
            found.append((_HARNESS, f"{m['file']}({line},{m['col']}): {m['code']}: {m['msg']}"))
        else:
            c = span.case
            found.append(
                (
                    c.name,
                    f"{c.name} [{c.method.upper()} {c.path}]: {m['code']} at {where} `{text}`: {m['msg']}",
                )
            )
    return found


def run_tsc(
    cases: Iterable[SpecCase],
    *,
    spec_dir: str | os.PathLike[str] | None = None,
    timeout_s: float = 300.0,
) -> TscResult:
    """Type-check all cases in one ``tsc --strict --noEmit`` run and attribute errors to cases.

    The module from :func:`render_ts` is written as ``requests.ts`` into a fresh temporary directory
    under ``<spec_dir>/generated/`` (so that module resolution finds ``spec/node_modules`` and parallel
    runs do not collide), together with a ``tsconfig.json`` extending ``<spec_dir>/tsconfig.json``; the
    directory is removed afterwards (:attr:`TscResult.source` keeps the text).

    Args:
        cases: The requests to check. Bodyless ``GET`` requests are not compiled; their names are listed
            in :attr:`TscResult.skipped`.
        spec_dir: The ``spec/`` project holding ``package.json``, ``tsconfig.json`` and ``node_modules``;
            defaults to :data:`DEFAULT_SPEC_DIR` (``es_rag/../spec``).
        timeout_s: Seconds after which tsc is killed.

    Returns:
        A :class:`TscResult`; ``ok`` is False when tsc reports any error.

    Raises:
        SpecToolchainError: ``spec/node_modules`` is missing or does not hold the pinned versions (the
            message says to run ``npm ci --prefix spec``), or tsc could not be started or timed out.
        ValueError: A route is unknown or a body is malformed (see :func:`to_typed`).
    """
    spec = Path(spec_dir).resolve() if spec_dir is not None else DEFAULT_SPEC_DIR
    tsc = _check_toolchain(spec)
    source, spans, skipped = _render(cases)
    source_lines = source.splitlines()
    generated = spec / "generated"
    generated.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="run-", dir=generated) as tmp:
        work = Path(tmp)
        (work / "requests.ts").write_text(source, encoding="utf-8")
        base = os.path.relpath(spec / "tsconfig.json", work).replace(os.sep, "/")
        config = {
            "extends": base,
            "compilerOptions": {"noEmit": True},
            "files": ["requests.ts"],
            "include": [],
        }
        (work / "tsconfig.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        command = [str(tsc), "--strict", "--noEmit", "--pretty", "false", "-p", str(work / "tsconfig.json")]
        started = time.monotonic()
        try:
            proc = subprocess.run(command, cwd=spec, capture_output=True, text=True, timeout=timeout_s, check=False)
        except FileNotFoundError as exc:
            raise SpecToolchainError(f"could not run {tsc} (is Node.js on PATH?): {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise SpecToolchainError(f"tsc did not finish within {timeout_s:g}s: {' '.join(command)}") from exc
        duration = time.monotonic() - started
    output = (proc.stdout or "") + (proc.stderr or "")
    pairs = _attribute(output, spans, source_lines)
    if proc.returncode != 0 and not pairs:
        pairs = [(_HARNESS, f"tsc exited {proc.returncode} without a diagnostic: {output.strip()!r}")]
    by_case: dict[str, list[str]] = {}
    for owner, msg in pairs:
        by_case.setdefault(owner, []).append(msg)
    return TscResult(
        ok=proc.returncode == 0 and not pairs,
        errors=[msg for _, msg in pairs],
        errors_by_case=by_case,
        output=output,
        returncode=proc.returncode,
        source=source,
        duration_s=duration,
        command=command,
        skipped=[c.name for c in skipped],
    )


# --------------------------------------------------------------------------------------------------
# Mutation helper for negative tests
# --------------------------------------------------------------------------------------------------

_VOWELS = "aeiou"


def _default_misspelling(key: str) -> str:
    """Drop the last vowel that is not the first character (``rank_constant`` -> ``rank_constnt``).

    Keys without such a vowel get an ``x`` appended (``k`` -> ``kx``).
    """
    for i in range(len(key) - 1, 0, -1):
        if key[i].lower() in _VOWELS:
            return key[:i] + key[i + 1 :]
    return key + "x"


def misspell_one_key(body: Any, path_of_keys: Sequence[str | int], new_key: str | None = None) -> Any:
    """Return a deep copy of ``body`` with exactly one dict key renamed (misspelt).

    Used by negative tests: the misspelt copy of a valid body must fail :func:`run_tsc`. The key keeps
    its position in its dict, so the rest of the rendered literal is unchanged.

    Args:
        body: A JSON-like structure (dicts and lists); it is not modified.
        path_of_keys: How to reach the key: every element but the last navigates (a ``str`` into a dict,
            an ``int`` into a list); the last element is the dict key to rename. For example
            ``["retriever", "rrf", "retrievers", 1, "knn", "num_candidates"]``.
        new_key: The misspelt name; by default the last vowel after the first character is dropped
            (``num_candidates`` -> ``num_candidats``, ``similarity`` -> ``similarty``), or ``x`` is
            appended when there is none.

    Returns:
        The mutated deep copy.

    Raises:
        ValueError: The path is empty or does not lead to an existing dict key, or the new name equals
            the old one or another key of the same dict.
    """
    if not path_of_keys:
        raise ValueError("path_of_keys must name at least the key to misspell")
    out = copy.deepcopy(body)
    node: Any = out
    *steps, last = path_of_keys
    for depth, step in enumerate(steps):
        where = list(path_of_keys[: depth + 1])
        if isinstance(step, int) and not isinstance(step, bool) and isinstance(node, list):
            if not -len(node) <= step < len(node):
                raise ValueError(f"index {step} out of range at {where} (list of {len(node)})")
            node = node[step]
        elif isinstance(step, str) and isinstance(node, dict):
            if step not in node:
                raise ValueError(f"key {step!r} not found at {where}; keys: {sorted(node)}")
            node = node[step]
        else:
            raise ValueError(f"cannot step {step!r} into a {type(node).__name__} at {where}")
    if not isinstance(node, dict) or not isinstance(last, str) or last not in node:
        keys = sorted(node) if isinstance(node, dict) else type(node).__name__
        raise ValueError(f"no dict key {last!r} at {list(path_of_keys)}; found: {keys}")
    wrong = _default_misspelling(last) if new_key is None else new_key
    if wrong == last or wrong in node:
        raise ValueError(f"misspelling {wrong!r} of {last!r} is not a new key of that object")
    renamed = {(wrong if k == last else k): v for k, v in node.items()}
    node.clear()
    node.update(renamed)
    return out
