"""What a cold search of the embedded index reads instead of analysing every chunk again (issue 31): per commit, each
BM25 field's index as bm25s saves it and the exact channel's identifier index, both memory-mapped when read.

Caches, never the index: each is kept with the commit it was made from (its name holds the commit number; the commit
after it removes it once it stands, :func:`es_rag.embedded.store.write`) and with a key naming the field, the analyzer,
es_rag's version and the chunks. The key file also holds each data file's size and CRC-32, checked before the file is
read (issue 43): a cache that is missing, made from something else, unreadable or damaged is made again, and a damaged
one is named in one warning. Files are written under temporary names and renamed into place, so a process that maps
one never sees it change.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from es_rag.cache_files import damaged, file_sums
from es_rag.redact import get_logger

if TYPE_CHECKING:
    from es_rag.embedded.ident import IdentIndex

CACHE_FILE = re.compile(r"^(tokens|bm25|ident)-(?P<commit>\d+)-[A-Za-z0-9_.]+-[A-Za-z0-9_]+\.[a-z.]+$")
"""Names of cache files, removed with the commit they belong to (``tokens-``: the token lists of earlier builds, now
only removed)."""

_BM25_PARTS = {
    "data_name": "data.npy",
    "indices_name": "indices.npy",
    "indptr_name": "indptr.npy",
    "vocab_name": "vocab.json",
    "params_name": "params.json",
    "nnoc_name": "nnoc.npy",
}
"""bm25s's files of one saved index, by the ``save``/``load`` argument naming each."""


SCORING_REVISION = 2
"""Bumped when the analyzers or the BM25 statistics change, so a saved index made by older code is built again even
under the same es_rag version (a development build). 2: Lucene's one-byte length norms, ``docCount`` of the
documents that have the field, the ``cjk`` stop set without ``an``, Lucene's Extended_Pictographic list."""


log = get_logger(__name__)


