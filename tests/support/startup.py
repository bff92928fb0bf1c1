"""Run one ``es-rag`` command in a fresh interpreter and report which heavy modules it imported.

Used by the start-up test and ``benchmarks/startup_bench.py``: commands that need no model must not import torch,
transformers or sentence-transformers (each costs seconds before the command does anything).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

HEAVY = ("torch", "transformers", "sentence_transformers", "nltk", "bm25s")

_PROBE = """
import json, sys
from es_rag.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "heavy": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
"""


def run_command(argv: Sequence[str], *, cwd: str | None = None) -> dict[str, object]:
    """``{"rc": exit code, "heavy": heavy modules imported}`` of ``es-rag argv`` in a new interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE % (HEAVY,), *argv], capture_output=True, text=True, cwd=cwd, check=False
    )
    last = proc.stderr.strip().splitlines()[-1]
    result: dict[str, object] = json.loads(last)
    return result
