"""Progress a log can hold (issue 46, item 9): without a terminal, one plain line every 30 s once a run has lasted
30 s, nothing for a shorter run; on a terminal, tqdm's bar as before."""

from __future__ import annotations

import io

import pytest

from es_rag import progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_long_run_without_a_terminal_logs_a_line_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr("tqdm.std.time", clock)  # tqdm reads its clock through this name
    monkeypatch.setattr(progress, "_clock", clock)
    log = io.StringIO()
    bar = progress.tqdm(total=0, desc="embed+index", unit="chunk", file=log)
    for _ in range(100):
        clock.now += 1.0  # 100 s of work
        bar.total += 1  # a total that grows as documents are read, redrawn each time (as ingest does)
        bar.refresh()
        bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and all(line.startswith("embed+index:") for line in lines)
    assert 3 <= len(lines) <= 5, lines  # at about 30, 60 and 90 s, and the close
    assert "100/100" in lines[-1]


def test_a_short_run_without_a_terminal_prints_nothing() -> None:
    log = io.StringIO()
    bar = progress.tqdm(total=0, desc="embed+index", unit="chunk", file=log)
    for _ in range(50):
        bar.total += 1
        bar.refresh()
        bar.update(1)
    bar.close()
    for _ in progress.tqdm(range(50), desc="golden", unit="q", file=log):
        pass
    assert log.getvalue() == ""


def test_a_terminal_gets_tqdms_bar() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    for _ in progress.tqdm(range(3), desc="chunk", file=out, mininterval=0):
        pass
    assert "\r" in out.getvalue() and "3/3" in out.getvalue()
