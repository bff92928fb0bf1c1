"""Languages of a mixed corpus: which per-language analyses an index carries, the language of each document, and
the language of each query.

* **Per-language analysis.** Next to its base field (the configured ``--analyzer``), every field BM25 queries
  (:data:`LANGUAGE_FIELDS`) has one multi-field per language of ``--languages``: ``text.en`` analysed by
  Elasticsearch's ``english`` analyzer, ``text.ja`` by ``kuromoji`` when the cluster has the analysis-kuromoji plugin,
  else by ``cjk`` (:data:`SUPPORTED`). Every document is indexed under every subfield: routing chooses how a query is
  analysed, it filters nothing.
* **Document language.** :func:`document_language`: a language the user gave (the document's ``meta.language``: front
  matter, ``--meta language=ja``, JSONL ``meta``; else the ``--language`` setting) wins; else py3langid
  (:func:`detect_language`) on the document's text; a short or low-confidence text gets no language. Stored in the
  chunk's top-level ``language`` keyword.
* **Query language.** :func:`route_query`: ``--query-language auto`` classifies the query among the languages of
  ``--languages`` (a short query is rarely sure among all ~100 languages py3langid knows, but it is among two); an
  unsure query falls back to the ``--language`` setting, else to the base fields alone. The BM25 fields of that
  language replace the base fields (:func:`routed_fields`; measured in docs/retrieval.md, "Languages").

py3langid (BSD-3-Clause, offline: its model ships in the wheel) is the detector; its model loads once per process.
The wheel's model is LZMA-compressed (68 MB of arrays; decompressing took 0.63-0.66 s of every cold ``es-rag search``),
so the arrays are kept decompressed once in ``$ES_RAG_CACHE/langid`` (default ``~/.cache/es_rag/langid``), keyed by
the model file's path, size and modification time and checked by size and CRC-32 at each load; a missing, damaged or
unwritable cache means the wheel's file is read as before (:func:`_identifier`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from es_rag.cache_files import CACHE_ENV as CACHE_ENV  # re-exported
from es_rag.errors import ConfigError

SUPPORTED: dict[str, tuple[str, ...]] = {
    "en": ("english",),
    "ja": ("cjk", "kuromoji"),
    "zh": ("cjk",),
    "ko": ("cjk",),
}
"""Languages that can get subfields, and the Elasticsearch analyzers each may use (the first is the default;
``ja`` takes ``kuromoji`` when the cluster has the analysis-kuromoji plugin, :func:`resolve_languages`). The embedded
backend mirrors ``english`` and ``cjk`` (:mod:`es_rag.embedded.analyzers`); ``kuromoji`` has no mirror."""

DEFAULT_LANGUAGES = ("en", "ja")
"""``--languages`` default: the subfields ``<field>.en`` and ``<field>.ja``."""

LANGUAGE_FIELDS = ("title", "heading_path", "text")
"""Fields of the chunk mapping that carry per-language subfields (the fields ``--bm25-fields`` names by default)."""

KUROMOJI_PLUGIN = "analysis-kuromoji"

DOCUMENT_MIN_CONFIDENCE = 0.5
"""py3langid's normalised probability a document's language needs (among all its languages)."""
QUERY_MIN_CONFIDENCE = 0.9
"""Probability a query's language needs among the configured languages (``E1042`` alone: en 0.63, undecided)."""
OTHER_LANGUAGE_MIN_CONFIDENCE = 0.5
"""Probability (among all of py3langid's languages) with which a query in a language the index has no subfields for
is recognised as such, when it is also :data:`OTHER_LANGUAGE_MARGIN` times the configured languages' together: it
then queries the base fields rather than another language's stemmer. "Fehlermeldung beim Synchronisieren": de 0.86,
en 0.000; short English queries stay English ("sync error": la 0.17, "malaria vaccine efficacy": it 0.35)."""
OTHER_LANGUAGE_MARGIN = 10.0
MIN_LETTERS = 3
"""A text with fewer letters gets no detected language."""
DETECT_CHARS = 4000
"""Characters of a document's text the detector reads (its start)."""

_CODE_RE = re.compile(r"[a-z]{2}")


