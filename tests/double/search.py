"""Search bodies as Elasticsearch parses and scores them, for the strict double.

Parsing refuses what Elasticsearch refuses (each rule names its source): unknown top-level keys
(``SearchSourceBuilder.parseXContent``: ``Unknown key for a START_OBJECT in [x].``), unknown queries
(``AbstractQueryBuilder.parseInnerQueryBuilder``: ``unknown query [x]``) and query parameters, unknown
retrievers (``RetrieverBuilder.parseInnerRetrieverBuilder``: ``unknown retriever [x]``) and retriever keys
(``ObjectParser`` with errorOnUnknown: ``[rrf] unknown field [x]``), ``retriever`` together with ``query`` or
``knn``, kNN ``k``/``num_candidates`` bounds (``KnnSearchBuilder``), and the version and licence gates of the
``rrf`` and ``linear`` retrievers (``RRFRetrieverBuilder``, ``RRFRetrieverComponent``,
``LinearRetrieverBuilder``, ``x-pack/plugin/rank-rrf/src/yamlRestTest/.../license/100_license.yml``) and of
``_source.exclude_vectors`` (9.2, ``FetchSourceContext``).

Scoring is the double's own, independent of es_rag's code: Lucene BM25 per field over the field's analyzer,
``multi_match`` ``best_fields`` with ``tie_breaker``, ``dis_max``, phrase counts, exact kNN scored per the
mapping similarity (``DenseVectorFieldMapper.VectorSimilarity``), ``semantic`` as the best chunk's score, RRF
``sum(weight / (rank_constant + rank))`` ties broken by insertion order, and ``linear`` with the ``minmax``,
``l2_norm`` and ``none`` normalizers. Terms lookups are fetched once per clause occurrence
(``TermsQueryBuilder.doRewrite`` registers one async GET per clause) through :attr:`Searcher.lookup`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.double.errors import DoubleLimit, EsError, parse_error
from tests.double.mapping import FieldSpec, vector_score

SEARCH_SRC = "server/src/main/java/org/elasticsearch/search/builder/SearchSourceBuilder.java"
QUERY_SRC = "server/src/main/java/org/elasticsearch/index/query/AbstractQueryBuilder.java"
RETRIEVER_SRC = "server/src/main/java/org/elasticsearch/search/retriever/RetrieverBuilder.java"
RRF_SRC = "x-pack/plugin/rank-rrf/src/main/java/org/elasticsearch/xpack/rank/rrf/RRFRetrieverBuilder.java"
LINEAR_SRC = "x-pack/plugin/rank-rrf/src/main/java/org/elasticsearch/xpack/rank/linear/LinearRetrieverBuilder.java"
KNN_SRC = "server/src/main/java/org/elasticsearch/search/vectors/KnnSearchBuilder.java"
LICENSE_SRC = "x-pack/plugin/core/src/main/java/org/elasticsearch/license/LicenseUtils.java (newComplianceException)"

TOP_LEVEL = {
    "query", "knn", "retriever", "size", "from", "_source", "highlight", "sort", "track_total_hits",
    "aggs", "aggregations", "post_filter", "min_score", "explain", "timeout", "terminate_after", "stored_fields",
    "docvalue_fields", "fields", "rank", "collapse", "search_after", "pit", "runtime_mappings", "suggest",
    "profile", "version", "seq_no_primary_term", "track_scores", "indices_boost", "rescore", "script_fields",
    "stats", "ext",
}  # fmt: skip
IMPLEMENTED_TOP = {"query", "knn", "retriever", "size", "from", "_source", "highlight", "sort", "track_total_hits"}
QUERY_PARAMS: dict[str, set[str]] = {
    "match_all": {"boost", "_name"},
    "bool": {"must", "filter", "should", "must_not", "minimum_should_match", "boost", "_name"},
    "multi_match": {
        "query", "fields", "type", "tie_breaker", "operator", "minimum_should_match", "analyzer", "boost",
        "fuzziness", "lenient", "zero_terms_query", "auto_generate_synonyms_phrase_query", "_name", "slop",
        "prefix_length", "max_expansions", "fuzzy_transpositions", "cutoff_frequency",
    },
    "dis_max": {"queries", "tie_breaker", "boost", "_name"},
    "ids": {"values", "boost", "_name"},
    "semantic": {"field", "query", "boost", "_name"},
}  # fmt: skip
FIELD_QUERIES = {
    "term": {"value", "boost", "case_insensitive", "_name"},
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
MULTI_MATCH_TYPES = ("best_fields", "most_fields", "cross_fields", "phrase", "phrase_prefix", "bool_prefix")
BASE_RETRIEVER_KEYS = {"filter", "_name", "min_score"}
RETRIEVER_KEYS = {
    "standard": BASE_RETRIEVER_KEYS | {"query", "sort", "search_after", "terminate_after", "collapse"},
    "knn": BASE_RETRIEVER_KEYS
    | {"field", "query_vector", "query_vector_builder", "k", "num_candidates", "similarity", "rescore_vector"},
    "rrf": BASE_RETRIEVER_KEYS | {"retrievers", "rank_window_size", "rank_constant", "fields", "query"},
    "linear": BASE_RETRIEVER_KEYS | {"retrievers", "rank_window_size", "fields", "query", "normalizer"},
}  # fmt: skip
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
_ENGLISH_STOP = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split()
)
"""Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``."""


def analyzer_fn(name: str, definitions: Mapping[str, Mapping[str, Any]]) -> Callable[[str], list[str]]:
    """The double's tokenizer for an analyzer name (built-in or defined in the index settings). Approximations
    of Lucene's (no stemming); used only to score, never to decide whether a body is valid.

    Args:
        name: Analyzer name.
        definitions: ``index.analysis.analyzer`` definitions of the index.
    """
    spec = definitions.get(name)
    kind = str(spec.get("type", "custom")) if spec else name
    if spec and kind == "custom":
        tokenizer = str(spec.get("tokenizer"))
        pattern = None
        tdefs = definitions.get("__tokenizers__", {})
        if tokenizer in tdefs and tdefs[tokenizer].get("type") == "pattern":
            pattern = str(tdefs[tokenizer].get("pattern", r"\W+"))
            pattern = pattern.replace("\\p{L}", "^\\W\\d_").replace("\\p{N}", "\\d")
        lower = "lowercase" in (spec.get("filter") or [])
        if pattern is not None:
            rx = re.compile(pattern if not pattern.startswith("[^^") else r"[^\w]+")

            def split(text: str) -> list[str]:
                toks = [t for t in rx.split(text) if t]
                return [t.lower() for t in toks] if lower else toks

            return split
        return lambda text: [t.lower() if lower else t for t in text.split()]
    if kind == "whitespace":
        return lambda text: text.split()
    if kind in ("cjk", "kuromoji"):

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
    if kind == "english":
        return lambda text: [t for t in _WORD.findall(text.lower()) if t not in _ENGLISH_STOP]
    return lambda text: _WORD.findall(text.lower())


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
    ) -> None:
        self.views = list(views)
        self.version = version
        self.license_ok = license_active and license_type in ENTERPRISE
        self.lookup = lookup
        self.embed = embed
        self._stats: dict[tuple[str, str], tuple[int, float, dict[str, int], dict[str, list[str]]]] = {}

    # -- entry points ----------------------------------------------------------------------------------------
    def search(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and run a ``_search`` body; returns the response."""
        body = dict(body or {})
        for key, value in body.items():
            if key not in TOP_LEVEL:
                token = (
                    "START_OBJECT"
                    if isinstance(value, Mapping)
                    else "START_ARRAY"
                    if isinstance(value, list)
                    else "VALUE"
                )
                raise EsError(400, "parsing_exception", f"Unknown key for a {token} in [{key}].", source=SEARCH_SRC)
            if key not in IMPLEMENTED_TOP:
                raise DoubleLimit(f"the [{key}] search option")
        if "retriever" in body:
            for other in ("query", "knn"):
                if other in body:
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"cannot specify [retriever] and [{other}]",
                        source=SEARCH_SRC,
                    )
        source_spec = self._source_spec(body.get("_source"))
        size = int(body.get("size", 10))
        start = int(body.get("from", 0))
        if "retriever" in body:
            ranked = self.retriever(body["retriever"], size + start)
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
            if "highlight" in body:
                hl = self._highlight(view, doc_id, body["highlight"], body)
                if hl:
                    hit["highlight"] = hl
            hits.append(hit)
        scores = [s for _, _, s in ranked if s is not None]
        return {
            "took": 1,
            "timed_out": False,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {
                "total": {"value": len(ranked), "relation": "eq"},
                "max_score": max(scores) if scores else None,
                "hits": hits,
            },
        }

    def count(self, body: Mapping[str, Any]) -> int:
        """``_count``: the documents the query matches."""
        for key in body or {}:
            if key != "query":
                raise EsError(400, "parsing_exception", f"request does not support [{key}]", source=SEARCH_SRC)
        query = (body or {}).get("query", {"match_all": {}})
        self.validate_query(query)
        self._lookups = self.prefetch_lookups(query)
        return sum(1 for view in self.views for d in view.docs if self._score(query, view, d) is not None)

    def matching(self, query: Mapping[str, Any]) -> list[tuple[IndexView, str]]:
        """Every document the query matches (``_delete_by_query``)."""
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
            if key == "exclude_vectors" and self.version >= (9, 2):
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
        """Refuse unknown queries and parameters before anything runs (``parseInnerQueryBuilder``)."""
        if not isinstance(query, Mapping) or len(query) != 1:
            raise EsError(
                400, "parsing_exception", "[_na] query malformed, must start with start_object", source=QUERY_SRC
            )
        ((kind, spec),) = query.items()
        if kind not in ALL_QUERIES:
            raise EsError(400, "parsing_exception", f"unknown query [{kind}]", source=QUERY_SRC)
        if kind in QUERY_PARAMS:
            for key in spec:
                if key not in QUERY_PARAMS[kind]:
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
            raise EsError(
                400,
                "parsing_exception",
                f"failed to parse [multi_match] query type [{spec['type']}]. unknown type.",
                source=QUERY_SRC,
            )
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
            value = value.get("value") if isinstance(value, Mapping) else value
            return 1.0 if _norm(value) in [_norm(v) for v in _values(doc, fld)] else None
        if kind == "terms":
            ((fld, values),) = ((k, v) for k, v in spec.items() if k not in ("boost", "_name"))
            if isinstance(values, Mapping):
                lookups = getattr(self, "_lookups", {})
                if id(values) not in lookups:
                    lookups[id(values)] = [str(v) for v in self.lookup(values["index"], values["id"], values["path"])]
                    self._lookups = lookups
                allowed = set(lookups[id(values)])
            else:
                allowed = {_norm(v) for v in values}
            return 1.0 if {_norm(v) for v in _values(doc, fld)} & allowed else None
        if kind == "ids":
            return 1.0 if doc_id in {str(v) for v in spec["values"]} else None
        if kind == "range":
            ((fld, ops),) = ((k, v) for k, v in spec.items() if k not in ("boost", "_name"))
            vals = _values(doc, fld)
            if not vals:
                return None
            v = vals[0]
            for op, bound in ops.items():
                if (op == "gt" and not v > bound) or (op == "gte" and not v >= bound):
                    return None
                if (op == "lt" and not v < bound) or (op == "lte" and not v <= bound):
                    return None
            return 1.0
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
        raise DoubleLimit(f"the [{kind}] query")

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
                toks[doc_id] = t
                for term in set(t):
                    df[term] = df.get(term, 0) + 1
            n = len(toks)
            avg = sum(len(t) for t in toks.values()) / n if n else 1.0
            self._stats[key] = (n, avg or 1.0, df, toks)
        return self._stats[key]

    def _bm25(self, view: IndexView, fld: str, text: str, doc_id: str) -> float:
        n, avg, df, toks = self._stats_for(view, fld)
        doc_toks = toks.get(doc_id)
        if not doc_toks:
            return 0.0
        score = 0.0
        for term in self._field_analyzer(view, fld)(text):
            tf = doc_toks.count(term)
            if not tf:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * tf * (view.k1 + 1) / (tf + view.k1 * (1 - view.b + view.b * len(doc_toks) / avg))
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
            for doc_id, doc in view.docs.items():
                vec = doc.get(str(clause["field"]))
                if not isinstance(vec, list) or not vec:
                    continue
                if not all(self._score(f, view, doc_id) is not None for f in filters):
                    continue
                out.append((vi, doc_id, vector_score(similarity, [float(x) for x in vec], query)))
        out.sort(key=lambda x: -x[2])
        return out[:k]

    # -- retrievers ------------------------------------------------------------------------------------------
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
        if kind not in known:
            raise EsError(400, "parsing_exception", f"unknown retriever [{kind}]", source=RETRIEVER_SRC)
        if kind == "rrf" and not self.license_ok:
            raise compliance("Reciprocal Rank Fusion (RRF)")
        if kind == "linear" and not self.license_ok:
            raise compliance("linear retriever")
        for key in spec:
            if key not in known[kind]:
                raise parse_error(
                    kind, key, source=RRF_SRC if kind == "rrf" else LINEAR_SRC if kind == "linear" else RETRIEVER_SRC
                )
        if "min_score" in spec:
            raise DoubleLimit("retriever min_score")
        filters = _as_list(spec.get("filter"))
        for f in filters:
            self.validate_query(f)
        if kind == "standard":
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
            return [(self.views[vi], d, s) for vi, d, s in self._knn(spec, default_k=int(spec["k"]))]
        return self._compound(kind, spec, filters, window)

    def _compound(
        self, kind: str, spec: Mapping[str, Any], filters: list[Any], window: int
    ) -> list[tuple[IndexView, str, float | None]]:
        if "fields" in spec or "query" in spec:
            raise DoubleLimit(f"the simplified [{kind}] format")
        rank_window = int(spec.get("rank_window_size", 10))
        if rank_window < window:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"[{kind}] requires [rank_window_size: {rank_window}] be greater than or equal to [size: {window}]",
                source=RRF_SRC if kind == "rrf" else LINEAR_SRC,
            )
        top_normalizer = spec.get("normalizer")
        if kind == "linear" and top_normalizer is not None:
            if self.version < (9, 1):
                raise parse_error("linear", "normalizer", source=LINEAR_SRC)
            if self.version < (9, 2):
                raise EsError(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: [linear] [normalizer] cannot be provided when [retrievers] is specified;",
                    source=LINEAR_SRC + " (9.1)",
                )
        children: list[tuple[Any, float, str | None]] = []
        for entry in spec.get("retrievers") or []:
            children.append(self._component(kind, entry, top_normalizer))
        results = []
        for child, weight, normalizer in children:
            if (
                filters
            ):  # a compound retriever's filter is pushed into every child (RetrieverBuilder.preFilterQueryBuilders)
                child = _with_filter(child, filters)
            ranked = self.retriever(child, rank_window)[:rank_window]
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
        return [(views[key], key[1], fused[key]) for key in order]

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
        weight = float(entry.get("weight", 1.0))
        if weight < 0:
            raise EsError(400, "illegal_argument_exception", "[weight] must be non-negative", source=LINEAR_SRC)
        normalizer = entry.get("normalizer", top_normalizer)
        valid = ("minmax", "none") + (("l2_norm",) if self.version >= (9, 1) else ())
        if normalizer is not None and str(normalizer).lower() not in valid:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"Unknown normalizer [{normalizer}]",
                source="x-pack/plugin/rank-rrf/src/main/java/org/elasticsearch/xpack/rank/linear/ScoreNormalizer.java",
            )
        return entry["retriever"], weight, None if normalizer is None else str(normalizer).lower()

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


def _values(doc: Mapping[str, Any], fld: str) -> list[Any]:
    node: Any = doc
    for part in fld.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return []
        node = node[part]
    if node is None:
        return []
    return list(node) if isinstance(node, list) else [node]


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
