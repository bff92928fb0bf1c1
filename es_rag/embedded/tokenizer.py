"""Lucene's ``StandardTokenizer`` (Elasticsearch's ``standard`` tokenizer), rule for rule.

Lucene generates its tokenizer with JFlex from ``StandardTokenizerImpl.jflex`` (apache/lucene,
``lucene/core/src/java/org/apache/lucene/analysis/standard/StandardTokenizerImpl.jflex``): UAX #29 word break
rules written as token rules over Unicode properties. This module writes the same rules over the same
properties with the ``regex`` package (which knows ``Word_Break``, ``Script``, ``Line_Break`` and the emoji
properties) and scans as JFlex does: at each position the longest match of any rule wins, a tie goes to the
rule written first, and a character no rule starts is skipped. The token types are Lucene's
(``<ALPHANUM>``, ``<NUM>``, ``<SOUTHEAST_ASIAN>``, ``<IDEOGRAPHIC>``, ``<HIRAGANA>``, ``<KATAKANA>``,
``<HANGUL>``, ``<EMOJI>``): the CJK bigram filter reads them.

The rules, in JFlex's order (``X*`` after a class is WB4: trailing Extend / Format / ZWJ characters):

1. emoji sequences (TR #51 ``emoji_sequence``: presentation and modifier sequences joined by ZWJ, tag
   sequences, keycaps, flag pairs) -> ``<EMOJI>``;
2. ``ExtendNumLet* Numeric ((ExtendNumLet* | MidNum) Numeric)* ExtendNumLet*`` -> ``<NUM>``;
3. Hangul letters -> ``<HANGUL>``; 4. Katakana -> ``<KATAKANA>`` (subsets of 5, for the type only);
5. letters, digits and katakana joined by WB5-WB13b (``can't``, ``u.s``, ``3.5``, ``foo_bar``) -> ``<ALPHANUM>``;
6. a run of ``Line_Break=Complex_Context`` characters (Thai, Lao, Myanmar, Khmer) -> ``<SOUTHEAST_ASIAN>``;
7. one Han character -> ``<IDEOGRAPHIC>``; 8. one Hiragana character -> ``<HIRAGANA>``;
9. anything else is skipped.

Differences that remain: property data is the ``regex`` package's Unicode version (Lucene's grammar is built
for Unicode 12.1), so characters assigned since then are classified, where Lucene skips them; lengths are
counted in code points, Lucene's in UTF-16 units (``max_token_length`` only). Within one rule the regex engine
takes the greedy match where JFlex takes the longest: where the two can differ (an emoji sequence, a word
followed by a character that could continue it) the rule is matched again leftmost-longest (POSIX), so the
result is JFlex's; ``tests/unit/test_lucene_analyzers.py`` checks the fast path against the slow one by hypothesis
and replays Lucene's own test data.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: Elasticsearch's ``standard`` tokenizer default ``max_token_length``.
MAX_TOKEN_LENGTH = 255

ALPHANUM = "<ALPHANUM>"
NUM = "<NUM>"
SOUTHEAST_ASIAN = "<SOUTHEAST_ASIAN>"
IDEOGRAPHIC = "<IDEOGRAPHIC>"
HIRAGANA = "<HIRAGANA>"
KATAKANA = "<KATAKANA>"
HANGUL = "<HANGUL>"
EMOJI = "<EMOJI>"


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its text, ``[start, end)`` code point offsets in the input, and its Lucene type."""

    text: str
    start: int
    end: int
    type: str


