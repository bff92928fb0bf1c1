"""Docs that cannot drift (issue 32 item 2): a number the README's measured section quotes names the command and the
report file it came from, and equals what that file holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("name", ["rag-en-train", "rag-ja-train"])
def test_the_answer_coverage_rows_are_their_reports(name: str) -> None:
    section = _measured()
    report = f"reports/{name}/result.json"
    assert report in section and "--recipes all" in " ".join(section.split())
    rows = json.loads((ROOT / report).read_text(encoding="utf-8"))["recipes"]["rows"]
    pattern = (
        rf"^\| {name} [^|]*\| \*\*([0-9.]+)\*\* \(([0-9,]+) tokens\) \| ([0-9.]+) \(([0-9,]+) tokens\) "
        r"\| ([0-9.]+) \| ([0-9.]+) \|$"
    )
    m = re.search(pattern, section, re.M)
    assert m is not None, f"the {name} row"
    es, es_tokens, lc, lc_tokens, li, bm = m.groups()
    assert float(es) == round(rows["es_rag"]["answer_coverage"], 3)
    assert int(es_tokens.replace(",", "")) == round(rows["es_rag"]["context_tokens"])
    assert float(lc) == round(rows["langchain"]["answer_coverage"], 3)
    assert int(lc_tokens.replace(",", "")) == round(rows["langchain"]["context_tokens"])
    assert float(li) == round(rows["llamaindex"]["answer_coverage"], 3)
    assert float(bm) == round(rows["bm25"]["answer_coverage"], 3)


NAMES = ("rag-en-train", "rag-ja-train")
"""The answer-coverage sets with a report."""
RECIPE_ROWS = ("es_rag", "langchain", "langchain-k4", "llamaindex", "bm25")
"""The rows of docs/evaluation.md's recipe tables, in table order."""


def _recipe_tables() -> dict[str, list[list[str]]]:
    """The recipe tables of docs/evaluation.md ("Beside the recipes"), by the set their header cell names."""
    text = (ROOT / "docs/evaluation.md").read_text(encoding="utf-8")
    section = text[text.index("### Beside the recipes users would otherwise pick") :]
    section = section[: section.index("\n### ")]
    tables: dict[str, list[list[str]]] = {}
    for m in re.finditer(r"^\| (rag-[a-z]+-train) \| coverage \|[^\n]*\n\|[-|]+\|\n((?:\|[^\n]*\n)+)", section, re.M):
        tables[m.group(1)] = [[c.strip() for c in ln.strip("|").split("|")] for ln in m.group(2).splitlines()]
    return tables


def test_the_recipe_tables_of_the_evaluation_doc_are_their_reports() -> None:
    """Every number of docs/evaluation.md's recipe tables is its set's report, row by row (coverage, whole answers,
    context tokens, duplicate rate, chunks stuffed, p50 latency, coverage / es_rag)."""
    tables = _recipe_tables()
    assert set(tables) == {"rag-en-train", "rag-ja-train"}
    for name, rows in tables.items():
        report = json.loads((ROOT / f"reports/{name}/result.json").read_text(encoding="utf-8"))["recipes"]
        assert len(rows) == len(RECIPE_ROWS), name
        for key, cells in zip(RECIPE_ROWS, rows, strict=True):
            got = report["rows"][key]
            numbers = [c.strip("*") for c in cells[1:]]
            ratio = "1" if key == "es_rag" else f"{report['ratio_to_es_rag'][key]['answer_coverage']:.3f}"
            expected = [
                f"{got['answer_coverage']:.4f}",
                f"{got['answer_whole']:.4f}",
                f"{round(got['context_tokens'])}",
                f"{got['duplicate_token_rate']:.4f}",
                f"{got['chunks_stuffed']:.1f}",
                f"{got['latency_p50_ms']:.1f}",
                ratio,
            ]
            assert numbers == expected, (name, key)


def test_the_coverage_tables_of_the_evaluation_doc_are_their_reports() -> None:
    """docs/evaluation.md's "With the product defaults" table (coverage per stage, whole answers, tokens, duplicates)
    and its budget curve are the two reports."""
    text = (ROOT / "docs/evaluation.md").read_text(encoding="utf-8")
    section = text[text.index("### With the product defaults, 1,500 tokens") : text.index("At 3,000 tokens")]
    reports = {n: json.loads((ROOT / f"reports/{n}/result.json").read_text(encoding="utf-8")) for n in NAMES}
    for name, report in reports.items():
        o = report["overall"]
        by = o["coverage_by_stage"]
        cells = [f"{by[s]['coverage']:.4f}" for s in ("retrieved", "reranked", "selected")]
        cells += [f"**{o['answer_coverage']:.4f}**", f"{o['answer_whole']:.4f}", f"{round(o['context_tokens'])}"]
        cells.append(f"{o['duplicate_token_rate']:.4f}")
        assert re.search(rf"^\| {name} \([^)]*\) \| " + re.escape(" | ".join(cells)) + r" \|$", section, re.M), name
    for point in zip(*(r["budget_curve"] for r in reports.values()), strict=True):
        budget = point[0]["budget"]
        cells = [f"{budget:,}"]
        for p in point:
            cells += [f"{p['answer_coverage']:.4f}", f"{p['answer_whole']:.4f}", f"{round(p['context_tokens'])}"]
        assert f"| {' | '.join(cells)} |" in section, budget


