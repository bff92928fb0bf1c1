"""Tiny models built on the fly and saved to disk, then loaded through es_rag's real loading code.

No model hub is reachable here: a WordPiece tokenizer over a few texts' characters and words, a 1-layer BERT
with random (seeded) weights becomes a sentence-transformers bi-encoder and a cross-encoder.
"""

from __future__ import annotations

from pathlib import Path

SEED_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Remote wipe is available on all plans except trial devices.",
    "Error NIM-E1042 means a chunk checksum mismatch; resume the upload.",
    "High CPU usage during synchronisation: the laptop gets hot while syncing.",
    "Deleted files are kept in the trash for 60 days under the 2026 policy.",
    "同期が止まったときは、アプリを再起動してください。設定を確認します。",
    "Tenant isolation keeps every customer's documents apart.",
]


SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _tokenizer(directory: Path):  # type: ignore[no-untyped-def]
    """A WordPiece tokenizer with a fixed vocabulary: the special tokens, every character of the seed texts
    (alone and as a ``##`` continuation) and every whole word, sorted. A trained WordPiece vocabulary breaks
    frequency ties in hash order, which made the tiny models (and the tests that train them) differ per run."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import BertTokenizerFast

    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words = {w for text in SEED_TEXTS for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))}
    chars = sorted({c for w in words for c in w})
    vocab = [*SPECIAL_TOKENS, *chars, *(f"##{c}" for c in chars), *sorted(words - set(chars))]
    tok = Tokenizer(models.WordPiece(vocab={token: i for i, token in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.WordPiece()
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=128,
    )
    fast.save_pretrained(str(directory))
    return fast


def _config(vocab_size: int, num_labels: int | None = None):  # type: ignore[no-untyped-def]
    from transformers import BertConfig

    kwargs = {"num_labels": num_labels} if num_labels else {}
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        **kwargs,
    )


def build_tiny_bi_encoder(directory: Path) -> Path:
    """Save a tiny sentence-transformers model (32 dims) into ``directory``.

    Args:
        directory: Target directory.
    """
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    torch.manual_seed(0)
    raw = directory / "hf"
    raw.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(raw)
    BertModel(_config(len(tok))).save_pretrained(str(raw))
    word = models.Transformer(str(raw), max_seq_length=128)
    pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[word, pooling]).save(str(directory / "st"))
    return directory / "st"


def build_tiny_cross_encoder(directory: Path) -> Path:
    """Save a tiny cross-encoder (1 output logit) into ``directory``.

    Args:
        directory: Target directory.
    """
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(1)
    directory.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(directory)
    BertForSequenceClassification(_config(len(tok), num_labels=1)).save_pretrained(str(directory))
    return directory