#: Extended_Pictographic as Lucene's grammar has it (apache/lucene-solr 3258a1cf,
#: ``lucene/core/src/data/jflex/UnicodeEmojiProperties.jflex``, from emoji-data 11.0; Lucene 10.5 agrees on every code
#: point, ``reports/lucene-oracle.md``). The ``regex`` package's ``\p{Extended_Pictographic}`` lacks every pictograph
#: that is not also Emoji (U+266A, U+2605, U+2701, U+1F000, ...), which Lucene makes ``<EMOJI>`` tokens of.
_EXTENDED_PICTOGRAPHIC = (
    "["
    "\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u2199\u21a9-\u21aa\u231a-\u231b\u2328\u2388\u23cf"
    "\u23e9-\u23f3\u23f8-\u23fa\u24c2\u25aa-\u25ab\u25b6\u25c0\u25fb-\u25fe\u2600-\u2605\u2607-\u2612"
    "\u2614-\u2685\u2690-\u2705\u2708-\u2712\u2714\u2716\u271d\u2721\u2728\u2733-\u2734\u2744\u2747\u274c"
    "\u274e\u2753-\u2755\u2757\u2763-\u2767\u2795-\u2797\u27a1\u27b0\u27bf\u2934-\u2935\u2b05-\u2b07"
    "\u2b1b-\u2b1c\u2b50\u2b55\u3030\u303d\u3297\u3299\U0001f000-\U0001f0ff\U0001f10d-\U0001f10f"
    "\U0001f12f\U0001f16c-\U0001f171\U0001f17e-\U0001f17f\U0001f18e\U0001f191-\U0001f19a"
    "\U0001f1ad-\U0001f1e5\U0001f201-\U0001f20f\U0001f21a\U0001f22f\U0001f232-\U0001f23a"
    "\U0001f23c-\U0001f23f\U0001f249-\U0001f3fa\U0001f400-\U0001f53d\U0001f546-\U0001f64f"
    "\U0001f680-\U0001f6ff\U0001f774-\U0001f77f\U0001f7d5-\U0001f7ff\U0001f80c-\U0001f80f"
    "\U0001f848-\U0001f84f\U0001f85a-\U0001f85f\U0001f888-\U0001f88f\U0001f8ae-\U0001f8ff"
    "\U0001f90c-\U0001f93a\U0001f93c-\U0001f945\U0001f947-\U0001fffd"
    "]"
)


def _rules(possessive: bool) -> list[tuple[str, str]]:
    """The JFlex rules as ``regex`` (V1) patterns, in rule order. ``possessive`` makes the quantifiers that can
    never usefully give characters back possessive (``*+``): the character after them can never be one of
    theirs, so the match is the same and a long run of joiners cannot backtrack quadratically."""
    p = "+" if possessive else ""
    ext = rf"[\p{{WB=Format}}\p{{WB=Extend}}\p{{WB=ZWJ}}]*{p}"
    # Emoji macros. Trailing ext may give back a ZWJ to the (ZWJ sequence)* that follows: never possessive.
    ext_sans_sel = r"[[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]--[\uFE0E\uFE0F]]*"
    keycap_base = r"[0-9#*]"
    rkam = r"[\p{WB=Regional_Indicator}0-9#*\u00A9\u00AE\u2122\u3030\u303D\p{Emoji_Modifier}]"
    emoji_char = rf"[{_EXTENDED_PICTOGRAPHIC}[\p{{Emoji}}--{rkam}]]"
    zwj = r"\p{WB=ZWJ}"
    core = (
        rf"(?:{zwj}*{p}{emoji_char}{ext_sans_sel}\uFE0F?"
        rf"|(?:{zwj}*{p}\p{{Emoji_Modifier_Base}}{ext_sans_sel})?\p{{Emoji_Modifier}}{ext_sans_sel})"
    )
    emoji = (
        rf"{core}(?:(?:{zwj}{core})*|[\U000E0020-\U000E007E]+\U000E007F)"
        rf"|{keycap_base}{ext_sans_sel}\uFE0F?\u20E3{ext_sans_sel}"
        rf"|(?:\p{{WB=Regional_Indicator}}{ext}){{2}}"
    )
    hangul = rf"[\p{{Script=Hangul}}&&[\p{{WB=ALetter}}\p{{WB=Hebrew_Letter}}]]{ext}"
    ahletter = rf"[\p{{WB=ALetter}}\p{{WB=Hebrew_Letter}}]{ext}"
    numeric = rf"\p{{WB=Numeric}}{ext}"
    katakana = rf"\p{{WB=Katakana}}{ext}"
    midletter = rf"[\p{{WB=MidLetter}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{ext}"
    midnum = rf"[\p{{WB=MidNum}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{ext}"
    enl = rf"(?:\p{{WB=ExtendNumLet}}{ext})"
    hebrew = rf"\p{{WB=Hebrew_Letter}}{ext}"
    squote = rf"\p{{WB=Single_Quote}}{ext}"
    dquote = rf"\p{{WB=Double_Quote}}{ext}"
    number = rf"{enl}*{p}{numeric}(?:(?:{enl}*{p}|{midnum}){numeric})*{enl}*{p}"
    body = (
        rf"(?:{katakana}(?:{enl}*{p}{katakana})*"
        rf"|(?:{hebrew}(?:{squote}|{dquote}{hebrew})"
        rf"|{numeric}(?:(?:{enl}*{p}|{midnum}){numeric})*"
        rf"|{ahletter}(?:(?:{enl}*{p}|{midletter}){ahletter})*)+)"
    )
    word = rf"{enl}*{p}{body}(?:{enl}+{p}{body})*{enl}*{p}"
    return [
        (EMOJI, emoji),
        (NUM, number),
        (HANGUL, rf"(?:{hangul})+{p}"),
        (KATAKANA, rf"(?:{katakana})+{p}"),
        (ALPHANUM, word),
        (SOUTHEAST_ASIAN, rf"(?:\p{{LB=Complex_Context}}{ext})+{p}"),
        (IDEOGRAPHIC, rf"\p{{Script=Han}}{ext}"),
        (HIRAGANA, rf"\p{{Script=Hiragana}}{ext}"),
    ]


