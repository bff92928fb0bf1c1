"""Cold searches (issue 31): each BM25 field's index (memory-mapped when read) and the identifier tokens are kept
with the commit they were made from, so a new process searching an unchanged index reads them instead of analysing
every chunk again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.embedded import lexical, store
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
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("ident-", "bm25-")))


def test_a_cold_search_reads_the_saved_tokens_and_finds_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "idx"
    built = EmbeddedBackend(folder)
    state_a(built)
    built.flush()
    built.prepare_search()
    saved = _tokens(folder)
    assert "bm25-000001-text-default.key.json" in saved and "bm25-000001-text-default.data.npy" in saved
    assert "ident-000001-text-identifier.key.json" in saved and "ident-000001-text-identifier.flat.npy" in saved
    expected = _search(EmbeddedBackend(folder))
    calls: list[str] = []

    def counted(analyze: Any) -> Any:
        return lambda text: (calls.append(text), analyze(text))[1]

    cold = EmbeddedBackend(folder)
    cold._analyze = counted(cold._analyze)
    monkeypatch.setattr(lexical, "identifier_analyzer", counted(lexical.identifier_analyzer))
    # no chunk analysed: every field read from its tokens; only the query's identifier, once per exact field
    assert _search(cold) == expected and calls == ["E1042"] * 3
    text = cold._field_index("text")
    assert isinstance(text.scores["data"], np.memmap)  # mapped from the saved file, not read into memory
    assert isinstance(cold._ident_field("text").lengths, np.memmap)


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
    assert _tokens(folder) and all(n.startswith(("ident-000002-", "bm25-000002-")) for n in _tokens(folder))
    expected = _search(backend)  # (before the damage: this process maps the files the damage rewrites in place)
    for name in _tokens(folder):
        (folder / name).write_text("{not json")
    assert _search(EmbeddedBackend(folder)) == expected  # analysed again, the cache rewritten
    assert isinstance(EmbeddedBackend(folder)._ident_field("text").lengths, np.memmap)  # the rewritten cache is read


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
