"""Split a golden set with long documents (``../shared/eval/rag-en-train``) for the no-answer recipe of
docs/evaluation.md: a reranker trained on some articles' questions, calibrated on others', and measured on the rest,
with questions made unanswerable by leaving their article out of the index.

    .venv/bin/python scripts/no_answer_sets.py OUT [--set ../shared/eval/rag-en-train] [--seed 28]

The question articles (those with a golden question, in sorted order) are shuffled with ``random.Random(seed)``:
the first ``--train`` articles train, the next ``--calib`` calibrate, the rest test; of the calibration and of the
test articles the first ``--left-out`` each are left out of the index. Written to OUT:

* ``docs/``: the articles the index holds (every article but the left-out ones), copied;
* ``train.jsonl``, ``calib.jsonl``, ``test.jsonl``: golden files; a left-out article's questions keep their text,
  with ``gold: []``, no spans and the category ``no-answer`` (nothing in the index answers them);
* ``beir/``: the training set ``train-reranker`` reads, question -> paragraph: ``corpus.jsonl`` (every paragraph of
  the indexed articles, id ``<file>#<n>``, title = the article's), ``queries.jsonl``, ``qrels/train.tsv`` (train
  questions) and ``qrels/dev.tsv`` (the answerable calibration questions), a question's relevant paragraph being
  the one that holds its first gold span;
* ``split.json``: the seed and which article went where.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path
from typing import Any


def paragraphs(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each blank-line-separated block after the ``# Title`` line."""
    out = []
    pos = 0
    for block in text.split("\n\n"):
        start, end = pos, pos + len(block)
        pos = end + 2
        if block.strip() and not block.startswith("# "):
            out.append((start, end))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--set", type=Path, default=Path(__file__).resolve().parents[2] / "shared/eval/rag-en-train")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--train", type=int, default=12, help="articles whose questions train the reranker")
    ap.add_argument("--calib", type=int, default=6, help="articles whose questions calibrate it")
    ap.add_argument("--left-out", type=int, default=2, help="calibration and test articles left out of the index, each")
    args = ap.parse_args()
    lines = [json.loads(x) for x in (args.set / "golden.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    articles = sorted({g for q in lines for g in q["gold"]})
    rng = random.Random(args.seed)
    rng.shuffle(articles)
    train = articles[: args.train]
    calib = articles[args.train : args.train + args.calib]
    test = articles[args.train + args.calib :]
    left_out = set(calib[: args.left_out]) | set(test[: args.left_out])
    out: Path = args.out
    (out / "docs").mkdir(parents=True, exist_ok=True)
    (out / "beir" / "qrels").mkdir(parents=True, exist_ok=True)
    texts: dict[str, str] = {}
    for path in sorted((args.set / "docs").glob("*.md")):
        if path.name in left_out:
            continue
        shutil.copy2(path, out / "docs" / path.name)
        texts[path.name] = path.read_text(encoding="utf-8")

    files: dict[str, list[dict[str, Any]]] = {"train": [], "calib": [], "test": []}
    for q in lines:
        (source,) = q["gold"]
        name = "train" if source in train else "calib" if source in calib else "test"
        if source in left_out:  # nothing in the index answers it
            q = {"id": q["id"], "question": q["question"], "gold": [], "category": "no-answer"}
        files[name].append(q)
    for name, rows in files.items():
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    corpus = []
    where: dict[tuple[str, int], str] = {}
    for name, text in texts.items():
        for n, (s, e) in enumerate(paragraphs(text)):
            pid = f"{name}#{n}"
            corpus.append({"_id": pid, "title": text.splitlines()[0][2:], "text": text[s:e]})
            for pos in range(s, e):
                where[(name, pos)] = pid
    (out / "beir" / "corpus.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in corpus), encoding="utf-8"
    )
    queries = []
    for split, rows in (("train", files["train"]), ("dev", [q for q in files["calib"] if q["gold"]])):
        qrels = ["query-id\tcorpus-id\tscore"]
        for q in rows:
            span = q["spans"][0]
            qrels.append(f"{q['id']}\t{where[(span['source_id'], span['start'])]}\t1")
            queries.append({"_id": q["id"], "text": q["question"]})
        (out / "beir" / "qrels" / f"{split}.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    (out / "beir" / "queries.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in queries), encoding="utf-8"
    )
    split = {
        "set": str(args.set),
        "seed": args.seed,
        "train": train,
        "calib": calib,
        "test": test,
        "left_out": sorted(left_out),
        "questions": {k: len(v) for k, v in files.items()},
        "unanswerable": {k: sum(1 for q in v if not q["gold"]) for k, v in files.items()},
        "paragraphs": len(corpus),
    }
    (out / "split.json").write_text(json.dumps(split, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(split, ensure_ascii=False))


if __name__ == "__main__":
    main()
