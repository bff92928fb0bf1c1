"""Regression tests for the ingest rules the double-rule audit found wrong (``reports/double-rule-audit.md``,
W24-W28). Each test names the Elasticsearch source that defines the behaviour (elastic/elasticsearch unless noted)
and fails on the double as it was before the fix."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.double.cluster import StrictCluster
from tests.support.double.errors import EsError
from tests.support.double.ingest import IngestContext, IngestFailure, parse_pipeline, run_pipeline


def call(cl: StrictCluster, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return cl.handle(method, path, "", body, {})


def run(processors: list[dict[str, Any]], doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    run_pipeline(parse_pipeline("p", {"processors": processors}), out, {"_index": "i", "_id": "1"}, IngestContext({}))
    return out


# ----------------------------------------------------------------------------------------------------------- W24
def test_w24_rename_of_a_missing_field_does_not_exist() -> None:
    """RenameProcessor.execute: ``if (document.hasField(path, true) == false) { ... throw new
    IllegalArgumentException("field [" + path + "] doesn't exist"); }`` (7.x/8.x sources; docs: "If the field doesn't
    exist ... an exception will be thrown")."""
    with pytest.raises(IngestFailure) as err:
        run([{"rename": {"field": "a.b", "target_field": "c"}}], {"a": {}})
    assert (err.value.err_type, err.value.reason) == ("illegal_argument_exception", "field [a.b] doesn't exist")


# ----------------------------------------------------------------------------------------------------------- W25
def test_w25_not_present_names_the_missing_element() -> None:
    """IngestDocument.resolve: ``ResolveResult.error(Errors.notPresent(fullPath, pathElement))`` at the element the
    walk does not find; removeField resolves the parent, then ``removeDirectChildField`` names the leaf
    (CommunityIdProcessorTests: ``field [ip] not present as part of path [source.ip]``)."""
    with pytest.raises(IngestFailure, match=r"^field \[ip\] not present as part of path \[source\.ip\]$"):
        run([{"remove": {"field": "source.ip"}}], {"source": {"port": 1}})
    with pytest.raises(IngestFailure, match=r"^field \[c\] not present as part of path \[a\.b\.c\]$"):
        run([{"set": {"field": "x", "copy_from": "a.b.c"}}], {"a": {"b": {}}})


# ----------------------------------------------------------------------------------------------------------- W26
def test_w26_field_access_pattern_is_a_9_2_key() -> None:
    """PR #133270 "Support flexible field access pattern in ingest pipelines" (9.2; docs ``applies_to stack: ga 9.2``;
    Kibana #270761 "This is a 9.2+ added capability"): earlier ``Pipeline.create`` has no such key and refuses it
    (``pipeline [id] doesn't support one or more provided configuration parameters [..]``); from 9.2 ``classic`` is
    accepted and ``flexible`` (IngestPipelineFieldAccessPattern.FLEXIBLE) is a double limit."""
    body = {"processors": [], "field_access_pattern": "classic"}
    old = call(StrictCluster(version="9.1.0"), "PUT", "_ingest/pipeline/p", body)
    assert old[1]["error"]["reason"] == (
        "pipeline [p] doesn't support one or more provided configuration parameters [field_access_pattern]"
    )
    cl = StrictCluster(version="9.2.0")
    assert call(cl, "PUT", "_ingest/pipeline/p", body)[0] == 200
    flexible = call(cl, "PUT", "_ingest/pipeline/q", {**body, "field_access_pattern": "flexible"})
    assert flexible[1]["error"]["type"] == "strict_double_unsupported"


# ----------------------------------------------------------------------------------------------------------- W27
def test_w27_fingerprint_fields_missing_or_empty() -> None:
    """FingerprintProcessor.Factory: ``ConfigurationUtils.readList(TYPE, tag, config, "fields")`` (``[fields] required
    property is missing``), then ``if (fields.size() < 1)`` ``must specify at least one field``
    (FingerprintProcessorFactoryTests asserts both)."""
    with pytest.raises(EsError) as missing:
        parse_pipeline("p", {"processors": [{"fingerprint": {}}]})
    assert missing.value.reason == "[fields] required property is missing"
    with pytest.raises(EsError) as empty:
        parse_pipeline("p", {"processors": [{"fingerprint": {"fields": []}}]})
    assert empty.value.reason == "[fields] must specify at least one field"


# ----------------------------------------------------------------------------------------------------------- W28
def test_w28_unknown_processor_type_carries_processor_metadata() -> None:
    """ConfigurationUtils.readProcessor: ``throw newConfigurationException(type, tag, null, "No processor type exists
    with name [" + type + "]")``, which adds ``es.processor_type`` (and ``es.processor_tag``) -- rendered without
    ``es.``."""
    with pytest.raises(EsError) as err:
        parse_pipeline("p", {"processors": [{"sett": {"tag": "t1", "field": "a", "value": 1}}]})
    assert err.value.metadata == {"processor_type": "sett", "processor_tag": "t1"}
    assert err.value.error_object()["processor_type"] == "sett"


def test_w28_required_properties_are_checked_before_unsupported_ones() -> None:
    """ConfigurationUtils.readProcessor: the on_failure list is parsed (empty refused), then ``factory.create`` (its
    required properties), and only then ``processor [..] doesn't support one or more provided configuration
    parameters``."""
    with pytest.raises(EsError) as err:
        parse_pipeline("p", {"processors": [{"set": {"value": 1, "bogus": 2}}]})
    assert err.value.reason == "[field] required property is missing"
    with pytest.raises(EsError) as empty:
        parse_pipeline("p", {"processors": [{"set": {"field": "a", "on_failure": [], "bogus": 2}}]})
    assert empty.value.reason == "[on_failure] processors list cannot be empty"
