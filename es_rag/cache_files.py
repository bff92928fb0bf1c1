"""Where es_rag's on-disk caches live (:func:`cache_root`), and the sizes and CRC-32s of files that every cache records
beside its files and checks before it reads them (issue 43): the embedded index's caches
(:mod:`es_rag.embedded.caches`), the decompressed language model (:mod:`es_rag.languages`), the Porter stems
(:mod:`es_rag.embedded.stem_cache`) and the ONNX query encoder (:mod:`es_rag.encoders.onnx_query`)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CACHE_ENV = "ES_RAG_CACHE"


def cache_root() -> Path:
    """``$ES_RAG_CACHE``, else ``$XDG_CACHE_HOME/es_rag`` (``~/.cache/es_rag``)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "es_rag"


def file_crc32(path: Path) -> str:
    """The CRC-32 of a file's bytes, as eight hex digits (read a megabyte at a time)."""
    crc = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def file_sums(folder: Path, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Size and CRC-32 of each of ``names`` that exists in ``folder`` (``{"bytes": ..., "crc32": ...}``)."""
    return {
        n: {"bytes": (folder / n).stat().st_size, "crc32": file_crc32(folder / n)}
        for n in names
        if (folder / n).exists()
    }


def damaged(folder: Path, sums: Mapping[str, Any]) -> str | None:
    """The first of ``sums``' files whose size or CRC-32 differs from its record (or that is missing or unreadable),
    else None."""
    for name, want in sums.items():
        path = folder / str(name)
        try:
            if (
                not isinstance(want, dict)
                or path.stat().st_size != want.get("bytes")
                or file_crc32(path) != want.get("crc32")
            ):
                return str(name)
        except OSError:
            return str(name)
    return None
