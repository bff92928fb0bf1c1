"""Rerank fusion and the reranker's safety verdict: how the cross-encoder's ranking meets the fused (first-stage)
ranking, and whether a model may rerank at all.

**Fusion** (:func:`fuse`), over the ``rerank_k`` head in fused order (fused rank ``f``, 1-based; reranker rank ``r``
by raw score, ties to the fused order), with ``w`` the reranker's weight:

* ``replace``: the reranker's order (the fused order only breaks ties);
* ``rrf``: ``w / (c + r) + (1 - w) / (c + f)`` (weighted reciprocal rank fusion, ``c`` the rank constant);
* ``interpolate``: ``w * p + (1 - w) * n``, ``p`` the calibrated reranker relevance (min-max normalised raw score
  when the calibration is ``none``) and ``n`` the fused score min-max normalised over the head (1 for the best,
  0 for the last; by fused rank when a hit has no fused score).

Ties go to the fused order. The method and ``w`` come from the settings, else from the model directory's
:data:`FUSION_FILE` (learned on held-out queries by ``es-rag train-reranker`` / ``es-rag calibrate``), else
``replace``.

**Safety** (:func:`refusal`): :data:`SAFETY_FILE` records, per checked configuration (the reranker alone,
``replace``, and the learned fusion), the paired-bootstrap confidence interval of nDCG@10(reranked) - nDCG@10(fused)
on held-out queries and its verdict: ``helps`` (lower bound > 0), ``hurts`` (upper bound < 0), else ``neutral``.
A configuration whose own check says ``hurts`` is refused; so is any configuration of a model that hurts on its
own unless that exact configuration was checked and ``helps``. A refused reranker keeps the fused order, and the
trace says why and how to override (``allow_harmful_reranker``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError

FUSION_FILE = "es_rag_fusion.json"
"""File in a cross-encoder directory: ``{"method": "rrf", "weight": 0.3, "rank_constant": 60, "fit": {...}}``."""
SAFETY_FILE = "es_rag_safety.json"
"""File in a cross-encoder directory: the safety checks (:func:`refusal`) with their numbers, data and date."""
METHODS = ("replace", "rrf", "interpolate")
DEFAULT_WEIGHT = 0.5
RANK_CONSTANT = 60
HELPS, NEUTRAL, HURTS = "helps", "neutral", "hurts"
OVERRIDE = "allow_harmful_reranker = true (--allow-harmful-reranker) reranks anyway"


@dataclass(frozen=True)
class FusionPlan:
    """How the rerank stage combines the reranker with the fused order.

    Args:
        method: ``replace``, ``rrf`` or ``interpolate``.
        weight: The reranker's weight in [0, 1] (``replace``: 1).
        rank_constant: ``c`` of the weighted RRF.
        source: Where method and weight came from (``settings``, the fusion file's path, ``default``).
    """

    method: str = "replace"
    weight: float = 1.0
    rank_constant: int = RANK_CONSTANT
    source: str = "default"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"rerank fusion: invalid value {self.method!r}; valid values: {', '.join(METHODS)}")
        if not 0.0 <= self.weight <= 1.0:
            raise ConfigError(f"rerank fusion weight: must be within [0, 1], got {self.weight}")
        if self.rank_constant < 1:
            raise ConfigError(f"rerank fusion rank_constant: must be >= 1, got {self.rank_constant}")

    def same(self, method: str, weight: float) -> bool:
        """Whether this plan is the configuration ``(method, weight)`` (``replace`` ignores the weight).

        Args:
            method: Fusion method.
            weight: Reranker weight.
        """
        if self.method != method:
            return False
        return method == "replace" or math.isclose(self.weight, weight, abs_tol=1e-9)

    def describe(self) -> str:
        """The plan in a few words for the trace path."""
        if self.method == "replace":
            return "replace"
        return f"{self.method} w={self.weight:g}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the trace."""
        return {
            "method": self.method,
            "weight": self.weight,
            "rank_constant": self.rank_constant,
            "source": self.source,
        }


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: unreadable {what} file: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {what} file must hold a JSON object")
    return data


def load_fusion(model_dir: str | Path | None, *, method: str | None = None, weight: float | None = None) -> FusionPlan:
    """The fusion plan: explicit values, else the model directory's :data:`FUSION_FILE`, else ``replace``.

    Args:
        model_dir: Cross-encoder directory (None or a hub name: no file is read).
        method: Explicit method (wins over the file).
        weight: Explicit reranker weight (wins over the file).

    Raises:
        ConfigError: On an unreadable fusion file or invalid values.
    """
    path = Path(model_dir) / FUSION_FILE if model_dir is not None else None
    stored = _read(path, "fusion") if path is not None and path.is_file() else {}
    chosen = str(method if method is not None else stored.get("method", "replace"))
    if weight is not None:
        w = float(weight)
    elif chosen == "replace":
        w = 1.0
    elif stored.get("method") == chosen and "weight" in stored:
        w = float(stored["weight"])
    else:
        w = DEFAULT_WEIGHT
    explicit = method is not None or weight is not None
    source = "settings" if explicit else (str(path) if stored else "default")
    if explicit and stored and (method is None or weight is None):
        source = f"settings + {path}"
    return FusionPlan(
        method=chosen,
        weight=1.0 if chosen == "replace" else w,
        rank_constant=int(stored.get("rank_constant", RANK_CONSTANT)),
        source=source,
    )


def _minmax(values: Sequence[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi - lo <= 0:
        return [1.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


@dataclass(frozen=True)
class Fused:
    """The fusion of one head: the order (indices into the head, best first) and each hit's inputs and result, in
    head (fused) order."""

    order: list[int]
    rerank_rank: list[int]
    combined: list[float]
    fused_norm: list[float] | None = None
    rerank_norm: list[float] | None = None
    inputs: str = ""


def fuse(
    plan: FusionPlan,
    raw: Sequence[float],
    calibrated: Sequence[float | None],
    fused_scores: Sequence[float | None],
) -> Fused:
    """Combine the reranker's scores with the fused order of one head (module docstring).

    Args:
        plan: Method and weight.
        raw: Raw reranker score per hit, in fused order.
        calibrated: Calibrated relevance per hit (None: calibration ``none``), in fused order.
        fused_scores: Fused (first-stage) score per hit (None: unknown), in fused order.
    """
    n = len(raw)
    by_raw = sorted(range(n), key=lambda i: (-raw[i], i))
    rerank_rank = [0] * n
    for r, i in enumerate(by_raw, start=1):
        rerank_rank[i] = r
    w = plan.weight
    fused_norm: list[float] | None = None
    rerank_norm: list[float] | None = None
    inputs = "reranker rank, fused rank"
    if plan.method == "replace":
        combined = [float(x) for x in raw]
        inputs = "raw reranker score"
    elif plan.method == "rrf":
        c = plan.rank_constant
        combined = [w / (c + rerank_rank[i]) + (1.0 - w) / (c + i + 1) for i in range(n)]
    else:
        if all(p is not None for p in calibrated):
            rerank_norm = [float(p) for p in calibrated if p is not None]
            what = "calibrated reranker score"
        else:
            rerank_norm = _minmax([float(x) for x in raw]) if n else []
            what = "min-max raw reranker score (calibration none)"
        if n and all(f is not None for f in fused_scores):
            fused_norm = _minmax([float(f) for f in fused_scores if f is not None])
            how = "min-max fused score"
        else:
            fused_norm = [1.0 - i / (n - 1) if n > 1 else 1.0 for i in range(n)]
            how = "fused rank (no fused score)"
        combined = [w * rerank_norm[i] + (1.0 - w) * fused_norm[i] for i in range(n)]
        inputs = f"{what}, {how}"
    order = sorted(range(n), key=lambda i: (-combined[i], i))
    return Fused(order, rerank_rank, combined, fused_norm, rerank_norm, inputs)


def load_safety(model_dir: str | Path | None) -> dict[str, Any] | None:
    """The model directory's :data:`SAFETY_FILE`, or None when it has none.

    Args:
        model_dir: Cross-encoder directory (None or a hub name: None).

    Raises:
        ConfigError: On an unreadable file.
    """
    path = Path(model_dir) / SAFETY_FILE if model_dir is not None else None
    if path is None or not path.is_file():
        return None
    data = _read(path, "safety")
    checks = data.get("checks")
    if not isinstance(checks, list) or not all(isinstance(c, dict) and "verdict" in c for c in checks):
        raise ConfigError(f"{path}: safety file needs a list of checks, each with a verdict")
    return {**data, "path": str(path)}


def _check_line(check: dict[str, Any]) -> str:
    lo, hi = check.get("ci", (None, None))
    return (
        f"{check.get('method')}"
        + ("" if check.get("method") == "replace" else f" w={check.get('weight')}")
        + f": nDCG@10 {check.get('diff', 0.0):+.4f} vs the fused order, CI [{lo}, {hi}] -> {check['verdict']}"
    )


def verdict_for(safety: dict[str, Any], plan: FusionPlan) -> tuple[str, str]:
    """``(verdict, reason)`` of ``plan`` under the recorded checks (module docstring): ``hurts`` when its own check
    hurts, or when the model hurts on its own and this configuration was not checked as ``helps``; else its own
    check's verdict, else ``unchecked``.

    Args:
        safety: The safety file's content (:func:`load_safety`).
        plan: The fusion plan in use.
    """
    checks: list[dict[str, Any]] = safety["checks"]
    own = next((c for c in checks if c.get("method") == "replace"), None)
    mine = next((c for c in checks if plan.same(str(c.get("method")), float(c.get("weight", 1.0)))), None)
    where = f"{safety.get('data', {}).get('split', 'held-out queries')} ({safety.get('date', 'undated')})"
    if mine is not None and mine["verdict"] == HURTS:
        return HURTS, f"{_check_line(mine)} on {where}"
    if own is not None and own["verdict"] == HURTS and (mine is None or mine["verdict"] != HELPS):
        extra = f"; {_check_line(mine)}" if mine is not None and mine is not own else ""
        if mine is None:
            extra = f"; {plan.describe()} was not checked"
        return HURTS, f"the model alone hurts: {_check_line(own)} on {where}{extra}"
    if mine is not None:
        return str(mine["verdict"]), f"{_check_line(mine)} on {where}"
    return "unchecked", f"{plan.describe()} was not checked" + (f"; {_check_line(own)}" if own is not None else "")


def refusal(safety: dict[str, Any] | None, plan: FusionPlan) -> str | None:
    """Why the reranker must not rerank with ``plan`` (None: it may).

    Args:
        safety: The safety file's content, or None (no check recorded: allowed).
        plan: The fusion plan in use.
    """
    if safety is None:
        return None
    verdict, reason = verdict_for(safety, plan)
    return reason if verdict == HURTS else None
