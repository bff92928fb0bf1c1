"""The ``es_rag_identifier`` analyzer of the exact channel: the template's definition, its embedded mirror and the
strict double's reading of it, on mixed-script text.

Elasticsearch source: ``PatternTokenizerFactory`` (modules/analysis-common) reads ``pattern`` (default ``\\W+``),
``flags`` and ``group`` (default -1); Lucene's ``PatternTokenizer`` with ``group >= 0`` emits that group of every
match as a token and skips empty ones, with ``group = -1`` splits on the matches (``String.split``). The REST test
``analysis-common/30_tokenizers.yml`` ("pattern") checks the default. ``cjk_width`` is ``CJKWidthFilterFactory``.
"""

from __future__ import annotations

import pytest

from es_rag.elasticsearch.assets import render_asset
from es_rag.embedded.analyzers import identifier_analyzer
from es_rag.query import IDENTIFIER_TOKEN_PATTERN
from es_rag.settings import Settings
from tests.support.double.errors import DoubleLimit, EsError
from tests.support.double.search import analyzer_fn

CASES = [
    # seed 000's example, and the issue's indexed text: the identifier is its own token next to Japanese
    ("NIM-E1042の対処", ["nim", "e1042", "の対処"]),
    ("E1042が発生", ["e1042", "が発生"]),
    ("エラーコードE1042が発生しました", ["エラーコード", "e1042", "が発生しました"]),
    ("サーバーE1042", ["サーバー", "e1042"]),  # ー (U+30FC, script Common) stays in the katakana run
    ("ｻｰﾊﾞｰE1042", ["サーバー", "e1042"]),  # halfwidth katakana: cjk_width makes it fullwidth (voiced mark combined)
    ("Ｅ１０４２の対処", ["e1042", "の対処"]),  # fullwidth ASCII folded by cjk_width
    ("ＥＲＲ－２２の確認", ["err", "22", "の確認"]),  # fullwidth hyphen U+FF0D separates
    ("2026年4月の規程", ["2026", "年", "4", "月の規程"]),
    ("한국어E1042오류", ["한국어", "e1042", "오류"]),
    ("設定々v2", ["設定々", "v2"]),  # 々 (U+3005) is Han
    ("Run sync_engine.start() -> ERR-1042!", ["run", "sync_engine", "start", "err", "1042"]),
    (
        "\u30cf\u309a\u30b9\u30ef\u30fc\u30c8\u3099",
        ["\u30cf\u309a\u30b9\u30ef\u30fc\u30c8\u3099"],
    ),  # decomposed パスワード: one run
    ("Straße İSTANBUL", ["straße", "istanbul"]),  # Java's per-code-point lowercase: İ -> i
    ("", []),
    ("--- ... ！？", []),
]


@pytest.mark.parametrize(("text", "tokens"), CASES)
def test_embedded_mirror_tokens(text: str, tokens: list[str]) -> None:
    assert identifier_analyzer(text) == tokens


def _template_analysis() -> dict:  # type: ignore[type-arg]
    body = render_asset("index_templates", "component-chunks", Settings())
    return body["template"]["settings"]["index"]["analysis"]  # type: ignore[no-any-return]


def test_the_template_defines_the_analyzer_the_mirror_runs() -> None:
    analysis = _template_analysis()
    assert analysis["analyzer"]["es_rag_identifier"] == {
        "type": "custom",
        "tokenizer": "es_rag_identifier",
        "filter": ["cjk_width", "lowercase"],
    }
    tokenizer = analysis["tokenizer"]["es_rag_identifier"]
    assert tokenizer == {"type": "pattern", "pattern": IDENTIFIER_TOKEN_PATTERN, "group": 0}
    # Written out, so that a change of the constant shows here too.
    cjk = r"\p{IsHan}\p{IsHiragana}\p{IsKatakana}\p{IsHangul}\u3099-\u309C\u30FC\uFF70\uFF9E\uFF9F"
    assert tokenizer["pattern"] == rf"[{cjk}]+|(?:(?![{cjk}])[\p{{L}}\p{{N}}_])+"
    parents = render_asset("index_templates", "component-parents", Settings())["template"]["settings"]["index"]
    assert parents["analysis"] == analysis


@pytest.mark.parametrize(("text", "tokens"), CASES)
def test_the_strict_double_reads_the_template_definition_alike(text: str, tokens: list[str]) -> None:
    """The double's own reading of the rendered definition (pattern tokenizer group 0, the ASCII half of
    ``cjk_width``, Python lower-casing) agrees with the mirror but on halfwidth katakana (not folded) and ``İ``
    (Python's full lower-case mapping)."""
    analysis = _template_analysis()
    fn = analyzer_fn("es_rag_identifier", {**analysis["analyzer"], "__tokenizers__": analysis["tokenizer"]})
    approximations = {"ｻｰﾊﾞｰE1042": ["ｻｰﾊﾞｰ", "e1042"], "Straße İSTANBUL": ["straße", "i̇stanbul"]}
    assert fn(text) == approximations.get(text, tokens)


def test_the_strict_double_splits_with_group_minus_1_and_refuses_filters_it_cannot_apply() -> None:
    split = {"t": {"type": "pattern", "pattern": "[^\\p{L}\\p{N}_]+"}}
    fn = analyzer_fn("a", {"a": {"type": "custom", "tokenizer": "t", "filter": ["lowercase"]}, "__tokenizers__": split})
    assert fn("NIM-E1042の対処") == ["nim", "e1042の対処"]  # the old definition: one token across the scripts
    fn = analyzer_fn(
        "a", {"a": {"type": "custom", "tokenizer": "t", "filter": ["porter_stem"]}, "__tokenizers__": split}
    )
    with pytest.raises(DoubleLimit, match=r"token filter \[porter_stem\]"):
        fn("running")


def test_the_strict_double_refuses_a_group_the_pattern_does_not_have() -> None:
    """Lucene's ``PatternTokenizer`` constructor: ``group > matcher.groupCount()`` is an IllegalArgumentException
    ("invalid group specified: pattern only has: N capturing groups"). ``group: 0`` (the whole match) always exists."""
    tokenizers = {"t": {"type": "pattern", "pattern": "[a-z]+", "group": 1}}
    with pytest.raises(EsError, match=r"invalid group specified: pattern only has: 0 capturing groups"):
        analyzer_fn("a", {"a": {"type": "custom", "tokenizer": "t"}, "__tokenizers__": tokenizers})
    tokenizers["t"]["group"] = 0
    assert analyzer_fn("a", {"a": {"type": "custom", "tokenizer": "t"}, "__tokenizers__": tokenizers})("ab-cd") == [
        "ab",
        "cd",
    ]
