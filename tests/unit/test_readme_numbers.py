"""Docs that cannot drift (issue 32 item 2): a number the README's measured section quotes names the command and the
report file it came from, and equals what that file holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _measured() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("## Measured") : text.index("## Limits, stated plainly")]


def test_the_scifact_stage_table_is_its_report() -> None:
    section = _measured()
    report = "reports/scifact-defaults/result.json"
    command = "es-rag eval --dataset ../shared/eval/scifact --split test --rerank-model none"
    command += " --report reports/scifact-defaults"
    assert report in section and command in " ".join(section.split())  # named beside the numbers
    stages = json.loads((ROOT / report).read_text(encoding="utf-8"))["stages"]
    rows = {
        m.group(1): [float(x) for x in m.group(2).split("|")]
        for m in re.finditer(r"^\| (bm25|dense|hybrid)[^|]* \|([0-9.| ]+)\|$", section, re.M)
    }
    assert set(rows) == {"bm25", "dense", "hybrid"}, rows
    for stage, numbers in rows.items():
        got = stages[stage]
        expected = [got["ndcg@10"], got["mrr@10"], got["recall@10"], got["recall@100"]]
        assert numbers == [round(x, 4) for x in expected], (stage, numbers, expected)


def test_the_beir_multifield_line_is_its_report() -> None:
    section = " ".join(_measured().split())
    report = "reports/scifact-beir-multifield/result.json"
    assert report in section and "--bm25-protocol beir-multifield --report reports/scifact-beir-multifield" in section
    stages = json.loads((ROOT / report).read_text(encoding="utf-8"))["stages"]
    m = re.search(r"\): BM25 ([0-9.]+), hybrid ([0-9.]+)\.", section)
    assert m is not None, "the beir-multifield line"
    assert (float(m.group(1)), float(m.group(2))) == (stages["bm25"]["ndcg@10"], stages["hybrid"]["ndcg@10"])


def test_the_answer_coverage_row_of_rag_en_train_is_its_report() -> None:
    section = _measured()
    report = "reports/rag-en-train/result.json"
    assert report in section and "--recipes all" in " ".join(section.split())
    rows = json.loads((ROOT / report).read_text(encoding="utf-8"))["recipes"]["rows"]
    pattern = (
        r"^\| rag-en-train [^|]*\| \*\*([0-9.]+)\*\* \(([0-9,]+) tokens\) \| ([0-9.]+) \(([0-9,]+) tokens\) "
        r"\| ([0-9.]+) \| ([0-9.]+) \|$"
    )
    m = re.search(pattern, section, re.M)
    assert m is not None, "the rag-en-train row"
    es, es_tokens, lc, lc_tokens, li, bm = m.groups()
    assert float(es) == round(rows["es_rag"]["answer_coverage"], 3)
    assert int(es_tokens.replace(",", "")) == round(rows["es_rag"]["context_tokens"])
    assert float(lc) == round(rows["langchain"]["answer_coverage"], 3)
    assert int(lc_tokens.replace(",", "")) == round(rows["langchain"]["context_tokens"])
    assert float(li) == round(rows["llamaindex"]["answer_coverage"], 3)
    assert float(bm) == round(rows["bm25"]["answer_coverage"], 3)


def test_the_answer_coverage_row_of_rag_ja_train_is_its_report() -> None:
    section = _measured()
    report = "reports/rag-ja-train/result.json"
    assert report in section
    overall = json.loads((ROOT / report).read_text(encoding="utf-8"))["overall"]
    m = re.search(r"^\| rag-ja-train [^|]*\| \*\*([0-9.]+)\*\* \(([0-9,]+) tokens\) \|", section, re.M)
    assert m is not None, "the rag-ja-train row"
    assert float(m.group(1)) == round(overall["answer_coverage"], 3)
    assert int(m.group(2).replace(",", "")) == round(overall["context_tokens"])
