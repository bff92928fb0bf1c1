"""Issue 31: ``search --help`` was 390 lines long. A command's ``--help`` shows the settings most runs change,
``--help-all`` every one; a flag whose help is held back is still accepted."""

from __future__ import annotations

import re

import pytest

from es_rag.cli import build_parser, main
from es_rag.cli.brief_help import COMMON
from es_rag.settings import FLAT


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["search", "ingest", "eval"])
def test_help_shows_the_common_settings_and_help_all_every_one(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    brief = _help(capsys, command, "--help")
    full = _help(capsys, command, "--help-all")
    assert len(brief.splitlines()) < 0.7 * len(full.splitlines()) and "--help-all" in brief
    settings = {f"--{name.replace('_', '-')}" for name in FLAT}
    in_brief, in_full = _options(brief), _options(full)
    assert in_brief - settings == in_full - settings  # what is not a setting (--tenant, --es, ...) always shows
    assert in_brief & settings == {f for f in in_full & settings if f[2:].replace("-", "_") in COMMON}
    # (setup shows its analyzer too: a setting a command gives a default of its own is shown,
    # tests/golden/test_cli_help.py)
    assert in_full & settings - in_brief  # something was held back


def _options(text: str) -> set[str]:
    """The flags of the help's option lines."""
    return {m.group(1) for m in re.finditer(r"^  (--[a-z0-9-]+)", text, re.M)}


def test_search_help_is_short(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(_help(capsys, "search", "--help").splitlines()) <= 130


def test_a_held_back_flag_is_still_accepted() -> None:
    args = build_parser().parse_args(
        ["search", "q", "--tenant", "t", "--rerank-temperature", "off", "--bm25-k1", "0.9"]
    )
    assert args.rerank_temperature is None and args.bm25_k1 == 0.9