#: Characters a token can start with (the first character of some rule); others are skipped unseen.
_START = (
    r"[\p{WB=ZWJ}" + _EXTENDED_PICTOGRAPHIC + r"\p{Emoji}\p{Emoji_Modifier_Base}\p{Emoji_Modifier}"
    r"\p{WB=Regional_Indicator}#*\p{WB=ExtendNumLet}\p{WB=Numeric}\p{WB=ALetter}\p{WB=Hebrew_Letter}"
    r"\p{WB=Katakana}\p{LB=Complex_Context}\p{Script=Han}\p{Script=Hiragana}]"
)


#: The common case, decided without the rules: an ASCII letter/digit run followed by an ASCII character that
#: no rule lets continue a token (not a letter or digit, not ``'`` ``.`` ``:`` ``,`` ``;`` (Mid*) or ``_``
#: (ExtendNumLet)), or by the end. Every rule gives it the same extent; its type is ``<NUM>`` if all digits.
_ASCII_WORD = __import__("re").compile(
    r"[A-Za-z0-9]+(?=[\x00-\x26\x28-\x2b\x2d\x2f\x3c-\x40\x5b-\x5e\x60\x7b-\x7f]|\Z)"
)


@lru_cache(maxsize=2)
def _scanner(posix: bool = False) -> tuple[Any, Any, tuple[str, ...]]:
    """``(start finder, all-rules matcher, types)``: one match call tries every rule at a position, each in a
    lookahead group, so the caller can pick the longest as JFlex does. ``posix`` compiles each rule with
    leftmost-longest (POSIX) semantics instead of greedy backtracking: the slow oracle the tests compare with."""
    import regex

    rules = _rules(possessive=not posix)
    types = tuple(t for t, _ in rules)
    if posix:
        compiled = [regex.compile(pattern, regex.V1 | regex.POSIX) for _, pattern in rules]
        return regex.compile(_START, regex.V1), compiled, types
    groups = "".join(f"(?=({pattern}))?" for _, pattern in rules)
    return regex.compile(_START, regex.V1), regex.compile(groups, regex.V1), types


