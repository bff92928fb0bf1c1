"""Issue 32 item 4: ``elasticsearch.dsl`` at the app boundary. An app's ``Q(...)`` query (or its dict) is an extra hard
filter in every retriever's filter, beside tenant and ACL; the embedded backend evaluates term, terms, range, exists,
bool and match_all as Elasticsearch does in filter context and refuses any other type by name; the strict double
refuses what Elasticsearch refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch.dsl import Q

from es_rag import RagClient
from es_rag.errors import ClusterError, ConfigError
from es_rag.filters import SearchFilter
from es_rag.integrations.langchain import EsRagRetriever
from es_rag.query_filters import query_matches
from tests.support.apps import tiny_settings
from tests.support.double.cluster import StrictCluster
from tests.support.double.http import serve

YEARS = {"y2021.md": "2021-03-01", "y2023.md": "2023-06-15", "y2025.md": "2025-01-20"}
TEXT = "# Rotation\n\nRotate the signing keys of {name} every quarter and log the rotation.\n"


@pytest.fixture(params=["embedded", "strict-double"])
def rag(request: pytest.FixtureRequest, tiny_bi_encoder: Path) -> Iterator[RagClient]:
    settings = tiny_settings(tiny_bi_encoder)
    if request.param == "embedded":
        client = RagClient.open(None, settings)
        _load(client)
        yield client
        client.close()
        return
    with serve(StrictCluster()) as url:
        client = RagClient.from_url(url, settings)
        client.backend.setup()
        _load(client)
        yield client
        client.close()


def _load(client: RagClient) -> None:
    for name, day in YEARS.items():
        report = client.ingest_texts(
            {name: TEXT.format(name=name)}, tenant="acme", acl="public", meta={"published": day, "doc_type": "runbook"}
        )
        assert report.sources == 1 and not report.failed


def test_a_langchain_retriever_with_a_q_range_filter_returns_only_the_documents_in_range(rag: RagClient) -> None:
    in_range = Q("range", **{"meta.published": {"gte": "2022-01-01", "lt": "2025-01-01"}})
    retriever = EsRagRetriever(client=rag, tenant="acme", filters=[in_range])
    assert {d.metadata["source_id"] for d in retriever.invoke("rotate signing keys")} == {"y2023.md"}
    # LangChain's ElasticsearchStore convention: search_kwargs={"filter": [query, ...]}
    as_store = EsRagRetriever(client=rag, tenant="acme", search_kwargs={"filter": [in_range.to_dict()]})
    assert {d.metadata["source_id"] for d in as_store.invoke("rotate signing keys")} == {"y2023.md"}
    # a bool of several clauses (date math against now: the unit tests below; the double implements ||/unit)
    newer = Q("range", **{"meta.published": {"gte": "2021-01-01||/y"}}) & ~Q("term", **{"source_id": "y2025.md"})
    hits = rag.search("rotate signing keys", tenant="acme", filters=[newer]).hits
    assert {h.source_id for h in hits} == {"y2021.md", "y2023.md"}
    # only narrows: another tenant's documents stay out whatever the query says
    anything = Q("terms", **{"tenant_id": ["acme", "globex"]})
    assert rag.search("rotate signing keys", tenant="globex", filters=[anything]).hits == []


def test_the_filter_is_in_every_retriever_of_the_request(rag: RagClient) -> None:
    clause = {"range": {"meta.published": {"gte": "2022-01-01"}}}
    text = rag.explain("rotate keys", tenant="acme", filters=[clause], format="json", vector=False)
    # in the BM25 retriever's and the kNN retriever's filter (both fusion paths on the embedded backend)
    assert text.count('"gte": "2022-01-01"') >= 2


def test_the_double_refuses_what_elasticsearch_refuses() -> None:
    """``RangeQueryBuilder.fromXContent``: an unknown parameter is a parsing_exception (HTTP 400), ``[range] query does
    not support [nope]`` (the form every QueryBuilder's fromXContent throws)."""
    with serve(StrictCluster()) as url:
        from es_rag.elasticsearch.backend import ElasticsearchBackend
        from es_rag.settings import Settings

        backend = ElasticsearchBackend.connect(url, Settings(vector_dims=4))
        backend.setup()
        bad = SearchFilter("acme", ("public",), queries=({"range": {"meta.published": {"gte": "2022", "nope": 1}}},))
        with pytest.raises(ClusterError) as err:
            backend.count(bad)
        assert err.value.status == 400 and "[range] query does not support [nope]" in str(err.value)


def _doc(**meta: object) -> dict[str, object]:
    return {"tenant_id": "acme", "acl": ["public"], "source_id": "a.md", "token_count": 40, "meta": meta}


@pytest.mark.parametrize(
    "query, doc, expected",
    [
        (Q("term", **{"meta.doc_type": "policy"}), _doc(doc_type="policy"), True),
        (Q("term", **{"meta.tags": "eu"}), _doc(tags=["us", "eu"]), True),  # a list matches by any element
        (Q("terms", **{"meta.tags": ["x", "eu"]}), _doc(tags=["eu"]), True),
        (Q("term", **{"meta.doc_type": {"value": "POLICY", "case_insensitive": True}}), _doc(doc_type="policy"), True),
        (Q("term", **{"meta.doc_type": "POLICY"}), _doc(doc_type="policy"), False),
        (Q("range", token_count={"gt": 39, "lte": 40}), _doc(), True),
        (Q("range", token_count={"gt": 40}), _doc(), False),
        (Q("range", **{"meta.published": {"gte": "2024"}}), _doc(published="2024-01-01"), True),  # partial date
        (Q("range", **{"meta.published": {"gt": "2024"}}), _doc(published="2024-06-01"), False),  # gt 2024 = after it
        # date math against now = 2026-04-30T12:00Z: now-1y/y is 2025-01-01 (gte rounds down), lte rounds up
        (Q("range", **{"meta.published": {"gte": "now-1y/y"}}), _doc(published="2025-01-01"), True),
        (Q("range", **{"meta.published": {"gte": "now-1y/y"}}), _doc(published="2024-12-31"), False),
        (Q("range", **{"meta.published": {"lte": "now/M"}}), _doc(published="2026-04-30T23:00:00Z"), True),
        (Q("range", **{"meta.published": {"lt": "2026-01-31||+1M/M"}}), _doc(published="2026-02-27"), False),
        (Q("range", **{"meta.region": {"gte": "eu", "lt": "ux"}}), _doc(region="us"), True),  # keyword: code points
        (Q("exists", field="meta.url"), _doc(url="https://x"), True),
        (Q("exists", field="meta.tags"), _doc(tags=[]), False),  # an empty list holds no value
        (Q("bool", should=[Q("term", source_id="b.md"), Q("term", source_id="a.md")]), _doc(), True),
        (Q("bool", should=[Q("term", source_id="b.md")], minimum_should_match=0), _doc(), True),
        (~Q("exists", field="meta.url"), _doc(), True),
        (Q("match_all"), _doc(), True),
    ],
)
def test_the_embedded_evaluation(query: object, doc: dict[str, object], expected: bool) -> None:
    flt = SearchFilter("acme", queries=(query,), validity=None)
    assert flt.matches(doc, now=NOW) is expected
    assert query_matches(flt.queries[0], doc, now_ms=NOW) is expected


NOW = 1_777_550_400_000  # 2026-04-30T12:00:00Z


@pytest.mark.parametrize(
    "query, message",
    [
        (Q("match", text="keys"), "query filter 'match': the embedded backend evaluates term, terms, range, exists"),
        (Q("term", text="keys"), "on the analysed field 'text'"),
        ({"range": {"token_count": {"gte": 1, "nope": 2}}}, "unknown parameter 'nope'"),
        ({"terms": {"source_id": {"index": "x", "id": "1", "path": "p"}}}, "needs a list of values"),
    ],
)
def test_the_embedded_backend_refuses_the_rest_by_name(query: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        SearchFilter("acme", queries=(query,)).matches(_doc(), now=0)


def test_a_query_filter_must_be_a_query() -> None:
    with pytest.raises(ConfigError, match="one key, the query type"):
        SearchFilter("acme", queries=({"range": {}, "term": {}},))


def test_the_cli_takes_a_query_as_json(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from es_rag.cli import main

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in YEARS:
        (docs / name).write_text(TEXT.format(name=name))
    idx = str(tmp_path / "idx")
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32", "--rerank-model", "none"]
    for name, day in YEARS.items():
        argv = ["ingest", str(docs / name), "--base-dir", str(docs), "--tenant", "acme", "--index-dir", idx]
        assert main([*argv, "--meta", f"published={day}", *model[:4]]) == 0
    capsys.readouterr()
    query = json.dumps({"range": {"meta.published": {"lt": "2022"}}})
    argv = ["search", "rotate signing keys", "--tenant", "acme", "--index-dir", idx, "--filter", query, "--json"]
    assert main([*argv, *model]) == 0
    assert {h["source_id"] for h in json.loads(capsys.readouterr().out)["hits"]} == {"y2021.md"}
    bad = json.dumps({"match": {"text": "keys"}})
    assert main(["search", "keys", "--tenant", "acme", "--index-dir", idx, "--filter", bad, *model]) != 0
    assert "query filter 'match': the embedded backend evaluates" in capsys.readouterr().err
    # issue 46, item 4: a query on an undeclared metadata field matched nothing and exited 0 with no evidence
    unknown = json.dumps({"term": {"meta.nosuchfield": "abc"}})
    assert main(["search", "keys", "--tenant", "acme", "--index-dir", idx, "--filter", unknown, *model]) == 2
    assert "unknown metadata field 'meta.nosuchfield'; known: " in capsys.readouterr().err


def test_a_query_on_an_undeclared_metadata_field_is_refused_like_an_expression(rag: RagClient) -> None:
    """``filters=[{"term": {"meta.nosuch": "x"}}]`` gave 0 hits while ``nosuch=1`` raised: both raise now, naming the
    declared fields; nested in a bool too, and through an ``elasticsearch.dsl`` query."""
    for bad in (
        {"term": {"meta.nosuch": "x"}},
        {
            "bool": {
                "filter": [{"range": {"meta.published": {"gte": "2022"}}}],
                "must_not": {"exists": {"field": "meta.nosuch"}},
            }
        },
        Q("terms", **{"meta.nosuch": ["a", "b"]}),
    ):
        with pytest.raises(ConfigError, match=r"unknown metadata field 'meta\.nosuch'; known: .*published"):
            rag.search("rotate signing keys", tenant="acme", filters=[bad])
    with pytest.raises(ConfigError, match="unknown metadata field 'nosuch'"):
        rag.search("rotate signing keys", tenant="acme", filters=["nosuch=1"])
    ok = rag.search("rotate signing keys", tenant="acme", filters=[{"term": {"meta.doc_type": "runbook"}}])
    assert ok.hits