def test_the_reranker_coverage_table_is_its_report() -> None:
    """docs/reranker.md's answer-coverage table (issue 42): each row's coverage and context tokens are the report's,
    and the shipped fusion file holds the row marked as the default."""
    doc = (ROOT / "docs" / "reranker.md").read_text(encoding="utf-8")
    report = json.loads((ROOT / "reports" / "rag-en-train-reranker" / "result.json").read_text(encoding="utf-8"))
    methods, weights, fused = report["runs"]
    measured = {"no reranker": fused["overall"]}
    for v in methods["variants"][1:]:
        measured[v["changes"]["rerank_fusion"]] = v["overall"]
    measured["interpolate, weight 0.5"] = methods["variants"][3]["overall"]
    for v in weights["variants"][1:]:
        measured[f"interpolate, weight {v['changes']['rerank_fusion_weight']}"] = v["overall"]
    labels = {
        "no reranker": "no reranker: the fused order",
        "replace": "shipped model, `replace`",
        "rrf": "shipped model, `rrf`",
        **{k: f"shipped model, `interpolate`, weight {k.split()[-1]}" for k in measured if "weight" in k},
    }
    for key, label in labels.items():
        row = next(line for line in doc.splitlines() if line.startswith("| ") and label in line)
        cells = [c.strip(" *") for c in row.split("|")[1:-1]]
        assert float(cells[1]) == measured[key]["answer_coverage"], (key, row)
        assert abs(float(cells[2]) - measured[key]["context_tokens"]) < 1, (key, row)
    shipped = json.loads((ROOT / "es_rag" / "models" / "reranker-en" / "es_rag_fusion.json").read_text())
    default_row = next(line for line in doc.splitlines() if "(the default, `es_rag_fusion.json`)" in line)
    assert f"`{shipped['method']}`, weight {shipped['weight']}" in default_row


def test_the_no_answer_gate_table_is_its_report() -> None:
    """docs/reranker.md's no-answer table (issue 42): precision, recall, each kind's, answerable questions emptied,
    coverage and tokens of every measured row are reports/no-answer-reranker/result.json's."""
    doc = (ROOT / "docs" / "reranker.md").read_text(encoding="utf-8")
    report = json.loads((ROOT / "reports" / "no-answer-reranker" / "result.json").read_text(encoding="utf-8"))
    ce = report["cross_encoder_gate"]
    variants = {next(iter(v["changes"].items())): v["overall"] for v in ce["variants"] if v["changes"]}
    rows = {
        "cross-encoder threshold, verdict only": ce["overall"],
        "the same, cliff off": variants[("gate_cliff", None)],
        "the same, threshold on every hit": variants[("gate_threshold_scope", "hit")],
        "dense floor (`calibrate --gate-floor`": report["dense_floor_gate"]["overall"],
    }
    none = variants[("rerank_calibration", "none")]
    line = next(x for x in doc.splitlines() if x.startswith("| none: the shipped model as it ships"))
    assert f"| {none['answer_coverage']:.4f} | {round(none['context_tokens'])} |" in line
    for label, o in rows.items():
        line = next(x for x in doc.splitlines() if x.startswith("| ") and label in x)
        cells = [c.strip(" *") for c in line.split("|")[1:-1]]
        na = o["no_answer"]
        kinds = na["by_category"]
        assert (float(cells[1]), float(cells[2])) == (round(na["precision"], 3), round(na["recall"], 3)), label
        for cell, kind in ((cells[3], "no-answer"), (cells[4], "no-answer-paragraph")):
            assert cell == f"{kinds[kind]['precision']:.3f} / {kinds[kind]['recall']:.3f}", (label, kind)
        assert cells[5].startswith(f"{na['abstained_wrongly']} of "), label
        assert (float(cells[6]), round(float(cells[7]))) == (o["answer_coverage"], round(o["context_tokens"])), label
    probe = report["probe"]["report"]["combined"]
    line = next(x for x in doc.splitlines() if x.startswith("| logistic of log(cross-encoder)"))
    cells = [c.strip(" *") for c in line.split("|")[1:-1]]
    assert (float(cells[1]), float(cells[2])) == (probe["test_precision"], probe["test_recall"])
    assert cells[5] == probe["answerable_emptied"]


def test_the_no_answer_rag_en_train_table_is_its_report() -> None:
    """docs/reranker.md's rag-en-train rows of the calibrated model (issue 42) are the report's ``rag_en_train``."""
    doc = (
        (ROOT / "docs" / "reranker.md")
        .read_text(encoding="utf-8")
        .split("The same calibration on all of rag-en-train")[1]
    )
    run = json.loads((ROOT / "reports" / "no-answer-reranker" / "result.json").read_text(encoding="utf-8"))[
        "rag_en_train"
    ]
    variants = {next(iter(v["changes"].items())): v["overall"] for v in run["variants"]}
    rows = {
        "the shipped model as it ships (no calibration file": variants[("rerank_calibration", "none")],
        f"cliff 0.3: {run['abstained']} of 1,500 questions abstained on": run["overall"],
        "| the same, cliff off |": variants[("gate_cliff", None)],
        "| the same, threshold on every hit |": variants[("gate_threshold_scope", "hit")],
        "| the same, `rerank_k` 20": variants[("rerank_k", 20)],
    }
    for label, o in rows.items():
        line = next(x for x in doc.splitlines() if x.startswith("| ") and label in x)
        cells = [c.strip() for c in line.split("|")[1:-1]]
        assert float(cells[1]) == o["answer_coverage"], label
        assert float(cells[2]) == o["coverage_by_stage"]["reranked"], label
        assert int(cells[3]) == round(o["context_tokens"]), label
