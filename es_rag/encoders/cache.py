"""On-disk embedding cache keyed by model version and text hash (a re-run never re-encodes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from es_rag.cache_files import cache_root


def default_cache_dir() -> Path:
    """``$ES_RAG_CACHE`` or ``$XDG_CACHE_HOME/es_rag`` (``~/.cache/es_rag``): :func:`es_rag.cache_files.cache_root`."""
    return cache_root()


class EmbeddingCache:
    """Vectors of one model, stored as ``<dir>/<model-hash>/{keys.json,vectors.npy}``.

    Args:
        directory: Cache root.
        model_version: Identifies the model (name + revision); part of every key.
    """

    def __init__(self, directory: str | Path, model_version: str) -> None:
        self.model_version = model_version
        self.root = Path(directory) / hashlib.sha256(model_version.encode()).hexdigest()[:16]
        self._keys: dict[str, int] = {}
        self._vectors: list[np.ndarray] = []
        if (self.root / "keys.json").is_file() and (self.root / "vectors.npy").is_file():
            keys = json.loads((self.root / "keys.json").read_text())
            matrix = np.load(self.root / "vectors.npy")
            if len(keys) == len(matrix):
                self._keys = {k: i for i, k in enumerate(keys)}
                self._vectors = list(matrix)

    def key(self, text: str) -> str:
        """Cache key of ``text`` for this model.

        Args:
            text: The embedded text.
        """
        return hashlib.sha256(f"{self.model_version}\x00{text}".encode()).hexdigest()

    def embed(self, texts: Sequence[str], encode: Callable[[Sequence[str]], np.ndarray]) -> tuple[np.ndarray, int]:
        """Vectors for ``texts``, encoding only the missing ones; returns ``(matrix, n_encoded)``.

        Args:
            texts: Texts to embed.
            encode: Encoder for the texts not in the cache.
        """
        keys = [self.key(t) for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self._keys]
        if missing:
            fresh = encode([texts[i] for i in missing])
            for i, vec in zip(missing, fresh, strict=True):
                if keys[i] not in self._keys:
                    self._keys[keys[i]] = len(self._vectors)
                    self._vectors.append(np.asarray(vec, dtype=np.float32))
            self.save()
        if not texts:
            return np.zeros((0, 0), dtype=np.float32), 0
        return np.stack([self._vectors[self._keys[k]] for k in keys]), len(missing)

    def save(self) -> None:
        """Persist the cache (atomic replace)."""
        self.root.mkdir(parents=True, exist_ok=True)
        ordered = sorted(self._keys, key=self._keys.__getitem__)
        with open(self.root / "vectors.npy.tmp", "wb") as fh:
            np.save(fh, np.stack(self._vectors).astype(np.float32))
        (self.root / "vectors.npy.tmp").replace(self.root / "vectors.npy")
        (self.root / "keys.json.tmp").write_text(json.dumps(ordered))
        (self.root / "keys.json.tmp").replace(self.root / "keys.json")
