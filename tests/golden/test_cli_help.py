"""The command line a person meets: each command shows and accepts only its own options, settings flags are
named as the settings, grouped by stage, and a usage error is one short line with a "did you mean".

``snapshots/cli_help.txt`` holds, per command, its ``--help`` sections and the flags in each, in order
(the layout argparse prints varies with the Python version and terminal width; the sections and flags do
not). ``UPDATE_GOLDEN=1`` rewrites it: review the diff, it is the CLI's surface.
"""

from __future__ import annotations

import argparse
import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from es_rag.cli import build_parser, main
from es_rag.cli.commands import COMMANDS
from es_rag.cli.options import settings_from_args
from es_rag.settings import FLAT, GROUPS
from tests.support import golden

SNAPSHOTS = Path(__file__).parent / "snapshots"


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = parser.subcommand(name)
    assert sub is not None, name
    return sub


def _sections(parser: argparse.ArgumentParser) -> list[tuple[str, list[str]]]:
    """``(section title, flags)`` in ``--help`` order; positionals listed by metavar."""
    out = []
    for group in parser._action_groups:
        flags = [
            "/".join(a.option_strings) if a.option_strings else (a.metavar or a.dest) for a in group._group_actions
        ]
        if flags:
            out.append((group.title or "", flags))
    return out


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings]


def outline() -> str:
    """Every command's ``--help`` sections and flags, as the snapshot holds them."""
    lines = []
    for name in COMMANDS:
        parser = _subparser(name)
        lines.append(f"es-rag {name}  ({len(_options(parser))} options)")
        for title, flags in _sections(parser):
            lines.append(f"  [{title}]")
            lines.append("    " + " ".join(flags))
    return "\n".join(lines) + "\n"


def test_help_outline_matches_snapshot() -> None:
    golden.check_snapshot(SNAPSHOTS, "cli_help.txt", outline())


def test_every_help_renders(capsys: pytest.CaptureFixture[str]) -> None:
    for name in COMMANDS:
        assert main([name, "--help"]) == 0
        text = capsys.readouterr().out
        assert text.startswith(f"usage: es-rag {name}"), name
        assert "%(" not in text and "(default: (default" not in text, name


def test_delete_source_shows_only_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    options = _options(_subparser("delete-source"))
    assert len(options) <= 13, [a.option_strings for a in options]  # 12 + --settings (every command)
    assert main(["delete-source", "--help"]) == 0
    assert len(capsys.readouterr().out.splitlines()) < 45
    # a search knob is refused, not silently accepted
    assert main(["delete-source", "doc-1", "--tenant", "acme", "--mmr-preset", "single_fact"]) == 2
    assert "unrecognized arguments: --mmr-preset" in capsys.readouterr().err


def test_settings_flags_are_the_settings_names_grouped_by_stage() -> None:
    titles = {g.TITLE: g.NAME for g in GROUPS}
    for name in COMMANDS:
        parser = _subparser(name)
        for group in parser._action_groups:
            stage = titles.get(group.title or "")
            for action in group._group_actions:
                if action.dest in FLAT:
                    # flag == "--" + flat name, in the section of the flat name's group
                    assert action.option_strings == ["--" + action.dest.replace("_", "-")], action.option_strings
                    assert FLAT[action.dest][0] == stage, (name, action.dest, group.title)
                elif stage is not None:
                    assert action.dest in ("mmr_preset",), (name, action.dest)  # presets sit with their stage


def test_every_setting_is_reachable_from_some_command() -> None:
    reachable = {a.dest for name in COMMANDS for a in _options(_subparser(name))}
    assert set(FLAT) <= reachable, sorted(set(FLAT) - reachable)


def test_a_usage_error_is_one_line_with_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "q", "--tenant", "acme", "--rerank-kk", "3"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "es-rag search: error: unrecognized arguments: --rerank-kk 3 (did you mean --rerank-k?); "
        "see es-rag search --help"
    ]
    assert main(["serch", "q"]) == 2
    assert capsys.readouterr().err.strip() == (
        "es-rag: error: unknown command 'serch' (did you mean search?); see es-rag --help"
    )
    assert main(["search", "q", "--tenant", "acme", "--fusion-method", "rff"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "(did you mean rrf?)" in err
    # another tool's name for a flag points at ours (LangChain's k, LlamaIndex's top_k: issue 31)
    assert main(["search", "q", "--tenant", "acme", "--top-k", "3"]) == 2
    assert "--top-k 3 (did you mean --context-k?)" in capsys.readouterr().err
    assert main(["ingest", "docs", "--tenant", "acme", "--chunk_size", "512"]) == 2
    assert "(did you mean --chunk-max-tokens?)" in capsys.readouterr().err
    # flags are never abbreviated: --rerank is not --rerank-k / --rerank-model
    assert main(["search", "q", "--tenant", "acme", "--rerank", "3"]) == 2
    capsys.readouterr()


def test_acl_takes_a_comma_list_or_repeats_and_never_swallows_the_query() -> None:
    args = build_parser().parse_args(["search", "--tenant", "acme", "--acl", "support,sales", "--acl", "ops", "my q"])
    assert args.query == "my q"
    from es_rag.cli.options import acl_groups

    assert acl_groups(args.acl) == ("support", "sales", "ops")
    args = build_parser().parse_args(["ingest", "doc.md", "--tenant", "acme"])
    from es_rag.cli.options import owner_acl

    assert owner_acl(args) == ("public",)


def test_presets_are_overridden_by_explicit_flags() -> None:
    parser = build_parser()
    args = parser.parse_args(["eval", "--dataset", "d", "--bm25-protocol", "beir-es", "--bm25-k1", "2.0"])
    from es_rag.cli.options import bm25_preset, mmr_preset

    s = settings_from_args(args, presets=[bm25_preset(args), mmr_preset(args)])
    assert (s.index.analyzer.value, s.retrieve.bm25_tie_breaker, s.index.bm25_k1) == ("english", 0.5, 2.0)
    args = parser.parse_args(["search", "q", "--tenant", "t", "--mmr-preset", "exploratory", "--mmr-lambda", "0.9"])
    assert settings_from_args(args, presets=[mmr_preset(args)]).select.mmr_lambda == 0.9
    args = parser.parse_args(["search", "q", "--tenant", "t", "--mmr-preset", "exploratory"])
    assert settings_from_args(args, presets=[mmr_preset(args)]).select.mmr_lambda == 0.5


def test_help_shows_the_command_defaults() -> None:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["setup", "--help"]) == 0
    text = " ".join(buf.getvalue().split())
    assert "--analyzer {auto,standard,english,cjk,kuromoji}" in text
    assert "(default: auto)" in text  # setup resolves auto against the cluster
