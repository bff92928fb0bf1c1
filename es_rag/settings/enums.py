"""Every choice a setting offers, as a string Enum validated once, where the setting is built.

A member is a ``str``: it compares equal to its value, serialises to it in JSON, and prints as it
(``str()``, f-strings, jinja2), so request bodies and messages never show ``FusionMethod.RRF``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

from es_rag.errors import ConfigError

E = TypeVar("E", bound=Enum)


class Choice(str, Enum):
    """A string Enum that prints as its value (``enum.StrEnum`` needs Python 3.11)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def values(cls) -> list[str]:
        """The valid values, in declaration order."""
        return [str(m.value) for m in cls]


def parse_enum(enum_cls: type[E], value: Any, name: str) -> E:
    """``value`` as a member of ``enum_cls`` (case-insensitive); a bad value raises ConfigError naming the valid ones.

    Args:
        enum_cls: The Enum.
        value: A member or its value.
        name: Setting name for the error message.
    """
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(str(value).lower())
    except ValueError:
        valid = ", ".join(str(m.value) for m in enum_cls)
        raise ConfigError(f"{name}: invalid value {value!r}; valid values: {valid}") from None


class Analyzer(Choice):
    """Analyzer for text fields. ``kuromoji`` needs the analysis-kuromoji plugin.

    ``auto`` is resolved once, by :func:`es_rag.wiring.resolve_settings` (against the cluster's plugins
    at setup/doctor, else the no-plugin branch): ``kuromoji`` when the cluster has the
    analysis-kuromoji plugin, else ``cjk`` when the corpus language is Japanese, Chinese or Korean,
    else ``standard``. Assets are never rendered with ``auto`` unresolved.
    """

    AUTO = "auto"
    STANDARD = "standard"
    ENGLISH = "english"
    CJK = "cjk"
    KUROMOJI = "kuromoji"


class Similarity(Choice):
    """dense_vector similarity."""

    COSINE = "cosine"
    DOT_PRODUCT = "dot_product"
    L2_NORM = "l2_norm"
    MAX_INNER_PRODUCT = "max_inner_product"


class VectorIndexType(Choice):
    """``dense_vector`` ``index_options.type`` values es_rag renders (``DenseVectorFieldMapper.VectorIndexType``)."""

    HNSW = "hnsw"
    INT8_HNSW = "int8_hnsw"
    INT4_HNSW = "int4_hnsw"
    BBQ_HNSW = "bbq_hnsw"
    FLAT = "flat"
    INT8_FLAT = "int8_flat"
    INT4_FLAT = "int4_flat"
    BBQ_FLAT = "bbq_flat"

    @property
    def quantized(self) -> bool:
        """Whether vectors are stored quantized (the only types that take ``rescore_vector``)."""
        return self.value.startswith(("int8", "int4", "bbq"))


class VectorMode(Choice):
    """Where vectors come from.

    * ``client``: es_rag embeds chunks and queries with sentence-transformers (any licence);
    * ``inference``: the ``chunks-inference`` ingest pipeline's ``inference`` processor embeds each
      client-made chunk into ``vector`` with ``inference_id``; queries are still embedded client-side
      and searched with ``knn``;
    * ``semantic_text``: the Enterprise path -- es_rag writes whole sections, Elasticsearch chunks and
      embeds them into a ``semantic_text`` field with ``inference_id`` and searches it with the
      ``semantic`` query (query embedded server-side).
    """

    CLIENT = "client"
    INFERENCE = "inference"
    SEMANTIC_TEXT = "semantic_text"


class SemanticChunking(Choice):
    """``chunking_settings.strategy`` of the ``semantic_text`` field; ``endpoint`` writes none, leaving the
    inference endpoint's own chunking settings in force."""

    SENTENCE = "sentence"
    WORD = "word"
    NONE = "none"
    ENDPOINT = "endpoint"


class ExactChannel(Choice):
    """``auto``: run the exact-match channel when the query holds identifier-like tokens; ``off``: never."""

    AUTO = "auto"
    OFF = "off"


class DenseFitCheck(Choice):
    """``auto``: before a query reaches the dense channel, check that the embedding model's tokenizer fits the
    query's language (:mod:`es_rag.encoders.fit`); on a clear misfit the dense channel's weight for that language is
    0 (not run, shown in the trace). ``off``: always run the dense channel."""

    AUTO = "auto"
    OFF = "off"


