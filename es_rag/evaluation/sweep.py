"""One-change variants of a golden run (``eval --golden --vary NAME=V1,V2``): the same questions through the pipeline
with one setting changed at a time, retrieval and query embeddings memoised
(:func:`es_rag.evaluation.evidence.memoised`), so a variant costs the stages after retrieval only (a retrieval setting,
``candidate_k``, is searched again). Each variant is scored like the base run: answer coverage per stage, whole
answers, context and duplicate tokens, no-answer precision and recall."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from es_rag.evaluation import evidence
from es_rag.evaluation.golden import GoldenQuestion, question_filter


def run_variant(
    questions: Sequence[GoldenQuestion],
    pipeline: Any,
    *,
    tenant: str | None,
    groups: Sequence[str] = (),
    progress: str | None = None,
) -> dict[str, Any]:
    """The evidence summary (:func:`es_rag.evaluation.evidence.summarize`) of ``pipeline`` on ``questions``.

    Args:
        questions: The golden set.
        pipeline: A pipeline (a variant of a memoised one).
        tenant: Default tenant.
        groups: Default ACL groups.
        progress: A progress bar with this label; None: none.
    """
    from es_rag.progress import tqdm
    from es_rag.stages.gate import NO_SUFFICIENT_EVIDENCE

    count = pipeline.pack_tokenizer().count
    rows = []
    for q in tqdm(questions, desc=progress or "", unit="q", disable=progress is None):
        result = pipeline.search(q.question, question_filter(q, tenant, groups))
        row = evidence.question_evidence(q, result, count, result.status == NO_SUFFICIENT_EVIDENCE)
        row["gold"] = sorted(q.gold)
        row["category"] = q.category
        rows.append(row)
    out = evidence.summarize(rows)
    out["latency_ms"] = evidence.latency(rows)["total"] if rows else None
    return out


def sweep(
    questions: Sequence[GoldenQuestion],
    pipeline: Any,
    variants: Sequence[tuple[str, dict[str, Any]]],
    *,
    tenant: str | None,
    groups: Sequence[str] = (),
    base: dict[str, Any] | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """The base run and each variant, one row each (``label``, ``changes`` and the evidence summary).

    Args:
        questions: The golden set.
        pipeline: The base pipeline (memoised here when it is not yet).
        variants: ``(label, {flat name: value})`` pairs (:func:`es_rag.cli.vary.parse_vary`).
        tenant: Default tenant.
        groups: Default ACL groups.
        base: The base run's summary when it is already known (``eval --golden`` computed it); None runs it.
        progress: Show a progress bar per run.
    """
    pipeline = evidence.memoised(pipeline)
    rows = [
        {
            "label": "base",
            "changes": {},
            **(
                base
                if base is not None
                else run_variant(
                    questions, pipeline, tenant=tenant, groups=groups, progress="base" if progress else None
                )
            ),
        }
    ]
    for label, changes in variants:
        variant = evidence.variant(pipeline, **changes)
        summary = run_variant(questions, variant, tenant=tenant, groups=groups, progress=label if progress else None)
        rows.append({"label": label, "changes": dict(changes), **summary})
    return rows


def format_sweep(rows: Sequence[dict[str, Any]]) -> str:
    """The sweep as a fixed-width table: answer coverage per stage, whole answers, tokens, duplicates, and the change of
    packed coverage against the base row.

    Args:
        rows: Output of :func:`sweep`.
    """
    stages = evidence.STAGES
    width = max(24, *(len(r["label"]) for r in rows))
    head = (
        f"{'variant':<{width}} "
        + " ".join(f"{s[:7]:>7}" for s in stages)
        + f" {'whole':>7} {'tokens':>7} {'dup':>6} {'delta':>7}"
    )
    lines = [head]
    base = rows[0]["answer_coverage"] if rows else None
    for r in rows:
        by = r["coverage_by_stage"]
        cells = " ".join(f"{by[s]['coverage']:>7.4f}" if by[s]["coverage"] is not None else f"{'-':>7}" for s in stages)
        cov = r["answer_coverage"]
        delta = f"{cov - base:>+7.4f}" if cov is not None and base is not None and r is not rows[0] else f"{'':>7}"
        whole = f"{r['answer_whole']:>7.4f}" if r["answer_whole"] is not None else f"{'-':>7}"
        tokens = f"{r['context_tokens']:>7.0f}" if r["context_tokens"] is not None else f"{'-':>7}"
        dup = f"{r['duplicate_token_rate']:>6.3f}" if r["duplicate_token_rate"] is not None else f"{'-':>6}"
        lines.append(f"{r['label']:<{width}} {cells} {whole} {tokens} {dup} {delta}")
    return "\n".join(lines)
