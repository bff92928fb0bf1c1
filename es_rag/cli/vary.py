"""``--vary NAME=V1,V2,...``: the one-change variants of ``eval --golden``, each value read as the flag ``--NAME V``
would read it (so ``off`` is None for an optional number, a choice is checked against its valid values)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from es_rag.errors import ConfigError
from es_rag.settings import FLAT, GROUPS


def _reader(flat: str) -> tuple[Any, bool]:
    """How the command line reads the value of the flat setting ``flat``, and whether it takes one value only (a list
    or a mapping, whose own commas would be read as separate values)."""
    from es_rag.cli.options import _argument

    group_name, field_name = FLAT[flat]
    cls = next(g for g in GROUPS if g.NAME == group_name)
    fld = next(f for f in dataclasses.fields(cls) if f.name == field_name)
    own = fld.default_factory() if fld.default_factory is not dataclasses.MISSING else fld.default
    kwargs = _argument(cls, fld, own)[1]
    if kwargs.get("action") == "store_true":

        def boolean(text: str) -> bool:
            low = text.strip().lower()
            if low not in ("true", "false", "on", "off", "1", "0"):
                raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
            return low in ("true", "on", "1")

        return boolean, False
    read = kwargs.get("type", str)
    choices = kwargs.get("choices")
    whole = getattr(read, "__name__", "") in ("key_floats", "<lambda>")

    def parse(text: str) -> Any:
        value = read(text)
        if choices is not None and value not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice {text!r} (choose from {', '.join(choices)})")
        return value

    return parse, whole


FIXED_GROUPS = ("index", "encoder", "ingest", "chunking", "connection")
"""Settings a variant cannot change: the index was built (analysed, chunked, embedded) with them, and the variants
share the run's embedder and backend."""
FIXED_SETTINGS = ("rerank_model", "rerank_backend", "rerank_max_length", "rerank_inference_id", "escalate_model")
"""Settings of the models the variants share (loaded once for the run)."""


def _refuse_fixed(flat: str) -> None:
    group = FLAT[flat][0]
    if group in FIXED_GROUPS:
        raise ConfigError(
            f"--vary {flat}: {group} settings are fixed when the index is built, and every variant searches the "
            "same index; ingest a second index with it and evaluate that one"
        )
    if flat in FIXED_SETTINGS:
        raise ConfigError(
            f"--vary {flat}: the variants share the run's models; run eval again with --{flat.replace('_', '-')}"
        )


def parse_vary(specs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The variants of ``--vary`` options: ``(label, {flat name: value})``, one per value, in the order given.

    Args:
        specs: The ``--vary`` values, ``NAME=V1,V2`` (NAME a flat setting name, ``-`` or ``_``); a list or mapping
            setting (``bm25_fields``, ``channel_weights``) takes one value per ``--vary``.

    Raises:
        ConfigError: An unknown setting or a value its flag would refuse, naming both.
    """
    out: list[tuple[str, dict[str, Any]]] = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        flat = name.strip().lstrip("-").replace("-", "_")
        if not sep or not flat or not values.strip():
            raise ConfigError(f"--vary {spec!r}: expected NAME=VALUE[,VALUE...], e.g. context_k=8,12")
        if flat not in FLAT:
            from es_rag.settings import unknown_setting

            raise unknown_setting(flat, list(FLAT))
        _refuse_fixed(flat)  # it would be silently ignored
        read, whole = _reader(flat)
        for text in [values] if whole else [v for v in values.split(",") if v.strip()]:
            try:
                value = read(text.strip())
            except (argparse.ArgumentTypeError, ValueError) as exc:
                raise ConfigError(f"--vary {flat}={text.strip()}: {exc}") from None
            out.append((f"{flat}={text.strip()}", {flat: value}))
    return out
