"""The query encoder a search runs without torch: a sentence-transformers model exported once to ONNX.

A cold ``es-rag search`` spent most of its 10 s importing torch and transformers to embed one query (issue 46). A
search embeds queries only, one at a time, so es_rag runs them through onnxruntime instead:

* **What is exported.** A sentence-transformers directory whose modules are a ``Transformer``, a mean ``Pooling`` and
  optionally ``Normalize`` (all-MiniLM-L6-v2 and most sentence-transformers bi-encoders), with a ``tokenizer.json``,
  no lowercasing of its own and no default prompt (:func:`exportable`). Its transformer, the mean pooling and the L2
  normalisation are one fp32 graph (``torch.onnx.export``, the ``torch.export``-based exporter, as the cross-encoder's
  :mod:`es_rag.cross_encoder.onnx_export`); the tokens come from :class:`~es_rag.encoders.raw_tokenizer.RawTokenizer`,
  truncated to the model's ``max_seq_length`` as sentence-transformers truncates them.
* **Same vectors.** Before an export is kept, it embeds :data:`PROBES` (short, accented, CJK, padded with white
  space, longer than the model reads) and every vector must equal sentence-transformers' own within
  :data:`TOLERANCE` (measured: 1.2e-7 on all-MiniLM-L6-v2); else nothing is written and searches keep torch. So a
  search finds the hits it found with torch (``benchmarks/cold_search.py`` compares them).
* **When.** ``es-rag ingest`` (embedded index, or client-side vectors) writes the export once per model after its
  documents are stored (about 8 s for all-MiniLM-L6-v2, on 2 cores); ``--query-runtime onnx`` exports at the first
  search when there is none. ``ES_RAG_ONNX_EXPORT=0`` never writes one (read-only installs; the test suite, whose
  models are throwaway).
* **Where, and checked.** ``$ES_RAG_ONNX_CACHE`` or ``~/.cache/es_rag/onnx``: ``query-<key>.onnx`` and
  ``query-<key>.json``, ``key`` a digest of the model directory's files (names, sizes, modification times) and
  :data:`EXPORT_VERSION`: retrained weights get a new export. The JSON records the graph's size and CRC-32, checked at
  every load, and a probe vector, checked too: a damaged or foreign file is not used (the search runs on torch and
  says why in its trace) and the next ingest writes it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.cache_files import file_crc32
from es_rag.encoders.onnx_graph import export_graph, input_names, missing_modules
from es_rag.encoders.raw_tokenizer import RawTokenizer, has_raw_tokenizer
from es_rag.encoders.threads import runtime_threads
from es_rag.errors import ModelLoadError

EXPORT_VERSION = "1"
"""Bumped whenever the export recipe changes: older exports are not reused."""
CACHE_ENV = "ES_RAG_ONNX_CACHE"
EXPORT_ENV = "ES_RAG_ONNX_EXPORT"
"""``0`` (or ``false``/``no``/``off``): never write a query-encoder export."""
TOLERANCE = 1e-4
"""Largest difference, per vector component, between an export's vectors and sentence-transformers' own."""
PROBES = (
    "Which mountain is the highest peak of the Andes?",
    "  naïve café — Straße, ÉCOLE  ",
    "検索拡張生成 (RAG) とは何ですか",
    "E1042 unbelievably-long_identifiers v2.3.1",
    "the quick brown fox " * 200,
)
_PROBE_INDEX = 0
"""The probe whose vector the export's JSON keeps, checked at every load."""
_MEAN_POOLING = {
    "pooling_mode_mean_tokens": True,
    "pooling_mode_cls_token": False,
    "pooling_mode_max_tokens": False,
    "pooling_mode_mean_sqrt_len_tokens": False,
}
"""A mean ``Pooling`` as sentence-transformers before 6 saves it (6 saves ``"pooling_mode": "mean"``)."""


def export_enabled() -> bool:
    """False when ``ES_RAG_ONNX_EXPORT`` says not to write exports."""
    return os.environ.get(EXPORT_ENV, "").strip().lower() not in ("0", "false", "no", "off")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


@dataclass(frozen=True)
class QuerySpec:
    """What a search needs to know of an exported model without loading it (from the export's record)."""

    folder: Path
    max_seq_length: int
    dims: int


