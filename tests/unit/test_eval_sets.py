"""The staged evaluation sets under eval/ load with es_rag's BEIR loader and are internally consistent."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

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


def _bigram_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bigram_bm25", EVAL.parent / "benchmarks" / "bigram_bm25.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bigram_baseline_folds_width_and_case_and_splits_runs_into_bigrams() -> None:
    bigrams = _bigram_bench().bigrams
    assert bigrams("ＡＢc デバイス x") == ["ab", "bc", "デバ", "バイ", "イス", "x"]
    assert bigrams("ｶﾞ") == ["ガ"]  # NFKC composes the half-width voiced kana into one character


def test_bigram_baseline_ranks_the_section_sharing_the_query_bigrams_first(tmp_path: Path) -> None:
    docs = {
        "d1": ("パッケージ管理", "aptitude でパッケージを削除する方法を説明します。"),
        "d2": ("ネットワーク", "ネットワークインターフェースの設定を説明します。"),
        "d3": ("システム", "カーネルパラメーターの変更方法を説明します。"),
    }
    (tmp_path / "qrels").mkdir()
    with open(tmp_path / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for doc_id, (title, text) in docs.items():
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
    queries = {"q1": "パッケージの削除", "q2": "インターフェース設定", "q3": "ＸＹＺ"}
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in queries.items()), "utf-8"
    )
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    scores = _bigram_bench().run(str(tmp_path), "test", 0.9, 0.4, 100)
    # q1 and q2 rank their section first; q3 shares no bigram with any section and retrieves nothing
    assert scores["nDCG@10"] == pytest.approx(2 / 3)
    assert scores["R@100"] == pytest.approx(2 / 3)
