"""``docs/settings.md``, generated from the settings declarations: every setting with its flag, its default and its
help, one table per stage, exactly as ``--help-all`` states them (issue 32: docs whose defaults come from the code).

``python scripts/gen-settings-doc.py`` rewrites the file; ``tests/unit/test_docs_defaults.py`` fails when it is not
what this module renders."""

from __future__ import annotations

import dataclasses

from es_rag.cli.options import shown_default
from es_rag.settings import AUTO_MODEL, GROUPS, Settings

HEADER = """# Settings reference

Generated from the settings declarations (`es_rag/settings/`) by `python scripts/gen-settings-doc.py`; a test
fails when this page differs from what the code declares. Every setting is a keyword of `Settings(...)` and
`Settings.replace(...)`, a key of a `--settings` TOML file (under its stage's table), and a command-line flag (`-`
for `_`) of the commands that read it (`es-rag <command> --help-all`). `off` sets an optional setting to None.
"""


def render_reference() -> str:
    """The whole page."""
    base = Settings()
    out = [HEADER]
    for cls in GROUPS:
        value = getattr(base, cls.NAME)
        if cls.NAME == "encoder" and base.model_is_auto:  # the default is auto, not the model it resolves to
            value = dataclasses.replace(value, model=AUTO_MODEL)
        out.append(f"\n## `{cls.NAME}`: {cls.TITLE.split(': ', 1)[-1]}\n")
        out.append("| setting | flag | default | meaning |")
        out.append("|---|---|---|---|")
        for fld in dataclasses.fields(cls):
            flat = fld.metadata.get("flat") or fld.name
            shown = fld.metadata.get("shown") or shown_default(getattr(value, fld.name))
            meaning = " ".join(str(fld.metadata["help"]).split()).replace("|", "\\|")
            out.append(f"| `{flat}` | `--{flat.replace('_', '-')}` | `{shown}` | {meaning} |")
    return "\n".join(out) + "\n"