def exportable(folder: str | Path) -> bool:
    """Whether a sentence-transformers directory can run as an ONNX query encoder (see the module doc: Transformer +
    mean Pooling [+ Normalize], a ``tokenizer.json``, no lowercasing of its own, no default prompt). Read from its
    files, as sentence-transformers 3 to 6 write them.

    Args:
        folder: A local model directory.
    """
    root = Path(folder)
    modules = _json(root / "modules.json")
    if not isinstance(modules, list) or not has_raw_tokenizer(root):
        return False
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return False
    if str(modules[0].get("path", "")) not in ("", "."):
        return False
    pooling = _json(root / str(modules[1].get("path", "")) / "config.json")
    if not isinstance(pooling, dict):
        return False
    if "pooling_mode" in pooling:
        if pooling["pooling_mode"] != "mean":
            return False
    elif any(bool(pooling.get(k)) != v for k, v in _MEAN_POOLING.items()):
        return False
    if (_json(root / "sentence_bert_config.json") or {}).get("do_lower_case"):
        return False
    prompts = _json(root / "config_sentence_transformers.json") or {}
    return not (isinstance(prompts, dict) and prompts.get("default_prompt_name"))


def fingerprint(folder: str | Path) -> str:
    """The export key of a model directory: its files' names, sizes and modification times, and
    :data:`EXPORT_VERSION` (24 hex digits)."""
    root = Path(folder).resolve()
    digest = hashlib.sha256(f"es_rag-query-export-{EXPORT_VERSION}\n{root}\n".encode())
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if f.is_file() and rel.parts[0] != "onnx" and not rel.parts[0].startswith("."):
            st = f.stat()
            digest.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def export_paths(folder: str | Path) -> tuple[Path, Path]:
    """``(graph, record)`` of a model directory's export in ``$ES_RAG_ONNX_CACHE`` or ``~/.cache/es_rag/onnx``."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "es_rag" / "onnx")
    key = fingerprint(folder)
    return root / f"query-{key}.onnx", root / f"query-{key}.json"


class OnnxQueryEncoder:
    """An exported query encoder (see the module doc): :meth:`encode` gives the unit vectors sentence-transformers
    gives, from onnxruntime on the CPU.

    Args:
        folder: The model directory (its ``tokenizer.json``).
        graph: The ``.onnx`` file.
        record: Its JSON record (size, CRC-32, length limit, dimension, probe vector).
        check_probe: Check the probe vector (an export being made checks every probe itself).

    Raises:
        ModelLoadError: The export is missing, damaged, or does not reproduce its probe vector.
    """

    def __init__(self, folder: Path, graph: Path, record: Path, *, check_probe: bool = True) -> None:
        info = _json(record)
        if not isinstance(info, dict) or not graph.is_file():
            raise ModelLoadError(f"{graph}: no query-encoder export")
        try:
            spec = QuerySpec(Path(folder), int(info["max_seq_length"]), int(info["dims"]))
        except (KeyError, TypeError, ValueError):
            raise ModelLoadError(f"{record}: not a query-encoder record") from None
        if graph.stat().st_size != info.get("bytes") or file_crc32(graph) != info.get("crc32"):
            raise ModelLoadError(f"{graph}: damaged (its size or CRC-32 differs from {record.name}'s)")
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = runtime_threads()
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelLoadError(f"{graph}: onnxruntime cannot load it: {type(exc).__name__}: {exc}") from exc
        self.spec = spec
        self.path = graph
        self.tokenizer = RawTokenizer(spec.folder)
        self._inputs = [i.name for i in self.session.get_inputs()]
        probe = np.asarray(info.get("probe", []), dtype=np.float32)
        got = self.encode([PROBES[_PROBE_INDEX]])[0] if check_probe else probe
        if probe.shape != got.shape or float(np.abs(probe - got).max()) > TOLERANCE:
            raise ModelLoadError(f"{graph}: does not reproduce its probe vector (damaged or from another model)")

    @property
    def dims(self) -> int:
        """Vector dimension."""
        return self.spec.dims

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts`` (float32, one row each).

        Args:
            texts: Texts, each cut to the model's ``max_seq_length`` tokens.
        """
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        enc = self.tokenizer(texts, truncation=True, max_length=self.spec.max_seq_length)
        feats = self.tokenizer.pad({"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"]})
        (vectors,) = self.session.run(["sentence_embedding"], {n: feats[n] for n in self._inputs})
        return np.asarray(vectors, dtype=np.float32)


