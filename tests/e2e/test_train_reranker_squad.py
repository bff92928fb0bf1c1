"""``es-rag train-reranker --squad``: mine, train, measure and ship, end to end on tiny models and a small SQuAD
file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from es_rag.cli import main

TOPICS = ["sync", "wipe", "trash", "upload", "laptop", "policy"]


def _squad(path: Path) -> Path:
    data = []
    for a in range(8):
        paragraphs = []
        for i, topic in enumerate(TOPICS):
            context = f"The {topic} guide {a}: remote {topic} is kept for {i + a} days on all plans."
            paragraphs.append(
                {"context": context, "qas": [{"id": f"p{a}-{i}", "question": f"How long is {topic} kept?"}]}
            )
        data.append({"title": f"Product_{a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return path


def _golden(folder: Path) -> tuple[Path, Path]:
    docs = folder / "docs"
    docs.mkdir(parents=True)
    text = "# Nimbus\n\n" + "\n\n".join(f"Remote {t} is kept for {i} days." for i, t in enumerate(TOPICS)) + "\n"
    (docs / "Nimbus.md").write_text(text, encoding="utf-8")
    rows = []
    for t in TOPICS:
        start = text.index(f"Remote {t}")
        rows.append({"id": t, "question": f"How long is {t} kept?", "gold": ["Nimbus.md"],
                     "spans": [{"source_id": "Nimbus.md", "start": start, "end": start + 6}]})  # fmt: skip
    golden = folder / "golden.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return golden, docs


def test_train_measure_resume_and_ship(
    tiny_bi_encoder: Path, tiny_cross_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    squad = _squad(tmp_path / "train.json")
    golden, docs = _golden(tmp_path / "myset")
    out, ship = tmp_path / "model", tmp_path / "shipped"
    argv = [
        "train-reranker", "--squad", str(squad), "--out", str(out), "--base", str(tiny_cross_encoder),
        "--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32", "--max-length", "48",
        "--time-budget", "0", "--max-steps", "4", "--eval-every", "2", "--holdout", "0.25",
        "--eval-golden", str(golden), str(docs), "--ship", str(ship), "--licence", "test data",
    ]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["steps"] == 4 and report["data"]["articles"] == 8 and report["data"]["questions"] == 48
    assert report["data"]["held_apart_questions"] == 12  # 2 of 8 articles, 6 questions each
    assert report["data"]["training_questions"] == 36 == report["data"]["groups"]
    assert set(report["data"]["negatives_by_origin"]) == {"same-article", "other-article"}
    assert [p["step"] for p in report["curve"]] == [0, 2, 4]
    for point in report["curve"]:
        assert 0.0 <= point["held_apart_top1"] <= 1.0 and point["held_apart_chance"] == pytest.approx(1 / 6, abs=1e-3)
        assert point["myset_chance"] == pytest.approx(1 / 6, abs=1e-3)  # a golden set is named after its folder
    assert (out / "groups.jsonl").is_file() and (out / "es_rag_training.json").is_file()
    card = json.loads((ship / "es_rag_model.json").read_text())
    assert card["seed"] == 13 and list(card["data_sha256"]) == [str(squad)]
    assert card["data_sha256"][str(squad)] == hashlib.sha256(squad.read_bytes()).hexdigest()
    assert card["licence"] == "test data" and card["steps"] == 4 and card["max_length"] == 48
    assert card["trained_by"].startswith("es-rag train-reranker --squad") and card["questions_seen"] == 4 * 4
    # the same command again resumes from the checkpoint and the mined groups: nothing left to train
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "mined groups read from" in err and "resumed from" in err and "at step 4" in err
    # the shipped folder is what --rerank-model loads
    from es_rag.cross_encoder.model import CrossEncoderReranker

    shipped = CrossEncoderReranker(str(ship))
    assert shipped.backend == "onnx" and len(shipped.score("q", [("Content:\n", "a"), ("Content:\n", "b")]).scores) == 2


def test_dataset_and_squad_are_exclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train-reranker", "--out", str(tmp_path / "m")]) == 2
    assert main(["train-reranker", "--out", str(tmp_path / "m"), "--dataset", "x", "--squad", "y"]) == 2
    assert "give either --dataset DIR or --squad FILE" in capsys.readouterr().err
