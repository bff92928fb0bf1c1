"""How many threads torch computes with: one per CPU this process may use, not one per core of the machine.

torch's default is the machine's physical cores; in a container limited to two CPUs on a 64-core host (a cgroup CPU
quota), or beside other busy processes, that oversubscribes the CPUs: issue 31 measured one query embedding at about
1 s under load, against 90 ms with one thread. When a model loads (:func:`configure_torch_threads`), es_rag lowers
torch's intra-op threads to :func:`usable_cpus` -- the CPUs this process is allowed to run on (its affinity), capped by
the cgroup's CPU quota -- and never raises them. ``ES_RAG_TORCH_THREADS=N`` sets them explicitly; ``OMP_NUM_THREADS``
(torch's own setting) is left to torch. ``benchmarks/warm_search_bench.py`` prints one query embedding's latency at
each thread count, quiet and beside one busy process per core.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

THREADS_ENV = "ES_RAG_TORCH_THREADS"
CGROUP = Path("/sys/fs/cgroup")
"""Where the cgroup's CPU quota is read (v2: ``cpu.max``; v1: ``cpu/cpu.cfs_quota_us`` and ``cpu.cfs_period_us``)."""

_done = threading.Lock()
_configured: list[int] = []


def _cgroup_quota() -> float | None:
    """CPUs the cgroup's quota allows (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), or
    None when there is no quota or no cgroup to read."""
    try:
        quota, period = (CGROUP / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((CGROUP / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((CGROUP / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """The CPUs this process may use: its CPU affinity (``os.sched_getaffinity``, else ``os.cpu_count``), capped by the
    cgroup's CPU quota rounded up; at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def configure_torch_threads() -> int:
    """Set torch's intra-op threads once per process: ``ES_RAG_TORCH_THREADS`` when set, else at most
    :func:`usable_cpus` (lowered, never raised; left alone when ``OMP_NUM_THREADS`` is set). Returns the threads torch
    then uses."""
    import torch

    with _done:
        if _configured:
            return torch.get_num_threads()
        wanted = _requested_threads()
        if wanted is not None:
            torch.set_num_threads(wanted)
        elif not os.environ.get("OMP_NUM_THREADS") and torch.get_num_threads() > usable_cpus():
            torch.set_num_threads(usable_cpus())
        _configured.append(torch.get_num_threads())
        return torch.get_num_threads()


def _requested_threads() -> int | None:
    """``ES_RAG_TORCH_THREADS`` as a number of threads (at least 1), None when it is not set.

    Raises:
        ConfigError: It is set to something else than a whole number.
    """
    given = os.environ.get(THREADS_ENV, "").strip()
    if not given:
        return None
    try:
        return max(1, int(given))
    except ValueError:
        from es_rag.errors import ConfigError

        raise ConfigError(f"{THREADS_ENV}={given!r}: a whole number of threads, at least 1") from None


def runtime_threads() -> int:
    """The intra-op threads of an onnxruntime session, by the rule torch's follow (``ES_RAG_TORCH_THREADS`` when set,
    else :func:`usable_cpus`), without importing torch."""
    wanted = _requested_threads()
    if wanted is not None:
        return wanted
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    return max(1, int(omp)) if omp.isdigit() else usable_cpus()
