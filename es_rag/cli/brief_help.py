"""A command's ``--help`` shows the settings most runs change; ``--help-all`` shows every one (issue 31: ``search
--help`` was 390 lines long). Every flag is accepted either way: only its help line is held back."""

from __future__ import annotations

import argparse
from collections.abc import Collection, Sequence
from typing import Any

COMMON = frozenset(
    {
        "language",
        "embedding_model",
        "chunk_max_tokens",
        "chunk_overlap",
        "ingest_checkpoint_s",
        "candidate_k",
        "fusion_path",
        "rerank_model",
        "rerank_k",
        "context_k",
        "mmr_lambda",
        "max_chunks_per_source",
        "expand_mode",
        "token_budget",
    }
)
"""Flat names of the settings ``--help`` shows (where the command reads them)."""


class _HelpAll(argparse.Action):
    """``--help-all``: put back every held-back help line, print the help, exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, hidden: dict[argparse.Action, str], **kw: Any):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)
        self.hidden = hidden

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        for action, text in self.hidden.items():
            action.help = text
        parser.print_help()
        parser.exit()


def hold_back(
    parser: argparse.ArgumentParser, actions: Sequence[argparse.Action], *, also: Collection[str] = ()
) -> None:
    """Hold back the help of the settings ``actions`` not in :data:`COMMON` or ``also``, and add ``--help-all``.

    Args:
        parser: The command's parser.
        actions: Its settings flags.
        also: Flat names the command shows too (those it gives a default of its own: ``setup``'s ``analyzer``).
    """
    shown = COMMON | set(also)
    hidden = {a: str(a.help) for a in actions if a.dest not in shown}
    if not hidden:
        return
    for action in hidden:
        action.help = argparse.SUPPRESS
    parser.add_argument(
        "--help-all",
        action=_HelpAll,
        hidden=hidden,
        help=f"show the help of all {len(actions)} settings flags (this one shows {len(actions) - len(hidden)}; "
        "every flag is accepted either way)",
    )
