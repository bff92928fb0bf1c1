"""What reaches the LLM: answer coverage of a golden set's gold spans, stage by stage, within the token budget.

Per question (a golden line with ``spans``):

* **answer coverage** of a list of hits: the share of the gold span characters that the hits' ``[start_offset,
  end_offset)`` ranges cover (spans are summed, overlapping annotator spans each count), and whether the whole
  answer is there (every character of every span);
* the same on the hits each stage handed on (:attr:`es_rag.result.SearchResult.stage_hits`): ``retrieved`` (the
  fused candidates), ``reranked`` (the first ``rerank_k``), ``selected`` (after the gate, business rules, MMR and
  caps), ``expanded`` (the blocks the packer was given) and ``packed`` (the context), so a lost answer is placed at
  the stage that lost it;
* the context's tokens (the rendered text, headers included), the evidence tokens (the block texts) and the
  duplicate tokens: tokens of a block's text whose characters an earlier block of the same source already holds;
* whether the gate abstained (``no_sufficient_evidence``);
* each stage's latency (the trace's milliseconds).

Over a set: means per category and overall, the duplicate-token rate (duplicate / evidence tokens), no-answer
precision and recall of abstention against the golden truth (a question with ``gold: []`` has no answer in the
corpus) where the set has such questions, latency p50 / p95 per stage, and answer coverage against the token budget
(:data:`BUDGETS`), each budget a full run of the pipeline with only ``token_budget`` changed, retrieval and query
embedding memoised (:class:`MemoBackend`), so every point is what ``search`` returns at that budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError
from es_rag.evaluation.golden import GoldenQuestion, GoldSpan, question_filter
from es_rag.records import Hit

STAGES = ("retrieved", "reranked", "selected", "expanded", "packed")
"""The lists whose answer coverage is measured, in pipeline order."""
BUDGETS = (500, 1000, 1500, 3000)
"""Token budgets of the coverage-versus-budget curve."""


def _ranges(hits: Iterable[Hit]) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for h in hits:
        if h.start_offset is not None and h.end_offset is not None:
            out.setdefault(h.source_id, []).append((h.start_offset, h.end_offset))
    return out


def _covered(span: GoldSpan, ranges: Sequence[tuple[int, int]]) -> int:
    """Characters of ``span`` inside the union of ``ranges``."""
    clipped = sorted((max(s, span.start), min(e, span.end)) for s, e in ranges if s < span.end and e > span.start)
    total = 0
    end = span.start
    for s, e in clipped:
        s = max(s, end)
        if e > s:
            total += e - s
            end = e
    return total


def answer_coverage(spans: Sequence[GoldSpan], hits: Iterable[Hit]) -> tuple[float, bool] | None:
    """``(share of gold span characters covered, whole answer covered)`` by ``hits``; None without spans.

    Args:
        spans: The question's gold spans.
        hits: Hits with offsets (chunks, parent sections, neighbour blocks).
    """
    if not spans:
        return None
    ranges = _ranges(hits)
    total = covered = 0
    whole = True
    for sp in spans:
        got = _covered(sp, ranges.get(sp.source_id, ()))
        total += sp.end - sp.start
        covered += got
        whole = whole and got == sp.end - sp.start
    return covered / total, whole


def duplicate_tokens(hits: Sequence[Hit], count: Callable[[str], int]) -> tuple[int, int]:
    """``(duplicate tokens, evidence tokens)`` of packed blocks, best first: a block's duplicate tokens are those of
    the characters of its text that an earlier block of the same source already holds (by offsets). A block whose
    shown text is not its source span (an HTML block's visible text) counts its share of repeated characters.

    Args:
        hits: The packed blocks, in packing (rank) order.
        count: Counts tokens (the budget's tokenizer).
    """
    seen: dict[str, list[tuple[int, int]]] = {}
    dup = total = 0
    for h in hits:
        text = h.display_text
        tokens = count(text)
        total += tokens
        s, e = h.start_offset, h.end_offset
        if s is None or e is None or e <= s:
            continue
        before = seen.setdefault(h.source_id, [])
        pieces = sorted((max(a, s), min(b, e)) for a, b in before if a < e and b > s)
        before.append((s, e))
        if not pieces:
            continue
        if h.visible_text is None and len(h.text) == e - s:
            merged: list[tuple[int, int]] = []
            for a, b in pieces:
                if merged and a <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], b))
                else:
                    merged.append((a, b))
            dup += sum(count(h.text[a - s : b - s]) for a, b in merged)
        else:
            share = _covered(GoldSpan(h.source_id, s, e), pieces) / (e - s)
            dup += round(tokens * share)
    return dup, total


def question_evidence(
    question: GoldenQuestion, result: Any, count: Callable[[str], int], abstained: bool
) -> dict[str, Any]:
    """The evidence fields of one question's row.

    Args:
        question: The golden question.
        result: Its :class:`~es_rag.result.SearchResult`.
        count: Counts tokens (the budget's tokenizer).
        abstained: Whether the gate said ``no_sufficient_evidence``.
    """
    lists = {**result.stage_hits, "packed": result.hits}
    coverage: dict[str, float | None] = {}
    whole: dict[str, bool | None] = {}
    for stage in STAGES:
        got = answer_coverage(question.spans, lists.get(stage, ()))
        coverage[stage] = None if got is None else round(got[0], 6)
        whole[stage] = None if got is None else got[1]
    dup, evidence = duplicate_tokens(result.hits, count)
    return {
        "coverage": coverage,
        "whole": whole,
        "context_tokens": result.context.tokens,
        "evidence_tokens": evidence,
        "duplicate_tokens": dup,
        "blocks": len(result.hits),
        "abstained": abstained,
        "latency_ms": {st.name: round(st.ms, 3) for st in result.trace.stages},
    }


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return round(sum(kept) / len(kept), 4) if kept else None


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Evidence means over ``rows`` (:func:`question_evidence` rows with ``gold``): answer coverage and whole-answer
    share per stage over the questions with spans, context / evidence tokens, the duplicate-token rate, and
    no-answer precision and recall when some question has no gold source.

    Args:
        rows: Per-question rows.
    """
    spanned = [r for r in rows if r["coverage"]["packed"] is not None]
    out: dict[str, Any] = {
        "with_spans": len(spanned),
        "answer_coverage": _mean(r["coverage"]["packed"] for r in spanned),
        "answer_whole": _mean(float(r["whole"]["packed"]) for r in spanned),
        "coverage_by_stage": {
            stage: {
                "coverage": _mean(r["coverage"][stage] for r in spanned),
                "whole": _mean(float(r["whole"][stage]) for r in spanned),
            }
            for stage in STAGES
        },
        "context_tokens": _mean(r["context_tokens"] for r in rows),
        "evidence_tokens": _mean(r["evidence_tokens"] for r in rows),
        "blocks": _mean(r["blocks"] for r in rows),
    }
    evidence = sum(r["evidence_tokens"] for r in rows)
    out["duplicate_token_rate"] = round(sum(r["duplicate_tokens"] for r in rows) / evidence, 4) if evidence else None
    out["no_answer"] = no_answer(rows)
    return out


def no_answer(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Abstention against the golden truth: precision = unanswerable among the abstentions, recall = abstentions
    among the unanswerable questions (``gold: []``); None when every question has a gold source. When the
    unanswerable questions come in several categories (``scripts/no_answer_sets.py``: a left-out article, a removed
    paragraph), ``by_category`` scores each kind as if it were the only one: its recall, and its precision against
    the answerable questions' abstentions.

    Args:
        rows: Per-question rows (``gold``, ``abstained``).
    """
    unanswerable = [r for r in rows if not r["gold"]]
    if not unanswerable:
        return None
    abstained = [r for r in rows if r["abstained"]]
    right = sum(1 for r in abstained if not r["gold"])
    out: dict[str, Any] = {
        "unanswerable": len(unanswerable),
        "abstained": len(abstained),
        "precision": round(right / len(abstained), 4) if abstained else None,
        "recall": round(right / len(unanswerable), 4),
        "answered_wrongly": len(unanswerable) - right,
        "abstained_wrongly": len(abstained) - right,
    }
    kinds = sorted({str(r.get("category", "")) for r in unanswerable})
    if len(kinds) > 1:  # each kind against the answerable questions, as if it were the only unanswerable kind
        wrong = len(abstained) - right
        out["by_category"] = {}
        for kind in kinds:
            mine = [r for r in unanswerable if r.get("category", "") == kind]
            hit = sum(1 for r in mine if r["abstained"])
            out["by_category"][kind] = {
                "unanswerable": len(mine),
                "precision": round(hit / (hit + wrong), 4) if hit + wrong else None,
                "recall": round(hit / len(mine), 4),
            }
    return out


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per stage (trace order) and in total: mean, p50 and p95 milliseconds.

    Args:
        rows: Per-question rows (``latency_ms``).
    """
    names: list[str] = []
    for r in rows:
        names.extend(n for n in r["latency_ms"] if n not in names)
    out: dict[str, dict[str, float]] = {}
    for name in [*names, "total"]:
        if name == "total":
            values = [sum(r["latency_ms"].values()) for r in rows]
        else:
            values = [r["latency_ms"][name] for r in rows if name in r["latency_ms"]]
        if values:
            out[name] = {
                "mean": round(sum(values) / len(values), 2),
                "p50": round(_percentile(values, 0.5), 2),
                "p95": round(_percentile(values, 0.95), 2),
            }
    return out


class MemoBackend:
    """A backend that answers ``retrieve`` once per query, filter and retrieval settings and delegates everything
    else: the budget curve re-runs the pipeline at other budgets without searching again.

    Args:
        backend: The backend to wrap.
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._memo: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def retrieve(self, query: str, vector: Any, flt: Any, settings: Any) -> Any:
        key = repr((query, None if vector is None else bytes(memoryview(vector)), flt, settings.retrieve))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._backend.retrieve(query, vector, flt, settings)
        return hit


class MemoEmbedder:
    """A query embedder that embeds each query once and delegates everything else.

    Args:
        embedder: The embedder to wrap.
    """

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._memo: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)

    def embed_query(self, text: str) -> Any:
        vec = self._memo.get(text)
        if vec is None:
            vec = self._memo[text] = self._embedder.embed_query(text)
        return vec


def _rebuilt(pipeline: Any, *, backend: Any, embedder: Any, settings: Any) -> Any:
    """A :class:`~es_rag.pipeline.RagPipeline` like ``pipeline`` (its tokenizer, reranker, business rules, cache and
    escalation scorer) over ``backend`` and ``embedder`` with ``settings``."""
    from es_rag.pipeline import RagPipeline

    return RagPipeline(
        backend,
        embedder=embedder,
        settings=settings,
        tokenizer=pipeline.tokenizer,
        reranker=pipeline.reranker,
        business_rules=pipeline.business_rules,
        cache=pipeline.cache,
        escalation_scorer=pipeline.escalate_stage.scorer,
    )


def variant(pipeline: Any, **changes: Any) -> Any:
    """A pipeline like ``pipeline`` with some settings changed, sharing its models, reranker cache and memoised
    backend and embedder (wrap them first with :class:`MemoBackend` / :class:`MemoEmbedder`).

    Args:
        pipeline: A :class:`~es_rag.pipeline.RagPipeline`.
        **changes: Flat setting names and values (``token_budget=500``).
    """
    return _rebuilt(
        pipeline, backend=pipeline.backend, embedder=pipeline.embedder, settings=pipeline.settings.replace(**changes)
    )


def memoised(pipeline: Any) -> Any:
    """``pipeline`` over a memoised backend and query embedder (:class:`MemoBackend`, :class:`MemoEmbedder`).

    Args:
        pipeline: A :class:`~es_rag.pipeline.RagPipeline`.
    """
    if isinstance(pipeline.backend, MemoBackend):
        return pipeline
    return _rebuilt(
        pipeline,
        backend=MemoBackend(pipeline.backend),
        embedder=None if pipeline.embedder is None else MemoEmbedder(pipeline.embedder),
        settings=pipeline.settings,
    )


def budget_curve(
    questions: Sequence[GoldenQuestion],
    pipeline: Any,
    *,
    tenant: str | None,
    groups: Sequence[str] = (),
    budgets: Sequence[int] = BUDGETS,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Answer coverage, whole-answer share and context tokens at each budget, on the questions with spans.

    Args:
        questions: The golden set.
        pipeline: A pipeline over a memoised backend and embedder (:func:`memoised`).
        tenant: Default tenant.
        groups: Default ACL groups.
        budgets: Token budgets.
        progress: Show a progress bar.
    """
    from es_rag.progress import tqdm

    spanned = [q for q in questions if q.spans]
    out = []
    for budget in budgets:
        p = variant(pipeline, token_budget=budget)
        cov: list[float] = []
        whole: list[float] = []
        tokens: list[float] = []
        for q in tqdm(spanned, desc=f"budget {budget}", unit="q", disable=not progress):
            result = p.search(q.question, question_filter(q, tenant, groups))
            got = answer_coverage(q.spans, result.hits)
            if got is not None:
                cov.append(got[0])
                whole.append(float(got[1]))
            tokens.append(result.context.tokens)
        out.append(
            {
                "budget": budget,
                "answer_coverage": _mean(cov),
                "answer_whole": _mean(whole),
                "context_tokens": _mean(tokens),
            }
        )
    return out


def plot_budget_curve(curve: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Draw answer coverage and the whole-answer share against the token budget (:func:`budget_curve`) into a PNG.

    Args:
        curve: The curve's points.
        path: The PNG file.
        title: The plot's title (the golden file).

    Raises:
        ConfigError: matplotlib is not installed (the ``report`` extra), or the curve is empty (``--budgets none``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'es-rag[report]'") from None
    points = [p for p in curve if p.get("answer_coverage") is not None]
    if not points:
        raise ConfigError("--plot: no coverage curve to draw (no question with spans, or --budgets none)")
    budgets = [p["budget"] for p in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(budgets, [p["answer_coverage"] for p in points], marker="o", label="answer coverage (characters)")
    ax.plot(budgets, [p["answer_whole"] for p in points], marker="s", label="whole answer in the context")
    for b, p in zip(budgets, points, strict=True):
        ax.annotate(f"{p['answer_coverage']:.3f}", (b, p["answer_coverage"]), textcoords="offset points", xytext=(0, 6))
    ax.set_xlabel("token budget")
    ax.set_ylabel("share of gold answers")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(budgets)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(f"What reaches the LLM: {title}" if title else "What reaches the LLM")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
