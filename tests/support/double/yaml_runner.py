"""Replay Elasticsearch's REST YAML tests against the strict double.

Written for es_rag from the documented YAML test DSL (``rest-api-spec/src/yamlRestTest/.../README`` of
elastic/elasticsearch); no code of Elasticsearch's runner is copied. A test file is a stream of YAML documents:
an optional ``setup`` and ``teardown`` section and one document per test case, each a list of steps:

* ``skip`` / ``requires`` (first steps of ``setup`` or of a case): ``version`` ranges, ``cluster_features``,
  ``test_runner_features`` (``features`` in the legacy ``skip`` form), ``capabilities``, ``awaits_fix``;
* ``do``: one API call (name -> method and path from the rest-api-spec, the other params -> the query string,
  ``body``), with ``catch`` (``bad_request`` 400, ``unauthorized`` 401, ``forbidden`` 403, ``missing`` 404,
  ``request_timeout`` 408, ``conflict`` 409, ``unavailable`` 503, ``request`` any other 4xx/5xx, ``param`` a
  client-side parameter error, ``/regex/`` found in the error), ``ignore`` (statuses that are no error),
  ``headers``, ``warnings`` / ``allowed_warnings`` (not checked: the double emits none);
* assertions on the last response: ``match`` (``/regex/`` with whitespace-insensitive patterns, numbers
  compared by value), ``length``, ``is_true`` / ``is_false`` (null, ``""``, ``false`` and ``0`` are false),
  ``exists`` / ``not_exists``, ``gt`` / ``gte`` / ``lt`` / ``lte``, ``close_to``, ``contains``, ``set``.

Paths are dotted (``hits.hits.0._source.foo``, ``\\.`` escapes a dot); ``$name`` and ``${name}`` read the
stash (``set``), ``$body`` the whole response.

Every case runs on a fresh :class:`~tests.support.double.cluster.StrictCluster` (setup, case, teardown) at the newest
double version its ``requires`` / ``skip`` sections allow; the rank-rrf licence tests run on a ``basic``
licence, the others on ``trial``. Outcomes: ``PASS``; ``FAIL`` with the failing step; ``SKIP`` with a reason:
a requirement the double's versions do not meet, a runner feature it lacks, an API it does not map, or a
double limit (the double answered ``strict_double_unsupported``: something it does not implement).
"""

from __future__ import annotations

import json
import math
import re
import traceback
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.double.cluster import StrictCluster
from tests.support.double.errors import java_str

VERSIONS = ("9.5.0", "9.2.0", "9.1.0", "9.0.0", "8.18.0")
"""Versions the double emulates, newest first: a case runs on the first one its requirements allow."""

CLUSTER_FEATURES: dict[str, tuple[int, ...]] = {
    "rrf_retriever.weighted_support": (9, 2),
    "linear_retriever_supported": (8, 18),
    "linear_retriever.l2_norm": (9, 1),
}
"""Named cluster features -> the first version that has them (``gte_vX.Y.Z`` features are read directly)."""
FEATURE_BACKPORTS: dict[str, tuple[int, int]] = {
    # L2ScoreNormalizer.LINEAR_RETRIEVER_L2_NORM: backported to 8.19 by PR #128972 (original #128504, 9.1)
    "linear_retriever.l2_norm": (8, 19),
}
"""Named cluster features a 8.x minor also has (backports): ``(major, minor)``."""

RUNNER_FEATURES = frozenset(
    {
        "close_to",
        "contains",
        "allowed_warnings",
        "allowed_warnings_regex",
        "headers",
        "stash_in_key",
        "stash_in_path",
        "stash_path_replace",
        "embedded_stash_key",
    }
)
"""Test-runner features this runner implements. Not ``warnings`` / ``warnings_regex`` (expected deprecation
warnings: the double emits none), ``capabilities``, ``node_selector``, ``transform_and_set``, ``arbitrary_key``."""

