"""``scripts/pdf-eval-set.py``: Markdown articles rendered to PDF with reportlab, and gold spans mapped from Markdown
offsets to offsets into the text :func:`es_rag.ingest.pdf.extract_pdf` gives; every mapped span reads the answer."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from es_rag.ingest.pdf import PAGE_BREAK, extract_pdf

pytest.importorskip("reportlab")

ROOT = Path(__file__).resolve().parents[2]
EVAL_ROOT = Path(os.environ.get("ES_RAG_EVAL_DIR") or ROOT.parent / "shared" / "eval")
REAL_SET = EVAL_ROOT / "rag-en-train"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    # not "pdf_eval_set": that is the package (scripts/pdf_eval_set/) the script imports its rendering and mapping from
    spec = importlib.util.spec_from_file_location("pdf_eval_set_script", ROOT / "scripts" / "pdf-eval-set.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def render(script: ModuleType) -> ModuleType:
    """``scripts/pdf_eval_set/render.py``, importable once the script has put ``scripts/`` on ``sys.path``."""
    return importlib.import_module("pdf_eval_set.render")


FILLER = " ".join(f"Filler sentence number {n} keeps the caf\u00e9 open \u2014 or not." for n in range(12))
GUIDE = "\n".join(
    [
        "# Caf\u00e9 guide",
        "",
        "The caf\u00e9 serves \u201cflat whites\u201d \u2014 and *very* strong espresso since 1998.",
        "",
        "## Opening hours",
        "",
        "- Monday to Friday: 7 am to 6 pm",
        "- Saturday: 8 am to 2 pm",
        "  1. first shift",
        "  2. second shift",
        "",
        "| Drink | Price |",
        "| --- | --- |",
        "| Espresso | 2.10 EUR |",
        "| Latte | 3.40 EUR |",
        "",
        "### Japanese menu",
        "",
        "The menu calls it \u65e5\u672c\u8a9e no menyu, and the owner Liem (\u6797) wrote it.",
        "",
        "> Quoted: the barista says \u201cno sugar\u201d.",
        "",
        "```",
        "order = brew(kind='espresso', shots=2)",
        "```",
        "",
        "See [the website](https://example.org) for more.",
        "",
    ]
)
HISTORY = "# History of the caf\u00e9\n\n" + "\n\n".join(FILLER for _ in range(14)) + "\n\nThe end came in 2021.\n"
ANSWERS = {  # document -> answers (unique substrings of its Markdown)
    "Cafe_guide.md": [
        "\u201cflat whites\u201d \u2014 and",
        "since 1998",
        "7 am to 6 pm",
        "second shift",
        "3.40 EUR",
        "\u65e5\u672c\u8a9e no menyu",
        "(\u6797)",
        "\u201cno sugar\u201d",
        "brew(kind='espresso', shots=2)",
        "the website",
        "Opening hours",
    ],
    "History.md": ["The end came in 2021."],
}


def make_set(root: Path) -> dict[str, str]:
    docs = {"Cafe_guide.md": GUIDE, "History.md": HISTORY}
    (root / "docs").mkdir(parents=True)
    for name, text in docs.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    questions: list[dict[str, Any]] = []
    for name, answers in ANSWERS.items():
        text = docs[name]
        for n, answer in enumerate(answers):
            start = text.index(answer)
            assert text.count(answer) == 1
            span = {"source_id": name, "start": start, "end": start + len(answer)}
            questions.append(
                {"id": f"{name}-{n}", "question": "?", "gold": [name], "spans": [span], "category": "answerable"}
            )
    # a span over most of the long document: across paragraphs and page breaks
    start = HISTORY.index("Filler sentence number 3 ")
    end = HISTORY.index("The end came")
    span = {"source_id": "History.md", "start": start, "end": end}
    questions.append({"id": "long", "question": "?", "gold": ["History.md"], "spans": [span], "category": "answerable"})
    # Markdown syntax inside a span: the PDF shows the emphasis, not its asterisks
    start = GUIDE.index("*very* strong")
    span = {"source_id": "Cafe_guide.md", "start": start, "end": start + len("*very* strong")}
    questions.append({"id": "emph", "question": "?", "gold": ["Cafe_guide.md"], "spans": [span], "category": "a"})
    with (root / "golden.jsonl").open("w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    (root / "SOURCE.md").write_text("# synthetic\n", encoding="utf-8")
    (root / "LICENSE-X.txt").write_text("licence\n", encoding="utf-8")
    return docs


def collapse(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def built(script: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("pdfset")
    make_set(root / "src")
    summary = script.main([str(root / "src"), str(root / "out")])
    return root / "src", root / "out", summary


def test_every_span_reads_its_answer_in_the_extracted_text(built: tuple[Path, Path, dict[str, Any]]) -> None:
    src, out, summary = built
    before = [json.loads(line) for line in (src / "golden.jsonl").read_text(encoding="utf-8").splitlines()]
    after = [json.loads(line) for line in (out / "golden.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [q["id"] for q in after] == [q["id"] for q in before]
    assert summary["unmapped"] == 0 and summary["kept_inexact"] == 0
    assert summary["results"]["markdown-syntax"] == 1 and summary["mapped_exact"] == summary["spans"]
    texts = {}
    for old, new in zip(before, after, strict=True):
        assert new["gold"] == [g.replace(".md", ".pdf") for g in old["gold"]]
        (o,), (n,) = old["spans"], new["spans"]
        assert n["source_id"] == o["source_id"].replace(".md", ".pdf")
        if n["source_id"] not in texts:
            texts[n["source_id"]] = extract_pdf((out / "docs" / n["source_id"]).read_bytes(), name=n["source_id"]).text
        md = (src / "docs" / o["source_id"]).read_text(encoding="utf-8")
        got = collapse(texts[n["source_id"]][n["start"] : n["end"]])
        want = collapse(md[o["start"] : o["end"]])
        assert got == (want.replace("*", "") if old["id"] == "emph" else want), old["id"]
    long = next(q for q in after if q["id"] == "long")["spans"][0]
    assert PAGE_BREAK in texts["History.pdf"][long["start"] : long["end"]]  # the long span crosses pages
    assert summary["documents"] == 2 and summary["pages"] >= 3
    assert {p.name for p in out.iterdir()} >= {"docs", "golden.jsonl", "MAPPING.md", "SOURCE.md", "LICENSE-X.txt"}
    assert "| spans not located (left out) | 0 |" in (out / "MAPPING.md").read_text(encoding="utf-8")


def test_the_outline_gives_the_headings_and_the_title(built: tuple[Path, Path, dict[str, Any]]) -> None:
    _, out, _ = built
    pdf = extract_pdf((out / "docs" / "Cafe_guide.pdf").read_bytes(), name="Cafe_guide.pdf")
    assert pdf.heading_source == "outline" and pdf.title == "Caf\u00e9 guide"
    assert [(h.level, h.title) for h in pdf.headings] == [
        (1, "Caf\u00e9 guide"),
        (2, "Opening hours"),
        (3, "Japanese menu"),
    ]
    assert all(h.found and pdf.text[h.offset :].startswith(h.title) for h in pdf.headings)
    assert "\u2022 Monday to Friday" in pdf.text and "2. second shift" in pdf.text  # bullets and numbers drawn
    history = extract_pdf((out / "docs" / "History.pdf").read_bytes(), name="History.pdf")
    assert [h.title for h in history.headings] == ["History of the caf\u00e9"] and len(history.pages) >= 2


def test_the_same_bytes_every_run(script: ModuleType, built: tuple[Path, Path, dict[str, Any]], tmp_path: Path) -> None:
    src, out, _ = built
    summary = script.main([str(src), str(tmp_path / "again"), "--limit", "1"])
    assert [p.name for p in (tmp_path / "again" / "docs").iterdir()] == ["Cafe_guide.pdf"]  # first in golden.jsonl
    again = (tmp_path / "again" / "docs" / "Cafe_guide.pdf").read_bytes()
    assert again == (out / "docs" / "Cafe_guide.pdf").read_bytes()
    assert summary["questions"] == 12  # only the questions on Cafe_guide.md


def test_without_dejavu_helvetica_draws_with_a_warning(render: ModuleType, tmp_path: Path) -> None:
    fonts = render.load_fonts(str(tmp_path))
    assert fonts.regular == "Helvetica" and "no DejaVu" in fonts.warning
    assert not fonts.has("Helvetica", "\u0131") and fonts.has("Helvetica", "\u00e9")
    assert render.load_fonts().regular != "Helvetica"


def test_right_to_left_runs_are_drawn_in_visual_order_and_lone_cjk_characters_get_a_neighbour(
    render: ModuleType,
) -> None:
    assert render.visual_order("ben adam (\u05d1\u05df \u05d0\u05d3\u05dd) x") == (
        "ben adam (\u05dd\u05d3\u05d0 \u05df\u05d1) x"
    )
    assert render.visual_order("plain text") == "plain text"
    fonts = render.load_fonts()
    missing: Counter[str] = Counter()
    markup = render.font_markup("Liem (\u6797) & co", fonts.regular, fonts, missing)
    assert '<font name="STSong-Light">\u6797)</font>' in markup and "&amp;" in markup and not missing


@pytest.mark.skipif(not REAL_SET.exists(), reason=f"rag-en-train is not on this machine ({REAL_SET})")
def test_rag_en_train_first_two_documents_map_every_span(script: ModuleType, tmp_path: Path) -> None:
    summary = script.main([str(REAL_SET), str(tmp_path / "out"), "--limit", "2"])
    assert summary["documents"] == 2 and summary["questions"] > 0 and summary["spans"] > 0
    assert summary["unmapped"] == 0 and summary["mapped_exact"] == summary["spans"]
