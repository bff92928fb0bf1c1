"""The ``cluster`` shell blocks of README.md and docs/ (issue 13) run against ``ES_URL``.

``https://localhost:9200`` becomes ``ES_URL``; ``export`` lines with placeholders are left out (credentials come
from this environment); every ``es-rag`` command that takes ``--index-prefix`` gets a throwaway one, deleted
afterwards (``selftest`` makes and deletes its own). Skipped unless ``ES_URL`` is set.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from es_rag.cli import build_parser
from es_rag.elasticsearch.backend import ElasticsearchBackend
from tests.support.doc_blocks import ROOT, Block, blocks
from tests.support.live import TEST_PREFIX, delete_created_assets, live_settings_for

pytestmark = pytest.mark.live

CLUSTER = [b for b in blocks() if b.kind == "cluster"]


def _with_prefix(line: str, prefix: str) -> str:
    words = line.split("#", 1)[0].split()
    if len(words) < 2 or words[0] != "es-rag":
        return line
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices.get(words[1])  # type: ignore[union-attr]
    takes_prefix = sub is not None and any("--index-prefix" in a.option_strings for a in sub._actions)
    return f"{line.split('#', 1)[0].rstrip()} --index-prefix {shlex.quote(prefix)}" if takes_prefix else line


@pytest.mark.parametrize("block", CLUSTER, ids=lambda b: b.name)
def test_cluster_block_runs_against_es_url(block: Block, es_url: str) -> None:
    prefix = f"{TEST_PREFIX}docs-{uuid.uuid4().hex[:8]}"
    lines = [ln for ln in block.text.splitlines() if not (ln.startswith("export ") and "..." in ln)]
    script = "\n".join(_with_prefix(ln, prefix) for ln in lines).replace("https://localhost:9200", es_url)
    env = {**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    try:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{block.name}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    finally:
        verify = os.environ.get("ES_VERIFY_CERTS", "true").strip().lower() not in ("0", "false", "no")
        backend = ElasticsearchBackend.connect(es_url, live_settings_for(prefix), verify_certs=verify)
        delete_created_assets(backend)