CATCHES: dict[str, Any] = {
    "bad_request": lambda s: s == 400,
    "unauthorized": lambda s: s == 401,
    "forbidden": lambda s: s == 403,
    "missing": lambda s: s == 404,
    "request_timeout": lambda s: s == 408,
    "conflict": lambda s: s == 409,
    "unavailable": lambda s: s == 503,
    "request": lambda s: s >= 400 and s not in (400, 401, 403, 404, 408, 409),
}

# API name -> [(method, path template)], the forms of rest-api-spec/src/main/resources/rest-api-spec/api/<name>.json
# the double routes; the runner takes the first form whose parts are all given.
APIS: dict[str, list[tuple[str, str]]] = {
    "info": [("GET", "/")],
    "index": [("PUT", "/{index}/_doc/{id}"), ("POST", "/{index}/_doc")],
    "create": [("PUT", "/{index}/_create/{id}")],
    "get": [("GET", "/{index}/_doc/{id}")],
    "exists": [("HEAD", "/{index}/_doc/{id}")],
    "delete": [("DELETE", "/{index}/_doc/{id}")],
    "bulk": [("POST", "/{index}/_bulk"), ("POST", "/_bulk")],
    "search": [("POST", "/{index}/_search"), ("POST", "/_search")],
    "msearch": [("POST", "/{index}/_msearch"), ("POST", "/_msearch")],
    "count": [("POST", "/{index}/_count"), ("POST", "/_count")],
    "delete_by_query": [("POST", "/{index}/_delete_by_query")],
    "search_template": [("POST", "/{index}/_search/template"), ("POST", "/_search/template")],
    "render_search_template": [("POST", "/_render/template/{id}"), ("POST", "/_render/template")],
    "put_script": [("PUT", "/_scripts/{id}")],
    "get_script": [("GET", "/_scripts/{id}")],
    "delete_script": [("DELETE", "/_scripts/{id}")],
    "tasks.get": [("GET", "/_tasks/{task_id}")],
    "license.get": [("GET", "/_license")],
    "indices.create": [("PUT", "/{index}")],
    "indices.delete": [("DELETE", "/{index}")],
    "indices.get": [("GET", "/{index}")],
    "indices.exists": [("HEAD", "/{index}")],
    "indices.get_mapping": [("GET", "/{index}/_mapping")],
    "indices.get_settings": [("GET", "/{index}/_settings")],
    "indices.refresh": [("POST", "/{index}/_refresh"), ("POST", "/_refresh")],
    "indices.update_aliases": [("POST", "/_aliases")],
    "indices.exists_alias": [("HEAD", "/_alias/{name}")],
    "indices.get_alias": [("GET", "/{index}/_alias/{name}"), ("GET", "/_alias/{name}"), ("GET", "/{index}/_alias")],
    "indices.put_index_template": [("PUT", "/_index_template/{name}")],
    "indices.get_index_template": [("GET", "/_index_template/{name}")],
    "indices.delete_index_template": [("DELETE", "/_index_template/{name}")],
    "cluster.put_component_template": [("PUT", "/_component_template/{name}")],
    "cluster.get_component_template": [("GET", "/_component_template/{name}")],
    "cluster.delete_component_template": [("DELETE", "/_component_template/{name}")],
    "ingest.put_pipeline": [("PUT", "/_ingest/pipeline/{id}")],
    "ingest.get_pipeline": [("GET", "/_ingest/pipeline/{id}")],
    "ingest.delete_pipeline": [("DELETE", "/_ingest/pipeline/{id}")],
    "ingest.simulate": [("POST", "/_ingest/pipeline/{id}/_simulate"), ("POST", "/_ingest/pipeline/_simulate")],
    "inference.get": [("GET", "/_inference/{inference_id}")],
    "security.authenticate": [("GET", "/_security/_authenticate")],
    "security.has_privileges": [("POST", "/_security/user/_has_privileges")],
}
NDJSON_APIS = {"bulk", "msearch"}

CHANGES: dict[str, tuple[str, str]] = {
    "U1": (
        "unverified: dense_vector early_termination",
        "This file version expects index_options.early_termination: false in the default int8_hnsw options; the "
        "Elasticsearch version that began serializing it (cluster feature "
        "search.vectors.mappers.expose_hnsw_early_termination) is not established, so mapping.py does not emit it.",
    ),
}
"""Why a known FAILing case fails: ``U*`` an expectation the double cannot verify yet. (The ``C*`` changes the first
replay found in ``cluster.py`` -- search without an index, URL parameters, shards and max_terms_count, multi-name
template deletes, ``create=true``, the ignore-list message, delete-by-query ``max_docs``/``scroll_size`` and the
conflict metadata -- are made; aliases in index and template bodies and data stream lifecycles are refused as double
limits; ``POST _aliases`` and alias reads are modelled for blue-green swaps.)"""

KNOWN_FAILURES: dict[tuple[str, str], tuple[str, ...]] = {
    ("search.vectors/80_dense_vector_indexed_by_default.yml", "Default index options for dense_vector"): ("U1",),
}
"""(``<folder>/<file>``, case) -> the :data:`CHANGES` it needs. Every other FAIL is a new deviation."""


def known_reason(ids: Iterable[str]) -> str:
    """``needs C1 (title); C2 (title)``."""
    return "needs " + "; ".join(f"{i} ({CHANGES[i][0]})" for i in ids)


class Skip(Exception):
    """The case cannot run on the double (reason in the message)."""


class StaticSkip(Skip):
    """A skip no version of the double avoids (a runner feature, an unknown cluster feature)."""


class Failure(Exception):
    """A step failed (message: the step and what differs)."""


@dataclass
class CaseResult:
    """One test case's outcome."""

    file: str
    name: str
    outcome: str
    reason: str = ""
    version: str | None = None
    detail: str = ""


def failure_site(detail: str) -> str:
    """The step of a failure without the compared values (``test step 4 (match) [hits.total]``)."""
    m = re.match(r"(\w+ step \d+ \((\w+)\))(?:: (\[[^\]]*\])|: (?:([\w.]+)[ :]))?", detail)
    if m is None:
        return detail.split(":", 1)[0]
    return " ".join(x for x in (m.group(1), m.group(3), m.group(4)) if x)


@dataclass
class FileResult:
    """The outcomes of one YAML file."""

    path: str
    cases: list[CaseResult] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for c in self.cases if c.outcome == outcome)


