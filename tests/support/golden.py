"""Golden-file comparison shared by the snapshot tests: a mismatch fails with a unified diff;
``UPDATE_GOLDEN=1`` rewrites the file (review the diff before committing it)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest


def check_snapshot(folder: Path, name: str, actual: str) -> None:
    """Compare ``actual`` with ``folder/name``; rewrite it when ``UPDATE_GOLDEN=1``.

    Args:
        folder: The snapshot folder.
        name: File name.
        actual: What the code produced now.
    """
    path = folder / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(actual.encode("utf-8"))
        return
    if not path.is_file():
        pytest.fail(f"snapshot {path} is missing; create it with UPDATE_GOLDEN=1 and review it", pytrace=False)
    expected = path.read_bytes().decode("utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"snapshots/{name}",
                tofile="actual output",
            )
        )
        pytest.fail(f"output differs from golden snapshot {name} (UPDATE_GOLDEN=1 accepts it):\n{diff}", pytrace=False)
