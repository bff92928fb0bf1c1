"""Regression tests for the cluster, template and privilege rules the double-rule audit found wrong
(``reports/double-rule-audit.md``, W18-W23, W29). Each test names the Elasticsearch source that defines the behaviour
(elastic/elasticsearch unless noted) and fails on the double as it was before the fix."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.support.double.cluster import Role, StrictCluster

CHARS = '[ , ", *, \\, <, |, ,, >, /, ?]'
"""``Strings.INVALID_FILENAME_CHARS`` as its ``HashSet`` prints (the text of Elasticsearch's name errors)."""


def call(cl: StrictCluster, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    return cl.handle(method, path, "", body, {k.lower(): v for k, v in headers.items()})


def reason(resp: tuple[int, Any]) -> str:
    assert resp[0] >= 400, resp
    return str(resp[1]["error"]["reason"])


def basic(user: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()


def secured(**roles: Role) -> StrictCluster:
    users = {name: ("pw", (name,)) for name in roles}
    cl = StrictCluster(
        users={"admin": ("pw", ("superuser",)), **users},
        roles={"superuser": Role(("all",), ((("*",), ("all",)),)), **roles},
    )
    call(cl, "PUT", "ix", {"mappings": {"properties": {"t": {"type": "text"}}}}, authorization=basic("admin"))
    return cl


# ----------------------------------------------------------------------------------------------------------- W18
@pytest.mark.parametrize(
    ("name", "description"),
    [
        ("Foo", "must be lowercase"),
        ("a b", f"must not contain the following characters {CHARS}"),
        ("a#b", "must not contain '#'"),
        ("a:b", "must not contain ':'"),
        ("-a", "must not start with '_', '-', or '+'"),
    ],
)
def test_w18_invalid_index_names_say_why(name: str, description: str) -> None:
    """InvalidIndexNameException: ``"Invalid index name [" + name + "], " + desc``; MetadataCreateIndexService
    .validateIndexName (``must be lowercase``) after validateIndexOrAliasName (``must not contain the following
    characters`` + Strings.INVALID_FILENAME_CHARS, ``must not contain '#'``, ``must not contain ':'``, ``must not
    start with '_', '-', or '+'``)."""
    answer = call(StrictCluster(), "PUT", name.replace(" ", "%20").replace("#", "%23"), {})
    assert answer[1]["error"]["type"] == "invalid_index_name_exception"
    assert reason(answer) == f"Invalid index name [{name}], {description}"


# ----------------------------------------------------------------------------------------------------------- W19
def test_w19_alias_names_have_no_lowercase_rule() -> None:
    """AliasValidator.validateAliasStandalone -> validateIndexOrAliasName(alias, InvalidAliasNameException::new): no
    lowercase rule (that one is validateIndexName's); InvalidAliasNameException(name, desc) renders ``Invalid alias
    name [{}]: {}``."""
    cl = StrictCluster()
    call(cl, "PUT", "ix", {})
    ok = call(cl, "POST", "_aliases", {"actions": [{"add": {"index": "ix", "alias": "MyAlias"}}]})
    assert ok[0] == 200 and "MyAlias" in call(cl, "GET", "ix")[1]["ix"]["aliases"]
    bad = call(cl, "POST", "_aliases", {"actions": [{"add": {"index": "ix", "alias": "_a"}}]})
    assert bad[1]["error"]["type"] == "invalid_alias_name_exception"
    assert reason(bad) == "Invalid alias name [_a]: must not start with '_', '-', or '+'"


# ----------------------------------------------------------------------------------------------------------- W20
def test_w20_template_pattern_errors_are_one_validation_message() -> None:
    """MetadataIndexTemplateService.validate collects ``validationErrors`` (``index_patterns [x] must not contain a
    space`` -- plural -- then the ``validFileNameExcludingAstrix`` characters check, ...) and throws
    ``new InvalidIndexTemplateException(name, validationException.getMessage())``."""
    resp = call(StrictCluster(), "PUT", "_index_template/t", {"index_patterns": ["a b", "_c"]})
    assert resp[1]["error"]["type"] == "invalid_index_template_exception"
    assert reason(resp) == (
        "index_template [t] invalid, cause [Validation Failed: 1: index_patterns [a b] must not contain a space;"
        f"2: index_pattern [a b] must not contain the following characters {CHARS};"
        "3: index_pattern [_c] must not start with '_';]"
    )


# ----------------------------------------------------------------------------------------------------------- W21
def test_w21_post_inference_is_the_inference_action_monitor_grants() -> None:
    """InferenceAction.NAME = ``cluster:monitor/xpack/inference``; ClusterPrivilegeResolver MONITOR_PATTERN
    ``cluster:monitor/*`` covers it, as do monitor_inference / manage_inference (``cluster:monitor/xpack/inference*``,
    "no trailing slash to match the POST InferenceAction name")."""
    cl = secured(reader=Role(()))
    denied = call(
        cl, "POST", "_inference/text_embedding/.multilingual-e5-small-elasticsearch", {"input": ["x"]},
        authorization=basic("reader"),
    )  # fmt: skip
    assert reason(denied) == (
        "action [cluster:monitor/xpack/inference] is unauthorized for user [reader] with effective roles [reader], "
        "this action is granted by the cluster privileges [monitor_inference,manage_inference,monitor,manage,all]"
    )


# ----------------------------------------------------------------------------------------------------------- W22
def test_w22_create_privilege_grants_an_overwriting_index() -> None:
    """IndexPrivilege.CREATE_AUTOMATON = patterns("indices:data/write/index*", "indices:data/write/bulk*", ...): the
    ``create`` privilege grants indexing with op_type index (overwrite); CREATE_DOC_AUTOMATON does not."""
    cl = secured(creator=Role((), ((("ix",), ("create",)),)), doc_creator=Role((), ((("ix",), ("create_doc",)),)))
    assert call(cl, "PUT", "ix/_doc/1", {"t": "a"}, authorization=basic("creator"))[0] in (200, 201)
    assert call(cl, "PUT", "ix/_doc/1", {"t": "b"}, authorization=basic("creator"))[0] == 200
    assert call(cl, "PUT", "ix/_doc/2", {"t": "c"}, authorization=basic("doc_creator"))[0] == 403


# ----------------------------------------------------------------------------------------------------------- W23
def test_w23_granting_privileges_are_ordered_by_access_level() -> None:
    """ClusterPrivilegeResolver.findPrivilegesThatGrant iterates VALUES ``sortByAccessLevel`` (how many other
    privileges each implies, then the name): ``[read_pipeline,manage_ingest_pipelines,manage_pipeline,manage,all]``;
    IndexPrivilege does the same (create_doc implies none of the others, create implies create_doc)."""
    cl = secured(nobody=Role(()))
    pipeline = call(cl, "GET", "_ingest/pipeline/p", authorization=basic("nobody"))
    assert reason(pipeline).endswith(
        "granted by the cluster privileges [read_pipeline,manage_ingest_pipelines,manage_pipeline,manage,all]"
    )
    create = call(cl, "PUT", "ix/_create/1", {"t": "a"}, authorization=basic("nobody"))
    assert reason(create).endswith("granted by the index privileges [create_doc,create,index,write,all]")


# ----------------------------------------------------------------------------------------------------------- W29
def test_w29_mapping_and_settings_gets_are_their_own_actions() -> None:
    """GetMappingsAction.NAME = ``indices:admin/mappings/get``; GetSettingsAction.NAME =
    ``indices:monitor/settings/get``, which the index privilege ``monitor`` (MONITOR_AUTOMATON ``indices:monitor/*``)
    grants."""
    cl = secured(watcher=Role((), ((("ix",), ("monitor",)),)))
    assert call(cl, "GET", "ix/_settings", authorization=basic("watcher"))[0] == 200
    mapping = call(cl, "GET", "ix/_mapping", authorization=basic("watcher"))
    assert reason(mapping).startswith("action [indices:admin/mappings/get] is unauthorized")
