"""Token counting with the embedding model's own tokenizer (seed 000: never confuse characters and tokens)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from es_rag.errors import ModelLoadError

_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def tokenizer_lock(tokenizer: Any) -> threading.RLock:
    """The one lock of a Hugging Face tokenizer object, held by every es_rag call into it.

    A fast tokenizer keeps truncation and padding as state of its Rust backend, which each call resets: two threads
    in one tokenizer at once either fail (``RuntimeError: Already borrowed``, huggingface/tokenizers#537) or encode
    under the other call's settings (measured here: ``count`` of a long text while the same model embedded another
    one made the embedding untruncated and torch raised ``The size of tensor a (802) must match the size of tensor
    b (128)``; the pipeline then fell back to BM25 only without a word). The embedder, its :class:`HFTokenizer`
    and the cross-encoder therefore serialise on the lock of the tokenizer object they share.

    Args:
        tokenizer: The ``transformers`` tokenizer object (locks are per object, released with it).
    """
    with _LOCKS_GUARD:
        lock = _LOCKS.get(tokenizer)
        if lock is None:
            lock = _LOCKS[tokenizer] = threading.RLock()
        return lock


@runtime_checkable
class Tokenizer(Protocol):
    """What chunking and packing need from a tokenizer."""

    name: str
    max_tokens: int | None

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character span of every token of ``text`` (no special tokens)."""
        ...

    def count(self, text: str) -> int:
        """Number of model tokens in ``text`` (no special tokens)."""
        ...


SEGMENT_CHARS = 65_536
"""The longest text a tokenizer call is given. A Hugging Face fast tokenizer holds an ``Encoding`` of the whole input
(ids, offsets, type ids, masks, token strings): about 250 bytes a character, so one call on a 48 MB file took 9 GB
(issue 31). Longer texts are tokenized a segment at a time."""


def segments(text: str, size: int = SEGMENT_CHARS) -> Iterator[tuple[int, str]]:
    """``(offset, piece)`` of ``text`` in pieces of at most ``size`` characters, each cut just after a whitespace
    character where there is one, so no token spans a cut: for a BERT WordPiece tokenizer (it splits at whitespace)
    the tokens of the pieces are the tokens of the text (``tests/unit/test_tokenizer_segments.py``); a SentencePiece
    tokenizer marks a piece's first word as a word start and may add one boundary token per cut. A run of ``size``
    characters without whitespace is cut where it must be.

    Args:
        text: The text.
        size: Characters per piece at most.
    """
    start, n = 0, len(text)
    while start < n:
        end = min(n, start + size)
        if end < n:
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end), text.rfind("\t", start, end))
            if cut > start:
                end = cut + 1
        yield start, text[start:end]
        start = end


class HFTokenizer:
    """A Hugging Face fast tokenizer (the one the embedding model uses). Thread-safe: every call holds
    :func:`tokenizer_lock` of the wrapped tokenizer.

    Args:
        tokenizer: A ``transformers`` fast tokenizer instance.
        name: Model name or path it came from.
        max_tokens: The model's maximum input length in tokens, special tokens excluded.
    """

    def __init__(self, tokenizer: Any, *, name: str, max_tokens: int | None) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ModelLoadError(f"tokenizer of {name!r} is not a fast tokenizer: offsets are unavailable")
        self._tok = tokenizer
        self.name = name
        self.max_tokens = max_tokens

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, *, max_tokens: int | None = None) -> HFTokenizer:
        """Load the tokenizer that ships with a model directory or hub name.

        Args:
            name_or_path: Model directory or hub name.
            max_tokens: Override of the model's maximum input length.
        """
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is a core dependency
            raise ModelLoadError("transformers is not installed: pip install es-rag") from exc
        try:
            tok = AutoTokenizer.from_pretrained(str(name_or_path))
        except Exception as exc:
            raise ModelLoadError(f"cannot load tokenizer {str(name_or_path)!r}: {exc}") from exc
        return cls(tok, name=str(name_or_path), max_tokens=max_tokens)

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character span of every token of ``text`` (no special tokens); a long text is tokenized a segment at a
        time (:func:`segments`).

        Args:
            text: The text to tokenize.
        """
        out: list[tuple[int, int]] = []
        for at, piece in segments(text):
            with tokenizer_lock(self._tok):
                enc = self._tok(
                    piece, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False
                )
            out.extend((at + int(a), at + int(b)) for a, b in enc["offset_mapping"])
        return out

    @property
    def unk_token(self) -> str | None:
        """The vocabulary's unknown token (``[UNK]``), if it has one."""
        token = getattr(self._tok, "unk_token", None)
        return str(token) if token is not None else None

    def pieces(self, text: str) -> list[tuple[str, int, int]]:
        """Every token of ``text`` as ``(piece, start, end)``: its vocabulary piece and character span.

        Args:
            text: The text to tokenize.
        """
        if not text:
            return []
        with tokenizer_lock(self._tok):
            enc = self._tok(
                text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False
            )
            names = self._tok.convert_ids_to_tokens(enc["input_ids"])
        return [(str(p), int(a), int(b)) for p, (a, b) in zip(names, enc["offset_mapping"], strict=True)]

    def count(self, text: str) -> int:
        """Number of model tokens in ``text`` (no special tokens).

        Args:
            text: The text to count.
        """
        total = 0
        for _, piece in segments(text):
            with tokenizer_lock(self._tok):
                total += len(self._tok(piece, add_special_tokens=False, truncation=False, verbose=False)["input_ids"])
        return total