def _read_key(key_path: Path) -> dict[str, Any] | None:
    """A cache's key file; None when it is missing (never built), a warning too when it is unreadable."""
    try:
        saved = json.loads(key_path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        log.warning("%s", f"embedded index cache {key_path} is unreadable; building it again")
        return None
    if not isinstance(saved, dict):
        log.warning("%s", f"embedded index cache {key_path} is not a JSON object; building it again")
        return None
    return saved


def _usable(folder: Path, key_path: Path, saved: dict[str, Any] | None, key: dict[str, Any]) -> bool:
    """Whether the saved cache is this key's and every file of it checks; a damaged one is named in a warning."""
    if saved is None or saved.get("key") != key:
        return False
    if saved.get("empty"):
        return True
    sums = saved.get("files")
    if not isinstance(sums, dict) or not sums:
        return False  # made by an es_rag that recorded no checksums: built again, without a word (not damage)
    bad = damaged(folder, sums)
    if bad is not None:
        log.warning(
            "%s",
            f"embedded index cache file {folder / bad} does not match its checksum ({key_path.name}); building the "
            "cache again",
        )
        return False
    return True


def _key(field_name: str, analyzer: str, ids: Sequence[str]) -> dict[str, Any]:
    rows = f"{zlib.crc32(chr(10).join(ids).encode('utf-8')):08x}:{len(ids)}"
    return {
        "field": field_name,
        "analyzer": analyzer,
        "es_rag": _version(),
        "scoring": SCORING_REVISION,
        "chunks": rows,
    }


def bm25_cache(folder: str | Path, commit: int, field_name: str, analyzer: str) -> Path:
    """The key file of one field's saved BM25 index of commit ``commit``; its data files share the name's stem.

    Args:
        folder: A generation's folder.
        commit: The commit the index was built from.
        field_name: The BM25 field.
        analyzer: The analyzer's name.
    """
    return Path(folder) / f"bm25-{commit:06d}-{field_name}-{analyzer}.key.json"


def cached_bm25(
    folder: str | Path,
    commit: int,
    field_name: str,
    analyzer: str,
    ids: Sequence[str],
    build: Callable[[], Any | None],
) -> Any | None:
    """One field's BM25 index of a commit: its saved files, memory-mapped (``bm25s.BM25.load(mmap=True)``: a cold
    search reads only the pages a query touches, and every process shares them), when they were made from the same
    field, analyzer, es_rag version and chunks; else ``build()``, saved, and returned mapped from the saved files
    (the built arrays are let go). None: the field is empty in every chunk (remembered too).

    Args:
        folder: The generation's folder.
        commit: The commit the documents are.
        field_name: The BM25 field.
        analyzer: The analyzer's name.
        ids: The chunk ids, in row order.
        build: Analyses the field and builds its ``bm25s.BM25`` (None when it is empty everywhere).
    """
    import bm25s

    key_path = bm25_cache(folder, commit, field_name, analyzer)
    stem = key_path.name.removesuffix("key.json")
    names = {arg: stem + part for arg, part in _BM25_PARTS.items()}
    key = _key(field_name, analyzer, ids)
    saved = _read_key(key_path)
    if _usable(Path(folder), key_path, saved, key):
        assert saved is not None
        if saved.get("empty"):
            return None
        try:
            return bm25s.BM25.load(str(folder), mmap=True, show_progress=False, **names)
        except Exception:
            pass
    model = build()
    tmp = Path(folder) / f"bm25-{os.getpid()}.tmp"
    try:
        tmp.mkdir(exist_ok=True)
        sums: dict[str, dict[str, Any]] = {}
        if model is not None:
            model.save(str(tmp), show_progress=False, **names)
            sums = file_sums(tmp, list(names.values()))  # (the non-occurrence array exists only for some BM25 variants)
            for name in sums:  # renamed into place: a process that maps the old file keeps reading it
                os.replace(tmp / name, Path(folder) / name)
        (tmp / key_path.name).write_text(
            json.dumps({"key": key, "empty": model is None, "files": sums}), encoding="utf-8"
        )
        os.replace(tmp / key_path.name, key_path)  # last: the files are complete before the key names them
    except OSError:  # a full disk, a read-only folder: the next cold search builds again
        return model
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if model is None:
        return None
    try:
        return bm25s.BM25.load(str(folder), mmap=True, show_progress=False, **names)
    except Exception:
        return model


def cached_ident(
    folder: str | Path, commit: int, field_name: str, ids: Sequence[str], build: Callable[[], IdentIndex]
) -> IdentIndex:
    """One field's identifier index of a commit (:class:`~es_rag.embedded.ident.IdentIndex`): its saved arrays,
    memory-mapped, when they were made from the same field, es_rag version and chunks; else ``build()`` and saved.

    Args:
        folder: The generation's folder.
        commit: The commit the documents are.
        field_name: The field.
        ids: The chunk ids, in row order.
        build: Analyses the field of every chunk.
    """
    from es_rag.embedded.ident import IdentIndex

    folder = Path(folder)
    key_path = folder / f"ident-{commit:06d}-{field_name}-identifier.key.json"
    stem = key_path.name.removesuffix("key.json")
    key = _key(field_name, "identifier", ids)
    if _usable(folder, key_path, _read_key(key_path), key):
        try:
            return IdentIndex.load(folder, stem)
        except (OSError, ValueError):  # checked, yet unreadable (another version's layout): made again
            pass
    index = build()
    tmp = folder / f"ident-{os.getpid()}.tmp"
    try:
        tmp.mkdir(exist_ok=True)
        sums = file_sums(tmp, index.save(tmp, stem))
        for name in sums:
            os.replace(tmp / name, folder / name)
        (tmp / key_path.name).write_text(json.dumps({"key": key, "files": sums}), encoding="utf-8")
        os.replace(tmp / key_path.name, key_path)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return index


@functools.cache
def _version() -> str:
    """es_rag's installed version: a cache made by another version's analyzers is not read."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("es-rag")
    except PackageNotFoundError:  # pragma: no cover - a source tree without its metadata
        return "unknown"
