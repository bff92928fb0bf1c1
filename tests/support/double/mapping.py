"""Index settings, analysis and mappings as Elasticsearch validates them, and documents as a ``dynamic:
strict`` mapping accepts them.

Each rule names the Elasticsearch source that defines it (elastic/elasticsearch, 9.x):

* settings: ``IndexScopedSettings.validate`` (unknown setting: ``unknown setting [index.x] please check that
  any required plugins are installed, or check the breaking changes documentation for removed settings``);
* similarity: ``index/similarity/SimilarityService.java`` (built-in names cannot be redefined, the type is
  case-sensitive, BM25 takes only ``k1``, ``b``, ``discount_overlaps``; Lucene ``BM25Similarity`` ranges);
* analysis: ``index/analysis/AnalysisRegistry.java`` (an analyzer needs a ``type`` or a ``tokenizer``; unknown
  types and tokenizers are refused) -- the double knows the built-ins es_rag and the replayed REST tests use
  and refuses the rest;
* mappings: ``index/mapper/MapperService.java`` wraps every parse failure as ``mapper_parsing_exception``
  ``Failed to parse mapping: <cause>``; ``FieldMapper.Builder.parse``: ``unknown parameter [p] on mapper [f]
  of type [t]``; ``FieldMapper.analyzerParam``: ``analyzer [a] has not been configured in mappings``;
* ``dense_vector``: ``index/mapper/vectors/DenseVectorFieldMapper.java`` (dims 1..4096, similarities, element
  types, ``index_options`` types and their parameters, int4 even dims, bbq >= 64 dims, ``rescore_vector``
  oversample in [1, 10] or 0, defaults by version: 9.1+ ``bbq_hnsw`` with oversample 3.0 at dims >= 384,
  else ``int8_hnsw``);
* documents: ``StrictDynamicMappingException`` (``mapping set to strict, dynamic introduction of [f] within
  [_doc] is not allowed``), ``DocumentParsingException`` for values a field cannot take, and the dense_vector
  index-time checks (dims, zero magnitude for cosine, unit length for dot_product);
* dynamic mapping (``dynamic: true``, ``DynamicFieldsBuilder``): a new string becomes ``text`` with a
  ``keyword`` multi-field (``ignore_above: 256``) unless ``date_detection`` finds a date (``date``), an integer
  ``long``, a decimal ``float``, a boolean ``boolean``, an object an object mapping
  (``search.vectors/*`` and ``delete_by_query/10_basic.yml`` search such fields);
* a field type or index setting Elasticsearch knows but the double does not implement is a double limit, never
  an ``unknown`` refusal.
"""

from __future__ import annotations

import copy
import math
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import regex

from tests.support.double.dates import parse_date
from tests.support.double.errors import DoubleLimit, EsError, java_str

SETTINGS_SRC = "server/src/main/java/org/elasticsearch/common/settings/IndexScopedSettings.java"
SIMILARITY_SRC = "server/src/main/java/org/elasticsearch/index/similarity/SimilarityService.java"
ANALYSIS_SRC = "server/src/main/java/org/elasticsearch/index/analysis/AnalysisRegistry.java"
CUSTOM_ANALYZER_SRC = (
    "server/src/main/java/org/elasticsearch/index/analysis/CustomAnalyzerProvider.java "
    "(AnalyzerComponents.createComponents)"
)
MAPPER_SRC = "server/src/main/java/org/elasticsearch/index/mapper/MapperService.java + FieldMapper.java"
VECTOR_SRC = "server/src/main/java/org/elasticsearch/index/mapper/vectors/DenseVectorFieldMapper.java"
DOC_SRC = "server/src/main/java/org/elasticsearch/index/mapper/DocumentParser.java"
"""Document errors: the reason without the ``[line:col]`` token location Elasticsearch prefixes (the location of the
value in the source as the mapper saw it, which the double cannot reproduce after a pipeline re-serialised it)."""

# -- settings ------------------------------------------------------------------------------------------------
KNOWN_SETTINGS = (
    "index.number_of_shards",
    "index.number_of_replicas",
    "index.auto_expand_replicas",
    "index.default_pipeline",
    "index.final_pipeline",
    "index.refresh_interval",
    "index.hidden",
    "index.max_terms_count",
    "index.max_result_window",
    "index.mapping.total_fields.limit",
    "index.query.default_field",
    "index.lifecycle.name",
    "index.codec",
)
KNOWN_SETTING_GROUPS = ("index.similarity.", "index.analysis.")
STORED_SETTINGS = ("index.priority",)
"""Real index settings (``IndexMetadata.INDEX_PRIORITY_SETTING``) the double only stores: they change nothing it
models (``indices.put_index_template/15_composition.yml`` creates an index with ``index.priority``)."""
UNMODELLED_SETTINGS = (
    "index.mode",
    "index.routing_path",
    "index.time_series.start_time",
    "index.time_series.end_time",
    "index.query.parse.allow_unmapped_fields",
    "index.mapping.source.mode",
    "index.sort.field",
    "index.sort.order",
    "index.number_of_routing_shards",
)
"""Real index settings (``IndexSettings`` / ``IndexMetadata``) that change behaviour the double does not model:
double limits."""


def flatten_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """Nested or dotted settings as flat ``index.``-prefixed keys (``Settings.normalizePrefix("index.")``).

    Args:
        settings: ``{"index": {"number_of_shards": 1}}``, ``{"number_of_shards": 1}`` or dotted keys.
    """
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            flat[prefix] = node

    walk("", settings or {})
    return {(k if k.startswith("index.") else f"index.{k}"): v for k, v in flat.items()}


def validate_settings(flat: Mapping[str, Any], *, plugins: Iterable[str]) -> None:
    """Refuse unknown settings, a bad similarity and a broken analysis chain, as the temporary index built by
    template validation and index creation does.

    Args:
        flat: Flat ``index.*`` settings.
        plugins: Installed plugin names (``analysis-kuromoji`` adds the ``kuromoji`` analyzer).
    """
    for key in flat:
        if key in KNOWN_SETTINGS or key in STORED_SETTINGS or key.startswith(KNOWN_SETTING_GROUPS):
            continue
        if key in UNMODELLED_SETTINGS:
            raise DoubleLimit(f"the index setting [{key}]")
        raise EsError(
            400,
            "illegal_argument_exception",
            f"unknown setting [{key}] please check that any required plugins are installed, or check the breaking "
            "changes documentation for removed settings",
            source=SETTINGS_SRC,
        )
    validate_similarity(flat)
    Analysis.from_settings(flat, plugins=plugins)


