"""A model's ``tokenizer.json`` read by the ``tokenizers`` library itself, for the paths a user waits on.

``transformers.AutoTokenizer`` imports most of ``transformers``, which imports torch: about 5 of the 10 seconds a cold
``es-rag search`` took (issue 46). A search needs the tokenizer only to encode: the query for the ONNX query encoder
(:mod:`es_rag.encoders.onnx_query`), (query, passage) pairs for the shipped cross-encoder, and token counts for the
context budget. :class:`RawTokenizer` is the part of a ``transformers`` fast tokenizer that es_rag calls, over the same
Rust tokenizer that ``transformers`` wraps (``tokenizers.Tokenizer.from_file``): the ids, type ids, offsets and
sequence ids are the ones ``AutoTokenizer`` gives (``tests/unit/test_raw_tokenizer.py`` compares them on both shipped
tokenizers, pairs included).

The truncation and padding a ``tokenizer.json`` may carry (all-MiniLM-L6-v2's: 128 tokens) are switched off, as
``transformers`` does for a call with ``truncation=False``; a caller that truncates says so (``max_length``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.errors import ModelLoadError

TOKENIZER_FILE = "tokenizer.json"


def has_raw_tokenizer(folder: str | Path) -> bool:
    """Whether a model directory has a ``tokenizer.json`` (a fast tokenizer this module can read)."""
    return (Path(folder) / TOKENIZER_FILE).is_file()


def json_object(path: Path, what: str = "") -> dict[str, Any]:
    """A model directory's JSON file as a dict: empty when the file is missing or holds no object.

    Args:
        path: The file.
        what: Named in the error (``" model card"``).

    Raises:
        ModelLoadError: The file cannot be read or is not JSON.
    """
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path}: unreadable{what}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _token(value: Any) -> str | None:
    """A special token as a tokenizer config writes it: a string, or ``{"content": ...}``."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return str(value) if isinstance(value, str) else None


class Encoded(dict[str, Any]):
    """What a call returns: ``input_ids``, ``token_type_ids``, ``attention_mask`` (and ``offset_mapping``), one list
    per text for a batch, and :meth:`sequence_ids` as ``transformers``' ``BatchEncoding`` has it."""

    def __init__(self, encodings: Sequence[Any], *, batched: bool, offsets: bool) -> None:
        def field(get: Any) -> Any:
            values = [get(e) for e in encodings]
            return values if batched else values[0]

        super().__init__(
            input_ids=field(lambda e: list(e.ids)),
            token_type_ids=field(lambda e: list(e.type_ids)),
            attention_mask=field(lambda e: list(e.attention_mask)),
        )
        if offsets:
            self["offset_mapping"] = field(lambda e: [tuple(o) for o in e.offsets])
        self._encodings = list(encodings)

    def sequence_ids(self, index: int = 0) -> list[int | None]:
        """Which text of a pair each token comes from (0, 1; None for a special token)."""
        return list(self._encodings[index].sequence_ids)


class RawTokenizer:
    """A fast tokenizer loaded from a model directory's ``tokenizer.json`` without ``transformers`` (see the module
    doc). Not thread-safe by itself: callers hold :func:`~es_rag.encoders.tokenizer.tokenizer_lock`, as for a
    ``transformers`` tokenizer.

    Args:
        folder: The model directory (``tokenizer.json``; ``tokenizer_config.json`` and ``special_tokens_map.json``
            for the special tokens and the length limit, when present).

    Raises:
        ModelLoadError: No ``tokenizer.json``, or one the ``tokenizers`` library cannot read.
    """

    is_fast = True

    def __init__(self, folder: str | Path) -> None:
        from tokenizers import Tokenizer

        root = Path(folder)
        try:
            self._tok = Tokenizer.from_file(str(root / TOKENIZER_FILE))
        except Exception as exc:
            raise ModelLoadError(f"cannot load tokenizer {str(root)!r}: {type(exc).__name__}: {exc}") from exc
        self._tok.no_truncation()
        self._tok.no_padding()
        config = {**json_object(root / "special_tokens_map.json"), **json_object(root / "tokenizer_config.json")}
        self.name_or_path = str(root)
        self.unk_token = _token(config.get("unk_token"))
        self.pad_token = _token(config.get("pad_token"))
        pad_id = self._tok.token_to_id(self.pad_token) if self.pad_token else None
        self.pad_token_id = int(pad_id) if pad_id is not None else 0
        self.pad_token_type_id = int(config.get("pad_token_type_id") or 0)
        limit = config.get("model_max_length")
        self.model_max_length = int(limit) if isinstance(limit, int | float) and limit < 1e9 else 512
        if config.get("padding_side", "right") != "right":
            raise ModelLoadError(f"tokenizer {str(root)!r}: pads on the {config['padding_side']}; es_rag pads right")

    def __call__(
        self,
        text: str | Sequence[str],
        text_pair: Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        return_offsets_mapping: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        verbose: bool = False,
    ) -> Encoded:
        """Encode one text, a batch of texts, or a batch of ``(text, text_pair)`` pairs.

        Args:
            text: A text or a batch of texts.
            text_pair: The second text of each pair (a batch).
            add_special_tokens: Add the model's ``[CLS]``/``[SEP]`` (its post-processor's template).
            return_offsets_mapping: Return each token's character span.
            truncation: Cut each encoding to ``max_length`` tokens (special tokens included), from the right.
            max_length: The limit of ``truncation``.
            verbose: Accepted for ``transformers`` compatibility; nothing is logged.
        """
        batched = not isinstance(text, str)
        texts = list(text) if batched else [text]
        if text_pair is not None:
            if not batched or len(text_pair) != len(texts):
                raise ValueError("text_pair: one second text per text of a batch")
            inputs: list[Any] = list(zip(texts, text_pair, strict=True))
        else:
            inputs = texts
        if truncation:
            if not max_length:
                raise ValueError("truncation needs max_length")
            self._tok.enable_truncation(max_length=int(max_length))
        try:
            encodings = self._tok.encode_batch(inputs, add_special_tokens=add_special_tokens)
        finally:
            if truncation:
                self._tok.no_truncation()
        return Encoded(encodings, batched=batched, offsets=return_offsets_mapping)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        """The vocabulary piece of each id."""
        return [str(self._tok.id_to_token(int(i))) for i in ids]

    def pad(self, features: Mapping[str, Sequence[Sequence[int]]], return_tensors: str = "np") -> dict[str, Any]:
        """Right-pad a batch to its longest member: ``input_ids`` with the pad id, ``token_type_ids`` with the pad type
        id, and an ``attention_mask`` of ones over the real tokens (int64 arrays).

        Args:
            features: ``input_ids`` (and ``token_type_ids``), one list per member.
            return_tensors: ``np`` (the only kind: torch is what this class avoids).
        """
        if return_tensors != "np":
            raise ValueError(f"return_tensors: {return_tensors!r}; RawTokenizer returns numpy arrays only")
        ids = features["input_ids"]
        width = max((len(r) for r in ids), default=0)
        out: dict[str, Any] = {
            "input_ids": np.full((len(ids), width), self.pad_token_id, dtype=np.int64),
            "attention_mask": np.zeros((len(ids), width), dtype=np.int64),
        }
        types = features.get("token_type_ids")
        if types is not None:
            out["token_type_ids"] = np.full((len(ids), width), self.pad_token_type_id, dtype=np.int64)
        for i, row in enumerate(ids):
            out["input_ids"][i, : len(row)] = row
            out["attention_mask"][i, : len(row)] = 1
            if types is not None:
                out["token_type_ids"][i, : len(row)] = types[i]
        return out
