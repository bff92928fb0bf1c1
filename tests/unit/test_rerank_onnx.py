"""The cross-encoder's ONNX backend (torch.onnx.export + onnxruntime) against torch on a tiny model built on the fly:
same raw scores within a tolerance, one cached export per weights, a new export when the weights change."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.cross_encoder import onnx_export
from es_rag.cross_encoder.model import CrossEncoderReranker
from es_rag.errors import ConfigError

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

LONG = " ".join(f"word{i % 17} fox" for i in range(120))  # over the tiny model's 128-token limit: windows
PASSAGES = [
    ("Title: Trash\nContent:\n", "Deleted files are kept in the trash for 60 days under the 2026 policy."),
    ("Title: Sync\nContent:\n", "High CPU usage during synchronisation: the laptop gets hot while syncing."),
    ("", "Remote wipe is available on all plans except trial devices."),
    ("Title: Long\nContent:\n", LONG),
]


@pytest.fixture(scope="module")
def onnx_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny cross-encoder in its own directory (the export is written beside it)."""
    from tests.support.models_factory import build_tiny_cross_encoder

    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce-onnx"))


@pytest.fixture(scope="module")
def onnx_reranker(onnx_model_dir: Path) -> CrossEncoderReranker:
    rr = CrossEncoderReranker(str(onnx_model_dir), backend="onnx", long_text="windows")
    rr.warm_up()
    return rr


def test_onnx_scores_match_torch(onnx_model_dir: Path, onnx_reranker: CrossEncoderReranker) -> None:
    torch_rr = CrossEncoderReranker(str(onnx_model_dir), backend="torch", long_text="windows")
    for query in ("trash policy", "why is my laptop hot while syncing"):
        want = torch_rr.score(query, PASSAGES)
        got = onnx_reranker.score(query, PASSAGES)
        assert got.pairs == want.pairs > len(PASSAGES)  # the long passage is scored as windows by both
        assert [t.to_dict() for t in got.truncation] == [t.to_dict() for t in want.truncation]
        for g, w in zip(got.window_scores, want.window_scores, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    # a batch smaller than the export's example and a single pair: the axes are dynamic
    np.testing.assert_allclose(
        onnx_reranker.score("trash", PASSAGES[:1]).scores, torch_rr.score("trash", PASSAGES[:1]).scores, atol=1e-5
    )


def test_export_is_cached_beside_the_model_and_keyed_by_weights(
    onnx_model_dir: Path, onnx_reranker: CrossEncoderReranker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = onnx_reranker.onnx_path
    assert path is not None and path.parent == onnx_model_dir / "onnx" and path.is_file()
    assert onnx_reranker.onnx_exported
    assert onnx_reranker.device == "cpu" and onnx_reranker.version.endswith("+onnx")

    def refuse(*_: Any, **__: Any) -> Path:
        raise AssertionError("exported again although a file with the same weights exists")

    monkeypatch.setattr(onnx_export, "export_onnx", refuse)
    again = CrossEncoderReranker(str(onnx_model_dir), backend="onnx")
    again.warm_up()
    assert again.onnx_path == path and not again.onnx_exported
    monkeypatch.undo()

    # the same weights copied elsewhere get the same key; changed weights get another file
    copy = tmp_path / "copy"
    shutil.copytree(onnx_model_dir, copy, ignore=shutil.ignore_patterns("onnx"))
    import torch
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(str(copy))
    assert onnx_export.cache_key(model) == path.name.removeprefix("es_rag-").removesuffix(".onnx")
    with torch.no_grad():
        model.classifier.bias.add_(1.0)
    model.save_pretrained(str(copy))
    before = CrossEncoderReranker(str(copy)).version
    changed = CrossEncoderReranker(str(copy), backend="onnx")
    changed.warm_up()
    assert CrossEncoderReranker(str(copy)).version == before  # an export beside the weights is not a new model
    assert changed.onnx_exported and changed.onnx_path is not None
    assert changed.onnx_path.parent == copy / "onnx" and changed.onnx_path.name != path.name
    shift = np.asarray(changed.score("trash", PASSAGES).scores) - np.asarray(
        onnx_reranker.score("trash", PASSAGES).scores
    )
    np.testing.assert_allclose(shift, 1.0, atol=1e-4)  # the new file has the new bias


def test_hub_models_and_read_only_dirs_export_to_the_user_cache(
    onnx_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(onnx_export.CACHE_ENV, str(cache))
    assert onnx_export.cache_path("cross-encoder/some-hub-model", "k") == cache / "es_rag-k.onnx"
    assert onnx_export.cache_path(str(onnx_model_dir), "k") == onnx_model_dir / "onnx" / "es_rag-k.onnx"
    readonly = tmp_path / "ro"
    shutil.copytree(onnx_model_dir, readonly, ignore=shutil.ignore_patterns("onnx"))
    readonly.chmod(0o555)
    try:
        if _writable(readonly):  # root ignores the mode bits
            pytest.skip("this user can write into a 0555 directory")
        assert onnx_export.cache_path(str(readonly), "k") == cache / "es_rag-k.onnx"
    finally:
        readonly.chmod(0o755)


def _writable(folder: Path) -> bool:
    try:
        (folder / "probe").write_text("x")
    except OSError:
        return False
    (folder / "probe").unlink()
    return True


def test_onnx_backend_runs_on_the_cpu_only(onnx_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="rerank_backend onnx: runs on the CPU, not 'cuda'"):
        _ = CrossEncoderReranker(str(onnx_model_dir), backend="onnx", device="cuda").device