#: A character after a greedy word that a longer match could still take (joiners, letters, digits, marks).
_MAY_EXTEND = __import__("regex").compile(
    r"[\p{WB=Single_Quote}\p{WB=Double_Quote}\p{WB=MidLetter}\p{WB=MidNumLet}\p{WB=MidNum}\p{WB=ExtendNumLet}"
    r"\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}\p{WB=ALetter}\p{WB=Hebrew_Letter}\p{WB=Numeric}\p{WB=Katakana}]",
    __import__("regex").V1,
)


@lru_cache(maxsize=1)
def _word_longest() -> list[tuple[str, Any]]:
    """The number and word rules, leftmost-longest (the slow matcher the fast path falls back to)."""
    import regex

    return [(t, regex.compile(p, regex.V1 | regex.POSIX)) for t, p in _rules(possessive=False) if t in (NUM, ALPHANUM)]


@lru_cache(maxsize=1)
def _emoji_longest() -> Any:
    """The emoji rule, leftmost-longest. Its greedy form stops short: in a ZWJ sequence the trailing
    Extend/Format/ZWJ run of one emoji takes the ZWJ the next ``(ZWJ emoji)`` needs. Emoji are rare, so this slow
    matcher runs only where the greedy one found an emoji."""
    import regex

    return regex.compile(_rules(possessive=False)[0][1], regex.V1 | regex.POSIX)


def standard_tokens(text: str, *, max_token_length: int = MAX_TOKEN_LENGTH, posix: bool = False) -> list[Token]:
    """The tokens Lucene's ``StandardTokenizer`` emits for ``text``, case kept.

    A token longer than ``max_token_length`` is cut there and scanning resumes after the cut, as Lucene's
    scanner does when its buffer (sized to the maximum) is full.

    Args:
        text: Text to split.
        max_token_length: Lucene's ``maxTokenLength`` (Elasticsearch ``max_token_length``, default 255).
        posix: Match each rule leftmost-longest (slow; the reference the fast path is tested against).
    """
    start_re, rules, types = _scanner(posix)
    out: list[Token] = []
    pos, n = 0, len(text)
    while pos < n:
        m = start_re.search(text, pos)
        if m is None:
            break
        pos = m.start()
        end = min(n, pos + max_token_length)
        best, kind = 0, ""
        fast = None if posix else _ASCII_WORD.match(text, pos, end)
        if fast is not None and (fast.end() < end or end == n):
            word = fast.group()
            out.append(Token(word, pos, pos + len(word), NUM if word.isdigit() else ALPHANUM))
            pos += len(word)
            continue
        if posix:
            for t, rule in zip(types, rules, strict=True):
                r = rule.match(text, pos, end)
                if r is not None and r.end() - pos > best:
                    best, kind = r.end() - pos, t
        else:
            r = rules.match(text, pos, end)
            for i, t in enumerate(types, 1):
                span = r.span(i)
                if span[0] >= 0 and span[1] - span[0] > best:
                    best, kind = span[1] - span[0], t
            if r.span(1)[0] >= 0:  # an emoji matched: take the rule's longest match, as JFlex does
                longest = _emoji_longest().match(text, pos, end).end() - pos
                if longest >= best:
                    best, kind = longest, EMOJI
            elif kind in (ALPHANUM, NUM) and pos + best < end and _MAY_EXTEND.match(text, pos + best):
                # Greedy matching can stop early where a longer path exists (a Hebrew letter read as an ordinary
                # letter cannot then take WB7a's quote: "aא'"); when the next character could continue a word,
                # take the word and number rules' longest match instead.
                for rule_kind, rule in _word_longest():
                    m = rule.match(text, pos, end)
                    if m is not None and m.end() - pos > best:
                        best, kind = m.end() - pos, rule_kind
        if best == 0:  # a start character no rule completes (a lone ZWJ, "_"): JFlex's [^] skips it
            pos += 1
            continue
        out.append(Token(text[pos : pos + best], pos, pos + best, kind))
        pos += best
    return out
