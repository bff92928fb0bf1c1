"""Blue-green generations of an embedded index folder: versioned sub-folders and an atomically replaced pointer file.

Layout of ``--index-dir DIR``::

    DIR/CURRENT                     the live generation's name (absent: DIR itself is the index, the layout before
                                    blue-green, called the ``legacy`` generation)
    DIR/generations/<gen>/          one complete embedded index each (its manifest meta.json and the data files it
                                    names: :mod:`es_rag.embedded.store`)
    DIR/write.lock                  the one-writer lock of the whole folder (:func:`es_rag.embedded.store.write_lock`)

The swap writes ``CURRENT.tmp``, flushes it to disk and renames it over ``CURRENT`` (``os.replace``: atomic on POSIX
and Windows), so a reader opening the folder sees the old generation or the new one, never a mix. The legacy files in
``DIR`` are left in place by the first swap (no data is deleted, unlike the first swap on Elasticsearch, where an alias
cannot take an index's name): ``CURRENT`` containing ``legacy`` serves them again.

A backend reads the pointer when it opens the folder; an open backend (a running :class:`es_rag.RagClient`) keeps
serving the generation it opened until it is opened again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from es_rag.embedded import store
from es_rag.errors import ConfigError

POINTER = "CURRENT"
GENERATIONS = "generations"
LEGACY = "legacy"
"""The name of the index kept directly in the folder (the layout before blue-green)."""


def current_generation(root: str | Path) -> str | None:
    """The live generation of the folder (None: no pointer, the folder itself is the index).

    Args:
        root: The ``--index-dir`` folder.
    """
    path = Path(root) / POINTER
    if not path.is_file():
        return None
    name = path.read_text(encoding="utf-8").strip()
    if not name:
        raise ConfigError(f"{path} is empty: write the live generation's name into it (es-rag reindex --status)")
    return name


def generation_dir(root: str | Path, generation: str) -> Path:
    """The folder of ``generation`` (``legacy``: the root itself).

    Args:
        root: The ``--index-dir`` folder.
        generation: A generation name.
    """
    return Path(root) if generation == LEGACY else Path(root) / GENERATIONS / generation


def live_directory(root: str | Path) -> Path:
    """The folder a backend opened on ``root`` reads and writes: the live generation's.

    Args:
        root: The ``--index-dir`` folder.

    Raises:
        ConfigError: The pointer names a generation that is not there.
    """
    gen = current_generation(root)
    if gen is None:
        return Path(root)
    folder = generation_dir(root, gen)
    if not store.has_manifest(folder):
        raise ConfigError(
            f"{Path(root) / POINTER} names generation {gen!r}, but {folder} holds no index: es-rag reindex --status "
            f"--index-dir {root} lists the generations; es-rag reindex --rollback serves the previous one"
        )
    return folder


def has_index(root: str | Path) -> bool:
    """Whether ``root`` holds an embedded index (directly or through its pointer).

    Args:
        root: The ``--index-dir`` folder.
    """
    try:
        return store.has_manifest(live_directory(root))
    except ConfigError:
        return True  # an index folder with a broken pointer: opening it says what is wrong


def list_generations(root: str | Path) -> list[str]:
    """Every generation with an index, oldest first (``legacy`` first when the folder has its own index).

    Args:
        root: The ``--index-dir`` folder.
    """
    base = Path(root) / GENERATIONS
    found = sorted(p.name for p in base.iterdir() if store.has_manifest(p)) if base.is_dir() else []
    return ([LEGACY] if store.has_manifest(root) else []) + found


def write_pointer(root: str | Path, generation: str) -> None:
    """Serve ``generation``: write ``CURRENT.tmp``, fsync it, rename it over ``CURRENT``.

    Args:
        root: The ``--index-dir`` folder.
        generation: A generation with an index.

    Raises:
        ConfigError: ``generation`` holds no index.
    """
    if not store.has_manifest(generation_dir(root, generation)):
        raise ConfigError(f"generation {generation!r} holds no index in {root}: {', '.join(list_generations(root))}")
    tmp = Path(root) / (POINTER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(generation + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, Path(root) / POINTER)


def remove_generation(root: str | Path, generation: str) -> None:
    """Delete a retired generation's files (never the live one).

    Args:
        root: The ``--index-dir`` folder.
        generation: The retired generation.

    Raises:
        ConfigError: ``generation`` is live.
    """
    live = current_generation(root) or LEGACY
    if generation == live:
        raise ConfigError(f"generation {generation!r} is live in {root}: it is never deleted")
    if generation == LEGACY:
        store.remove(root)
        return
    shutil.rmtree(generation_dir(root, generation))


def stored_embedding_versions(folder: str | Path) -> dict[str, int]:
    """``embedding_version`` -> chunks in one generation's folder (no vectors loaded; the pointer is not followed, so
    ``legacy`` reads the root's own index).

    Args:
        folder: A generation's folder (:func:`generation_dir`).

    Raises:
        es_rag.embedded.store.DamagedIndex: A file of it is damaged.
    """
    out: dict[str, int] = {}
    snap = store.read(folder, vectors=False)
    for doc in snap.children if snap is not None else ():
        version = str(doc.get("embedding_version") or "none")
        out[version] = out.get(version, 0) + 1
    return out
