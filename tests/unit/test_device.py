"""Device selection (issue 20): ``--device auto|cpu|cuda|mps`` and ``--precision fp32|fp16`` for the embedding model
and the cross-encoder. CI has no GPU: the resolution logic is tested by monkeypatching what torch reports, the models
themselves load on the CPU; a machine with CUDA runs ``test_cuda_when_present``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from es_rag.cli import build_parser
from es_rag.cli.options import settings_from_args
from es_rag.cross_encoder.model import CrossEncoderReranker
from es_rag.encoders.device import resolve_device
from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.errors import ConfigError
from es_rag.settings import Device, Precision, Settings
from es_rag.wiring import build_reranker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """What torch reports, set per test: ``gpus["cuda"] = True`` makes ``torch.cuda.is_available()`` true."""
    seen = {"cuda": False, "mps": False}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: seen["cuda"])
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: seen["mps"])
    return seen


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(True, True, "cuda"), (True, False, "cuda"), (False, True, "mps"), (False, False, "cpu")],
)
def test_auto_prefers_cuda_then_mps_then_cpu(gpus: dict[str, bool], cuda: bool, mps: bool, expected: str) -> None:
    gpus.update(cuda=cuda, mps=mps)
    plan = resolve_device("auto")
    assert (plan.device, plan.precision, plan.requested) == (expected, "fp32", "auto")
    assert plan.reason.startswith("auto: ")
    assert plan.describe().startswith(f"{expected} fp32 (auto: ")


def test_explicit_devices_are_taken_as_asked(gpus: dict[str, bool]) -> None:
    gpus.update(cuda=True, mps=True)
    assert resolve_device("cpu").device == "cpu"  # cpu even where a GPU is visible
    assert resolve_device("cuda").device == "cuda"
    assert resolve_device("cuda:1").device == "cuda:1"
    assert resolve_device("MPS").device == "mps"
    assert resolve_device("cuda", "fp16").precision == "fp16"
    assert resolve_device("auto", "fp16").to_dict() == {
        "device": "cuda",
        "precision": "fp16",
        "requested": "auto",
        "reason": "auto: torch.cuda.is_available()",
    }


def test_asking_for_an_absent_accelerator_is_a_clear_error_not_a_silent_cpu(gpus: dict[str, bool]) -> None:
    with pytest.raises(
        ConfigError, match=r"device cuda: torch sees no CUDA device \(torch .*is_available\(\) is False"
    ):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match=r"device mps: torch sees no Apple GPU"):
        resolve_device("mps")


def test_fp16_only_on_cuda(gpus: dict[str, bool]) -> None:
    with pytest.raises(ConfigError, match="precision fp16: CUDA only, but the model runs on cpu"):
        resolve_device("auto", "fp16")  # auto resolved to the CPU here
    gpus["mps"] = True
    with pytest.raises(ConfigError, match="precision fp16: CUDA only, but the model runs on mps"):
        resolve_device("auto", "fp16")
    with pytest.raises(ConfigError, match="precision fp16: CUDA only, but device is cpu"):
        Settings(device="cpu", precision="fp16")  # refused when the settings are built, before any model
    with pytest.raises(ConfigError, match="precision fp16: CUDA only, but device is mps"):
        Settings(device="mps", precision="fp16")
    assert Settings(device="cuda", precision="fp16").encoder.precision is Precision.FP16  # checked at load time


@pytest.mark.parametrize("bad", ["gpu", "tpu", "cpu:0", "mps:1"])
def test_bad_device_names_list_the_valid_ones(bad: str) -> None:
    with pytest.raises(ConfigError, match="valid values: auto, cpu, cuda, mps"):
        resolve_device(bad)
    if ":" not in bad:
        with pytest.raises(ConfigError, match="device: invalid value"):
            Settings(device=bad)
    with pytest.raises(ConfigError, match="precision: invalid value 'fp8'"):
        resolve_device("cpu", "fp8")


def test_device_and_precision_are_command_line_options() -> None:
    for command in ("ingest", "search", "eval", "demo"):
        args = build_parser().parse_args(
            [command, *(["x"] if command in ("ingest", "search") else []), "--tenant", "t", "--device", "cpu"]
            if command in ("ingest", "search")
            else [command, "--device", "cpu", *(["--dataset", "d"] if command == "eval" else [])]
        )
        settings = settings_from_args(args, resolve=False)
        assert settings.encoder.device is Device.CPU
    assert Settings().encoder.device is Device.AUTO and Settings().encoder.precision is Precision.FP32


def test_models_load_on_the_resolved_device_and_report_it(
    gpus: dict[str, bool], tiny_bi_encoder: Path, tiny_cross_encoder: Path
) -> None:
    emb = SentenceTransformerEmbedder(str(tiny_bi_encoder))  # auto
    emb.warm_up()
    assert emb.device == "cpu" and str(emb.model.device) == "cpu"
    assert emb.device_plan.reason == "auto: no CUDA or MPS device visible to torch"
    rr = build_reranker(Settings(rerank_model=str(tiny_cross_encoder), device="cpu"))
    assert rr is not None
    rr.warm_up()
    assert rr.device == "cpu" and str(rr.model.device) == "cpu"
    assert rr.device_plan.describe() == "cpu fp32 (requested)"
    # cuda asked on a machine without it: the error surfaces before any weight is read
    with pytest.raises(ConfigError, match="device cuda: torch sees no CUDA device"):
        SentenceTransformerEmbedder(str(tiny_bi_encoder), device="cuda").warm_up()
    with pytest.raises(ConfigError, match="device cuda: torch sees no CUDA device"):
        CrossEncoderReranker(str(tiny_cross_encoder), device="cuda").warm_up()


def test_int8_reranker_runs_on_the_cpu_whatever_auto_would_pick(
    gpus: dict[str, bool], tiny_cross_encoder: Path
) -> None:
    gpus["cuda"] = True
    assert CrossEncoderReranker(str(tiny_cross_encoder), backend="int8").device == "cpu"
    with pytest.raises(ConfigError, match="rerank_backend int8: runs on the CPU, not 'cuda'"):
        _ = CrossEncoderReranker(str(tiny_cross_encoder), backend="int8", device="cuda").device


def test_auto_reranker_backend_is_int8_on_the_cpu_and_torch_on_an_accelerator(
    gpus: dict[str, bool], tiny_cross_encoder: Path
) -> None:
    on_cpu = CrossEncoderReranker(str(tiny_cross_encoder), backend="auto", device="cpu")
    assert on_cpu.backend == "int8" and on_cpu.version.endswith("+int8")
    gpus["cuda"] = True
    assert CrossEncoderReranker(str(tiny_cross_encoder), backend="auto").backend == "torch"
    assert CrossEncoderReranker(str(tiny_cross_encoder), backend="auto", device="cpu").backend == "int8"


def test_encode_pool_is_cpu_parallelism(gpus: dict[str, bool], tiny_bi_encoder: Path) -> None:
    gpus["cuda"] = True
    with pytest.raises(ConfigError, match="encode_workers 2: the encoding pool parallelises over CPU cores"):
        _ = SentenceTransformerEmbedder(str(tiny_bi_encoder), encode_workers=2).device


def test_the_trace_names_the_device(tiny_bi_encoder: Path) -> None:
    from es_rag.embedded.backend import EmbeddedBackend
    from es_rag.filters import SearchFilter
    from es_rag.pipeline import RagPipeline

    emb = SentenceTransformerEmbedder(str(tiny_bi_encoder), device="cpu")
    settings = Settings(vector_dims=emb.dims, rerank_model="none")
    pipe = RagPipeline(EmbeddedBackend(None, dims=emb.dims), embedder=emb, settings=settings, tokenizer=emb.tokenizer())
    trace = pipe.search("anything", SearchFilter("t")).trace
    record = trace.record("embed_query")
    assert record is not None and record.info["device"] == "cpu fp32 (requested)"


def test_no_code_path_is_hard_wired_to_the_cpu() -> None:
    """Every model of the package loads on the resolved device: no literal ``device="cpu"`` default or argument."""
    offenders = []
    for path in sorted((ROOT / "es_rag").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"device\s*[:=][^=\n]*[\"']cpu[\"']", line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the device tool lends one)")
def test_cuda_when_present(tiny_bi_encoder: Path) -> None:
    cpu = SentenceTransformerEmbedder(str(tiny_bi_encoder), device="cpu").embed_documents(["a b c", "d e f"])
    gpu = SentenceTransformerEmbedder(str(tiny_bi_encoder))  # auto picks cuda
    assert gpu.device == "cuda"
    np.testing.assert_allclose(gpu.embed_documents(["a b c", "d e f"]), cpu, atol=1e-4)
    half = SentenceTransformerEmbedder(str(tiny_bi_encoder), precision="fp16")
    np.testing.assert_allclose(half.embed_documents(["a b c", "d e f"]), cpu, atol=2e-2)


@pytest.mark.slow
def test_encode_pool_gives_the_single_process_vectors(tiny_bi_encoder: Path) -> None:
    """``--encode-workers 2``: sentence-transformers' multi-process pool (two spawned CPU workers) encodes the same
    vectors as this process, in the same order, and stops with the ingest."""
    texts = [
        f"passage {i}: " + " ".join(["alpha", "beta", "gamma", "delta"][: 1 + i % 4] * (1 + i % 7)) for i in range(37)
    ]
    single = SentenceTransformerEmbedder(str(tiny_bi_encoder), device="cpu").embed_documents(texts)
    pooled = SentenceTransformerEmbedder(str(tiny_bi_encoder), device="cpu", encode_workers=2)
    try:
        first = pooled.embed_documents(texts)
        assert pooled._pool is not None and len(pooled._pool["processes"]) == 2
        again = pooled.embed_documents(texts[:5])  # the pool is reused, not restarted
        np.testing.assert_allclose(first, single, rtol=0, atol=1e-6)
        np.testing.assert_allclose(again, single[:5], rtol=0, atol=1e-6)
        np.testing.assert_allclose(pooled.embed_query(texts[3]), single[3], rtol=0, atol=1e-6)  # in-process
    finally:
        pooled.stop_pool()
    assert pooled._pool is None
