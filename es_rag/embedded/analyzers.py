"""Python mirrors of the Elasticsearch built-in analyzers es_rag's index templates name.

The embedded backend tokenises documents and queries with these, so its BM25 uses the same terms the
cluster's ``text`` fields would (``Settings.analyzer`` picks one on both sides; the templates render
``{"type": <analyzer>}``). The mirrors follow the analyzer definitions in the Elasticsearch reference
("Language analyzers", "CJK analyzer", "Standard analyzer"):

- ``standard``: standard tokenizer + ``lowercase``; no stop words (the Elasticsearch default).
- ``english``: standard tokenizer + ``english_possessive_stemmer`` (drops a trailing ``'s``) +
  ``lowercase`` + ``english_stop`` (Lucene's 33 ``_english_`` stop words) + ``english_stemmer``
  (``porter_stem``: the original Porter algorithm, here the Snowball ``porter`` stemmer of PyStemmer).
- ``cjk``: standard tokenizer + ``cjk_width`` (NFKC width folding) + ``lowercase`` + ``cjk_bigram`` +
  ``stop`` (Lucene's CJK stop words). Runs of CJK characters become overlapping bigrams (a lone
  character stays a unigram).

The standard tokenizer is UAX #29 word segmentation; the mirror keeps its common cases: letter/digit
runs, with ``'``/``.`` joining letters (``can't``, ``u.s``), ``.``/``,`` joining digits (``3.5``, ``1,000``)
and ``_`` joining anything (``foo_bar``); every ideograph and hiragana character is its own token,
katakana and hangul runs stay whole. ``kuromoji`` (Japanese morphology) has no mirror.

:func:`analyze` is the default tokeniser of the embedded backend when no analyzer is configured:
lower-cased Unicode word runs with CJK runs as bigrams.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache

from es_rag.errors import ConfigError
from es_rag.settings import Analyzer

AnalyzerFn = Callable[[str], list[str]]

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff66-\uff9f]+")
# Characters the standard tokenizer emits one per token (ideographs, hiragana).
_SINGLE_RE = re.compile(r"[\u3040-\u309f\u3400-\u4dbf\u4e00-\u9fff]")
# A UAX #29-style word: alnum runs joined by '_' anywhere, by ' or . between letters, by . or , between digits.
_STD_TOKEN_RE = re.compile(
    r"[^\W_]+(?:(?:_+|(?<=[^\W\d_])['\u2019.](?=[^\W\d_])|(?<=\d)[.,](?=\d))[^\W_]+)*",
    re.UNICODE,
)

ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
"""Lucene ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (Elasticsearch ``_english_``)."""

CJK_STOP_WORDS = ENGLISH_STOP_WORDS | {"s", "t", "www"}
"""Lucene ``CJKAnalyzer`` default stop set."""


def analyze(text: str) -> list[str]:
    """Tokens for BM25: lower-cased word runs, CJK runs as bigrams (single char if alone).

    Args:
        text: Text to analyze.
    """
    tokens: list[str] = []
    for word in _WORD_RE.findall(text.lower()):
        _split_cjk(word, tokens)
    return tokens


def _split_cjk(word: str, out: list[str]) -> None:
    pos = 0
    for m in _CJK_RE.finditer(word):
        if m.start() > pos:
            out.append(word[pos : m.start()])
        run = m.group()
        out.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
        pos = m.end()
    if pos < len(word):
        out.append(word[pos:])


def standard_tokenize(text: str) -> list[str]:
    """The standard tokenizer's tokens (case kept).

    Args:
        text: Text to split.
    """
    tokens: list[str] = []
    for word in _STD_TOKEN_RE.findall(text):
        pos = 0
        for m in _SINGLE_RE.finditer(word):
            if m.start() > pos:
                tokens.append(word[pos : m.start()])
            tokens.append(m.group())
            pos = m.end()
        if pos < len(word):
            tokens.append(word[pos:])
    return [t for t in tokens if t]


def standard_analyzer(text: str) -> list[str]:
    """Elasticsearch ``standard`` analyzer: standard tokenizer + lowercase.

    Args:
        text: Text to analyze.
    """
    return [t.lower() for t in standard_tokenize(text)]


@lru_cache(maxsize=1)
def _porter() -> Callable[[list[str]], list[str]]:
    try:
        import Stemmer
    except ImportError as exc:  # pragma: no cover - core dependency
        raise ConfigError("the english analyzer needs PyStemmer: pip install PyStemmer") from exc
    stemmer = Stemmer.Stemmer("porter")
    words: Callable[[list[str]], list[str]] = stemmer.stemWords
    return words


def english_analyzer(text: str) -> list[str]:
    """Elasticsearch ``english`` analyzer: possessive stemmer, lowercase, English stop words, Porter.

    Args:
        text: Text to analyze.
    """
    kept = []
    for tok in standard_tokenize(text):
        if len(tok) > 2 and tok[-2:].lower() in ("'s", "\u2019s"):
            tok = tok[:-2]
        tok = tok.lower()
        if tok and tok not in ENGLISH_STOP_WORDS:
            kept.append(tok)
    return _porter()(kept)


def cjk_analyzer(text: str) -> list[str]:
    """Elasticsearch ``cjk`` analyzer: width folding, lowercase, CJK bigrams, CJK stop words.

    Args:
        text: Text to analyze.
    """
    folded = unicodedata.normalize("NFKC", text).lower()
    tokens: list[str] = []
    for word in _STD_TOKEN_RE.findall(folded):
        _split_cjk(word, tokens)
    return [t for t in tokens if t not in CJK_STOP_WORDS]


_ANALYZERS: dict[Analyzer, AnalyzerFn] = {
    Analyzer.STANDARD: standard_analyzer,
    Analyzer.ENGLISH: english_analyzer,
    Analyzer.CJK: cjk_analyzer,
}


def get_analyzer(name: Analyzer | str | None) -> AnalyzerFn:
    """The mirror of analyzer ``name``; ``None`` gives :func:`analyze`.

    Args:
        name: ``standard``, ``english``, ``cjk`` or None.

    Raises:
        ConfigError: For ``kuromoji`` (no Python mirror) or an unknown name.
    """
    if name is None:
        return analyze
    try:
        key = name if isinstance(name, Analyzer) else Analyzer(str(name).lower())
    except ValueError:
        raise ConfigError(
            f"analyzer: invalid value {name!r}; valid values: {', '.join(a.value for a in Analyzer)}"
        ) from None
    if key not in _ANALYZERS:
        raise ConfigError(
            f"analyzer {key.value!r} has no embedded mirror (Japanese morphology needs the Elasticsearch "
            "analysis-kuromoji plugin); use cjk with the embedded backend"
        )
    return _ANALYZERS[key]
