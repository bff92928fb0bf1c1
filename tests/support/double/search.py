"""Search bodies as Elasticsearch parses and scores them, for the strict double.

Parsing refuses what Elasticsearch refuses (each rule names its source): unknown top-level keys
(``SearchSourceBuilder.parseXContent``: ``Unknown key for a START_OBJECT in [x].``), unknown queries
(``AbstractQueryBuilder.parseInnerQueryBuilder``: ``unknown query [x]``) and query parameters, unknown
retrievers (``RetrieverBuilder.parseInnerRetrieverBuilder``: ``unknown retriever [x]``) and retriever keys
(``ObjectParser`` with errorOnUnknown: ``[rrf] unknown field [x]``), ``retriever`` together with ``query``, ``knn``,
``sort`` & co. (``SearchSourceBuilder.validate``: one ``action_request_validation_exception``), kNN
``k``/``num_candidates`` bounds (``KnnSearchBuilder``), and the version and licence gates of the ``rrf`` and
``linear`` retrievers (``RRFRetrieverBuilder``, ``RRFRetrieverComponent``, ``LinearRetrieverBuilder``,
``x-pack/plugin/rank-rrf/src/yamlRestTest/.../license/100_license.yml``) and of ``_source.exclude_vectors`` (parsed
from 9.1 and 8.19, vectors left out by default from 9.2; ``FetchSourceContext``). A query Elasticsearch registers
but the double does not evaluate (``SearchModule.registerQueryParsers``) is a double limit, never an
``unknown query``.

Fetching follows ``FetchFieldsPhase`` for the ``fields`` option: values of mapped leaf fields (and multi-fields)
read from ``_source`` and formatted by the field type, always as arrays, the ``fields`` key left out of a hit
without any; ``track_total_hits: false`` leaves ``hits.total`` out (``SearchHits``). ``term`` / ``terms`` match
the indexed terms (``TermQueryBuilder``: the analyzed tokens of a ``text`` field, the value of a ``keyword``, the
number of a numeric field, the id for ``_id``; an unmapped field matches nothing) and a ``term`` on a ``text``
field scores BM25. A compound retriever's ``hits.total`` counts every document a child matched, not only the
ranked window (``rrf/300_rrf_retriever.yml``, ``linear/10_linear_retriever.yml``); ``rank_window_size`` is checked
against the request's ``size`` alone, and only when it sets one (``CompoundRetrieverBuilder.validate``). The kNN
``similarity`` threshold keeps the documents whose raw similarity passes it (``KnnSearchBuilder``,
``search.vectors/40_knn_search.yml``).

Scoring is the double's own code: Lucene's BM25 per field (one-byte length norms, ``docCount`` of the documents with
a term; ``tests/lucene/test_double_bm25.py`` holds it to Lucene 10.5) over the field's analyzer (es_rag's Lucene
mirrors for ``standard``, ``english`` and ``cjk``, the only code shared with es_rag, itself checked against Lucene),
``multi_match`` ``best_fields`` with ``tie_breaker``, ``dis_max``, phrase counts, exact kNN scored per the
mapping similarity (``DenseVectorFieldMapper.VectorSimilarity``), ``semantic`` as the best chunk's score, RRF
``sum(weight / (rank_constant + rank))`` ties broken by insertion order, and ``linear`` with the ``minmax``,
``l2_norm`` and ``none`` normalizers. Terms lookups are fetched once per clause occurrence
(``TermsQueryBuilder.doRewrite`` registers one async GET per clause) through :attr:`Searcher.lookup`.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import regex

from es_rag.embedded.analyzers import cjk_analyzer, english_analyzer, standard_analyzer
from tests.support.double.dates import date_millis, parse_date
from tests.support.double.errors import DoubleLimit, EsError, parse_error, validation_failed
from tests.support.double.mapping import FieldSpec, since_9_1_or_8_19, vector_score

SEARCH_SRC = "server/src/main/java/org/elasticsearch/search/builder/SearchSourceBuilder.java"
QUERY_SRC = "server/src/main/java/org/elasticsearch/index/query/AbstractQueryBuilder.java"
RETRIEVER_SRC = "server/src/main/java/org/elasticsearch/search/retriever/RetrieverBuilder.java"
RRF_SRC = "x-pack/plugin/rank-rrf/src/main/java/org/elasticsearch/xpack/rank/rrf/RRFRetrieverBuilder.java"
LINEAR_SRC = "x-pack/plugin/rank-rrf/src/main/java/org/elasticsearch/xpack/rank/linear/LinearRetrieverBuilder.java"
TSR_SRC = (
    "x-pack/plugin/inference/src/main/java/org/elasticsearch/xpack/inference/rank/textsimilarity/"
    "TextSimilarityRankRetrieverBuilder.java; x-pack/plugin/inference/src/yamlRestTest/resources/rest-api-spec/test/"
    "inference/70_text_similarity_rank_retriever.yml"
)
DIVERSIFY_SRC = (
    "server/src/main/java/org/elasticsearch/search/diversification/DiversifyRetrieverBuilder.java; "
    "server/src/main/java/org/elasticsearch/search/diversification/mmr/MMRResultDiversification.java"
)
DEFAULT_RERANK_ID = ".rerank-v1-elasticsearch"
"""``ElasticsearchInternalService.DEFAULT_RERANK_ID``: the endpoint a ``text_similarity_reranker`` without
``inference_id`` uses."""
KNN_SRC = "server/src/main/java/org/elasticsearch/search/vectors/KnnSearchBuilder.java"
LICENSE_SRC = "x-pack/plugin/core/src/main/java/org/elasticsearch/license/LicenseUtils.java (newComplianceException)"

TOP_LEVEL = {
    "query", "knn", "retriever", "size", "from", "_source", "highlight", "sort", "track_total_hits",
    "aggs", "aggregations", "post_filter", "min_score", "explain", "timeout", "terminate_after", "stored_fields",
    "docvalue_fields", "fields", "rank", "collapse", "search_after", "pit", "runtime_mappings", "suggest",
    "profile", "version", "seq_no_primary_term", "track_scores", "indices_boost", "rescore", "script_fields",
    "stats", "ext", "slice", "sub_searches",
}  # fmt: skip
"""``SearchSourceBuilder.parseXContent``'s keys (``slice`` and the deprecated ``sub_searches`` included): the ones
outside :data:`IMPLEMENTED_TOP` are double limits, never ``Unknown key``."""
RETRIEVER_CONFLICTS = ("query", "knn", "search_after", "terminate_after", "sort", "rank", "rescore")
"""``SearchSourceBuilder.validate``: the sections a ``retriever`` cannot be combined with, in the order its
``cannot specify [retriever] and [..]`` message lists them (``query`` also stands for ``sub_searches``)."""
COMPOUND_RETRIEVERS = ("rrf", "linear", "text_similarity_reranker", "diversify")
"""``CompoundRetrieverBuilder`` subclasses the double knows."""
VALIDATION_SRC = (
    "server/src/main/java/org/elasticsearch/search/builder/SearchSourceBuilder.java (validate); "
    "server/src/main/java/org/elasticsearch/search/retriever/CompoundRetrieverBuilder.java (validate); "
    "PR https://github.com/elastic/elasticsearch/pull/110641"
)
IMPLEMENTED_TOP = {
    "query", "knn", "retriever", "size", "from", "_source", "highlight", "sort", "track_total_hits", "fields",
    "aggs", "aggregations",
}  # fmt: skip
COMPOSITE_SRC = (
    "server/src/main/java/org/elasticsearch/search/aggregations/bucket/composite/CompositeAggregationBuilder.java; "
    "rest-api-spec/.../test/search.aggregation/230_composite.yml"
)
QUERY_PARAMS: dict[str, set[str]] = {
    "match_all": {"boost", "_name"},
    "bool": {"must", "filter", "should", "must_not", "minimum_should_match", "adjust_pure_negative", "boost", "_name"},
    "multi_match": {
        "query", "fields", "type", "tie_breaker", "operator", "minimum_should_match", "analyzer", "boost",
        "fuzziness", "lenient", "zero_terms_query", "auto_generate_synonyms_phrase_query", "_name", "slop",
        "prefix_length", "max_expansions", "fuzzy_transpositions", "cutoff_frequency",
    },
    "dis_max": {"queries", "tie_breaker", "boost", "_name"},
    "ids": {"values", "boost", "_name"},
    "semantic": {"field", "query", "lenient", "boost", "_name"},
    "constant_score": {"filter", "boost", "_name"},
}  # fmt: skip
OBJECT_PARSER_QUERIES = {
    "bool": "server/src/main/java/org/elasticsearch/index/query/BoolQueryBuilder.java (ObjectParser)",
    "semantic": "x-pack/plugin/inference/src/main/java/org/elasticsearch/xpack/inference/queries/"
    "SemanticQueryBuilder.java (ConstructingObjectParser; lenient: TransportVersions.SEMANTIC_QUERY_LENIENT "
    "8_807_0_00, 8.18/9.0)",
    "ids": "server/src/main/java/org/elasticsearch/index/query/IdsQueryBuilder.java (fromXContent)",
    "match_all": "server/src/main/java/org/elasticsearch/index/query/MatchAllQueryBuilder.java (fromXContent)",
}
"""Queries parsed by an ``ObjectParser`` (unknown keys: ``[name] unknown field [key]``), with their source; the
others in :data:`QUERY_PARAMS` are hand-written parsers (``[name] query does not support [key]``)."""
FIELD_QUERIES = {
    "term": {"value", "term", "boost", "case_insensitive", "_name"},
    "match_phrase": {"query", "analyzer", "slop", "boost", "zero_terms_query", "_name"},
    "match": {
        "query",
        "operator",
        "analyzer",
        "boost",
        "minimum_should_match",
        "fuzziness",
        "_name",
        "zero_terms_query",
    },
    "range": {"gt", "gte", "lt", "lte", "format", "boost", "time_zone", "relation", "_name"},
}
ALL_QUERIES = set(QUERY_PARAMS) | set(FIELD_QUERIES) | {"terms", "knn"}
REGISTERED_QUERIES = ALL_QUERIES | {
    "match_none", "match_phrase_prefix", "match_bool_prefix", "combined_fields", "query_string",
    "simple_query_string", "boosting", "function_score", "script_score", "script", "wrapper", "fuzzy", "regexp",
    "prefix", "wildcard", "exists", "terms_set", "intervals", "distance_feature", "more_like_this", "nested",
    "span_term", "span_not", "span_within", "span_containing", "span_first", "span_near", "span_or",
    "span_multi", "field_masking_span", "geo_distance", "geo_bounding_box", "geo_grid", "geo_shape", "shape",
    "rank_feature", "has_child", "has_parent", "parent_id", "percolate", "pinned", "rule", "sparse_vector",
    "text_expansion", "weighted_tokens",
}  # fmt: skip
"""Queries a default distribution registers (``SearchModule.registerQueryParsers`` plus the modules and x-pack
plugins that add queries): the ones outside :data:`ALL_QUERIES` are double limits, not unknown queries."""
NUMERIC_TYPES = ("integer", "long", "float", "double")
"""Numeric field types (a ``max`` aggregation reads them; dates too, which the double does not model)."""
FETCH_FIELD_TYPES = {"keyword", "text", "integer", "long", "float", "double", "boolean", "date", "dense_vector"}
"""Field types whose ``fields`` values the double formats (``MappedFieldType.valueFetcher``)."""
MULTI_MATCH_TYPES = ("best_fields", "most_fields", "cross_fields", "phrase", "phrase_prefix", "bool_prefix")
BASE_RETRIEVER_KEYS = {"filter", "_name", "min_score"}
RETRIEVER_KEYS = {
    "standard": BASE_RETRIEVER_KEYS | {"query", "sort", "search_after", "terminate_after", "collapse"},
    "knn": BASE_RETRIEVER_KEYS
    | {"field", "query_vector", "query_vector_builder", "k", "num_candidates", "similarity", "rescore_vector"},
    "rrf": BASE_RETRIEVER_KEYS | {"retrievers", "rank_window_size", "rank_constant", "fields", "query"},
    "linear": BASE_RETRIEVER_KEYS | {"retrievers", "rank_window_size", "fields", "query", "normalizer"},
    "text_similarity_reranker": BASE_RETRIEVER_KEYS
    | {"retriever", "inference_id", "inference_text", "field", "rank_window_size", "allow_rerank_failures",
       "chunk_rescorer"},
    "diversify": BASE_RETRIEVER_KEYS
    | {"retriever", "type", "field", "rank_window_size", "query_vector", "query_vector_builder", "lambda", "size"},
}  # fmt: skip
REQUIRED_KEYS = {
    "text_similarity_reranker": ("retriever", "inference_text", "field"),
    "diversify": ("retriever", "type", "field"),
}
"""``constructorArg()`` fields of the two wrapping retrievers' ``ConstructingObjectParser`` (``inference_id`` is an
``optionalConstructorArg`` defaulting to :data:`DEFAULT_RERANK_ID`); a missing one fails with ``Required [...]``."""
ENTERPRISE = {"enterprise", "trial"}


def compliance(feature: str) -> EsError:
    """``LicenseUtils.newComplianceException(feature)``: 403 ``security_exception`` with the
    ``es.license.expired.feature`` metadata (rendered without ``es.``)."""
    return EsError(
        403,
        "security_exception",
        f"current license is non-compliant for [{feature}]",
        source=LICENSE_SRC,
        **{"license.expired.feature": feature},
    )


# -- analysis ------------------------------------------------------------------------------------------------
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(
    r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]+"
)


_MIRRORS: dict[str, Callable[[str], list[str]]] = {
    name: functools.lru_cache(maxsize=1 << 16)(fn)
    for name, fn in (("standard", standard_analyzer), ("english", english_analyzer), ("cjk", cjk_analyzer))
}
"""The mirrors, memoised per text: each search builds its views afresh, and a field's statistics analyse every
document again (the token lists are only read, never changed)."""


def analyzer_fn(name: str, definitions: Mapping[str, Mapping[str, Any]]) -> Callable[[str], list[str]]:
    """The double's tokenizer for an analyzer name (built-in or defined in the index settings): es_rag's Lucene
    mirrors for ``standard``, ``english`` and ``cjk`` (checked against Lucene by ``tests/lucene``), approximations
    for the rest; used only to score, never to decide whether a body is valid.

    Args:
        name: Analyzer name.
        definitions: ``index.analysis.analyzer`` definitions of the index.
    """
    spec = definitions.get(name)
    kind = str(spec.get("type", "custom")) if spec else name
    if spec and kind == "custom":
        tokenizer = str(spec.get("tokenizer"))
        filters = [str(f) for f in (spec.get("filter") or [])]
        tdefs = definitions.get("__tokenizers__", {})
        if tokenizer in tdefs and tdefs[tokenizer].get("type") == "pattern":
            # PatternTokenizer (PatternTokenizerFactory: "pattern" default \W+, "group" default -1): group -1 splits
            # on the matches, group >= 0 emits that group of each match; empty tokens are never emitted. The Java
            # syntax es_rag uses (\p{L}, \p{N}, \p{IsHan}, lookahead) reads the same in the regex package.
            rx = regex.compile(str(tdefs[tokenizer].get("pattern", r"\W+")))
            group = int(tdefs[tokenizer].get("group", -1))
            if group > rx.groups:  # Lucene PatternTokenizer's constructor, when the analyzer first runs
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"invalid group specified: pattern only has: {rx.groups} capturing groups",
                    source="lucene/analysis/common/src/java/org/apache/lucene/analysis/pattern/PatternTokenizer.java",
                )

            def tokenize(text: str) -> list[str]:
                if group >= 0:
                    return [m.group(group) for m in rx.finditer(text) if m.group(group)]
                return [t for t in rx.split(text) if t]

        else:

            def tokenize(text: str) -> list[str]:
                return text.split()

        def custom(text: str) -> list[str]:
            tokens = tokenize(text)
            for name in filters:
                if name == "cjk_width":  # CJKWidthFilter's ASCII half: fullwidth U+FF01..U+FF5E minus 0xFEE0
                    tokens = [
                        "".join(chr(ord(c) - 0xFEE0) if "\uff01" <= c <= "\uff5e" else c for c in t) for t in tokens
                    ]
                elif name == "lowercase":
                    tokens = [t.lower() for t in tokens]
                else:
                    raise DoubleLimit(f"the token filter [{name}] in a custom analyzer")
            return tokens

        return custom
    if kind == "whitespace":
        return lambda text: text.split()
    # The built-in analyzers es_rag's embedded backend mirrors score with those mirrors, which tests/lucene holds to
    # real Lucene token for token (issue 29: "the strict double's match/multi_match scores come from the same
    # mirrors, so the same checks cover it"); the approximations below remain for kuromoji, which has no mirror.
    if kind in _MIRRORS:
        return _MIRRORS[kind]
    if kind == "kuromoji":

        def cjk(text: str) -> list[str]:
            out: list[str] = []
            run: list[str] = []
            for tok in _WORD.findall(text.lower()):
                if _CJK.fullmatch(tok):
                    run.append(tok)
                    continue
                out.extend(_bigrams(run))
                run = []
                out.append(tok)
            out.extend(_bigrams(run))
            return out

        return cjk
    return lambda text: _WORD.findall(text.lower())


def _mmr_errors(size: int, window: int, lam: Any) -> list[str]:
    """``DiversifyRetrieverBuilder.validateMMRDiversification``: ``size`` in ``(0, rank_window_size]`` and
    ``lambda`` in ``[0, 1]``, each failure a line of the validation error."""
    errors = []
    if size <= 0:
        errors.append(f"[diversify] MMR result diversification [size] of {size} must be greater than zero")
    if size > window:
        errors.append(
            f"[diversify] MMR result diversification [size] of {size} cannot be greater than the "
            f"[rank_window_size] of {window}"
        )
    if lam is None or isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 <= float(lam) <= 1.0:
        errors.append(
            "[diversify] MMR result diversification must have a [lambda] between 0.0 and 1.0. "
            f"The value provided was {'null' if lam is None else lam}"
        )
    return errors


def _bigrams(run: list[str]) -> list[str]:
    if len(run) == 1:
        return run
    return ["".join(run[i : i + 2]) for i in range(len(run) - 1)]


# -- the searcher ----------------------------------------------------------------------------------------------
@dataclass
class IndexView:
    """What a search reads of one index."""

    name: str
    docs: dict[str, dict[str, Any]]
    fields: dict[str, FieldSpec]
    analyzers: dict[str, Any]
    k1: float
    b: float
    semantic: dict[str, dict[str, list[tuple[str, list[float]]]]]
    """semantic_text field -> doc id -> [(chunk text, embedding)]."""
    shards: int = 1
    """``index.number_of_shards`` (``_shards.total`` of a search counts every shard searched)."""
    max_terms_count: int = 65536
    """``index.max_terms_count`` (``IndexSettings.MAX_TERMS_COUNT_SETTING``, default 65536)."""


class Searcher:
    """Parse and run one search body on one or more indices.

    Args:
        views: The searched indices.
        version: Cluster version.
        license_type: Licence type (``basic``, ``trial``, ``enterprise``, ...).
        license_active: Whether the licence is active.
        lookup: Fetch a terms-lookup document: ``(index, id, path) -> values``; raises for a missing index.
        embed: Embed a query for a ``semantic`` query on a field: ``(index, field, text) -> vector``.
    """

    def __init__(
        self,
        views: Sequence[IndexView],
        *,
        version: tuple[int, ...],
        license_type: str,
        license_active: bool,
        lookup: Callable[[str, str, str], list[Any]],
        embed: Callable[[str, str, str], list[float]],
        rerank: Callable[[str, str, str], float] | None = None,
    ) -> None:
        self.views = list(views)
        self.rerank = rerank
        self.version = version
        self.license_ok = license_active and license_type in ENTERPRISE
        self.lookup = lookup
        self.embed = embed
        self._stats: dict[tuple[str, str], tuple[int, float, dict[str, int], dict[str, list[str]]]] = {}
        self._query_tokens: dict[tuple[str, str, str], list[str]] = {}
        self._term_counts: dict[tuple[str, str, str], Counter[str]] = {}
        self._now: int | None = None

    def _now_ms(self) -> int:
        """``SearchExecutionContext.nowInMillis``: one ``now`` per search request, read on first use."""
        if self._now is None:
            self._now = int(datetime.now(tz=timezone.utc).timestamp() * 1000)
        return self._now

    # -- entry points ----------------------------------------------------------------------------------------
    def search(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and run a ``_search`` body; returns the response."""
        body = dict(body or {})
        self._root_body = body
        for key, value in body.items():
            if key not in TOP_LEVEL:
                # SearchSourceBuilder.parseXContent / throwUnknownKey: "Unknown key for a " + token, the
                # XContentParser.Token the value starts with
                raise EsError(
                    400, "parsing_exception", f"Unknown key for a {_token(value)} in [{key}].", source=SEARCH_SRC
                )
        if "retriever" in body:
            if "query" in body:  # parsed (and refused) before SearchSourceBuilder.validate runs
                self.validate_query(body["query"])
            errors = self._validate_retriever(body["retriever"], body.get("size"))
            specified = [key for key in RETRIEVER_CONFLICTS if _specified(body, key)]
            if specified:
                errors.append(f"cannot specify [retriever] and [{', '.join(specified)}]")
            if errors:
                raise validation_failed(errors, source=VALIDATION_SRC)
        for key in body:
            if key not in IMPLEMENTED_TOP:
                raise DoubleLimit(f"the [{key}] search option")
        source_spec = self._source_spec(body.get("_source"))
        fetch_fields = self._fields_spec(body.get("fields"))
        if _named(body.get("query")) or _named(body.get("knn")):
            raise DoubleLimit("named queries (_name: hits[].matched_queries)")
        size = int(body.get("size", 10))
        start = int(body.get("from", 0))
        total: int | None = None
        if "retriever" in body:
            self._last_matched: set[tuple[str, str]] = set()
            ranked = self.retriever(body["retriever"], size)
            total = len(self._last_matched)
        else:
            ranked = self._query_and_knn(body, size + start)
        if "sort" in body:
            ranked = self._sorted(ranked, body["sort"])
        page = ranked[start : start + size]
        hits = []
        for view, doc_id, score in page:
            hit: dict[str, Any] = {"_index": view.name, "_id": doc_id, "_score": score}
            src = self.filter_source(view, view.docs[doc_id], source_spec)
            if src is not None:
                hit["_source"] = src
            if fetch_fields:
                fetched = self.fetch_fields(view, view.docs[doc_id], fetch_fields)
                if fetched:
                    hit["fields"] = fetched
            if "highlight" in body:
                hl = self._highlight(view, doc_id, body["highlight"], body)
                if hl:
                    hit["highlight"] = hl
            hits.append(hit)
        scores = [s for _, _, s in ranked if s is not None]
        out_hits: dict[str, Any] = {"max_score": max(scores) if scores else None, "hits": hits}
        track = body.get("track_total_hits", 10000)
        if track is not False:
            limit = None if track is True else int(track)
            matched = len(ranked) if total is None else total
            if limit is not None and matched > limit:
                out_hits["total"] = {"value": limit, "relation": "gte"}
            else:
                out_hits["total"] = {"value": matched, "relation": "eq"}
        shards = sum(v.shards for v in self.views)
        response = {
            "took": 1,
            "timed_out": False,
            "_shards": {"total": shards, "successful": shards, "skipped": 0, "failed": 0},
            "hits": out_hits,
        }
        aggs = body.get("aggs", body.get("aggregations"))
        if aggs is not None:
            response["aggregations"] = self._aggregations(body, aggs)
        return response

    def _max_subaggregations(self, aggs: Any) -> dict[str, str]:
        """The ``max`` sub-aggregations of a composite (name -> field): the largest value of a numeric field in each
        bucket as a double, ``null`` where no document of the bucket has one, an unmapped field included
        (rest-api-spec ``search.aggregation/110_max_metric.yml``: "Basic test" ``value: 151.0`` on an integer field,
        "Missing field without missing param" ``is_false: ...value``). A non-numeric field is a bad request
        ("Aggregating wrong datatype test"; the message is ``ValuesSourceRegistry.getAggregator``'s)."""
        if not isinstance(aggs, Mapping):
            raise EsError(400, "parsing_exception", "Expected [START_OBJECT] under [aggs]", source=SEARCH_SRC)
        out: dict[str, str] = {}
        for name, spec in aggs.items():
            if not isinstance(spec, Mapping) or list(spec) != ["max"] or set(spec["max"]) != {"field"}:
                raise DoubleLimit(f"sub-aggregation {spec!r} (only max with a field)")
            field = spec["max"]["field"]
            for view in self.views:
                ftype = view.fields.get(field)
                if ftype is not None and ftype.type == "date":
                    raise DoubleLimit(f"max over the date field [{field}]")
                if ftype is not None and ftype.type not in NUMERIC_TYPES:
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"Field [{field}] of type [{ftype.type}] is not supported for aggregation [max]",
                        source="server/src/main/java/org/elasticsearch/search/aggregations/support/"
                        "ValuesSourceRegistry.java",
                    )
            out[str(name)] = str(field)
        return out

    def _aggregations(self, body: Mapping[str, Any], aggs: Any) -> dict[str, Any]:
        """``composite`` aggregations of ``terms`` sources on single-valued keyword fields (what es_rag sends:
        the sources listing); buckets in key order (keywords compare as UTF-8 bytes), ``size`` (default 10) per
        page, ``after`` excludes keys up to it, ``after_key`` is the last bucket's key. Anything else is a double
        limit."""
        if not isinstance(aggs, Mapping):
            raise EsError(400, "parsing_exception", "Expected [START_OBJECT] under [aggs]", source=SEARCH_SRC)
        if "retriever" in body or "knn" in body:
            raise DoubleLimit("aggregations next to a retriever or knn")
        matched = self.matching(body.get("query", {"match_all": {}}))
        out: dict[str, Any] = {}
        for name, spec in aggs.items():
            kinds = list(spec) if isinstance(spec, Mapping) else []
            if kinds in (["terms"], ["missing"]):
                out[name] = self._field_aggregation(kinds[0], spec[kinds[0]], matched)
                continue
            if sorted(kinds) not in (["composite"], ["aggs", "composite"]):
                raise DoubleLimit(f"aggregation {kinds} (only composite, terms, missing)")
            comp = spec["composite"]
            subs = self._max_subaggregations(spec.get("aggs", {}))
            unknown = sorted(set(comp) - {"size", "sources", "after"})
            if unknown:
                raise EsError(400, "x_content_parse_exception", f"[composite] unknown field [{unknown[0]}]",
                              source=COMPOSITE_SRC)  # fmt: skip
            if not comp.get("sources"):
                raise EsError(400, "x_content_parse_exception", "Required [sources]", source=COMPOSITE_SRC)
            names, fields = [], []
            for source in comp["sources"]:
                ((sname, sdef),) = source.items()
                ((stype, sbody),) = sdef.items()
                if stype != "terms" or set(sbody) != {"field"}:
                    raise DoubleLimit(f"composite source [{stype}] with {sorted(sbody)}")
                for view in self.views:
                    spec = view.fields.get(sbody["field"])
                    if spec is not None and spec.type == "text":  # TextFieldMapper: no fielddata by default
                        raise EsError(
                            400,
                            "illegal_argument_exception",
                            f"Fielddata is disabled on [{sbody['field']}] in [{view.name}]. Text fields are not "
                            "optimised for operations that require per-document field data like aggregations and "
                            "sorting, so these operations are disabled by default. Please use a keyword field "
                            "instead.",
                            source="server/src/main/java/org/elasticsearch/index/mapper/TextFieldMapper.java",
                        )
                    if spec is not None and spec.type != "keyword":
                        raise DoubleLimit(f"composite terms over a [{spec.type}] field")
                    if spec is not None and spec.params.get("doc_values") is False:
                        # aggregations read doc values, not the index: `index: false` keeps them (source_path),
                        # `doc_values: false` does not (MappedFieldType.failIfNoDocValues)
                        raise EsError(
                            400,
                            "illegal_argument_exception",
                            f"Can't load fielddata on [{sbody['field']}] because fielddata is unsupported on fields "
                            "of type [keyword]. Use doc values instead.",
                            source="server/src/main/java/org/elasticsearch/index/mapper/MappedFieldType.java",
                        )
                names.append(sname)
                fields.append(sbody["field"])
            counts: dict[tuple[str, ...], int] = {}
            peaks: dict[tuple[str, tuple[str, ...]], float] = {}
            for view, doc_id in matched:
                doc = view.docs[doc_id]
                values = [doc.get(f) for f in fields]
                if any(isinstance(v, (list, dict)) for v in values):
                    raise DoubleLimit("composite terms over a multi-valued field")
                if any(v is None for v in values):  # missing_bucket is false by default: no bucket
                    continue
                key = tuple(str(v) for v in values)
                counts[key] = counts.get(key, 0) + 1
                for sub, field in subs.items():
                    value = doc.get(field)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        peaks[(sub, key)] = max(peaks.get((sub, key), float("-inf")), float(value))

            def order(key: tuple[str, ...]) -> tuple[bytes, ...]:
                return tuple(part.encode("utf-8") for part in key)

            keys = sorted(counts, key=order)
            after = comp.get("after")
            if after is not None:
                bound = order(tuple(str(after[n]) for n in names))
                keys = [k for k in keys if order(k) > bound]
            page = keys[: int(comp.get("size", 10))]
            result: dict[str, Any] = {
                "buckets": [
                    {
                        "key": dict(zip(names, k, strict=True)),
                        "doc_count": counts[k],
                        **{sub: {"value": peaks.get((sub, k))} for sub in subs},
                    }
                    for k in page
                ]
            }
            if page:
                result["after_key"] = dict(zip(names, page[-1], strict=True))
            out[name] = result
        return out

    def _field_aggregation(self, kind: str, spec: Any, matched: list[tuple[IndexView, str]]) -> dict[str, Any]:
        """``terms`` on a keyword field or ``_index`` (``TermsAggregationBuilder``: buckets by ``doc_count``
        descending, then key ascending, ``size`` default 10, one count per value of a multi-valued field) and
        ``missing`` (``MissingAggregationBuilder``: documents without a value). Other parameters are a double
        limit."""
        if not isinstance(spec, Mapping) or "field" not in spec:
            raise EsError(400, "illegal_argument_exception", "Required one of fields [field, script], but none "
                          "were specified.", source=SEARCH_SRC)  # fmt: skip
        extra = sorted(set(spec) - ({"field", "size"} if kind == "terms" else {"field"}))
        if extra:
            raise DoubleLimit(f"{kind} aggregation parameter [{extra[0]}]")
        fld = str(spec["field"])
        if fld != "_index":
            for view in self.views:
                fspec = view.fields.get(fld)
                if fspec is not None and fspec.type != "keyword":
                    raise DoubleLimit(f"{kind} aggregation over a [{fspec.type}] field")
        counts: dict[str, int] = {}
        without = 0
        for view, doc_id in matched:
            value = view.name if fld == "_index" else view.docs[doc_id].get(fld)
            values = value if isinstance(value, list) else ([] if value is None else [value])
            if not values:
                without += 1
            for v in dict.fromkeys(str(x) for x in values):
                counts[v] = counts.get(v, 0) + 1
        if kind == "missing":
            return {"doc_count": without}
        keys = sorted(counts, key=lambda k: (-counts[k], k.encode("utf-8")))
        size = int(spec.get("size", 10))
        return {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": sum(counts[k] for k in keys[size:]),
            "buckets": [{"key": k, "doc_count": counts[k]} for k in keys[:size]],
        }

    def count(self, body: Mapping[str, Any]) -> int:
        """``_count``: the documents the query matches."""
        for key in body or {}:
            if key != "query":
                raise EsError(400, "parsing_exception", f"request does not support [{key}]", source=SEARCH_SRC)
        query = (body or {}).get("query", {"match_all": {}})
        self._root_body = body
        self.validate_query(query)
        self._lookups = self.prefetch_lookups(query)
        return sum(1 for view in self.views for d in view.docs if self._score(query, view, d) is not None)

    def matching(self, query: Mapping[str, Any], *, root: Any = None) -> list[tuple[IndexView, str]]:
        """Every document the query matches (``_delete_by_query``).

        Args:
            query: The query.
            root: The request body holding it (to locate an empty clause); the search's own body by default.
        """
        if root is not None:
            self._root_body = root
        self.validate_query(query)
        self._lookups = self.prefetch_lookups(query)
        return [(v, d) for v in self.views for d in list(v.docs) if self._score(query, v, d) is not None]

    # -- _source ---------------------------------------------------------------------------------------------
    def _source_spec(self, spec: Any) -> dict[str, Any]:
        if spec is None:
            return {}
        if isinstance(spec, bool):
            return {"enabled": spec}
        if isinstance(spec, (str, list)):
            return {"includes": [spec] if isinstance(spec, str) else list(spec)}
        if not isinstance(spec, Mapping):
            raise EsError(400, "parsing_exception", "Expected [START_OBJECT] for _source", source=SEARCH_SRC)
        for key, value in spec.items():
            # FetchSourceContext.EXCLUDE_VECTORS_FIELD parses from 9.1 and 8.19 (transport version
            # search_source_exclude_vectors_param 9092000 / 8841046); vectors leave _source by default from 9.2
            if key == "exclude_vectors" and since_9_1_or_8_19(self.version):
                continue
            if key not in ("includes", "include", "excludes", "exclude"):
                token = "VALUE_BOOLEAN" if isinstance(value, bool) else "START_ARRAY"
                raise EsError(
                    400,
                    "parsing_exception",
                    f"Unknown key for a {token} in [{key}].",
                    source="server/src/main/java/org/elasticsearch/search/fetch/subphase/FetchSourceContext.java",
                )
        return dict(spec)

    def filter_source(self, view: IndexView, doc: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any] | None:
        """``_source`` as returned: 9.2+ leaves ``dense_vector`` and semantic embeddings out unless
        ``exclude_vectors: false`` (``index.mapping.exclude_source_vectors``); then includes/excludes."""
        if spec.get("enabled") is False:
            return None
        src = dict(doc)
        if self.version >= (9, 2) and spec.get("exclude_vectors", True) is not False:
            for name, fspec in view.fields.items():
                if fspec.type == "dense_vector":
                    src.pop(name, None)
        includes = spec.get("includes", spec.get("include"))
        excludes = spec.get("excludes", spec.get("exclude")) or []
        if includes:
            src = {k: v for k, v in src.items() if any(_wild(p, k) for p in _as_list(includes))}
        return {k: v for k, v in src.items() if not any(_wild(p, k) for p in _as_list(excludes))}

    # -- fields ----------------------------------------------------------------------------------------------
    def _fields_spec(self, spec: Any) -> list[str]:
        """The ``fields`` patterns (``FieldAndFormat``: a name or ``{"field", "format", "include_unmapped"}``)."""
        if spec is None:
            return []
        if not isinstance(spec, list):
            raise EsError(400, "parsing_exception", "Expected [START_ARRAY] for [fields]", source=SEARCH_SRC)
        out = []
        for item in spec:
            if isinstance(item, Mapping):
                for key in item:
                    if key not in ("field", "format", "include_unmapped"):
                        raise parse_error(
                            "fields",
                            key,
                            source="server/src/main/java/org/elasticsearch/search/fetch/subphase/FieldAndFormat.java",
                        )
                if item.get("format") is not None or item.get("include_unmapped"):
                    raise DoubleLimit("the [format] / [include_unmapped] options of [fields]")
                item = item.get("field")
            if not isinstance(item, str):
                raise EsError(400, "parsing_exception", "[fields] entries must name a field", source=SEARCH_SRC)
            if item.startswith("_"):
                raise DoubleLimit(f"fetching the metadata field [{item}] with [fields]")
            out.append(item)
        return out

    def fetch_fields(self, view: IndexView, doc: Mapping[str, Any], patterns: list[str]) -> dict[str, list[Any]]:
        """``FetchFieldsPhase``: every mapped leaf field (multi-fields included) a pattern matches, with its
        ``_source`` values formatted by the field type; fields without values are left out."""
        out: dict[str, list[Any]] = {}
        for name, spec, source_path in _leaf_fields(view.fields):
            if not any(_wild(p, name) for p in patterns):
                continue
            if spec.type not in FETCH_FIELD_TYPES:
                raise DoubleLimit(f"fetching a [{spec.type}] field with [fields]")
            raw = _values(doc, source_path)
            values = [_fetch_value(spec.type, v) for v in _flatten(raw)] if spec.type != "dense_vector" else raw
            values = [v for v in values if v is not None]
            if values:
                out[name] = values
        return out

    # -- queries ---------------------------------------------------------------------------------------------
    def _query_and_knn(self, body: Mapping[str, Any], window: int) -> list[tuple[IndexView, str, float | None]]:
        query = body.get("query")
        knn = body.get("knn")
        scores: dict[tuple[int, str], float] = {}
        order: dict[tuple[int, str], int] = {}
        if query is not None or knn is None:
            q = query if query is not None else {"match_all": {}}
            self.validate_query(q)
            for vi, view in enumerate(self.views):
                for doc_id in view.docs:
                    s = self._score(q, view, doc_id)
                    if s is not None:
                        scores[(vi, doc_id)] = s
                        order.setdefault((vi, doc_id), len(order))
        if knn is not None:
            size = int(body.get("size", 10))
            for clause in knn if isinstance(knn, list) else [knn]:
                for vi, doc_id, s in self._knn(clause, default_k=size):
                    scores[(vi, doc_id)] = scores.get((vi, doc_id), 0.0) + s
                    order.setdefault((vi, doc_id), len(order))
        ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
        return [(self.views[vi], d, scores[(vi, d)]) for vi, d in ranked]

    def validate_query(self, query: Any) -> None:
        """Refuse unknown queries and parameters before anything runs (``parseInnerQueryBuilder``): ``{}`` is
        ``query malformed, empty clause found at [line:col]`` (an IAE whose message holds the location of the
        clause's closing brace), a second key after a parsed clause is ``[name] malformed query, expected
        [END_OBJECT] but found [FIELD_NAME]``."""
        if not isinstance(query, Mapping):
            raise EsError(
                400, "parsing_exception", "[_na] query malformed, must start with start_object", source=QUERY_SRC
            )
        if not query:
            at = _clause_location(getattr(self, "_root_body", None), query)
            raise EsError(
                400,
                "illegal_argument_exception",
                f"query malformed, empty clause found at [{at}]",
                source=QUERY_SRC + " (parseInnerQueryBuilder)",
            )
        if len(query) > 1:
            first = next(iter(query))
            self.validate_query({first: query[first]})  # the first clause is parsed before the next key is read
            raise EsError(
                400,
                "parsing_exception",
                f"[{first}] malformed query, expected [END_OBJECT] but found [FIELD_NAME]",
                source=QUERY_SRC + " (parseInnerQueryBuilder); SearchSourceBuilderTests"
                ".testMultipleQueryObjectsAreRejected",
            )
        ((kind, spec),) = query.items()
        if kind not in REGISTERED_QUERIES:
            raise EsError(400, "parsing_exception", f"unknown query [{kind}]", source=QUERY_SRC)
        if kind not in ALL_QUERIES:
            raise DoubleLimit(f"the [{kind}] query")
        if kind in QUERY_PARAMS:
            for key in spec:
                if key not in QUERY_PARAMS[kind]:
                    if kind in ("bool", "semantic"):
                        # ObjectParser("bool") / ConstructingObjectParser("semantic", false): the parser's own
                        # x_content_parse_exception, unwrapped by fromXContent
                        raise parse_error(kind, key, source=OBJECT_PARSER_QUERIES[kind])
                    if kind in ("ids", "match_all"):
                        # ObjectParser, and fromXContent rethrows its IAE as ParsingException(e.getMessage())
                        raise EsError(
                            400,
                            "parsing_exception",
                            f"[{kind}] unknown field [{key}]",
                            source=OBJECT_PARSER_QUERIES[kind],
                        )
                    raise EsError(
                        400, "parsing_exception", f"[{kind}] query does not support [{key}]", source=QUERY_SRC
                    )
        if kind in FIELD_QUERIES and isinstance(spec, Mapping):
            fields = [k for k in spec if k not in ("boost", "_name")]
            if len(fields) != 1:
                raise EsError(
                    400,
                    "parsing_exception",
                    f"[{kind}] query doesn't support multiple fields, found [{fields[0]}] and [{fields[1]}]"
                    if len(fields) > 1
                    else f"No field specified for {kind} query",
                    source=QUERY_SRC,
                )
            inner = spec[fields[0]]
            if isinstance(inner, Mapping):
                for key in inner:
                    if key not in FIELD_QUERIES[kind]:
                        raise EsError(
                            400, "parsing_exception", f"[{kind}] query does not support [{key}]", source=QUERY_SRC
                        )
        if kind == "multi_match" and spec.get("type", "best_fields") not in MULTI_MATCH_TYPES:
            # MultiMatchQueryBuilder.Type.parse: ElasticsearchParseException, not wrapped by fromXContent
            raise EsError(
                400,
                "parse_exception",
                f"failed to parse [multi_match] query type [{spec['type']}]. unknown type.",
                source="server/src/main/java/org/elasticsearch/index/query/MultiMatchQueryBuilder.java (Type.parse)",
            )
        if kind == "semantic" and spec.get("lenient") not in (None, False):
            raise DoubleLimit("the semantic query's [lenient] option (match none on non-semantic_text fields)")
        if kind == "terms":
            fields = [k for k in spec if k not in ("boost", "_name")]
            if len(fields) != 1:
                raise EsError(400, "parsing_exception", "[terms] query requires exactly one field", source=QUERY_SRC)
            lookup = spec[fields[0]]
            if isinstance(lookup, Mapping):
                for key in lookup:
                    if key not in ("index", "id", "path", "routing"):
                        raise parse_error(
                            "terms_lookup",
                            key,
                            source="server/src/main/java/org/elasticsearch/indices/TermsLookup.java",
                        )
                for key in ("id", "path", "index"):
                    if key not in lookup:
                        raise EsError(
                            400,
                            "parsing_exception",
                            f"[terms] query lookup element requires specifying the {key}.",
                            source="server/src/main/java/org/elasticsearch/indices/TermsLookup.java",
                        )
        if kind == "bool":
            for key in ("must", "filter", "should", "must_not"):
                for sub in _as_list(spec.get(key)):
                    self.validate_query(sub)
        if kind == "dis_max":
            for sub in spec.get("queries", []):
                self.validate_query(sub)
        if kind == "constant_score":
            if "filter" not in spec:
                raise EsError(
                    400,
                    "parsing_exception",
                    "[constant_score] requires a 'filter' element",
                    source="server/src/main/java/org/elasticsearch/index/query/ConstantScoreQueryBuilder.java",
                )
            self.validate_query(spec["filter"])
        if kind == "knn":
            raise DoubleLimit("the knn query (use the knn section or the knn retriever)")

    def prefetch_lookups(self, node: Any) -> dict[int, list[str]]:
        """The coordinating node's rewrite: one GET per terms-lookup clause occurrence, all before any document
        is scored; a missing lookup index fails the whole search. Returns values by clause identity."""
        fetched: dict[int, list[str]] = {}

        def walk(n: Any) -> None:
            if isinstance(n, Mapping):
                for key, value in n.items():
                    if key == "terms" and isinstance(value, Mapping):
                        for spec in value.values():
                            if isinstance(spec, Mapping) and "index" in spec:
                                fetched[id(spec)] = [
                                    str(v) for v in self.lookup(spec["index"], spec["id"], spec["path"])
                                ]
                    walk(value)
            elif isinstance(n, list):
                for item in n:
                    walk(item)

        walk(node)
        return fetched

    def run(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Prefetch the terms lookups of ``body`` (rewrite phase), then :meth:`search`."""
        self._lookups = self.prefetch_lookups(body)
        return self.search(body)

    def _score(self, clause: Mapping[str, Any], view: IndexView, doc_id: str) -> float | None:
        """None: no match; else the clause's score (0 in filter context)."""
        doc = view.docs[doc_id]
        ((kind, spec),) = clause.items()
        if kind == "match_all":
            return 1.0
        if kind == "term":
            ((fld, value),) = ((k, v) for k, v in spec.items() if k not in ("boost", "_name"))
            if isinstance(value, Mapping):
                if value.get("case_insensitive"):
                    raise DoubleLimit("case_insensitive term queries")
                value = value.get("value", value.get("term"))
            return self._term(view, doc_id, fld, [value], score_text=True)
        if kind == "terms":
            ((fld, values),) = ((k, v) for k, v in spec.items() if k not in ("boost", "_name"))
            if isinstance(values, Mapping):
                lookups = getattr(self, "_lookups", {})
                if id(values) not in lookups:
                    lookups[id(values)] = [str(v) for v in self.lookup(values["index"], values["id"], values["path"])]
                    self._lookups = lookups
                allowed = set(lookups[id(values)])
                _check_terms_count(view, len(allowed))
                return self._term(view, doc_id, fld, sorted(allowed), score_text=False)
            _check_terms_count(view, len(values))
            return self._term(view, doc_id, fld, list(values), score_text=False)
        if kind == "ids":
            return 1.0 if doc_id in {str(v) for v in spec["values"]} else None
        if kind == "range":
            ((fld, ops),) = ((k, v) for k, v in spec.items() if k not in ("boost", "_name"))
            return 1.0 if _range_matches(view, doc, fld, ops, self._now_ms()) else None
        if kind == "bool":
            total = 0.0
            for f in _as_list(spec.get("filter")):
                if self._score(f, view, doc_id) is None:
                    return None
            for f in _as_list(spec.get("must_not")):
                if self._score(f, view, doc_id) is not None:
                    return None
            for m in _as_list(spec.get("must")):
                s = self._score(m, view, doc_id)
                if s is None:
                    return None
                total += s
            if (
                spec.get("adjust_pure_negative") is False
                and not any(spec.get(k) for k in ("must", "filter", "should"))
                and spec.get("must_not")
            ):
                # BoolQueryBuilder.doToQuery: only adjustPureNegative adds the match-all a pure negative needs
                return None
            shoulds = [self._score(s, view, doc_id) for s in _as_list(spec.get("should"))]
            matched = [s for s in shoulds if s is not None]
            required = spec.get("minimum_should_match")
            if required is None:
                required = 1 if shoulds and not spec.get("must") and not spec.get("filter") else 0
            if len(matched) < int(required):
                return None
            return total + sum(matched)
        if kind == "multi_match":
            return self._multi_match(spec, view, doc_id)
        if kind == "match":
            ((fld, q),) = ((k, v) for k, v in spec.items() if k not in ("boost", "_name"))
            text = q["query"] if isinstance(q, Mapping) else q
            s = self._bm25(view, fld, str(text), doc_id)
            return s if s > 0 else None
        if kind == "dis_max":
            scores = [self._score(q, view, doc_id) for q in spec["queries"]]
            hit = [s for s in scores if s is not None]
            if not hit:
                return None
            best = max(hit)
            return best + float(spec.get("tie_breaker", 0.0)) * (sum(hit) - best)
        if kind == "match_phrase":
            ((fld, q),) = ((k, v) for k, v in spec.items() if k not in ("boost", "_name"))
            phrase_text = q["query"] if isinstance(q, Mapping) else q
            analyze = self._field_analyzer(view, fld)
            phrase = analyze(str(phrase_text))
            tokens = analyze(" ".join(str(v) for v in _values(doc, fld.split(".")[0])))
            n = len(phrase)
            count = sum(1 for i in range(len(tokens) - n + 1) if tokens[i : i + n] == phrase) if n else 0
            return float(count) if count else None
        if kind == "semantic":
            return self._semantic(spec, view, doc_id)
        if kind == "constant_score":  # ConstantScoreQueryBuilder: the filter's matches, each scored [boost]
            return float(spec.get("boost", 1.0)) if self._score(spec["filter"], view, doc_id) is not None else None
        raise DoubleLimit(f"the [{kind}] query")

    def _term(self, view: IndexView, doc_id: str, fld: str, terms: list[Any], *, score_text: bool) -> float | None:
        """Whether the indexed terms of ``fld`` hold one of ``terms`` (``TermQueryBuilder`` /
        ``TermsQueryBuilder``: terms are not analyzed); a ``term`` on a ``text`` field scores BM25."""
        if fld == "_id":
            return 1.0 if doc_id in {_norm(t) for t in terms} else None
        spec = _resolve_field(view.fields, fld)
        if spec is None:
            return None  # unmapped: MatchNoDocsQuery
        source_path = fld if fld in _source_paths(view.fields) else fld.rsplit(".", 1)[0]
        values = _flatten(_values(view.docs[doc_id], source_path))
        if spec.type == "text":
            tokens = self._field_analyzer(view, fld)(" ".join(str(v) for v in values))
            hit = [str(t) for t in terms if str(t) in tokens]
            if not hit:
                return None
            return self._bm25_tokens(view, fld, hit, doc_id) if score_text else 1.0
        if spec.type in NUMERIC_TYPES:
            try:
                wanted = {float(t) for t in terms}
                return 1.0 if any(float(v) in wanted for v in values) else None
            except (TypeError, ValueError):
                raise EsError(
                    400,
                    "query_shard_exception",
                    f'failed to create query: For input string: "{terms[0]}"',
                    source="server/src/main/java/org/elasticsearch/index/mapper/NumberFieldMapper.java",
                ) from None
        if spec.type in ("keyword", "boolean", "date"):
            return 1.0 if {_norm(v) for v in values} & {_norm(t) for t in terms} else None
        raise DoubleLimit(f"term queries on a [{spec.type}] field")

    def _field_analyzer(self, view: IndexView, path: str) -> Callable[[str], list[str]]:
        base, _, sub = path.partition(".")
        spec = view.fields.get(base)
        if spec is None:
            return lambda text: []
        if sub:
            spec = spec.subfields.get(sub)
            if spec is None:
                return lambda text: []
        if spec.type == "keyword":
            return lambda text: [text]
        return analyzer_fn(str(spec.params.get("analyzer", "standard")), view.analyzers)

    def _stats_for(self, view: IndexView, fld: str) -> tuple[int, float, dict[str, int], dict[str, list[str]]]:
        key = (view.name, fld)
        if key not in self._stats:
            analyze = self._field_analyzer(view, fld)
            toks: dict[str, list[str]] = {}
            df: dict[str, int] = {}
            for doc_id, doc in view.docs.items():
                vals = _values(doc, fld.split(".")[0])
                if not vals:
                    continue
                t = analyze(" ".join(str(v) for v in vals))
                if not t:  # Lucene's docCount and sumTotalTermFreq count only documents with a term in the field
                    continue
                toks[doc_id] = t
                for term in set(t):
                    df[term] = df.get(term, 0) + 1
            n = len(toks)
            # BM25Similarity: avgdl = sumTotalTermFreq / docCount, computed as a float
            avg = float(np.float32(sum(len(t) for t in toks.values()) / n)) if n else 1.0
            self._stats[key] = (n, avg or 1.0, df, toks)
        return self._stats[key]

    def _bm25(self, view: IndexView, fld: str, text: str, doc_id: str) -> float:
        key = (view.name, fld, text)
        tokens = self._query_tokens.get(key)
        if tokens is None:  # a query's text is analysed once, not once per document it is scored against
            tokens = self._query_tokens[key] = self._field_analyzer(view, fld)(text)
        return self._bm25_tokens(view, fld, tokens, doc_id)

    def _bm25_tokens(self, view: IndexView, fld: str, tokens: list[str], doc_id: str) -> float:
        n, avg, df, toks = self._stats_for(view, fld)
        doc_toks = toks.get(doc_id)
        if not doc_toks:
            return 0.0
        counts = self._term_counts.get((view.name, fld, doc_id))
        if counts is None:
            counts = self._term_counts[(view.name, fld, doc_id)] = Counter(doc_toks)
        score = 0.0
        for term in tokens:
            tf = counts.get(term, 0)
            if not tf:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            dl = _norm_length(len(doc_toks))  # the length as the one-byte norm stores it
            score += idf * tf * (view.k1 + 1) / (tf + view.k1 * (1 - view.b + view.b * dl / avg))
        return score

    def _multi_match(self, spec: Mapping[str, Any], view: IndexView, doc_id: str) -> float | None:
        kind = spec.get("type", "best_fields")
        if kind not in ("best_fields", "most_fields"):
            raise DoubleLimit(f"multi_match type {kind}")
        scores = []
        for f in spec.get("fields") or ["*"]:
            name, _, boost = str(f).partition("^")
            if name == "*":
                raise DoubleLimit("multi_match over all fields")
            scores.append(self._bm25(view, name, str(spec["query"]), doc_id) * (float(boost) if boost else 1.0))
        matched = [s for s in scores if s > 0]
        if not matched:
            return None
        if kind == "most_fields":
            return sum(matched)
        best = max(matched)
        return best + float(spec.get("tie_breaker", 0.0)) * (sum(matched) - best)

    def _semantic(self, spec: Mapping[str, Any], view: IndexView, doc_id: str) -> float | None:
        fld = str(spec["field"])
        fspec = view.fields.get(fld)
        if fspec is None or fspec.type != "semantic_text":
            raise EsError(
                400,
                "query_shard_exception",
                f"failed to create query: Field [{fld}] of type [{fspec.type if fspec else 'unmapped'}] does not "
                "support [semantic] queries",
                source="x-pack/plugin/inference/.../queries/SemanticQueryBuilder.java",
            )
        chunks = view.semantic.get(fld, {}).get(doc_id)
        if not chunks:
            return None
        qvec = self.embed(view.name, fld, str(spec["query"]))
        return max(vector_score("cosine", vec, qvec) for _, vec in chunks)

    def _knn(self, clause: Mapping[str, Any], *, default_k: int) -> list[tuple[int, str, float]]:
        for key in clause:
            if key not in RETRIEVER_KEYS["knn"] - {"min_score"} | {"boost", "inner_hits"}:
                raise parse_error("knn", key, source=KNN_SRC)
        k = int(clause.get("k", default_k))
        num = int(clause.get("num_candidates", min(10000, round(1.5 * k))))
        if k < 1:
            raise EsError(400, "illegal_argument_exception", "[k] must be greater than 0", source=KNN_SRC)
        if num < k:
            raise EsError(400, "illegal_argument_exception", "[num_candidates] cannot be less than [k]", source=KNN_SRC)
        if num > 10000:
            raise EsError(400, "illegal_argument_exception", "[num_candidates] cannot exceed [10000]", source=KNN_SRC)
        if "query_vector" not in clause:
            raise EsError(
                400,
                "illegal_argument_exception",
                "either [query_vector_builder] or [query_vector] must be provided",
                source=KNN_SRC,
            )
        if "rescore_vector" in clause:
            self._rescore_vector(clause["rescore_vector"])
        filters = _as_list(clause.get("filter"))
        for f in filters:
            self.validate_query(f)
        query = [float(x) for x in clause["query_vector"]]
        out = []
        for vi, view in enumerate(self.views):
            fspec = view.fields.get(str(clause["field"]))
            if fspec is None:
                continue  # unmapped field: match none
            if fspec.type != "dense_vector":
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"[knn] queries are only supported on [dense_vector] fields, field [{clause['field']}] is "
                    f"[{fspec.type}]",
                    source=KNN_SRC,
                )
            if (fspec.params.get("index_options") or {}).get("type") == "bbq_disk":
                # DiskBBQ (IVF clusters, default_visit_percentage, 1-bit quantization) is approximate in ways the
                # double's exact scoring cannot reproduce
                raise DoubleLimit("kNN search on a bbq_disk dense_vector field")
            dims = fspec.params.get("dims")
            if dims is not None and len(query) != dims:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"The query vector has a different number of dimensions [{len(query)}] than the document vectors "
                    f"[{dims}].",
                    source="server/src/main/java/org/elasticsearch/index/mapper/vectors/DenseVectorFieldMapper.java",
                )
            similarity = str(fspec.params.get("similarity", "cosine"))
            threshold = None if clause.get("similarity") is None else _min_score(similarity, clause["similarity"])
            for doc_id, doc in view.docs.items():
                vec = doc.get(str(clause["field"]))
                if not isinstance(vec, list) or not vec:
                    continue
                if not all(self._score(f, view, doc_id) is not None for f in filters):
                    continue
                score = vector_score(similarity, [float(x) for x in vec], query)
                if threshold is not None and score < threshold:
                    continue  # KnnSearchBuilder similarity: below the raw similarity threshold
                out.append((vi, doc_id, score))
        out.sort(key=lambda x: -x[2])
        return out[:k]

    def _rescore_vector(self, spec: Any) -> None:
        """``RescoreVectorBuilder`` (8.18+): ``oversample`` required, >= 1, or exactly 0 from 9.1 / 8.19
        (``RESCORE_VECTOR_ALLOW_ZERO`` and its 8.19 backport). The double scores float vectors exactly, so a valid
        oversample changes nothing here."""
        src = "server/src/main/java/org/elasticsearch/search/vectors/RescoreVectorBuilder.java"
        if self.version < (8, 18):
            raise parse_error("knn", "rescore_vector", source=KNN_SRC)
        if not isinstance(spec, Mapping) or "oversample" not in spec:
            raise EsError(
                400, "x_content_parse_exception", "[rescore_vector] failed to parse object", source=src,
                caused_by={"type": "illegal_argument_exception", "reason": "Required [oversample]"},
            )  # fmt: skip
        over = float(spec["oversample"])
        zero_ok = since_9_1_or_8_19(self.version)
        if over < 1.0 and not (over == 0.0 and zero_ok):
            reason = "[oversample] must be >= 1.0 or 0" if zero_ok else "[oversample] must be >= 1.0"
            raise EsError(
                400,
                "x_content_parse_exception",
                "[rescore_vector] failed to build [rescore_vector] after last required field arrived",
                source=src,
                caused_by={"type": "illegal_argument_exception", "reason": reason},
            )

    # -- retrievers ------------------------------------------------------------------------------------------
    def _validate_retriever(self, node: Any, size: Any) -> list[str]:
        """``RetrieverBuilder.validate`` over the tree, as ``SearchSourceBuilder.validate`` calls it before the
        ``cannot specify [retriever]`` check: ``CompoundRetrieverBuilder.validate`` compares ``source.size()`` (the
        request's ``size``; -1, so never, when the request sets none) with each compound's ``rank_window_size``,
        refuses a negative window, validates every child and refuses a child compound with a smaller window than
        its parent's; ``LinearRetrieverBuilder`` adds its normalizer check after that; ``DiversifyRetrieverBuilder``
        overrides ``validate`` without calling ``super`` (its own MMR checks only, its child unvalidated). A node
        the double cannot read as a retriever is left to the parser (it refuses it when the tree runs). The double
        validates the retriever before it parses the rest of the tree, so a body with both a validation error and
        a parse error deeper in the tree answers the validation error (Elasticsearch parses the whole body first)."""
        kind, spec = _retriever_node(node)
        if kind not in COMPOUND_RETRIEVERS or spec is None:
            return []
        if kind == "diversify":
            return self._diversify_errors(spec)
        errors: list[str] = []
        window = _window(spec)
        if window is None:
            return errors
        if isinstance(size, int) and not isinstance(size, bool) and size > window:
            errors.append(f"[{kind}] requires [rank_window_size: {window}] be greater than or equal to [size: {size}]")
        if window < 0:
            errors.append(f"[rank_window_size] parameter cannot be negative, found [{window}]")
        children = (
            [spec.get("retriever")]
            if kind == "text_similarity_reranker"
            else [_component_child(entry) for entry in (spec.get("retrievers") or [])]
        )
        for child in children:
            errors.extend(self._validate_retriever(child, size))
            child_kind, child_spec = _retriever_node(child)
            if child_kind in COMPOUND_RETRIEVERS and child_spec is not None:
                child_window = _window(child_spec)
                if child_window is not None and window > child_window:
                    errors.append(
                        f"[{kind}] requires [rank_window_size: {window}] to be smaller than or equal to its sub "
                        f"retriever's {child_kind} [rank_window_size: {child_window}]"
                    )
        if (
            kind == "linear"
            and spec.get("normalizer") is not None
            and spec.get("retrievers")
            and (9, 1) <= self.version[:2] < (9, 2)
        ):
            errors.append("[linear] [normalizer] cannot be provided when [retrievers] is specified")
        return errors

    @staticmethod
    def _diversify_errors(spec: Mapping[str, Any]) -> list[str]:
        """``DiversifyRetrieverBuilder.validate`` (no ``super.validate``): one of ``query_vector`` or
        ``query_vector_builder``, then ``validateMMRDiversification`` (``size``, ``lambda``)."""
        errors = []
        if "query_vector" in spec and "query_vector_builder" in spec:
            errors.append(
                "[diversify] MMR result diversification can have one of [query_vector] or [query_vector_builder], "
                "but not both"
            )
        if str(spec.get("type", "")).lower() != "mmr":
            return errors
        window = _window(spec)
        size = spec.get("size")
        if window is None or (size is not None and (not isinstance(size, int) or isinstance(size, bool))):
            return errors
        size = min(10, window) if size is None else size  # DEFAULT_SIZE_VALUE
        return errors + _mmr_errors(size, window, spec.get("lambda"))

    def retriever(self, node: Any, window: int) -> list[tuple[IndexView, str, float | None]]:
        """Parse and run a retriever tree; ``window``: hits the caller needs."""
        if not isinstance(node, Mapping) or len(node) != 1:
            raise EsError(400, "parsing_exception", "retriever malformed, empty clause found", source=RETRIEVER_SRC)
        ((kind, spec),) = node.items()
        known = dict(RETRIEVER_KEYS)
        if self.version < (8, 16):
            known.pop("rrf")
        if self.version < (8, 18):
            known.pop("linear")
        if self.version < (8, 14):
            known.pop("text_similarity_reranker")
        if self.version < (9, 3):  # RETRIEVER_RESULT_DIVERSIFICATION_MMR_FEATURE: 9.3, technical preview
            known.pop("diversify")
        if kind not in known:
            raise EsError(400, "parsing_exception", f"unknown retriever [{kind}]", source=RETRIEVER_SRC)
        if kind == "text_similarity_reranker" and not self.license_ok:
            # TextSimilarityRankRetrieverBuilder.fromXContent: TEXT_SIMILARITY_RERANKER_FEATURE is
            # License.OperationMode.ENTERPRISE, checked before the body is parsed
            raise compliance("text_similarity_reranker")
        if kind == "rrf" and not self.license_ok:
            raise compliance("Reciprocal Rank Fusion (RRF)")
        if kind == "linear" and not self.license_ok:
            raise compliance("linear retriever")
        for key in spec:
            if key not in known[kind]:
                raise parse_error(
                    kind, key, source=RRF_SRC if kind == "rrf" else LINEAR_SRC if kind == "linear" else RETRIEVER_SRC
                )
        if kind in REQUIRED_KEYS:
            return self._wrapping(kind, spec, window)
        if "min_score" in spec:
            raise DoubleLimit("retriever min_score")
        filters = _as_list(spec.get("filter"))
        for f in filters:
            self.validate_query(f)
        if kind == "standard":
            for key in ("sort", "search_after", "terminate_after", "collapse"):
                if key in spec:
                    raise DoubleLimit(f"[{key}] in a standard retriever")
            query = spec.get("query", {"match_all": {}})
            self.validate_query(query)
            out = []
            for view in self.views:
                for doc_id in view.docs:
                    if not all(self._score(f, view, doc_id) is not None for f in filters):
                        continue
                    s = self._score(query, view, doc_id)
                    if s is not None:
                        out.append((view, doc_id, s))
            out.sort(key=lambda x: -float(x[2] or 0))
            self._last_matched = {(v.name, d) for v, d, _ in out}
            return out
        if kind == "knn":
            for key in ("k", "num_candidates"):
                if key not in spec:
                    raise EsError(
                        400,
                        "x_content_parse_exception",
                        f"[knn] failed to parse field [{key}]: required",
                        source=RETRIEVER_SRC,
                    )
            found: list[tuple[IndexView, str, float | None]] = [
                (self.views[vi], d, s) for vi, d, s in self._knn(spec, default_k=int(spec["k"]))
            ]
            self._last_matched = {(v.name, d) for v, d, _ in found}
            return found
        return self._compound(kind, spec, filters, window)

    def _compound(
        self, kind: str, spec: Mapping[str, Any], filters: list[Any], window: int
    ) -> list[tuple[IndexView, str, float | None]]:
        if "fields" in spec or "query" in spec:
            raise DoubleLimit(f"the simplified [{kind}] format")
        # rank_window_size against size, and the 9.1 linear normalizer check: SearchSourceBuilder.validate, run
        # before any retriever executes (Searcher._validate_retriever)
        rank_window = int(spec.get("rank_window_size", 10))
        top_normalizer = spec.get("normalizer")
        if kind == "linear" and top_normalizer is not None and self.version < (9, 1):
            raise parse_error("linear", "normalizer", source=LINEAR_SRC)
        children: list[tuple[Any, float, str | None]] = []
        for entry in spec.get("retrievers") or []:
            children.append(self._component(kind, entry, top_normalizer))
        results = []
        matched: set[tuple[str, str]] = set()
        for child, weight, normalizer in children:
            if (
                filters
            ):  # a compound retriever's filter is pushed into every child (RetrieverBuilder.preFilterQueryBuilders)
                child = _with_filter(child, filters)
            ranked = self.retriever(child, rank_window)[:rank_window]
            matched |= self._last_matched  # the final RankDocsQuery counts every child's matches
            results.append((ranked, weight, normalizer))
        fused: dict[tuple[str, str], float] = {}
        first: dict[tuple[str, str], int] = {}
        views: dict[tuple[str, str], IndexView] = {}
        constant = int(spec.get("rank_constant", 60))
        for ranked, weight, normalizer in results:
            norm = (
                _normalize([float(s or 0.0) for _, _, s in ranked], normalizer or "none") if kind == "linear" else None
            )
            for rank, (view, doc_id, _score) in enumerate(ranked, start=1):
                key = (view.name, doc_id)
                views[key] = view
                first.setdefault(key, len(first))
                if kind == "rrf":
                    fused[key] = fused.get(key, 0.0) + weight / (constant + rank)
                else:
                    assert norm is not None
                    fused[key] = fused.get(key, 0.0) + weight * norm[rank - 1]
        order = sorted(fused, key=lambda key: (-fused[key], first[key]))[:rank_window]
        self._last_matched = matched
        return [(views[key], key[1], fused[key]) for key in order]

    def _wrapping(self, kind: str, spec: Mapping[str, Any], window: int) -> list[tuple[IndexView, str, float | None]]:
        """``text_similarity_reranker`` and ``diversify``: one inner retriever whose top ``rank_window_size`` hits
        are reranked by an inference endpoint, or thinned by MMR (``CompoundRetrieverBuilder`` with one source)."""
        src = TSR_SRC if kind == "text_similarity_reranker" else DIVERSIFY_SRC
        missing = [k for k in REQUIRED_KEYS[kind] if k not in spec]
        if missing:
            raise EsError(
                400,
                "x_content_parse_exception",
                f"[{kind}] failed to parse object",
                source=src,
                caused_by={"type": "illegal_argument_exception", "reason": f"Required [{', '.join(missing)}]"},
            )
        rank_window = spec.get("rank_window_size", 10)  # RankBuilder.DEFAULT_RANK_WINDOW_SIZE
        if not isinstance(rank_window, int) or isinstance(rank_window, bool):
            raise EsError(
                400, "x_content_parse_exception", f"[{kind}] failed to parse field [rank_window_size]", source=src
            )
        filters = _as_list(spec.get("filter"))
        inner = spec["retriever"]
        if filters:  # RetrieverBuilder.preFilterQueryBuilders: the filter is pushed into the inner retriever
            inner = _with_filter(inner, filters)
        if kind == "diversify":
            return self._diversify(spec, inner, rank_window, window)
        for key in ("allow_rerank_failures", "chunk_rescorer"):
            if key in spec:
                raise DoubleLimit(f"[{key}] of text_similarity_reranker")
        for key in ("inference_text", "field", "inference_id"):
            if key in spec and not isinstance(spec[key], str):
                raise EsError(400, "x_content_parse_exception", f"[{kind}] failed to parse field [{key}]", source=src)
        inference_id = str(spec.get("inference_id", DEFAULT_RERANK_ID))
        ranked = self.retriever(inner, rank_window)[:rank_window]
        matched = self._last_matched
        if self.rerank is None:
            raise DoubleLimit("text_similarity_reranker on a searcher without inference endpoints")
        fld = str(spec["field"])
        scored = []
        for pos, (view, doc_id, _score) in enumerate(ranked):
            values = _values(view.docs[doc_id], fld)
            text = " ".join(str(v) for v in values)
            scored.append((self.rerank(inference_id, str(spec["inference_text"]), text), pos, view, doc_id))
        scored.sort(key=lambda x: (-x[0], x[1]))
        min_score = spec.get("min_score")
        # TextSimilarityRankFeaturePhaseRankCoordinatorContext.preprocess: min_score on the endpoint's score, then
        # normalizeScore = max(s, 0) + min(exp(s), 1) (8.16.4+, PR #120930), so that no score is negative
        out: list[tuple[IndexView, str, float | None]] = [
            (view, doc_id, max(score, 0.0) + math.exp(min(score, 0.0)))
            for score, _pos, view, doc_id in scored
            if min_score is None or score >= float(min_score)
        ]
        self._last_matched = {(v.name, d) for v, d, _ in out} if min_score is not None else matched
        return out

    def _diversify(
        self, spec: Mapping[str, Any], inner: Any, rank_window: int, window: int
    ) -> list[tuple[IndexView, str, float | None]]:
        """MMR as ``MMRResultDiversification.diversify``: the first pick is the hit most similar to the query vector
        (maximum inner product, Lucene-scaled), then ``argmax lambda * sim(q, d) - (1 - lambda) * max sim(d, s)`` up
        to ``size``; the chosen hits come back in the inner retriever's order with its scores."""
        if "min_score" in spec:
            raise DoubleLimit("diversify min_score")
        dtype = str(spec["type"]).lower()
        if dtype != "mmr":  # ResultDiversificationType.fromString
            raise EsError(
                400,
                "illegal_argument_exception",
                f"unknown result diversification type [{spec['type']}]",
                source=DIVERSIFY_SRC,
            )
        if "query_vector_builder" in spec:
            if "query_vector" in spec:
                raise EsError(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: [diversify] MMR result diversification can have one of [query_vector] or "
                    "[query_vector_builder], but not both;",
                    source=DIVERSIFY_SRC,
                )
            raise DoubleLimit("diversify query_vector_builder")
        size = spec.get("size")
        size = min(10, rank_window) if size is None else int(size)  # DEFAULT_SIZE_VALUE
        lam = spec.get("lambda")
        errors = _mmr_errors(size, rank_window, lam)
        if errors:
            listed = "".join(f"{i}: {e};" for i, e in enumerate(errors, start=1))
            raise EsError(
                400, "action_request_validation_exception", f"Validation Failed: {listed}", source=DIVERSIFY_SRC
            )
        if rank_window < window:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"[diversify] requires [rank_window_size: {rank_window}] be greater than or equal to [size: {window}]",
                source="server/src/main/java/org/elasticsearch/search/retriever/CompoundRetrieverBuilder.java",
            )
        ranked = self.retriever(inner, rank_window)[:rank_window]
        matched = self._last_matched
        fld = str(spec["field"])
        vectors: list[list[float] | None] = []
        for view, doc_id, _ in ranked:
            fspec = view.fields.get(fld)
            if fspec is None or fspec.type != "dense_vector":
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"Failed to retrieve vectors for field [{fld}]. Is it a [dense_vector] field?",
                    source=DIVERSIFY_SRC,
                )
            value = view.docs[doc_id].get(fld)
            vectors.append([float(x) for x in value] if isinstance(value, list) and value else None)
        if ranked and not any(v is not None for v in vectors):
            raise EsError(
                400,
                "status_exception",
                f"Failed to retrieve vectors for field [{fld}]. Is it a [dense_vector] field?",
                source=DIVERSIFY_SRC,
            )
        query = spec.get("query_vector")
        qvec = [float(x) for x in query] if isinstance(query, list) else None

        def sim(a: list[float], b: list[float]) -> float:  # VectorSimilarityFunction.MAXIMUM_INNER_PRODUCT
            dot = sum(x * y for x, y in zip(a, b, strict=True))
            return 1.0 / (1.0 - dot) if dot < 0 else dot + 1.0

        if not ranked:
            return []
        qsim = {i: sim(v, qvec) for i, v in enumerate(vectors) if v is not None and qvec is not None}
        if qsim:
            first = max(qsim, key=lambda i: (qsim[i], -i))
        else:
            first = max(range(len(ranked)), key=lambda i: (float(ranked[i][2] or 0.0), -i))
        selected = [first]
        for _ in range(size):
            if len(selected) >= min(size, len(ranked)):
                break
            best, best_score = -1, float("-inf")
            for i, v in enumerate(vectors):
                if i in selected or v is None:
                    continue
                div = max((sim(v, vs) for j in selected if (vs := vectors[j]) is not None), default=float("-inf"))
                rel = qsim.get(i)
                score = (float(lam) * rel if rel is not None else 0.0) - (1.0 - float(lam)) * div
                if score > best_score:
                    best, best_score = i, score
            if best >= 0:
                selected.append(best)
        self._last_matched = matched
        return [ranked[i] for i in sorted(selected)]

    def _component(self, kind: str, entry: Any, top_normalizer: str | None) -> tuple[Any, float, str | None]:
        if not isinstance(entry, Mapping):
            raise EsError(400, "parsing_exception", "retriever must be an object", source=RRF_SRC)
        wrapped = "retriever" in entry or "weight" in entry
        if kind == "rrf":
            if not wrapped:
                return entry, 1.0, None
            if self.version < (9, 2):  # RRFRetrieverBuilder <= 9.1 parses each child as a named retriever
                raise EsError(
                    400,
                    "x_content_parse_exception",
                    "[rrf] failed to parse field [retrievers]",
                    source=RRF_SRC + " (<= 9.1: no RRFRetrieverComponent)",
                    caused_by={"type": "named_object_not_found_exception", "reason": "unknown field [retriever]"},
                )
            for key in entry:
                if key not in ("retriever", "weight"):
                    raise EsError(
                        400,
                        "parsing_exception",
                        f"unknown field [{key}], expected [retriever] or [weight]",
                        source="x-pack/plugin/rank-rrf/.../RRFRetrieverComponent.java",
                    )
            weight = float(entry.get("weight", 1.0))
            if weight < 0:
                raise EsError(
                    400,
                    "x_content_parse_exception",
                    "[rrf] failed to parse field [retrievers]",
                    source="x-pack/plugin/rank-rrf/.../RRFRetrieverComponent.java",
                    caused_by={
                        "type": "illegal_argument_exception",
                        "reason": f"[weight] must be non-negative, found [{weight}]",
                    },
                )
            if "retriever" not in entry:
                raise EsError(400, "parsing_exception", "retriever component must contain a retriever", source=RRF_SRC)
            return entry["retriever"], weight, None
        for key in entry:
            if key not in ("retriever", "weight", "normalizer"):
                raise parse_error(
                    "retriever-component", key, source="x-pack/plugin/rank-rrf/.../LinearRetrieverComponent.java"
                )
        if "retriever" not in entry:
            raise EsError(
                400,
                "x_content_parse_exception",
                "Required [retriever]",
                source="x-pack/plugin/rank-rrf/.../LinearRetrieverComponent.java",
            )
        # LinearRetrieverComponent.PARSER, ConstructingObjectParser("retriever-component") with three constructor
        # args, read in key order: ScoreNormalizer.valueOf fails inside the [normalizer] field parser ("failed to parse
        # field"); the constructor's weight check fails in buildTarget ("Failed to build ... after last required
        # field arrived"), inside the field that delivered the last of the three when all are present, else at the
        # end of the object. LinearRetrieverBuilder's [retrievers] field parser wraps either.
        valid = ("minmax", "none") + (("l2_norm",) if self._has_l2_norm() else ())
        weight = float(entry.get("weight", 1.0))
        for key in entry:
            if key == "normalizer" and str(entry[key]).lower() not in valid:
                raise _linear_component_error(
                    {
                        "type": "x_content_parse_exception",
                        "reason": "[retriever-component] failed to parse field [normalizer]",
                        "caused_by": {
                            "type": "illegal_argument_exception",
                            "reason": f"Unknown normalizer [{entry[key]}]",
                        },
                    }
                )
        if weight < 0:
            built: dict[str, Any] = {
                "type": "x_content_parse_exception",
                "reason": "Failed to build [retriever-component] after last required field arrived",
                "caused_by": {"type": "illegal_argument_exception", "reason": "[weight] must be non-negative"},
            }
            if all(k in entry for k in ("retriever", "weight", "normalizer")):
                last = list(entry)[-1]
                built = {
                    "type": "x_content_parse_exception",
                    "reason": f"[retriever-component] failed to parse field [{last}]",
                    "caused_by": built,
                }
            raise _linear_component_error(built)
        normalizer = entry.get("normalizer", top_normalizer)
        if normalizer is not None and str(normalizer).lower() not in valid:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"Unknown normalizer [{normalizer}]",
                source="x-pack/plugin/rank-rrf/src/main/java/org/elasticsearch/xpack/rank/linear/ScoreNormalizer.java",
            )
        return entry["retriever"], weight, None if normalizer is None else str(normalizer).lower()

    def _has_l2_norm(self) -> bool:
        """``L2ScoreNormalizer``: 9.1 (PR #128504) and its 8.19 backport (PR #128972)."""
        return since_9_1_or_8_19(self.version)

    # -- highlight / sort ------------------------------------------------------------------------------------
    def _highlight(
        self, view: IndexView, doc_id: str, spec: Mapping[str, Any], body: Mapping[str, Any]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for fld, opts in (spec.get("fields") or {}).items():
            opts = dict(opts or {})
            for key in opts:
                if key not in ("type", "number_of_fragments", "order", "fragment_size", "pre_tags", "post_tags"):
                    raise DoubleLimit(f"highlight option [{key}]")
            fspec = view.fields.get(fld)
            if opts.get("type") == "semantic" or (fspec is not None and fspec.type == "semantic_text"):
                if fspec is None or fspec.type != "semantic_text":
                    continue  # SemanticTextHighlighter.canHighlight: semantic_text fields only
                query_text = _semantic_query_text(body, fld)
                chunks = view.semantic.get(fld, {}).get(doc_id) or []
                if query_text is None or not chunks:
                    continue
                qvec = self.embed(view.name, fld, query_text)
                scored = sorted(
                    ((vector_score("cosine", vec, qvec), i, text) for i, (text, vec) in enumerate(chunks)),
                    key=lambda x: -x[0],
                )
                n = int(opts.get("number_of_fragments", 5))
                kept = scored[: 1 if n <= 0 else n]
                if opts.get("order") != "score":
                    kept.sort(key=lambda x: x[1])
                out[fld] = [text for _, _, text in kept]
            else:
                raise DoubleLimit(f"highlighting field [{fld}] with a non-semantic highlighter")
        return out

    def _sorted(
        self, ranked: list[tuple[IndexView, str, float | None]], sort: Any
    ) -> list[tuple[IndexView, str, float | None]]:
        specs = sort if isinstance(sort, list) else [sort]
        out = list(ranked)
        for spec in reversed(specs):
            ((fld, opts),) = spec.items() if isinstance(spec, Mapping) else ((spec, {}),)
            desc = (opts.get("order") if isinstance(opts, Mapping) else opts) == "desc"
            out.sort(
                key=lambda x: _values(x[0].docs[x[1]], fld)[0] if _values(x[0].docs[x[1]], fld) else 0, reverse=desc
            )
        return [(v, d, None) for v, d, _ in out]


def _token(value: Any) -> str:
    """The ``XContentParser.Token`` a JSON value starts with."""
    if isinstance(value, Mapping):
        return "START_OBJECT"
    if isinstance(value, list):
        return "START_ARRAY"
    if isinstance(value, bool):
        return "VALUE_BOOLEAN"
    if isinstance(value, (int, float)):
        return "VALUE_NUMBER"
    if value is None:
        return "VALUE_NULL"
    return "VALUE_STRING"


def _specified(body: Mapping[str, Any], key: str) -> bool:
    """Whether ``SearchSourceBuilder.validate`` counts ``key`` as set next to a retriever: ``subSearches`` not empty
    (``query`` or ``sub_searches``), ``knnSearch`` not empty, ``searchAfter``/``sorts``/``rankBuilder``/``rescores``
    not null, ``terminateAfter`` not ``DEFAULT_TERMINATE_AFTER`` (0)."""
    if key == "query":
        return body.get("query") is not None or bool(body.get("sub_searches"))
    if key == "knn":
        return bool(body.get("knn"))
    if key == "terminate_after":
        value = body.get("terminate_after")
        return value is not None and value != 0
    return body.get(key) is not None


def _linear_component_error(cause: dict[str, Any]) -> EsError:
    """A ``linear`` retriever component that fails to parse: ``[linear] failed to parse field [retrievers]`` (the
    ``ObjectParser`` wrap of the component parser's exception)."""
    return EsError(
        400,
        "x_content_parse_exception",
        "[linear] failed to parse field [retrievers]",
        source="x-pack/plugin/rank-rrf/src/main/java/org/elasticsearch/xpack/rank/linear/"
        "LinearRetrieverComponent.java; ScoreNormalizer.java; libs/x-content/.../ConstructingObjectParser.java "
        "(buildTarget)",
        caused_by=cause,
    )


def _clause_location(root: Any, clause: Any) -> str:
    """``line:col`` of ``clause``'s closing brace in ``root`` as elasticsearch-py serialises a body
    (``elastic_transport.JsonSerializer``: compact separators, one line, UTF-8; Jackson counts bytes), which is the
    token ``parseInnerQueryBuilder`` reads when it finds the clause empty. ``clause`` itself when ``root`` is None or
    does not hold it."""

    marker = "\u0000empty-clause\u0000"

    def swap(node: Any) -> Any:
        if node is clause:
            return marker
        if isinstance(node, Mapping):
            return {k: swap(v) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    try:
        text = json.dumps(swap(root if root is not None else clause), separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return "1:2"
    at = text.find(json.dumps(marker, ensure_ascii=False))
    if at < 0:
        return "1:2"
    return f"1:{len(text[:at].encode('utf-8')) + 2}"


def _retriever_node(node: Any) -> tuple[str | None, Mapping[str, Any] | None]:
    """``(name, body)`` of a ``{name: {...}}`` retriever node; ``(None, None)`` for anything else."""
    if isinstance(node, Mapping) and len(node) == 1:
        ((kind, spec),) = node.items()
        if isinstance(spec, Mapping):
            return str(kind), spec
    return None, None


def _component_child(entry: Any) -> Any:
    """The retriever of an ``rrf`` / ``linear`` ``retrievers`` entry (a plain retriever or a weighted component)."""
    if isinstance(entry, Mapping) and ("retriever" in entry or "weight" in entry or "normalizer" in entry):
        return entry.get("retriever")
    return entry


def _window(spec: Mapping[str, Any]) -> int | None:
    """``rank_window_size`` (``RankBuilder.DEFAULT_RANK_WINDOW_SIZE`` 10 when absent); None when not an integer
    (the parser refuses it)."""
    window = spec.get("rank_window_size", 10)
    return window if isinstance(window, int) and not isinstance(window, bool) else None


def _with_filter(child: Mapping[str, Any], filters: list[Any]) -> dict[str, Any]:
    ((kind, spec),) = child.items()
    spec = dict(spec)
    spec["filter"] = [*_as_list(spec.get("filter")), *filters]
    return {kind: spec}


def _normalize(scores: list[float], normalizer: str) -> list[float]:
    """``MinMaxScoreNormalizer`` / ``L2ScoreNormalizer`` / ``IdentityScoreNormalizer``."""
    if normalizer == "minmax":
        if not scores:
            return []
        lo, hi = min(scores), max(scores)
        if hi == lo:
            return [1.0 if s != 0 else 0.0 for s in scores]
        return [(s - lo) / (hi - lo) for s in scores]
    if normalizer == "l2_norm":
        norm = math.sqrt(sum(s * s for s in scores))
        return [s / norm if norm else 0.0 for s in scores]
    return list(scores)


def _semantic_query_text(body: Mapping[str, Any], fld: str) -> str | None:
    found: list[str] = []

    def walk(n: Any) -> None:
        if isinstance(n, Mapping):
            sem = n.get("semantic")
            if isinstance(sem, Mapping) and sem.get("field") == fld:
                found.append(str(sem.get("query")))
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(body.get("query"))
    walk(body.get("retriever"))
    return found[0] if found else None


_DAY_MS = 86_400_000
_ANCHOR_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def _norm_length(length: int) -> int:
    """A field length as BM25Similarity reads it back from its norm: ``SmallFloat.byte4ToInt(intToByte4(length))``
    (lucene/core ``org.apache.lucene.util.SmallFloat``): exact below 24, then a 3-bit mantissa under an implicit
    leading bit and a 5-bit exponent, rounded down; written here from Lucene's source, not shared with es_rag."""
    free = 24  # NUM_FREE_VALUES = 255 - longToInt4(Integer.MAX_VALUE)
    if length < free:
        return length
    rest = length - free
    shift = rest.bit_length() - 4
    if shift < 0:
        return length
    mantissa = (rest >> shift) & 0x07
    return free + ((mantissa | 0x08) << shift)


def _date_ms(value: Any) -> int:
    """A stored date as the ``date`` field type indexes it (``strict_date_optional_time||epoch_millis``, UTC)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    return date_millis(value)


def _round(ms: int, unit: str, up: bool) -> int:
    """``JavaDateMathParser`` rounding to ``/y``, ``/M`` or ``/d`` in UTC: down to the period's first millisecond,
    up to its last."""
    day = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    if unit == "d":
        start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        nxt = datetime.fromtimestamp(start.timestamp() + 86_400, tz=timezone.utc)
    elif unit == "M":
        start = datetime(day.year, day.month, 1, tzinfo=timezone.utc)
        nxt = datetime(day.year + (day.month == 12), day.month % 12 + 1, 1, tzinfo=timezone.utc)
    elif unit == "y":
        start = datetime(day.year, 1, 1, tzinfo=timezone.utc)
        nxt = datetime(day.year + 1, 1, 1, tzinfo=timezone.utc)
    else:
        raise DoubleLimit(f"date math rounding /{unit}")
    return int((nxt.timestamp() if up else start.timestamp()) * 1000) - (1 if up else 0)


def _date_bound(bound: Any, round_up: bool, now_ms: int) -> int:
    """``DateFieldMapper.DateFieldType.parseToLong``: ``now``, ``now/u`` or ``<date>||/u`` (the date math the package
    renders), else a date parsed with the field's format. ``rangeQuery`` rounds the lower bound up when it is
    exclusive (``gt``) and the upper bound up when it is inclusive (``lte``)."""
    text = str(bound)
    if text.startswith("now"):
        rest = text[3:]
        if rest == "":
            return now_ms
        if rest.startswith("/") and len(rest) == 2:
            return _round(now_ms, rest[1], round_up)
        raise DoubleLimit(f"date math {text!r}")
    if "||" in text:
        anchor, math_part = text.split("||", 1)
        if not _ANCHOR_RE.match(anchor) or not (math_part.startswith("/") and len(math_part) == 2):
            raise DoubleLimit(f"date math {text!r}")
        return _round(_date_ms(anchor), math_part[1], round_up)
    return _date_ms(text)


def _range_matches(view: IndexView, doc: Mapping[str, Any], fld: str, ops: Mapping[str, Any], now_ms: int) -> bool:
    """``RangeQueryBuilder`` on one document: a multi-valued field matches when one value lies in the range; an
    unmapped or missing field matches nothing. Dates per ``DateFieldType.rangeQuery`` (date math, rounding);
    numbers as doubles; keywords as terms."""
    spec = _resolve_field(view.fields, fld)
    if spec is None:
        return False
    bounds = {op: b for op, b in ops.items() if op in ("gt", "gte", "lt", "lte")}
    if spec.type == "date":
        limits = {op: _date_bound(b, op in ("gt", "lte"), now_ms) for op, b in bounds.items()}
        points = [_date_ms(v) for v in _flatten(_values(doc, fld))]
    elif spec.type in NUMERIC_TYPES:
        limits = {op: float(b) for op, b in bounds.items()}
        points = [float(v) for v in _flatten(_values(doc, fld))]
    elif spec.type == "keyword":
        limits = {op: str(b) for op, b in bounds.items()}
        points = [str(v) for v in _flatten(_values(doc, fld))]
    else:
        raise DoubleLimit(f"range on a [{spec.type}] field")

    def inside(p: Any) -> bool:
        checks = {"gt": lambda lim: p > lim, "gte": lambda lim: p >= lim, "lt": lambda lim: p < lim}
        return all(checks.get(op, lambda lim: p <= lim)(lim) for op, lim in limits.items())

    return any(inside(p) for p in points)


def _values(doc: Mapping[str, Any], fld: str) -> list[Any]:
    node: Any = doc
    for part in fld.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return []
        node = node[part]
    if node is None:
        return []
    return list(node) if isinstance(node, list) else [node]


def _check_terms_count(view: IndexView, count: int) -> None:
    """``TermsQueryBuilder.doToQuery``: more terms than ``index.max_terms_count`` fail every shard
    (``search/170_terms_query.yml``)."""
    if count > view.max_terms_count:
        raise EsError(
            400,
            "search_phase_execution_exception",
            "all shards failed",
            source="server/src/main/java/org/elasticsearch/index/query/TermsQueryBuilder.java",
            caused_by={
                "type": "illegal_argument_exception",
                "reason": f"The number of terms [{count}] used in the Terms Query request has exceeded the allowed "
                f"maximum of [{view.max_terms_count}]. This maximum can be set by changing the [index.max_terms_count] "
                "index level setting.",
            },
        )


def _named(node: Any) -> bool:
    """Whether a query tree (or kNN section) names a clause (``_name``)."""
    if isinstance(node, Mapping):
        return isinstance(node.get("_name"), str) or any(_named(v) for v in node.values())
    if isinstance(node, list):
        return any(_named(v) for v in node)
    return False


def _min_score(similarity: str, raw: Any) -> float:
    """The ``_score`` of a raw similarity (``VectorSimilarity.score``): l2_norm takes a distance."""
    value = float(raw)
    if similarity == "l2_norm":
        return 1.0 / (1.0 + value * value)
    if similarity in ("cosine", "dot_product"):
        return (1.0 + value) / 2.0
    if similarity == "max_inner_product":
        return 1.0 / (1.0 - value) if value < 0 else value + 1.0
    raise DoubleLimit(f"a kNN similarity threshold on [{similarity}]")


def _resolve_field(fields: Mapping[str, FieldSpec], path: str) -> FieldSpec | None:
    """The mapped field at a dotted path: object properties, then a multi-field of a leaf."""
    node: FieldSpec | None = None
    current: Mapping[str, FieldSpec] = fields
    parts = path.split(".")
    for i, part in enumerate(parts):
        if node is not None and node.type != "object":
            return node.subfields.get(".".join(parts[i:]))
        node = current.get(part)
        if node is None:
            return None
        current = node.properties
    return node


def _source_paths(fields: Mapping[str, FieldSpec], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, spec in fields.items():
        out.add(f"{prefix}{name}")
        if spec.type == "object":
            out |= _source_paths(spec.properties, f"{prefix}{name}.")
    return out


def _leaf_fields(fields: Mapping[str, FieldSpec], prefix: str = "") -> list[tuple[str, FieldSpec, str]]:
    """(full name, spec, ``_source`` path) of every leaf field and multi-field (which reads its parent's value)."""
    out: list[tuple[str, FieldSpec, str]] = []
    for name, spec in fields.items():
        full = f"{prefix}{name}"
        if spec.type == "object":
            out.extend(_leaf_fields(spec.properties, f"{full}."))
            continue
        out.append((full, spec, full))
        for sub, sub_spec in spec.subfields.items():
            out.append((f"{full}.{sub}", sub_spec, full))
    return out


def _flatten(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, list):
            out.extend(_flatten(v))
        else:
            out.append(v)
    return out


def _fetch_value(ftype: str, value: Any) -> Any:
    """A ``_source`` value as the field type's value fetcher returns it (``KeywordFieldMapper`` /
    ``TextFieldMapper``: the string; ``NumberFieldMapper``: the parsed number; ``BooleanFieldMapper``;
    ``DateFieldMapper``: formatted with the default ``strict_date_optional_time`` printer)."""
    if value is None:
        return None
    if ftype in ("keyword", "text"):
        if isinstance(value, bool):
            return "true" if value else "false"
        return value if isinstance(value, str) else str(value)
    if ftype in ("integer", "long"):
        return int(float(value)) if not isinstance(value, bool) else None
    if ftype in ("float", "double"):
        return float(value) if not isinstance(value, bool) else None
    if ftype == "boolean":
        return value if isinstance(value, bool) else str(value) == "true"
    if ftype == "date":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            moment = datetime.fromtimestamp(value / 1000, tz=timezone.utc)
        else:
            parsed = parse_date(str(value))
            if parsed is None:
                raise DoubleLimit(f"fetching the date [{value}], which its field would have refused")
            moment = parsed.astimezone(timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    raise DoubleLimit(f"fetching a [{ftype}] field with [fields]")


def _norm(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _wild(pattern: str, name: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace("\\*", ".*"), name) is not None
