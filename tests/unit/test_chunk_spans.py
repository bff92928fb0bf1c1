"""The span helpers of ``es_rag.chunking.spans`` against hand-computed offsets.

Every expected value here is written out by hand from the text (or from the documented id key), never
produced by the function under test. The tokenizers are tiny stand-ins whose token offsets can be read
off the text: words, words plus whitespace tokens, words preceded by zero-width tokens.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from es_rag.chunking.spans import (
    lines_in,
    pack,
    pack_with_overlap,
    sentences_in,
    stable_chunk_id,
    token_windows,
    trim,
)


class RegexTokenizer:
    """One token per match of ``pattern`` (implements :class:`es_rag.encoders.tokenizer.Tokenizer`)."""

    max_tokens: int | None = None

    def __init__(self, pattern: str) -> None:
        self.name = pattern
        self._re = re.compile(pattern)

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in self._re.finditer(text)]

    def count(self, text: str) -> int:
        return len(self.token_spans(text))


class ZeroWidthTokenizer(RegexTokenizer):
    """Words, each preceded by an empty ``(a, a)`` offset, as fast tokenizers give for some pieces."""

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        out = []
        for m in re.finditer(r"\S+", text):
            out += [(m.start(), m.start()), (m.start(), m.end())]
        return out


WORDS = RegexTokenizer(r"\S+")
WORDS_AND_SPACES = RegexTokenizer(r"\S+|\s")


def always(a: int, b: int) -> bool:
    return True


def chars_at_most(n: int):  # type: ignore[no-untyped-def]
    """A span fits when it is at most ``n`` characters long (an inverted span counts as empty)."""
    return lambda a, b: b - a <= n


# ------------------------------------------------------------------------------ stable_chunk_id
def test_chunk_id_is_the_sha256_of_the_documented_key() -> None:
    # key: source, version, chunker version, kind, start, end joined by U+001F; first 32 hex digits.
    # The literal digests pin the ids of every chunk already indexed: a change re-ids the whole corpus.
    assert stable_chunk_id("doc-1", "v1", "c1", "child", 0, 10) == "ffabe9d83c279ce2607173b22abb1d1e"
    assert (
        stable_chunk_id("doc-1", "v1", "c1", "child", 0, 10)
        == hashlib.sha256(b"doc-1\x1fv1\x1fc1\x1fchild\x1f0\x1f10").hexdigest()[:32]
    )


def test_chunk_id_puts_the_tenant_first_when_there_is_one() -> None:
    assert stable_chunk_id("doc-1", "v1", "c1", "child", 0, 10, tenant_id="acme") == "11dce532f0a174e4850ca4acef91053c"
    assert (
        stable_chunk_id("doc-1", "v1", "c1", "child", 0, 10, "acme")
        == hashlib.sha256(b"acme\x1fdoc-1\x1fv1\x1fc1\x1fchild\x1f0\x1f10").hexdigest()[:32]
    )
    # no tenant and an empty tenant are the same key (no leading separator)
    assert stable_chunk_id("doc-1", "v1", "c1", "child", 0, 10, "") == "ffabe9d83c279ce2607173b22abb1d1e"


def test_chunk_id_depends_on_start_and_end() -> None:
    ids = {
        stable_chunk_id("d", "v", "c", "child", 0, 10),
        stable_chunk_id("d", "v", "c", "child", 1, 10),
        stable_chunk_id("d", "v", "c", "child", 0, 11),
        stable_chunk_id("d", "v", "c", "parent", 0, 10),
    }
    assert len(ids) == 4
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


# ------------------------------------------------------------------------------ trim
def test_trim_strips_whitespace_on_both_sides() -> None:
    assert trim("  ab  ", 0, 6) == (2, 4)
    assert trim("x\t a b \ny", 1, 8) == (3, 6)


@pytest.mark.parametrize(
    ("text", "start", "end", "expected"),
    [
        (" x ", 0, 0, (0, 0)),  # an empty range stays put, even with whitespace on both sides of it
        (" x ", 3, 3, (3, 3)),
        ("x  y", 1, 2, (2, 2)),  # the space at ``end`` is outside the range: not consumed
        ("x  y", 2, 3, (3, 3)),
        ("a   b", 1, 4, (4, 4)),  # whitespace only: collapses to the end
    ],
)
def test_trim_never_looks_outside_the_range(text: str, start: int, end: int, expected: tuple[int, int]) -> None:
    assert trim(text, start, end) == expected


# ------------------------------------------------------------------------------ lines_in / sentences_in
def test_lines_in_trims_lines_and_drops_blank_ones() -> None:
    text = "skip\n  one  \n   \ntwo\nskip"
    #       0123 4 567890123 4567 8901 2345
    assert lines_in(text, 5, 20) == [(7, 10), (17, 20)]
    assert [text[s:e] for s, e in lines_in(text, 5, 20)] == ["one", "two"]
    assert lines_in(text, 12, 17) == []  # only a newline and a blank line


def test_sentences_in_trims_sentences_and_drops_trailing_blank() -> None:
    text = "Skip. Hello world. Next one!  Last?  "
    assert sentences_in(text, 6, len(text)) == [(6, 18), (19, 28), (30, 35)]
    assert [text[s:e] for s, e in sentences_in(text, 6, len(text))] == ["Hello world.", "Next one!", "Last?"]
    assert sentences_in(text, 35, len(text)) == []  # whitespace only


def test_sentences_in_japanese_with_closing_bracket() -> None:
    text = "前文。今日は晴れ。「行こう。」と言った"
    assert sentences_in(text, 3, len(text)) == [(3, 9), (9, 15), (15, 19)]
    assert [text[s:e] for s, e in sentences_in(text, 3, len(text))] == ["今日は晴れ。", "「行こう。」", "と言った"]


# ------------------------------------------------------------------------------ token_windows
# "a bb ccc dd e" inside a prefix and a suffix that must not be read: offsets 3..16.
#  x. a bb ccc dd e zz
#  0123456789012345678
FRAMED = "x. a bb ccc dd e zz"
A, BB, CCC, DD, E = (3, 4), (5, 7), (8, 11), (12, 14), (15, 16)


@pytest.mark.parametrize(
    ("size", "overlap", "expected"),
    [
        (2, 0, [(A[0], BB[1]), (CCC[0], DD[1]), E]),
        (2, 1, [(A[0], BB[1]), (BB[0], CCC[1]), (CCC[0], DD[1]), (DD[0], E[1])]),
        (3, 1, [(A[0], CCC[1]), (CCC[0], E[1])]),
        (3, 2, [(A[0], CCC[1]), (BB[0], DD[1]), (CCC[0], E[1])]),
        (3, 5, [(A[0], CCC[1]), (BB[0], DD[1]), (CCC[0], E[1])]),  # overlap >= size: stride 1
        (1, 0, [A, BB, CCC, DD, E]),
        (5, 0, [(A[0], E[1])]),
        (9, 3, [(A[0], E[1])]),
    ],
)
def test_full_windows_advance_by_the_stride(size: int, overlap: int, expected: list[tuple[int, int]]) -> None:
    assert token_windows(FRAMED, 3, 16, WORDS, size, overlap, always) == expected


def test_windows_are_shrunk_from_the_end_until_they_fit() -> None:
    # size 3, overlap 1, at most 5 characters: "a bb ccc" (8) -> "a bb"; the next window starts one token
    # before where the shrunk one ended ("bb"), "bb ccc dd" (9) and "bb ccc" (6) shrink to "bb";
    # "ccc dd e" (8), "ccc dd" (6) -> "ccc"; then "dd e" (4) fits and reaches the end.
    got = token_windows(FRAMED, 3, 16, WORDS, 3, 1, chars_at_most(5))
    assert got == [(A[0], BB[1]), BB, CCC, (DD[0], E[1])]
    assert [FRAMED[s:e] for s, e in got] == ["a bb", "bb", "ccc", "dd e"]


def test_shrunk_windows_without_overlap_skip_no_token() -> None:
    got = token_windows(FRAMED, 3, 16, WORDS, 3, 0, chars_at_most(5))
    assert got == [(A[0], BB[1]), CCC, (DD[0], E[1])]


def test_a_token_too_long_to_fit_is_still_its_own_window() -> None:
    # one token cannot be cut: it is emitted even though it does not fit, and nothing is dropped
    text = "a bbb c"
    assert token_windows(text, 0, 7, WORDS, 2, 0, chars_at_most(2)) == [(0, 1), (2, 5), (6, 7)]
    assert token_windows(text, 0, 7, WORDS, 1, 0, chars_at_most(2)) == [(0, 1), (2, 5), (6, 7)]


def test_zero_width_tokens_are_ignored() -> None:
    tok = ZeroWidthTokenizer("zero-width")
    assert token_windows("a bb ccc", 0, 8, tok, 2, 0, always) == [(0, 4), (5, 8)]


def test_windows_of_only_whitespace_are_dropped() -> None:
    # tokens: "a", " ", " ", " ", "b"; the middle window of two spaces trims to nothing
    assert token_windows("a   b", 0, 5, WORDS_AND_SPACES, 2, 0, always) == [(0, 1), (4, 5)]


def test_a_window_equal_to_the_previous_one_after_trimming_is_dropped() -> None:
    # tokens: " ", "a", " "; both windows of two tokens trim to "a"
    assert token_windows(" a ", 0, 3, WORDS_AND_SPACES, 2, 1, always) == [(1, 2)]


def test_no_tokens_no_windows() -> None:
    assert token_windows("  \n ", 0, 4, WORDS, 3, 1, always) == []
    assert token_windows(FRAMED, 5, 5, WORDS, 3, 1, always) == []


# ------------------------------------------------------------------------------ pack
def test_pack_merges_touching_and_separate_spans_while_they_fit() -> None:
    assert pack([(0, 2), (2, 4)], always) == [(0, 4)]
    # (0,5) is 5 long and fits; adding (5,8) would make 8; (5,8)+(10,12) would make 7
    assert pack([(0, 2), (3, 5), (5, 8), (10, 12)], chars_at_most(5)) == [(0, 5), (5, 8), (10, 12)]


def test_pack_never_merges_overlapping_spans() -> None:
    assert pack([(0, 4), (2, 5)], always) == [(0, 4), (2, 5)]


def test_pack_of_nothing() -> None:
    assert pack([], always) == []


# ------------------------------------------------------------------------------ pack_with_overlap
# pieces of "aa bb cc dd ee"
PIECES = [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14)]


def overlap_at_most(n: int):  # type: ignore[no-untyped-def]
    """An overlap fits when it is a real span of at most ``n`` characters."""
    return lambda a, b: 0 <= b - a <= n


@pytest.mark.parametrize(
    ("overlap", "expected"),
    [
        # chunks of at most 8 characters: "aa bb cc" (0,8); the overlap may carry "cc" (2) but not "bb cc" (5)
        (2, [(0, 8), (6, 14)]),
        # overlap 5 carries "bb cc": next chunk "bb cc dd" (3,11), then it carries "cc dd" (6,11)
        (5, [(0, 8), (3, 11), (6, 14)]),
        # no overlap: the next chunk starts at the first piece not yet taken
        (0, [(0, 8), (9, 14)]),
    ],
)
def test_pack_with_overlap_carries_trailing_pieces(overlap: int, expected: list[tuple[int, int]]) -> None:
    assert pack_with_overlap(PIECES, chars_at_most(8), overlap_at_most(overlap)) == expected


def test_the_overlap_is_dropped_when_it_would_not_fit_with_the_next_piece() -> None:
    # (3,5) fits the overlap budget, but "bb" + the 6-character piece (3,12) is 9 > 7
    pieces = [(0, 2), (3, 5), (6, 12)]
    assert pack_with_overlap(pieces, chars_at_most(7), overlap_at_most(10)) == [(0, 5), (6, 12)]
    # with room for it, the overlap is kept
    assert pack_with_overlap(pieces, chars_at_most(9), overlap_at_most(10)) == [(0, 5), (3, 12)]


def test_pack_with_overlap_never_drops_a_piece() -> None:
    # a piece longer than the limit (out of contract) still comes out, on its own
    pieces = [(0, 2), (3, 12), (13, 15)]
    assert pack_with_overlap(pieces, chars_at_most(5), chars_at_most(2)) == pieces


def test_pack_with_overlap_of_one_piece_and_of_none() -> None:
    assert pack_with_overlap([(3, 7)], always, always) == [(3, 7)]
    assert pack_with_overlap([], always, always) == []
