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
from collections.abc import Callable, Iterable, Sequence
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
        ranking_text_version: Version of :func:`es_rag.cross_encoder.model.ranking_text`.
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
        self._sources: dict[str, frozenset[tuple[str, str, str | None]]] = {}
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

    def put(self, key: str, value: Any, *, sources: Iterable[tuple[str, str, str | None]] = ()) -> None:
        """Store ``value``, evicting the least recently used entry when full.

        Args:
            key: A :func:`cache_key`.
            value: The result to keep.
            sources: ``(tenant_id, source_id, source_version)`` of the candidates behind the result, so
                :meth:`on_retired` / :meth:`on_deleted` can drop it (lineage listener).
        """
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            self._sources[key] = frozenset(sources)
            while len(self._data) > self.max_entries:
                old, _ = self._data.popitem(last=False)
                self._sources.pop(old, None)

    def _drop(self, match: Callable[[tuple[str, str, str | None]], bool]) -> int:
        with self._lock:
            doomed = [k for k, tags in self._sources.items() if any(match(t) for t in tags)]
            for k in doomed:
                self._data.pop(k, None)
                self._sources.pop(k, None)
            return len(doomed)

    def on_retired(self, tenant_id: str, source_id: str, source_version: str) -> None:
        """Lineage listener: drop every result computed over ``source_version`` of a tenant's source.

        Args:
            tenant_id: The tenant.
            source_id: The source.
            source_version: The version no longer served.
        """
        self._drop(lambda t: t == (tenant_id, source_id, source_version))

    def on_deleted(self, tenant_id: str, source_id: str) -> None:
        """Lineage listener: drop every result computed over any version of a tenant's deleted source.

        Args:
            tenant_id: The tenant.
            source_id: The deleted source.
        """
        self._drop(lambda t: t[0] == tenant_id and t[1] == source_id)

    def __len__(self) -> int:
        return len(self._data)
