"""What reaches the LLM, side by side: es_rag's own pipeline and the recipes users would otherwise build, under the
same token budget, embedder and tenant (``es-rag eval --golden G --docs D --recipes all``).

Rows:

* ``es_rag``: the product pipeline on the user's index with the user's settings
  (:func:`es_rag.evaluation.golden_eval.evaluate_golden`, its packed context);
* ``langchain``: LangChain's common recipe (``RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200,
  add_start_index=True)``, ``InMemoryVectorStore``, ``similarity_search`` with k = :data:`LANGCHAIN_K`), the
  documents stuffed in rank order until the budget is full;
* ``langchain-k4``: the same index with k = 4 (``as_retriever()``'s default), stuffed within the budget;
* ``llamaindex``: LlamaIndex's default (``SentenceSplitter(chunk_size=1024, chunk_overlap=20)``,
  ``VectorStoreIndex``, ``as_retriever(similarity_top_k=2)``), stuffed within the budget;
* ``bm25``: BM25 alone over es_rag's own chunks (the ``bm25`` channel of ``backend.retrieve``), stuffed in rank
  order until the budget is full: no fusion, dedup, rerank or MMR.

Shared rules: the recipes split the same texts es_rag indexed (the ``--docs`` folder read by
:func:`es_rag.ingest.iter_files`, so gold character offsets mean the same); every recipe embeds with es_rag's own
embedder; a recipe's context is its chunk texts in rank order joined by ``"\\n\\n"`` (LangChain's stuff chain), a
chunk that would push the count over the budget is skipped and a later, smaller one may still fit (es_rag's packing
rule), and the joined string's tokens are counted with the pack stage's tokenizer; every row is scored by
:func:`es_rag.evaluation.evidence.answer_coverage` and :func:`~es_rag.evaluation.evidence.duplicate_tokens`.

The frameworks are optional (``pip install 'es-rag[recipes]'``) and imported only by the rows that need them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.evidence import answer_coverage, duplicate_tokens, latency
from es_rag.evaluation.golden import GoldenQuestion, question_filter
from es_rag.integrations.recipes_common import CachedPassages
from es_rag.records import Hit

if TYPE_CHECKING:
    from es_rag.ingest import SourceDoc
    from es_rag.integrations.recipes_common import RecipeIndex

__all__ = [
    "DESCRIPTIONS",
    "ES_RAG",
    "RECIPES",
    "Corpus",
    "compare_recipes",
    "format_recipes",
    "parse_recipes",
    "read_corpus",
    "stuff",
]

ES_RAG = "es_rag"
RECIPES = ("langchain", "langchain-k4", "llamaindex", "bm25")
"""The recipe rows, in table order."""
LANGCHAIN_K = 50
"""Chunks the ``langchain`` row retrieves before stuffing: enough to fill any usual budget."""
LANGCHAIN_DEFAULT_K = 4
"""``VectorStore.as_retriever()``'s default k."""
LLAMAINDEX_TOP_K = 2
"""``VectorIndexRetriever``'s default ``similarity_top_k``."""
SEPARATOR = "\n\n"
"""Between two stuffed chunks (LangChain's stuff chain)."""
DESCRIPTIONS = {
    ES_RAG: "es_rag's pipeline on your index and settings: hybrid retrieval, fusion, rerank (when configured), "
    "selection, packing with citation headers",
    "langchain": f"LangChain RecursiveCharacterTextSplitter(1000 chars, 200 overlap) + InMemoryVectorStore, "
    f"similarity_search k={LANGCHAIN_K}, stuffed in rank order until the budget is full",
    "langchain-k4": f"the same LangChain index, k={LANGCHAIN_DEFAULT_K} (as_retriever() default), stuffed within the "
    "budget",
    "llamaindex": f"LlamaIndex SentenceSplitter(1024 tokens, 20 overlap) + VectorStoreIndex, "
    f"as_retriever(similarity_top_k={LLAMAINDEX_TOP_K}) (default), stuffed within the budget",
    "bm25": "BM25 alone over es_rag's own chunks (your index), top candidate_k stuffed in rank order until the budget "
    "is full; no fusion, dedup, rerank or MMR",
}
METRICS = (
    "answer_coverage",
    "answer_whole",
    "context_tokens",
    "duplicate_token_rate",
    "index_chunks",
    "chunks_stuffed",
    "latency_p50_ms",
    "latency_p95_ms",
    "build_s",
)
"""Each row's numbers (and their ratio to the es_rag row)."""


