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

A second, harder kind of unanswerable question (``--removed``, default a quarter): in every calibration and test
article that stays indexed, that share of the paragraphs holding a question's first gold span (seeded) is removed
from the indexed copy, and the rest of the article stays. A question whose first span was in a removed paragraph
gets ``gold: []`` and the category ``no-answer-paragraph`` (the index is about its topic but does not say), unless
one of its answer strings still occurs in what is left of the article (case-insensitive): such a question is
ambiguous and left out of the set (counted in ``split.json``). The other questions' spans are moved to the new
offsets; a span inside a removed paragraph is dropped. Train articles keep every paragraph.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections import Counter
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


def removed_paragraphs(
    text: str, questions: list[dict[str, Any]], share: float, rng: random.Random
) -> list[tuple[int, int]]:
    """A seeded ``share`` (at least one) of the paragraphs of ``text`` that hold some question's first span.

    Args:
        text: The article.
        questions: Its golden questions.
        share: Share of the answer paragraphs to remove.
        rng: The split's random generator.
    """
    paras = paragraphs(text)
    held = sorted({i for q in questions for i, (s, e) in enumerate(paras) if s <= q["spans"][0]["start"] < e})
    chosen = rng.sample(held, max(1, round(share * len(held)))) if held else []
    return sorted(paras[i] for i in chosen)


def cut(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the paragraphs ``spans`` (each with the blank line after it).

    Args:
        text: The article.
        spans: ``(start, end)`` of the paragraphs to remove, sorted.
    """
    out, pos = [], 0
    for s, e in spans:
        out.append(text[pos:s])
        pos = min(e + 2, len(text))
    out.append(text[pos:])
    return "".join(out).rstrip("\n") + "\n"


def shift(pos: int, spans: list[tuple[int, int]]) -> int | None:
    """Where offset ``pos`` of the article lands after :func:`cut` (None: inside a removed paragraph)."""
    gone = 0
    for s, e in spans:
        if s <= pos < e + 2:
            return None
        if pos >= e + 2:
            gone += e + 2 - s
    return pos - gone


def moved(q: dict[str, Any], original: str, text: str, spans: list[tuple[int, int]]) -> dict[str, Any] | None:
    """Question ``q`` against the article with ``spans`` removed: unanswerable (``no-answer-paragraph``) when its
    first span was removed and none of its answer strings is left in the article, None (ambiguous) when one is,
    else answerable with its spans at their new offsets.

    Args:
        q: The golden question.
        original: The article before the cut.
        text: The article after it.
        spans: The removed paragraphs.
    """
    first = q["spans"][0]
    if shift(first["start"], spans) is None:
        answers = {original[sp["start"] : sp["end"]].strip().lower() for sp in q["spans"]}
        if any(a and a in text.lower() for a in answers):
            return None
        return {"id": q["id"], "question": q["question"], "gold": [], "category": "no-answer-paragraph"}
    kept = []
    for sp in q["spans"]:
        start, end = shift(sp["start"], spans), shift(sp["end"] - 1, spans)
        if start is not None and end is not None:
            kept.append({**sp, "start": start, "end": end + 1})
            assert text[start : end + 1] == original[sp["start"] : sp["end"]]
    return {**q, "spans": kept}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--set", type=Path, default=Path(__file__).resolve().parents[2] / "shared/eval/rag-en-train")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--train", type=int, default=12, help="articles whose questions train the reranker")
    ap.add_argument("--calib", type=int, default=6, help="articles whose questions calibrate it")
    ap.add_argument("--left-out", type=int, default=2, help="calibration and test articles left out of the index, each")
    ap.add_argument(
        "--removed",
        type=float,
        default=0.25,
        help="share of the answer paragraphs removed from each indexed calibration and test article (0: none)",
    )
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
    originals = {p.name: p.read_text(encoding="utf-8") for p in sorted((args.set / "docs").glob("*.md"))}
    by_article: dict[str, list[dict[str, Any]]] = {}
    for q in lines:
        by_article.setdefault(q["gold"][0], []).append(q)
    removed: dict[str, list[tuple[int, int]]] = {}
    for name in [*calib, *test]:
        if name not in left_out and args.removed > 0:
            removed[name] = removed_paragraphs(originals[name], by_article[name], args.removed, rng)
    texts: dict[str, str] = {}
    for name, text in originals.items():
        if name in left_out:
            continue
        if removed.get(name):
            text = cut(text, removed[name])
            (out / "docs" / name).write_text(text, encoding="utf-8")
        else:
            shutil.copy2(args.set / "docs" / name, out / "docs" / name)
        texts[name] = text

    files: dict[str, list[dict[str, Any]]] = {"train": [], "calib": [], "test": []}
    ambiguous: dict[str, int] = {"train": 0, "calib": 0, "test": 0}
    for q in lines:
        (source,) = q["gold"]
        name = "train" if source in train else "calib" if source in calib else "test"
        if source in left_out:  # nothing in the index answers it
            q = {"id": q["id"], "question": q["question"], "gold": [], "category": "no-answer"}
        elif removed.get(source):
            q = moved(q, originals[source], texts[source], removed[source])
            if q is None:
                ambiguous[name] += 1
                continue
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
        "removed": {"share": args.removed, "paragraphs": {k: len(v) for k, v in removed.items()}},
        "by_category": {k: dict(sorted(Counter(q["category"] for q in v).items())) for k, v in files.items()},
        "ambiguous_left_out": ambiguous,
        "paragraphs": len(corpus),
    }
    (out / "split.json").write_text(json.dumps(split, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(split, ensure_ascii=False))


if __name__ == "__main__":
    main()
