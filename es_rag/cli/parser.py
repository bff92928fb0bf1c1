"""The argument parser of ``es-rag``: a usage error is one short line, with a "did you mean" for a
misspelt flag or command, instead of the whole usage block."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

USAGE_EXIT = 2


FOREIGN_FLAGS = {
    "--top-k": "--context-k",
    "--k": "--context-k",
    "--topk": "--context-k",
    "--num-results": "--context-k",
    "--chunk-size": "--chunk-max-tokens",
    "--max-tokens": "--token-budget",
    "--reranker": "--rerank-model",
    "--model": "--embedding-model",
    "--filters": "--filter",
    "--index": "--index-dir",
}
"""Flags other RAG tools name differently (LangChain's ``k``, LlamaIndex's ``top_k``, a splitter's ``chunk_size``):
the es_rag flag of the same meaning, suggested when it exists in the command (issue 31)."""


def suggestion(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate closest to ``word``, if one is close enough; a flag of another tool (:data:`FOREIGN_FLAGS`)
    suggests es_rag's flag of the same meaning.

    Args:
        word: What the user typed.
        candidates: What exists.
    """
    ours = FOREIGN_FLAGS.get(word.replace("_", "-"))
    if ours is not None and ours in candidates:
        return ours
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that never abbreviates flags (``--rerank`` is not ``--rerank-k``) and reports
    a usage error in one line: ``es-rag search: error: unrecognized arguments: --rerank-kk (did you mean
    --rerank-k?); see es-rag search --help``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def option_strings(self) -> list[str]:
        """Every flag this parser accepts."""
        return [s for action in self._actions for s in action.option_strings]

    def subcommand(self, name: str) -> Parser | None:
        """The parser of subcommand ``name``, if this parser has subcommands.

        Args:
            name: Subcommand.
        """
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                found = action.choices.get(name)
                return found if isinstance(found, Parser) else None
        return None

    def _explained(self, message: str) -> str:
        """argparse's message, shortened where it lists every choice, with a "did you mean"."""
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            flags = [t.split("=", 1)[0] for t in unknown.group(1).split() if t.startswith("--")]
            pairs = [(flag, suggestion(flag, self.option_strings())) for flag in flags]
            hints = [close if len(flags) == 1 else f"{close} for {flag}" for flag, close in pairs if close]
            return message + (f" (did you mean {', '.join(hints)}?)" if hints else "")
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            options = re.findall(r"'([^']*)'", choice.group(3)) or [c.strip() for c in choice.group(3).split(",")]
            close = suggestion(choice.group(2), options)
            if choice.group(1) == "COMMAND":
                hint = f" (did you mean {close}?)" if close else f" (commands: {', '.join(options)})"
                return f"unknown command '{choice.group(2)}'{hint}"
            return message + (f" (did you mean {close}?)" if close else "")
        return message

    def error(self, message: str) -> NoReturn:
        """Print one line and exit 2.

        Args:
            message: argparse's message.
        """
        print(f"{self.prog}: error: {self._explained(message)}; see {self.prog} --help", file=sys.stderr)
        sys.exit(USAGE_EXIT)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Parse, reporting unknown arguments from the subcommand's parser (which knows its own flags).

        Args:
            args: Arguments.
            namespace: Namespace to fill.
        """
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = self.subcommand(getattr(parsed, "command", "") or "")
            (sub or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed
