"""The strict Elasticsearch double: a single-node cluster in memory that validates and executes requests the
way Elasticsearch 8.18/9.x does, and refuses what it does not know.

Rules and their sources (elastic/elasticsearch unless noted; the research notes of issue 11 quote the lines):

* component templates are validated ALONE (``MetadataIndexTemplateService.addComponentTemplate``: "Immediate
  validation of the component template only" -> ``validateTemplate(settings, mappings)``), so a mapping may
  only name analyzers its own component defines;
* index templates (``putIndexTemplateV2``): missing components refused (``index template [x] specifies
  component templates [y] that do not exist``), same-priority overlapping patterns refused
  (``findConflictingV2Templates``), the composite validated (``validateCompositeTemplate``); a component in
  use cannot be deleted; built-in templates of a 9.x node are present (``StackTemplateRegistry`` & co.);
* index creation applies the highest-priority matching template (``findV2CandidateTemplates``), composing
  components in ``composed_of`` order, then the template, then the request;
* writes run ``index.default_pipeline`` (or ``?pipeline=``), then enforce the mapping (``dynamic: strict``
  on every field a pipeline adds); ``op_type=create`` and ``if_seq_no`` conflicts answer 409;
* searches see the last refreshed state; GET and terms lookups are realtime;
* ``_delete_by_query`` searches the refreshed state and deletes with a version check: a document changed
  since then is a version conflict, not deleted, counted in ``version_conflicts`` with ``conflicts=proceed``
  (``modules/reindex``, ``delete_by_query/10_basic.yml``); ``wait_for_completion=false`` answers a task
  (``AbstractBaseReindexRestHandler``) read back with ``GET _tasks/<id>`` (``TaskResult``);
* security: users, API keys and roles; every request checks the privilege of its action
  (``ClusterPrivilegeResolver``, ``IndexPrivilege``), a denial is the 403 of
  ``AuthorizationDenialMessages.actionDenied``; ``_has_privileges`` answers what a caller holds;
* licence: ``GET _license``; the ``rrf`` / ``linear`` retrievers need enterprise or trial (403
  ``LicenseUtils.newComplianceException``); every response carries ``X-Elastic-Product: Elasticsearch``
  (``RestController``).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.support.double.errors import DoubleLimit, EsError, parse_error
from tests.support.double.glob import any_intersect, glob_match
from tests.support.double.ingest import (
    InferenceEndpoint,
    IngestContext,
    IngestFailure,
    Pipeline,
    parse_pipeline,
    run_pipeline,
    simulate_doc,
)
from tests.support.double.mapping import (
    Analysis,
    Mapping_,
    flatten_settings,
    merge_conflicts,
    merge_mappings,
    parse_mapping,
    validate_document,
    validate_settings,
)
from tests.support.double.mustache import MustacheError, render_template
from tests.support.double.routes import method_not_allowed
from tests.support.double.search import IndexView, Searcher, compliance

TEMPLATE_SRC = "server/src/main/java/org/elasticsearch/cluster/metadata/MetadataIndexTemplateService.java"
CREATE_SRC = "server/src/main/java/org/elasticsearch/cluster/metadata/MetadataCreateIndexService.java"
BULK_SRC = "server/src/main/java/org/elasticsearch/action/bulk/TransportShardBulkAction.java"
ALIASES_SRC = "server/src/main/java/org/elasticsearch/cluster/metadata/MetadataIndexAliasesService.java"
ALIAS_VALIDATOR_SRC = "server/src/main/java/org/elasticsearch/cluster/metadata/AliasValidator.java"
RESOLVER_SRC = "server/src/main/java/org/elasticsearch/cluster/metadata/IndexNameExpressionResolver.java"
ALIAS_ACTIONS_SRC = "server/src/main/java/org/elasticsearch/action/admin/indices/alias/IndicesAliasesRequest.java"
SECURITY_SRC = (
    "x-pack/plugin/security/src/main/java/org/elasticsearch/xpack/security/authz/AuthorizationDenialMessages.java"
)

Response = tuple[int, Any]

BUILT_IN_TEMPLATES: dict[str, tuple[list[str], int]] = {
    "logs": (["logs-*-*"], 100),
    "metrics": (["metrics-*-*"], 100),
    "synthetics": (["synthetics-*-*"], 100),
    ".kibana-reporting": ([".kibana-reporting*"], 100),
    "agentless": (["agentless-*-*"], 100),
    "behavioral_analytics-events-default": (["behavioral_analytics-events-*"], 100),
    "logs-otel@template": (["logs-*.otel-*"], 120),
    "metrics-otel@template": (["metrics-*.otel-*"], 120),
    "traces-otel@template": (["traces-*.otel-*"], 120),
    "traces-apm@template": (["traces-apm-*"], 140),
    "ilm-history-7": (["ilm-history-7*"], 2147483647),
    ".slm-history-7": ([".slm-history-7*"], 2147483647),
}
"""Composable templates a 9.x node installs (StackTemplateRegistry, otel-data, apm-data, ILM/SLM history)."""

# -- privileges -------------------------------------------------------------------------------------------------
CLUSTER_ACTIONS: dict[str, set[str]] = {
    "cluster:monitor/main": {"monitor"},
    "cluster:monitor/xpack/license/get": {"monitor"},
    "cluster:monitor/nodes/info": {"monitor"},
    "cluster:monitor/task/get": {"monitor"},
    "cluster:monitor/xpack/inference/get": {"monitor_inference", "monitor", "manage_inference"},
    # InferenceAction.NAME (POST _inference): MONITOR_INFERENCE_PATTERN / MANAGE_INFERENCE_PATTERN
    # "cluster:monitor/xpack/inference*" ("no trailing slash to match the POST InferenceAction name") and
    # MONITOR_PATTERN "cluster:monitor/*"
    "cluster:monitor/xpack/inference": {"monitor_inference", "monitor", "manage_inference"},
    "indices:admin/index_template/get": {"manage_index_templates", "monitor"},
    "indices:admin/index_template/put": {"manage_index_templates"},
    "indices:admin/index_template/delete": {"manage_index_templates"},
    "cluster:admin/component_template/get": {"manage_index_templates", "monitor"},
    "cluster:admin/component_template/put": {"manage_index_templates"},
    "cluster:admin/component_template/delete": {"manage_index_templates"},
    "cluster:admin/ingest/pipeline/get": {"read_pipeline", "manage_pipeline", "manage_ingest_pipelines"},
    "cluster:admin/ingest/pipeline/put": {"manage_pipeline", "manage_ingest_pipelines"},
    "cluster:admin/ingest/pipeline/delete": {"manage_pipeline", "manage_ingest_pipelines"},
    "cluster:admin/ingest/pipeline/simulate": {"read_pipeline", "manage_pipeline", "manage_ingest_pipelines"},
    "cluster:admin/script/get": set(),
    "cluster:admin/script/put": set(),
    "cluster:admin/script/delete": set(),
}
"""Cluster action -> named privileges granting it besides ``manage`` and ``all`` (ClusterPrivilegeResolver);
``cluster:admin/script/*`` only ``manage`` / ``all``."""
INDEX_ACTIONS: dict[str, set[str]] = {
    "indices:data/read/search": {"read"},
    "indices:data/read/get": {"read"},
    # IndexPrivilege.CREATE_AUTOMATON "indices:data/write/index*" grants an overwriting index too; create_doc's
    # ("index", "index[*", "index:op_type/create") does not cover the op_type=index item action
    "indices:data/write/index": {"index", "write", "create"},
    "indices:data/write/index:op_type/create": {"index", "write", "create_doc", "create"},
    "indices:data/write/delete": {"delete", "write"},
    "indices:data/write/delete/byquery": {"delete", "write"},
    "indices:admin/create": {"create_index", "manage"},
    "indices:admin/auto_create": {"create_index", "auto_configure", "manage"},
    "indices:admin/delete": {"delete_index", "manage"},
    "indices:admin/get": {"view_index_metadata", "manage"},
    # GetMappingsAction.NAME / GetSettingsAction.NAME: VIEW_METADATA_AUTOMATON holds both; MONITOR_AUTOMATON
    # "indices:monitor/*" the settings one; MANAGE "indices:admin/*" + "indices:monitor/*"
    "indices:admin/mappings/get": {"view_index_metadata", "manage"},
    "indices:monitor/settings/get": {"monitor", "view_index_metadata", "manage"},
    "indices:admin/refresh": {"maintenance", "manage"},
    "indices:admin/mapping/put": {"manage"},
    # IndexPrivilege: VIEW_METADATA holds GetAliasesAction.NAME; only MANAGE ("indices:admin/*") holds
    # IndicesAliasesAction.NAME (POST _aliases needs it on every index it names)
    "indices:admin/aliases/get": {"view_index_metadata", "manage"},
    "indices:admin/aliases": {"manage"},
}
"""Index action -> index privileges granting it besides ``all`` (IndexPrivilege)."""
CLUSTER_ACCESS_LEVEL = {
    "read_pipeline": 3, "manage_index_templates": 3, "monitor_inference": 3, "manage_inference": 4,
    "manage_ingest_pipelines": 5, "manage_pipeline": 5, "monitor": 10, "manage": 1000, "all": 1001,
}  # fmt: skip
"""``Privilege.sortByAccessLevel`` (what ``ClusterPrivilegeResolver.findPrivilegesThatGrant`` iterates): how many
other named cluster privileges each implies, then the name. Every privilege implies ``none`` and the two empty
``*_data_stream_global_retention`` ones (3); manage_inference also monitor_inference; the pipeline pair each other
and read_pipeline; monitor seven ``cluster:monitor/...`` ones (inference, ml, text_structure, both transform
names, watcher, rollup); manage and all nearly everything (all more)."""
INDEX_ACCESS_LEVEL = {
    "create_doc": 1, "delete": 1, "read": 1, "monitor": 1, "view_index_metadata": 1, "create_index": 1,
    "delete_index": 1, "maintenance": 1, "auto_configure": 1, "create": 2, "index": 3, "write": 5, "manage": 100,
    "all": 101,
}  # fmt: skip
"""The same for ``IndexPrivilege.findPrivilegesThatGrant``: every privilege implies ``none``; create also create_doc
(``index*`` + ``bulk*``); index create and create_doc; write those and delete."""
CLUSTER_IMPLIES = {
    "all": {"manage", "monitor", "manage_index_templates", "manage_pipeline", "manage_ingest_pipelines",
            "read_pipeline", "monitor_inference", "manage_inference"},
    "manage": {"monitor", "manage_index_templates", "manage_pipeline", "manage_ingest_pipelines", "read_pipeline",
               "monitor_inference", "manage_inference"},
    "monitor": {"monitor_inference"},
    "manage_pipeline": {"read_pipeline"},
    "manage_ingest_pipelines": {"read_pipeline"},
    "manage_inference": {"monitor_inference"},
}  # fmt: skip
INDEX_IMPLIES = {
    "all": {"read", "write", "index", "create", "create_doc", "delete", "create_index", "delete_index", "manage",
            "view_index_metadata", "maintenance", "auto_configure", "monitor"},
    "manage": {"create_index", "delete_index", "view_index_metadata", "maintenance", "auto_configure", "monitor"},
    "write": {"index", "create", "create_doc", "delete"},
    "index": {"create", "create_doc"},
    "create": {"create_doc"},
}  # fmt: skip


@dataclass
class Role:
    """A role: cluster privileges and index privileges per name pattern."""

    cluster: tuple[str, ...] = ()
    indices: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()


def _grants(held: set[str], action: str) -> bool:
    """Whether index privileges ``held`` grant ``action``: a named privilege that does (:data:`INDEX_ACTIONS`), or an
    action pattern a role names as a privilege (``IndexPrivilege.resolve``: a name ``ACTION_MATCHER`` accepts, such as
    ``indices:admin/mapping/put``, becomes ``actionToPattern(name)``; ``*`` is the pattern's wildcard)."""
    if held & (INDEX_ACTIONS.get(action, set()) | {"all"}):
        return True
    return any(":" in h and glob_match(h, action) for h in held)


def _expand(privs: Iterable[str], implies: Mapping[str, set[str]]) -> set[str]:
    out = set(privs)
    changed = True
    while changed:
        changed = False
        for p in list(out):
            extra = implies.get(p, set()) - out
            if extra:
                out |= extra
                changed = True
    return out


@dataclass
class Principal:
    """An authenticated caller."""

    name: str
    roles: tuple[str, ...]
    api_key_id: str | None = None

    def describe(self) -> str:
        if self.api_key_id is not None:
            return f"API key id [{self.api_key_id}] of user [{self.name}]"
        return f"user [{self.name}] with effective roles [{','.join(sorted(self.roles))}]"


# -- indices --------------------------------------------------------------------------------------------------
@dataclass
class Doc:
    """A stored document with its sequence number and version."""

    source: dict[str, Any]
    seq_no: int
    version: int
    semantic: dict[str, list[tuple[str, list[float]]]] = field(default_factory=dict)


@dataclass
class IndexState:
    """One index: its settings, mapping, analysis, documents (realtime) and the refreshed (searchable) view."""

    name: str
    settings: dict[str, Any]
    mapping: Mapping_
    analysis: Analysis
    docs: dict[str, Doc] = field(default_factory=dict)
    searchable: dict[str, Doc] = field(default_factory=dict)

    def refresh(self) -> None:
        """Make every write visible to search."""
        self.searchable = dict(self.docs)

    def analyzer_definitions(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tokenizers: dict[str, dict[str, Any]] = {}
        for key, value in self.settings.items():
            m = re.fullmatch(r"index\.analysis\.(analyzer|tokenizer)\.([^.]+)\.(.+)", key)
            if m:
                target = out if m.group(1) == "analyzer" else tokenizers
                target.setdefault(m.group(2), {})[m.group(3)] = value
        out["__tokenizers__"] = tokenizers
        return out


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("-")[0].split(".") if p.isdigit())


class StrictCluster:
    """A single-node Elasticsearch that refuses what Elasticsearch refuses (see the module docstring).

    Args:
        version: Version number (``9.5.0``, ``9.1.0``, ``8.18.0``): gates retrievers, ``exclude_vectors``,
            dense_vector defaults.
        license_type: ``basic``, ``trial``, ``enterprise``, ``platinum``.
        license_status: ``active`` or ``expired``.
        plugins: Installed plugins (``analysis-kuromoji``).
        endpoints: Inference endpoints (default: the two a 9.x node preconfigures, ``.elser-2-elasticsearch`` and
            ``.multilingual-e5-small-elasticsearch`` with 384 dims).
        users: ``{name: (password, roles)}``; with users or ``api_keys`` security is on.
        api_keys: ``{encoded key: (user, roles)}`` (the ``ApiKey`` header value).
        roles: Role definitions.
    """

    def __init__(
        self,
        *,
        version: str = "9.5.0",
        license_type: str = "trial",
        license_status: str = "active",
        plugins: Iterable[str] = (),
        endpoints: Iterable[InferenceEndpoint] | None = None,
        users: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
        api_keys: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
        roles: Mapping[str, Role] | None = None,
    ) -> None:
        self.version = version
        self.version_tuple = _version_tuple(version)
        self.license_type = license_type
        self.license_status = license_status
        self.plugins = list(plugins)
        if endpoints is None:
            endpoints = (
                InferenceEndpoint(".elser-2-elasticsearch", task_type="sparse_embedding"),
                InferenceEndpoint(".multilingual-e5-small-elasticsearch", dims=384),
            )
        self.endpoints: dict[str, InferenceEndpoint] = {e.inference_id: e for e in endpoints}
        self.users = dict(users or {})
        self.api_keys = dict(api_keys or {})
        self.roles = dict(roles or {})
        self.component_templates: dict[str, dict[str, Any]] = {}
        self.index_templates: dict[str, dict[str, Any]] = {
            name: {"index_patterns": patterns, "priority": priority, "_built_in": True}
            for name, (patterns, priority) in BUILT_IN_TEMPLATES.items()
        }
        self.pipelines: dict[str, Pipeline] = {}
        self.scripts: dict[str, dict[str, Any]] = {}
        self.indices: dict[str, IndexState] = {}
        self.aliases: dict[str, dict[str, dict[str, Any]]] = {}
        """alias -> index -> alias properties (``is_write_index`` when set)."""
        self.tasks: dict[str, dict[str, Any]] = {}
        self._seq = itertools.count(0)
        self._task_ids = itertools.count(1)
        self.lookups = 0
        """Terms-lookup GETs served (one per clause occurrence per search)."""
        self.before_lookup: list[Callable[[str, str], None]] = []
        """Called with (index, id) before each terms-lookup GET (to interleave a write, as a race would)."""
        self.after_write: list[Callable[[str], None]] = []
        """Called with a label after every state-changing request."""
        self.bulk_fault: Callable[[str, dict[str, Any], dict[str, Any] | None], dict[str, Any] | None] | None = None
        """Per bulk action: return a custom item to answer instead (fault injection), or None."""
        self.task_polls_before_done = 0
        """``GET _tasks/<id>`` answers ``completed: false`` this many times before the result."""
        self.task_results_stored = True
        """False: a finished task's ``GET _tasks/<id>`` has neither ``response`` nor ``error``, as
        ``TransportGetTaskAction.waitedForCompletion`` answers when no result was stored (``ResourceNotFoundException``
        from the task index: a snapshot of the finished task, ``new TaskResult(true, snapshotOfRunningTask)``)."""
        self.log: list[str] = []

    # -- public helpers for tests ------------------------------------------------------------------------------
    @property
    def security(self) -> bool:
        """Whether security is on (users or API keys configured)."""
        return bool(self.users or self.api_keys)

    def docs(self, index: str) -> dict[str, dict[str, Any]]:
        """The realtime documents of ``index`` (id -> source); an alias is read through its one index."""
        return {k: d.source for k, d in self.indices[self._single(index)].docs.items()}

    def refresh_all(self) -> None:
        """Refresh every index."""
        for idx in self.indices.values():
            idx.refresh()

    # -- dispatch ----------------------------------------------------------------------------------------------
    def respond(self, req: Any) -> Response:
        """Answer a :class:`tests.support.es_transport.RecordedRequest` (a FakeNode route)."""
        return self.handle(req.method, req.path, req.query, req.body, req.headers)

    def handle(
        self, method: str, path: str, query: str | Mapping[str, list[str]], body: Any, headers: Mapping[str, str]
    ) -> Response:
        """Answer one REST request: ``(status, body)``.

        Args:
            method: HTTP method.
            path: Path without the query string.
            query: Query string or parsed query.
            body: Decoded body (dict, list of NDJSON objects, or None).
            headers: Request headers (lower-cased names).
        """
        params = urllib.parse.parse_qs(query) if isinstance(query, str) else dict(query)
        self.log.append(f"{method} {path}")
        try:
            principal = self._authenticate(headers, path)
            wrong = method_not_allowed(method.upper(), path, before_routing=True)
            if wrong is not None:  # RestController: routing (and its 405) comes before any action
                return wrong
            return self._route(method.upper(), path.strip("/"), params, body, principal)
        except EsError as exc:
            if exc.reason.startswith("no handler found for uri"):
                wrong = method_not_allowed(method.upper(), path)
                if wrong is not None:
                    return wrong
            return exc.status, exc.body()

    def _authenticate(self, headers: Mapping[str, str], path: str) -> Principal | None:
        if not self.security:
            return None
        auth = headers.get("authorization", "")
        scheme, _, cred = auth.partition(" ")
        if scheme.lower() == "basic":
            user, _, password = base64.b64decode(cred).decode("utf-8").partition(":")  # CharArrays.utf8BytesToChars
            entry = self.users.get(user)
            if entry is not None and entry[0] == password:
                return Principal(user, tuple(entry[1]))
            raise EsError(
                401,
                "security_exception",
                f"unable to authenticate user [{user}] for REST request [/{path.lstrip('/')}]",
                source="x-pack/plugin/security/.../authc/AuthenticationService.java",
                header={"WWW-Authenticate": ['Basic realm="security", charset="UTF-8"', "ApiKey"]},
            )
        if scheme.lower() == "apikey":
            entry = self.api_keys.get(cred)
            if entry is not None:
                key_id = base64.b64decode(cred).decode().split(":")[0] if _is_b64(cred) else cred[:8]
                return Principal(entry[0], tuple(entry[1]), api_key_id=key_id)
            raise EsError(
                401,
                "security_exception",
                "unable to authenticate with provided credentials and anonymous access is not allowed for this request",
                source="x-pack/plugin/security/.../authc/ApiKeyService.java",
                header={"WWW-Authenticate": ['Basic realm="security", charset="UTF-8"', "ApiKey"]},
            )
        raise EsError(
            401,
            "security_exception",
            f"missing authentication credentials for REST request [/{path.lstrip('/')}]",
            source="x-pack/plugin/security/.../authc/AuthenticationService.java",
            header={"WWW-Authenticate": ['Basic realm="security", charset="UTF-8"', "ApiKey"]},
        )

    def _cluster_privs(self, p: Principal) -> set[str]:
        privs: set[str] = set()
        for r in p.roles:
            privs |= set(self.roles.get(r, Role()).cluster)
        return _expand(privs, CLUSTER_IMPLIES)

    def _index_privs(self, p: Principal, index: str) -> set[str]:
        privs: set[str] = set()
        for r in p.roles:
            for names, granted in self.roles.get(r, Role()).indices:
                if any(glob_match(n, index) for n in names):
                    privs |= set(granted)
        return _expand(privs, INDEX_IMPLIES)

    def _require_cluster(self, p: Principal | None, action: str) -> None:
        if p is None:
            return
        granting = CLUSTER_ACTIONS[action] | {"manage", "all"}
        if self._cluster_privs(p) & granting:
            return
        order = sorted(granting, key=lambda x: (CLUSTER_ACCESS_LEVEL.get(x, 0), x))
        raise EsError(
            403,
            "security_exception",
            f"action [{action}] is unauthorized for {p.describe()}, this action is granted by the cluster privileges "
            f"[{','.join(order)}]",
            source=SECURITY_SRC,
        )

    def _require_index(self, p: Principal | None, action: str, indices: Iterable[str]) -> None:
        if p is None:
            return
        names = list(indices)
        granting = INDEX_ACTIONS[action] | {"all"}
        denied = [n for n in names if not _grants(self._index_privs(p, n), action)]
        if denied:
            order = sorted(granting, key=lambda x: (INDEX_ACCESS_LEVEL.get(x, 0), x))
            raise EsError(
                403,
                "security_exception",
                f"action [{action.split(':op_type')[0]}] is unauthorized for {p.describe()} on indices "
                f"[{','.join(denied)}], this action is granted by the index privileges [{','.join(order)}]",
                source=SECURITY_SRC,
            )

    # -- routing -----------------------------------------------------------------------------------------------
    def _route(self, method: str, path: str, params: dict[str, list[str]], body: Any, p: Principal | None) -> Response:
        parts = [urllib.parse.unquote(x) for x in path.split("/")] if path else []
        head = parts[0] if parts else ""
        if not parts:
            if method not in ("GET", "HEAD"):
                raise _no_handler(method, path)
            self._require_cluster(p, "cluster:monitor/main")
            return 200, self._root()
        if head == "_license" and method == "GET":
            self._require_cluster(p, "cluster:monitor/xpack/license/get")
            return 200, self._license()
        if head == "_nodes" and parts[1:] == ["plugins"] and method == "GET":
            self._require_cluster(p, "cluster:monitor/nodes/info")
            return 200, self._nodes_plugins()
        if head == "_inference":
            return self._inference_api(method, parts[1:], p, body)
        if head == "_ingest":
            return self._ingest_api(method, parts[1:], params, body, p)
        if head == "_component_template":
            return self._component_api(method, parts[1:], params, body, p)
        if head == "_index_template":
            return self._index_template_api(method, parts[1:], params, body, p)
        if head == "_scripts":
            return self._scripts_api(method, parts[1:], body, p)
        if head == "_render" and parts[1:2] == ["template"]:
            return 200, {"template_output": self._render(body, parts[2] if len(parts) > 2 else None)}
        if head == "_tasks" and len(parts) == 2 and method == "GET":
            self._require_cluster(p, "cluster:monitor/task/get")
            return self._task(parts[1], params)
        if head == "_security":
            return self._security_api(method, parts[1:], body, p)
        if head == "_bulk":
            return self._bulk(None, params, body, p)
        if head == "_msearch":
            return self._msearch(None, body, p)
        if head == "_search" and parts[1:] == ["template"]:  # RestSearchTemplateAction: no index = every index
            return self._search_template("*", params, body, p)
        if head == "_search" and len(parts) == 1:  # RestSearchAction: no index = every index
            return self._search("*", body, p, params)
        if head == "_refresh":
            return self._refresh(list(self.indices), p)
        if head == "_aliases" and len(parts) == 1 and method == "POST":
            return self._update_aliases(body, p)
        if head == "_alias" and len(parts) == 2 and method in ("GET", "HEAD"):
            return self._get_aliases("*", p, names=parts[1], head=method == "HEAD")
        if head.startswith("_"):
            raise _no_handler(method, path)
        # index-level
        names = head
        rest = parts[1:]
        if not rest:
            return self._index_api(method, names, params, body, p)
        op = rest[0]
        if op == "_bulk":
            return self._bulk(names, params, body, p)
        if op == "_search" and rest[1:] == ["template"]:
            return self._search_template(names, params, body, p)
        if op == "_search":
            return self._search(names, body, p, params)
        if op == "_msearch":
            return self._msearch(names, body, p)
        if op == "_count":
            return self._count(names, body, p)
        if op == "_refresh":
            return self._refresh(self._resolve(names), p)
        if op == "_delete_by_query":
            return self._delete_by_query(names, params, body, p)
        if op in ("_doc", "_create") and len(rest) <= 2:
            doc_id = rest[1] if len(rest) == 2 else None
            return self._doc_api(method, names, doc_id, params, body, p, create=op == "_create")
        if op == "_alias" and len(rest) <= 2 and method in ("GET", "HEAD"):
            return self._get_aliases(names, p, names=rest[1] if len(rest) == 2 else None, head=method == "HEAD")
        if op == "_mapping" and method in ("PUT", "POST"):
            return self._put_mapping(self._resolve(names), body, p)
        if op == "_mapping" and method == "GET":
            self._require_index(p, "indices:admin/mappings/get", self._resolve(names))
            return 200, {n: {"mappings": self.indices[n].mapping.to_dict()} for n in self._resolve(names)}
        if op == "_settings" and method == "GET":
            self._require_index(p, "indices:monitor/settings/get", self._resolve(names))
            return 200, {n: {"settings": _nest(self.indices[n].settings)} for n in self._resolve(names)}
        raise _no_handler(method, path)

    # -- info --------------------------------------------------------------------------------------------------
    def _root(self) -> dict[str, Any]:
        major = self.version_tuple[0]
        return {
            "name": "double-node",
            "cluster_name": "strict-double",
            "cluster_uuid": "strict-double-uuid",
            "version": {
                "number": self.version,
                "build_flavor": "default",
                "build_type": "docker",
                "build_hash": "0" * 40,
                "build_date": "2026-01-01T00:00:00.000Z",
                "build_snapshot": False,
                "lucene_version": "10.2.2" if major >= 9 else "9.12.0",
                "minimum_wire_compatibility_version": "8.19.0" if major >= 9 else "7.17.0",
                "minimum_index_compatibility_version": "8.0.0" if major >= 9 else "7.0.0",
            },
            "tagline": "You Know, for Search",
        }

    def _license(self) -> dict[str, Any]:
        lic: dict[str, Any] = {
            "status": self.license_status,
            "uid": "00000000-0000-0000-0000-000000000000",
            "type": self.license_type,
            "issue_date": "2026-01-01T00:00:00.000Z",
            "issue_date_in_millis": 1767225600000,
            "max_nodes": 1000,
            "issued_to": "strict-double",
            "issuer": "elasticsearch",
            "start_date_in_millis": -1,
        }
        return {"license": lic}

    def _nodes_plugins(self) -> dict[str, Any]:
        return {
            "_nodes": {"total": 1, "successful": 1, "failed": 0},
            "cluster_name": "strict-double",
            "nodes": {
                "double-node-id": {
                    "name": "double-node",
                    "version": self.version,
                    "plugins": [
                        {"name": name, "version": self.version, "description": name, "classname": "x"}
                        for name in self.plugins
                    ],
                }
            },
        }

    def _inference_api(self, method: str, rest: list[str], p: Principal | None, body: Any = None) -> Response:
        if method == "POST" and len(rest) == 2:
            # POST _inference/<task_type>/<id> (RestInferenceAction): {"input": [...]} -> one result per input,
            # TextEmbeddingFloatResults as {"text_embedding": [{"embedding": [...]}]}
            self._require_cluster(p, "cluster:monitor/xpack/inference")
            task, eid = rest
            endpoint = self.endpoints.get(eid)
            if endpoint is None:  # ModelRegistry.getModelWithSecrets
                raise EsError(
                    404,
                    "resource_not_found_exception",
                    f"Inference endpoint not found [{eid}]",
                    source="x-pack/plugin/inference/.../registry/ModelRegistry.java",
                )
            if task != endpoint.task_type or task != "text_embedding":
                raise DoubleLimit(f"POST _inference/{task}/{eid} (task {endpoint.task_type})")
            texts = (body or {}).get("input")
            texts = [texts] if isinstance(texts, str) else list(texts or [])
            return 200, {"text_embedding": [{"embedding": endpoint.embed(str(t))} for t in texts]}
        if method != "GET":
            raise DoubleLimit(f"{method} _inference")
        self._require_cluster(p, "cluster:monitor/xpack/inference/get")
        if not rest or rest == ["_all"]:
            return 200, {"endpoints": [e.to_dict() for e in self.endpoints.values()]}
        endpoint = self.endpoints.get(rest[-1])
        if endpoint is None:
            raise EsError(
                404,
                "resource_not_found_exception",
                f"Inference endpoint not found [{rest[-1]}]",
                source="x-pack/plugin/inference/.../ModelRegistry.java",
            )
        return 200, {"endpoints": [endpoint.to_dict()]}

    # -- ingest ------------------------------------------------------------------------------------------------
    def _ingest_api(
        self, method: str, rest: list[str], params: dict[str, list[str]], body: Any, p: Principal | None
    ) -> Response:
        if rest[:1] != ["pipeline"]:
            raise _no_handler(method, "_ingest/" + "/".join(rest))
        if rest[1:2] == ["_simulate"] or rest[2:3] == ["_simulate"]:
            self._require_cluster(p, "cluster:admin/ingest/pipeline/simulate")
            if rest[1] == "_simulate":
                pipeline = parse_pipeline(
                    "_simulate_pipeline", (body or {}).get("pipeline"), version=self.version_tuple
                )
            else:
                pipeline = self._pipeline(rest[1])
            ictx = IngestContext(self.endpoints)
            docs = []
            for d in (body or {}).get("docs", []):
                meta = {"_index": d.get("_index", "_index"), "_id": d.get("_id", "_id")}
                docs.append(simulate_doc(pipeline, dict(d.get("_source") or {}), meta, ictx))
            return 200, {"docs": docs}
        if len(rest) != 2:
            raise _no_handler(method, "_ingest/" + "/".join(rest))
        pid = rest[1]
        if method == "PUT":
            self._require_cluster(p, "cluster:admin/ingest/pipeline/put")
            self.pipelines[pid] = parse_pipeline(pid, body, version=self.version_tuple)
            self._notify("pipeline")
            return 200, {"acknowledged": True}
        if method == "GET":
            self._require_cluster(p, "cluster:admin/ingest/pipeline/get")
            if pid not in self.pipelines:
                return 404, {}
            return 200, {pid: copy.deepcopy(self.pipelines[pid].body)}
        if method == "DELETE":
            self._require_cluster(p, "cluster:admin/ingest/pipeline/delete")
            if pid not in self.pipelines:
                raise EsError(
                    404, "resource_not_found_exception", f"pipeline [{pid}] is missing", source="IngestService"
                )
            users = sorted(n for n, st in self.indices.items() if st.settings.get("index.default_pipeline") == pid)
            if users:  # IngestService.innerDelete refuses a pipeline an index still writes through
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"pipeline [{pid}] cannot be deleted because it is the default pipeline for {len(users)} "
                    f"index(es) including [{', '.join(users[:3])}]",
                    source="server/src/main/java/org/elasticsearch/ingest/IngestService.java (innerDelete)",
                )
            del self.pipelines[pid]
            return 200, {"acknowledged": True}
        raise _no_handler(method, f"_ingest/pipeline/{pid}")

    def _pipeline(self, pid: str) -> Pipeline:
        pipeline = self.pipelines.get(pid)
        if pipeline is None:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"pipeline with id [{pid}] does not exist",
                source="server/src/main/java/org/elasticsearch/ingest/IngestService.java",
            )
        return pipeline

    # -- templates ---------------------------------------------------------------------------------------------
    def _component_api(
        self, method: str, rest: list[str], params: dict[str, list[str]], body: Any, p: Principal | None
    ) -> Response:
        if len(rest) != 1:
            raise _no_handler(method, "_component_template")
        name = rest[0]
        if method == "PUT" or method == "POST":
            self._require_cluster(p, "cluster:admin/component_template/put")
            if _param(params, "create") == "true" and name in self.component_templates:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"component template [{name}] already exists",
                    source=TEMPLATE_SRC,
                )
            self._put_component(name, body)
            self._notify("component_template")
            return 200, {"acknowledged": True}
        if method == "GET":
            self._require_cluster(p, "cluster:admin/component_template/get")
            if name not in self.component_templates:
                raise EsError(
                    404,
                    "resource_not_found_exception",
                    f"component template matching [{name}] not found",
                    source="GetComponentTemplateAction",
                )
            return 200, {
                "component_templates": [
                    {"name": name, "component_template": _normalized_template(self.component_templates[name])}
                ]
            }
        if method == "DELETE":
            # TransportDeleteComponentTemplateAction: a comma-separated list (wildcards expanded); any missing -> 404
            self._require_cluster(p, "cluster:admin/component_template/delete")
            names = _expand_names(name, self.component_templates)
            for one in names:
                users = sorted(
                    t
                    for t, b in self.index_templates.items()
                    if one in (b.get("composed_of") or [])
                    and one not in (b.get("ignore_missing_component_templates") or [])
                )
                if users:
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"component templates [{one}] cannot be removed as they are still in use by index templates "
                        f"[{', '.join(users)}]",
                        source=TEMPLATE_SRC,
                    )
            for one in names:
                del self.component_templates[one]
            return 200, {"acknowledged": True}
        raise _no_handler(method, f"_component_template/{name}")

    def _put_component(self, name: str, body: Any) -> None:
        if not isinstance(body, Mapping) or "template" not in body:
            raise EsError(400, "x_content_parse_exception", "Required [template]", source=TEMPLATE_SRC)
        for key in body:
            if key not in ("template", "version", "_meta", "deprecated"):
                raise parse_error("component_template", key, source="ComponentTemplate.PARSER")
        template = body["template"]
        for key in template:
            if key not in ("settings", "mappings", "aliases", "lifecycle", "data_stream_options"):
                raise parse_error("template", key, source="Template.PARSER")
        _refuse_unmodelled(template)
        # "Immediate validation of the component template only": its own settings and mappings, nothing else
        self._validate_template_body(template.get("settings"), template.get("mappings"))
        self.component_templates[name] = copy.deepcopy(dict(body))

    def _validate_template_body(self, settings: Any, mappings: Any) -> None:
        flat = flatten_settings(settings)
        validate_settings(flat, plugins=self.plugins)
        analysis = Analysis.from_settings(flat, plugins=self.plugins)
        if mappings:
            parse_mapping(mappings, analysis=analysis, version=self.version_tuple, inference_ids=self.endpoints)

    def _index_template_api(
        self, method: str, rest: list[str], params: dict[str, list[str]], body: Any, p: Principal | None
    ) -> Response:
        if not rest and method == "GET":  # every composable template, the built-in ones included
            self._require_cluster(p, "indices:admin/index_template/get")
            shown = [
                {"name": n, "index_template": _normalized_template({k: v for k, v in b.items() if k != "_built_in"})}
                for n, b in sorted(self.index_templates.items())
            ]
            return 200, {"index_templates": shown}
        if len(rest) != 1:
            raise _no_handler(method, "_index_template")
        name = rest[0]
        if method in ("PUT", "POST"):
            self._require_cluster(p, "indices:admin/index_template/put")
            if _param(params, "create") == "true" and name in self.index_templates:  # addIndexTemplateV2
                raise EsError(
                    400, "illegal_argument_exception", f"index template [{name}] already exists", source=TEMPLATE_SRC
                )
            self._put_index_template(name, body)
            self._notify("index_template")
            return 200, {"acknowledged": True}
        if method == "GET":
            self._require_cluster(p, "indices:admin/index_template/get")
            got = self.index_templates.get(name)
            if got is None:
                raise EsError(
                    404,
                    "resource_not_found_exception",
                    f"index template matching [{name}] not found",
                    source="GetComposableIndexTemplateAction",
                )
            shown = {k: v for k, v in got.items() if k != "_built_in"}
            return 200, {"index_templates": [{"name": name, "index_template": _normalized_template(shown)}]}
        if method == "DELETE":
            # TransportDeleteComposableIndexTemplateAction: a comma-separated list (wildcards expanded)
            self._require_cluster(p, "indices:admin/index_template/delete")
            for one in _expand_names(name, self.index_templates, what="index_template"):
                del self.index_templates[one]
            return 200, {"acknowledged": True}
        raise _no_handler(method, f"_index_template/{name}")

    def _put_index_template(self, name: str, body: Any) -> None:
        if not isinstance(body, Mapping):
            raise EsError(400, "parse_exception", "request body is required", source=TEMPLATE_SRC)
        allowed = {
            "index_patterns", "composed_of", "priority", "template", "version", "_meta", "data_stream",
            "allow_auto_create", "ignore_missing_component_templates", "deprecated",
        }  # fmt: skip
        for key in body:
            if key not in allowed:
                raise parse_error("index_template", key, source="ComposableIndexTemplate.PARSER")
        if body.get("data_stream") is not None:
            raise DoubleLimit("data stream index templates")
        _refuse_unmodelled(body.get("template") or {})
        patterns = body.get("index_patterns")
        if not patterns:
            raise EsError(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: index patterns are missing;",
                source="PutComposableIndexTemplateAction.Request.validate",
            )
        patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        problems = _template_problems(name, [str(p) for p in patterns])
        if problems:
            # MetadataIndexTemplateService.validate: every error in one ValidationException, whose message becomes
            # the InvalidIndexTemplateException's cause
            listed = "".join(f"{i}: {e};" for i, e in enumerate(problems, start=1))
            raise _invalid_template(name, f"Validation Failed: {listed}")
        composed = list(body.get("composed_of") or [])
        ignore = set(body.get("ignore_missing_component_templates") or [])
        missing = [c for c in composed if c not in self.component_templates and c not in ignore]
        if missing and not ignore:
            raise _invalid_template(
                name, f"index template [{name}] specifies component templates [{', '.join(missing)}] that do not exist"
            )
        if missing:  # validateV2TemplateRequest, with a non-empty ignore list
            raise _invalid_template(
                name,
                f"index template [{name}] specifies a missing component templates [{', '.join(missing)}] that does not "
                "exist and is not part of 'ignore_missing_component_templates'",
            )
        priority = int(body.get("priority") or 0)
        conflicts = {
            other: list(b["index_patterns"])
            for other, b in sorted(self.index_templates.items())
            if other != name
            and int(b.get("priority") or 0) == priority
            and any_intersect(patterns, b["index_patterns"])
        }
        if conflicts:
            shown = ", ".join(f"{k} => [{', '.join(v)}]" for k, v in conflicts.items())
            raise EsError(
                400,
                "illegal_argument_exception",
                f"index template [{name}] has index patterns [{', '.join(patterns)}] matching patterns from existing "
                f"templates [{','.join(conflicts)}] with patterns ({shown}) that have the same priority [{priority}], "
                "multiple index templates may not match during index creation, please use a different priority",
                source=TEMPLATE_SRC + " (findConflictingV2Templates)",
            )
        template = body.get("template") or {}
        settings, mappings = self._compose(composed, template)
        try:
            self._validate_template_body(settings, mappings)
        except EsError as exc:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"composable template [{name}] template after composition "
                + (f"with component templates [{', '.join(composed)}] " if composed else "")
                + "is invalid",
                source=TEMPLATE_SRC + " (validateCompositeTemplate)",
                caused_by=exc.error_object(),
            ) from None
        self.index_templates[name] = {**copy.deepcopy(dict(body)), "index_patterns": patterns}

    def _compose(
        self, composed: list[str], template: Mapping[str, Any], request: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        settings: dict[str, Any] = {}
        mapping_parts: list[Any] = []
        for cname in composed:
            comp = (self.component_templates.get(cname) or {}).get("template") or {}
            settings.update(flatten_settings(comp.get("settings")))
            mapping_parts.append(comp.get("mappings"))
        settings.update(flatten_settings(template.get("settings")))
        mapping_parts.append(template.get("mappings"))
        if request:
            settings.update(flatten_settings(request.get("settings")))
            mapping_parts.append(request.get("mappings"))
        return settings, merge_mappings(mapping_parts)

    # -- scripts / templates -------------------------------------------------------------------------------------
    def _scripts_api(self, method: str, rest: list[str], body: Any, p: Principal | None) -> Response:
        if len(rest) != 1:
            raise _no_handler(method, "_scripts")
        sid = rest[0]
        if method in ("PUT", "POST"):
            self._require_cluster(p, "cluster:admin/script/put")
            script = (body or {}).get("script")
            if not isinstance(script, Mapping) or "source" not in script or "lang" not in script:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    "must specify lang and source for stored script",
                    source="StoredScriptSource",
                )
            if script["lang"] not in ("mustache", "painless"):
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"script_lang not supported [{script['lang']}]",
                    source="ScriptService",
                )
            source = script["source"] if isinstance(script["source"], str) else json.dumps(script["source"])
            if script["lang"] == "mustache":
                try:
                    render_template(source, {}, check_only=True)
                except MustacheError as exc:
                    raise EsError(
                        400,
                        "general_script_exception",
                        f"Failed to compile stored script [{sid}] using lang [mustache]",
                        source="MustacheScriptEngine",
                        caused_by={"type": "mustache_exception", "reason": str(exc)},
                    ) from None
            else:
                raise DoubleLimit("stored painless scripts")
            self.scripts[sid] = {"lang": script["lang"], "source": source}
            return 200, {"acknowledged": True}
        if method == "GET":
            self._require_cluster(p, "cluster:admin/script/get")
            if sid not in self.scripts:
                return 404, {"_id": sid, "found": False}
            return 200, {"_id": sid, "found": True, "script": dict(self.scripts[sid])}
        if method == "DELETE":
            self._require_cluster(p, "cluster:admin/script/delete")
            if self.scripts.pop(sid, None) is None:
                raise EsError(
                    404, "resource_not_found_exception", f"stored script [{sid}] does not exist", source="ScriptService"
                )
            return 200, {"acknowledged": True}
        raise _no_handler(method, f"_scripts/{sid}")

    def _render(self, body: Any, sid: str | None) -> dict[str, Any]:
        body = dict(body or {})
        sid = sid or body.get("id")
        if sid is not None:
            script = self.scripts.get(str(sid))
            if script is None:
                raise EsError(
                    404,
                    "resource_not_found_exception",
                    f"unable to find script [{sid}] in cluster state",
                    source="ScriptService",
                )
            source = script["source"]
        else:
            raw = body.get("source")
            source = raw if isinstance(raw, str) else json.dumps(raw)
        try:
            text = render_template(source, body.get("params") or {})
        except MustacheError as exc:
            raise EsError(400, "general_script_exception", str(exc), source="MustacheScriptEngine") from None
        try:
            rendered: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EsError(
                400,
                "x_content_parse_exception",
                f"rendered template is not JSON: {exc}",
                source="SearchTemplateResponse",
            ) from None
        return rendered

    # -- indices -------------------------------------------------------------------------------------------------
    def _resolve(self, names: str, *, allow_missing: bool = False) -> list[str]:
        """Concrete indices of an expression: names, aliases (every index behind them) and wildcards, which match
        index and alias names alike (``IndexNameExpressionResolver`` with the default ``IndicesOptions``)."""
        out: list[str] = []
        for name in names.split(","):
            if "*" in name:
                found = {n for n in self.indices if glob_match(name, n)}
                for alias, members in self.aliases.items():
                    if glob_match(name, alias):
                        found.update(members)
                out.extend(n for n in sorted(found) if n not in out)
            elif name in self.indices:
                out.append(name)
            elif name in self.aliases:
                out.extend(n for n in sorted(self.aliases[name]) if n not in out)
            elif not allow_missing:
                raise _index_missing(name)
        return out

    def _single(self, name: str) -> str:
        """The one index a single-index request (GET or DELETE of a document) reaches through ``name``: the index, or
        the one index behind an alias (``IndexNameExpressionResolver.concreteSingleIndex``)."""
        if name in self.aliases:
            members = sorted(self.aliases[name])
            if len(members) != 1:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"alias [{name}] has more than one index associated with it [{', '.join(members)}], can't execute "
                    "a single index op",
                    source=RESOLVER_SRC,
                )
            return members[0]
        return name

    def _write_index(self, name: str) -> str:
        """The index a write through ``name`` lands in: the index itself, or the alias's write index: the one with
        ``is_write_index: true``, else its only index unless that says ``false`` (``IndexAbstraction.Alias``,
        ``IndexNameExpressionResolver``: "no write index is defined for alias")."""
        if name not in self.aliases:
            return name
        members = self.aliases[name]
        flagged = [n for n, props in members.items() if props.get("is_write_index") is True]
        if flagged:
            return flagged[0]
        if len(members) == 1:
            ((only, props),) = members.items()
            if props.get("is_write_index") is not False:
                return only
        raise EsError(
            400,
            "illegal_argument_exception",
            f"no write index is defined for alias [{name}]. The write index may be explicitly disabled using "
            "is_write_index=false or the alias points to multiple indices without one being designated as a write "
            "index",
            source=RESOLVER_SRC,
        )

    # -- aliases -------------------------------------------------------------------------------------------------
    def _get_aliases(
        self, indices: str, p: Principal | None, *, names: str | None = None, head: bool = False
    ) -> Response:
        """``GET <indices>/_alias``: every index the expression reaches with its aliases (``{}`` when none);
        ``GET|HEAD [<indices>/]_alias/<names>``: only the indices holding one of those aliases, 404 when none
        (``RestGetAliasesAction``: ``alias [x] missing``)."""
        resolved = self._resolve(indices, allow_missing=indices == "*")
        self._require_index(p, "indices:admin/aliases/get", resolved)
        wanted = None if names is None else [n for n in names.split(",") if n]
        out: dict[str, Any] = {}
        for n in resolved:
            mine = {
                a: dict(members[n])
                for a, members in sorted(self.aliases.items())
                if n in members and (wanted is None or any(glob_match(w, a) for w in wanted))
            }
            if mine or wanted is None:
                out[n] = {"aliases": mine}
        if wanted is not None:
            found = {a for entry in out.values() for a in entry["aliases"]}
            missing = [w for w in wanted if "*" not in w and w not in found]
            if head:
                return (200 if found and not missing else 404), None
            if missing:
                shown = ",".join(missing)
                return 404, {
                    "error": f"alias{'es' if len(missing) > 1 else ''} [{shown}] missing",
                    "status": 404,
                    **out,
                }
        return 200, out

    def _update_aliases(self, body: Any, p: Principal | None) -> Response:
        """``POST _aliases``: every action applied at once or none (``MetadataIndexAliasesService.applyAliasActions``
        builds one new cluster state: ``remove_index`` deletions first, then the alias actions in order).

        Refused as Elasticsearch refuses them, and then nothing is applied:
        - an action other than ``add``, ``remove``, ``remove_index``, or a field the double does not model
          (``filter``, routing): a double limit;
        - ``must_exist`` on ``add`` or ``remove_index`` (``indices.update_aliases/40_must_exist.yml``, "Alias
          must_exist only on remove": bad_request);
        - a missing index (``index_not_found_exception``);
        - ``remove_index`` of an alias (``IndexNameExpressionResolver``: "matches an alias, specify the corresponding
          concrete indices instead");
        - an alias named like an existing index (``AliasValidator``: "an index or data stream exists with the same name
          as the alias"); ``remove_index`` in the same request frees the name
          (``indices.update_aliases/30_remove_index_and_replace_with_alias.yml``);
        - ``remove`` of an alias that is not there with ``must_exist: true``: 404 ``aliases_not_found_exception``, the
          whole request fails (``40_must_exist.yml``, "Remove alias with must_exist"); without it (8.14+) the
          action fails alone, reported in ``action_results`` with ``errors: true``, and the others are applied
          ("Partial success with must_exist == null");
        - two write indices for one alias (``IndexAbstraction.Alias``: "has more than one write index").
        """
        if not isinstance(body, Mapping) or not isinstance(body.get("actions"), list):
            raise EsError(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: Must specify at least one alias action;",
                source=ALIAS_ACTIONS_SRC,
            )
        unknown_top = sorted(set(body) - {"actions"})
        if unknown_top:
            raise parse_error("aliases", unknown_top[0], source=ALIAS_ACTIONS_SRC)
        if not body["actions"]:
            raise EsError(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: Must specify at least one alias action;",
                source=ALIAS_ACTIONS_SRC,
            )
        allowed = {
            "add": {"index", "indices", "alias", "aliases", "is_write_index", "is_hidden"},
            "remove": {"index", "indices", "alias", "aliases", "must_exist"},
            "remove_index": {"index", "indices"},
        }
        parsed: list[tuple[str, list[str], list[str], dict[str, Any]]] = []
        for action in body["actions"]:
            if not isinstance(action, Mapping) or len(action) != 1:
                raise EsError(400, "x_content_parse_exception", "[aliases] failed to parse field [actions]",
                              source=ALIAS_ACTIONS_SRC)  # fmt: skip
            ((kind, spec),) = action.items()
            if kind not in allowed:
                raise DoubleLimit(f"alias action [{kind}]")
            spec = dict(spec or {})
            if "must_exist" in spec and kind != "remove":
                raise EsError(
                    400,
                    "x_content_parse_exception",
                    f"[{kind}] unknown field [must_exist]",
                    source=ALIAS_ACTIONS_SRC,
                )
            extra = sorted(set(spec) - allowed[kind])
            if extra:
                raise DoubleLimit(f"alias action [{kind}] field [{extra[0]}]")
            indices = [spec["index"]] if "index" in spec else list(spec.get("indices") or [])
            aliases = [spec["alias"]] if "alias" in spec else list(spec.get("aliases") or [])
            if isinstance(spec.get("aliases"), str):
                aliases = [spec["aliases"]]
            if not indices:
                raise EsError(
                    400,
                    "action_request_validation_exception",
                    f"Validation Failed: 1: One of [index/indices] is required for [{kind}];",
                    source=ALIAS_ACTIONS_SRC,
                )
            if kind != "remove_index" and not aliases:
                raise EsError(
                    400,
                    "action_request_validation_exception",
                    f"Validation Failed: 1: One of [alias/aliases] is required for [{kind}];",
                    source=ALIAS_ACTIONS_SRC,
                )
            if any("*" in str(i) for i in indices) or any("*" in str(a) for a in aliases):
                raise DoubleLimit("wildcards in alias actions")
            parsed.append((kind, [str(i) for i in indices], [str(a) for a in aliases], spec))
        for kind, indices, _, _ in parsed:
            for index in indices:
                if kind == "remove_index" and index in self.aliases:
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"The provided expression [{index}] matches an alias, specify the corresponding concrete "
                        "indices instead.",
                        source=RESOLVER_SRC,
                    )
                if index not in self.indices:
                    raise _index_missing(index)
        self._require_index(p, "indices:admin/aliases", [i for _, ix, _, _ in parsed for i in ix])
        deleted = {i for kind, ix, _, _ in parsed if kind == "remove_index" for i in ix}
        remaining = {n for n in self.indices if n not in deleted}
        aliases = {a: {i: dict(props) for i, props in m.items() if i not in deleted} for a, m in self.aliases.items()}
        results: list[dict[str, Any]] = []
        errors = False
        for kind, indices, names, spec in parsed:
            described = {"type": kind, "indices": list(indices), **({"aliases": list(names)} if names else {})}
            if kind == "remove_index":
                results.append({"action": described, "status": 200})
                continue
            if kind == "add":
                for name in names:
                    # AliasValidator.validateAlias: validateAliasStandalone (validateIndexOrAliasName, which has no
                    # lowercase rule) before the same-name check; InvalidAliasNameException(name, desc) renders
                    # "Invalid alias name [{}]: {}"
                    problem = _name_problem(name)
                    if problem is None and name in remaining:
                        problem = "an index or data stream exists with the same name as the alias"
                    if problem is not None:
                        raise EsError(
                            400,
                            "invalid_alias_name_exception",
                            f"Invalid alias name [{name}]: {problem}",
                            source=ALIAS_VALIDATOR_SRC + "; MetadataCreateIndexService.validateIndexOrAliasName",
                        )
                    for index in indices:
                        props = {"is_write_index": spec["is_write_index"]} if "is_write_index" in spec else {}
                        aliases.setdefault(name, {})[index] = props
                results.append({"action": described, "status": 200})
                continue
            missing = [n for n in names if not any(n in aliases and i in aliases[n] for i in indices)]
            if missing:
                if spec.get("must_exist") is True:
                    raise EsError(
                        404,
                        "aliases_not_found_exception",
                        f"aliases [{','.join(missing)}] missing",
                        source=ALIASES_SRC,
                        **{"resource.type": "aliases", "resource.id": ",".join(missing)},
                    )
                errors = True
                err = EsError(404, "aliases_not_found_exception", f"aliases [{','.join(missing)}] missing",
                              source=ALIASES_SRC)  # fmt: skip
                results.append({"action": described, "status": 404, "error": err.error_object()})
                continue
            for name in names:
                for index in indices:
                    aliases.get(name, {}).pop(index, None)
                if not aliases.get(name):
                    aliases.pop(name, None)
            results.append({"action": described, "status": 200})
        aliases = {a: m for a, m in aliases.items() if m}
        for name, members in aliases.items():
            writers = sorted(i for i, props in members.items() if props.get("is_write_index") is True)
            if len(writers) > 1:
                raise EsError(
                    400,
                    "illegal_state_exception",
                    f"alias [{name}] has more than one write index [{','.join(writers)}]",
                    source="server/src/main/java/org/elasticsearch/cluster/metadata/IndexAbstraction.java",
                )
        for index in deleted:
            del self.indices[index]
        self.aliases = aliases
        self._notify("aliases")
        out: dict[str, Any] = {"acknowledged": True, "errors": errors}
        if errors:
            out["action_results"] = results
        return 200, out

    def _index_api(
        self, method: str, name: str, params: dict[str, list[str]], body: Any, p: Principal | None
    ) -> Response:
        if method == "HEAD":
            self._require_index(p, "indices:admin/get", [name])
            return (200 if name in self.indices or name in self.aliases else 404), None
        if method == "PUT":
            self._require_index(p, "indices:admin/create", [name])
            if name in self.indices:
                raise EsError(
                    400,
                    "resource_already_exists_exception",
                    f"index [{name}/strict-double] already exists",
                    source=CREATE_SRC,
                    index=name,
                )
            self.create_index(name, body or {})
            return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}
        if method == "DELETE":
            for part in name.split(","):
                if part in self.aliases:  # MetadataDeleteIndexService resolves names without aliases
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"The provided expression [{part}] matches an alias, specify the corresponding concrete "
                        "indices instead.",
                        source=RESOLVER_SRC,
                    )
            names = self._resolve(name)
            self._require_index(p, "indices:admin/delete", names)
            for n in names:
                del self.indices[n]
                for members in self.aliases.values():
                    members.pop(n, None)
            self.aliases = {a: m for a, m in self.aliases.items() if m}
            return 200, {"acknowledged": True}
        if method == "GET":
            names = self._resolve(name)
            self._require_index(p, "indices:admin/get", names)
            return 200, {
                n: {
                    "aliases": {a: dict(m[n]) for a, m in sorted(self.aliases.items()) if n in m},
                    "mappings": self.indices[n].mapping.to_dict(),
                    "settings": _nest(self.indices[n].settings),
                }
                for n in names
            }
        raise _no_handler(method, name)

    def create_index(self, name: str, request: Mapping[str, Any]) -> IndexState:
        """Create ``name`` from the highest-priority matching index template plus the request body."""
        # MetadataCreateIndexService.validateIndexName: validateIndexOrAliasName, then lowercase, then the alias check
        problem = _name_problem(name) or ("must be lowercase" if name.lower() != name else None)
        if problem is None and name in self.aliases:
            problem = "already exists as alias"
        if problem is not None:
            raise EsError(
                400,
                "invalid_index_name_exception",
                f"Invalid index name [{name}], {problem}",
                source=CREATE_SRC + " (validateIndexName / validateIndexOrAliasName; InvalidIndexNameException)",
                index=name,
            )
        for key in request or {}:
            if key not in ("settings", "mappings", "aliases"):
                raise parse_error("create_index", key, source="CreateIndexRequest")
        _refuse_unmodelled(request or {})
        candidates = [
            (int(b.get("priority") or 0), t)
            for t, b in self.index_templates.items()
            if not b.get("_built_in") and any(glob_match(pat, name) for pat in b["index_patterns"])
        ]
        template: Mapping[str, Any] = {}
        composed: list[str] = []
        if candidates:
            _, tname = max(candidates)
            tbody = self.index_templates[tname]
            template = tbody.get("template") or {}
            composed = list(tbody.get("composed_of") or [])
        settings, mappings = self._compose(composed, template, request)
        validate_settings(settings, plugins=self.plugins)
        analysis = Analysis.from_settings(settings, plugins=self.plugins)
        mapping = parse_mapping(mappings, analysis=analysis, version=self.version_tuple, inference_ids=self.endpoints)
        state = IndexState(name, settings, mapping, analysis)
        self.indices[name] = state
        self._notify("create_index")
        return state

    def _put_mapping(self, names: list[str], body: Any, p: Principal | None) -> Response:
        """``PUT <index>/_mapping`` (``TransportPutMappingAction``, ``MapperService.merge``): new fields are added and
        ``_meta`` replaced; a field cannot change its type ("mapper [f] cannot be changed from type [a] to [b]",
        ``FieldMapper.checkIncomingMergeType``) nor, keeping it, a parameter that is not updateable
        (:func:`~tests.support.double.mapping.merge_conflicts`); what a live index's mapping refuses at creation it
        refuses here."""
        self._require_index(p, "indices:admin/mapping/put", names)
        if not isinstance(body, Mapping) or not body:
            raise EsError(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: mapping source is empty;",
                source="server/src/main/java/org/elasticsearch/action/admin/indices/mapping/put/PutMappingRequest.java",
            )
        extra = sorted(set(body) - {"properties", "_meta", "dynamic"})
        if extra:
            raise DoubleLimit(f"PUT _mapping with {extra}")
        for name in names:
            state = self.indices[name]
            current = state.mapping.to_dict()
            props = current.get("properties") or {}
            for fname, spec in (body.get("properties") or {}).items():
                old = props.get(fname)
                if isinstance(old, Mapping) and isinstance(spec, Mapping) and old.get("type") != spec.get("type"):
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"mapper [{fname}] cannot be changed from type [{old.get('type')}] to [{spec.get('type')}]",
                        source="server/src/main/java/org/elasticsearch/index/mapper/FieldMapper.java",
                    )
                conflicts = merge_conflicts(fname, old, spec) if isinstance(old, Mapping) else []
                if conflicts and isinstance(spec, Mapping):
                    # FieldMapper.Conflicts.check: one message listing every conflicting parameter of the field
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"Mapper for [{fname}] conflicts with existing mapper:\n\t" + "\n\t".join(conflicts),
                        source="server/src/main/java/org/elasticsearch/index/mapper/FieldMapper.java (Conflicts)",
                    )
            merged = merge_mappings([current, body])
            state.mapping = parse_mapping(
                merged, analysis=state.analysis, version=self.version_tuple, inference_ids=self.endpoints
            )
        return 200, {"acknowledged": True}

    def _refresh(self, names: list[str], p: Principal | None) -> Response:
        self._require_index(p, "indices:admin/refresh", names)
        for n in names:
            self.indices[n].refresh()
        return 200, {"_shards": {"total": len(names), "successful": len(names), "failed": 0}}

    # -- writes --------------------------------------------------------------------------------------------------
    def _write(
        self,
        index: str,
        doc_id: str | None,
        source: Any,
        *,
        pipeline: str | None,
        op_type: str,
        if_seq_no: int | None = None,
        if_primary_term: int | None = None,
        p: Principal | None,
    ) -> dict[str, Any]:
        """Index one document; returns the bulk item body (status, result or error)."""
        action = "indices:data/write/index:op_type/create" if op_type == "create" else "indices:data/write/index"
        try:
            index = self._write_index(index)
            self._require_index(p, action, [index])
            if not isinstance(source, Mapping):
                raise EsError(
                    400, "mapper_parsing_exception", "failed to parse: source is not an object", source=BULK_SRC
                )
            if index not in self.indices:
                self._require_index(p, "indices:admin/auto_create", [index])
                self.create_index(index, {})
            state = self.indices[index]
            doc = copy.deepcopy(dict(source))
            meta: dict[str, Any] = {"_index": index, "_id": doc_id}
            pid = pipeline or state.settings.get("index.default_pipeline")
            if pid and pid != "_none":
                try:
                    run_pipeline(self._pipeline(str(pid)), doc, meta, IngestContext(self.endpoints))
                except IngestFailure as exc:
                    return {"_index": index, "_id": meta.get("_id"), "status": exc.status, "error": exc.error_object()}
            if meta.get("_index") != index:
                raise DoubleLimit("a pipeline that changes _index")
            final_id = meta.get("_id") or f"auto-{next(self._seq)}"
            validate_document(state.mapping, doc, final_id)
            semantic = self._semantic_chunks(state, doc)
            current = state.docs.get(final_id)
            if op_type == "create" and current is not None:
                raise EsError(
                    409,
                    "version_conflict_engine_exception",
                    f"[{final_id}]: version conflict, document already exists (current version [{current.version}])",
                    source="server/src/main/java/org/elasticsearch/index/engine/InternalEngine.java",
                    index=index,
                )
            if if_seq_no is not None:
                have = (current.seq_no, 1) if current is not None else (-2, 0)
                if current is None or have != (if_seq_no, if_primary_term):
                    raise EsError(
                        409,
                        "version_conflict_engine_exception",
                        f"[{final_id}]: version conflict, required seqNo [{if_seq_no}], primary term "
                        f"[{if_primary_term}]. "
                        + (
                            f"current document has seqNo [{have[0]}] and primary term [{have[1]}]"
                            if current is not None
                            else "but no document was found"
                        ),
                        source="server/src/main/java/org/elasticsearch/index/engine/InternalEngine.java",
                        index=index,
                    )
            seq = next(self._seq)
            version = (current.version + 1) if current is not None else 1
            state.docs[final_id] = Doc(doc, seq, version, semantic)
            return {
                "_index": index,
                "_id": final_id,
                "_version": version,
                "result": "updated" if current is not None else "created",
                "_shards": {"total": 1, "successful": 1, "failed": 0},
                "_seq_no": seq,
                "_primary_term": 1,
                "status": 200 if current is not None else 201,
            }
        except EsError as exc:
            return {"_index": index, "_id": doc_id, "status": exc.status, "error": exc.error_object()}

    def _semantic_chunks(self, state: IndexState, doc: Mapping[str, Any]) -> dict[str, list[tuple[str, list[float]]]]:
        out: dict[str, list[tuple[str, list[float]]]] = {}
        for name, spec in state.mapping.fields.items():
            if spec.type != "semantic_text" or not isinstance(doc.get(name), str):
                continue
            inference_id = spec.params.get("inference_id", ".elser-2-elasticsearch")
            endpoint = self.endpoints[inference_id]
            licensed = self.license_status == "active" and self.license_type in ("enterprise", "trial")
            if not licensed and endpoint.service != "elastic":
                raise compliance("inference")
            settings = spec.params.get("chunking_settings") or {"strategy": "sentence", "max_chunk_size": 250}
            out[name] = [(chunk, endpoint.embed(chunk)) for chunk in _chunk(str(doc[name]), settings)]
        return out

    def _doc_api(
        self,
        method: str,
        index: str,
        doc_id: str | None,
        params: dict[str, list[str]],
        body: Any,
        p: Principal | None,
        *,
        create: bool,
    ) -> Response:
        if method in ("PUT", "POST"):
            op_type = "create" if create or _param(params, "op_type") == "create" else "index"
            seq = _param(params, "if_seq_no")
            term = _param(params, "if_primary_term")
            item = self._write(
                index,
                doc_id,
                body,
                pipeline=_param(params, "pipeline"),
                op_type=op_type,
                if_seq_no=int(seq) if seq is not None else None,
                if_primary_term=int(term) if term is not None else None,
                p=p,
            )
            if _param(params, "refresh") in ("true", "wait_for", "") and item.get("_index") in self.indices:
                self.indices[item["_index"]].refresh()
            self._notify("doc")
            if "error" in item:
                return item["status"], {
                    "error": {"root_cause": [item["error"]], **item["error"]},
                    "status": item["status"],
                }
            return item.pop("status"), item
        if method in ("GET", "HEAD"):
            _refuse_unrecognized(params, GET_DOC_PARAMS, f"/{index}/_doc/{doc_id}")
            index = self._single(index)
            self._require_index(p, "indices:data/read/get", [index])
            if index not in self.indices:
                raise _index_missing(index)
            stored = self.indices[index].docs.get(str(doc_id))
            if stored is None:
                return 404, {"_index": index, "_id": doc_id, "found": False}
            view = self._view(index, realtime=True)
            exclude_vectors = _param(params, "_source_exclude_vectors")
            spec: dict[str, Any] = {"exclude_vectors": False} if exclude_vectors == "false" else {}
            # RestGetAction -> FetchSourceContext.parseFromRestRequest: comma-separated _source_includes/_excludes
            for key in ("includes", "excludes"):
                given = _param(params, f"_source_{key}")
                if given:
                    spec[key] = [f for f in given.split(",") if f]
            src = Searcher(
                [view],
                version=self.version_tuple,
                license_type="",
                license_active=False,
                lookup=self._lookup,
                embed=self._embed,
            ).filter_source(view, stored.source, spec)
            return 200, {
                "_index": index,
                "_id": doc_id,
                "_version": stored.version,
                "_seq_no": stored.seq_no,
                "_primary_term": 1,
                "found": True,
                "_source": src,
            }
        if method == "DELETE":
            index = self._write_index(index)
            self._require_index(p, "indices:data/write/delete", [index])
            state = self.indices.get(index)
            if state is None or state.docs.pop(str(doc_id), None) is None:
                return 404, {"_index": index, "_id": doc_id, "result": "not_found"}
            self._notify("delete")
            return 200, {"_index": index, "_id": doc_id, "result": "deleted"}
        raise _no_handler(method, f"{index}/_doc")

    def _bulk(
        self, default_index: str | None, params: dict[str, list[str]], lines: Any, p: Principal | None
    ) -> Response:
        lines = list(lines or [])
        items = []
        i = 0
        touched: set[str] = set()
        while i < len(lines):
            action = lines[i]
            if not isinstance(action, Mapping) or len(action) != 1:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"Malformed action/metadata line [{i + 1}]",
                    source="BulkRequestParser",
                )
            ((op, meta),) = action.items()
            if op not in ("index", "create", "delete", "update"):
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"Malformed action/metadata line [{i + 1}], expected one of [create, delete, index, update] but "
                    f"found [{op}]",
                    source="BulkRequestParser",
                )
            if op == "update":
                raise DoubleLimit("bulk update")
            src = lines[i + 1] if op != "delete" else None
            i += 1 if op == "delete" else 2
            index = meta.get("_index", default_index)
            if index is None:
                raise EsError(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: index is missing;",
                    source="BulkRequest",
                )
            doc_id = meta.get("_id")
            custom = self.bulk_fault(op, dict(meta), src) if self.bulk_fault is not None else None
            if custom is not None:
                items.append(custom)
                continue
            if op == "delete":
                try:
                    index = self._write_index(index)
                    self._require_index(p, "indices:data/write/delete", [index])
                    state = self.indices.get(index)
                    gone = state is not None and state.docs.pop(str(doc_id), None) is not None
                    items.append(
                        {
                            "delete": {
                                "_index": index,
                                "_id": doc_id,
                                "result": "deleted" if gone else "not_found",
                                "status": 200 if gone else 404,
                            }
                        }
                    )
                except EsError as exc:
                    items.append(
                        {"delete": {"_index": index, "_id": doc_id, "status": exc.status, "error": exc.error_object()}}
                    )
                continue
            item = self._write(
                index,
                None if doc_id is None else str(doc_id),
                src,
                pipeline=meta.get("pipeline") or _param(params, "pipeline"),
                op_type="create" if op == "create" else "index",
                p=p,
            )
            touched.add(str(item.get("_index", index)))
            items.append({op: item})
        if _param(params, "refresh") in ("true", "wait_for", ""):
            for n in touched:
                if n in self.indices:
                    self.indices[n].refresh()
        self._notify("bulk")
        errors = any("error" in next(iter(it.values())) for it in items)
        return 200, {"errors": errors, "took": 1, "items": items}

    # -- reads ---------------------------------------------------------------------------------------------------
    def _view(self, name: str, *, realtime: bool = False) -> IndexView:
        state = self.indices[name]
        docs = state.docs if realtime else state.searchable
        flat = state.settings
        k1 = (
            float(flat.get("index.similarity.default.k1", 1.2))
            if flat.get("index.similarity.default.type") == "BM25"
            else 1.2
        )
        b = (
            float(flat.get("index.similarity.default.b", 0.75))
            if flat.get("index.similarity.default.type") == "BM25"
            else 0.75
        )
        semantic: dict[str, dict[str, list[tuple[str, list[float]]]]] = {}
        for doc_id, d in docs.items():
            for fld, chunks in d.semantic.items():
                semantic.setdefault(fld, {})[doc_id] = chunks
        return IndexView(
            name,
            {k: d.source for k, d in docs.items()},
            state.mapping.fields,
            state.analyzer_definitions(),
            k1,
            b,
            semantic,
            shards=int(flat.get("index.number_of_shards", 1)),
            max_terms_count=int(flat.get("index.max_terms_count", 65536)),
        )

    def _lookup(self, index: str, doc_id: str, path: str) -> list[Any]:
        for hook in list(self.before_lookup):
            hook(index, doc_id)
        self.lookups += 1
        index = self._single(index)
        if index not in self.indices:
            raise _index_missing(index)
        stored = self.indices[index].docs.get(str(doc_id))
        if stored is None:
            return []
        node: Any = stored.source
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            return []
        return list(node) if isinstance(node, list) else [node]

    def _embed(self, index: str, fld: str, text: str) -> list[float]:
        spec = self.indices[index].mapping.fields[fld]
        inference_id = spec.params.get("inference_id", ".elser-2-elasticsearch")
        endpoint = self.endpoints.get(inference_id)
        if endpoint is None:  # the field's endpoint was deleted: the semantic query's model lookup fails
            raise EsError(
                404,
                "resource_not_found_exception",
                f"Inference endpoint not found [{inference_id}]",
                source="x-pack/plugin/inference/.../registry/ModelRegistry.java",
            )
        return endpoint.embed(text)

    def _rerank(self, inference_id: str, query: str, text: str) -> float:
        """Score one document with a ``rerank`` endpoint (``text_similarity_reranker``)."""
        endpoint = self.endpoints.get(inference_id)
        if endpoint is None:
            raise EsError(
                404,
                "resource_not_found_exception",
                f"Inference endpoint not found [{inference_id}]",
                source="x-pack/plugin/inference/.../ModelRegistry.java; "
                "inference/70_text_similarity_rank_retriever.yml (fails if the inference ID does not exist)",
            )
        if endpoint.task_type != "rerank":
            raise EsError(
                400,
                "status_exception",
                f"Requested task type [rerank] does not match the inference endpoint's task type "
                f"[{endpoint.task_type}]",
                source="x-pack/plugin/inference/.../TextSimilarityRankFeaturePhaseRankCoordinatorContext.java "
                "(GetInferenceModelAction.Request(inferenceId, TaskType.RERANK)); "
                "TransportGetInferenceModelAction.java",
            )
        return endpoint.rerank(query, text)

    def _searcher(self, names: list[str], p: Principal | None) -> Searcher:
        def lookup(index: str, doc_id: str, path: str) -> list[Any]:
            self._require_index(p, "indices:data/read/get", [index])
            return self._lookup(index, doc_id, path)

        def rerank(inference_id: str, query: str, text: str) -> float:
            # TextSimilarityRankFeaturePhaseRankCoordinatorContext.computeScores runs GetInferenceModelAction
            # through client.execute, as the caller: cluster:monitor/xpack/inference/get (monitor_inference)
            self._require_cluster(p, "cluster:monitor/xpack/inference/get")
            return self._rerank(inference_id, query, text)

        return Searcher(
            [self._view(n) for n in names],
            version=self.version_tuple,
            license_type=self.license_type,
            license_active=self.license_status == "active",
            lookup=lookup,
            embed=self._embed,
            rerank=rerank,
        )

    def _search(
        self, names: str, body: Any, p: Principal | None, params: Mapping[str, list[str]] | None = None
    ) -> Response:
        """``RestSearchAction.parseSearchRequest``: ``size``, ``from`` and ``explain`` URL parameters override the
        body; ``search_type`` is refused with a knn section; ``rest_total_hits_as_int`` renders an integer total and
        needs exact total tracking."""
        params = params or {}
        body = dict(body or {})
        for key in ("size", "from"):
            if _param(params, key) is not None:
                body[key] = int(str(_param(params, key)))
        if _param(params, "explain") == "true":
            body["explain"] = True
        if _param(params, "search_type") is not None and "knn" in body:
            raise EsError(
                400,
                "illegal_argument_exception",
                "cannot set [search_type] when using [knn] search, since the search type is determined automatically",
                source="server/src/main/java/org/elasticsearch/rest/action/search/RestSearchAction.java",
            )
        as_int = _param(params, "rest_total_hits_as_int") == "true"
        track = body.get("track_total_hits", True)
        if as_int and track is not True:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"[rest_total_hits_as_int] cannot be used if the tracking of total hits is not accurate, got {track}",
                source="server/src/main/java/org/elasticsearch/rest/action/search/RestSearchAction.java",
            )
        resolved = self._resolve(names, allow_missing=names == "*")
        self._require_index(p, "indices:data/read/search", resolved)
        resp = self._searcher(resolved, p).run(body)
        if as_int:
            resp["hits"]["total"] = resp["hits"]["total"]["value"]
        return 200, resp

    def _search_template(self, names: str, params: Mapping[str, list[str]], body: Any, p: Principal | None) -> Response:
        rendered = self._render(body, None)
        for flag in ("explain", "profile"):  # SearchTemplateRequest passes these to the rendered search
            if (body or {}).get(flag):
                rendered[flag] = True
        return self._search(names, rendered, p, params)

    def _count(self, names: str, body: Any, p: Principal | None) -> Response:
        resolved = self._resolve(names)
        self._require_index(p, "indices:data/read/search", resolved)
        n = self._searcher(resolved, p).count(body or {})
        return 200, {"count": n, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}

    def _msearch(self, default: str | None, lines: Any, p: Principal | None) -> Response:
        lines = list(lines or [])
        if len(lines) % 2:
            raise EsError(
                400,
                "illegal_argument_exception",
                "The msearch request must be terminated by a newline [\n]",
                source="MultiSearchRequest",
            )
        responses = []
        for header, body in zip(lines[0::2], lines[1::2], strict=True):
            for key in header:
                if key not in (
                    "index",
                    "preference",
                    "routing",
                    "search_type",
                    "request_cache",
                    "allow_no_indices",
                    "expand_wildcards",
                    "ignore_unavailable",
                ):
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"key [{key}] is not supported in the metadata section",
                        source="MultiSearchRequest",
                    )
            index = header.get("index", default)
            try:
                if index is None:
                    raise EsError(
                        400,
                        "action_request_validation_exception",
                        "Validation Failed: 1: no indices;",
                        source="MultiSearchRequest",
                    )
                names = ",".join(index) if isinstance(index, list) else str(index)
                _, item = self._search(names, body, p)
                item["status"] = 200
            except EsError as exc:
                item = {**exc.body(), "status": exc.status}
            responses.append(item)
        return 200, {"took": 1, "responses": responses}

    def _delete_by_query(self, names: str, params: dict[str, list[str]], body: Any, p: Principal | None) -> Response:
        resolved = self._resolve(names)
        self._require_index(p, "indices:data/read/search", resolved)
        self._require_index(p, "indices:data/write/delete/byquery", resolved)
        for key in body or {}:
            if key not in ("query", "max_docs", "slice"):
                raise parse_error("delete_by_query", key, source="DeleteByQueryRequest")
        if (body or {}).get("slice") is not None or _param(params, "slices") not in (None, "1"):
            raise DoubleLimit("sliced delete_by_query")
        max_docs_raw = _param(params, "max_docs") or (body or {}).get("max_docs")
        max_docs = int(max_docs_raw) if max_docs_raw is not None else None
        scroll_size = int(_param(params, "scroll_size") or 1000)
        conflicts = _param(params, "conflicts") or "abort"
        if conflicts not in ("abort", "proceed"):
            raise EsError(
                400,
                "illegal_argument_exception",
                f'conflicts may only be "proceed" or "abort" but was [{conflicts}]',
                source="AbstractBulkByScrollRequest",
            )
        searcher = self._searcher(resolved, p)
        snapshot = {n: dict(self.indices[n].searchable) for n in resolved}
        matched = searcher.matching((body or {}).get("query", {"match_all": {}}), root=body)
        if max_docs is not None:  # AbstractBulkByScrollRequest.max_docs: stop after that many matched documents
            matched = matched[:max_docs]
        deleted = 0
        version_conflicts = 0
        failures: list[dict[str, Any]] = []
        for view, doc_id in matched:
            seen = snapshot[view.name][doc_id]
            current = self.indices[view.name].docs.get(doc_id)
            if current is None:
                continue
            if current.seq_no != seen.seq_no:
                version_conflicts += 1
                if conflicts == "abort":
                    failures.append(
                        {
                            "index": view.name,
                            "id": doc_id,
                            "cause": {
                                "type": "version_conflict_engine_exception",
                                "index_uuid": "strict-double",
                                "shard": "0",
                                "index": view.name,
                                "reason": f"[{doc_id}]: version conflict, required seqNo [{seen.seq_no}], "
                                f"primary term [1]. current document has seqNo [{current.seq_no}] and primary term [1]",
                            },
                            "status": 409,
                        }
                    )
                    break
                continue
            del self.indices[view.name].docs[doc_id]
            deleted += 1
        if _param(params, "refresh") in ("true", ""):
            for n in resolved:
                self.indices[n].refresh()
        self._notify("delete_by_query")
        result = {
            "took": 1,
            "timed_out": False,
            "total": len(matched),
            "deleted": deleted,
            "batches": -(-len(matched) // scroll_size),
            "version_conflicts": version_conflicts,
            "noops": 0,
            "retries": {"bulk": 0, "search": 0},
            "throttled_millis": 0,
            "requests_per_second": -1.0,
            "throttled_until_millis": 0,
            "failures": failures,
        }
        status = 409 if failures else 200
        if _param(params, "wait_for_completion") == "false":
            task_id = f"double-node-id:{next(self._task_ids)}"
            self.tasks[task_id] = {"polls": 0, "response": result}
            return 200, {"task": task_id}
        return status, result

    def _task(self, task_id: str, params: dict[str, list[str]]) -> Response:
        entry = self.tasks.get(task_id)
        if entry is None:
            raise EsError(
                404,
                "resource_not_found_exception",
                f"task [{task_id}] isn't running and hasn't stored its results",
                source="TransportGetTaskAction",
            )
        entry["polls"] += 1
        info = {
            "node": "double-node-id",
            "id": int(task_id.split(":")[1]),
            "type": "transport",
            "action": "indices:data/write/delete/byquery",
        }
        if entry["polls"] <= self.task_polls_before_done:  # still running
            if _param(params, "wait_for_completion") != "true":
                return 200, {"completed": False, "task": info}
            # TransportGetTaskAction.getRunningTaskFromNode: a task still running when the wait's timeout
            # (default 30 s) passes fails with ElasticsearchTimeoutException, which answers 429 since 9.0
            # (ElasticsearchTimeoutException.status) and 500 before.
            raise EsError(
                429 if self.version_tuple[0] >= 9 else 500,
                "elasticsearch_timeout_exception",
                "Timed out waiting for completion of task",
                source="TransportGetTaskAction",
            )
        if not self.task_results_stored:
            return 200, {"completed": True, "task": info}
        return 200, {"completed": True, "task": info, "response": entry["response"]}

    # -- security ------------------------------------------------------------------------------------------------
    def _security_api(self, method: str, rest: list[str], body: Any, p: Principal | None) -> Response:
        if not self.security:
            raise EsError(
                500,
                "exception",
                "Security must be explicitly enabled when using a [basic] license. Enable security by setting "
                "[xpack.security.enabled] to [true] in the elasticsearch.yml file and restart the node.",
                source="x-pack/plugin/security/.../SecurityPlugin.java",
            )
        assert p is not None
        if rest == ["_authenticate"]:
            return 200, {"username": p.name, "roles": list(p.roles), "enabled": True}
        if rest[-1:] == ["_has_privileges"]:
            body = dict(body or {})
            cluster = {c: c in self._cluster_privs(p) for c in body.get("cluster", [])}
            index: dict[str, dict[str, bool]] = {}
            for entry in body.get("index", []):
                for name in entry.get("names", []):
                    held = self._index_privs(p, name.replace("*", "x"))
                    index[name] = {
                        priv: (_grants(held, priv) if ":" in priv else priv in held)
                        for priv in entry.get("privileges", [])
                    }
            has_all = all(cluster.values()) and all(v for e in index.values() for v in e.values())
            return 200, {
                "username": p.name,
                "has_all_requested": has_all,
                "cluster": cluster,
                "index": index,
                "application": {},
            }
        raise DoubleLimit(f"_security/{'/'.join(rest)}")

    def _notify(self, label: str) -> None:
        for hook in list(self.after_write):
            hook(label)


def _chunk(text: str, settings: Mapping[str, Any]) -> list[str]:
    """The double's server-side chunking: word windows of ``max_chunk_size`` (``none``: one chunk). A stand-in
    for ``SentenceBoundaryChunker`` with the same bounds, not a copy of it; each chunk is a span of the text."""
    if settings.get("strategy") == "none":
        return [text] if text.strip() else []
    size = int(settings.get("max_chunk_size", 250))
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    chunks = []
    for start in range(0, len(spans), size):
        window = spans[start : start + size]
        chunks.append(text[window[0][0] : window[-1][1]])
    return chunks


def _normalized_template(body: Mapping[str, Any]) -> dict[str, Any]:
    """Templates come back with settings nested under ``index`` and values as strings (``Settings`` are strings)."""
    out = copy.deepcopy(dict(body))
    template = out.get("template")
    if isinstance(template, dict) and template.get("settings") is not None:
        template["settings"] = _nest(flatten_settings(template["settings"]))
    return out


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = (
            value
            if isinstance(value, (list, dict))
            else (str(value).lower() if isinstance(value, bool) else str(value))
        )
    return out


def _expand_names(spec: str, existing: Mapping[str, Any], *, what: str = "component template") -> list[str]:
    """A comma-separated list of names, ``*`` expanded; a missing exact name is a 404 (the delete actions)."""
    out: list[str] = []
    for name in spec.split(","):
        if "*" in name:
            out.extend(sorted(n for n in existing if glob_match(name, n) and not existing[n].get("_built_in")))
        elif name in existing:
            out.append(name)
        else:
            raise EsError(
                404, "resource_not_found_exception", f"{what} matching [{name}] not found", source=TEMPLATE_SRC
            )
    return out


def _refuse_unmodelled(template: Mapping[str, Any]) -> None:
    """Aliases and data stream lifecycles are accepted by Elasticsearch but not modelled here: refused as a limit
    rather than stored and silently ignored."""
    if template.get("aliases"):
        raise DoubleLimit("index aliases")
    if template.get("lifecycle") is not None or template.get("data_stream_options") is not None:
        raise DoubleLimit("data stream lifecycle and options")


GET_DOC_PARAMS = frozenset(
    {"refresh", "routing", "preference", "realtime", "stored_fields", "version", "version_type", "_source",
     "_source_includes", "_source_excludes", "_source_exclude_vectors"}
)  # fmt: skip
"""What ``RestGetAction.prepareRequest`` consumes (the ``_source*`` ones through
``FetchSourceContext.parseFromRestRequest``)."""
_ALWAYS_PARAMS = frozenset({"format", "filter_path", "pretty", "human", "error_trace"})
GET_DOC_SRC = (
    "server/src/main/java/org/elasticsearch/rest/action/document/RestGetAction.java; "
    "server/src/main/java/org/elasticsearch/rest/BaseRestHandler.java (unrecognized)"
)


def _similarity(a: str, b: str) -> float:
    """Lucene's ``LevenshteinDistance.getDistance``: 1 - edit distance / the longer length."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i]
        for j, cb in enumerate(b, start=1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return 1.0 - prev[-1] / max(len(a), len(b), 1)


def _refuse_unrecognized(params: Mapping[str, list[str]], consumed: frozenset[str], path: str) -> None:
    """``BaseRestHandler.handleRequest``: a parameter the handler did not consume is refused, naming it and the
    consumed ones within a Levenshtein similarity over 0.5 (``unrecognized``)."""
    invalid = sorted(set(params) - consumed - _ALWAYS_PARAMS)
    if not invalid:
        return
    parts = []
    for name in invalid:
        near = sorted(((_similarity(name, c), c) for c in consumed), key=lambda t: (-t[0], t[1]))
        candidates = [c for score, c in near if score > 0.5]
        hint = ""
        if candidates:
            hint = f" -> did you mean {'any of ' if len(candidates) > 1 else ''}[{', '.join(candidates)}]?"
        parts.append(f"[{name}]{hint}")
    plural = "s" if len(invalid) > 1 else ""
    reason = f"request [{path}] contains unrecognized parameter{plural}: {', '.join(parts)}"
    raise EsError(400, "illegal_argument_exception", reason, source=GET_DOC_SRC)


def _param(params: Mapping[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


def _is_b64(value: str) -> bool:
    try:
        return ":" in base64.b64decode(value, validate=True).decode()
    except Exception:
        return False


def _index_missing(name: str) -> EsError:
    return EsError(
        404,
        "index_not_found_exception",
        f"no such index [{name}]",
        source="server/src/main/java/org/elasticsearch/index/IndexNotFoundException.java",
        **{"resource.type": "index_or_alias", "resource.id": name, "index_uuid": "_na_", "index": name},
    )


INVALID_FILENAME_CHARS = ("\\", "/", "*", "?", '"', "<", ">", "|", " ", ",")
"""``Strings.INVALID_FILENAME_CHARS``, an unmodifiable ``HashSet`` of these ten."""
INVALID_FILENAME_CHARS_SHOWN = '[ , ", *, \\, <, |, ,, >, /, ?]'
"""Its ``toString``: ``HashSet`` (16 buckets) iterates by ``char % 16``, insertion order within a bucket (the text
Elasticsearch's messages show)."""


def _name_problem(name: str) -> str | None:
    """``MetadataCreateIndexService.validateIndexOrAliasName``: the description of the first rule ``name`` breaks
    (None when it breaks none the double models; the byte length and ``.``/``..`` rules are not modelled)."""
    if any(c in name for c in INVALID_FILENAME_CHARS):
        return f"must not contain the following characters {INVALID_FILENAME_CHARS_SHOWN}"
    if "#" in name:
        return "must not contain '#'"
    if ":" in name:
        return "must not contain ':'"
    if name[:1] in ("_", "-", "+"):
        return "must not start with '_', '-', or '+'"
    return None


def _template_problems(name: str, patterns: list[str]) -> list[str]:
    """``MetadataIndexTemplateService.validate``'s name and pattern checks, every one that fails, in its order (the
    space check says ``index_patterns``, the others ``index_pattern``; ``validFileNameExcludingAstrix`` adds the
    characters check)."""
    problems = []
    for bad, what in ((" ", "a space"), (",", "a ','"), ("#", "a '#'"), ("*", "a '*'")):
        if bad in name:
            problems.append(f"name must not contain {what}")
    if name.startswith("_"):
        problems.append("name must not start with '_'")
    if name.lower() != name:
        problems.append("name must be lower cased")
    for pat in patterns:
        if " " in pat:
            problems.append(f"index_patterns [{pat}] must not contain a space")
        for bad, what in ((",", "a ','"), ("#", "a '#'"), (":", "a ':'")):
            if bad in pat:
                problems.append(f"index_pattern [{pat}] must not contain {what}")
        if pat.startswith("_"):
            problems.append(f"index_pattern [{pat}] must not start with '_'")
        if any(c in pat for c in INVALID_FILENAME_CHARS if c != "*"):
            problems.append(
                f"index_pattern [{pat}] must not contain the following characters {INVALID_FILENAME_CHARS_SHOWN}"
            )
    return problems


def _invalid_template(name: str, reason: str) -> EsError:
    return EsError(
        400,
        "invalid_index_template_exception",
        f"index_template [{name}] invalid, cause [{reason}]",
        source="server/src/main/java/org/elasticsearch/indices/InvalidIndexTemplateException.java",
    )


def _no_handler(method: str, path: str) -> EsError:
    return EsError(
        400,
        "illegal_argument_exception",
        f"no handler found for uri [/{path}] and method [{method}]",
        source="server/src/main/java/org/elasticsearch/rest/RestController.java (or a double limit)",
    )
