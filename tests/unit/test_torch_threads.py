"""Threads (issue 31): torch computes with one thread per CPU this process may use -- its affinity capped by the
cgroup's CPU quota -- never more; ES_RAG_TORCH_THREADS sets them explicitly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from es_rag.encoders import threads
from es_rag.errors import ConfigError


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_configured", [])
    yield
    torch.set_num_threads(before)


def _cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, v2: str | None = None, v1: tuple[str, str] | None = None):
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2)
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0])
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1])
    monkeypatch.setattr(threads, "CGROUP", tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)), raising=False)


@pytest.mark.parametrize(
    "v2, v1, expected",
    [
        ("200000 100000\n", None, 2),  # a container limited to two CPUs on a 64-core host
        ("150000 100000\n", None, 2),  # 1.5 CPUs: rounded up
        ("max 100000\n", None, 64),  # no quota: the affinity
        (None, ("50000", "100000"), 1),  # cgroup v1, half a CPU
        (None, ("-1", "100000"), 64),  # cgroup v1, no quota
        (None, None, 64),  # nothing to read
    ],
)
def test_usable_cpus_follow_the_affinity_and_the_cgroup_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, v2: str | None, v1: tuple[str, str] | None, expected: int
) -> None:
    _cgroup(tmp_path, monkeypatch, v2, v1)
    assert threads.usable_cpus() == expected


def test_torch_threads_are_lowered_to_the_usable_cpus_never_raised(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _cgroup(tmp_path, monkeypatch, "100000 100000\n")  # one CPU
    torch.set_num_threads(4)
    assert threads.configure_torch_threads() == 1 == torch.get_num_threads()
    torch.set_num_threads(3)
    assert threads.configure_torch_threads() == 3  # once per process: a later change by the app is kept
    monkeypatch.setattr(threads, "_configured", [])
    (tmp_path / "none").mkdir()
    _cgroup(tmp_path / "none", monkeypatch)  # no quota: 64 usable CPUs
    torch.set_num_threads(1)
    assert threads.configure_torch_threads() == 1  # never raised


def test_the_environment_sets_the_threads_explicitly(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setenv(threads.THREADS_ENV, "2")
    torch.set_num_threads(1)
    assert threads.configure_torch_threads() == 2
    monkeypatch.setattr(threads, "_configured", [])
    monkeypatch.setenv(threads.THREADS_ENV, "many")
    with pytest.raises(ConfigError, match="ES_RAG_TORCH_THREADS='many': a whole number"):
        threads.configure_torch_threads()
