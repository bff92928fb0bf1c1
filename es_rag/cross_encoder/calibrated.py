"""A cross-encoder's calibration: raw scores (logits) to a per-model calibrated relevance, and the file that holds it
beside the model (``es_rag_calibration.json``). Re-exported by :mod:`es_rag.cross_encoder.model`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError

CALIBRATION_FILE = "es_rag_calibration.json"
"""Optional file in a cross-encoder directory: ``{"temperature": T, "bias": b, "threshold": t}`` fitted
for that model (e.g. by ``es-rag train-reranker`` on a dev split). Settings override its values."""


@dataclass(frozen=True)
class Calibration:
    """Maps raw cross-encoder scores to calibrated relevance: ``sigmoid((raw - bias) / temperature)``.

    Args:
        method: ``sigmoid`` or ``none`` (calibrated = None: nothing absolute is claimed).
        temperature: Divides the shifted logit (> 0).
        bias: Subtracted from the logit.
        threshold: Calibrated relevance a hit needs to count as evidence; None = no absolute threshold.
        source: Where the values came from (``settings``, the calibration file, ``default``).
    """

    method: str = "sigmoid"
    temperature: float = 1.0
    bias: float = 0.0
    threshold: float | None = None
    source: str = "default"

    def __post_init__(self) -> None:
        if self.method not in ("sigmoid", "none"):
            raise ConfigError(f"calibration method: invalid value {self.method!r}; valid values: sigmoid, none")
        if not self.temperature > 0:
            raise ConfigError(f"calibration temperature: must be > 0, got {self.temperature}")
        if self.threshold is not None and self.method == "none":
            raise ConfigError("calibration threshold: needs a calibration method (sigmoid), not 'none'")

    def apply(self, raw: float) -> float | None:
        """Calibrated relevance of one raw score (None with method ``none``).

        Args:
            raw: Raw model score (logit).
        """
        if self.method == "none":
            return None
        z = (raw - self.bias) / self.temperature
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the trace."""
        return {
            "method": self.method,
            "temperature": self.temperature,
            "bias": self.bias,
            "threshold": self.threshold,
            "source": self.source,
        }


def load_calibration(
    model_dir: str | Path | None,
    *,
    method: str = "sigmoid",
    temperature: float | None = None,
    bias: float | None = None,
    threshold: float | None = None,
) -> Calibration:
    """Calibration from explicit values, falling back to ``es_rag_calibration.json`` in the model dir.

    Args:
        model_dir: Cross-encoder directory (None or a hub name: no file is read).
        method: ``sigmoid`` or ``none``.
        temperature: Explicit temperature (wins over the file).
        bias: Explicit bias (wins over the file).
        threshold: Explicit threshold (wins over the file).

    Raises:
        ConfigError: On an unreadable calibration file or invalid values.
    """
    stored: dict[str, Any] = {}
    path = Path(model_dir) / CALIBRATION_FILE if model_dir is not None else None
    if path is not None and path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: unreadable calibration file: {exc}") from exc
    explicit = temperature is not None or bias is not None or threshold is not None
    source = "settings" if explicit else (str(path) if stored else "default")
    if method == "none":
        return Calibration(method="none", source=source)
    return Calibration(
        method=method,
        temperature=float(temperature if temperature is not None else stored.get("temperature", 1.0)),
        bias=float(bias if bias is not None else stored.get("bias", 0.0)),
        threshold=threshold if threshold is not None else stored.get("threshold"),
        source=source,
    )
