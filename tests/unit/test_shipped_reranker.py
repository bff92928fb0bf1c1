"""The shipped cross-encoder: int8 ONNX export, ONNX-only loading, the default's substitution and its fit check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from es_rag.cross_encoder import shipped
from es_rag.cross_encoder.model import CrossEncoderReranker
from es_rag.cross_encoder.shipped import (
    CARD_FILE,
    MODEL_FILE,
    SHIPPED_EN,
    export_shipped,
    is_onnx_only,
    resolve_reranker_name,
)
from es_rag.errors import ConfigError, ModelLoadError
from es_rag.settings.base import DEFAULT_RERANKER_MODEL

PASSAGES = [("Title: Hockey\nContent:\n", "Goalies wear pads."), ("Content:\n", "Pucks are made of rubber.")]


@pytest.fixture(scope="module")
def exported(tiny_cross_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("shipped") / "reranker"
    return export_shipped(tiny_cross_encoder, target, card_fields={"name": "tiny"}, max_length=64)


def test_the_export_holds_int8_onnx_tokenizer_config_and_card(exported: Path) -> None:
    import onnx

    names = {p.name for p in exported.iterdir()}
    assert {MODEL_FILE, CARD_FILE, "config.json", "tokenizer.json"} <= names
    assert not names & {"model.safetensors", "pytorch_model.bin"} and is_onnx_only(exported)
    card = json.loads((exported / CARD_FILE).read_text())
    assert card["name"] == "tiny" and card["max_length"] == 64
    assert card["model_bytes"] == (exported / MODEL_FILE).stat().st_size
    graph = onnx.load(str(exported / MODEL_FILE)).graph
    assert any(n.op_type in ("DynamicQuantizeLinear", "MatMulInteger") for n in graph.node)  # int8 Linear layers


def test_the_files_the_rerank_stage_reads_travel_with_a_shipped_model() -> None:
    from es_rag.cross_encoder.fusion import FUSION_FILE, SAFETY_FILE
    from es_rag.cross_encoder.model import CALIBRATION_FILE

    assert set(shipped.SIDECAR_FILES) == {CALIBRATION_FILE, FUSION_FILE, SAFETY_FILE}


def test_the_onnx_only_model_scores_as_the_torch_weights_do(exported: Path, tiny_cross_encoder: Path) -> None:
    onnx_only = CrossEncoderReranker(str(exported))
    torch_model = CrossEncoderReranker(str(tiny_cross_encoder), backend="torch")
    assert onnx_only.backend == "onnx" and onnx_only.model_dir == str(exported)
    a = onnx_only.score("what do goalies wear", PASSAGES).scores
    b = torch_model.score("what do goalies wear", PASSAGES).scores
    assert np.allclose(a, b, atol=0.05)  # int8 weights: close, not equal
    assert onnx_only.limit() == 64  # the card's training length
    assert onnx_only.version.endswith("+onnx")


def test_an_onnx_only_model_runs_on_the_cpu_whatever_the_embedder_asks(exported: Path) -> None:
    reranker = CrossEncoderReranker(str(exported), device="cuda")
    assert reranker.device == "cpu" and reranker.backend == "onnx"
    with pytest.raises(ConfigError, match="runs on the CPU"):  # an explicit onnx backend on a GPU stays an error
        _ = CrossEncoderReranker(str(exported).replace("reranker", "other"), backend="onnx", device="cuda").device_plan


def test_the_unloadable_default_is_replaced_by_the_shipped_model(
    exported: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(shipped._SHIPPED, SHIPPED_EN, exported)
    monkeypatch.setattr("es_rag.cross_encoder.model.hub_reachable", lambda: False)
    reranker = CrossEncoderReranker(DEFAULT_RERANKER_MODEL)
    assert reranker.may_substitute
    reranker.warm_up()
    assert reranker.name == SHIPPED_EN and reranker.configured == DEFAULT_RERANKER_MODEL
    assert reranker.substituted is not None
    assert reranker.substituted.startswith(f"in place of {DEFAULT_RERANKER_MODEL}, which cannot be loaded: ")
    assert "hub is unreachable" in reranker.substituted
    assert reranker.model_dir == str(exported) and not reranker.may_substitute
    assert len(reranker.score("q", PASSAGES).scores) == 2
    assert resolve_reranker_name(SHIPPED_EN) == str(exported)


def test_a_model_the_user_named_is_never_replaced(exported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(shipped._SHIPPED, SHIPPED_EN, exported)
    monkeypatch.setattr("es_rag.cross_encoder.model.hub_reachable", lambda: False)
    reranker = CrossEncoderReranker("someone/their-cross-encoder")
    assert not reranker.may_substitute
    with pytest.raises(ModelLoadError, match="hub is unreachable"):
        reranker.warm_up()
    assert reranker.name == "someone/their-cross-encoder" and reranker.substituted is None


def test_the_name_selects_the_shipped_model(exported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(shipped._SHIPPED, SHIPPED_EN, exported)
    reranker = CrossEncoderReranker(SHIPPED_EN)
    reranker.warm_up()
    assert reranker.substituted is None and reranker.backend == "onnx"
