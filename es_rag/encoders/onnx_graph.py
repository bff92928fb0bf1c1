"""Exporting a torch model to one ONNX graph, as both of es_rag's exports do it: the cross-encoder's
(:mod:`es_rag.cross_encoder.onnx_export`) and the query encoder's (:mod:`es_rag.encoders.onnx_query`).

``torch.onnx.export`` with the ``torch.export``-based exporter (``dynamo=True``, which needs ``onnx`` and
``onnxscript``; the legacy TorchScript exporter traces transformers 5's attention-mask construction into constants),
batch and sequence axes dynamic, the model in eval mode for the export and restored after, the exporter's warnings and
registration notices ("torchvision is not installed. Skipping torchvision::nms") kept quiet.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from es_rag.errors import ModelLoadError

OPSET = 18


def missing_modules(names: Sequence[str]) -> list[str]:
    """Which of the packages ``names`` cannot be imported."""
    missing = []
    for name in names:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    return missing


def input_names(tokenizer: Any) -> list[str]:
    """The model inputs a tokenizer produces, in export order (``input_ids``, ``attention_mask``, then
    ``token_type_ids`` when the model has segment ids).

    Args:
        tokenizer: The model's tokenizer.
    """
    produced = set(getattr(tokenizer, "model_input_names", ("input_ids", "attention_mask")))
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if "token_type_ids" in produced else [])


def export_graph(
    wrapper: Any, model: Any, args: tuple[Any, ...], names: Sequence[str], output: str, target: Path, *, what: str
) -> None:
    """Export ``wrapper`` (a module around ``model``) called on ``args`` to ``target`` (see the module doc).

    Args:
        wrapper: The torch module whose forward takes ``names`` in order.
        model: The model inside it (put in eval mode for the export, its mode restored after).
        args: Example inputs, one tensor per name.
        names: The graph's input names.
        output: The graph's output name.
        target: The ``.onnx`` file written.
        what: Named in the error (``the cross-encoder``).

    Raises:
        ModelLoadError: The exporter failed.
    """
    import torch

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    was_training = model.training
    model.eval()
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                wrapper,
                args,
                input_names=list(names),
                output_names=[output],
                dynamic_shapes={n: {0: batch, 1: seq} for n in names},
                opset_version=OPSET,
                dynamo=True,
                verbose=False,
            )
        assert program is not None
        program.save(str(target), external_data=False)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"ONNX export of {what} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        model.train(was_training)
        exporter_log.setLevel(level)