def parse_recipes(value: str | Sequence[str]) -> tuple[str, ...]:
    """The recipe rows named by ``value``: a comma list of :data:`RECIPES` names, or ``all``.

    Args:
        value: ``"langchain,bm25"``, ``"all"``, or a list of names.

    Raises:
        ConfigError: An unknown name, or none at all.
    """
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    if "all" in names:
        return RECIPES
    unknown = [n for n in names if n not in RECIPES]
    if unknown or not names:
        what = f"unknown recipe {unknown[0]!r}" if unknown else "no recipe named"
        raise ConfigError(f"--recipes: {what}; valid: {', '.join(RECIPES)}, or all")
    return tuple(n for n in RECIPES if n in names)


@dataclass
class Corpus:
    """The recipes' documents (:func:`read_corpus`)."""

    docs: list[SourceDoc]
    """The documents the recipes split."""
    left_out: set[str] = field(default_factory=set)
    """Source ids read but not split (HTML)."""
    notes: list[str] = field(default_factory=list)
    """What was left out, and why."""


def read_corpus(docs: str | Path, *, tenant: str, settings: Any, exclude_dirs: Sequence[str | Path] = ()) -> Corpus:
    """The documents of the folder the index was ingested from, read by es_rag's own reader (the same decoded text,
    so the same gold offsets), with notes on what was left out. HTML sources are left out: their chunks' shown text
    is not their source span.

    Args:
        docs: The folder (source ids are paths relative to it, as ``es-rag ingest DIR`` gives them).
        tenant: The tenant the documents belong to.
        settings: Gives the index's metadata fields (front matter is read as the ingest reads it).
        exclude_dirs: Folders never walked into (the embedded index).

    Raises:
        ConfigError: ``docs`` is not a folder.
        InputError: No document the recipes can split.
    """
    from es_rag.ingest import IngestReport, iter_files

    root = Path(docs)
    if not root.is_dir():
        raise ConfigError(f"--docs {docs}: not a folder; give the folder your index was ingested from")
    report = IngestReport()
    kept: list[SourceDoc] = []
    html: list[str] = []
    schema = settings.index.metadata_schema()
    for doc in iter_files([root], tenant_id=tenant, acl=(), report=report, exclude_dirs=exclude_dirs, schema=schema):
        if doc.fmt == "html":
            html.append(doc.source_id)
        else:
            kept.append(doc)
    notes = []
    if html:
        notes.append(f"HTML sources left out of the recipe rows (not compared yet): {', '.join(sorted(html))}")
    notes.extend(f"unreadable, left out of the recipe rows: {f['document']}: {f['reason']}" for f in report.failed)
    if not kept:
        raise InputError(str(root), "docs", "no Markdown, reStructuredText, text or JSONL document to split")
    return Corpus(kept, set(html), notes)


def stuff(hits: Sequence[Hit], *, budget: int, count: Callable[[str], int]) -> tuple[list[Hit], int]:
    """``hits`` stuffed in rank order into at most ``budget`` tokens: the context is the texts joined by
    :data:`SEPARATOR`; a hit that would push its count over the budget is skipped, a later one may still fit.

    Args:
        hits: Ranked chunks, best first.
        budget: Token budget of the joined context.
        count: Counts tokens (the pack stage's tokenizer).

    Returns:
        The stuffed hits, in rank order, and the joined context's tokens.
    """
    kept: list[Hit] = []
    texts: list[str] = []
    tokens = 0
    for h in hits:
        n = count(SEPARATOR.join([*texts, h.display_text]))
        if n <= budget:
            kept.append(h)
            texts.append(h.display_text)
            tokens = n
    return kept, tokens


