"""Progress that a log can hold: on a terminal, tqdm's bar; anywhere else (nohup, a CI log, a pipe) one plain line
every 30 s once a run has lasted 30 s, never the carriage-return redraws a log file cannot show. A run shorter than
that prints nothing, so short commands keep their output as it was (issue 46: an ingest ran 33 minutes with
nothing in its log but its last line).

Every progress bar of es_rag comes from :func:`tqdm` here, which takes tqdm's own arguments.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from tqdm import tqdm as _tqdm

LOG_INTERVAL_S = 30.0
"""Seconds between two progress lines in a log, and before the first."""
_clock = time.monotonic


class _Lines:
    """A stream for tqdm that writes each redraw as one line (no ``\\r``, no blank lines)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


class _LogBar(_tqdm):  # type: ignore[misc]
    """tqdm writing at most one line every :data:`LOG_INTERVAL_S`, the first once that much time has passed, and the
    last at the end of a run that wrote any: ``refresh()`` calls and growing totals draw nothing in between."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._logged_at: float | None = None
        self._born = _clock()
        super().__init__(*args, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        now = _clock()
        if self.disable:  # tqdm.close() sets it before its last display
            return bool(self._logged_at is not None and super().display(msg, pos))
        since = self._born if self._logged_at is None else self._logged_at
        if now - since < LOG_INTERVAL_S:
            return True
        self._logged_at = now
        return bool(super().display(msg, pos))


def terminal() -> bool:
    """Whether stderr is a terminal: for the bars of other libraries (sentence-transformers' "Batches"), which redraw
    with carriage returns a log cannot show, so they are drawn on a terminal only."""
    return sys.stderr.isatty()


def tqdm(*args: Any, **kwargs: Any) -> Any:
    """``tqdm.tqdm(*args, **kwargs)``, in log form (module docstring) when its stream is not a terminal.

    Args:
        *args: tqdm's positional arguments (the iterable).
        **kwargs: tqdm's keyword arguments (``desc``, ``total``, ``disable``, ...).
    """
    stream = kwargs.get("file") or sys.stderr
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return _tqdm(*args, **kwargs)
    kwargs.setdefault("mininterval", min(LOG_INTERVAL_S, 1.0))
    kwargs["file"] = _Lines(stream)
    return _LogBar(*args, **kwargs)
