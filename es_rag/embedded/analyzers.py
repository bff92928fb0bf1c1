"""Python mirrors of the Elasticsearch built-in analyzers es_rag's index templates name.

The embedded backend tokenises documents and queries with these, so its BM25 uses the terms the cluster's
``text`` fields would (``Settings.analyzer`` picks one on both sides; the templates render
``{"type": <analyzer>}``). Each is Lucene's analyzer, component for component (Elasticsearch builds them from
Lucene: ``StandardAnalyzer``, ``EnglishAnalyzer``, ``CJKAnalyzer``):

- ``standard``: ``StandardTokenizer`` (:mod:`es_rag.embedded.tokenizer`, max token length 255) + ``LowerCaseFilter``;
  no stop words (Elasticsearch's default ``_none_``).
- ``english``: ``StandardTokenizer`` + ``EnglishPossessiveFilter`` + ``LowerCaseFilter`` + ``StopFilter`` (Lucene's
  33 English stop words) + ``PorterStemFilter``.
- ``cjk``: ``StandardTokenizer`` + ``CJKWidthFilter`` + ``LowerCaseFilter`` + ``CJKBigramFilter`` + ``StopFilter``
  (Lucene's CJK stop set: the English words but ``an``, plus ``s``, ``t``, ``www``).
- ``es_rag_identifier`` (the ``.ident`` subfields of the exact channel, defined in the templates themselves):
  ``PatternTokenizer`` with :data:`es_rag.query.IDENTIFIER_TOKEN_PATTERN`, ``group: 0`` + ``CJKWidthFilter`` +
  ``LowerCaseFilter`` (:func:`identifier_analyzer`).

The filters are in :mod:`es_rag.embedded.token_filters`. ``tests/unit/test_lucene_analyzers.py`` replays
Lucene's own tests against them (the counts are in docs/retrieval.md). ``kuromoji`` (Japanese morphology) has no
mirror. No analyzer returns an empty term.

:func:`analyze` is the tokeniser of an embedded backend built without an analyzer (tests, tools): lower-cased
Unicode word runs with CJK runs as bigrams. It mirrors no Elasticsearch analyzer.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import regex

from es_rag.embedded.token_filters import cjk_bigrams, cjk_width, english_possessive, lowercase, porter_stem
from es_rag.embedded.tokenizer import Token, standard_tokens
from es_rag.errors import ConfigError
from es_rag.query import IDENTIFIER_TOKEN_PATTERN
from es_rag.settings import Analyzer

AnalyzerFn = Callable[[str], list[str]]

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff66-\uff9f]+")

ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
"""Lucene ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (Elasticsearch ``_english_``)."""

CJK_STOP_WORDS = (ENGLISH_STOP_WORDS - {"an"}) | {"s", "t", "www"}
"""Lucene ``CJKAnalyzer`` default stop set (``cjk/stopwords.txt``): the English words without ``an``, plus ``s``,
``t`` and ``www`` (``tests/lucene`` checks it against ``CJKAnalyzer.getDefaultStopSet()``)."""

_IDENTIFIER_TOKEN_RE = regex.compile(IDENTIFIER_TOKEN_PATTERN)


def identifier_analyzer(text: str) -> list[str]:
    """The ``es_rag_identifier`` analyzer: Lucene's ``PatternTokenizer`` in ``group: 0`` mode (each non-empty match
    of :data:`~es_rag.query.IDENTIFIER_TOKEN_PATTERN` is a token, in order), then ``cjk_width`` and ``lowercase``.
    ``NIM-E1042の対処`` gives ``nim``, ``e1042``, ``の対処``; fullwidth ``Ｅ１０４２`` gives ``e1042``.

    Args:
        text: Field text or an identifier.
    """
    return [lowercase(cjk_width(m.group())) for m in _IDENTIFIER_TOKEN_RE.finditer(text)]


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
    return [t.text for t in standard_tokens(text)]


def standard_analyzer(text: str) -> list[str]:
    """Elasticsearch ``standard`` analyzer: standard tokenizer + lowercase.

    Args:
        text: Text to analyze.
    """
    return [lowercase(t.text) for t in standard_tokens(text)]


def english_analyzer(text: str) -> list[str]:
    """Elasticsearch ``english`` analyzer: possessive filter, lowercase, English stop words, Porter stemmer.

    Args:
        text: Text to analyze.
    """
    out = []
    for tok in standard_tokens(text):
        term = lowercase(english_possessive(tok.text))
        if term and term not in ENGLISH_STOP_WORDS:
            out.append(porter_stem(term))
    return out


def cjk_analyzer(text: str) -> list[str]:
    """Elasticsearch ``cjk`` analyzer: width folding and lowercase per token, CJK bigrams, CJK stop words.

    Args:
        text: Text to analyze.
    """
    folded = [Token(lowercase(cjk_width(t.text)), t.start, t.end, t.type) for t in standard_tokens(text)]
    return [t for t in cjk_bigrams(folded) if t and t not in CJK_STOP_WORDS]


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