class FusionPath(Choice):
    """Where the channels are fused: ``native`` (one ``rrf``/``linear`` retriever request, licence
    permitting), ``client`` (one ``_msearch``, fused by es_rag) or ``auto`` (probe the cluster)."""

    AUTO = "auto"
    NATIVE = "native"
    CLIENT = "client"


class MmrPath(Choice):
    """Where MMR selection runs: ``native`` (Elasticsearch's ``diversify`` retriever, 9.3+ preview, wrapping the
    search's retriever), ``client`` (es_rag's select stage) or ``auto`` (native where the cluster and the search
    allow it, see :func:`es_rag.query.diversify_blocker`)."""

    AUTO = "auto"
    NATIVE = "native"
    CLIENT = "client"


class FusionMethod(Choice):
    """``rrf`` (rank fusion) or ``linear`` (weighted sum of per-channel normalised scores)."""

    RRF = "rrf"
    LINEAR = "linear"


class ScoreNormalizer(Choice):
    """Per-channel normaliser of linear fusion; ``zscore`` exists only client-side."""

    MINMAX = "minmax"
    L2_NORM = "l2_norm"
    NONE = "none"
    ZSCORE = "zscore"


class LongText(Choice):
    """How the cross-encoder reads a passage longer than its input: score ``windows`` and aggregate, or ``truncate``."""

    WINDOWS = "windows"
    TRUNCATE = "truncate"


class RerankFusion(Choice):
    """How the cross-encoder's ranking meets the fused (first-stage) ranking: ``replace`` it, a weighted ``rrf`` of
    both ranks, or ``interpolate`` the calibrated reranker score with the min-max normalised fused score."""

    REPLACE = "replace"
    RRF = "rrf"
    INTERPOLATE = "interpolate"


class ThresholdScope(Choice):
    """What the cross-encoder's calibrated no-answer threshold cuts: ``query``, only the verdict (no sufficient
    evidence when the best candidate is below it, every candidate kept otherwise); ``hit``, also every candidate
    below it."""

    QUERY = "query"
    HIT = "hit"


class Aggregation(Choice):
    """How window scores of one passage combine: ``max`` or ``mean_top_m``."""

    MAX = "max"
    MEAN_TOP_M = "mean_top_m"


class Calibration(Choice):
    """``sigmoid``: sigmoid((raw - bias) / temperature); ``none``: raw scores."""

    SIGMOID = "sigmoid"
    NONE = "none"


class RerankBackend(Choice):
    """Cross-encoder runtime: ``auto`` (``int8`` on the CPU, ``torch`` on an accelerator), ``torch``, ``int8``
    (dynamic quantisation) or ``onnx`` (the onnx extra)."""

    AUTO = "auto"
    TORCH = "torch"
    INT8 = "int8"
    ONNX = "onnx"


class ExpandMode(Choice):
    """After selection: ``parent`` (swap a child for its section), ``neighbors`` (add adjacent children) or ``none``."""

    NONE = "none"
    PARENT = "parent"
    NEIGHBORS = "neighbors"


class Device(Choice):
    """Where the embedding model and the cross-encoder run. ``auto`` is resolved when a model loads
    (:func:`es_rag.encoders.device.resolve_device`): ``cuda`` when torch sees a CUDA device, else ``mps`` (Apple
    silicon), else ``cpu``. Asking for ``cuda`` or ``mps`` on a machine without it is an error, never a silent CPU."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"
    MPS = "mps"


class QueryRuntime(Choice):
    """How a search embeds its query: ``auto`` (the model's ONNX export when it has one, else torch), ``torch``, or
    ``onnx`` (export first when there is none); :mod:`es_rag.encoders.onnx_query`."""

    AUTO = "auto"
    TORCH = "torch"
    ONNX = "onnx"


class Precision(Choice):
    """Weights and activations of the embedding model and the cross-encoder: ``fp32``, or ``fp16`` (half precision,
    CUDA only: on a CPU fp16 matmuls are slow or missing)."""

    FP32 = "fp32"
    FP16 = "fp16"
