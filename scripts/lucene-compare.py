"""Compare the embedded backend's Lucene mirrors with real Lucene 10.5 over the full real corpora and write
reports/lucene-oracle.md: analyzer token streams (and every code point alone), BM25 per field and multi_match, exact
kNN per similarity, and, for context, what HNSW and kuromoji would change on a cluster.

Usage: .venv/bin/python scripts/lucene-compare.py [--out reports/lucene-oracle.md] [--no-embed]

Needs ``make lucene-deps`` (scripts/lucene-oracle.sh). The same comparisons, on samples where they are costly, are the
tests of tests/lucene; the shared code and the known differences are tests/support/lucene_oracle.py. SciFact and
rag-ja-train come from ../shared/eval (or $ES_RAG_EVAL_DIR) and are reported as skipped when absent. --no-embed
leaves out the part that embeds SciFact with all-MiniLM-L6-v2 (real vectors for kNN and HNSW; a few minutes on CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pytest

import es_rag.embedded.lexical as lexical
from es_rag.embedded.token_filters import lowercase
from es_rag.embedded.tokenizer import standard_tokens
from tests.support.lucene_oracle import (
    ROOT,
    LuceneOracle,
    compare_bm25,
    compare_knn,
    corpus_texts,
    knn_vectors,
    known_cause,
    locate,
    read_jsonl,
    repo_corpus,
    repo_queries,
    scifact_corpus,
    scifact_test_queries,
    token_diffs,
)

CORPORA = ["en-debian-docs", "ja-debian-docs", "scifact", "rag-ja-train"]
ANALYZERS = ["standard", "english", "cjk"]
SIMILARITIES = ["cosine", "dot_product", "l2_norm", "max_inner_product"]
Skipped = pytest.skip.Exception


def analyzers(oracle: LuceneOracle, out: list[str]) -> None:
    out += [
        "## Analyzers: every token of every text",
        "",
        "Title and text of each document (rag-ja-train: each article), the mirror (`es_rag.embedded.analyzers`) "
        "against Lucene's analyzer as Elasticsearch configures it. A difference is a differing span of the two token "
        "streams (difflib opcodes).",
        "",
        "| corpus | analyzer | texts | tokens (Lucene) | differing spans | texts with one | causes |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    notes: dict[str, int] = {}
    for corpus in CORPORA:
        try:
            texts = corpus_texts(corpus)
        except Skipped as why:
            out.append(f"| {corpus} | - | skipped: {why} | | | | |")
            continue
        for analyzer in ANALYZERS:
            n_tokens, diffs = token_diffs(oracle, analyzer, texts)
            causes = Counter(known_cause(analyzer, d) or "UNEXPLAINED: not in KNOWN_TOKEN_DIFFS" for d in diffs)
            shown = "; ".join(f"{n} x [{notes.setdefault(cause, len(notes) + 1)}]" for cause, n in causes.items())
            spans = Counter((d.lucene, d.mirror) for d in diffs)
            examples = ", ".join(f"Lucene `{list(a)}` mirror `{list(b)}`" for (a, b), _ in spans.most_common(3))
            out.append(
                f"| {corpus} | {analyzer} | {len(texts):,} | {n_tokens:,} | {len(diffs)} | "
                f"{len({d.text for d in diffs})} | {shown or '-'}{' (' + examples + ')' if examples else ''} |"
            )
    out += ["", *(f"[{n}] {cause}." for cause, n in notes.items()), ""]


def code_points(oracle: LuceneOracle, out: list[str]) -> None:
    """Every code point U+0020..U+2FFFF alone between two letters (``a X b``) through both standard tokenizers."""
    cps = [c for c in range(0x20, 0x30000) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"a {chr(c)} b" for c in cps]
    want = oracle.request("analyze", analyzer="standard", texts=texts, detail=True)["tokens"]
    groups: Counter[tuple[str, str, str]] = Counter()
    examples: dict[tuple[str, str, str], list[str]] = {}
    for c, text, lucene in zip(cps, texts, want, strict=True):
        a = [(t[0], t[4]) for t in lucene]
        b = [(lowercase(t.text), t.type) for t in standard_tokens(text)]
        if a == b:
            continue
        kinds = (
            "/".join(t for _, t in a[1:-1]) or "nothing",
            "/".join(t for _, t in b[1:-1]) or "nothing",
            unicodedata.category(chr(c)),
        )
        groups[kinds] += 1
        examples.setdefault(kinds, []).append(f"U+{c:04X}")
    emoji = sum(n for (lu, mi, _), n in groups.items() if "EMOJI" in lu + mi)
    out += [
        "## Standard tokenizer: every code point alone",
        "",
        f"`a X b` for each of the {len(cps):,} code points U+0020..U+2FFFF (no surrogates): "
        f"{sum(groups.values()):,} tokenize differently. {emoji} of them are pictographs Lucene makes an `<EMOJI>` "
        "token of and the mirror skips: Lucene's grammar takes Extended_Pictographic from Unicode's emoji-data.txt "
        "(apache/lucene `UnicodeEmojiProperties.jflex`, emoji 11.0: e.g. U+1F947..U+1FFFD), while the `regex` "
        "package's `\\p{Extended_Pictographic}` that `es_rag/embedded/tokenizer.py` uses leaves out every "
        "pictograph that is not also Emoji (♪, ★, ✁, the mahjong and domino tiles). The rest are the documented "
        "Unicode version gap of `es_rag/embedded/tokenizer.py`: Lucene's word-break data is Unicode 12.1, the "
        "`regex` package's newer, so characters assigned or re-classed since then are tokens in the mirror only "
        "(category column: Python's Unicode 14 data; `Cn` = unassigned even there).",
        "",
        "| Lucene | mirror | category | code points | examples |",
        "|---|---|---|---:|---|",
    ]
    for kinds, n in groups.most_common():
        out.append(f"| {kinds[0]} | {kinds[1]} | {kinds[2]} | {n} | {', '.join(examples[kinds][:4])} |")
    out.append("")


def _bm25_sets() -> list[tuple[str, str, Any, list[str], tuple[tuple[str, float], ...], float]]:
    """(name, analyzer, docs, queries, fields, tie breaker) of every BM25 comparison whose corpus is present."""
    en, ja = repo_corpus("en-debian-docs"), repo_corpus("ja-debian-docs")
    enq = [q["text"] for q in repo_queries("en-debian-docs")]
    jaq = [q["text"] for q in repo_queries("ja-debian-docs")]
    text = (("text", 1.0),)
    sets = [
        ("en-debian-docs", "english", en, enq, text, 0.0),
        ("en-debian-docs", "english", en, enq, (("title", 2.0), ("text", 1.0)), 0.5),
        ("ja-debian-docs", "cjk", ja, jaq, text, 0.0),
        ("ja-debian-docs", "cjk", ja, jaq, (("title", 2.0), ("text", 1.0)), 0.5),
    ]
    try:
        sc, scq = scifact_corpus(), [q["text"] for q in scifact_test_queries()]
        sets += [
            ("scifact", "english", sc, scq, text, 0.0),
            ("scifact", "english", sc, scq, (("title", 1.0), *text), 0.5),
        ]
    except Skipped:
        pass
    return sets


def bm25(oracle: LuceneOracle, out: list[str]) -> None:
    out += [
        "## BM25",
        "",
        "The embedded backend's `bm25` against Lucene's `multi_match` `best_fields` (per field the match query's "
        "SHOULD clauses, boosted, under `dis_max` with the tie breaker) scored by Elasticsearch's "
        "`LegacyBM25Similarity` (k1 1.2, b 0.75) over one segment. Scores compared: each query's embedded top 100, "
        "and every matching document of every tenth query. *before*: the same run with bm25s's own statistics "
        "(true lengths, avgdl and N over every document), as the embedded backend scored until this comparison.",
        "",
        "| set | analyzer | fields (tie breaker) | queries | top 10 identical | same up to ties | scores | "
        "max rel. diff | before: top 10 identical | before: max rel. diff |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fix = lexical.lucene_scores
    for name, analyzer, docs, queries, fields, tie in _bm25_sets():
        now = compare_bm25(oracle, docs, queries, analyzer, fields=fields, tie_breaker=tie)
        lexical.lucene_scores = lambda *args: None  # type: ignore[assignment]
        try:
            before = compare_bm25(oracle, docs, queries, analyzer, fields=fields, tie_breaker=tie)
        finally:
            lexical.lucene_scores = fix
        shown = " + ".join(f if w == 1.0 else f"{f}^{w:g}" for f, w in fields) + (
            f" ({tie:g})" if len(fields) > 1 else ""
        )
        out.append(
            f"| {name} | {analyzer} | {shown} | {now.queries} | {now.top10_identical} | {now.top10_tied} | "
            f"{now.scores_compared:,} | {now.max_rel:.1e} | {before.top10_identical} | {before.max_rel:.1e} |"
        )
    out.append("")


def kuromoji(oracle: LuceneOracle, out: list[str]) -> None:
    """What the embedded ``cjk`` mirror gives up against a cluster's ``kuromoji`` (no mirror) on ja-debian-docs."""
    docs = repo_corpus("ja-debian-docs")
    queries = read_jsonl(ROOT / "eval" / "ja-debian-docs" / "queries.jsonl")
    rel: dict[str, set[str]] = {}
    for line in (ROOT / "eval" / "ja-debian-docs" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            rel.setdefault(qid, set()).add(did)
    queries = [q for q in queries if q["_id"] in rel]
    texts = [{"text": d["text"]} for d in docs]
    tops = {a: oracle.bm25({"text": a}, texts, [q["text"] for q in queries])["results"] for a in ("kuromoji", "cjk")}
    overlap = np.mean(
        [len(set(k["ids"]) & set(c["ids"])) / 10 for k, c in zip(tops["kuromoji"], tops["cjk"], strict=True)]
    )
    recall = {
        a: np.mean(
            [
                len({docs[i]["_id"] for i in r["ids"]} & rel[q["_id"]]) / len(rel[q["_id"]])
                for q, r in zip(queries, res, strict=True)
            ]
        )
        for a, res in tops.items()
    }
    out += [
        "## kuromoji (no mirror) against cjk, for context",
        "",
        f"ja-debian-docs, the {len(queries)} test queries with qrels, text field: a cluster with analysis-kuromoji "
        f"indexes `text.ja` with `kuromoji`; the embedded backend mirrors it with `cjk` bigrams. Their top 10s share "
        f"{overlap:.0%} of the documents; recall@10 is {recall['kuromoji']:.3f} under kuromoji and "
        f"{recall['cjk']:.3f} under cjk (Lucene both; the embedded cjk equals Lucene's cjk, above).",
        "",
    ]


def knn(oracle: LuceneOracle, out: list[str], embed: bool) -> None:
    out += [
        "## kNN",
        "",
        "The embedded backend's exact `knn` (every document's score) against Lucene's `VectorSimilarityFunction` as "
        "Elasticsearch applies it to float vectors (cosine: `DOT_PRODUCT` over vectors `VectorUtil.l2normalize`d "
        "when their squared length is more than 1e-3 from 1). Difference: `|embedded - Lucene| / max(1, |Lucene|)`.",
        "",
        "| vectors | similarity | documents x queries | max diff | top 10 identical |",
        "|---|---|---|---:|---:|",
    ]
    for similarity in SIMILARITIES:
        seed = SIMILARITIES.index(similarity)
        v, q = knn_vectors(seed, 5000, 384, similarity), knn_vectors(seed + 100, 50, 384, similarity)
        got = compare_knn(oracle, similarity, v, q)
        out.append(
            f"| Gaussian, norms 0.5..2 | {similarity} | 5000 x 50 | {got.max_diff:.1e} | {got.top10_identical}/50 |"
        )
    near = compare_knn(
        oracle,
        "cosine",
        knn_vectors(7, 5000, 384, "cosine", near_unit=True),
        knn_vectors(8, 50, 384, "cosine", near_unit=True),
    )
    out.append(f"| unit length x (1 +- 4e-4) | cosine | 5000 x 50 | {near.max_diff:.1e} | {near.top10_identical}/50 |")
    if embed:
        vectors = scifact_vectors()
        if vectors is not None:
            docs, queries = vectors
            got = compare_knn(oracle, "cosine", docs, queries)
            out.append(
                f"| SciFact, all-MiniLM-L6-v2 | cosine | {len(docs)} x {len(queries)} | {got.max_diff:.1e} | "
                f"{got.top10_identical}/{len(queries)} |"
            )
    out += [
        "",
        "The unit length x (1 +- 4e-4) row: Elasticsearch leaves a cosine vector within 1e-3 of unit squared length "
        "as it is and scores its dot product (`DenseVectorFieldMapper.isNotUnitVector`); the embedded backend does "
        "the same since issue 29 (`es_rag/embedded/vectors.py`, `COSINE_UNIT_EPS`; before, it normalised every "
        "vector and such vectors differed by up to 5e-4).",
        "",
    ]
    hnsw(oracle, out, embed)


def scifact_vectors() -> tuple[Any, Any] | None:
    """SciFact's abstracts and test queries embedded with all-MiniLM-L6-v2 (cached beside the Lucene jar)."""
    try:
        corpus, queries = scifact_corpus(), scifact_test_queries()
    except Skipped:
        return None
    cache = Path(locate()[1].split(":")[-1]).parent / "scifact-minilm.npz"
    if cache.is_file():
        data = np.load(cache)
        return data["docs"], data["queries"]
    from es_rag.encoders.embedder import make_embedder

    embedder = make_embedder("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    docs = np.asarray(embedder.embed_documents([f"{d.get('title', '')}\n{d['text']}" for d in corpus]), np.float32)
    qs = np.asarray(embedder.embed_documents([q["text"] for q in queries]), np.float32)
    np.savez(cache, docs=docs, queries=qs)
    return docs, qs


HNSW_WINDOW = 48
"""Words per passage of the 100k-vector HNSW set (overlapping windows, stride a quarter of a window, as chunks with
overlap are)."""


def passage_vectors(n: int = 100_000, n_queries: int = 300) -> tuple[Path, Path, int] | None:
    """``n`` real passages (48-word windows over SciFact's abstracts and the rag-en-train and debian-docs texts) and
    SciFact's test queries, embedded with all-MiniLM-L6-v2 and written as raw float32 files for the oracle (cached
    beside the Lucene jar): the set the issue names for HNSW recall, 100k vectors of real text."""
    cache = Path(locate()[1].split(":")[-1]).parent
    docs_file, queries_file = cache / f"passages-{n}-minilm.f32", cache / f"queries-{n_queries}-minilm.f32"
    if docs_file.is_file() and queries_file.is_file():
        return docs_file, queries_file, 384
    try:
        corpus, queries = scifact_corpus(), scifact_test_queries()
    except Skipped:
        return None
    texts = [f"{d.get('title', '')} {d['text']}" for d in corpus]
    for folder in (ROOT.parent / "shared" / "eval" / "rag-en-train" / "docs",):
        texts += [f.read_text(encoding="utf-8") for f in sorted(folder.glob("*.md"))] if folder.is_dir() else []
    for path in (ROOT / "eval" / "en-debian-docs" / "corpus.jsonl",):
        texts += [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    passages: list[str] = []
    step = HNSW_WINDOW // 4
    for text in texts:
        words = text.split()
        for start in range(0, max(1, len(words) - step), step):
            passages.append(" ".join(words[start : start + HNSW_WINDOW]))
    if len(passages) < n:
        return None
    passages = passages[:: max(1, len(passages) // n)][:n]
    from es_rag.encoders.embedder import make_embedder

    embedder = make_embedder("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    docs = np.asarray(embedder.embed_documents(passages), np.float32)
    qs = np.asarray(embedder.embed_documents([q["text"] for q in queries[:n_queries]]), np.float32)
    docs.astype("<f4").tofile(docs_file)
    qs.astype("<f4").tofile(queries_file)
    return docs_file, queries_file, docs.shape[1]


def hnsw(oracle: LuceneOracle, out: list[str], embed: bool) -> None:
    """Recall of Elasticsearch's float HNSW (m 16, ef_construction 100) against the exact top k."""
    rows = []
    for k in (10, 100):
        got = oracle.request(
            "hnsw_recall", similarity="cosine", n=10_000, dims=384, n_queries=100, seed=1, k=k, num_candidates=100
        )
        rows.append(f"| Gaussian (worst case) | 10000 x 384 | {k} | 100 | {got['recall']:.3f} |")
    vectors = scifact_vectors() if embed else None
    if vectors is not None:
        docs, queries = vectors
        for k in (10, 100):
            got = oracle.request(
                "hnsw_recall",
                similarity="cosine",
                vectors=docs.tolist(),
                queries=queries.tolist(),
                k=k,
                num_candidates=100,
            )
            rows.append(
                f"| SciFact, all-MiniLM-L6-v2 | {len(docs)} x {docs.shape[1]} | {k} | 100 | {got['recall']:.3f} |"
            )
    files = passage_vectors() if embed else None
    if files is not None:
        docs_file, queries_file, dims = files
        n_docs = docs_file.stat().st_size // (4 * dims)
        for num_candidates in (100, 200, 500):
            got = oracle.request(
                "hnsw_recall",
                similarity="cosine",
                vectors_file=str(docs_file),
                queries_file=str(queries_file),
                dims=dims,
                ks=[10, 100],
                num_candidates=num_candidates,
            )
            for k in (10, 100):
                rows.append(
                    f"| 100k passages (SciFact, rag-en-train, debian-docs), all-MiniLM-L6-v2 | {n_docs} x {dims} | "
                    f"{k} | {num_candidates} | {got['recall_at'][str(k)]:.3f} |"
                )
    out += [
        "## HNSW, for context",
        "",
        "The embedded backend's kNN is exact; a cluster's `hnsw` (float, `m` 16, `ef_construction` 100, es_rag's "
        "`num_candidates` 100 and `candidate_k` 100) is approximate. Recall of Lucene's `KnnFloatVectorQuery` "
        "(queue of num_candidates, best k kept) against the exact top k, one segment:",
        "",
        "| vectors | documents x dims | k | num_candidates | recall@k |",
        "|---|---|---:|---:|---:|",
        *rows,
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "reports" / "lucene-oracle.md"))
    parser.add_argument("--no-embed", action="store_true", help="skip the SciFact embeddings (kNN, HNSW)")
    parser.add_argument(
        "--hnsw-only", action="store_true", help="print the HNSW section only (the 100k passages take minutes)"
    )
    args = parser.parse_args()
    java, classpath = locate()
    oracle = LuceneOracle(java, classpath)
    if args.hnsw_only:
        section: list[str] = []
        try:
            hnsw(oracle, section, True)
        finally:
            oracle.close()
        print("\n".join(section))
        return 0
    out = [
        "# The embedded mirrors against real Lucene",
        "",
        f"Written by `scripts/lucene-compare.py` with Lucene {oracle.version} (Anserini's fat jar from the pyserini "
        f"2.4.0 sdist, `scripts/lucene-oracle.sh`) on `{java}`. Tests: `tests/lucene` (samples where costly).",
        "",
    ]
    timings = []
    try:
        for name, part in (
            ("analyzers", lambda: analyzers(oracle, out)),
            ("code points", lambda: code_points(oracle, out)),
            ("BM25", lambda: bm25(oracle, out)),
            ("kuromoji", lambda: kuromoji(oracle, out)),
            ("kNN and HNSW", lambda: knn(oracle, out, not args.no_embed)),
        ):
            start = time.perf_counter()
            part()
            timings.append(f"{name} {time.perf_counter() - start:.0f} s")
    finally:
        oracle.close()
    out += [
        "## Timings",
        "",
        ", ".join(timings) + " (this machine; the first run also embeds SciFact, then cached).",
        "",
    ]
    Path(args.out).write_text("\n".join(out), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
