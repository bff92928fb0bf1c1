"""The cross-encoder es_rag ships: a MiniLM trained by ``es-rag train-reranker`` on SQuADShifts questions, as int8 ONNX.

No model hub is needed to rerank: when the configured default (:data:`~es_rag.settings.base.DEFAULT_RERANKER_MODEL`)
cannot be loaded (no hub, not in the local cache), the rerank stage loads this model instead and the trace names it.
``--rerank-model es-rag-reranker-en`` names it explicitly.

A shipped model directory holds ``model.onnx`` (int8 weights), the tokenizer and ``config.json`` of its base,
``es_rag_model.json`` (what it is: base, data, licence, the command that rebuilds it, what it measured) and, when
fitted, ``es_rag_calibration.json``. :func:`export_shipped` writes one from a trained model directory.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from es_rag.encoders.raw_tokenizer import json_object
from es_rag.errors import ModelLoadError

SHIPPED_EN = "es-rag-reranker-en"
"""The name that selects the shipped English cross-encoder (``--rerank-model es-rag-reranker-en``)."""
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
MODEL_FILE = "model.onnx"
RUNS_ON = "cpu"
"""A shipped model runs on onnxruntime's CPU execution provider."""
CARD_FILE = "es_rag_model.json"
_SHIPPED = {SHIPPED_EN: MODELS_DIR / "reranker-en"}
SIDECAR_FILES = ("es_rag_calibration.json", "es_rag_fusion.json", "es_rag_safety.json")
"""What a model directory may hold beside its weights that the rerank stage reads (calibration, fusion with the first
stage, safety check); :func:`export_shipped` copies them."""


def shipped_path(name: str) -> Path | None:
    """The directory of a shipped model name, or None for any other name."""
    return _SHIPPED.get(name)


def resolve_reranker_name(name: str) -> str:
    """``name``, or the directory of the shipped model it names."""
    path = shipped_path(name)
    return str(path) if path is not None else name


def is_onnx_only(path: str | Path) -> bool:
    """True for a model directory with ``model.onnx`` and no torch weights (a shipped model)."""
    folder = Path(path)
    if not (folder / MODEL_FILE).is_file():
        return False
    return not any((folder / w).is_file() for w in ("model.safetensors", "pytorch_model.bin"))


def card(path: str | Path) -> dict[str, Any]:
    """The model card (``es_rag_model.json``) of a shipped model directory; empty when it has none."""
    return json_object(Path(path) / CARD_FILE, " model card")


class OnnxOnlyModel:
    """What the rerank code reads of a loaded cross-encoder, for a directory that has only ``model.onnx``: its
    tokenizer, its token limit and its config; the scores come from an :class:`~.onnx_export.OnnxScorer`.

    Args:
        path: The model directory.
        max_length: Token limit of one pair; None: the card's ``max_length``, else the tokenizer's.
    """

    def __init__(self, path: str | Path, *, max_length: int | None = None) -> None:
        from es_rag.encoders.raw_tokenizer import RawTokenizer

        folder = Path(path)
        try:  # without transformers (and so torch): a search that reranks with a shipped model starts in a second
            self.tokenizer = RawTokenizer(folder)
            self.config = SimpleNamespace(**json.loads((folder / "config.json").read_text(encoding="utf-8")))
        except Exception as exc:
            raise ModelLoadError(f"cannot load cross-encoder {str(folder)!r}: {type(exc).__name__}: {exc}") from exc
        self.model = self  # CrossEncoder.model.config is where the limit code looks
        stated = card(folder).get("max_length")
        self.max_seq_length = max_length or (int(stated) if stated else None)
        self.device = RUNS_ON

    def eval(self) -> OnnxOnlyModel:
        """Nothing to switch: the ONNX graph is inference only."""
        return self


def export_shipped(
    model_dir: str | Path, target: str | Path, *, card_fields: dict[str, Any] | None = None, max_length: int = 256
) -> Path:
    """Write a shipped model directory from a trained one: the model exported to ONNX, its Linear weights quantised
    to int8 (onnxruntime's dynamic quantisation), its tokenizer and config, the :data:`SIDECAR_FILES` present, and
    the card. The directory is built beside ``target`` and renamed over it.

    Args:
        model_dir: A trained cross-encoder directory (``CrossEncoder`` loads it).
        target: The shipped directory.
        card_fields: What the card records besides the file sizes (base, data, licence, command, measurements).
        max_length: Token limit the model was trained with (recorded in the card).

    Raises:
        ModelLoadError: The model cannot be loaded or exported, or the onnx extra is missing.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sentence_transformers import CrossEncoder

    from es_rag.cross_encoder.onnx_export import export_onnx

    source = Path(model_dir)
    out = Path(target)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        ce = CrossEncoder(str(source), num_labels=1, max_length=max_length)
        ce.model.cpu()  # exported from the CPU: the example inputs are CPU tensors
    except Exception as exc:
        raise ModelLoadError(f"cannot load cross-encoder {str(source)!r}: {type(exc).__name__}: {exc}") from exc
    build = Path(tempfile.mkdtemp(prefix=".shipped-", dir=out.parent))
    try:
        fp32 = export_onnx(ce.model, ce.tokenizer, build / "fp32.onnx")
        quantize_dynamic(str(fp32), str(build / MODEL_FILE), weight_type=QuantType.QInt8)
        fp32.unlink()
        ce.tokenizer.save_pretrained(str(build))
        ce.model.config.save_pretrained(str(build))
        for extra in SIDECAR_FILES:
            if (source / extra).is_file():
                shutil.copy2(source / extra, build / extra)
        info = {
            **(card_fields or {}),
            "max_length": max_length,
            "format": "ONNX, Linear weights int8 (onnxruntime quantize_dynamic, QInt8)",
            "model_bytes": (build / MODEL_FILE).stat().st_size,
        }
        (build / CARD_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        for leftover in build.glob("*.onnx.data"):
            leftover.unlink()
        build.chmod(0o755)  # mkdtemp makes it private; a shipped model is read by whoever installs it
        if out.exists():
            shutil.rmtree(out)
        build.replace(out)
    finally:
        if build.exists():
            shutil.rmtree(build)
    return out
