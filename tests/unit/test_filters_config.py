"""One filter model: Elasticsearch clauses and the embedded predicate agree; settings validate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from es_rag.errors import ConfigError
from es_rag.filters import SearchFilter
from es_rag.settings import FusionPath, Settings


def test_clauses() -> None:
    f = SearchFilter("acme", ("support",), metadata={"lang": "ja"})
    assert f.to_es() == [
        {"term": {"tenant_id": "acme"}},
        {"terms": {"acl": ["support", "public"]}},
        {"terms": {"lang": ["ja"]}},
        {
            "bool": {
                "must_not": [
                    {"range": {"meta.valid_from": {"gt": "now/d"}}},
                    {"range": {"meta.valid_to": {"lt": "now/d"}}},
                ]
            }
        },
    ]
    assert SearchFilter("acme", validity=None).to_es() == [
        {"term": {"tenant_id": "acme"}},
        {"terms": {"acl": ["public"]}},
    ]


@pytest.mark.parametrize("tenant", ["", "  ", None])
def test_missing_tenant_is_an_error(tenant) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="tenant"):
        SearchFilter(tenant)


def test_reserved_metadata_keys() -> None:
    with pytest.raises(ConfigError, match="tenant_id"):
        SearchFilter("a", metadata={"tenant_id": "b"})


def _es_eval(clauses, doc) -> bool:  # type: ignore[no-untyped-def]
    """Evaluate term/terms clauses as Elasticsearch would on keyword fields (any value matches); a bool's must_not
    excludes what one of its clauses matches, and a range on a field the document lacks matches nothing."""
    for c in clauses:
        kind, body = next(iter(c.items()))
        if kind == "bool":
            if any(_es_eval([sub], doc) for sub in body["must_not"]):
                return False
            continue
        if kind == "range":
            ((field, _),) = body.items()
            if doc.get(field) is None:
                return False
            raise AssertionError("this oracle evaluates ranges on missing fields only")
        ((field, want),) = body.items()
        have = doc.get(field)
        have = set(have) if isinstance(have, list) else ({have} if have is not None else set())
        want = {want} if kind == "term" else set(want)
        if not have & want:
            return False
    return True


docs = st.fixed_dictionaries(
    {
        "tenant_id": st.sampled_from(["a", "b", "c"]),
        "acl": st.lists(st.sampled_from(["public", "eng", "support", "hr"]), max_size=3),
        "lang": st.sampled_from(["en", "ja"]),
    }
)


@given(
    docs,
    st.sampled_from(["a", "b"]),
    st.lists(st.sampled_from(["eng", "support", "hr"]), max_size=2),
    st.sampled_from([{}, {"lang": "ja"}, {"lang": ["en", "ja"]}]),
)
def test_embedded_predicate_equals_es_clauses(doc, tenant, groups, meta) -> None:  # type: ignore[no-untyped-def]
    f = SearchFilter(tenant, tuple(groups), metadata=meta)
    assert f.matches(doc) == _es_eval(f.to_es(), doc)


def test_settings_validation_lists_valid_values() -> None:
    with pytest.raises(ConfigError, match="valid values: auto, native, client"):
        Settings(fusion_path="bogus")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="context_k <= rerank_k <= candidate_k"):
        Settings(candidate_k=10, rerank_k=20)
    with pytest.raises(ConfigError, match="num_candidates"):
        Settings(candidate_k=50, num_candidates=10)
    with pytest.raises(ConfigError, match="index_prefix"):
        Settings(index_prefix="Bad Prefix")
    with pytest.raises(ConfigError, match="unknown setting"):
        Settings().replace(nope=1)
    assert Settings(fusion_path="client").fusion.path is FusionPath.CLIENT
    s = Settings(index_prefix="kb")
    assert (s.chunk_index, s.parent_index, s.pipeline_id) == ("kb-chunks", "kb-parents", "kb-chunks")
    assert Settings(inference_id="e5").pipeline_id == "es-rag-chunks-inference"


def test_filter_messages_blank_groups_and_version_snapshots() -> None:
    """Written from the requirements (mutation survivors of docs/mutation.md): a blank group is refused, neither
    dropped nor matched (issue 43: one rule for names, es_rag.principals); every refusal names the field; a version
    snapshot must be the filter's own tenant's."""
    from es_rag.versions.registry import VersionSnapshot

    assert SearchFilter("acme", ("eng", "eng")).groups == ("eng", "public")
    for blank in (" ", ""):
        with pytest.raises(ConfigError, match=r"^acl group: missing or empty"):
            SearchFilter("acme", (blank, "eng"))
    with pytest.raises(
        ConfigError, match=r"^tenant_id: a search needs a non-empty tenant; pass --tenant or tenant_id=$"
    ):
        SearchFilter("")
    with pytest.raises(ConfigError, match=r"^metadata filter 'source_id': needs at least one value$"):
        SearchFilter("acme", metadata={"source_id": ()})
    snap = VersionSnapshot("acme", hidden=frozenset({"a@1"}))
    flt = SearchFilter("acme").with_versions(snap)
    assert flt.versions is snap and flt.with_versions(None).versions is None
    with pytest.raises(ConfigError, match=r"^version snapshot of tenant 'globex' on a filter of tenant 'acme'$"):
        SearchFilter("acme").with_versions(VersionSnapshot("globex"))