@dataclass(frozen=True)
class LanguageAnalysis:
    """One language's subfields: ``<field>.<code>`` analysed by ``analyzer``.

    Attributes:
        code: ISO 639-1 code (the subfield name).
        analyzer: The Elasticsearch analyzer type (``english``, ``cjk``, ``kuromoji``).
    """

    code: str
    analyzer: str

    @property
    def spec(self) -> str:
        """``code:analyzer``, as ``--languages`` takes it."""
        return f"{self.code}:{self.analyzer}"


def parse_languages(specs: Iterable[str]) -> tuple[LanguageAnalysis, ...]:
    """The analyses of ``--languages`` (``en``, ``ja``, ``ja:kuromoji``; ``none`` or nothing: no subfields).

    Args:
        specs: ``CODE`` or ``CODE:ANALYZER`` items.

    Raises:
        ConfigError: An unsupported language or analyzer, or a language named twice.
    """
    out: list[LanguageAnalysis] = []
    for raw in specs:
        item = str(raw).strip().lower()
        if not item or item in ("none", "off"):
            continue
        code, _, analyzer = item.partition(":")
        if code not in SUPPORTED:
            raise ConfigError(
                f"languages: {code!r} has no per-language analysis; supported: {', '.join(SUPPORTED)} "
                "(or none for no subfields)"
            )
        analyzer = analyzer or SUPPORTED[code][0]
        if analyzer not in SUPPORTED[code]:
            raise ConfigError(
                f"languages: {code} is analysed by {' or '.join(SUPPORTED[code])}, not {analyzer!r} ({item!r})"
            )
        if any(a.code == code for a in out):
            raise ConfigError(f"languages: {code} is named twice")
        out.append(LanguageAnalysis(code, analyzer))
    return tuple(out)


def resolve_languages(specs: Iterable[str], *, plugins: Iterable[str] | None) -> tuple[str, ...]:
    """``--languages`` with ``ja`` given without an analyzer resolved for the cluster: ``ja:kuromoji`` when it has the
    analysis-kuromoji plugin, else ``ja:cjk``; every item comes back as ``code:analyzer``.

    Args:
        specs: ``--languages`` items.
        plugins: The cluster's analysis plugins; None when no cluster was probed (kuromoji assumed absent).
    """
    has_kuromoji = plugins is not None and KUROMOJI_PLUGIN in set(plugins)
    out = []
    for raw in specs:
        given = ":" in str(raw)
        for lang in parse_languages([raw]):
            analyzer = "kuromoji" if (lang.code == "ja" and not given and has_kuromoji) else lang.analyzer
            out.append(f"{lang.code}:{analyzer}")
    return tuple(out)


def needs_plugins(specs: Iterable[str]) -> bool:
    """Whether :func:`resolve_languages` needs the cluster's plugin list: a language with a choice of analyzers
    (``ja``) is given without one.

    Args:
        specs: ``--languages`` items.
    """
    return any(":" not in str(s) and len(SUPPORTED.get(str(s).strip().lower(), ())) > 1 for s in specs)


def check_code(value: str, what: str) -> str:
    """``value`` lower-cased as an ISO 639-1 code (``ja-JP`` gives ``ja``).

    Args:
        value: The language as given.
        what: Where it was given (for the error).

    Raises:
        ConfigError: Not a two-letter code.
    """
    code = re.split(r"[-_]", str(value).strip().lower(), maxsplit=1)[0]
    if not _CODE_RE.fullmatch(code):
        raise ConfigError(f"{what}: {value!r} is not an ISO 639-1 language code such as en or ja (or ja-JP)")
    return code


_IDENTIFIER: Any = None
_LOCK = threading.Lock()
_MODEL_ARRAYS = ("ptc", "pc", "classes", "nextmove", "nextmove_row", "out_feat")
"""The arrays of py3langid's model file (``py3langid.modelio.load_model``)."""