# -- loading -------------------------------------------------------------------------------------------------
class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """YAML as the Java runner reads it: timestamps stay strings (JSON has no date type)."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_suite(text: str) -> tuple[list[Any], list[Any], list[tuple[str, list[Any]]]]:
    """Split a YAML test file into (setup steps, teardown steps, [(case name, steps)])."""
    setup: list[Any] = []
    teardown: list[Any] = []
    cases: list[tuple[str, list[Any]]] = []
    for doc in yaml.load_all(text, Loader=_Loader):
        if not doc:
            continue
        if not isinstance(doc, Mapping):
            raise ValueError(f"a test document must be a mapping, got {type(doc).__name__}")
        for name, steps in doc.items():
            if name == "setup":
                setup = list(steps or [])
            elif name == "teardown":
                teardown = list(steps or [])
            else:
                cases.append((str(name), list(steps or [])))
    return setup, teardown, cases


# -- requirements ----------------------------------------------------------------------------------------------
def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def _in_ranges(version: tuple[int, ...], spec: str) -> bool:
    spec = str(spec).strip()
    if spec == "all":
        return True
    for part in spec.split(","):
        lo, sep, hi = part.partition("-")
        if not sep:
            if _version(part) == version[: len(_version(part))]:
                return True
            continue
        low = _version(lo) if lo.strip() else (0,)
        high = _version(hi) if hi.strip() else (999,)
        if low <= version <= high:
            return True
    return False


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _has_feature(version: tuple[int, ...], name: str) -> bool:
    m = re.fullmatch(r"gte_v(\d+\.\d+\.\d+)", name)
    if m:
        return version >= _version(m.group(1))
    if name not in CLUSTER_FEATURES:
        raise StaticSkip(f"unknown cluster feature {name}")
    return version >= CLUSTER_FEATURES[name] or tuple(version[:2]) == FEATURE_BACKPORTS.get(name)


def _leading_sections(steps: list[Any]) -> tuple[list[tuple[str, Mapping[str, Any]]], list[Any]]:
    sections = []
    i = 0
    while i < len(steps) and isinstance(steps[i], Mapping) and len(steps[i]) == 1:
        ((kind, spec),) = steps[i].items()
        if kind not in ("skip", "requires"):
            break
        sections.append((kind, spec or {}))
        i += 1
    return sections, steps[i:]


def _check_sections(sections: Iterable[tuple[str, Mapping[str, Any]]], version: tuple[int, ...]) -> None:
    """Raise :class:`Skip` when the sections exclude ``version`` (or ask for what the runner lacks)."""
    for kind, spec in sections:
        features = _as_list(spec.get("test_runner_features")) + (
            _as_list(spec.get("features")) if kind == "skip" else []
        )
        for feat in features:
            if feat not in RUNNER_FEATURES:
                raise StaticSkip(f"runner feature {feat} not supported")
        if spec.get("capabilities") is not None:
            raise StaticSkip("capabilities checks not supported by the double")
        if kind == "skip":
            if spec.get("awaits_fix"):
                raise StaticSkip("awaits_fix")
            if spec.get("version") is not None and _in_ranges(version, spec["version"]):
                raise Skip(f"skip version [{str(spec['version']).strip()}]")
            for feat in _as_list(spec.get("cluster_features")):
                if _has_feature(version, str(feat)):
                    raise Skip(f"skip on cluster feature {feat}")
            if spec.get("os") is not None or spec.get("known_issues") is not None:
                raise StaticSkip("skip on os / known_issues not supported")
        else:
            for feat in _as_list(spec.get("cluster_features")):
                if not _has_feature(version, str(feat)):
                    raise Skip(f"requires cluster feature {feat}")


def choose_version(sections: list[tuple[str, Mapping[str, Any]]]) -> str:
    """The newest double version the sections allow; :class:`Skip` with the first version's reason if none."""
    first: Skip | None = None
    for v in VERSIONS:
        try:
            _check_sections(sections, _version(v))
            return v
        except StaticSkip:
            raise
        except Skip as exc:
            first = first or exc
    assert first is not None
    raise first


# -- paths and the stash -----------------------------------------------------------------------------------------
def split_path(path: str) -> list[str]:
    """``a.b\\.c.0`` -> ``["a", "b.c", "0"]``."""
    parts = re.split(r"(?<!\\)\.", path)
    return [p.replace("\\.", ".") for p in parts]