def _mean(values: Sequence[float | None], digits: int = 4) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return round(sum(kept) / len(kept), digits) if kept else None


def _corpus_tenant(questions: Sequence[GoldenQuestion], tenant: str | None) -> str:
    if tenant:
        return tenant
    named = sorted({q.tenant for q in questions if q.tenant})
    if len(named) != 1:
        raise ConfigError(
            "--recipes: the recipes index one folder for one tenant; pass --tenant"
            + (f" (the golden lines name {', '.join(named)})" if named else "")
        )
    return named[0]


def _check_spans(questions: Sequence[GoldenQuestion], docs: Sequence[SourceDoc], left_out: set[str]) -> None:
    """Every gold span names a document of the folder and fits in its text (else the folder is not the corpus)."""
    texts = {d.source_id: d.text for d in docs}
    for q in questions:
        for sp in q.spans:
            text = texts.get(sp.source_id)
            if text is None:
                if sp.source_id in left_out:
                    continue
                raise InputError(
                    f"golden question {q.id}",
                    "spans.source_id",
                    f"{sp.source_id!r} is not a document of --docs (source ids are paths relative to the folder "
                    "your index was ingested from); pass that folder",
                )
            if sp.end > len(text):
                raise InputError(
                    f"golden question {q.id}",
                    "spans.end",
                    f"{sp.end} is past the end of {sp.source_id!r} ({len(text)} characters in the --docs folder): "
                    "the folder's text is not the one the golden offsets were written against",
                )


def _score(
    name: str,
    questions: Sequence[GoldenQuestion],
    search: Callable[[GoldenQuestion], list[Hit]],
    *,
    budget: int,
    count: Callable[[str], int],
    progress: bool,
) -> list[dict[str, Any]]:
    """One recipe's per-question rows: search, stuff within the budget, score the stuffed chunks."""
    from es_rag.progress import tqdm

    rows = []
    for q in tqdm(questions, desc=name, unit="q", disable=not progress):
        t0 = time.perf_counter()
        ranked = search(q)
        ms = (time.perf_counter() - t0) * 1000
        kept, tokens = stuff(ranked, budget=budget, count=count)
        got = answer_coverage(q.spans, kept)
        dup, evidence = duplicate_tokens(kept, count)
        rows.append(
            {
                "id": q.id,
                "category": q.category,
                "coverage": None if got is None else round(got[0], 6),
                "whole": None if got is None else got[1],
                "context_tokens": tokens,
                "evidence_tokens": evidence,
                "duplicate_tokens": dup,
                "retrieved": len(ranked),
                "stuffed": [h.chunk_id for h in kept],
                "stuffed_sources": [h.source_id for h in kept],
                "latency_ms": {"retrieve": round(ms, 3)},
            }
        )
    return rows


def _summary(rows: Sequence[Mapping[str, Any]], index_chunks: int, build_s: float | None) -> dict[str, Any]:
    spanned = [r for r in rows if r["coverage"] is not None]
    evidence = sum(r["evidence_tokens"] for r in rows)
    lat = latency(rows).get("retrieve", {})
    return {
        "answer_coverage": _mean([r["coverage"] for r in spanned]),
        "answer_whole": _mean([float(r["whole"]) for r in spanned]),
        "context_tokens": _mean([r["context_tokens"] for r in rows], 1),
        "duplicate_token_rate": round(sum(r["duplicate_tokens"] for r in rows) / evidence, 4) if evidence else None,
        "index_chunks": index_chunks,
        "chunks_stuffed": _mean([len(r["stuffed"]) for r in rows], 2),
        "latency_p50_ms": lat.get("p50"),
        "latency_p95_ms": lat.get("p95"),
        "build_s": None if build_s is None else round(build_s, 3),
    }


