"""Progress that a log can hold: on a terminal, tqdm's bar; anywhere else (nohup, a CI log, a pipe) one plain line
every 30 s once a run has lasted 30 s, never the carriage-return redraws a log file cannot show. A run shorter than
that prints nothing, so short commands keep their output as it was (issue 46: an ingest ran 33 minutes with
nothing in its log but its last line).

Every progress bar of es_rag comes from :func:`tqdm` here, which takes tqdm's own arguments.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from tqdm import tqdm as _tqdm

LOG_INTERVAL_S = 30.0
"""Seconds between two progress lines in a log, and before the first."""


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


def tqdm(*args: Any, **kwargs: Any) -> Any:
    """``tqdm.tqdm(*args, **kwargs)``, in log form (module docstring) when its stream is not a terminal.

    Args:
        *args: tqdm's positional arguments (the iterable).
        **kwargs: tqdm's keyword arguments (``desc``, ``total``, ``disable``, ...).
    """
    stream = kwargs.get("file") or sys.stderr
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        kwargs.setdefault("mininterval", LOG_INTERVAL_S)
        kwargs.setdefault("delay", LOG_INTERVAL_S)
        kwargs["maxinterval"] = max(float(kwargs.get("maxinterval", 0.0)), 2 * LOG_INTERVAL_S)
        kwargs["file"] = _Lines(stream)
    return _tqdm(*args, **kwargs)
