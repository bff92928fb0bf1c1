"""In-memory cache of reranker results (seed 002 §25).

The key covers everything that changes the result: the normalised query, the ordered candidate ids,
the reranker model name and version (weights fingerprint + backend), the ranking_text version and
the prompt / context version, plus the scoring options (truncation strategy, aggregation). After a
model, ranking_text or prompt update the old entries are simply never hit again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from es_rag.errors import ConfigError


def normalize_query(query: str) -> str:
    """NFKC, case-folded, whitespace collapsed.

    Args:
        query: The user's query.
    """
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def cache_key(
    query: str,
    candidate_ids: Sequence[str],
    *,
    model: str,
    model_version: str,
    ranking_text_version: str,
    prompt_version: str,
    options: dict[str, Any] | None = None,
) -> str:
    """SHA-256 over every input that changes a rerank result.

    Args:
        query: The user's query (normalised here).
        candidate_ids: Candidate chunk ids in the order they are scored.
        model: Reranker model name.
        model_version: Fingerprint of the loaded weights.
        ranking_text_version: Version of :func:`es_rag.rerank.ranking_text`.
        prompt_version: Version of the context template / prompt.
        options: Scoring options (strategy, aggregation, max length).
    """
    payload = {
        "q": normalize_query(query),
        "ids": list(candidate_ids),
        "model": model,
        "model_version": model_version,
        "ranking_text_version": ranking_text_version,
        "prompt_version": prompt_version,
        "options": options or {},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class ResultCache:
    """Thread-safe LRU of rerank results.

    Args:
        max_entries: Entries kept (>= 1).
    """

    def __init__(self, max_entries: int = 256) -> None:
        if max_entries < 1:
            raise ConfigError(f"max_entries: must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._data: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Any | None:
        """The cached value, or None (counted as a miss).

        Args:
            key: A :func:`cache_key`.
        """
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return None

    def put(self, key: str, value: Any) -> None:
        """Store ``value``, evicting the least recently used entry when full.

        Args:
            key: A :func:`cache_key`.
            value: The result to keep.
        """
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)
