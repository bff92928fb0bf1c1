"""Replays Lucene's own analyzer tests against the embedded mirrors (:mod:`es_rag.embedded.analyzers`).

The cases live in ``tests/fixtures/lucene/{standard,english,cjk}.json``: inputs and expected tokens transcribed
from apache/lucene's test sources (each file records the paths and commits), plus Martin Porter's vocabulary for
``PorterStemFilter``. Each case names the chain Lucene ran; :func:`run_case` runs the mirror's equivalent, or
skips with the reason when the chain uses an option Elasticsearch's built-in analyzers do not (a stem exclusion
set, bigram flags, unigram output, a mapping char filter, a test-only tokenizer).

``scripts/lucene-replay.py`` writes the counts and every non-passing case to ``reports/lucene-analyzer-replay.md``;
``tests/unit/test_lucene_analyzers.py`` asserts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.embedded.analyzers import cjk_analyzer, english_analyzer, standard_analyzer
from es_rag.embedded.token_filters import cjk_bigrams, cjk_width, porter_stem
from es_rag.embedded.tokenizer import standard_tokens

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lucene"
FAMILIES = ("standard", "english", "cjk")

KNOWN_FAILURES: dict[tuple[str, str], str] = {}
"""(family, case id) -> why the mirror differs from Lucene there. Empty: every runnable case passes (the last one,
``WordBreakTestUnicode_12_1_0#1705``, a non-Emoji pictograph, passes since the tokenizer takes Lucene's own
Extended_Pictographic list, ``es_rag/embedded/tokenizer.py``)."""


@dataclass(frozen=True)
class Outcome:
    """One replayed case: ``status`` is ``pass``, ``fail`` or ``skip``; ``got`` the mirror's tokens."""

    family: str
    id: str
    status: str
    expected: list[str] | None = None
    got: list[str] | None = None
    reason: str = ""


def load(family: str) -> dict[str, Any]:
    """The fixture of one analyzer family."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{family}.json").read_text(encoding="utf-8"))
    return data


def _whitespace(text: str) -> list[str]:
    """Lucene's ``MockTokenizer(WHITESPACE)``; an empty input gives no token."""
    return text.split()


def _tokens(case: dict[str, Any]) -> list[str] | str:
    """The mirror's tokens for ``case``, or the reason it is skipped."""
    chain, text = case["chain"], case["input"]
    if chain == "standard_tokenizer":
        return [t.text for t in standard_tokens(text)]
    if chain == "standard_analyzer":
        return standard_analyzer(text)
    if chain == "english_analyzer":
        return english_analyzer(text)
    if chain == "porter_stem_filter":  # a keyword / whitespace tokenizer, then PorterStemFilter
        return [porter_stem(t) for t in (text.split(" ") if text else [text])]
    if chain == "cjk_analyzer":
        return cjk_analyzer(text)
    if chain == "bigram_default":  # StandardTokenizer + CJKBigramFilter, nothing else
        return cjk_bigrams(standard_tokens(text))
    if chain == "width_filter":  # whitespace (or keyword, for the empty input) tokenizer + CJKWidthFilter
        return [cjk_width(t) for t in (_whitespace(text) if text else [text])]
    if chain == "width_char_filter":  # CJKWidthCharFilter over the whole text, then the whitespace tokenizer
        return _whitespace(cjk_width(text))
    note = case.get("note") or case.get("comment") or ""
    return f"a chain Elasticsearch's built-in analyzer does not run ({chain}): {note}".strip()


def run_case(family: str, case: dict[str, Any]) -> Outcome:
    """Replay one case."""
    got = _tokens(case)
    if isinstance(got, str):
        return Outcome(family, case["id"], "skip", case.get("expected"), None, got)
    status = "pass" if got == case["expected"] else "fail"
    return Outcome(family, case["id"], status, case["expected"], got)


def replay(family: str) -> list[Outcome]:
    """Every case of one family (for ``english`` also each word of Porter's vocabulary, as ``voc:<word>``)."""
    data = load(family)
    out = [run_case(family, c) for c in data["cases"]]
    for word, stem in data.get("porter_vocabulary", []):
        got = porter_stem(word)
        out.append(Outcome(family, f"voc:{word}", "pass" if got == stem else "fail", [stem], [got]))
    return out