def _es_rag_row(result: Mapping[str, Any], index_chunks: int) -> dict[str, Any]:
    overall = result["overall"]
    total = result.get("latency_ms", {}).get("total", {})
    return {
        "answer_coverage": overall["answer_coverage"],
        "answer_whole": overall["answer_whole"],
        "context_tokens": overall["context_tokens"],
        "duplicate_token_rate": overall["duplicate_token_rate"],
        "index_chunks": index_chunks,
        "chunks_stuffed": overall["blocks"],
        "latency_p50_ms": total.get("p50"),
        "latency_p95_ms": total.get("p95"),
        "build_s": None,
    }


def _ratios(row: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for m in METRICS:
        a, b = row.get(m), base.get(m)
        out[m] = round(a / b, 3) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
    return out


def _by_category(
    questions: Sequence[GoldenQuestion], per_row: Mapping[str, Sequence[Mapping[str, Any]]], es_result: Any
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for c in sorted({q.category for q in questions}):
        spans = sum(1 for q in questions if q.category == c and q.spans)
        cell: dict[str, Any] = {"questions": sum(1 for q in questions if q.category == c), "with_spans": spans}
        cell[ES_RAG] = es_result["categories"].get(c, {}).get("answer_coverage")
        for name, rows in per_row.items():
            cell[name] = _mean([r["coverage"] for r in rows if r["category"] == c])
        out[c] = cell
    return out


def _framework_index(name: str, docs: Sequence[SourceDoc], embedder: Any) -> RecipeIndex:
    if name == "llamaindex":
        from es_rag.integrations.recipes_llamaindex import LlamaIndexIndex

        return LlamaIndexIndex(docs, embedder)
    from es_rag.integrations.recipes_langchain import LangChainIndex

    return LangChainIndex(docs, embedder)


def _bm25_search(pipeline: Any, tenant: str, groups: Sequence[str]) -> Callable[[GoldenQuestion], list[Hit]]:
    """BM25 alone over the user's index: the ``bm25`` channel of ``backend.retrieve`` without a query vector."""

    def search(q: GoldenQuestion) -> list[Hit]:
        flt = question_filter(q, tenant, groups)
        return list(pipeline.backend.retrieve(q.question, None, flt, pipeline.settings).channels.get("bm25", []))

    return search


def _index_search(index: RecipeIndex, k: int) -> Callable[[GoldenQuestion], list[Hit]]:
    def search(q: GoldenQuestion) -> list[Hit]:
        return index.search(q.question, k)

    return search


def compare_recipes(
    questions: Sequence[GoldenQuestion],
    pipeline: Any,
    *,
    docs: str | Path,
    tenant: str | None = None,
    groups: Sequence[str] = (),
    recipes: Sequence[str] = RECIPES,
    es_rag_result: Mapping[str, Any] | None = None,
    exclude_dirs: Sequence[str | Path] = (),
    progress: bool = False,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """The golden questions through es_rag's pipeline and each recipe of ``recipes``, scored alike (module docstring).

    Args:
        questions: The golden set.
        pipeline: A :class:`~es_rag.pipeline.RagPipeline` over the user's index with the user's settings; its
            embedder, budget (``settings.pack.token_budget``) and pack tokenizer serve every row.
        docs: The folder the index was ingested from (the recipes' corpus).
        tenant: The tenant of the folder's documents and of the questions that name none (``--tenant``); default:
            the one tenant the questions name.
        groups: ACL groups of the questions that name none (es_rag and bm25 rows; the recipes have no ACL).
        recipes: Rows to run (:data:`RECIPES`).
        es_rag_result: An :func:`~es_rag.evaluation.golden_eval.evaluate_golden` result of the same questions on
            ``pipeline`` to reuse for the es_rag row (else it is run, without the budget curve).
        exclude_dirs: Folders under ``docs`` never read (the embedded index).
        progress: Show progress bars.
        cache_dir: Where the recipes' passage vectors are cached (:class:`~es_rag.integrations.recipes_common.
            CachedPassages`); None: not cached.

    Raises:
        ConfigError: An unknown recipe, no tenant, ``docs`` not a folder, no embedder in ``pipeline``.
        InputError: A gold span naming a document the folder lacks or past its end, a framework chunk whose offsets
            do not give back its text (naming the document).
        MissingDependencyError: A framework of a chosen row is not installed (names the ``recipes`` extra).
    """
    from es_rag.evaluation.golden_eval import evaluate_golden
    from es_rag.filters import SearchFilter

    chosen = parse_recipes(list(recipes))
    corpus_tenant = _corpus_tenant(questions, tenant)
    selected = [q for q in questions if (q.tenant or corpus_tenant) == corpus_tenant]
    notes: list[str] = []
    if len(selected) < len(questions):
        notes.append(
            f"{len(questions) - len(selected)} questions of other tenants than {corpus_tenant!r} left out of every row"
        )
    if not selected:
        raise ConfigError(f"--recipes: no golden question runs under tenant {corpus_tenant!r}")
    if pipeline.embedder is None and any(r != "bm25" for r in chosen):
        raise ConfigError("--recipes: the recipes embed with the pipeline's embedder, and it has none")
    settings = pipeline.settings
    budget = int(settings.pack.token_budget)
    tokenizer = pipeline.pack_tokenizer()
    count = tokenizer.count
    read = read_corpus(docs, tenant=corpus_tenant, settings=settings, exclude_dirs=exclude_dirs)
    corpus = read.docs
    notes.extend(read.notes)
    _check_spans(selected, corpus, read.left_out)

    if es_rag_result is None or len(selected) != len(questions):
        es_rag_result = evaluate_golden(
            selected, pipeline, tenant=corpus_tenant, groups=groups, progress=progress, budgets=None
        )
    own_chunks = pipeline.backend.count(SearchFilter(corpus_tenant, tuple(groups)))
    rows: dict[str, dict[str, Any]] = {ES_RAG: _es_rag_row(es_rag_result, own_chunks)}
    per_row: dict[str, list[dict[str, Any]]] = {}
    built: dict[str, RecipeIndex] = {}
    for name in chosen:
        if name == "bm25":
            search = _bm25_search(pipeline, corpus_tenant, groups)
            chunks, build_s = own_chunks, None
        else:
            family = "llamaindex" if name == "llamaindex" else "langchain"
            if family not in built:
                embedder = pipeline.embedder if cache_dir is None else CachedPassages(pipeline.embedder, cache_dir)
                built[family] = _framework_index(family, corpus, embedder)
            index = built[family]
            k = {"langchain": LANGCHAIN_K, "langchain-k4": LANGCHAIN_DEFAULT_K}.get(name, LLAMAINDEX_TOP_K)
            search = _index_search(index, k)
            chunks, build_s = len(index.chunks), index.build_s
        per_row[name] = _score(name, selected, search, budget=budget, count=count, progress=progress)
        rows[name] = _summary(per_row[name], chunks, build_s)
    if cache_dir is not None and any(r != "bm25" for r in chosen):
        notes.append(f"recipe passage vectors cached in {cache_dir} (a cached build s is mostly splitting and reading)")
    if "langchain" in chosen and "langchain-k4" in chosen:
        notes.append("langchain and langchain-k4 share one index (its build time is shown on both)")
    base = rows[ES_RAG]
    return {
        "token_budget": budget,
        "tokenizer": tokenizer.name,
        "tenant": corpus_tenant,
        "docs": str(docs),
        "documents": len(corpus),
        "questions": len(selected),
        "with_spans": sum(1 for q in selected if q.spans),
        "rows": rows,
        "ratio_to_es_rag": {name: _ratios(row, base) for name, row in rows.items() if name != ES_RAG},
        "categories": _by_category(selected, per_row, es_rag_result),
        "recipes": {name: DESCRIPTIONS[name] for name in rows},
        "notes": notes,
        "per_question": {name: per_row[name] for name in chosen},
    }


COLUMNS = (
    ("answer_coverage", "coverage", ".4f"),
    ("answer_whole", "whole", ".4f"),
    ("context_tokens", "tokens", ".0f"),
    ("duplicate_token_rate", "dup", ".4f"),
    ("index_chunks", "chunks", "d"),
    ("chunks_stuffed", "stuffed", ".2f"),
    ("latency_p50_ms", "p50 ms", ".2f"),
    ("latency_p95_ms", "p95 ms", ".2f"),
    ("build_s", "build s", ".2f"),
)
"""The table's columns: metric, heading, number format."""


def _fmt(value: Any, spec: str, width: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{'-':>{width}}"
    return f"{(round(value) if spec == 'd' else value):>{width}{spec}}"


def format_recipes(result: Mapping[str, Any]) -> str:
    """The fixed-width tables of a :func:`compare_recipes` result: each row's numbers, their ratio to es_rag's,
    answer coverage per category, what each row is, and the notes.

    Args:
        result: Output of :func:`compare_recipes`.
    """
    width = 9
    names = list(result["rows"])
    label = max(12, *(len(n) for n in names))
    head = f"{'row':<{label}} " + " ".join(f"{h:>{width}}" for _, h, _ in COLUMNS)
    lines = [
        f"what reaches the LLM: token budget {result['token_budget']} ({result['tokenizer']} tokens), tenant "
        f"{result['tenant']}, {result['questions']} questions ({result['with_spans']} with spans), "
        f"{result['documents']} documents in {result['docs']}",
        head,
    ]
    lines.extend(
        f"{n:<{label}} " + " ".join(_fmt(result["rows"][n].get(m), spec, width) for m, _, spec in COLUMNS)
        for n in names
    )
    ratios = result["ratio_to_es_rag"]
    if ratios:
        lines += ["", "ratio to es_rag (row / es_rag)", head]
        lines.extend(
            f"{n:<{label}} " + " ".join(_fmt(ratios[n].get(m), ".3f", width) for m, _, _ in COLUMNS) for n in ratios
        )
    cols = [max(8, len(n)) for n in names]
    lines += [
        "",
        "answer coverage per category (share of gold span characters in the context)",
        f"{'category':<20} {'spans':>5} " + " ".join(f"{n:>{w}}" for n, w in zip(names, cols, strict=True)),
    ]
    for c, cell in result["categories"].items():
        lines.append(
            f"{c[:20]:<20} {cell['with_spans']:>5} "
            + " ".join(_fmt(cell.get(n), ".4f", w) for n, w in zip(names, cols, strict=True))
        )
    lines += ["", "rows:"]
    lines.extend(f"  {n:<{label}} {result['recipes'][n]}" for n in names)
    lines += [
        "",
        "coverage, whole: mean share of gold span characters in the context and share of questions with all of them,",
        "  over the questions with spans; tokens: the context's, mean per question (es_rag's rendered context",
        "  includes its citation headers; a recipe's is the chunk texts joined by blank lines); dup: duplicate /",
        "  evidence tokens; chunks: in the index; stuffed: chunks in the context per question; p50 / p95 ms: es_rag =",
        "  the whole search, a recipe = its retrieval (query embedding included); build s: split + embed + index",
        "  (es_rag and bm25: built by es-rag ingest)",
    ]
    lines.extend(f"note: {n}" for n in result["notes"])
    return "\n".join(lines)