BUILT_IN_SIMILARITIES = ("BM25", "boolean", "DFR", "IB", "LMDirichlet", "LMJelinekMercer", "DFI", "scripted")


def validate_similarity(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``SimilarityService``: custom similarities under ``index.similarity.<name>``; returns them by name.

    Args:
        flat: Flat settings.
    """
    groups: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key.startswith("index.similarity."):
            name, _, param = key[len("index.similarity.") :].partition(".")
            groups.setdefault(name, {})[param] = value
    for name in groups:
        if name in BUILT_IN_SIMILARITIES:
            # IndexScopedSettings: the "index.similarity." group setting's validator runs when the settings are
            # validated, before SimilarityService (whose "Cannot redefine built-in Similarity" is not reached)
            raise EsError(
                400,
                "illegal_argument_exception",
                f"illegal value for [index.similarity.{name}] cannot redefine built-in similarity",
                source=SETTINGS_SRC + ' (Setting.groupSetting("index.similarity.") validator)',
            )
    for name, params in groups.items():
        kind = params.get("type")
        if kind is None:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"Similarity [{name}] must have an associated type",
                source=SIMILARITY_SRC,
            )
        if kind not in BUILT_IN_SIMILARITIES:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"Unknown Similarity type [{kind}] for [{name}]",
                source=SIMILARITY_SRC,
            )
        if kind == "BM25":
            extra = sorted(set(params) - {"type", "k1", "b", "discount_overlaps"})
            if extra:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"Unknown settings for similarity of type [BM25]: {extra}".replace("'", ""),
                    source="server/src/main/java/org/elasticsearch/index/similarity/SimilarityProviders.java",
                )
            k1, b = float(params.get("k1", 1.2)), float(params.get("b", 0.75))
            if not (math.isfinite(k1) and k1 >= 0):
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"illegal k1 value: {k1}, must be a non-negative finite value",
                    source="lucene BM25Similarity",
                )
            if not (math.isfinite(b) and 0 <= b <= 1):
                raise EsError(
                    400, "illegal_argument_exception", f"illegal b value: {b}, must be between 0 and 1", source="lucene"
                )
        elif kind != "boolean":
            raise DoubleLimitSimilarity(kind)
    return groups


class DoubleLimitSimilarity(EsError):
    def __init__(self, kind: str) -> None:
        super().__init__(
            400,
            "strict_double_unsupported",
            f"the strict test double does not implement similarity type [{kind}]",
            source="tests/double",
        )


# -- analysis ------------------------------------------------------------------------------------------------
BUILT_IN_ANALYZERS = {
    "standard",
    "simple",
    "whitespace",
    "stop",
    "keyword",
    "pattern",
    "fingerprint",
    "english",
    "cjk",
    "french",
    "german",
    "spanish",
    "italian",
    "portuguese",
    "dutch",
    "russian",
    "chinese",
}
"""Pre-built analyzers (``AnalysisModule`` / ``CommonAnalysisPlugin`` language analyzers); ``kuromoji`` comes
with the analysis-kuromoji plugin (``AnalysisKuromojiPlugin``)."""
BUILT_IN_TOKENIZERS = {"standard", "whitespace", "keyword", "letter", "pattern", "classic", "ngram", "edge_ngram"}
BUILT_IN_FILTERS = {"lowercase", "uppercase", "stop", "asciifolding", "cjk_width", "cjk_bigram", "porter_stem", "trim"}
PLUGIN_ANALYZERS = {"analysis-kuromoji": {"kuromoji"}, "analysis-icu": {"icu_analyzer"}}
PLUGIN_TOKENIZERS = {"analysis-kuromoji": {"kuromoji_tokenizer"}, "analysis-icu": {"icu_tokenizer"}}


@dataclass
class Analysis:
    """The analyzers an index (or a template validated alone) has: built-ins plus its own definitions."""

    analyzers: set[str] = field(default_factory=set)

    @classmethod
    def from_settings(cls, flat: Mapping[str, Any], *, plugins: Iterable[str]) -> Analysis:
        """Build and validate ``index.analysis.*`` (``AnalysisRegistry.build``).

        Args:
            flat: Flat settings.
            plugins: Installed plugins.
        """
        plugins = set(plugins)
        analyzers = set(BUILT_IN_ANALYZERS)
        tokenizers = set(BUILT_IN_TOKENIZERS)
        for plugin in plugins:
            analyzers |= PLUGIN_ANALYZERS.get(plugin, set())
            tokenizers |= PLUGIN_TOKENIZERS.get(plugin, set())
        defined: dict[str, dict[str, dict[str, Any]]] = {
            "analyzer": {},
            "tokenizer": {},
            "filter": {},
            "char_filter": {},
        }
        for key, value in flat.items():
            if not key.startswith("index.analysis."):
                continue
            parts = key[len("index.analysis.") :].split(".", 2)
            if len(parts) < 3 or parts[0] not in defined:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"unknown setting [{key}] please check that any required plugins are installed, or check the "
                    "breaking changes documentation for removed settings",
                    source=SETTINGS_SRC,
                )
            kind, name, param = parts
            defined[kind].setdefault(name, {})[param] = value
        for name, spec in defined["tokenizer"].items():
            ttype = spec.get("type")
            if ttype not in tokenizers:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"Unknown tokenizer type [{ttype}] for [{name}]",
                    source=ANALYSIS_SRC,
                )
            if ttype == "pattern" and "pattern" in spec:
                _java_regex(str(spec["pattern"]), name)
        tokenizers |= set(defined["tokenizer"])
        filters = BUILT_IN_FILTERS | set(defined["filter"])
        for name, spec in defined["analyzer"].items():
            atype = spec.get("type")
            if atype is None and "tokenizer" not in spec:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"analyzer [{name}] must specify either an analyzer type, or a tokenizer",
                    source=ANALYSIS_SRC,
                )
            if atype in (None, "custom"):
                # AnalysisRegistry sends type custom (or no type with a tokenizer) to CustomAnalyzerProvider, whose
                # build (AnalyzerComponents.createComponents) names the analyzer in every refusal
                tok = spec.get("tokenizer")
                if tok is None:
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"Custom Analyzer [{name}] must be configured with a tokenizer",
                        source=CUSTOM_ANALYZER_SRC,
                    )
                if tok not in tokenizers:
                    raise EsError(
                        400,
                        "illegal_argument_exception",
                        f"Custom Analyzer [{name}] failed to find tokenizer under name [{tok}]",
                        source=CUSTOM_ANALYZER_SRC,
                    )
                for flt in _as_list(spec.get("filter")):
                    if flt not in filters:
                        raise EsError(
                            400,
                            "illegal_argument_exception",
                            f"Custom Analyzer [{name}] failed to find filter under name [{flt}]",
                            source=CUSTOM_ANALYZER_SRC,
                        )
            elif atype not in analyzers:
                raise EsError(
                    400,
                    "illegal_argument_exception",
                    f"Unknown analyzer type [{atype}] for [{name}]",
                    source=ANALYSIS_SRC,
                )
        return cls(analyzers | set(defined["analyzer"]))


def _java_regex(pattern: str, name: str) -> None:
    """``Regex.compile`` of the pattern tokenizer (``PatternTokenizerFactory``): the double compiles it with the
    ``regex`` package, which reads the Java syntax es_rag uses (``\\p{L}``, ``\\p{IsHan}``, lookahead) alike; a
    pattern it cannot compile is refused."""
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise EsError(
            400, "illegal_argument_exception", f"invalid pattern for tokenizer [{name}]: {exc}", source=ANALYSIS_SRC
        ) from None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


# -- mappings ------------------------------------------------------------------------------------------------
COMMON = {"type", "meta", "copy_to"}
FIELD_PARAMS: dict[str, set[str]] = {
    "keyword": COMMON
    | {
        "index",
        "doc_values",
        "store",
        "ignore_above",
        "normalizer",
        "null_value",
        "fields",
        "eager_global_ordinals",
        "similarity",
        "split_queries_on_whitespace",
        "index_options",
        "norms",
    },
    "text": COMMON
    | {
        "analyzer",
        "search_analyzer",
        "search_quote_analyzer",
        "fields",
        "index",
        "store",
        "norms",
        "index_options",
        "index_phrases",
        "index_prefixes",
        "position_increment_gap",
        "similarity",
        "term_vector",
        "fielddata",
        "eager_global_ordinals",
    },
    "integer": COMMON | {"index", "doc_values", "store", "null_value", "coerce", "ignore_malformed", "fields"},
    "long": COMMON | {"index", "doc_values", "store", "null_value", "coerce", "ignore_malformed", "fields"},
    "float": COMMON | {"index", "doc_values", "store", "null_value", "coerce", "ignore_malformed", "fields"},
    "double": COMMON | {"index", "doc_values", "store", "null_value", "coerce", "ignore_malformed", "fields"},
    "boolean": COMMON | {"index", "doc_values", "store", "null_value", "fields"},
    "date": COMMON | {"index", "doc_values", "store", "null_value", "format", "locale", "ignore_malformed", "fields"},
    "object": {"type", "properties", "dynamic", "enabled", "subobjects"},
    "dense_vector": {"type", "dims", "element_type", "index", "similarity", "index_options", "meta"},
    "semantic_text": {"type", "inference_id", "search_inference_id", "chunking_settings", "model_settings", "meta"},
}
MULTI_FIELD_TYPES = ("keyword", "text", "integer", "long", "float", "double", "boolean", "date")
"""``FieldMapper.Builder.parse`` reads ``fields`` (multi-fields) and ``copy_to`` for every field mapper before its
own parameters: the leaf types the double parses multi-fields of."""
_NUMBER_LIMITS = {"script", "on_script_error", "time_series_dimension", "time_series_metric"}
LIMITED_PARAMS: dict[str, set[str]] = {
    "integer": _NUMBER_LIMITS,
    "long": _NUMBER_LIMITS,
    "float": _NUMBER_LIMITS,
    "double": _NUMBER_LIMITS,
    "boolean": {"script", "on_script_error", "ignore_malformed"},
    "date": {"script", "on_script_error"},
}
"""Real parameters of a field mapper (``NumberFieldMapper``, ``BooleanFieldMapper``, ``DateFieldMapper``
``getParameters()``; ``synthetic_source_keep`` is read by ``FieldMapper.Builder.parse`` for every type) that change
what the double would have to model: double limits, never ``unknown parameter``."""
REGISTERED_TYPES = {
    "binary", "constant_keyword", "wildcard", "match_only_text", "search_as_you_type", "completion", "token_count",
    "short", "byte", "half_float", "scaled_float", "unsigned_long", "date_nanos", "ip", "geo_point", "geo_shape",
    "point", "shape", "flattened", "nested", "join", "percolator", "integer_range", "float_range", "long_range",
    "double_range", "date_range", "ip_range", "alias", "version", "histogram", "aggregate_metric_double",
    "sparse_vector", "rank_feature", "rank_features", "rank_vectors", "counted_keyword", "passthrough",
    "annotated_text", "murmur3", "semantic_text", "dense_vector", "keyword", "text", "integer", "long", "float",
    "double", "boolean", "date", "object",
}  # fmt: skip
"""Field types a default distribution registers (``IndicesModule.getMappers`` plus modules and x-pack mapper
plugins): the ones outside :data:`FIELD_PARAMS` are double limits, not ``No handler for type``."""
SIMILARITIES = ("l2_norm", "cosine", "dot_product", "max_inner_product")
VECTOR_INDEX_TYPES: dict[str, set[str]] = {
    "hnsw": {"type", "m", "ef_construction"},
    "int8_hnsw": {"type", "m", "ef_construction", "confidence_interval", "rescore_vector"},
    "int4_hnsw": {"type", "m", "ef_construction", "confidence_interval", "rescore_vector"},
    "bbq_hnsw": {"type", "m", "ef_construction", "rescore_vector"},
    "flat": {"type"},
    "int8_flat": {"type", "confidence_interval", "rescore_vector"},
    "int4_flat": {"type", "confidence_interval", "rescore_vector"},
    "bbq_flat": {"type", "rescore_vector"},
    "bbq_disk": {"type", "cluster_size", "default_visit_percentage", "rescore_vector"},
}
"""``DenseVectorFieldMapper.VectorIndexType`` parameters every version the double emulates parses (``rescore_vector``
has its own gate); version-gated ones are added by :func:`_index_params`."""
QUANTIZED = {"int8_hnsw", "int4_hnsw", "bbq_hnsw", "int8_flat", "int4_flat", "bbq_flat", "bbq_disk"}
HNSW_TYPES = ("hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw")
ON_DISK_RESCORE_TYPES = ("int8_hnsw", "int4_hnsw", "bbq_hnsw", "bbq_disk")
"""``on_disk_rescore: true`` is refused on every other type (``"on_disk_rescore is only supported for indexed and
quantized vector types"``): the flat ones are not indexed, ``hnsw`` is not quantized."""
BBQ_DISK_CLUSTER_SIZE = (64, 1 << 16)
"""``ES920DiskBBQVectorsFormat.MIN_VECTORS_PER_CLUSTER`` / ``MAX_VECTORS_PER_CLUSTER``."""


def _index_params(itype: str, version: tuple[int, ...]) -> set[str]:
    """The ``index_options`` keys ``VectorIndexType.parseIndexOptions`` removes for ``itype`` on ``version``:
    ``on_disk_rescore`` on every type from 9.3 (PR #138492, "@availability stack since=9.3.0"; bbq_disk's came with
    PR #135778 in the same release), ``flat_index_threshold`` on the HNSW types and bbq_disk from 9.4 (PR #141074,
    labelled v9.4.0; docs PR #158074)."""
    params = set(VECTOR_INDEX_TYPES[itype])
    if tuple(version[:2]) >= (9, 3):
        params.add("on_disk_rescore")
    if tuple(version[:2]) >= (9, 4) and (itype in HNSW_TYPES or itype == "bbq_disk"):
        params.add("flat_index_threshold")
    return params


def _vector_index_types(version: tuple[int, ...]) -> tuple[str, ...]:
    """``VectorIndexType`` values: ``bbq_disk`` from 9.2 (PR #135299, docs ``applies_to stack: ga 9.2``)."""
    types = tuple(VECTOR_INDEX_TYPES)
    return types if tuple(version[:2]) >= (9, 2) else tuple(t for t in types if t != "bbq_disk")


BBQ_MIN_DIMS = 64
BBQ_DIMS_DEFAULT_THRESHOLD = 384


def mapping_error(reason: str, *, source: str = MAPPER_SRC) -> EsError:
    """``mapper_parsing_exception`` ``Failed to parse mapping: <reason>`` caused by the rule's own exception."""
    return EsError(
        400,
        "mapper_parsing_exception",
        f"Failed to parse mapping: {reason}",
        source=source,
        caused_by={"type": "illegal_argument_exception", "reason": reason},
    )


@dataclass
class FieldSpec:
    """One mapped field (after validation), with the defaults Elasticsearch fills in."""

    name: str
    type: str
    params: dict[str, Any]
    subfields: dict[str, FieldSpec] = field(default_factory=dict)
    properties: dict[str, FieldSpec] = field(default_factory=dict)


@dataclass
class Mapping_:
    """A validated mapping: ``dynamic``, the fields, and ``_meta``."""

    dynamic: str = "true"
    fields: dict[str, FieldSpec] = field(default_factory=dict)
    meta: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As ``GET <index>/_mapping`` shows it (defaults of dense_vector filled in)."""
        return copy.deepcopy(self.raw)


UPDATEABLE_PARAMETERS = frozenset({"meta", "ignore_above", "search_analyzer", "search_quote_analyzer", "fields",
                                   "properties", "dynamic", "copy_to"})  # fmt: skip
"""Parameters a ``PUT _mapping`` may change on a live field (``FieldMapper.Parameter.updateable()``: keyword's
``ignore_above``, text's ``search_analyzer`` / ``search_quote_analyzer``, every mapper's ``meta``; ``fields``,
``properties`` and ``copy_to`` merge, checked member by member). Every other parameter is fixed once mapped."""
PARAMETER_DEFAULTS: dict[str, Any] = {"index": True, "doc_values": True, "store": False, "norms": True}
"""Defaults of the common parameters: a parameter left out of an update is merged as its default
(``FieldMapper.Builder.merge`` starts from a fresh builder), so leaving out one set to another value conflicts too."""


def _java(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def merge_conflicts(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What ``PUT _mapping`` refuses when ``new`` is merged into the live field ``old`` of the same type, as
    ``FieldMapper.Conflicts`` words it (``Cannot update parameter [p] from [a] to [b]``), multi-fields and object
    properties checked member by member (``FieldMapper.merge``, ``ObjectMapper.merge``).

    Args:
        name: The field's full name.
        old: Its live mapping.
        new: The update's mapping of it.
    """
    out: list[str] = []
    for key in sorted((set(old) | set(new)) - UPDATEABLE_PARAMETERS - {"type"}):
        if key in old and key in new:
            before, after = old[key], new[key]
        elif key in PARAMETER_DEFAULTS:
            before, after = old.get(key, PARAMETER_DEFAULTS[key]), new.get(key, PARAMETER_DEFAULTS[key])
        else:
            continue  # a default the double does not know (GET _mapping fills dense_vector's): not compared
        if before != after:
            out.append(f"Cannot update parameter [{key}] from [{_java(before)}] to [{_java(after)}]")
    for group in ("fields", "properties"):
        for sub, spec in (new.get(group) or {}).items():
            live = (old.get(group) or {}).get(sub)
            if isinstance(live, Mapping) and isinstance(spec, Mapping) and live.get("type") == spec.get("type"):
                out.extend(merge_conflicts(f"{name}.{sub}", live, spec))
    return out


def merge_mappings(parts: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Compose mappings in order (components in ``composed_of`` order, then the template's own), later wins
    (``MetadataIndexTemplateService.collectMappings`` + ``MapperService.merge``), properties merged deeply."""
    out: dict[str, Any] = {}
    for part in parts:
        if not part:
            continue
        body = dict(part.get("_doc", part)) if "_doc" in part else dict(part)
        for key, value in body.items():
            if key == "properties" and isinstance(value, Mapping):
                props = out.setdefault("properties", {})
                for fname, spec in value.items():
                    if isinstance(spec, Mapping) and isinstance(props.get(fname), Mapping):
                        merged = dict(props[fname])
                        merged.update(copy.deepcopy(dict(spec)))
                        props[fname] = merged
                    else:
                        props[fname] = copy.deepcopy(spec)
            else:
                out[key] = copy.deepcopy(value)
    return out


def parse_mapping(
    body: Mapping[str, Any] | None,
    *,
    analysis: Analysis,
    version: tuple[int, ...],
    inference_ids: Iterable[str] = (),
) -> Mapping_:
    """Validate a mapping body against the index's analysis (``MapperService.merge``).

    Args:
        body: ``{"dynamic": ..., "properties": {...}, "_meta": ...}`` (optionally wrapped in ``_doc``).
        analysis: Analyzers the index (or template alone) defines.
        version: Cluster version (dense_vector defaults depend on it).
        inference_ids: Existing inference endpoints (``semantic_text`` needs one).
    """
    raw = copy.deepcopy(dict(body or {}))
    if "_doc" in raw and isinstance(raw["_doc"], Mapping):
        raw = dict(raw["_doc"])
    allowed_root = {"dynamic", "properties", "_meta", "_source", "date_detection", "numeric_detection", "enabled"}
    for key in raw:
        if key not in allowed_root:
            raise EsError(
                400,
                "mapper_parsing_exception",
                f"Root mapping definition has unsupported parameters:  [{key} : {raw[key]}]",
                source="server/src/main/java/org/elasticsearch/index/mapper/RootObjectMapper.java",
            )
    dynamic = str(raw.get("dynamic", "true")).lower()
    if dynamic not in ("true", "false", "strict", "runtime"):
        raise mapping_error(f"Could not convert [dynamic] to boolean or the string 'strict' or 'runtime': {dynamic}")
    fields: dict[str, FieldSpec] = {}
    for fname, spec in (raw.get("properties") or {}).items():
        fields[fname] = _parse_field(fname, spec, analysis, version, set(inference_ids), raw["properties"])
    return Mapping_(dynamic=dynamic, fields=fields, meta=raw.get("_meta"), raw=raw)


def _parse_field(
    name: str,
    spec: Any,
    analysis: Analysis,
    version: tuple[int, ...],
    inference_ids: set[str],
    parent: dict[str, Any],
) -> FieldSpec:
    if not isinstance(spec, Mapping):
        raise mapping_error(f"Expected map for property [fields] on field [{name}] but got a {type(spec).__name__}")
    ftype = str(spec.get("type", "object" if "properties" in spec else ""))
    if not ftype:
        raise mapping_error(f"No type specified for field [{name}]")
    if ftype not in FIELD_PARAMS:
        if ftype in REGISTERED_TYPES:
            raise DoubleLimit(f"the [{ftype}] field type")
        raise mapping_error(f"No handler for type [{ftype}] declared on field [{name}]")
    for param in spec:
        if param not in FIELD_PARAMS[ftype]:
            if param in LIMITED_PARAMS.get(ftype, set()) or (
                param == "synthetic_source_keep" and ftype in MULTI_FIELD_TYPES
            ):
                raise DoubleLimit(f"the [{param}] parameter of a [{ftype}] field")
            if ftype == "semantic_text" and param == "index_options" and since_9_1_or_8_19(version):
                # SemanticTextFieldMapper index_options: PR #119967 (9.1), backport PR #129626 (8.19)
                raise DoubleLimit("index_options on a semantic_text field")
            raise mapping_error(f"unknown parameter [{param}] on mapper [{name}] of type [{ftype}]")
    out = FieldSpec(name, ftype, dict(spec))
    if ftype == "text":
        for key in ("analyzer", "search_analyzer", "search_quote_analyzer"):
            if key in spec and spec[key] not in analysis.analyzers:
                raise mapping_error(
                    f"analyzer [{spec[key]}] has not been configured in mappings",
                    source="server/src/main/java/org/elasticsearch/index/mapper/FieldMapper.java (analyzerParam)",
                )
    if ftype in MULTI_FIELD_TYPES:
        for sub, sub_spec in (spec.get("fields") or {}).items():
            _check_multi_field(name, sub, sub_spec)
            out.subfields[sub] = _parse_field(f"{name}.{sub}", sub_spec, analysis, version, inference_ids, parent)
    if ftype == "object":
        for sub, sub_spec in (spec.get("properties") or {}).items():
            out.properties[sub] = _parse_field(f"{name}.{sub}", sub_spec, analysis, version, inference_ids, parent)
        if "enabled" in spec and not isinstance(spec["enabled"], bool):
            raise mapping_error(f"Failed to parse value [{spec['enabled']}] as only [true] or [false] are allowed.")
    if ftype == "dense_vector":
        parent[name.rsplit(".", 1)[-1]] = _dense_vector(name, dict(spec), version)
        out.params = dict(parent[name.rsplit(".", 1)[-1]])
    if ftype == "semantic_text":
        if "chunking_settings" in spec and version < (9, 1) and tuple(version[:2]) != (8, 19):
            # SemanticTextFieldMapper: field-level chunking_settings from 8.19 / 9.1 (semantic_text.chunking_config)
            raise mapping_error(f"unknown parameter [chunking_settings] on mapper [{name}] of type [semantic_text]")
        inference_id = spec.get("inference_id", ".elser-2-elasticsearch")
        if inference_id not in inference_ids:
            raise EsError(
                400,
                "resource_not_found_exception",
                f"Inference endpoint not found [{inference_id}]",
                source="x-pack/plugin/inference/.../mapper/SemanticTextFieldMapper.java",
            )
    return out


def since_9_1_or_8_19(version: tuple[int, ...]) -> bool:
    """A 9.1+ node or an 8.19 one (the 8.x line released after 9.1, which got the 9.1 backports)."""
    return tuple(version[:2]) >= (9, 1) or (8, 19) <= tuple(version[:2]) < (9, 0)


MULTI_FIELD_SRC = "server/src/main/java/org/elasticsearch/index/mapper/TypeParsers.java (parseMultiField)"


def _check_multi_field(name: str, sub: str, sub_spec: Any) -> None:
    """``TypeParsers.parseMultiField``: a multi-field's name holds no ``.``; it is a map with a ``type``; and on an
    index created by 8.0 or later it has no ``fields`` of its own (chained multi-fields are refused)."""
    if "." in sub:
        raise mapping_error(
            f"Field name [{sub}] which is a multi field of [{name}] cannot contain '.'", source=MULTI_FIELD_SRC
        )
    if not isinstance(sub_spec, Mapping):
        raise mapping_error(
            f"illegal field [{sub}], only fields can be specified inside fields", source=MULTI_FIELD_SRC
        )
    if "type" not in sub_spec:
        raise mapping_error(f"no type specified for property [{sub}]", source=MULTI_FIELD_SRC)
    if "fields" in sub_spec:
        raise mapping_error(
            f"Encountered a multi-field [{sub}] which itself contains a multi-field. Defining chained multi-fields "
            "is not supported.",
            source=MULTI_FIELD_SRC,
        )


def _dense_vector(name: str, spec: dict[str, Any], version: tuple[int, ...]) -> dict[str, Any]:
    """Validate a dense_vector mapping and fill the index_options default the cluster version applies."""
    element = spec.get("element_type", "float")
    # DenseVectorFieldMapper.ElementType: FLOAT, BYTE, BIT; BFLOAT16 from 9.3 (PR #138492, "Initial bfloat16
    # support has been added to Elasticsearch 9.3"), stored in two bytes and read back as float
    elements = ("float", "byte", "bit", "bfloat16") if version[:2] >= (9, 3) else ("float", "byte", "bit")
    if element not in elements:
        raise mapping_error(
            f"invalid element_type [{element}]; available types are [{', '.join(elements)}]", source=VECTOR_SRC
        )
    dims = spec.get("dims")
    if dims is not None:
        if not isinstance(dims, int) or isinstance(dims, bool):
            raise mapping_error(
                f"Property [dims] on field [{name}] must be an integer but got [{dims}]", source=VECTOR_SRC
            )
        lo, hi = (8, 4096 * 8) if element == "bit" else (1, 4096)
        if not lo <= dims <= hi:
            raise mapping_error(
                f"The number of dimensions should be in the range [{lo}, {hi}] but was [{dims}]", source=VECTOR_SRC
            )
    indexed = spec.get("index", True)
    similarity = spec.get("similarity")
    if similarity is not None and similarity not in SIMILARITIES:
        raise mapping_error(
            f"Unknown value [{similarity}] for field [similarity] - accepted values are [{', '.join(SIMILARITIES)}]",
            source=VECTOR_SRC,
        )
    if not indexed and (similarity is not None or "index_options" in spec):
        which = "similarity" if similarity is not None else "index_options"
        raise mapping_error(
            f"Field [{which}] can only be specified for a field of type [dense_vector] when it is indexed",
            source=VECTOR_SRC,
        )
    if indexed and similarity is None:
        spec["similarity"] = "l2_norm" if element == "bit" else "cosine"
    if indexed:  # 8.11+ serializes [index] (search.vectors/80_dense_vector_indexed_by_default.yml)
        spec["index"] = True
    opts = spec.get("index_options")
    if opts is not None:
        if not isinstance(opts, Mapping) or "type" not in opts:
            raise mapping_error("[index_options] requires field [type] to be configured", source=VECTOR_SRC)
        itype = opts["type"]
        if itype not in _vector_index_types(version):
            raise mapping_error(f"Unknown vector index options type [{itype}] for field [{name}]", source=VECTOR_SRC)
        known = _index_params(itype, version)
        if itype == "bbq_disk":
            _bbq_disk_options(name, opts, version)
        if (
            "on_disk_rescore" in known
            and itype not in ON_DISK_RESCORE_TYPES
            and opts.get("on_disk_rescore")
            in (
                True,
                "true",
            )
        ):
            # VectorIndexType.parseIndexOptions removes on_disk_rescore and throws only when it is true
            raise mapping_error(
                "on_disk_rescore is only supported for indexed and quantized vector types", source=VECTOR_SRC
            )
        if "flat_index_threshold" in known and "flat_index_threshold" in opts:
            threshold = opts["flat_index_threshold"]
            if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < -1:
                raise DoubleLimit(f"the flat_index_threshold value [{threshold}] (its refusal is not modelled)")
        extra = [k for k in opts if k not in known]
        # DenseVectorFieldMapper.hasRescoreIndexVersion: ADD_RESCORE_PARAMS_TO_QUANTIZED_VECTORS (9_015_0_00,
        # released in 9.1) or its 8.x backport (8_528_0_00, 8.19); 9.0 and 8.18 leave it unparsed
        # (DenseVectorFieldMapperTests.testRescoreVectorOldIndexVersion: "has unsupported parameters")
        if "rescore_vector" in opts and not since_9_1_or_8_19(version):
            extra.append("rescore_vector")
        if extra:
            shown = ", ".join(f"{k} : {java_str(opts[k])}" for k in extra)
            raise mapping_error(
                f"Mapping definition for [{name}] has unsupported parameters:  [{shown}]", source=VECTOR_SRC
            )
        if itype in QUANTIZED and element not in ("float", "bfloat16"):
            raise mapping_error(
                f"[element_type] cannot be [{element}] when using index type [{itype}]", source=VECTOR_SRC
            )
        if dims is not None and itype.startswith("int4") and dims % 2:
            raise mapping_error(f"{itype} only supports even dimensions; provided={dims}", source=VECTOR_SRC)
        if dims is not None and itype in ("bbq_hnsw", "bbq_flat") and dims < BBQ_MIN_DIMS:
            raise mapping_error(
                f"{itype} does not support dimensions fewer than {BBQ_MIN_DIMS}; provided={dims}", source=VECTOR_SRC
            )
        rescore = opts.get("rescore_vector")
        if rescore is not None:
            if not isinstance(rescore, Mapping) or "oversample" not in rescore:
                raise mapping_error(
                    "Invalid rescore_vector value. Missing required field oversample", source=VECTOR_SRC
                )
            over = float(rescore["oversample"])
            if over != 0 and over < 1:
                raise mapping_error("oversample must be greater than 1 or exactly 0", source=VECTOR_SRC)
            if over > 10:
                raise mapping_error("oversample must be less than or equal to 10", source=VECTOR_SRC)
        elif itype == "bbq_disk" or (itype.startswith("bbq") and since_9_1_or_8_19(version)):
            # defaultOversampleForBBQ: DEFAULT_OVERSAMPLE_VALUE_FOR_BBQ (9.1) or its 8.x backport
            # DEFAULT_OVERSAMPLE_VALUE_FOR_BBQ_BACKPORT_8_X (8_530_0_00, after the 8.19 rescore backport 8_528_0_00);
            # BBQ_DISK always oversamples 1-bit quantization by DEFAULT_OVERSAMPLE
            spec["index_options"] = {**opts, "rescore_vector": {"oversample": 3.0}}
    elif indexed and element in ("float", "bfloat16") and dims is not None:  # PR #145202: bfloat16 as float
        # DenseVectorFieldMapper defaults: 8.14+ int8_hnsw; 9.1+ bbq_hnsw (oversample 3.0) when dims >= 384
        if version >= (9, 1) and dims >= BBQ_DIMS_DEFAULT_THRESHOLD:
            spec["index_options"] = {
                "type": "bbq_hnsw",
                "m": 16,
                "ef_construction": 100,
                "rescore_vector": {"oversample": 3.0},
            }
        elif version >= (8, 14):
            spec["index_options"] = {"type": "int8_hnsw", "m": 16, "ef_construction": 100}
    return spec


def _bbq_disk_options(name: str, opts: Mapping[str, Any], version: tuple[int, ...]) -> None:
    """``VectorIndexType.BBQ_DISK.parseIndexOptions``: ``cluster_size`` in [64, 65536], ``default_visit_percentage``
    in [0, 100] (read as a float); ``bits`` and ``precondition`` (snapshot builds only in 9.3, GA 9.4 per
    elasticsearch-specification #6586) are double limits from 9.4."""
    lo, hi = BBQ_DISK_CLUSTER_SIZE
    if "cluster_size" in opts:
        size = opts["cluster_size"]
        if not isinstance(size, int) or isinstance(size, bool):
            raise DoubleLimit(f"a non-integer bbq_disk cluster_size [{size}]")
        if not lo <= size <= hi:
            raise mapping_error(f"cluster_size must be between {lo} and {hi}, got: {size}", source=VECTOR_SRC)
    if "default_visit_percentage" in opts:
        raw = opts["default_visit_percentage"]
        if not isinstance(raw, (int, float)) or isinstance(raw, bool):
            raise DoubleLimit(f"a non-numeric bbq_disk default_visit_percentage [{raw}]")
        pct = struct.unpack("f", struct.pack("f", float(raw)))[0]  # (float) XContentMapValues.nodeDoubleValue
        if not 0.0 <= pct <= 100.0:
            raise mapping_error(
                f"default_visit_percentage must be between 0.0 and 100.0, got: {_java_double(pct)} for field [{name}]",
                source=VECTOR_SRC,
            )
    if tuple(version[:2]) >= (9, 4):
        for key in ("bits", "precondition"):
            if key in opts:
                raise DoubleLimit(f"the bbq_disk [{key}] option")


def java_float_text(value: float, *, single: bool = False) -> str:
    """``Double.toString`` (or ``Float.toString`` with ``single``; JDK 19+, shortest round-trip digits): plain
    notation with at least one fraction digit for 1e-3 <= |v| < 1e7, else ``d.dddE[-]n``."""
    value = _float32(value) if single else float(value)
    shortest = None
    if single and value == value and value not in (float("inf"), float("-inf")) and value != 0:
        for precision in range(1, 10):  # the fewest digits that read back as the same float
            candidate = f"{abs(value):.{precision}g}"
            if _float32(float(candidate)) == abs(value):
                shortest = candidate
                break
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits = Decimal(shortest if shortest is not None else repr(abs(value))).normalize()
    _, coeff, exp = digits.as_tuple()
    text = "".join(str(d) for d in coeff)
    point = len(text) + int(exp)  # position of the decimal point in the digit string
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{text}"
        if point >= len(text):
            return f"{sign}{text}{'0' * (point - len(text))}.0"
        return f"{sign}{text[:point]}.{text[point:]}"
    return f"{sign}{text[0]}.{text[1:] or '0'}E{point - 1}"


def _float32(value: float) -> float:
    """``value`` rounded to a Java ``float``."""
    return float(struct.unpack("f", struct.pack("f", float(value)))[0])


def _java_double(value: float) -> str:
    return java_float_text(value)


# -- documents -----------------------------------------------------------------------------------------------
def _doc_error(reason: str, doc_id: str | None, *, err_type: str = "document_parsing_exception") -> EsError:
    return EsError(400, err_type, reason, source=DOC_SRC)


def validate_document(mapping: Mapping_, source: Mapping[str, Any], doc_id: str | None) -> None:
    """Refuse what indexing ``source`` into an index with this mapping refuses.

    Args:
        mapping: The index mapping.
        source: The document (after the ingest pipeline).
        doc_id: Its id (for messages).
    """
    _validate_object(mapping.fields, mapping.dynamic, source, "", "_doc", doc_id, mapping)


def _validate_object(
    fields: dict[str, FieldSpec],
    dynamic: str,
    obj: Mapping[str, Any],
    prefix: str,
    where: str,
    doc_id: str | None,
    mapping: Mapping_ | None = None,
) -> None:
    for key, value in obj.items():
        path = f"{prefix}{key}"
        spec = fields.get(key)
        if spec is None:
            if dynamic == "strict":
                raise EsError(
                    400,
                    "strict_dynamic_mapping_exception",
                    f"mapping set to strict, dynamic introduction of [{key}] within [{where}] is not allowed",
                    source="server/src/main/java/org/elasticsearch/index/mapper/StrictDynamicMappingException.java",
                )
            if dynamic != "true" or mapping is None:
                continue  # dynamic false: kept in _source, not indexed; runtime: not typed by the double
            if "." in key:
                raise DoubleLimit(f"dynamic mapping of the dotted field name [{path}]")
            raw = _dynamic_mapping(value, mapping.raw)
            if raw is None:
                continue  # null or an empty array: no mapping yet
            _raw_properties(mapping.raw, prefix)[key] = raw
            spec = _spec_from_raw(path, raw)
            fields[key] = spec
        _validate_value(spec, value, path, doc_id, dynamic, mapping)


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}([.,]\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)?)?")
"""``strict_date_optional_time`` from a full date on (the first of ``dynamic_date_formats``)."""


def _dynamic_mapping(value: Any, root: Mapping[str, Any]) -> dict[str, Any] | None:
    """The mapping ``DynamicFieldsBuilder`` adds for a new field holding ``value`` (None: none yet)."""
    if isinstance(value, list):
        if 128 <= len(value) <= 4096 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise DoubleLimit("dynamic mapping of a numeric array as a dense_vector (8.11+)")
        first = next((v for v in value if v is not None), None)
        return None if first is None else _dynamic_mapping(first, root)
    if value is None:
        return None
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "long"}
    if isinstance(value, float):
        return {"type": "float"}
    if isinstance(value, Mapping):
        return {"properties": {}}
    text = str(value)
    if root.get("numeric_detection") in (True, "true"):
        raise DoubleLimit("numeric_detection")
    if root.get("date_detection", True) not in (False, "false"):
        if _DATE.fullmatch(text):
            return {"type": "date"}
        if re.fullmatch(r"\d{4}(-\d{2})?|\d{4}/\d{2}/\d{2}.*", text):
            raise DoubleLimit(f"dynamic date detection of [{text}]")
    return {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}


def _raw_properties(raw: dict[str, Any], prefix: str) -> dict[str, Any]:
    node: dict[str, Any] = raw
    for part in [p for p in prefix.split(".") if p]:
        node = node.setdefault("properties", {}).setdefault(part, {})
    props: dict[str, Any] = node.setdefault("properties", {})
    return props


def _spec_from_raw(name: str, raw: Mapping[str, Any]) -> FieldSpec:
    spec = FieldSpec(name, str(raw.get("type", "object")), dict(raw))
    for sub, sub_raw in (raw.get("fields") or {}).items():
        spec.subfields[sub] = _spec_from_raw(f"{name}.{sub}", sub_raw)
    return spec


def _validate_value(
    spec: FieldSpec, value: Any, path: str, doc_id: str | None, dynamic: str, mapping: Mapping_ | None = None
) -> None:
    if value is None:
        return
    values = value if isinstance(value, list) and spec.type not in ("dense_vector",) else [value]
    for v in values:
        if v is None:
            continue
        if spec.type == "object":
            if spec.params.get("enabled") is False:
                continue
            if not isinstance(v, Mapping):
                raise _doc_error(
                    f"object mapping for [{path}] tried to parse field [{path}] as object, but found a concrete value",
                    doc_id,
                )
            sub_dynamic = str(spec.params.get("dynamic", dynamic)).lower()
            _validate_object(spec.properties, sub_dynamic, v, f"{path}.", path, doc_id, mapping)
        elif spec.type in ("keyword", "text"):
            if isinstance(v, Mapping):
                raise _doc_error(
                    f"failed to parse field [{path}] of type [{spec.type}] in document with id '{doc_id}'. "
                    f"Preview of field's value: '{v}'",
                    doc_id,
                )
        elif spec.type in ("integer", "long", "float", "double"):
            if isinstance(v, bool) or not _numeric(v) or not _in_range(spec.type, v):
                raise _doc_error(
                    f"failed to parse field [{path}] of type [{spec.type}] in document with id '{doc_id}'. "
                    f"Preview of field's value: '{v}'",
                    doc_id,
                )
        elif spec.type == "boolean":
            if v not in (True, False, "true", "false", ""):
                raise _doc_error(
                    f"failed to parse field [{path}] of type [boolean] in document with id '{doc_id}'. "
                    f"Preview of field's value: '{v}'",
                    doc_id,
                )
        elif spec.type == "date":
            if not _date_ok(v):
                raise _doc_error(
                    f"failed to parse field [{path}] of type [date] in document with id '{doc_id}'. "
                    f"Preview of field's value: '{v}'",
                    doc_id,
                )
        elif spec.type == "dense_vector":
            _validate_vector(spec, v, path, doc_id)
        elif spec.type == "semantic_text":
            if not isinstance(v, str):
                raise _doc_error(f"failed to parse field [{path}] of type [semantic_text]: expected a string", doc_id)


def _numeric(v: Any) -> bool:
    if isinstance(v, (int, float)):
        return math.isfinite(float(v))
    if isinstance(v, str):
        try:
            return math.isfinite(float(v))
        except ValueError:
            return False
    return False


_WHOLE_RANGES = {"integer": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
"""``NumberFieldMapper.NumberType``: INTEGER refuses a value outside ``Integer.MIN_VALUE..MAX_VALUE`` ("Value [x] is
out of range for an integer"; a JSON number: Jackson's "out of range of int"), LONG outside the long range
(``NumberFieldMapperTests`` / ``IntegerFieldMapperTests.outOfRangeSpecs``); a fraction is truncated (``coerce``)."""


def _in_range(ftype: str, v: Any) -> bool:
    bounds = _WHOLE_RANGES.get(ftype)
    if bounds is None:
        return True
    number = float(v) if not isinstance(v, int) else v
    return bounds[0] <= number <= bounds[1]


def _date_ok(v: Any) -> bool:
    return parse_date(v) is not None


def _validate_vector(spec: FieldSpec, v: Any, path: str, doc_id: str | None) -> None:
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise _doc_error(
            f"failed to parse field [{path}] of type [dense_vector] in document with id '{doc_id}'", doc_id
        )
    dims = spec.params.get("dims")
    if dims is None:
        spec.params["dims"] = len(v)
        dims = len(v)
    # the field mapper's IllegalArgumentException, wrapped by DocumentParser.wrapInDocumentParsingException:
    # DocumentParsingException("failed to parse: " + e.getMessage(), e)
    where = f"The [dense_vector] field [{path}] in doc [document with id '{doc_id}']"
    if len(v) > dims:  # checkDimensionExceeded, while the array is read
        raise _vector_error(f"{where} has more dimensions than defined in the mapping [{dims}]")
    if len(v) != dims:  # checkDimensionMatches, at its end
        raise _vector_error(
            f"{where} has a different number of dimensions [{len(v)}] than defined in the mapping [{dims}]"
        )
    sq = sum(float(x) * float(x) for x in v)
    similarity = spec.params.get("similarity", "cosine")
    element = str(spec.params.get("element_type", "float"))
    if element == "bit":  # BitElement.checkVectorMagnitude does nothing
        return
    if similarity == "cosine" and sq == 0:
        raise _vector_error(
            "The [cosine] similarity does not support vectors with zero magnitude." + _vector_preview(v, element)
        )
    if similarity == "dot_product" and abs(sq - 1.0) >= 1e-3:
        raise _vector_error(
            "The [dot_product] similarity can only be used with unit-length vectors." + _vector_preview(v, element)
        )


def _vector_error(reason: str) -> EsError:
    """``document_parsing_exception`` ``failed to parse: <reason>`` caused by the mapper's IAE."""
    return EsError(
        400,
        "document_parsing_exception",
        f"failed to parse: {reason}",
        source=DOC_SRC + " (wrapInDocumentParsingException); " + VECTOR_SRC,
        caused_by={"type": "illegal_argument_exception", "reason": reason},
    )


def _vector_preview(vector: list[Any], element: str = "float") -> str:
    """``Element.appendErrorElements``: `` Preview of invalid vector: [`` the first five values (Java floats,
    ``Float.toString``; bytes as integers), ``, ...`` when the vector has five or more, ``]``."""
    if element == "byte":
        shown = ", ".join(str(int(x)) for x in vector[:5])
    else:
        shown = ", ".join(java_float_text(float(x), single=True) for x in vector[:5])
    return f" Preview of invalid vector: [{shown}{', ...' if len(vector) >= 5 else ''}]"


def vector_score(similarity: str, doc: list[float], query: list[float]) -> float:
    """``DenseVectorFieldMapper.VectorSimilarity.score`` for float vectors (the kNN ``_score``).

    Args:
        similarity: Mapping similarity.
        doc: Stored vector.
        query: Query vector.
    """
    dot = sum(a * b for a, b in zip(doc, query, strict=True))
    if similarity == "cosine":
        norm = math.sqrt(sum(a * a for a in doc)) * math.sqrt(sum(b * b for b in query))
        return (1.0 + (dot / norm if norm else 0.0)) / 2.0
    if similarity == "dot_product":
        return max(0.0, (1.0 + dot) / 2.0)
    if similarity == "l2_norm":
        d2 = sum((a - b) ** 2 for a, b in zip(doc, query, strict=True))
        return 1.0 / (1.0 + d2)
    if similarity == "max_inner_product":
        return 1.0 / (1.0 - dot) if dot < 0 else dot + 1.0
    raise ValueError(similarity)