class Stash:
    """Values saved by ``set`` and the last response (``$body``)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.body: Any = None

    def get(self, name: str) -> Any:
        key = name[1:].strip("{}")
        if key == "body":
            return self.body
        if key not in self.values:
            raise Failure(f"stash has no value for [{name}]")
        return self.values[key]

    def replace(self, value: Any) -> Any:
        """Substitute ``$x`` (whole value) and ``${x}`` (inside a string) recursively."""
        if isinstance(value, str):
            if re.fullmatch(r"\$[A-Za-z_][\w.]*|\$\{[^}]+\}", value):
                return self.get(value)
            return re.sub(r"\$\{([^}]+)\}", lambda m: str(self.get("$" + m.group(1))), value)
        if isinstance(value, Mapping):
            return {self.replace(k) if isinstance(k, str) else k: self.replace(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.replace(v) for v in value]
        return value

    def resolve(self, path: str) -> Any:
        """The value at ``path`` in the last response (None when absent)."""
        if path in ("$body", ""):
            return self.body
        node = self.body
        for part in split_path(path):
            if part.startswith("$"):
                part = str(self.get(part))
            if isinstance(node, Mapping):
                if part not in node:
                    return None
                node = node[part]
            elif isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    return None
                node = node[int(part)]
            else:
                return None
        return node


# -- value comparison --------------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def values_equal(expected: Any, actual: Any) -> bool:
    """Deep equality; numbers compare by value (``1`` equals ``1.0``)."""
    if _is_number(expected) and _is_number(actual):
        return float(expected) == float(actual)
    if isinstance(expected, Mapping):
        return (
            isinstance(actual, Mapping)
            and set(expected) == set(actual)
            and all(values_equal(expected[k], actual[k]) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(values_equal(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return type(expected) is type(actual) and expected == actual


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _falsy(value: Any) -> bool:
    return value is None or java_str(value) in ("", "0") or java_str(value).lower() == "false"


# -- the runner ------------------------------------------------------------------------------------------------
def _double_limit(node: Any) -> str | None:
    """The reason of a ``strict_double_unsupported`` error anywhere in a response, or None."""
    if isinstance(node, Mapping):
        if node.get("type") == "strict_double_unsupported":
            reason = str(node.get("reason", ""))
            m = re.search(r"does not implement (.*?)(; extend tests/double.*)?$", reason)
            return m.group(1) if m else reason
        for value in node.values():
            found = _double_limit(value)
            if found:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _double_limit(value)
            if found:
                return found
    return None


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_query_value(v) for v in value)
    return str(value)


def build_request(api: str, params: Mapping[str, Any]) -> tuple[str, str, str, Any]:
    """(method, path, query string, body) of one API call, or :class:`Skip` when the double's routes lack it."""
    forms = APIS.get(api)
    if forms is None:
        raise Skip(f"api {api} not supported by the double")
    params = dict(params)
    body = params.pop("body", None)
    for method, template in forms:
        names = re.findall(r"\{(\w+)\}", template)
        if all(n in params for n in names):
            path = template
            for n in names:
                path = path.replace("{" + n + "}", urllib.parse.quote(_query_value(params.pop(n)), safe=",*"))
            query = urllib.parse.urlencode({k: _query_value(v) for k, v in params.items()})
            return method, path, query, _decode_body(api, body)
    parts = ", ".join(re.findall(r"\{(\w+)\}", forms[-1][1]))
    raise Skip(f"api {api} without [{parts}] not supported by the double")


def _decode_body(api: str, body: Any) -> Any:
    if api in NDJSON_APIS:
        lines: list[Any] = []
        for item in _as_list(body):
            if isinstance(item, str):
                lines.extend(json.loads(line) for line in item.splitlines() if line.strip())
            else:
                lines.append(item)
        return lines
    if isinstance(body, str):
        return json.loads(body) if body.strip() else None
    return body