def load_export(folder: str | Path) -> OnnxQueryEncoder:
    """The export of a model directory.

    Raises:
        ModelLoadError: The model is not exportable, or its export is missing, damaged or wrong.
    """
    if not exportable(folder):
        raise ModelLoadError(f"{folder}: not a model the ONNX query encoder runs (see es_rag/encoders/onnx_query.py)")
    graph, record = export_paths(folder)
    try:
        return OnnxQueryEncoder(Path(folder), graph, record)
    except OSError as exc:  # an unreadable cache: the search embeds with torch
        raise ModelLoadError(f"{graph}: cannot be read: {exc}") from exc


def export_query_encoder(st_model: Any, folder: str | Path) -> Path:
    """:func:`_export_query_encoder`, with a cache folder that cannot be written (read-only home, full disk) as a
    :class:`~es_rag.errors.ModelLoadError`: searches keep torch.

    Raises:
        ModelLoadError: As :func:`_export_query_encoder`, or the cache folder cannot be written.
    """
    try:
        return _export_query_encoder(st_model, folder)
    except OSError as exc:
        raise ModelLoadError(
            f"the query encoder's export cannot be written ({exc}); searches embed with torch"
        ) from exc


def _export_query_encoder(st_model: Any, folder: str | Path) -> Path:
    """Export a loaded sentence-transformers model (of :func:`exportable` shape) and keep it only when its vectors
    equal the model's on :data:`PROBES`; under a file lock, written to temporary files and renamed.

    Args:
        st_model: The loaded ``SentenceTransformer`` of ``folder``.
        folder: Its directory.

    Returns:
        The export's graph file.

    Raises:
        ModelLoadError: Not exportable, the exporter (or its ``onnx``/``onnxscript`` packages) failed, or the export's
            vectors differ from the model's.
    """
    from filelock import FileLock

    if not exportable(folder):
        raise ModelLoadError(f"{folder}: not a model the ONNX query encoder runs (see es_rag/encoders/onnx_query.py)")
    graph, record = export_paths(folder)
    graph.parent.mkdir(parents=True, exist_ok=True)
    dims = getattr(st_model, "get_embedding_dimension", None) or st_model.get_sentence_embedding_dimension
    with FileLock(str(graph) + ".lock"):
        try:
            OnnxQueryEncoder(Path(folder), graph, record)
            return graph  # another process exported it while this one waited
        except ModelLoadError:
            pass
        expected = np.asarray(st_model.encode(list(PROBES), normalize_embeddings=True), dtype=np.float32)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=graph.parent))
        try:
            staged = tmp / "query.onnx"
            _export(st_model, staged)
            info = {
                "model": str(Path(folder).resolve()),
                "bytes": staged.stat().st_size,
                "crc32": file_crc32(staged),
                "dims": int(dims()),
                "max_seq_length": int(st_model.max_seq_length),
                "probe": [float(v) for v in expected[_PROBE_INDEX]],
            }
            (tmp / "query.json").write_text(json.dumps(info) + "\n", encoding="utf-8")
            encoder = OnnxQueryEncoder(Path(folder), staged, tmp / "query.json", check_probe=False)
            worst = float(np.abs(encoder.encode(list(PROBES)) - expected).max())
            if worst > TOLERANCE:
                raise ModelLoadError(
                    f"{folder}: the ONNX export's vectors differ from the model's by {worst:.1e} (> {TOLERANCE}); "
                    "searches keep torch"
                )
            os.replace(staged, graph)
            os.replace(tmp / "query.json", record)
        finally:
            for leftover in tmp.glob("*"):
                leftover.unlink()
            tmp.rmdir()
    return graph


def _export(st_model: Any, target: Path) -> None:
    """``torch.onnx.export`` of the transformer with mean pooling and L2 normalisation (inputs: ``input_ids``,
    ``attention_mask``, ``token_type_ids`` when the model takes them; output ``sentence_embedding``)."""
    missing = missing_modules(("onnx", "onnxscript"))
    if missing:
        raise ModelLoadError(f"exporting the query encoder needs {', '.join(missing)}: pip install 'es-rag[onnx]'")
    import torch

    inner = st_model[0].auto_model
    if inner.device.type != "cpu":
        raise ModelLoadError(f"the query encoder is exported from a model on the CPU, not on {inner.device.type}")
    names = input_names(st_model.tokenizer)

    class _Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            hidden = self.inner(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    example = st_model.tokenizer(
        ["an example query", "a second, longer example query"], padding=True, return_tensors="pt"
    )
    args = tuple(example[n] for n in names)
    export_graph(_Pooled(), inner, args, names, "sentence_embedding", target, what="the query encoder")
