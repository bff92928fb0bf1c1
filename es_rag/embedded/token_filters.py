"""Lucene's token filters that Elasticsearch's ``standard``, ``english`` and ``cjk`` analyzers chain, as
functions over token lists (each names the Lucene class it follows; apache/lucene,
``lucene/analysis/common/src/java/org/apache/lucene/analysis/``, ``lucene/core/.../analysis/``):

- :func:`lowercase`: ``LowerCaseFilter``, ``Character.toLowerCase`` per code point;
- :func:`english_possessive`: ``en/EnglishPossessiveFilter``;
- :func:`porter_stem`: ``en/PorterStemFilter`` (``PorterStemmer``, Martin Porter's own implementation);
- :func:`cjk_width`: ``cjk/CJKWidthFilter``;
- :func:`cjk_bigrams`: ``cjk/CJKBigramFilter`` with its default flags and no unigrams.

Stop word removal (``StopFilter``) is a set lookup in :mod:`es_rag.embedded.analyzers`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

from es_rag.embedded.stem_cache import STEMS
from es_rag.embedded.tokenizer import HANGUL, HIRAGANA, IDEOGRAPHIC, KATAKANA, Token

#: ``Character.toLowerCase(int)`` is the simple (one code point) mapping; ``str.lower`` applies the full one,
#: which differs for U+0130 (to ``i̇``, two code points) and, in context, gives a final ``ς``.
_SIMPLE_LOWER = {"\u0130": "i"}


def _lower_char(c: str) -> str:
    low = c.lower()
    return low if len(low) == 1 else _SIMPLE_LOWER.get(c, c)


def lowercase(term: str) -> str:
    """``LowerCaseFilter``: each code point to its simple lower case (``ΟΔΟΣ`` -> ``οδοσ``, as Java does).

    Args:
        term: One token.
    """
    if term.isascii():
        return term.lower()
    return "".join(map(_lower_char, term))


_APOSTROPHES = ("'", "\u2019", "\uff07")


def english_possessive(term: str) -> str:
    """``EnglishPossessiveFilter``: drop a trailing ``'s`` / ``'S`` whose apostrophe is U+0027, U+2019 or
    U+FF07 (it runs before lower-casing, so both cases of the ``s``).

    Args:
        term: One token.
    """
    if len(term) >= 2 and term[-1] in "sS" and term[-2] in _APOSTROPHES:
        return term[:-2]
    return term


@lru_cache(maxsize=1)
def _porter() -> Callable[[str], str]:
    from nltk.stem.porter import PorterStemmer

    # MARTIN_EXTENSIONS is Martin Porter's own implementation, the one Lucene's PorterStemmer derives from
    # ("Release 3"): it leaves words of one or two letters alone (Lucene: ``if (k > k0 + 1)``), maps ``bli`` to
    # ``ble`` and has the extra ``logi`` -> ``log`` rule, where the published algorithm (and Snowball's
    # ``porter``) differ. On Porter's 23,531-word vocabulary it gives Lucene's stems for every word.
    stemmer = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)

    @lru_cache(maxsize=200_000)
    def stem(term: str) -> str:
        return str(stemmer.stem(term, to_lowercase=False))

    return stem


def porter_stem(term: str) -> str:
    """``PorterStemFilter``: the Porter stem of a lower-cased term (one an earlier process computed, else nltk's:
    :mod:`es_rag.embedded.stem_cache`).

    Args:
        term: One lower-cased token.
    """
    stem = STEMS.get(term)
    if stem is None:
        stem = _porter()(term)
        STEMS.add(term, stem)
    return stem


# CJKWidthFilter: U+FF65..U+FF9F (halfwidth katakana and marks) to their fullwidth forms.
_KANA_NORM = (
    "\u30fb\u30f2\u30a1\u30a3\u30a5\u30a7\u30a9\u30e3\u30e5\u30e7\u30c3\u30fc\u30a2\u30a4\u30a6\u30a8\u30aa\u30ab"
    "\u30ad\u30af\u30b1\u30b3\u30b5\u30b7\u30b9\u30bb\u30bd\u30bf\u30c1\u30c4\u30c6\u30c8\u30ca\u30cb\u30cc\u30cd"
    "\u30ce\u30cf\u30d2\u30d5\u30d8\u30db\u30de\u30df\u30e0\u30e1\u30e2\u30e4\u30e6\u30e8\u30e9\u30ea\u30eb\u30ec"
    "\u30ed\u30ef\u30f3\u3099\u309a"
)
# Katakana that take the voiced (U+FF9E) / semi-voiced (U+FF9F) mark, and the combined character.
_VOICED = {
    **{chr(c): chr(c + 1) for c in range(0x30AB, 0x30C3, 2)},  # カ..チ -> ガ..ヂ
    **{chr(c): chr(c + 1) for c in (0x30C4, 0x30C6, 0x30C8)},  # ツ テ ト -> ヅ デ ド
    **{chr(c): chr(c + 1) for c in range(0x30CF, 0x30DE, 3)},  # ハ ヒ フ ヘ ホ -> バ ビ ブ ベ ボ
    "\u30a6": "\u30f4",  # ウ -> ヴ
    **{chr(c): chr(c + 8) for c in range(0x30EF, 0x30F3)},  # ワ ヰ ヱ ヲ -> ヷ ヸ ヹ ヺ
    "\u30fd": "\u30fe",  # ヽ -> ヾ
}
_SEMI_VOICED = {chr(c): chr(c + 2) for c in range(0x30CF, 0x30DE, 3)}  # ハ ヒ フ ヘ ホ -> パ ピ プ ペ ポ


def cjk_width(term: str) -> str:
    """``CJKWidthFilter``: fullwidth ASCII variants (U+FF01..U+FF5E) to ASCII, halfwidth katakana (U+FF65..U+FF9F)
    to fullwidth, a halfwidth (semi-)voiced mark combined into the katakana before it in the same token.
    Nothing else changes (not U+3000, not U+FF5F..U+FF64, not U+FFE0..U+FFEE: this is not NFKC).

    Args:
        term: One token.
    """
    if term.isascii():
        return term
    out: list[str] = []
    for c in term:
        cp = ord(c)
        if 0xFF01 <= cp <= 0xFF5E:
            out.append(chr(cp - 0xFEE0))
        elif 0xFF65 <= cp <= 0xFF9F:
            table = _VOICED if cp == 0xFF9E else _SEMI_VOICED if cp == 0xFF9F else None
            combined = table.get(out[-1]) if table is not None and out else None
            if combined is not None:
                out[-1] = combined
            else:
                out.append(_KANA_NORM[cp - 0xFF65])
        else:
            out.append(c)
    return "".join(out)


_CJK_TYPES = frozenset({IDEOGRAPHIC, HIRAGANA, KATAKANA, HANGUL})


def cjk_bigrams(tokens: Iterable[Token]) -> list[str]:
    """``CJKBigramFilter`` (flags HAN | HIRAGANA | KATAKANA | HANGUL, no unigrams): the characters of adjacent CJK
    tokens (one token's start offset equals the previous one's end) form a run, across scripts; a run of two or
    more characters becomes its overlapping bigrams, a run of one stays a unigram; other tokens pass unchanged,
    after the run before them.

    Args:
        tokens: Tokenizer output (types and offsets as :func:`~es_rag.embedded.tokenizer.standard_tokens` gives).
    """
    out: list[str] = []
    run: list[str] = []
    last_end = -1

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        else:
            out.extend(run[i] + run[i + 1] for i in range(len(run) - 1))
        run.clear()

    for tok in tokens:
        if tok.type in _CJK_TYPES:
            if run and tok.start != last_end:
                flush()
            run.extend(tok.text)
            last_end = tok.end
        else:
            flush()
            out.append(tok.text)
    flush()
    return out
