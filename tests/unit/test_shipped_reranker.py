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
    shipped_path,
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


def test_the_shipped_model_reranks_without_torch_or_transformers() -> None:
    """Issue 46: a cold search spent seconds importing transformers (and so torch) to read the shipped model's
    tokenizer and config; onnxruntime and tokenizers are all it needs, and the default is known missing before
    sentence-transformers is imported."""
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from es_rag.cross_encoder.model import CrossEncoderReranker\n"
        "r = CrossEncoderReranker('cross-encoder/ms-marco-MiniLM-L6-v2'); r.warm_up()\n"
        f"out = r.score('what do goalies wear', {PASSAGES!r})\n"
        "print(r.name, [round(s, 4) for s in out.scores], r.tokenizer().count('goalies wear pads'),\n"
        "      sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": "/nonexistent-es-rag-hub-cache"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    in_process = CrossEncoderReranker(SHIPPED_EN)
    want = [round(s, 4) for s in in_process.score("what do goalies wear", PASSAGES).scores]
    count = in_process.tokenizer().count("goalies wear pads")
    assert out.stdout.strip() == f"{SHIPPED_EN} {want} {count} []", out.stderr


def test_the_shipped_models_scores_are_the_ones_transformers_tokens_give() -> None:
    from transformers import AutoTokenizer

    from es_rag.cross_encoder.onnx_export import OnnxScorer

    folder = shipped_path(SHIPPED_EN)
    assert folder is not None
    hf = AutoTokenizer.from_pretrained(str(folder))
    texts = [h + c for h, c in PASSAGES]
    features = hf(["what do goalies wear"] * len(texts), texts, padding=True, return_tensors="np")
    want = OnnxScorer(folder / MODEL_FILE)(features).reshape(-1)
    got = CrossEncoderReranker(SHIPPED_EN).score("what do goalies wear", PASSAGES).scores
    assert np.allclose(got, want, atol=1e-5)


def test_the_local_hub_cache_is_read_without_the_hub_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from es_rag.encoders.hub import hub_cached

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert not hub_cached("org/model")
    snapshot = tmp_path / "models--org--model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    assert not hub_cached("org/model")  # a snapshot without its config is not a model
    (snapshot / "config.json").write_text("{}")
    assert hub_cached("org/model") and not hub_cached("org/other")
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "hub").mkdir(parents=True)
    (tmp_path / "models--org--model").rename(tmp_path / "home" / "hub" / "models--org--model")
    assert hub_cached("org/model")
