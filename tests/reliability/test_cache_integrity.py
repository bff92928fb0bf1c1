"""Every file that answers a search is verified before use (issue 43, item 5).

The manifest has checked the commit's data files since issue 33; the caches beside them (``bm25-*``, ``ident-*``: 75 of
the 82 files of a real index) loaded whenever their key matched. Two findings of the reliability probe are replayed:
8 bytes flipped in ``ident-...-text-identifier.lengths.npy`` changed the exact channel's scores, and one term's
postings set to 40.0 in ``bm25-...-text...data.npy`` reordered the top hits, both with exit 0 and nothing on stderr.
Each cache's key file now records its files' sizes and CRC-32s; a damaged cache is built again, named in one warning.

The harness at the end flips, truncates, deletes and extends bytes in every file of an index, caches included, over
500 seeded trials: each search gives the undamaged answer (scores included) or a one-line :class:`EsRagError` naming
the damaged file, never another exception.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.embedded import store
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.errors import EsRagError
from es_rag.filters import SearchFilter
from es_rag.settings import Settings
from tests.support.crash import state_a, state_b

Q = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
Answer = list[tuple[str, str, float | None, float | None, float | None]]


def answer(folder: Path) -> Answer:
    """What a cold search of ``folder`` serves: per channel, ids with their BM25, dense and exact scores."""
    backend = EmbeddedBackend(folder)
    flt = backend.snapshot_versions(SearchFilter("acme"))
    ret = backend.retrieve("reset the password E1042 history", Q, flt, Settings(vector_dims=4))
    return [
        (channel, h.chunk_id, h.bm25_score, h.dense_score, h.exact_score)
        for channel, hits in sorted(ret.channels.items())
        for h in hits
    ]


def caches(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith(("bm25-", "ident-")))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Answer]:
    """An index of two commits (so that old caches were removed once) with its caches built by a search."""
    folder = tmp_path_factory.mktemp("integrity") / "idx"
    backend = EmbeddedBackend(folder)
    state_a(backend)
    backend.flush()
    state_b(backend)
    backend.index([], [])
    backend.flush()
    expected = answer(folder)  # builds and saves the caches
    assert len(caches(folder)) >= 10 and expected
    assert answer(folder) == expected  # read back from them
    return folder, expected


def copy(pristine: tuple[Path, Answer], tmp_path: Path) -> Path:
    folder = tmp_path / "idx"
    shutil.copytree(pristine[0], folder)
    return folder


def warnings_about(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and name in r.getMessage()]


def test_flipped_bytes_in_the_identifier_lengths_are_caught(
    pristine: tuple[Path, Answer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = copy(pristine, tmp_path)
    target = next(p for p in caches(folder) if p.name.endswith("-text-identifier.lengths.npy"))
    raw = bytearray(target.read_bytes())
    end = len(raw)
    raw[end - 8 : end] = bytes(b ^ 0xFF for b in raw[end - 8 : end])
    target.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        assert answer(folder) == pristine[1]
    assert len(warnings_about(caplog, target.name)) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert answer(folder) == pristine[1]  # rebuilt: the next search reads it without a word
    assert not warnings_about(caplog, target.name)


def test_postings_rewritten_as_a_valid_array_are_caught(
    pristine: tuple[Path, Answer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = copy(pristine, tmp_path)
    target = next(p for p in caches(folder) if p.name.startswith("bm25-") and p.name.endswith("-text-default.data.npy"))
    data = np.load(target)
    data[: max(1, len(data) // 3)] = 40.0  # a well-formed .npy: only the checksum can tell
    np.save(target, data)
    with caplog.at_level(logging.WARNING):
        assert answer(folder) == pristine[1]
    assert len(warnings_about(caplog, target.name)) == 1


def test_a_key_file_of_an_older_es_rag_without_checksums_is_built_again(
    pristine: tuple[Path, Answer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index made before checksums: its caches are built again once, silently (an upgrade is no damage)."""
    import json

    folder = copy(pristine, tmp_path)
    for key in (p for p in caches(folder) if p.name.endswith(".key.json")):
        saved = json.loads(key.read_text())
        saved.pop("files", None)
        key.write_text(json.dumps(saved))
    with caplog.at_level(logging.WARNING):
        assert answer(folder) == pristine[1]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
    assert all("files" in json.loads(p.read_text()) for p in caches(folder) if p.name.endswith(".key.json"))


def test_a_full_disk_during_a_save_keeps_the_live_commits_caches(
    pristine: tuple[Path, Answer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save removed every cache of the live commit before writing, then said "nothing was changed"."""
    folder = copy(pristine, tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "write.lock"}
    real = store._Sink.write
    budget = {"left": 300}

    def write(self: store._Sink, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(view) > budget["left"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        budget["left"] -= len(view)
        return real(self, view)

    monkeypatch.setattr(store._Sink, "write", write)
    backend = EmbeddedBackend(folder)
    state_a(backend)
    with pytest.raises(store.DiskFull, match="nothing was changed"):
        backend.flush()
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "write.lock"}
    assert after == before
    monkeypatch.undo()
    assert answer(folder) == pristine[1]


def _flip(path: Path, rng: random.Random) -> str:
    raw = bytearray(path.read_bytes())
    if not raw:
        path.write_bytes(b"\x00")
        return "grown from empty"
    start = rng.randrange(len(raw))
    width = rng.randint(1, 8)
    for i in range(start, min(start + width, len(raw))):
        raw[i] ^= rng.randint(1, 255)
    path.write_bytes(bytes(raw))
    return f"{width} bytes flipped at {start}"


def _truncate(path: Path, rng: random.Random) -> str:
    size = path.stat().st_size
    keep = rng.randrange(size) if size else 0
    with open(path, "r+b") as fh:
        fh.truncate(keep)
    return f"truncated to {keep} of {size}"


def _delete(path: Path, rng: random.Random) -> str:
    path.unlink()
    return "deleted"


def _extend(path: Path, rng: random.Random) -> str:
    with open(path, "ab") as fh:
        fh.write(rng.randbytes(rng.randint(1, 64)))
    return "extended"


DAMAGE: dict[str, Callable[[Path, random.Random], str]] = {
    "flip": _flip,
    "truncate": _truncate,
    "delete": _delete,
    "extend": _extend,
}
TRIALS = 500


def test_damage_anywhere_gives_the_same_answer_or_one_named_error(
    pristine: tuple[Path, Answer], tmp_path: Path
) -> None:
    rng = random.Random(43)
    names = sorted(p.name for p in pristine[0].iterdir() if p.is_file())
    assert any(n.startswith("bm25-") for n in names) and store.MANIFEST in names
    outcomes = {"same answer": 0, "named error": 0}
    for trial in range(TRIALS):
        folder = tmp_path / f"t{trial}"
        shutil.copytree(pristine[0], folder)
        name = names[trial % len(names)]  # every file, in turn; the damage drawn at random
        how = rng.choice(sorted(DAMAGE))
        what = DAMAGE[how](folder / name, rng)
        try:
            got = answer(folder)
        except EsRagError as exc:
            message = str(exc)
            assert "\n" not in message and "Traceback" not in message, (name, what, message)
            outcomes["named error"] += 1
        except Exception as exc:  # any other exception is a traceback for the user
            raise AssertionError(f"trial {trial}: {name} {what}: {type(exc).__name__}: {exc}") from exc
        else:
            assert got == pristine[1], f"trial {trial}: {name} {what}: a changed answer"
            outcomes["same answer"] += 1
        shutil.rmtree(folder)
    assert sum(outcomes.values()) == TRIALS and all(outcomes.values()), outcomes
