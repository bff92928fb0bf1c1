"""Porter stems remembered across processes (issue 46: nltk's import was 1.2-1.4 s of a cold search): a later process
stems words seen before without importing nltk, gets nltk's stems for them, and ignores a damaged file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from es_rag.embedded import stem_cache

WORDS = ["running", "generalizations", "relational", "hopefulness", "abilities", "revved", "as"]
SCRIPT = (
    "import sys, json\n"
    "from es_rag.embedded.token_filters import porter_stem\n"
    "words = json.loads(sys.argv[1])\n"
    "print(json.dumps([[porter_stem(w) for w in words], 'nltk' in sys.modules]))\n"
)


def stem_in_a_process(cache: Path, words: list[str]) -> tuple[list[str], bool]:
    env = {**os.environ, stem_cache.CACHE_ENV: str(cache)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(words)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    stems, imported = json.loads(out.stdout)
    return stems, imported


def nltk_stems(words: list[str]) -> list[str]:
    from nltk.stem.porter import PorterStemmer

    stemmer = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)
    return [str(stemmer.stem(w, to_lowercase=False)) for w in words]


def test_a_later_process_stems_known_words_without_nltk(tmp_path: Path) -> None:
    first, imported = stem_in_a_process(tmp_path, WORDS)
    assert imported and first == nltk_stems(WORDS)
    again, imported = stem_in_a_process(tmp_path, WORDS)
    assert again == first and not imported  # every word known: nltk is never imported
    more, imported = stem_in_a_process(tmp_path, [*WORDS, "nationalities"])
    assert imported and more == nltk_stems([*WORDS, "nationalities"])  # one new word: nltk, as before
    _, imported = stem_in_a_process(tmp_path, ["nationalities"])
    assert not imported  # and it was added to the file


def test_a_damaged_file_is_ignored(tmp_path: Path) -> None:
    stem_in_a_process(tmp_path, WORDS)
    (data,) = [p for p in (tmp_path / "porter").glob("stems-*.json") if not p.name.endswith(".key.json")]
    text = data.read_text(encoding="utf-8")
    data.write_text(text.replace('"run"', '"xyz"'), encoding="utf-8")  # same size, wrong stem: only the CRC tells
    stems, imported = stem_in_a_process(tmp_path, WORDS)
    assert imported and stems == nltk_stems(WORDS)


def test_an_unwritable_cache_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    stems, imported = stem_in_a_process(blocked, WORDS)
    assert imported and stems == nltk_stems(WORDS)
    cache = stem_cache.StemCache()
    monkeypatch.setenv(stem_cache.CACHE_ENV, str(blocked))
    cache.add("running", "run")
    cache.save()  # no folder can be made under a file: nothing raised, nothing written
    assert cache.get("running") == "run"
