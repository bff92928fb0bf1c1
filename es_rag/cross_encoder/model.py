"""Cross-encoder reranking (sentence-transformers ``CrossEncoder``), loaded lazily, batched.

* The model sees a dedicated :func:`ranking_text` (title, section path, document type, version,
  content), never raw JSON or HTML markup (seed 002 §18).
* Each (query, passage) pair is tokenised **once** (fast tokenizer, whole batch); truncation and
  windowing are done on those token ids, and the padded ids go straight to the model's forward pass.
* A passage longer than the model's limit is either truncated (strategy ``truncate``: head of the
  passage kept) or scored as overlapping windows that each keep the ranking_text header, aggregated
  with ``max`` or ``mean_top_m`` (strategy ``windows``). Every hit gets a truncation record:
  original tokens, model tokens, strategy, windows.
* Scores are kept raw (model logits, no activation) in ``rerank_score``; :class:`Calibration`
  maps them to a per-model calibrated relevance (sigmoid with temperature and bias). A threshold is
  only ever per model (settings or the model directory's ``es_rag_calibration.json``), never a
  universal 0.5.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from es_rag.cross_encoder.calibrated import CALIBRATION_FILE as CALIBRATION_FILE
from es_rag.cross_encoder.calibrated import Calibration as Calibration
from es_rag.cross_encoder.calibrated import load_calibration as load_calibration
from es_rag.cross_encoder.shipped import (
    MODEL_FILE,
    SHIPPED_EN,
    OnnxOnlyModel,
    is_onnx_only,
    resolve_reranker_name,
    shipped_path,
)
from es_rag.encoders.device import DevicePlan, resolve_device
from es_rag.encoders.hub import hub_cached, hub_reachable
from es_rag.encoders.tokenizer import tokenizer_lock
from es_rag.errors import ConfigError, ModelLoadError
from es_rag.records import Hit, is_content_digest
from es_rag.settings import Settings
from es_rag.settings.base import DEFAULT_RERANKER_MODEL

RANKING_TEXT_VERSION = "rt-4"
_JSONISH_RE = re.compile(r"^\s*[\[{]")


def ranking_text(hit: Hit, *, document_type: str | None = None) -> tuple[str, str]:
    """The header and content the cross-encoder sees for one hit (``header + content`` is the passage).

    Title, heading path, document type and version go in the header; internal ids, vectors, hashes
    and offsets never do (a version that is a content digest, :func:`is_content_digest`, is left out).
    The content is the hit's :attr:`~es_rag.records.Hit.display_text`: for HTML its visible text (no tags or
    entities, and no contextual prefix, so title and section are not said twice), else its text. A chunk whose
    text is a JSON object/array is passed as its text (it is the chunk's content, not a database record).

    Args:
        hit: The candidate.
        document_type: Document type label; default: the chunk's ``meta.doc_type``.

    Returns:
        ``(header, content)``; the header ends with ``"Content:\\n"``.
    """
    lines = []
    if hit.title:
        lines.append(f"Title: {hit.title}")
    if hit.heading_path:
        lines.append("Section: " + " > ".join(hit.heading_path))
    if document_type is None:  # the declared type (es_rag.metadata: meta.doc_type), when the chunk has one
        declared = hit.meta.get("doc_type") if hit.meta else None
        document_type = ", ".join(declared) if isinstance(declared, list) else declared
    if document_type:
        lines.append(f"Document Type: {document_type}")
    if hit.source_version and not is_content_digest(hit.source_version):
        lines.append(f"Version: {hit.source_version}")
    lines.append("Content:")
    return "\n".join(lines) + "\n", hit.display_text


@dataclass(frozen=True)
class Truncation:
    """How one passage was fitted to the model's limit."""

    original_tokens: int
    model_tokens: int
    strategy: str
    windows: int = 1

    @property
    def truncated(self) -> bool:
        """True when some passage tokens were never seen by the model."""
        return self.strategy == "truncate" and self.model_tokens < self.original_tokens

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the trace."""
        return {
            "original_tokens": self.original_tokens,
            "model_tokens": self.model_tokens,
            "truncated": self.truncated,
            "truncation_strategy": self.strategy,
            "windows": self.windows,
        }


@dataclass
class RerankOutput:
    """Raw scores (input order), their truncation records and the window scores behind each."""

    scores: list[float]
    truncation: list[Truncation]
    window_scores: list[list[float]] = field(default_factory=list)
    pairs: int = 0


def aggregate(window_scores: Sequence[float], method: str = "max", top_m: int = 2) -> float:
    """One score from a passage's window scores: ``max`` or the mean of the ``top_m`` best.

    Args:
        window_scores: Raw score per window (at least one).
        method: ``max`` or ``mean_top_m``.
        top_m: How many windows ``mean_top_m`` averages (fewer if fewer exist).
    """
    if not window_scores:
        raise ConfigError("aggregate: no window scores")
    if method == "max":
        return float(max(window_scores))
    if method == "mean_top_m":
        best = sorted(window_scores, reverse=True)[: max(top_m, 1)]
        return float(sum(best) / len(best))
    raise ConfigError(f"aggregation: invalid value {method!r}; valid values: max, mean_top_m")


def plan_windows(n_passage: int, budget: int, header: int, *, stride_overlap: int = 32) -> list[tuple[int, int]]:
    """Token ranges of the content windows of one passage.

    The header (``header`` tokens at the start of the passage) is repeated in every window, so each
    window holds ``budget - header`` content tokens; consecutive windows overlap by
    ``min(stride_overlap, size // 4)`` tokens. A passage that fits gives one window.

    Args:
        n_passage: Passage tokens (header included).
        budget: Passage tokens the model can take next to the query.
        header: Header tokens at the start of the passage.
        stride_overlap: Overlap between windows, in tokens.

    Returns:
        ``(start, end)`` content token ranges (indices into the passage tokens, header excluded).
    """
    if n_passage <= budget:
        return [(header, n_passage)]
    size = budget - header
    if size < 8:  # header eats the budget: plain head truncation of the whole passage
        return [(header, header + max(budget - header, 0))]
    step = size - min(stride_overlap, size // 4)
    out = []
    start = header
    while True:
        end = min(start + size, n_passage)
        out.append((start, end))
        if end >= n_passage:
            return out
        start += step


class CrossEncoderReranker:
    """Pointwise cross-encoder. ``__init__`` stores settings; :meth:`warm_up` loads the model. :meth:`score` is
    thread-safe (it holds :func:`~es_rag.encoders.tokenizer.tokenizer_lock` of the model's tokenizer).

    Args:
        model: Hub name or local directory of a cross-encoder.
        batch_size: Pairs (windows) per forward pass.
        max_length: Token limit of one (query, passage) pair; None = the model's own.
        device: ``auto`` (cuda, else mps, else cpu), ``cpu``, ``cuda`` (or ``cuda:N``) or ``mps``; resolved when the
            model loads (:func:`~es_rag.encoders.device.resolve_device`).
        precision: ``fp32`` or ``fp16`` (CUDA only).
        long_text: ``windows`` or ``truncate`` for passages over the limit.
        aggregation: ``max`` or ``mean_top_m`` over window scores.
        top_m: ``m`` of ``mean_top_m``.
        backend: ``auto`` (``int8`` on the CPU, ``torch`` on an accelerator), ``torch``, ``int8`` (dynamic int8
            quantisation of the Linear layers, CPU) or ``onnx`` (the model exported once with ``torch.onnx.export``
            and run by onnxruntime on the CPU, :mod:`.onnx_export`; needs ``pip install 'es-rag[onnx]'``).
    """

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 32,
        max_length: int | None = None,
        device: str = "auto",
        precision: str = "fp32",
        long_text: str = "windows",
        aggregation: str = "max",
        top_m: int = 2,
        backend: str = "torch",
    ) -> None:
        if long_text not in ("windows", "truncate"):
            raise ConfigError(f"long_text: invalid value {long_text!r}; valid values: windows, truncate")
        backend = str(getattr(backend, "value", backend))
        if backend not in ("auto", "torch", "int8", "onnx"):
            raise ConfigError(f"backend: invalid value {backend!r}; valid values: auto, torch, int8, onnx")
        aggregate([0.0], aggregation, top_m)  # validates the aggregation name
        self.name = model
        """The model in use: as configured, or :data:`~.shipped.SHIPPED_EN` after the configured default could not
        be loaded (:attr:`substituted` says why)."""
        self.configured = model
        self.substituted: str | None = None
        """Why the shipped model replaced the configured one (None: it did not)."""
        self.batch_size = batch_size
        self.max_length = max_length
        self.requested_device = device
        self.precision = precision
        self._plan: DevicePlan | None = None
        self.long_text = long_text
        self.aggregation = aggregation
        self.top_m = top_m
        self.requested_backend = backend
        self._model: Any = None
        self._onnx: Any = None
        self.onnx_path: Path | None = None
        """The exported file the onnx backend runs (set when the model loads)."""
        self.onnx_exported = False
        """True when loading this reranker exported the ONNX file (False: a cached export was reused)."""
        self._version: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> CrossEncoderReranker:
        """A reranker for ``settings.rerank.model`` with the settings' batch, length, long-text,
        aggregation and backend options, on ``settings.encoder.device`` in ``settings.encoder.precision``.

        Args:
            settings: The settings (``reranker_model`` must be set).
        """
        if not settings.rerank.model:
            raise ConfigError("reranker_model: not set (reranking is disabled)")
        return cls(
            settings.rerank.model,
            batch_size=settings.rerank.batch_size,
            max_length=settings.rerank.max_length,
            device=settings.encoder.device,
            precision=settings.encoder.precision,
            long_text=settings.rerank.long_text,
            aggregation=settings.rerank.aggregation,
            top_m=settings.rerank.top_m,
            backend=settings.rerank.backend,
        )

    @property
    def device_plan(self) -> DevicePlan:
        """The resolved device and precision (resolved once, without loading the model). The int8 and onnx
        backends run on the CPU: ``auto`` resolves to ``cpu`` for them, and an explicit accelerator is an error; a
        model that ships as ONNX only (:func:`~.shipped.is_onnx_only`) runs on the CPU whatever was asked."""
        if self._plan is None:
            requested = self.requested_device
            if self.model_dir is not None and is_onnx_only(self.model_dir):
                requested = "cpu"  # a shipped model (ONNX only) runs on the CPU whatever the embedder's device
            elif self.requested_backend in ("int8", "onnx"):
                if str(requested).lower() not in ("auto", "cpu"):
                    raise ConfigError(
                        f"rerank_backend {self.requested_backend}: runs on the CPU, not {requested!r}; use --device cpu"
                    )
                requested = "cpu"
            self._plan = resolve_device(requested, self.precision)
        return self._plan

    @property
    def backend(self) -> str:
        """The runtime: the requested one, or for ``auto`` ``int8`` on the CPU and ``torch`` on an accelerator."""
        if self.model_dir is not None and is_onnx_only(self.model_dir):
            return "onnx"  # a shipped model has no torch weights
        if self.requested_backend == "auto":
            return "int8" if self.device_plan.device == "cpu" else "torch"
        return self.requested_backend

    @property
    def model_dir(self) -> str | None:
        """The local directory of the model in use (a shipped model's folder too), or None for a hub name."""
        path = resolve_reranker_name(self.name)
        return path if Path(path).is_dir() else None

    @property
    def may_substitute(self) -> bool:
        """True while the configured model is the default hub model and has not been loaded: loading it may put the
        shipped model in its place (:meth:`warm_up`)."""
        return self._model is None and self.configured == DEFAULT_RERANKER_MODEL and self.substituted is None

    @property
    def device(self) -> str:
        """The torch device the model runs on (``cpu``, ``cuda``, ``mps``)."""
        return self.device_plan.device

    # -- loading ---------------------------------------------------------------------------
    def _construct(self, name: str, **kwargs: Any) -> Any:
        from sentence_transformers import CrossEncoder

        from es_rag.encoders.threads import configure_torch_threads

        configure_torch_threads()  # one thread per CPU this process may use

        if self.backend == "onnx":
            from es_rag.cross_encoder.onnx_export import require_onnx

            require_onnx()  # before the (slow) model load
        model = CrossEncoder(name, **kwargs)
        if self.backend == "onnx":
            import torch

            from es_rag.cross_encoder.onnx_export import OnnxScorer, cached_onnx_model

            self.onnx_path, self.onnx_exported = cached_onnx_model(name, model.model, model.tokenizer)
            self._onnx = OnnxScorer(self.onnx_path, threads=torch.get_num_threads())
        if self.backend == "int8":
            import warnings

            import torch
            from torch.ao.quantization import quantize_dynamic

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)  # type: ignore[no-untyped-call]
        if self.device_plan.precision == "fp16":
            model.half()
        return model

    def warm_up(self) -> None:
        """Load the model (safe to call twice).

        Raises:
            ModelLoadError: When the model cannot be loaded (no hub, missing directory, bad files).
        """
        if self._model is not None:
            return
        try:
            self._load()
        except ModelLoadError as exc:
            shipped = shipped_path(SHIPPED_EN)
            if self.configured != DEFAULT_RERANKER_MODEL or shipped is None or not is_onnx_only(shipped):
                raise
            self.name, self._plan, self._version = SHIPPED_EN, None, None
            self.substituted = f"in place of {self.configured}, which cannot be loaded: {exc}"
            self._load()

    def _load(self) -> None:
        if self.model_dir is not None and is_onnx_only(self.model_dir):
            self._load_onnx_only(self.model_dir)
            return
        if not Path(self.name).is_dir() and not hub_cached(self.name) and not hub_reachable():
            # known before sentence-transformers (and torch) are imported: seconds a cold search would wait on
            raise self._unreachable()
        try:
            import sentence_transformers  # noqa: F401
        except ImportError as exc:  # pragma: no cover - core dependency
            raise ModelLoadError("sentence-transformers is not installed: pip install es-rag") from exc
        from es_rag.encoders.embedder import quiet_model_loading

        quiet_model_loading()
        kwargs: dict[str, Any] = {"device": self.device_plan.device}
        if self.max_length is not None:
            kwargs["max_length"] = self.max_length
        if not Path(self.name).is_dir():
            # A hub name: use the local cache when it has the model, else the hub if it answers.
            try:
                self._model = self._construct(self.name, local_files_only=True, **kwargs)
                return
            except ModelLoadError:
                raise
            except Exception:
                if not hub_reachable():
                    raise self._unreachable() from None
        try:
            self._model = self._construct(self.name, **kwargs)
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"cannot load cross-encoder {self.name!r}: {type(exc).__name__}: {exc}") from exc

    def _unreachable(self) -> ModelLoadError:
        return ModelLoadError(
            f"cannot load cross-encoder {self.name!r}: not in the local model cache and the model hub is unreachable "
            "(pass a local model directory, e.g. one trained with `es-rag train-reranker`)"
        )

    def _load_onnx_only(self, folder: str) -> None:
        """A shipped model: its tokenizer and config, and an onnxruntime session over its ``model.onnx``."""
        from es_rag.cross_encoder.onnx_export import OnnxScorer
        from es_rag.encoders.threads import runtime_threads

        threads = runtime_threads()  # torch's rule, without importing torch
        model = OnnxOnlyModel(folder, max_length=self.max_length)
        self._onnx = OnnxScorer(Path(folder) / MODEL_FILE, threads=threads)
        self.onnx_path = self._onnx.path
        self._model = model

    @property
    def model(self) -> Any:
        """The loaded CrossEncoder."""
        self.warm_up()
        return self._model

    @property
    def version(self) -> str:
        """Fingerprint of the loaded weights: a directory's file names, sizes and mtimes (its ``onnx/`` exports
        left out), or a hub commit hash; plus the backend (results of int8 and fp32 models must not share a cache)."""
        if self._version is None:
            digest = hashlib.sha256()
            path = Path(resolve_reranker_name(self.name))
            if path.is_dir():
                for f in sorted(path.rglob("*")):
                    if f.is_file() and f.relative_to(path).parts[0] != "onnx":  # exports of these weights
                        st = f.stat()
                        digest.update(f"{f.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
            else:
                config = getattr(self.model, "config", None)
                digest.update(str(getattr(config, "_commit_hash", None) or self.name).encode())
            fp16 = "+fp16" if self.device_plan.precision == "fp16" else ""  # fp16 scores differ in the last bits
            self._version = f"{digest.hexdigest()[:16]}+{self.backend}{fp16}"
        return self._version

    def tokenizer(self) -> Any:
        """The model's tokenizer as es_rag's :class:`~es_rag.encoders.tokenizer.HFTokenizer` (what the language fit
        check reads, :func:`es_rag.encoders.fit.language_misfit`)."""
        from es_rag.encoders.tokenizer import HFTokenizer

        return HFTokenizer(self.model.tokenizer, name=self.name, max_tokens=None)

    def limit(self) -> int:
        """Token limit of one (query, passage) pair, special tokens included."""
        model = self.model
        limit = self.max_length or getattr(model, "max_seq_length", None)
        if limit is None:
            limit = getattr(model.tokenizer, "model_max_length", 512)
        config = getattr(getattr(model, "model", None), "config", None)
        positions = getattr(config, "max_position_embeddings", None)
        if isinstance(positions, int) and positions > 0:
            limit = min(int(limit), positions)
        return int(min(int(limit), 4096))

    # -- scoring ---------------------------------------------------------------------------
    def score(self, query: str, passages: Sequence[tuple[str, str]]) -> RerankOutput:
        """Raw scores of ``query`` against each ``(header, content)`` passage, in input order.

        Every pair is tokenised once; windows and truncation slice those ids.

        Args:
            query: The user's query.
            passages: ``(header, content)`` per candidate (see :func:`ranking_text`).
        """
        if not passages:
            return RerankOutput(scores=[], truncation=[])
        with tokenizer_lock(self.model.tokenizer):  # one thread in the tokenizer and its pad() at a time
            return self._score(query, passages)

    def _score(self, query: str, passages: Sequence[tuple[str, str]]) -> RerankOutput:
        model = self.model
        tok = model.tokenizer
        limit = self.limit()
        texts = [h + c for h, c in passages]
        enc = tok(
            [query] * len(texts),
            texts,
            truncation=False,
            add_special_tokens=True,
            return_offsets_mapping=True,
            verbose=False,
        )
        has_types = "token_type_ids" in enc
        inputs: list[tuple[list[int], list[int] | None]] = []
        owner: list[int] = []
        records: list[Truncation] = []
        for i, (header, _content) in enumerate(passages):
            ids = list(enc["input_ids"][i])
            types = list(enc["token_type_ids"][i]) if has_types else None
            seq = enc.sequence_ids(i)
            p_pos = [j for j, s in enumerate(seq) if s == 1]
            if not p_pos:
                raise ModelLoadError(f"cross-encoder {self.name!r}: its tokenizer does not encode text pairs")
            first, last = p_pos[0], p_pos[-1] + 1
            n_passage = last - first
            budget = limit - (len(ids) - n_passage)
            if budget < 1:
                raise ConfigError(f"query too long for the reranker: {len(ids) - n_passage} tokens, limit {limit}")
            offsets = enc["offset_mapping"][i]
            n_header = sum(1 for j in p_pos if offsets[j][1] <= len(header))
            if n_header > budget // 2:  # a header that eats the budget is not repeated
                n_header = 0
            if n_passage <= budget:
                spans, keep_header, strategy = [(first, last)], False, "none"
            elif self.long_text == "truncate":
                spans, keep_header, strategy = [(first + n_header, first + budget)], True, "truncate"
            else:
                spans = [(first + a, first + b) for a, b in plan_windows(n_passage, budget, n_header)]
                keep_header = True
                strategy = "windows"
            model_tokens = 0
            for a, b in spans:
                head = list(range(first, first + n_header)) if keep_header else []
                body = head + list(range(a, b))
                idx = list(range(first)) + body + list(range(last, len(ids)))
                inputs.append(([ids[j] for j in idx], [types[j] for j in idx] if types is not None else None))
                owner.append(i)
                model_tokens = max(model_tokens, len(body))
            records.append(Truncation(n_passage, model_tokens, strategy, len(spans)))
        raw = self._forward(inputs)
        per_hit: list[list[float]] = [[] for _ in passages]
        for i, s in zip(owner, raw, strict=True):
            per_hit[i].append(s)
        scores = [aggregate(w, self.aggregation, self.top_m) for w in per_hit]
        return RerankOutput(scores=scores, truncation=records, window_scores=per_hit, pairs=len(inputs))

    def _forward(self, inputs: Sequence[tuple[list[int], list[int] | None]]) -> list[float]:
        model = self.model
        tok = model.tokenizer
        order = sorted(range(len(inputs)), key=lambda j: -len(inputs[j][0]))
        out = [0.0] * len(inputs)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            feats: dict[str, Any] = {"input_ids": [inputs[j][0] for j in batch]}
            if inputs[batch[0]][1] is not None:
                feats["token_type_ids"] = [inputs[j][1] for j in batch]
            if self._onnx is not None:  # onnxruntime: numpy in, numpy out (a shipped model never imports torch)
                scores = np.asarray(self._onnx(tok.pad(feats, return_tensors="np")), dtype=np.float32)
            else:
                scores = self._torch_scores(tok.pad(feats, return_tensors="pt"))
            if scores.ndim > 1 and scores.shape[-1] != 1:
                raise ModelLoadError(
                    f"cross-encoder {self.name!r} has {scores.shape[-1]} labels; a relevance model has one"
                )
            for j, v in zip(batch, scores.reshape(-1), strict=True):
                out[j] = float(v)
        return out

    def _torch_scores(self, padded: Any) -> np.ndarray:
        import torch

        model = self.model
        model.eval()
        with torch.inference_mode():
            scores = model({k: v.to(model.device) for k, v in padded.items()})["scores"]
            return np.asarray(scores.float().cpu().numpy())

    def rerank(
        self, query: str, hits: Sequence[Hit], *, document_types: Sequence[str | None] | None = None
    ) -> list[Hit]:
        """Score every hit against ``query``; returns hits sorted by raw ``rerank_score``, best first.

        Args:
            query: The user's query.
            hits: Candidates (order is the tie-break: equal scores keep the fused order).
            document_types: Optional document type per hit for the ranking_text.
        """
        types = list(document_types) if document_types is not None else [None] * len(hits)
        result = self.score(query, [ranking_text(h, document_type=t) for h, t in zip(hits, types, strict=True)])
        return order_by_scores(hits, result, self.name)


def order_by_scores(hits: Sequence[Hit], result: RerankOutput, model_name: str) -> list[Hit]:
    """Hits with their raw scores and truncation flags, sorted best first (stable on ties).

    Args:
        hits: Candidates in the order they were scored.
        result: Scores in the same order.
        model_name: Recorded in ``reranker_model``.
    """
    scored = [
        h.replace(rerank_score=s, reranker_model=model_name, truncated=t.truncated)
        for h, s, t in zip(hits, result.scores, result.truncation, strict=True)
    ]
    keys = np.asarray(result.scores, dtype=np.float64)
    order = sorted(range(len(scored)), key=lambda i: (-keys[i], i))
    return [scored[i] for i in order]
