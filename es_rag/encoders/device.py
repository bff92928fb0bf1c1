"""Which torch device and precision a model runs with: ``--device auto|cpu|cuda|mps`` and ``--precision fp32|fp16``
resolved against what torch sees on this machine, once, when a model loads (importing es_rag imports no torch).

``auto`` picks ``cuda`` when ``torch.cuda.is_available()``, else ``mps`` when ``torch.backends.mps.is_available()``,
else ``cpu``. An explicit ``cuda`` or ``mps`` that torch does not see is an error naming what torch reports (a CPU
wheel, no driver, no Apple GPU), never a silent fall-back to the CPU. ``fp16`` is refused anywhere but CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

from es_rag.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("fp32", "fp16")


@dataclass(frozen=True)
class DevicePlan:
    """A resolved device: ``device`` (``cpu``, ``cuda``, ``mps``), ``precision`` (``fp32``, ``fp16``), what was asked
    for, and why ``auto`` chose it (for the trace and ``doctor``)."""

    device: str
    precision: str
    requested: str
    reason: str

    def describe(self) -> str:
        """One line: ``cuda fp16 (auto: torch.cuda.is_available())``."""
        return f"{self.device} {self.precision} ({self.reason})"

    def to_dict(self) -> dict[str, str]:
        """JSON form."""
        return {"device": self.device, "precision": self.precision, "requested": self.requested, "reason": self.reason}


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _mps_available() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def _torch_build() -> str:
    import torch

    cuda = getattr(torch.version, "cuda", None)
    return f"torch {torch.__version__}" + (f" built for CUDA {cuda}" if cuda else " (a CPU-only build)")


def resolve_device(requested: str = "auto", precision: str = "fp32") -> DevicePlan:
    """The device and precision a model loads with.

    Args:
        requested: ``auto``, ``cpu``, ``cuda`` (``cuda:N`` names one GPU) or ``mps``.
        precision: ``fp32`` or ``fp16`` (CUDA only).

    Raises:
        ConfigError: An unknown device or precision, ``cuda``/``mps`` that torch does not see, ``fp16`` off CUDA.
    """
    req = str(requested).strip().lower()
    prec = str(precision).strip().lower()
    kind = req.split(":", 1)[0]
    if kind not in DEVICES or (":" in req and kind != "cuda"):
        raise ConfigError(f"device: invalid value {requested!r}; valid values: {', '.join(DEVICES)} (or cuda:N)")
    if prec not in PRECISIONS:
        raise ConfigError(f"precision: invalid value {precision!r}; valid values: {', '.join(PRECISIONS)}")
    if kind == "auto":
        if _cuda_available():
            device, reason = "cuda", "auto: torch.cuda.is_available()"
        elif _mps_available():
            device, reason = "mps", "auto: torch.backends.mps.is_available()"
        else:
            device, reason = "cpu", "auto: no CUDA or MPS device visible to torch"
    elif kind == "cuda":
        if not _cuda_available():
            raise ConfigError(
                f"device {req}: torch sees no CUDA device ({_torch_build()}; torch.cuda.is_available() is False); "
                "use --device cpu or auto, or install a CUDA build of torch on a machine with an NVIDIA GPU"
            )
        device, reason = req, "requested"
    elif kind == "mps":
        if not _mps_available():
            raise ConfigError(
                "device mps: torch sees no Apple GPU (torch.backends.mps.is_available() is False); "
                "use --device cpu or auto"
            )
        device, reason = "mps", "requested"
    else:
        device, reason = "cpu", "requested"
    if prec == "fp16" and not device.startswith("cuda"):
        raise ConfigError(f"precision fp16: CUDA only, but the model runs on {device} ({reason}); use --precision fp32")
    return DevicePlan(device=device, precision=prec, requested=req, reason=reason)
