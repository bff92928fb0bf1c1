"""The embedded analyzers equal Lucene's token for token (issue 17), proven on Lucene's own test data.

``tests/fixtures/lucene/*.json`` hold the cases transcribed from apache/lucene's tests (file paths and commits
inside each fixture); :mod:`tests.support.lucene_cases` replays them. Every case a mirror can run must pass,
except the known failures below, each with its reason; ``scripts/lucene-replay.py`` writes the same outcome to
``reports/lucene-analyzer-replay.md``, and docs/retrieval.md quotes the counts.

The tokenizer's fast path (greedy matching, possessive quantifiers, an ASCII shortcut) is checked against its
slow form, which matches every JFlex rule leftmost-longest as JFlex does, on generated text.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from es_rag.embedded.analyzers import cjk_analyzer, english_analyzer, standard_analyzer
from es_rag.embedded.token_filters import english_possessive, lowercase
from es_rag.embedded.tokenizer import ALPHANUM, EMOJI, HIRAGANA, IDEOGRAPHIC, NUM, standard_tokens
from tests.support.lucene_cases import FAMILIES, KNOWN_FAILURES, load, replay, run_case

#: The counts reports/lucene-analyzer-replay.md shows (pass, fail, skip) per analyzer.
EXPECTED_COUNTS = {"standard": (5927, 0, 1), "english": (23539, 0, 3), "cjk": (37, 0, 7)}


def _cases(family: str) -> list[pytest.param]:
    return [pytest.param(family, c, id=c["id"]) for c in load(family)["cases"]]


@pytest.mark.parametrize(("family", "case"), [p for f in FAMILIES for p in _cases(f)])
def test_lucene_case(family: str, case: dict) -> None:  # type: ignore[type-arg]
    outcome = run_case(family, case)
    if outcome.status == "skip":
        assert outcome.reason
        pytest.skip(outcome.reason)
    known = KNOWN_FAILURES.get((family, case["id"]))
    if known:
        assert outcome.status == "fail", f"{case['id']} passes now: drop it from KNOWN_FAILURES ({known})"
        return
    assert outcome.got == case["expected"], case.get("comment") or case.get("note")


@pytest.mark.parametrize("family", sorted(EXPECTED_COUNTS))
def test_replay_counts_match_the_report(family: str) -> None:
    n = Counter(o.status for o in replay(family))
    assert (n["pass"], n["fail"], n["skip"]) == EXPECTED_COUNTS[family]


def test_porter_vocabulary_is_lucenes_for_every_word() -> None:
    """Martin Porter's 23,531-word vocabulary, the data Lucene's TestPorterStemFilter runs."""
    failed = [o for o in replay("english") if o.id.startswith("voc:") and o.status != "pass"]
    assert len(load("english")["porter_vocabulary"]) == 23531
    assert failed == []


# -- the crash of issue 17 and the rules behind it --------------------------------------------------------------
def test_short_words_are_not_stemmed() -> None:
    """Lucene's PorterStemmer.stem only stems when ``k > k0 + 1``: one- and two-letter words stay as they are
    (Snowball's porter made ``s`` -> ``""``, ``us`` -> ``u``, ``as`` -> ``a``)."""
    assert english_analyzer("S-IVB J-2") == ["s", "ivb", "j", "2"]
    assert english_analyzer("S-IC Type S engines") == ["s", "ic", "type", "s", "engin"]
    assert english_analyzer("us") == ["us"] and english_analyzer("s") == ["s"]


def test_possessive_runs_before_lowercase_on_three_apostrophes() -> None:
    assert [english_possessive(t) for t in ("JIM'S", "jim\u2019s", "jim\uff07s", "jims", "'s")] == [
        "JIM",
        "jim",
        "jim",
        "jims",
        "",
    ]
    assert english_analyzer("O'Reilly's book's") == ["o'reilli", "book"]


def test_lowercase_is_javas_per_code_point() -> None:
    """``Character.toLowerCase(int)``: no final sigma, U+0130 to ``i`` (Python's ``str.lower`` gives both
    otherwise)."""
    assert lowercase("ΟΔΟΣ") == "οδοσ" and "ΟΔΟΣ".lower() == "οδος"
    assert lowercase("İSTANBUL") == "istanbul"
    assert standard_analyzer("ΟΔΟΣ") == ["οδοσ"]


def test_token_types_and_max_length() -> None:
    tokens = standard_tokens("R2D2 3.5 我 ひ 👍🏽")
    assert [(t.text, t.type) for t in tokens] == [
        ("R2D2", ALPHANUM),
        ("3.5", NUM),
        ("我", IDEOGRAPHIC),
        ("ひ", HIRAGANA),
        ("👍🏽", EMOJI),
    ]
    long = "a" * 600
    assert [len(t.text) for t in standard_tokens(long)] == [255, 255, 90]


def test_cjk_width_is_not_nfkc() -> None:
    """CJKWidthFilter folds only fullwidth ASCII and halfwidth katakana; NFKC (the old mirror) also turned ``ﬁ``
    into ``fi`` and ``x²`` into ``x2``, one token where the standard tokenizer sees ``x`` and no token for ``²``."""
    assert cjk_analyzer("ＡＢＣ ｶﾀｶﾅ ﬁle x²") == ["abc", "カタ", "タカ", "カナ", "ﬁle", "x"]


# -- the fast tokenizer equals the rules matched leftmost-longest ---------------------------------------------
_PIECES = st.sampled_from(
    [
        "a",
        "Z",
        "é",
        "1",
        "9",
        "'",
        ".",
        ":",
        ",",
        ";",
        "_",
        "-",
        " ",
        "\u0301",
        "\u200d",
        "\u00ad",
        "\ufe0f",
        "\u20e3",
        "#",
        "*",
        "👍",
        "🏽",
        "👨",
        "🇺",
        "🇸",
        "\U000e0067",
        "\U000e007f",
        "א",
        '"',
        "カ",
        "ｶ",
        "ﾞ",
        "ひ",
        "我",
        "한",
        "ก",
        "\u0e31",
        "©",
        "™",
        "\u3030",
        "٣",
        "１",
        "Ａ",
        "\u2019",
        "\u0600",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=24).map("".join))
def test_fast_tokenizer_equals_the_leftmost_longest_rules(text: str) -> None:
    assert standard_tokens(text) == standard_tokens(text, posix=True)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_fast_tokenizer_equals_the_rules_on_any_text(text: str) -> None:
    assert standard_tokens(text) == standard_tokens(text, posix=True)


def test_long_runs_of_joiners_stay_linear() -> None:
    """LUCENE-5897: ``(ExtendNumLet (Format|Extend)*)+`` runs made the scanner quadratic; the possessive rules
    do not backtrack into them (this finishes in well under a second; quadratic would take minutes)."""
    text = ("_\u00ad\u0301" * 30_000) + " end"
    assert [t.text for t in standard_tokens(text)][-1] == "end"
