"""``es-rag eval --golden``: a golden set (:mod:`es_rag.evaluation.golden`) through the user's own pipeline, scored at
the source level (ranking metrics, context recall) and at the evidence level (:mod:`es_rag.evaluation.evidence`:
answer coverage per stage, tokens, duplicates, no-answer, latency, coverage against the budget)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from es_rag.evaluation import evidence
from es_rag.evaluation.golden import (
    RANK_MEASURES,
    GoldenQuestion,
    context_recall,
    question_filter,
    rank_metrics,
    ranked_sources,
)


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(sum(kept) / len(kept), 4) if kept else None


def evaluate_golden(
    questions: Sequence[GoldenQuestion],
    pipeline: Any,
    *,
    tenant: str | None = None,
    groups: Sequence[str] = (),
    progress: bool = False,
    budgets: Sequence[int] | None = evidence.BUDGETS,
) -> dict[str, Any]:
    """Run every question through ``pipeline`` (the user's index and settings) and score it, per category and overall.

    Ranking metrics score the candidates the gate sees (the reranked list, or the fused order without a reranker);
    context recall and answer coverage score the packed context, and answer coverage also each stage's list. With a
    calibrated no-answer threshold in force, ``no_answer_accuracy`` says whether the gate answered exactly the
    questions whose relevant candidate reached it; ``no_answer`` scores abstention against the golden truth when the
    set holds questions without a gold source.

    Args:
        questions: The golden set.
        pipeline: A :class:`~es_rag.pipeline.RagPipeline` over the user's index.
        tenant: Default tenant of questions that name none.
        groups: Default ACL groups of questions that name none.
        progress: Show a progress bar.
        budgets: Token budgets of the coverage curve (:func:`es_rag.evaluation.evidence.budget_curve`); None or
            empty: no curve.
    """
    from es_rag.evaluation.metrics import run_from_ids
    from es_rag.progress import tqdm
    from es_rag.stages.gate import NO_SUFFICIENT_EVIDENCE

    pipeline = evidence.memoised(pipeline)  # the curve re-runs the pipeline without searching again
    count = pipeline.pack_tokenizer().count
    rows: list[dict[str, Any]] = []
    run: dict[str, dict[str, float]] = {}
    reranked_any = False
    for q in tqdm(questions, desc="golden", unit="q", disable=not progress):
        result = pipeline.search(q.question, question_filter(q, tenant, groups))
        reranked_any = reranked_any or result.reranked
        ranked = ranked_sources(q, result.candidates)
        run[q.id] = run_from_ids(ranked)
        abstained = result.status == NO_SUFFICIENT_EVIDENCE
        rows.append(
            {
                "id": q.id,
                "category": q.category,
                "gold": sorted(q.gold),
                "ranked_sources": ranked[:20],
                "context_sources": [h.source_id for h in result.hits],
                "context_recall": context_recall(q, result.hits),
                "answerable": any(q.relevant(h) for h in result.candidates),
                "answered": not abstained,
                "status": result.status,
                **evidence.question_evidence(q, result, count, abstained),
            }
        )
    calibration = pipeline.calibration()
    threshold = calibration.threshold if reranked_any else None

    def summary(selected: list[dict[str, Any]]) -> dict[str, Any]:
        judged = [r for r in selected if r["gold"]]
        qrels = {r["id"]: dict.fromkeys(r["gold"], 1) for r in judged}
        out: dict[str, Any] = {
            "questions": len(selected),
            "judged": len(judged),
            **(
                rank_metrics(qrels, {r["id"]: run[r["id"]] for r in judged}) if judged else dict.fromkeys(RANK_MEASURES)
            ),
            "context_recall": _mean([r["context_recall"] for r in judged]),
            **evidence.summarize(selected),
        }
        if threshold is not None:
            out["no_answer_accuracy"] = round(
                sum(r["answered"] == r["answerable"] for r in selected) / len(selected), 4
            )
        return out

    categories = sorted({r["category"] for r in rows})
    curve = (
        evidence.budget_curve(questions, pipeline, tenant=tenant, groups=groups, budgets=budgets, progress=progress)
        if budgets and any(q.spans for q in questions)
        else []
    )
    return {
        "questions": len(rows),
        "token_budget": pipeline.settings.pack.token_budget,
        "overall": summary(rows),
        "categories": {c: summary([r for r in rows if r["category"] == c]) for c in categories},
        "latency_ms": evidence.latency(rows),
        "budget_curve": curve,
        "gate": {
            "threshold": threshold,
            "calibration_source": calibration.source,
            "no_answer": "scored: answered == a relevant candidate reached the gate"
            if threshold is not None
            else "not scored: no calibrated no-answer threshold in force",
        },
        "relevance": "source level: a chunk is relevant when its source_id is gold (only the listed chunk_ids and "
        "children of acceptable_parents when the gold entry lists chunk_ids); answer coverage: gold span characters "
        "inside the hits' offsets",
        "per_question": rows,
    }


def _cell(value: Any, width: int = 7) -> str:
    return f"{value:>{width}.4f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def _tokens(value: float | None) -> str:
    return f"{value:>7.0f}" if value is not None else f"{'-':>7}"


def format_golden(result: dict[str, Any]) -> str:
    """The tables of an :func:`evaluate_golden` result: ranking per category, answer coverage per category and stage,
    no-answer, latency per stage and the coverage-versus-budget curve.

    Args:
        result: Output of :func:`evaluate_golden`.
    """
    na = result["gate"]["threshold"] is not None
    heads = ["R@5", "R@10", "R@20", "MRR@10", "nDCG@10", "MAP", "P@5", "P@10", "ctx_rec"] + (["no_ans"] if na else [])
    keys = [*RANK_MEASURES, "context_recall"] + (["no_answer_accuracy"] if na else [])
    groups = [*result["categories"].items(), ("overall", result["overall"])]
    lines = ["ranking (source level)", f"{'category':<20} {'n':>5} " + " ".join(f"{h:>7}" for h in heads)]
    lines.extend(f"{c[:20]:<20} {m['questions']:>5} " + " ".join(_cell(m.get(k)) for k in keys) for c, m in groups)
    stages = evidence.STAGES
    lines += [
        "",
        f"answer coverage at token budget {result.get('token_budget')} (share of gold span characters; whole = "
        "questions with every span character)",
        f"{'category':<20} {'n':>5} "
        + " ".join(f"{s[:7]:>7}" for s in stages)
        + f" {'whole':>7} {'tokens':>7} {'dup':>7}",
    ]
    for c, m in groups:
        by = m["coverage_by_stage"]
        lines.append(
            f"{c[:20]:<20} {m['with_spans']:>5} "
            + " ".join(_cell(by[s]["coverage"]) for s in stages)
            + f" {_cell(m['answer_whole'])} {_tokens(m['context_tokens'])}"
            + f" {_cell(m['duplicate_token_rate'])}"
        )
    no_answer = result["overall"].get("no_answer")
    if no_answer is not None:
        lines += [
            "",
            f"no-answer: {no_answer['unanswerable']} unanswerable questions, {no_answer['abstained']} abstentions; "
            f"precision {_cell(no_answer['precision'], 0).strip()}, recall {_cell(no_answer['recall'], 0).strip()}",
        ]
        lines.extend(
            f"  {kind}: {k['unanswerable']} questions; precision {_cell(k['precision'], 0).strip()}, "
            f"recall {_cell(k['recall'], 0).strip()}"
            for kind, k in no_answer.get("by_category", {}).items()
        )
    if result.get("latency_ms"):
        lines += ["", f"latency ms per stage {'mean':>9} {'p50':>9} {'p95':>9}"]
        lines.extend(
            f"  {name:<18} {v['mean']:>9.2f} {v['p50']:>9.2f} {v['p95']:>9.2f}"
            for name, v in result["latency_ms"].items()
        )
    if result.get("budget_curve"):
        lines += ["", f"{'token budget':>12} {'coverage':>9} {'whole':>7} {'tokens':>7}"]
        lines.extend(
            f"{p['budget']:>12} {_cell(p['answer_coverage'], 9)} {_cell(p['answer_whole'])} "
            f"{_tokens(p['context_tokens'])}"
            for p in result["budget_curve"]
        )
    gate = result["gate"]
    lines += [
        "",
        f"no-answer gate: threshold {gate['threshold']} (calibration {gate['calibration_source']}): "
        f"{gate['no_answer']}",
        f"relevance: {result['relevance']}",
    ]
    return "\n".join(lines)
