"""Every shell block of README.md and docs/ works as written (issue 13): ``bash`` blocks run from a fresh copy of
the repository with the project's virtualenv (what ``make demo`` leaves), ``long`` blocks parse with today's CLI.
``cluster`` blocks run in the live suite. See :mod:`tests.support.doc_blocks`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from es_rag.cli import build_parser
from tests.support.doc_blocks import ROOT, Block, blocks, commands

RUN = [b for b in blocks() if b.kind == "run"]
LONG = [b for b in blocks() if b.kind == "long"]


def test_the_docs_have_blocks_of_each_kind() -> None:
    kinds = {b.kind for b in blocks()}
    assert kinds == {"run", "cluster", "long"} and RUN


def _fresh_copy(dest: Path) -> Path:
    """The tracked files, as a clone has them, plus the virtualenv ``make demo`` creates."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


@pytest.mark.parametrize("block", RUN, ids=lambda b: b.name)
def test_bash_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    repo = _fresh_copy(tmp_path / "repo")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text], cwd=repo, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"{block.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("block", LONG, ids=lambda b: b.name)
def test_long_block_commands_parse(block: Block) -> None:
    targets = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line and not line[0].isspace() and ":" in line and not line.startswith((".", "#")):
            targets.update(line.split(":", 1)[0].split())
    for argv in commands(block.text):
        if argv[0] == "es-rag":
            build_parser().parse_args(argv[1:])  # exits 2 on an option today's CLI does not have
        elif argv[0] == "make":
            assert set(argv[1:]) <= targets, (block.name, argv)
        else:
            pytest.fail(f"{block.name}: unexpected command {argv[0]!r} in a long block")
