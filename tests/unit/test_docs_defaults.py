"""Docs that cannot drift (issue 32): the defaults a table in the docs states are the settings' own, and the settings
reference (docs/settings.md) is generated from their declarations.

docs/retrieval.md gave ``candidate_k`` 50 and ``rank_constant`` 60 long after the code said 100 and 5."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from es_rag.settings import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _table_defaults(path: Path) -> dict[str, str]:
    """``setting -> default`` of the markdown table rows whose first cell is a flat setting name in backticks and
    whose last cell is the default."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `([a-z_]+)` \|.*\| ([^|]+) \|$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


@pytest.mark.parametrize("doc", ["retrieval.md"])
def test_the_defaults_a_table_states_are_the_code_s(doc: str) -> None:
    stated = _table_defaults(DOCS / doc)
    flat = Settings().flat()
    checked = {name: value for name, value in stated.items() if name in flat}
    assert len(checked) >= 6, stated  # the candidate-count table is found
    assert checked == {name: str(flat[name]) for name in checked}


def test_the_settings_reference_is_what_the_code_declares() -> None:
    """docs/settings.md is generated from the settings declarations (``python scripts/gen-settings-doc.py``): every
    setting, flag, default and help, one table per stage."""
    from es_rag.cli.reference import render_reference
    from es_rag.settings import FLAT

    page = (DOCS / "settings.md").read_text(encoding="utf-8")
    assert page == render_reference(), "docs/settings.md is stale: run python scripts/gen-settings-doc.py"
    assert all(f"| `{name}` |" in page for name in FLAT)  # every setting has its row
