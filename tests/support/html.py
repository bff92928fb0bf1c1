"""HTML fixtures shared by the visible-text and adapter tests."""

from __future__ import annotations

from pathlib import Path

PYDOC = (Path(__file__).parents[1] / "fixtures" / "html" / "pydoc_venv.html").read_text(encoding="utf-8")
"""The shape of a page of Python's documentation (Sphinx, pydoctheme): relation bars, sidebar, headerlinks, a
highlighted code block and inline code made of spans (written after the idlelib/help.html that CPython ships)."""
