"""The staged evaluation sets under eval/ load with es_rag's BEIR loader and are internally consistent."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from es_rag.evaluation.beir import load_beir

EVAL = Path(__file__).resolve().parents[2] / "eval"
# documents, {split: queries}; each query has one judged document (known-item sets, eval/*/SOURCE.md)
EXPECTED = {
    "ja-debian-docs": (438, {"train": 148, "dev": 74, "test": 147}),
    "en-debian-docs": (671, {"train": 244, "dev": 122, "test": 244}),
}
_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_staged_set_loads_with_its_counts_and_every_qrel_resolves(name: str) -> None:
    documents, splits = EXPECTED[name]
    seen: dict[str, str] = {}
    for split, n_queries in splits.items():
        corpus, queries, qrels = load_beir(EVAL / name, split)
        assert len(corpus) == documents
        assert len(queries) == n_queries == len(qrels)
        for qid, judged in qrels.items():
            assert judged and set(judged) <= set(corpus), (name, split, qid)
            assert list(judged.values()) == [1]
            assert queries[qid].strip(), (name, qid)
            assert seen.setdefault(qid, split) == split, f"{qid} is in {seen[qid]} and {split}"
    all_queries = [json.loads(line)["_id"] for line in (EVAL / name / "queries.jsonl").read_text("utf-8").splitlines()]
    assert sorted(all_queries) == sorted(seen), "every query is in exactly one split"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_staged_set_has_a_source_note(name: str) -> None:
    source = (EVAL / name / "SOURCE.md").read_text("utf-8")
    assert "License" in source and "known-item" in source


def test_japanese_set_is_japanese() -> None:
    corpus, queries, _ = load_beir(EVAL / "ja-debian-docs", "test")
    assert all(_JAPANESE.search(q) for q in queries.values())
    share = [len(_JAPANESE.findall(d["text"])) / len(d["text"]) for d in corpus.values()]
    assert min(share) >= 0.2
