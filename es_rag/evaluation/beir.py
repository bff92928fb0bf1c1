"""BEIR-layout datasets and the BM25 set-ups of published BEIR baselines.

Layout: ``corpus*.jsonl`` (read in name order; ``{"_id", "title", "text"}``), ``queries.jsonl``
(``{"_id", "text"}``), ``qrels/<split>.tsv`` (``query-id corpus-id score``, graded, header optional).
:func:`load_beir` reads one split of such a folder; :data:`BM25_PROTOCOLS` names the analyzer, fields and
k1/b of the published BM25 baselines as es_rag settings (:func:`apply_bm25_protocol`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigError, InputError
from es_rag.settings import Settings

BM25_PROTOCOLS: dict[str, dict[str, Any]] = {
    "beir-multifield": {
        "analyzer": "english",
        "bm25_fields": ("title", "text"),
        "bm25_tie_breaker": 1.0,
        "bm25_k1": 0.9,
        "bm25_b": 0.4,
    },
    "beir-es": {
        "analyzer": "english",
        "bm25_fields": ("title", "text"),
        "bm25_tie_breaker": 0.5,
        "bm25_k1": 1.2,
        "bm25_b": 0.75,
    },
}
"""BM25 set-ups of published BEIR baselines, as es_rag settings.

- ``beir-multifield``: the Anserini/Pyserini "multifield" BM25 regression that reproduces BEIR's published
  BM25 table (SciFact nDCG@10 0.6647 vs the paper's 0.665): Lucene BM25 with k1 0.9 and b 0.4, title and
  text as separate fields queried with equal weight and summed (``tie_breaker`` 1.0 makes Elasticsearch's
  ``best_fields`` the sum, i.e. ``most_fields``), English analysis (Porter stemming, stop words).
- ``beir-es``: the Elasticsearch code shipped in the ``beir`` package (``multi_match`` ``best_fields``
  over title and text, ``tie_breaker`` 0.5, ``english`` analyzer, Elasticsearch's default k1 1.2 / b 0.75).
  It does not reproduce the paper's number: run on Elasticsearch 7.17 it gives SciFact 0.6906
  (beir-cellar/beir#143).

``settings`` (no entry here) keeps the product's own settings.
"""


def apply_bm25_protocol(settings: Settings, protocol: str) -> Settings:
    """``settings`` with the analyzer, BM25 fields, tie_breaker and k1/b of a :data:`BM25_PROTOCOLS` entry.

    Args:
        settings: Base settings (every other field is kept).
        protocol: A :data:`BM25_PROTOCOLS` name, or ``settings`` to keep ``settings`` unchanged.
    """
    if protocol == "settings":
        return settings
    if protocol not in BM25_PROTOCOLS:
        raise ConfigError(f"bm25 protocol: unknown {protocol!r}; valid: {', '.join([*BM25_PROTOCOLS, 'settings'])}")
    return settings.replace(**BM25_PROTOCOLS[protocol])


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{n}", "json", f"malformed JSON: {exc.msg}") from None
            if not isinstance(row, dict) or "_id" not in row:
                raise InputError(f"{path}:{n}", "_id", "missing")
            rows.append(row)
    return rows


def load_beir(
    directory: str | Path, split: str
) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    """Corpus, the split's queries and its graded qrels.

    Args:
        directory: Dataset folder.
        split: Qrels split name (``qrels/<split>.tsv``).
    """
    root = Path(directory)
    files = sorted(root.glob("corpus*.jsonl"))
    if not files:
        raise InputError(str(root), "corpus", "no corpus*.jsonl file")
    corpus = {}
    for f in files:
        for row in _read_jsonl(f):
            corpus[str(row["_id"])] = {"title": str(row.get("title") or ""), "text": str(row.get("text") or "")}
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise InputError(str(qrels_path), "split", f"no qrels for split {split!r}")
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate(qrels_path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split("\t")
        if not line.strip() or (n == 1 and not parts[-1].strip().lstrip("-").isdigit()):
            continue
        if len(parts) < 3:
            raise InputError(f"{qrels_path}:{n}", "qrels", "expected query-id, corpus-id, score")
        qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    all_queries = {str(r["_id"]): str(r.get("text", "")) for r in _read_jsonl(root / "queries.jsonl")}
    missing = [q for q in qrels if q not in all_queries]
    if missing:
        raise InputError(str(root / "queries.jsonl"), "_id", f"{len(missing)} qrels queries missing, e.g. {missing[0]}")
    queries = {q: all_queries[q] for q in qrels}
    return corpus, queries, qrels