class CaseRunner:
    """Run the steps of one case on one cluster."""

    def __init__(self, cluster: StrictCluster) -> None:
        self.cluster = cluster
        self.stash = Stash()

    def run(self, section: str, steps: list[Any]) -> None:
        for i, step in enumerate(steps, start=1):
            if not isinstance(step, Mapping) or len(step) != 1:
                raise Failure(f"{section} step {i}: malformed step")
            ((kind, spec),) = step.items()
            try:
                self.step(kind, spec)
            except Failure as exc:
                raise Failure(f"{section} step {i} ({kind}): {exc}") from None
            except Skip:
                raise
            except Exception as exc:  # a bug in the double or the runner: reported as the case's failure
                tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
                raise Failure(f"{section} step {i} ({kind}): raised {tb}") from None

    def step(self, kind: str, spec: Any) -> None:
        if kind in ("skip", "requires"):
            raise Failure("skip/requires must come first")
        if kind == "do":
            self.do(dict(spec))
        elif kind == "set":
            for path, name in spec.items():
                self.stash.values[str(name)] = self.stash.resolve(path)
        elif kind == "transform_and_set":
            raise Skip("runner step transform_and_set not supported")
        elif kind in ("match", "length", "gt", "gte", "lt", "lte", "close_to", "contains"):
            for path, expected in spec.items():
                self.assertion(kind, str(path), self.stash.replace(expected))
        elif kind in ("is_true", "is_false", "exists", "not_exists"):
            self.assertion(kind, str(spec), None)
        else:
            raise Skip(f"runner step {kind} not supported")

    def do(self, spec: dict[str, Any]) -> None:
        catch = spec.pop("catch", None)
        headers = {str(k).lower(): str(v) for k, v in (spec.pop("headers", None) or {}).items()}
        for key in ("warnings", "warnings_regex"):
            if spec.pop(key, None):
                raise Skip("runner feature warnings not supported (the double emits no deprecation warnings)")
        for key in ("allowed_warnings", "allowed_warnings_regex"):
            spec.pop(key, None)
        if spec.pop("node_selector", None) is not None:
            raise Skip("runner feature node_selector not supported")
        if len(spec) != 1:
            raise Failure(f"do needs exactly one api, got {sorted(spec)}")
        ((api, params),) = spec.items()
        params = dict(self.stash.replace(params or {}))
        ignore = {int(x) for x in _as_list(params.pop("ignore", None))}
        if catch == "param":
            raise Skip("catch: param checks the client's parameter validation, not the server")
        method, path, query, body = build_request(str(api), params)
        status, resp = self.cluster.handle(method, path, query, body, headers)
        if method == "HEAD" and catch is None and status in (200, 404):
            # exists APIs: the Java runner reads a HEAD answer as a boolean (200 true, 404 false), never an error
            self.stash.body = status == 200
            return
        resp = {} if resp is None else resp
        self.stash.body = resp
        limit = _double_limit(resp)
        if limit is not None:
            raise Skip(f"double limit: {limit}")
        if catch is None:
            if status >= 400 and status not in ignore:
                raise Failure(f"{api} answered {status}: {_short(resp)}")
            return
        catch = str(catch)
        if catch in CATCHES:
            if not CATCHES[catch](status):
                raise Failure(f"{api}: expected catch [{catch}] but got {status}: {_short(resp)}")
            return
        if len(catch) > 2 and catch.startswith("/") and catch.endswith("/"):
            if status < 400:
                raise Failure(f"{api}: expected an error matching {catch} but got {status}")
            error = resp.get("error") if isinstance(resp, Mapping) else None
            if error is None:
                raise Failure(f"{api}: expected an error matching {catch} but the response has no error")
            if not re.search(catch[1:-1], java_str(error)):
                raise Failure(f"{api}: error does not match {catch}: {_short(error)}")
            return
        raise Skip(f"catch value {catch} not supported")

    def assertion(self, kind: str, path: str, expected: Any) -> None:
        actual = self.stash.resolve(path)
        where = f"[{path}]"
        if kind == "match":
            if isinstance(expected, str) and len(expected) > 2 and expected.startswith("/") and expected.endswith("/"):
                if actual is None or not re.search(expected[1:-1].strip(), java_str(actual), re.VERBOSE):
                    raise Failure(f"{where} {_short(actual)} does not match {expected}")
                return
            if not values_equal(expected, actual):
                raise Failure(f"{where} expected {_short(expected)} but was {_short(actual)}")
        elif kind == "length":
            if not isinstance(actual, (list, Mapping, str)) or len(actual) != int(expected):
                got = len(actual) if isinstance(actual, (list, Mapping, str)) else _short(actual)
                raise Failure(f"{where} expected length {expected} but was {got}")
        elif kind in ("gt", "gte", "lt", "lte"):
            if not (_is_number(actual) and _is_number(expected)):
                raise Failure(f"{where} {_short(actual)} is not comparable with {_short(expected)}")
            ok = {
                "gt": actual > expected,
                "gte": actual >= expected,
                "lt": actual < expected,
                "lte": actual <= expected,
            }[kind]
            if not ok:
                raise Failure(f"{where} {actual} is not {kind} {expected}")
        elif kind == "close_to":
            value, error = float(expected["value"]), float(expected["error"])
            if not _is_number(actual) or math.fabs(float(actual) - value) > error:
                raise Failure(f"{where} {_short(actual)} is not within {error} of {value}")
        elif kind == "contains":
            if isinstance(actual, str) and isinstance(expected, str):
                ok = expected in actual
            elif isinstance(actual, list):
                ok = any(
                    values_equal(expected, item)
                    or (
                        isinstance(expected, Mapping)
                        and isinstance(item, Mapping)
                        and all(k in item and values_equal(v, item[k]) for k, v in expected.items())
                    )
                    for item in actual
                )
            else:
                ok = False
            if not ok:
                raise Failure(f"{where} {_short(actual)} does not contain {_short(expected)}")
        elif kind == "is_true":
            if _falsy(actual):
                raise Failure(f"{where} is not true: {_short(actual)}")
        elif kind == "is_false":
            if not _falsy(actual):
                raise Failure(f"{where} is not false: {_short(actual)}")
        elif kind == "exists":
            if actual is None:
                raise Failure(f"{where} does not exist")
        elif kind == "not_exists":
            if actual is not None:
                raise Failure(f"{where} exists: {_short(actual)}")


