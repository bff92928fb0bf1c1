"""The cross-encoder's ONNX path without ``optimum``: ``torch.onnx.export`` once, then ``onnxruntime``.

* :func:`export_onnx` exports the loaded Hugging Face sequence-classification model with torch's
  ``torch.export``-based exporter (``dynamo=True``, which needs ``onnxscript``). The legacy TorchScript exporter
  (``dynamo=False``) traces the attention-mask construction of transformers 5 into constants and gives
  scores that differ from torch's by ~1e-2 on a tiny BERT, so it is not used. Batch and sequence axes are dynamic.
* :func:`cached_onnx_model` keys the exported file by :func:`weights_digest` (a SHA-256 of the model's
  config and every tensor of its state dict) plus :data:`EXPORT_VERSION`, torch's version and the opset:
  ``<model dir>/onnx/es_rag-<key>.onnx`` beside a local model, else (a hub name or a read-only directory)
  ``$ES_RAG_ONNX_CACHE`` or ``~/.cache/es_rag/onnx``. The first load exports (seconds to a minute, under a file
  lock so concurrent loaders export once); later loads reuse the file; changed weights get a new file.
* :class:`OnnxScorer` runs the file with onnxruntime's CPU provider and returns the model's logits, the same
  raw scores torch gives (tests/unit/test_rerank_onnx.py compares them).

Needs ``pip install 'es-rag[onnx]'`` (onnxruntime, onnx, onnxscript).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.encoders.onnx_graph import OPSET, export_graph, input_names, missing_modules
from es_rag.errors import ModelLoadError

EXPORT_VERSION = "1"
"""Bumped whenever the export recipe changes, so an older cached file is not reused."""
CACHE_ENV = "ES_RAG_ONNX_CACHE"
"""Environment variable naming the ONNX cache folder for hub models and read-only model directories."""


def require_onnx() -> None:
    """Raise a clear error when the onnx extra is missing.

    Raises:
        ModelLoadError: onnxruntime, onnx or onnxscript cannot be imported.
    """
    missing = missing_modules(("onnxruntime", "onnx", "onnxscript"))
    if missing:
        raise ModelLoadError(f"the onnx reranker backend needs {', '.join(missing)}: pip install 'es-rag[onnx]'")


_RUNTIME_FLAGS = frozenset(
    {"transformers_version", "use_cache", "output_attentions", "output_hidden_states", "return_dict", "torchscript"}
)
"""Config keys that change how a model is called, not what it computes (CrossEncoder sets ``use_cache``)."""


def weights_digest(module: Any) -> str:
    """SHA-256 (hex) of a torch module's config (when it has one) and every tensor of its state dict.

    Args:
        module: A torch module, e.g. a transformers ``BertForSequenceClassification``.
    """
    digest = hashlib.sha256()
    config = getattr(module, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        cfg = {k: v for k, v in config.to_dict().items() if not k.startswith("_") and k not in _RUNTIME_FLAGS}
        digest.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        digest.update(t.reshape(-1).view(dtype=_byte_dtype()).numpy().tobytes())
    return digest.hexdigest()


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def cache_key(module: Any) -> str:
    """The cache key of a model's exported file: weights digest, export recipe, torch version and opset.

    Args:
        module: The Hugging Face model to export.
    """
    import torch

    recipe = f"{weights_digest(module)}|export-{EXPORT_VERSION}|torch-{torch.__version__}|opset-{OPSET}"
    return hashlib.sha256(recipe.encode()).hexdigest()[:24]


def cache_path(model_name: str, key: str) -> Path:
    """Where the exported file of ``model_name`` with ``key`` lives.

    Beside a local model directory (``<dir>/onnx/es_rag-<key>.onnx``) when it is writable, else in
    ``$ES_RAG_ONNX_CACHE`` or ``~/.cache/es_rag/onnx``.

    Args:
        model_name: Hub name or local directory of the cross-encoder.
        key: :func:`cache_key` of its weights.
    """
    local = Path(model_name)
    if local.is_dir():
        folder = local / "onnx"
        writable = os.access(folder, os.W_OK) if folder.is_dir() else not folder.exists() and os.access(local, os.W_OK)
        if writable:
            return folder / f"es_rag-{key}.onnx"
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "es_rag" / "onnx")
    return root / f"es_rag-{key}.onnx"


def export_onnx(hf_model: Any, tokenizer: Any, path: str | Path) -> Path:
    """Export ``hf_model`` (logits of a sequence-classification model) to ``path`` with dynamic batch and
    sequence axes; written to a temporary file first, then renamed (a reader never sees half a file).

    Args:
        hf_model: The transformers model (``CrossEncoder.model``).
        tokenizer: Its tokenizer (gives the example inputs and which inputs exist).
        path: Target ``.onnx`` file.

    Raises:
        ModelLoadError: When the exporter fails or the onnx extra is missing.
    """
    require_onnx()
    import torch

    names = input_names(tokenizer)

    class _Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).logits

    class _SegmentLogits(_Logits):
        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    example = tokenizer(
        ["an example query", "a second, longer example query"],
        ["an example passage of a few words", "another passage"],
        padding=True,
        return_tensors="pt",
    )
    args = tuple(example[n] for n in names)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=target.parent)
    os.close(fd)
    wrapper = (_SegmentLogits if "token_type_ids" in names else _Logits)(hf_model)
    try:
        export_graph(wrapper, hf_model, args, names, "logits", Path(tmp), what="the cross-encoder")
        os.replace(tmp, target)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"ONNX export of the cross-encoder failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def cached_onnx_model(model_name: str, hf_model: Any, tokenizer: Any) -> tuple[Path, bool]:
    """The exported file of a loaded model, exporting it first when no file with its key exists.

    Args:
        model_name: Hub name or local directory (decides where the file lives, :func:`cache_path`).
        hf_model: The transformers model.
        tokenizer: Its tokenizer.

    Returns:
        ``(path, exported)``: ``exported`` is True when this call wrote the file.
    """
    from filelock import FileLock

    path = cache_path(model_name, cache_key(hf_model))
    if path.is_file():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():  # another process exported it while this one waited
            return path, False
        return export_onnx(hf_model, tokenizer, path), True


class OnnxScorer:
    """An onnxruntime session over an exported cross-encoder; :meth:`__call__` returns its logits.

    Args:
        path: The ``.onnx`` file.
        threads: Intra-op threads; None = onnxruntime's default (the physical cores).
    """

    def __init__(self, path: str | Path, *, threads: int | None = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # a core dependency; only a broken install lacks it
            raise ModelLoadError("the onnx reranker backend needs onnxruntime: pip install onnxruntime") from exc

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads is not None:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelLoadError(f"{path}: onnxruntime cannot load the exported model: {exc}") from exc
        self.path = Path(path)
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, features: Mapping[str, Any]) -> np.ndarray:
        """Logits (float32, one row per pair) of padded model inputs.

        Args:
            features: ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model takes them), 2-D.
        """
        feed = {name: np.asarray(features[name], dtype=np.int64) for name in self.inputs}
        (logits,) = self.session.run(["logits"], feed)
        return np.asarray(logits, dtype=np.float32)
