"""``scripts/no_answer_sets.py``: the no-answer split of a golden set, both kinds of unanswerable question (a left-out
article; a removed answer paragraph, the rest of the article indexed) and the spans of the questions that stay
answerable, moved to the cut article's offsets."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "no_answer_sets.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("no_answer_sets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cut_and_shift_agree(script: ModuleType) -> None:
    text = "# T\n\nalpha one\n\nbeta two\n\ngamma three\n"
    paras = script.paragraphs(text)
    assert [text[s:e] for s, e in paras] == ["alpha one", "beta two", "gamma three\n"]
    cut = script.cut(text, [paras[1]])
    assert cut == "# T\n\nalpha one\n\ngamma three\n"
    for pos in range(len(text)):
        new = script.shift(pos, [paras[1]])
        if paras[1][0] <= pos < paras[1][1] + 2:
            assert new is None
        else:
            assert new is not None and cut[new] == text[pos]


def _article(n: int) -> tuple[str, list[dict[str, object]]]:
    """An article of ``n`` paragraphs, each the answer of one question; paragraph 0's answer also occurs in the
    last paragraph (so removing paragraph 0 leaves that question answerable elsewhere: ambiguous)."""
    paras = [f"Paragraph {i} says the answer is word{i}x." for i in range(n)]
    paras[-1] += " It repeats word0x."
    text = "# Title\n\n" + "\n\n".join(paras) + "\n"
    return text, [{"answer": f"word{i}x"} for i in range(n)]


def test_the_split_writes_both_kinds_and_moves_the_spans(tmp_path: Path) -> None:
    src = tmp_path / "set"
    (src / "docs").mkdir(parents=True)
    lines = []
    for a in range(6):
        name = f"A{a}.md"
        text, answers = _article(8)
        (src / "docs" / name).write_text(text, encoding="utf-8")
        for i, ans in enumerate(answers):
            start = text.index(str(ans["answer"]))
            span = {"source_id": name, "start": start, "end": start + len(str(ans["answer"]))}
            lines.append({"id": f"{a}-{i}", "question": f"what does paragraph {i} say?", "gold": [name],
                          "spans": [span], "category": "answerable"})  # fmt: skip
    (src / "golden.jsonl").write_text("".join(json.dumps(q) + "\n" for q in lines), encoding="utf-8")
    out = tmp_path / "out"
    args = ["--set", str(src), "--train", "2", "--calib", "2", "--left-out", "1", "--removed", "0.5"]
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), *args], capture_output=True, text=True, check=True)
    split = json.loads(done.stdout)
    assert json.loads((out / "split.json").read_text(encoding="utf-8")) == split
    # one calibration and one test article left out; the other two have half their 8 answer paragraphs removed
    assert len(split["left_out"]) == 2 and not (set(split["left_out"]) & set(split["train"]))
    assert sorted(split["removed"]["paragraphs"].values()) == [4, 4]
    assert set(split["removed"]["paragraphs"]).isdisjoint(split["train"])
    for part in ("calib", "test"):
        assert split["by_category"][part]["no-answer"] == 8
        ambiguous = split["ambiguous_left_out"][part]
        assert split["by_category"][part]["no-answer-paragraph"] + ambiguous == 4
        assert split["by_category"][part]["answerable"] == 4
    docs = {p.name: p.read_text(encoding="utf-8") for p in (out / "docs").glob("*.md")}
    assert set(docs) == {f"A{a}.md" for a in range(6)} - set(split["left_out"])
    for part in ("train", "calib", "test"):
        for line in (out / f"{part}.jsonl").read_text(encoding="utf-8").splitlines():
            q = json.loads(line)
            if not q["gold"]:
                assert q["category"] in ("no-answer", "no-answer-paragraph") and "spans" not in q
                continue
            i = q["id"].split("-")[1]
            for sp in q["spans"]:  # every kept span reads its answer in the indexed copy
                assert docs[sp["source_id"]][sp["start"] : sp["end"]] == f"word{i}x"
            if q["category"] == "answerable" and q["gold"][0] in split["removed"]["paragraphs"]:
                assert f"Paragraph {i} says" in docs[q["gold"][0]]
    for name in split["removed"]["paragraphs"]:  # a removed paragraph's question is gone or unanswerable
        assert docs[name].count("Paragraph ") == 4
    # without --removed the split is the left-out-article one of before: train articles keep every paragraph
    plain = tmp_path / "plain"
    subprocess.run([sys.executable, str(SCRIPT), str(plain), *args[:-2], "--removed", "0"], check=True,
                   capture_output=True)  # fmt: skip
    assert all((plain / "docs" / name).read_bytes() == (src / "docs" / name).read_bytes() for name in docs)
