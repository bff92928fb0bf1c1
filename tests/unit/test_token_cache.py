"""Cold searches (issue 31): the analysed BM25 and identifier tokens are kept with the commit they were analysed
from, so a new process searching an unchanged index reads them instead of analysing every chunk again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.embedded import backend as backend_module
from es_rag.embedded import store
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.settings import Settings
from tests.support.crash import state_a, state_b

Q = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)


def _search(backend: EmbeddedBackend) -> list[str]:
    flt = backend.snapshot_versions(SearchFilter("acme"))
    ret = backend.retrieve("reset the password E1042", Q, flt, Settings(vector_dims=4))
    return [h.chunk_id for hits in ret.channels.values() for h in hits]


def _tokens(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("tokens-"))


def test_a_cold_search_reads_the_saved_tokens_and_finds_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "idx"
    built = EmbeddedBackend(folder)
    state_a(built)
    built.flush()
    built.prepare_search()
    saved = _tokens(folder)
    assert "tokens-000001-text-default.json" in saved and "tokens-000001-text-identifier.json" in saved
    expected = _search(EmbeddedBackend(folder))
    calls: list[str] = []

    def counted(analyze: Any) -> Any:
        return lambda text: (calls.append(text), analyze(text))[1]

    cold = EmbeddedBackend(folder)
    cold._analyze = counted(cold._analyze)
    monkeypatch.setattr(backend_module, "identifier_analyzer", counted(backend_module.identifier_analyzer))
    # no chunk analysed: every field read from its tokens; only the query's identifier, once per exact field
    assert _search(cold) == expected and calls == ["E1042"] * 3


def test_tokens_follow_the_commit_and_a_damaged_cache_is_only_slower(tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    backend = EmbeddedBackend(folder)
    state_a(backend)
    backend.flush()
    backend.prepare_search()
    state_b(backend)  # written to: the documents in memory are no commit, nothing is read from or saved to a cache
    assert backend._commit is None
    backend.flush()  # the new commit removes the old commit's tokens
    assert _tokens(folder) == []
    backend.prepare_search()
    assert _tokens(folder) and all(n.startswith("tokens-000002-") for n in _tokens(folder))
    for name in _tokens(folder):
        (folder / name).write_text("{not json")
    assert _search(EmbeddedBackend(folder)) == _search(backend)  # analysed again, the cache rewritten
    assert store.read_tokens(folder / _tokens(folder)[0], {"x": 1}) is None  # another key: not read


def test_saving_an_unchanged_index_writes_nothing_and_keeps_its_token_caches(tmp_path: Path) -> None:
    """An unchanged re-run (incremental ingest) saved a new commit anyway, which removed the token caches and made the
    next search analyse every chunk again."""
    folder = tmp_path / "idx"
    backend = EmbeddedBackend(folder)
    state_a(backend)
    backend.flush()
    backend.prepare_search()
    before = sorted(p.name for p in folder.iterdir())
    again = EmbeddedBackend(folder)
    again.flush()  # nothing changed: no new commit
    assert sorted(p.name for p in folder.iterdir()) == before
    again.versions = {**again.versions, "globex": {"active": {}}}  # the registry changed: a new commit
    again.flush()
    assert store.read(folder).meta["commit"] == 2  # type: ignore[union-attr]
