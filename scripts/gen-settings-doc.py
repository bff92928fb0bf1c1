"""Rewrite docs/settings.md from the settings declarations (es_rag.cli.reference)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from es_rag.cli.reference import render_reference  # noqa: E402

if __name__ == "__main__":
    (ROOT / "docs" / "settings.md").write_text(render_reference(), encoding="utf-8")
    print("docs/settings.md written")
