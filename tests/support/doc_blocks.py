"""The shell blocks of README.md and docs/*.md, and how each kind is checked.

A fenced block's info string says what it needs: ```` ```bash ```` runs as written from a fresh clone (after
``make demo``) in ``tests/e2e/test_docs_run.py``; ```` ```bash cluster ```` needs Elasticsearch and runs in
``tests/live/test_live_docs.py`` against ``ES_URL``; ```` ```bash long ```` (``make``, a benchmark dataset, training)
is too long for CI: each of its ``es-rag`` commands must parse with today's CLI and each ``make`` target exist.
```` ```python ```` blocks of README.md run as written, in order, in a folder holding the ``./idx`` the shell block
before them builds (:func:`python_blocks`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_FENCE = re.compile(r"^```(bash|sh|shell|console)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_PYTHON = re.compile(r"^```python[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One shell block: where it is, its kind (``run``, ``cluster``, ``long``) and its text."""

    file: Path
    line: int
    kind: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.file.relative_to(ROOT).as_posix()}:{self.line}"


def blocks() -> list[Block]:
    """Every shell block of the docs, in file order."""
    out = []
    for f in DOC_FILES:
        text = f.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            words = m.group(2).split()
            kind = "cluster" if "cluster" in words else "long" if "long" in words else "run"
            out.append(Block(f, text.count("\n", 0, m.start()) + 1, kind, m.group(3)))
    return out


def commands(text: str) -> list[list[str]]:
    """The commands of a block: continuation lines joined, comments and redirections dropped, split as a shell
    would."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        argv = shlex.split(line, comments=True)
        if ">" in argv:
            argv = argv[: argv.index(">")]
        if argv:
            out.append(argv)
    return out


def python_blocks(file: Path = ROOT / "README.md") -> list[Block]:
    """Every ```` ```python ```` block of ``file``, in order (kind ``python``)."""
    text = file.read_text(encoding="utf-8")
    return [Block(file, text.count("\n", 0, m.start()) + 1, "python", m.group(1)) for m in _PYTHON.finditer(text)]
