"""The search plan: which channels one query runs and where their lists are fused, decided before
anything is sent. Pure (no cluster, no model): the Elasticsearch backend follows it, the embedded
backend runs its channels, and ``es-rag explain`` prints it, so the three never disagree.

Channels: ``bm25`` always; ``dense`` when there is a query vector (or the server embeds the query,
``vector_mode=semantic_text``); ``exact`` when the query holds identifier-like tokens (``E1042``,
``sync_engine.start()``) and ``exact_channel`` is ``auto``. Fusion: native (one ``rrf``/``linear``
retriever request) when the cluster allows it, there are two channels or more and nothing in the
settings blocks it (:func:`native_blocker`); else the client path (one ``_msearch``, fused by
:mod:`es_rag.stages.fusion`), which is also the native path's fallback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import regex

from es_rag.languages import LanguageDecision, query_language, routed_fields
from es_rag.settings import FusionMethod, MmrPath, Settings, VectorMode
from es_rag.stages.fusion import NATIVE_NORMALIZERS

MAX_IDENTIFIERS = 8

CJK_CLASS = r"\p{IsHan}\p{IsHiragana}\p{IsKatakana}\p{IsHangul}\u3099-\u309C\u30FC\uFF70\uFF9E\uFF9F"
r"""Characters of scripts written without spaces: Han, kana, Hangul, and the kana marks whose script is Common or
Inherited (the (semi-)voiced sound marks U+3099..U+309C and halfwidth U+FF9E/U+FF9F, the prolonged sound marks
``ー``/``ｰ``), so that a katakana word stays one run. An identifier ends where they begin, so ``E1042の対処``
holds the identifier ``E1042``. Written in the syntax both Java's ``Pattern`` and Python's ``regex`` read alike
(``\p{IsHan}`` is the Han *script*)."""

IDENTIFIER_TOKEN_PATTERN = rf"[{CJK_CLASS}]+|(?:(?![{CJK_CLASS}])[\p{{L}}\p{{N}}_])+"
"""The ``es_rag_identifier`` pattern tokenizer (``group: 0``, each match one token): a run of CJK characters, or a
run of other letters, digits and ``_``. Everything else separates tokens, and so does a change between the two
kinds. ``index_templates/_index_settings.j2`` holds the same string (a test keeps them equal)."""

# A candidate token: non-CJK word characters joined by identifier punctuation (E-1042, sync_engine.start(), v2.3.1).
_WORD = rf"(?:(?![{CJK_CLASS}])\w)"
_CANDIDATE_RE = regex.compile(rf"{_WORD}(?:{_WORD}|[\-./:#])*(?:\(\))?")


def is_identifier(token: str) -> bool:
    """Whether a query token looks like an identifier that BM25 and dense retrieval may miss.

    Identifier-like: letters and digits mixed (``E1042``, ``X200``, ``v2``), an underscore
    (``sync_engine``), camelCase (``getUser``), a call (``start()``), ``::`` / ``.`` / ``-`` / ``/``
    between word characters with a digit or an upper-case letter somewhere (``ERR-SYNC-42``,
    ``Foo.bar``, ``HTTP/2``). Plain words and plain numbers are not.

    Args:
        token: One candidate token of the query.
    """
    core = token.rstrip(".:-/#")
    if len(core) < 2:
        return False
    has_alpha = any(c.isalpha() for c in core)
    has_digit = any(c.isdigit() for c in core)
    if has_alpha and has_digit:
        return True
    if "_" in core.strip("_") or core.endswith("()"):
        return True
    if re.search(r"[a-z][A-Z]", core):
        return True
    joined = re.search(r"\w(::|[.\-/])\w", core) is not None
    return joined and (has_digit or any(c.isupper() for c in core))


def extract_identifiers(query_text: str) -> list[str]:
    """Identifier-like tokens of the query, in order, without duplicates (at most 8).

    Args:
        query_text: The user's query.
    """
    out: list[str] = []
    for m in _CANDIDATE_RE.finditer(query_text):
        token = m.group().rstrip(".:-/#")
        if is_identifier(token) and token not in out:
            out.append(token)
    return out[:MAX_IDENTIFIERS]


def exact_channel_active(query_text: str, settings: Settings) -> bool:
    """Whether the exact-match channel runs for this query.

    Args:
        query_text: The user's query.
        settings: ``exact_channel`` (``auto`` or ``off``).
    """
    return settings.retrieve.exact_channel == "auto" and bool(extract_identifiers(query_text))


@dataclass(frozen=True)
class Bm25Route:
    """Which fields the BM25 channel of one query searches, and why.

    Attributes:
        language: The query's language (:func:`es_rag.languages.query_language`).
        fields: ``multi_match`` fields with boosts: ``--bm25-fields`` with each field that has per-language subfields
            replaced by its subfield of ``language`` (:func:`es_rag.languages.routed_fields`).
    """

    language: LanguageDecision
    fields: tuple[str, ...]

    def describe(self) -> str:
        """``query language ja (detected, p=1.00): bm25 fields [...]`` (a trace note)."""
        return f"query language {self.language.describe()}: bm25 fields {list(self.fields)}"


@lru_cache(maxsize=4096)
def _route(
    query_text: str, mode: str, languages: tuple[str, ...], corpus: str | None, fields: tuple[str, ...]
) -> Bm25Route:
    decision = query_language(query_text, mode, languages, corpus)
    return Bm25Route(decision, routed_fields(fields, decision.code, languages))


def bm25_route(query_text: str, settings: Settings) -> Bm25Route:
    """The BM25 fields of one query: those of its language (``--query-language``, ``--languages``), else the base
    fields. Every backend and body builder asks here, so they query the same fields (memoised per query and
    settings: the detector runs once per query).

    Args:
        query_text: The user's query.
        settings: ``query_language``, ``languages``, ``language`` and ``bm25_fields``.
    """
    return _route(
        query_text,
        settings.retrieve.query_language,
        settings.index.language_codes,
        settings.index.language,
        tuple(settings.retrieve.bm25_fields),
    )


def semantic_mode(settings: Settings) -> bool:
    """Whether the dense channel is the server-side ``semantic`` query (``vector_mode=semantic_text``).

    Args:
        settings: ``vector_mode`` / ``inference_id``.
    """
    return settings.encoder.vectors is VectorMode.SEMANTIC_TEXT


def channel_plan(query_text: str, query_vector: object | None, settings: Settings) -> list[str]:
    """The channels one search runs, in fusion order (``bm25``, then ``dense``, then ``exact``).

    In ``vector_mode=semantic_text`` the dense channel needs no client vector (the cluster embeds the
    query), so it always runs.

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None (embedding failed / disabled).
        settings: ``exact_channel`` and ``vector_mode``.
    """
    channels = ["bm25"]
    if query_vector is not None or semantic_mode(settings):
        channels.append("dense")
    if exact_channel_active(query_text, settings):
        channels.append("exact")
    return channels


WEIGHTED_RRF_MIN_VERSION = (9, 2)
"""Weighted ``rrf`` children (``{"retriever": ..., "weight": w}``): ``RRFRetrieverComponent``, node feature
``rrf_retriever.weighted_support`` (9.2); 9.1 and older parse each child as a named retriever and refuse it."""
LINEAR_MIN_VERSION = (8, 18)
"""The ``linear`` retriever (``LinearRetrieverBuilder``, node feature ``linear_retriever_supported``: 8.18 / 9.0)."""
L2_NORM_MIN_VERSION = (9, 1)
"""The ``l2_norm`` normalizer of the ``linear`` retriever (``linear_retriever.l2_norm``, 9.1)."""


def native_blocker(settings: Settings, version: Sequence[int] | None = None) -> str | None:
    """Why the configured fusion cannot run as a native retriever on a cluster of ``version`` (None: it can).

    ``zscore`` exists only client-side; weighted ``rrf`` needs 9.2, ``linear`` 8.18 and its ``l2_norm`` 9.1. The
    linear body names the normalizer per child only (a top-level ``normalizer`` next to ``retrievers`` is refused
    by 9.1 and unknown to 9.0), so it needs no newer version than the retriever itself.

    Args:
        settings: ``fusion_method``, ``score_normalizer`` and ``channel_weights``.
        version: The cluster version, or None when unknown (only the version-free rule applies).
    """
    if settings.fusion.method == "linear" and settings.fusion.normalizer not in NATIVE_NORMALIZERS:
        return f"normalizer {settings.fusion.normalizer} exists only client-side"
    if version is None:
        return None
    shown = ".".join(str(p) for p in version)
    if (
        settings.fusion.method == "rrf"
        and settings.fusion.channel_weights
        and tuple(version) < WEIGHTED_RRF_MIN_VERSION
    ):
        return f"weighted rrf needs Elasticsearch >= 9.2 (rrf_retriever.weighted_support), the cluster is {shown}"
    if settings.fusion.method == "linear":
        if tuple(version) < LINEAR_MIN_VERSION:
            return f"the linear retriever needs Elasticsearch >= 8.18, the cluster is {shown}"
        if settings.fusion.normalizer == "l2_norm" and tuple(version) < L2_NORM_MIN_VERSION:
            return f"the l2_norm normalizer needs Elasticsearch >= 9.1, the cluster is {shown}"
    return None


DIVERSIFY_MIN_VERSION = (9, 3)
"""The ``diversify`` retriever (``DiversifyRetrieverBuilder``, node feature ``retriever.result_diversification_mmr``;
9.3, technical preview)."""
TEXT_SIMILARITY_RERANKER_MIN_VERSION = (8, 14)
"""The ``text_similarity_reranker`` retriever (``TextSimilarityRankRetrieverBuilder``, 8.14)."""


def es_rerank_blocker(settings: Settings, native: bool, version: Sequence[int] | None = None) -> str | None:
    """Why the ``text_similarity_reranker`` retriever does not wrap this search (None: it does).

    It wraps the native fusion retriever only: on the client path there is no retriever to wrap (and a cluster
    that refuses ``rrf`` for its licence refuses ``text_similarity_reranker`` for the same reason).

    Args:
        settings: ``rerank_inference_id``.
        native: Whether the search fuses natively.
        version: The cluster version, None when unknown.
    """
    if settings.rerank.inference_id is None:
        return "no --rerank-inference-id"
    if not native:
        return "client fusion path: no native retriever to wrap"
    if version is not None and tuple(version) < TEXT_SIMILARITY_RERANKER_MIN_VERSION:
        shown = ".".join(str(p) for p in version)
        return f"the text_similarity_reranker retriever needs Elasticsearch >= 8.14, the cluster is {shown}"
    return None


def diversify_blocker(
    settings: Settings,
    *,
    native: bool,
    es_rerank: bool,
    has_vector: bool,
    version: Sequence[int] | None = None,
) -> str | None:
    """Why MMR does not run as Elasticsearch's ``diversify`` retriever for this search (None: it does).

    Native MMR needs Elasticsearch >= 9.3, a client-side query vector (``query_vector``: the ``vector`` field holds
    es_rag's embeddings), a native search to wrap, and the ranking finished in Elasticsearch (the reranker there,
    or no reranker): MMR chooses among ranked hits, so a local cross-encoder after it would rank a set chosen on
    fused scores.

    Args:
        settings: ``mmr_path``, ``vector_mode``, ``rerank_model``.
        native: Whether the search fuses natively.
        es_rerank: Whether ``text_similarity_reranker`` ranks the hits in Elasticsearch.
        has_vector: Whether there is a client-side query vector.
        version: The cluster version, None when unknown.
    """
    if settings.select.mmr_path is MmrPath.CLIENT:
        return "mmr_path=client"
    if version is None:
        return "cluster version unknown: the diversify retriever needs Elasticsearch >= 9.3"
    if tuple(version) < DIVERSIFY_MIN_VERSION:
        shown = ".".join(str(p) for p in version)
        return f"the diversify retriever needs Elasticsearch >= 9.3, the cluster is {shown}"
    if not has_vector or settings.encoder.vectors is not VectorMode.CLIENT:
        return "no client-side query vector (diversify needs query_vector and the vector field)"
    if not native:
        return "client fusion path: no native retriever to wrap"
    if not es_rerank and settings.rerank.model is not None:
        return "the local cross-encoder reranks after retrieval, and MMR must follow the ranking"
    return None


def native_supported(settings: Settings, version: Sequence[int] | None = None) -> bool:
    """Whether the configured fusion can run natively on ``version`` (:func:`native_blocker` has no objection).

    Args:
        settings: ``fusion_method``, ``score_normalizer`` and ``channel_weights``.
        version: The cluster version, or None when unknown.
    """
    return native_blocker(settings, version) is None


@dataclass(frozen=True)
class SearchPlan:
    """What one search does.

    Attributes:
        channels: Channel names in fusion order (``bm25``, then ``dense``, then ``exact``).
        identifiers: The identifiers the exact channel looks for (empty without it).
        native: Fuse natively (one retriever request); False: the client path.
        method: ``rrf`` or ``linear``.
        native_blocked: Why native fusion is not used although the cluster offers it (``one channel`` or a
            :func:`native_blocker` reason), None otherwise.
        bm25: The query's language and the fields the BM25 channel searches (:func:`bm25_route`).
    """

    channels: tuple[str, ...]
    identifiers: tuple[str, ...]
    native: bool
    method: FusionMethod
    native_blocked: str | None = None
    bm25: Bm25Route | None = None

    @property
    def fallback(self) -> str | None:
        """``client`` when the native request may be refused (licence, a 4xx) and the client path takes over."""
        return "client" if self.native else None

    @property
    def notes(self) -> list[str]:
        """What the trace says about the plan."""
        notes = [f"exact channel: identifiers {list(self.identifiers)}"] if self.identifiers else []
        if self.native_blocked and self.native_blocked != "one channel":
            notes.append(f"{self.native_blocked}: client path")
        return notes


def plan_search(
    query_text: str,
    query_vector: object | None,
    settings: Settings,
    *,
    native_available: bool,
    version: Sequence[int] | None = None,
) -> SearchPlan:
    """The plan of one search.

    Args:
        query_text: The user's query.
        query_vector: The query embedding, or None (embedding failed or not loaded).
        settings: Exact channel, vector mode and fusion settings.
        native_available: Whether the cluster offers native fusion for this search (licence, ``fusion_path``);
            False for the embedded backend.
        version: The cluster version, None when unknown (only the version-free rules apply).
    """
    channels = tuple(channel_plan(query_text, query_vector, settings))
    identifiers = tuple(extract_identifiers(query_text)) if "exact" in channels else ()
    blocked = None
    if native_available:
        blocked = "one channel" if len(channels) < 2 else native_blocker(settings, version)
    return SearchPlan(
        channels=channels,
        identifiers=identifiers,
        native=native_available and blocked is None,
        method=settings.fusion.method,
        native_blocked=blocked,
        bm25=bm25_route(query_text, settings),
    )