def case_key(file_path: str) -> str:
    """``<folder>/<file>`` of a test file (the key of :data:`KNOWN_FAILURES`)."""
    return "/".join(Path(file_path).parts[-2:])


def cluster_for(file_path: str, version: str) -> StrictCluster:
    """A fresh double for one case: ``basic`` for the rank-rrf licence tests, else ``trial``."""
    licence = "basic" if "/rank-rrf/" in file_path and "/license/" in file_path else "trial"
    return StrictCluster(version=version, license_type=licence)


def run_case(file_path: str, name: str, setup: list[Any], teardown: list[Any], steps: list[Any]) -> CaseResult:
    """Run one case (setup, steps, teardown) on a fresh cluster."""
    label = case_key(file_path)
    try:
        setup_sections, setup_steps = _leading_sections(setup)
        case_sections, case_steps = _leading_sections(steps)
        version = choose_version(setup_sections + case_sections)
    except Skip as exc:
        return CaseResult(file_path, name, "SKIP", str(exc))
    runner = CaseRunner(cluster_for(file_path, version))
    try:
        runner.run("setup", setup_steps)
        runner.run("test", case_steps)
        runner.run("teardown", teardown)
    except Skip as exc:
        return CaseResult(file_path, name, "SKIP", str(exc), version)
    except Failure as exc:
        known = KNOWN_FAILURES.get((label, name))
        reason = known_reason(known) if known else str(exc)
        return CaseResult(file_path, name, "FAIL", reason, version, detail=str(exc))
    return CaseResult(file_path, name, "PASS", "", version)


def run_file(path: Path, *, display: str | None = None) -> FileResult:
    """Run every case of one YAML test file."""
    setup, teardown, cases = load_suite(path.read_text(encoding="utf-8"))
    shown = display or str(path)
    result = FileResult(shown)
    for name, steps in cases:
        result.cases.append(run_case(shown, name, setup, teardown, steps))
    return result


def run_tree(root: Path) -> list[FileResult]:
    """Run every ``*.yml`` under ``root`` (paths reported relative to it)."""
    return [run_file(p, display=str(p.relative_to(root))) for p in sorted(root.rglob("*.yml"))]
