"""Users' own golden sets: the file format, its validation, and scoring search results against it.

Format: JSON Lines, one question per line (blank lines are skipped)::

    {"id": "q1", "question": "What does error NIM-E1042 mean?", "gold": ["acme-nimbus-error-codes"],
     "spans": [{"source_id": "acme-nimbus-error-codes", "start": 120, "end": 410}],
     "acceptable_parents": [], "category": "exact-id", "tenant": "acme", "groups": ["public"],
     "filters": {"doc_type": "policy"}}

* ``question`` (required): the query text.
* ``gold`` (required, may be empty): the source ids that answer it, each a string or
  ``{"source_id": "...", "chunk_ids": ["..."]}``. An empty list is a question the corpus does not answer.
* ``id``: question id (default ``line-N``); ``category``: a label to report by (default ``uncategorised``).
* ``spans``: gold evidence as ``{"source_id", "start", "end"}`` character offsets into the source text
  (``start < end``, the source among ``gold``).
* ``acceptable_parents``: parent chunk ids whose children also count as gold evidence.
* ``tenant``, ``groups``, ``filters``: the hard filter the question runs under (``tenant`` falls back to the
  command's ``--tenant``; ``filters`` is field -> value or list of values, exact match).

Relevance rule (source level): a retrieved chunk is relevant when its ``source_id`` is gold. When the gold entry
lists ``chunk_ids``, only those chunks, and children of an ``acceptable_parents`` parent, count for that source.
The ranked chunks become a ranked list of sources, each at its best relevant (else best) chunk's rank, and
ir-measures scores that list: Recall@5/10/20, MRR (RR@10), nDCG@10, MAP (AP) and P@5/P@10. Questions without gold
are left out of those averages (nothing can be recalled) and counted for the no-answer accuracy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_rag.errors import InputError
from es_rag.principals import name_problem
from es_rag.records import Hit

UNCATEGORISED = "uncategorised"
FIELDS = ("id", "question", "gold", "spans", "acceptable_parents", "category", "tenant", "groups", "filters")
RANK_MEASURES = ("recall@5", "recall@10", "recall@20", "mrr@10", "ndcg@10", "map", "p@5", "p@10")


@dataclass(frozen=True)
class GoldSpan:
    """Gold evidence: characters ``[start, end)`` of a source's text."""

    source_id: str
    start: int
    end: int


@dataclass(frozen=True)
class GoldenQuestion:
    """One line of a golden file (module docstring)."""

    id: str
    question: str
    gold: dict[str, tuple[str, ...]]
    """Gold source id -> the chunk ids that count for it (empty: any chunk of the source)."""
    spans: tuple[GoldSpan, ...] = ()
    acceptable_parents: tuple[str, ...] = ()
    category: str = UNCATEGORISED
    tenant: str | None = None
    groups: tuple[str, ...] = ()
    filters: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def relevant(self, hit: Hit) -> bool:
        """Whether ``hit`` is gold evidence (relevance rule of the module docstring).

        Args:
            hit: A retrieved chunk.
        """
        chunks = self.gold.get(hit.source_id)
        if chunks is None:
            return False
        if not chunks:
            return True
        return hit.chunk_id in chunks or (hit.parent_id is not None and hit.parent_id in self.acceptable_parents)

    def holds_answer(self, hit: Hit) -> bool:
        """Whether ``hit`` holds gold evidence at passage level: its characters overlap one of the question's
        ``spans`` in the same source. A question without spans, or a hit without offsets, falls back to
        :meth:`relevant` (source level). This is what a cross-encoder's score is about (does this passage answer?),
        so ``es-rag calibrate --golden`` labels candidates with it.

        Args:
            hit: A retrieved chunk.
        """
        if not self.spans or hit.start_offset is None or hit.end_offset is None:
            return self.relevant(hit)
        return any(
            sp.source_id == hit.source_id and sp.start < hit.end_offset and hit.start_offset < sp.end
            for sp in self.spans
        )


