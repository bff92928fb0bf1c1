"""Porter stems remembered from one process to the next, so a search on words seen before never imports nltk.

The ``english`` analyzer's mirror stems with nltk's Porter stemmer (:func:`es_rag.embedded.token_filters.porter_stem`:
Martin Porter's own implementation, the one Lucene's ``PorterStemmer`` derives from). Importing nltk imports its whole
package, scipy.stats and scikit-learn included: 1.2-1.4 s of a cold ``es-rag search`` on 2 cores, to stem a handful of
query words (issue 46). A stem is a pure function of its word and the stemmer, so the stems a process computed are
written, when it exits, to ``$ES_RAG_CACHE/porter`` (default ``~/.cache/es_rag/porter``), one file per nltk version;
the next process looks a word up there first and imports nltk only for a word it has never seen. An ingest stems every
word of its documents, so the questions asked about them mostly find their words there.

The file's size and CRC-32 are kept beside it and checked when it is read; a damaged, foreign or unreadable file is
ignored (every stem is computed again), a file that cannot be written is not written. Up to :data:`MAX_STEMS` words.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import json
import os
import threading
import zlib
from pathlib import Path

from es_rag.cache_files import CACHE_ENV as CACHE_ENV  # re-exported
from es_rag.cache_files import cache_root

MAX_STEMS = 2_000_000
"""Words the file holds at most (about 40 MB); later words are computed and not written."""
FORMAT = 1


def _paths() -> tuple[Path, Path] | None:
    try:
        version = importlib.metadata.version("nltk")
    except importlib.metadata.PackageNotFoundError:
        return None
    root = cache_root() / "porter"
    stem = f"stems-{FORMAT}-nltk-{version}-martin"
    return root / f"{stem}.json", root / f"{stem}.key.json"


def _crc(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


class StemCache:
    """The stems known from earlier processes (read once, lazily) and those this process computed."""

    def __init__(self) -> None:
        self._known: dict[str, str] | None = None
        self._new: dict[str, str] = {}
        self._lock = threading.Lock()

    def _load(self) -> dict[str, str]:
        paths = _paths()
        if paths is None:
            return {}
        data_path, key_path = paths
        try:
            data = data_path.read_bytes()
            key = json.loads(key_path.read_text(encoding="utf-8"))
            if key.get("bytes") != len(data) or key.get("crc32") != _crc(data):
                return {}
            stems = json.loads(data)
        except (OSError, ValueError, AttributeError):
            return {}
        return stems if isinstance(stems, dict) else {}

    def get(self, word: str) -> str | None:
        """The stem of ``word`` if a process computed it before, else None."""
        known = self._known
        if known is None:
            with self._lock:
                if self._known is None:
                    self._known = self._load()
                known = self._known
        return known.get(word) or self._new.get(word)

    def add(self, word: str, stem: str) -> None:
        """Remember a stem this process computed (written by :meth:`save`)."""
        self._new[word] = stem

    def save(self) -> None:
        """Merge this process's new stems into the file (written beside it, then renamed); never raises."""
        with self._lock:
            new = dict(self._new)
            if not new:
                return
            paths = _paths()
            if paths is None:
                return
            data_path, key_path = paths
            merged = {**self._load(), **new}
            if len(merged) > MAX_STEMS:
                return
            try:
                data_path.parent.mkdir(parents=True, exist_ok=True)
                data = json.dumps(merged, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
                tmp_data = data_path.with_name(f".{data_path.name}.{os.getpid()}")
                tmp_key = key_path.with_name(f".{key_path.name}.{os.getpid()}")
                tmp_data.write_bytes(data)
                tmp_key.write_text(json.dumps({"bytes": len(data), "crc32": _crc(data)}), encoding="utf-8")
                os.replace(tmp_data, data_path)
                os.replace(tmp_key, key_path)  # a reader between the two renames sees a mismatch: no stems, no error
            except OSError:
                for leftover in data_path.parent.glob(f".*.{os.getpid()}"):
                    leftover.unlink(missing_ok=True)
                return
            self._known, self._new = merged, {}


STEMS = StemCache()
atexit.register(STEMS.save)