def _identifier() -> Any:
    global _IDENTIFIER
    if _IDENTIFIER is None:
        with _LOCK:
            if _IDENTIFIER is None:
                from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

                arrays = _cached_model(MODEL_DIR / MODEL_FILE)
                if arrays is None:
                    _IDENTIFIER = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
                else:
                    _IDENTIFIER = LanguageIdentifier(
                        arrays["ptc"],
                        arrays["pc"],
                        arrays["classes"].tolist(),
                        _stdlib_array(arrays["nextmove"]),
                        arrays["out_feat"].tolist(),
                        norm_probs=True,
                        tk_row=_stdlib_array(arrays["nextmove_row"]),
                    )
    return _IDENTIFIER


def _stdlib_array(values: Any) -> Any:
    """An unsigned numpy array as the ``array.array`` py3langid walks (as ``py3langid.modelio`` converts it)."""
    from array import array

    import numpy as np

    out = array({2: "H", 4: "I", 8: "L"}[values.dtype.itemsize])
    out.frombytes(np.ascontiguousarray(values).tobytes())
    return out


def _cached_model(model: Any) -> dict[str, Any] | None:
    """The arrays of py3langid's model from the decompressed cache, writing it on a miss; None when the cache cannot
    be read or written (the caller reads the wheel's file)."""
    import hashlib
    import json
    import os
    from pathlib import Path

    import numpy as np

    from es_rag.cache_files import cache_root, damaged, file_sums

    files = [f"{n}.npy" for n in _MODEL_ARRAYS]
    try:
        st = Path(model).stat()
        key = hashlib.sha256(f"{Path(model).resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
        root = cache_root() / "langid" / key
        record = root / "key.json"
        sums = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
        if isinstance(sums, dict) and set(sums) == set(files) and damaged(root, sums) is None:
            return {n: np.load(root / f"{n}.npy", allow_pickle=False) for n in _MODEL_ARRAYS}
        import lzma

        with lzma.open(model) as src, np.load(src, allow_pickle=False) as data:
            arrays = {n: data[n] for n in _MODEL_ARRAYS}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    import shutil

    staging = root.with_name(f".{key}-{os.getpid()}")
    try:  # written beside, then renamed: a reader sees the whole cache or none
        staging.mkdir(parents=True, exist_ok=True)
        for name, values in arrays.items():
            np.save(staging / f"{name}.npy", values, allow_pickle=False)
        (staging / "key.json").write_text(json.dumps(file_sums(staging, files)), encoding="utf-8")
        if root.exists():
            shutil.rmtree(root)
        staging.replace(root)
    except OSError:
        pass  # an unwritable or full cache: this process has its arrays, the next one decompresses again
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return arrays


def language_scores(text: str, candidates: Sequence[str] | None = None) -> list[tuple[str, float]]:
    """py3langid's probability of each language for ``text``, best first; with ``candidates``, only those languages,
    renormalised to sum to 1 (the softmax restricted to them).

    Args:
        text: The text.
        candidates: ISO 639-1 codes to choose among; None: every language py3langid knows.
    """
    ranked = [(str(code), float(p)) for code, p in _identifier().rank(text)]
    if candidates is None:
        return ranked
    wanted = set(candidates)
    kept = [(c, p) for c, p in ranked if c in wanted]
    total = sum(p for _, p in kept)
    return [(c, p / total) for c, p in kept] if total > 0 else []


def detect_language(
    text: str,
    *,
    min_confidence: float = DOCUMENT_MIN_CONFIDENCE,
    candidates: Sequence[str] | None = None,
) -> str | None:
    """The ISO 639-1 language of ``text``, or None when it is too short (fewer than :data:`MIN_LETTERS` letters) or
    py3langid is less sure than ``min_confidence``.

    Args:
        text: The text (only its first :data:`DETECT_CHARS` characters are read).
        min_confidence: Probability the best language needs.
        candidates: Languages to choose among (the probability is renormalised over them); None: all.
    """
    head = text[:DETECT_CHARS]
    if sum(1 for c in head if c.isalpha()) < MIN_LETTERS:
        return None
    scores = language_scores(head, candidates)
    if not scores:
        return None
    code, p = scores[0]
    if p < min_confidence or not _CODE_RE.fullmatch(code):
        return None
    return code


@dataclass(frozen=True)
class LanguageDecision:
    """A language and how it was decided.

    Attributes:
        code: ISO 639-1 code, or None (unknown).
        how: ``given`` (meta.language), ``corpus`` (the ``--language`` setting), ``detected``, ``fallback`` (the
            ``--language`` setting after an unsure detection), ``none`` (routing off) or ``unknown``.
        confidence: The detector's probability when it decided, else None.
    """

    code: str | None
    how: str
    confidence: float | None = None

    def describe(self) -> str:
        """``ja (detected, p=0.99)`` and the like."""
        conf = f", p={self.confidence:.2f}" if self.confidence is not None else ""
        return f"{self.code or 'none'} ({self.how}{conf})"


def document_language(text: str, meta: Mapping[str, Any] | None, corpus_language: str | None) -> LanguageDecision:
    """The language of one document: its ``meta.language``, else the corpus language (``--language``), else the
    detector's, else unknown.

    Args:
        text: The document's text.
        meta: Its validated metadata.
        corpus_language: The ``--language`` setting.
    """
    given = (meta or {}).get("language")
    if isinstance(given, (list, tuple)):  # a keyword field holds a list once normalised; the first is the language
        given = given[0] if given else None
    if given:
        return LanguageDecision(check_code(str(given), "meta.language"), "given")
    if corpus_language:
        return LanguageDecision(check_code(corpus_language, "language"), "corpus")
    code = detect_language(text)
    return LanguageDecision(code, "detected" if code else "unknown")


def query_language(
    query_text: str, mode: str, languages: Sequence[str], corpus_language: str | None
) -> LanguageDecision:
    """The language a query is routed to (``--query-language``).

    ``none``: no routing. A code: that language. ``auto``: a language without subfields when py3langid clearly
    says so (:data:`OTHER_LANGUAGE_MIN_CONFIDENCE`; its fields are the base fields); else py3langid among
    ``languages`` (the codes with subfields), when at least :data:`QUERY_MIN_CONFIDENCE` sure; else the corpus
    language (``--language``); else none.

    Args:
        query_text: The query.
        mode: ``auto``, ``none`` or an ISO 639-1 code.
        languages: Codes of the index's subfields.
        corpus_language: The ``--language`` setting.
    """
    if mode == "none":
        return LanguageDecision(None, "none")
    if mode != "auto":
        return LanguageDecision(mode, "given")
    if _letters(query_text) >= MIN_LETTERS and languages:
        overall = language_scores(query_text[:DETECT_CHARS])
        if overall:
            top, p = overall[0]
            ours = sum(q for c, q in overall if c in languages)
            if top not in languages and p >= OTHER_LANGUAGE_MIN_CONFIDENCE and p >= OTHER_LANGUAGE_MARGIN * ours:
                # a language without subfields (German on an en + ja index): the base fields, not .en
                return LanguageDecision(top, "detected", round(p, 4))
    if len(languages) == 1:
        scores = [(languages[0], 1.0)] if _letters(query_text) >= MIN_LETTERS else []
    else:
        scores = language_scores(query_text[:DETECT_CHARS], languages) if _letters(query_text) >= MIN_LETTERS else []
    if scores and scores[0][1] >= QUERY_MIN_CONFIDENCE:
        return LanguageDecision(scores[0][0], "detected", round(scores[0][1], 4))
    if corpus_language:
        return LanguageDecision(check_code(corpus_language, "language"), "fallback")
    return LanguageDecision(None, "unknown")


def _letters(text: str) -> int:
    return sum(1 for c in text if c.isalpha())


def routed_fields(fields: Sequence[str], language: str | None, languages: Sequence[str]) -> tuple[str, ...]:
    """``--bm25-fields`` for a query of ``language``: each field of :data:`LANGUAGE_FIELDS` becomes its subfield of
    that language (``title^2`` -> ``title.en^2``), when the index has that language's subfields; other fields, and
    every field for a language without subfields, stay as given.

    Args:
        fields: ``field^boost`` items.
        language: The query's language, or None.
        languages: Codes of the index's subfields.
    """
    if language is None or language not in languages:
        return tuple(fields)
    out = []
    for spec in fields:
        name, sep, boost = spec.partition("^")
        out.append(f"{name}.{language}{sep}{boost}" if name in LANGUAGE_FIELDS else spec)
    return tuple(out)