def _strings(where: str, name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InputError(where, name, "must be a list of non-empty strings")
    return tuple(value)


def parse_question(obj: Any, where: str, line: int) -> GoldenQuestion:
    """One golden question from its JSON object.

    Args:
        obj: The parsed line.
        where: ``FILE:LINE`` for errors.
        line: Line number (gives the default id).

    Raises:
        InputError: Naming the line and the field.
    """
    if not isinstance(obj, dict):
        raise InputError(where, "question", "each line must be a JSON object")
    if "query" in obj and "question" not in obj:  # the format reindex --queries read before there was one format
        raise InputError(
            where,
            "query",
            "the golden format names it 'question', and the answering sources 'gold' (for 'source_ids'): one "
            "format for eval --golden, calibrate --golden and reindex --queries (docs/evaluation.md)",
        )
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise InputError(where, unknown[0], f"unknown field; valid fields: {', '.join(FIELDS)}")
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise InputError(where, "question", "missing or empty")
    qid = obj.get("id", f"line-{line}")
    if not isinstance(qid, (str, int)) or not str(qid).strip():
        raise InputError(where, "id", "must be a non-empty string")
    if "gold" not in obj:
        raise InputError(where, "gold", "missing (use [] for a question the corpus does not answer)")
    if not isinstance(obj["gold"], list):
        raise InputError(where, "gold", "must be a list of source ids or {source_id, chunk_ids} objects")
    gold: dict[str, tuple[str, ...]] = {}
    for i, item in enumerate(obj["gold"]):
        if isinstance(item, str) and item.strip():
            gold[item] = ()
        elif isinstance(item, dict) and isinstance(item.get("source_id"), str) and item["source_id"].strip():
            extra = sorted(set(item) - {"source_id", "chunk_ids"})
            if extra:
                raise InputError(where, f"gold[{i}].{extra[0]}", "unknown field; valid: source_id, chunk_ids")
            gold[item["source_id"]] = _strings(where, f"gold[{i}].chunk_ids", item.get("chunk_ids", []))
        else:
            raise InputError(where, f"gold[{i}]", "must be a source id or an object with a source_id")
    spans = []
    for i, sp in enumerate(obj.get("spans") or []):
        name = f"spans[{i}]"
        if not isinstance(sp, dict) or set(sp) != {"source_id", "start", "end"}:
            raise InputError(where, name, "must be an object with exactly source_id, start, end")
        start, end = sp["start"], sp["end"]
        if not (isinstance(start, int) and isinstance(end, int)) or isinstance(start, bool) or isinstance(end, bool):
            raise InputError(where, name, "start and end must be integers (character offsets)")
        if not 0 <= start < end:
            raise InputError(where, name, f"needs 0 <= start < end, got start {start}, end {end}")
        if sp["source_id"] not in gold:
            raise InputError(where, f"{name}.source_id", f"{sp['source_id']!r} is not among gold")
        spans.append(GoldSpan(sp["source_id"], start, end))
    filters: dict[str, tuple[str, ...]] = {}
    raw_filters = obj.get("filters") or {}
    if not isinstance(raw_filters, dict):
        raise InputError(where, "filters", "must be an object: field -> value or list of values")
    for key, value in raw_filters.items():
        filters[key] = (value,) if isinstance(value, str) else _strings(where, f"filters.{key}", value)
    category = obj.get("category", UNCATEGORISED)
    if not isinstance(category, str) or not category.strip():
        raise InputError(where, "category", "must be a non-empty string")
    tenant = obj.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not tenant.strip()):
        raise InputError(where, "tenant", "must be a non-empty string")
    if tenant is not None and (problem := name_problem(tenant)) is not None:
        raise InputError(where, "tenant", problem)
    for group in obj.get("groups") or ():
        if isinstance(group, str) and (problem := name_problem(group)) is not None:
            raise InputError(where, "groups", problem)
    return GoldenQuestion(
        id=str(qid),
        question=question,
        gold=gold,
        spans=tuple(spans),
        acceptable_parents=_strings(where, "acceptable_parents", obj.get("acceptable_parents", [])),
        category=category,
        tenant=tenant,
        groups=_strings(where, "groups", obj.get("groups", [])),
        filters=filters,
    )


def load_golden(path: str | Path) -> list[GoldenQuestion]:
    """Every question of a golden JSONL file.

    Args:
        path: The file.

    Raises:
        InputError: Unreadable file, bad JSON, a bad field (naming ``FILE:LINE`` and the field), a repeated id, or
            no question at all.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(p), "golden", f"unreadable: {exc}") from None
    out: list[GoldenQuestion] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(where, "json", f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        q = parse_question(obj, where, n)
        if q.id in seen:
            raise InputError(where, "id", f"{q.id!r} repeats line {seen[q.id]}")
        seen[q.id] = n
        out.append(q)
    if not out:
        raise InputError(str(p), "golden", "no question in the file")
    return out


def ranked_sources(question: GoldenQuestion, hits: Sequence[Hit]) -> list[str]:
    """The sources of a ranked chunk list, best first, as the ids the qrels judge: a gold source at the rank of its
    first relevant chunk, any other source (or a gold source's non-counting chunk) under a ``~``-prefixed id.

    Args:
        question: The question (its relevance rule).
        hits: Ranked chunks.
    """
    out: list[str] = []
    for h in hits:
        key = h.source_id if question.relevant(h) else f"~{h.source_id}"
        if key not in out:
            out.append(key)
    return out


def context_recall(question: GoldenQuestion, hits: Sequence[Hit]) -> float | None:
    """Share of the gold sources with relevant evidence in the packed context (None without gold).

    Args:
        question: The question.
        hits: Packed chunks.
    """
    if not question.gold:
        return None
    found = {h.source_id for h in hits if question.relevant(h)}
    return len(found & set(question.gold)) / len(question.gold)


def rank_metrics(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean of :data:`RANK_MEASURES` over the judged queries (ir-measures); a judged query missing from ``run``
    scores 0.

    Args:
        qrels: Question id -> gold source -> 1.
        run: Question id -> source id -> rank-derived score.
    """
    import ir_measures
    from ir_measures import AP, RR, P, R, nDCG

    named = {
        "recall@5": R @ 5,
        "recall@10": R @ 10,
        "recall@20": R @ 20,
        "mrr@10": RR @ 10,
        "ndcg@10": nDCG @ 10,
        "map": AP,
        "p@5": P @ 5,
        "p@10": P @ 10,
    }
    inverse = {str(m): name for name, m in named.items()}
    sums = dict.fromkeys(named, 0.0)
    for row in ir_measures.iter_calc(list(named.values()), qrels, run):
        sums[inverse[str(row.measure)]] += float(row.value)
    n = len(qrels) or 1
    return {name: round(v / n, 4) for name, v in sums.items()}


def question_filter(question: GoldenQuestion, tenant: str | None, groups: Sequence[str] = ()) -> Any:
    """The hard filter a question runs under: its own tenant, groups and filters, else the command's.

    Args:
        question: The question.
        tenant: The command's tenant (``--tenant``), used when the question names none.
        groups: The command's ACL groups, used when the question names none.

    Raises:
        InputError: Neither the question nor the command names a tenant.
    """
    from es_rag.filters import SearchFilter

    chosen = question.tenant or tenant
    if not chosen:
        raise InputError(f"golden question {question.id}", "tenant", "no tenant: add one to the line or pass --tenant")
    return SearchFilter(chosen, tuple(question.groups or groups), metadata=dict(question.filters))
