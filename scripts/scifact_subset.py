"""Write the SciFact subset of docs/retrieval.md ("Multilingual dense"): the first N test queries (``qrels/test.tsv``
order), their relevant documents, and every k-th other document (corpus order) up to ``--docs`` documents.

    .venv/bin/python scripts/scifact_subset.py OUT [--scifact ../shared/eval/scifact] [--queries 100] [--docs 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--scifact", type=Path, default=Path(__file__).resolve().parents[2] / "shared/eval/scifact")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--docs", type=int, default=200)
    args = ap.parse_args()
    header, *rows = (args.scifact / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    order: list[str] = []
    for row in rows:
        qid = row.split("\t")[0]
        if qid not in order:
            order.append(qid)
    keep_q = set(order[: args.queries])
    rows = [r for r in rows if r.split("\t")[0] in keep_q]
    relevant = {r.split("\t")[1] for r in rows}
    docs = []
    for path in sorted(args.scifact.glob("corpus*.jsonl")):
        docs.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    keep = [d for d in docs if d["_id"] in relevant]
    others = [d for d in docs if d["_id"] not in relevant]
    need = max(0, args.docs - len(keep))
    if need:
        keep += others[:: max(1, len(others) // need)][:need]
    (args.out / "qrels").mkdir(parents=True, exist_ok=True)
    (args.out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in keep), encoding="utf-8")
    shutil.copy(args.scifact / "queries.jsonl", args.out / "queries.jsonl")
    (args.out / "qrels" / "test.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    print(f"{len(keep_q)} queries, {len(relevant)} relevant documents, {len(keep)} documents -> {args.out}")


if __name__ == "__main__":
    main()
