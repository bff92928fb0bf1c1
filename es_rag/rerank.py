"""Cross-encoder reranking (sentence-transformers ``CrossEncoder``), loaded lazily.

The reranker scores a dedicated ``ranking_text`` (title, section path, version, content), never
raw JSON (seed 002 §18). Raw scores are kept in ``semantic_score``; inputs longer than the model's
limit are truncated by the model and flagged in ``truncated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from es_rag.errors import ModelLoadError
from es_rag.hub import hub_reachable
from es_rag.models import Hit

RANKING_TEXT_VERSION = "rt-1"


def ranking_text(hit: Hit) -> str:
    """The text the cross-encoder sees for one hit.

    Args:
        hit: The candidate.
    """
    lines = []
    if hit.title:
        lines.append(f"Title: {hit.title}")
    if hit.heading_path:
        lines.append("Section: " + " > ".join(hit.heading_path))
    if hit.source_version:
        lines.append(f"Version: {hit.source_version}")
    lines.append("Content:")
    lines.append(hit.text)
    return "\n".join(lines)


class CrossEncoderReranker:
    """Pointwise cross-encoder. ``__init__`` stores settings; :meth:`warm_up` loads the model.

    Args:
        model: Hub name or local directory of a cross-encoder.
        batch_size: Pairs per forward pass.
        max_length: Token limit of one (query, passage) pair; None = the model's own.
        device: Torch device.
    """

    def __init__(self, model: str, *, batch_size: int = 32, max_length: int | None = None, device: str = "cpu") -> None:
        self.name = model
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self._model: Any = None

    def warm_up(self) -> None:
        """Load the model (safe to call twice).

        Raises:
            ModelLoadError: When the model cannot be loaded (no hub, missing directory, bad files).
        """
        if self._model is not None:
            return
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:  # pragma: no cover - core dependency
            raise ModelLoadError("sentence-transformers is not installed: pip install es-rag") from exc
        from es_rag.embedding import quiet_model_loading

        quiet_model_loading()
        kwargs: dict[str, Any] = {"device": self.device}
        if self.max_length is not None:
            kwargs["max_length"] = self.max_length
        if not Path(self.name).is_dir():
            # A hub name: use the local cache when it has the model, else the hub if it answers.
            try:
                self._model = CrossEncoder(self.name, local_files_only=True, **kwargs)
                return
            except Exception:
                if not hub_reachable():
                    raise ModelLoadError(
                        f"cannot load cross-encoder {self.name!r}: not in the local model cache and the model "
                        "hub is unreachable (pass a local model directory, e.g. one trained with "
                        "`es-rag train-reranker`)"
                    ) from None
        try:
            self._model = CrossEncoder(self.name, **kwargs)
        except Exception as exc:
            raise ModelLoadError(f"cannot load cross-encoder {self.name!r}: {type(exc).__name__}: {exc}") from exc

    @property
    def model(self) -> Any:
        """The loaded CrossEncoder."""
        self.warm_up()
        return self._model

    def _limit(self) -> int:
        limit = self.model.max_length
        if limit is None:
            limit = getattr(self.model.tokenizer, "model_max_length", 512)
        return int(min(int(limit), 4096))

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """Score every hit against ``query``; returns hits sorted by ``semantic_score``, best first.

        Args:
            query: The user's query.
            hits: Candidates (order is the tie-break: equal scores keep the fused order).
        """
        if not hits:
            return []
        texts = [ranking_text(h) for h in hits]
        model = self.model
        tok = model.tokenizer
        limit = self._limit()
        encoded = tok([query] * len(texts), texts, truncation=False, add_special_tokens=True, verbose=False)
        truncated = [len(ids) > limit for ids in encoded["input_ids"]]
        scores = model.predict(
            [(query, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        scored = [
            h.replace(semantic_score=float(s), reranker_model=self.name, truncated=t)
            for h, s, t in zip(hits, scores, truncated, strict=True)
        ]
        order = sorted(range(len(scored)), key=lambda i: (-scored[i].semantic_score, i))  # type: ignore[operator]
        return [scored[i] for i in order]
