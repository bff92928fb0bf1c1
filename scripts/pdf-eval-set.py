"""Make a PDF version of a Markdown evaluation set, with its gold answer spans mapped into the PDFs' extracted text.

Usage::

    python scripts/pdf-eval-set.py SRC_DIR OUT_DIR [--limit N] [--font-dir DIR]

``SRC_DIR`` holds ``docs/*.md`` and ``golden.jsonl`` (es_rag's golden format: ``spans`` are ``[start, end)`` offsets
into the Markdown file's text); for example ``shared/eval/rag-en-train``. The script:

1. Renders each ``docs/X.md`` to ``OUT_DIR/docs/X.pdf`` with reportlab (:mod:`pdf_eval_set.render`): the Markdown is
   parsed with markdown-it-py (``MarkdownIt("commonmark").enable("table")``, as es_rag parses it); headings become
   larger bold paragraphs and one outline entry (bookmark) each, at its level and position; paragraphs are body text
   (10.5 pt on A4, 2.5 cm margins, ragged right, no hyphenation, no page furniture); list items are bulleted or
   numbered paragraphs; tables are reportlab Tables; code is preformatted monospace; emphasis is oblique or bold.
   Fonts: DejaVu (TTF, embedded and subset), with reportlab's CID fonts for Chinese, Japanese kana and Korean
   characters that DejaVu lacks; Helvetica, with a warning, only when no DejaVu font is found. Right-to-left runs
   (Hebrew, Arabic) are drawn in visual order, as PDF writers draw them. The PDF's ``Title`` is the article's title
   (its first ``#`` heading). The bytes are the same on every run (reportlab ``invariant=1``).
2. Extracts each PDF with :func:`es_rag.ingest.pdf.extract_pdf` and maps every gold span from Markdown offsets to
   offsets into ``PdfText.text`` (the source text es_rag's PDF chunks index), with :mod:`pdf_eval_set.align`. Two
   character alignments are composed, both over non-whitespace characters: the Markdown source of each block against
   the text the script drew for it (Markdown syntax, such as ``#``, ``*``, escapes and pipes, has no counterpart
   there), then the drawn text against the PDF's text (located block by block; ``difflib.SequenceMatcher`` where
   they differ). A span maps to the PDF range its characters align with, and is verified: the PDF range's text must
   equal the Markdown span's text with whitespace runs collapsed (``exact``), or with the Markdown syntax characters
   the span covers left out (``markdown-syntax``), or with invisible format characters (U+200B..U+200F, ...) left
   out (``format-chars``). A span whose text is elsewhere near its aligned range is moved there (``relocated``); one
   whose characters the extractor returns in another order (right-to-left text) keeps the range those characters
   span (``reordered``); one that is located but whose text differs is kept (``differs``, listed in ``MAPPING.md``);
   one with no aligned character is left out (``unlocated``), and a question left without spans is left out.
3. Writes ``OUT_DIR/golden.jsonl`` (``X.md`` renamed ``X.pdf`` in ``gold`` and ``source_id``, offsets into the
   extracted text), copies ``SOURCE.md`` and the ``LICENSE*`` files, and writes ``OUT_DIR/MAPPING.md`` with the
   counts (documents, pages, questions, spans per verification result) and every span that is not ``exact``.

``--limit N`` takes the first N documents, documents with questions first (in the order golden.jsonl first
names them), then the others by name, and only the questions whose gold documents are all among them. One
progress line per document; the summary is printed at the end. Needs reportlab (a dev dependency).

This file holds the set (which documents and questions, the golden file, ``MAPPING.md``) and the command line;
``scripts/pdf_eval_set/`` holds the rendering (``render.py``) and the span mapping (``align.py``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent  # scripts/: pdf_eval_set is found there, however this file is loaded
for _path in (ROOT, HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from pdf_eval_set.align import EXACT, RESULTS, Mapped, align, map_span  # noqa: E402
from pdf_eval_set.render import doc_title, load_fonts, render_markdown  # noqa: E402

from es_rag.ingest.pdf import PdfText, extract_pdf  # noqa: E402


@dataclass
class DocReport:
    name: str
    pages: int
    chars: int
    headings: int
    headings_found: int
    spans: int
    results: Counter[str]
    missing_glyphs: str
    lost: str
    warnings: tuple[str, ...]
    seconds: float


def read_golden(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def order_docs(docs: Sequence[str], questions: Sequence[dict[str, Any]]) -> list[str]:
    """Documents with questions first, in the order the golden file first names them, then the others by name."""
    first: dict[str, int] = {}
    for q in questions:
        for name in [*q.get("gold", []), *(s["source_id"] for s in q.get("spans", []))]:
            first.setdefault(name, len(first))
    known = set(docs)
    asked = sorted((n for n in first if n in known), key=first.__getitem__)
    return asked + sorted(n for n in docs if n not in first)


def pdf_name(name: str) -> str:
    return name[: -len(".md")] + ".pdf" if name.endswith(".md") else name + ".pdf"


def build(src: Path, out: Path, *, limit: int | None = None, font_dir: str | None = None) -> dict[str, Any]:
    """Render, extract and map (see the module doc); returns the summary written to MAPPING.md."""
    t0 = time.perf_counter()
    fonts = load_fonts(font_dir)
    questions = read_golden(src / "golden.jsonl")
    names = sorted(p.name for p in (src / "docs").glob("*.md"))
    names = order_docs(names, questions)[: limit if limit is not None else None]
    chosen = set(names)
    questions = [
        q
        for q in questions
        if set(q.get("gold", [])) <= chosen and all(s["source_id"] in chosen for s in q.get("spans", []))
    ]
    by_doc: dict[str, list[tuple[int, int]]] = {}
    for qi, q in enumerate(questions):
        for si, s in enumerate(q.get("spans", [])):
            by_doc.setdefault(s["source_id"], []).append((qi, si))
    (out / "docs").mkdir(parents=True, exist_ok=True)
    mapped: dict[tuple[int, int], Mapped] = {}
    reports: list[DocReport] = []
    for n, name in enumerate(names, 1):
        started = time.perf_counter()
        md_text = (src / "docs" / name).read_text(encoding="utf-8")
        title = doc_title(md_text, Path(name).stem)
        rendered = render_markdown(md_text, title=title, fonts=fonts)
        target = out / "docs" / pdf_name(name)
        target.write_bytes(rendered.pdf)
        pdf: PdfText = extract_pdf(rendered.pdf, name=f"docs/{pdf_name(name)}")
        al = align(md_text, rendered.blocks, pdf.text)
        results: Counter[str] = Counter()
        for qi, si in by_doc.get(name, []):
            s = questions[qi]["spans"][si]
            m = map_span(al, int(s["start"]), int(s["end"]))
            mapped[(qi, si)] = m
            results[m.result] += 1
        titles = [t for _, t in rendered.headings]
        found = sum(1 for h in pdf.headings if h.found)
        report = DocReport(
            name=name,
            pages=len(pdf.pages),
            chars=len(pdf.text),
            headings=len(titles),
            headings_found=found if [h.title for h in pdf.headings] == titles else -1,
            spans=sum(results.values()),
            results=results,
            missing_glyphs="".join(sorted(rendered.missing)),
            lost=al.lost,
            warnings=pdf.warnings,
            seconds=time.perf_counter() - started,
        )
        reports.append(report)
        bad = sum(v for k, v in results.items() if k not in EXACT)
        print(
            f"[{n}/{len(names)}] {name}: {report.pages} pages, {report.chars} chars, {report.spans} spans"
            f" ({bad} not exact), {report.seconds:.1f}s",
            flush=True,
        )
    golden: list[dict[str, Any]] = []
    dropped_questions = 0
    for qi, q in enumerate(questions):
        spans = []
        for si, s in enumerate(q.get("spans", [])):
            m = mapped[(qi, si)]
            if m.result != "unlocated":
                spans.append({**s, "source_id": pdf_name(s["source_id"]), "start": m.start, "end": m.end})
        if not spans and q.get("spans"):
            dropped_questions += 1
            continue
        golden.append({**q, "gold": [pdf_name(g) for g in q.get("gold", [])], "spans": spans})
    with (out / "golden.jsonl").open("w", encoding="utf-8") as f:
        for q in golden:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    for extra in sorted([*src.glob("SOURCE.md"), *src.glob("LICENSE*")]):
        shutil.copyfile(extra, out / extra.name)
    totals: Counter[str] = Counter()
    for r in reports:
        totals.update(r.results)
    summary: dict[str, Any] = {
        "documents": len(reports),
        "pages": sum(r.pages for r in reports),
        "questions": len(questions),
        "questions_written": len(golden),
        "questions_dropped": dropped_questions,
        "spans": sum(totals.values()),
        "results": {k: totals[k] for k in RESULTS},
        "mapped_exact": sum(totals[k] for k in EXACT),
        "kept_inexact": sum(totals[k] for k in RESULTS if k not in EXACT and k != "unlocated"),
        "unmapped": totals["unlocated"],
        "headings": sum(r.headings for r in reports),
        "headings_found": sum(max(r.headings_found, 0) for r in reports),
        "outline_mismatch": [r.name for r in reports if r.headings_found < 0],
        "font_warning": fonts.warning,
    }
    (out / "MAPPING.md").write_text(mapping_md(src, summary, reports, questions, mapped), encoding="utf-8")
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    return summary


def mapping_md(
    src: Path,
    summary: dict[str, Any],
    reports: Sequence[DocReport],
    questions: Sequence[dict[str, Any]],
    mapped: dict[tuple[int, int], Mapped],
) -> str:
    """MAPPING.md: how the set was made and what mapped (no timings, so the file is the same on every run)."""
    lines = [
        f"# PDF version of `{src.name}`: rendering and span mapping",
        "",
        "Made by `scripts/pdf-eval-set.py` (see its module doc): every `docs/X.md` of the source set rendered to "
        "`docs/X.pdf` with reportlab (A4, 10.5 pt DejaVu Sans, headings as bold paragraphs and outline entries, "
        "no hyphenation, no page furniture), then extracted with `es_rag.ingest.pdf.extract_pdf`; `golden.jsonl` "
        "gives every gold span as `[start, end)` offsets into the extracted text (`PdfText.text`), `source_id` and "
        "`gold` renamed `X.md` -> `X.pdf`. `SOURCE.md` describes the Markdown set the PDFs were made from; its "
        "`answers.jsonl` (offsets into the Markdown paragraphs) is not carried over.",
        "",
        "## Counts",
        "",
        "| | value |",
        "| --- | --- |",
        f"| documents | {summary['documents']} |",
        f"| pages | {summary['pages']} |",
        f"| questions (of these documents) | {summary['questions']} |",
        f"| questions written | {summary['questions_written']} |",
        f"| questions left out (no span located) | {summary['questions_dropped']} |",
        f"| spans | {summary['spans']} |",
        f"| spans mapped exactly | {summary['mapped_exact']} |",
        f"| spans kept, text not exact | {summary['kept_inexact']} |",
        f"| spans not located (left out) | {summary['unmapped']} |",
        f"| headings (outline entries) | {summary['headings']} |",
        f"| headings placed on their title by extract_pdf | {summary['headings_found']} |",
        "",
        "Verification results (a span's PDF text against its Markdown text, whitespace runs collapsed):",
        "",
        "| result | spans | meaning |",
        "| --- | --- | --- |",
    ]
    meaning = {
        "exact": "the same text",
        "markdown-syntax": "the same once the Markdown syntax characters in the span (not drawn) are left out",
        "format-chars": "the same once invisible format characters (U+200B..U+200F, ...) are left out",
        "relocated": "the text found near the aligned range, and the span moved there",
        "reordered": "the same characters in another order (right-to-left text): the range they take",
        "differs": "located, text differs (kept; listed below)",
        "unlocated": "no character aligned (left out of golden.jsonl)",
    }
    for k in RESULTS:
        lines.append(f"| {k} | {summary['results'][k]} | {meaning[k]} |")
    if summary["font_warning"]:
        lines += ["", f"Font warning: {summary['font_warning']}"]
    if summary["outline_mismatch"]:
        lines += ["", "Outline titles that extract_pdf did not give back: " + ", ".join(summary["outline_mismatch"])]
    inexact = [(qi, si, m) for (qi, si), m in sorted(mapped.items()) if m.result not in EXACT]
    if inexact:
        lines += ["", "## Spans not mapped exactly", "", "| question | source | result | Markdown | PDF text |"]
        lines.append("| --- | --- | --- | --- | --- |")
        for qi, si, m in inexact:
            q = questions[qi]
            source = q["spans"][si]["source_id"]
            lines.append(f"| {q['id']} | {source} | {m.result} | {_cell(m.want)} | {_cell(m.got)} |")
    lines += ["", "## Documents", "", "| document | pages | characters | headings | spans | not exact | notes |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for r in reports:
        notes = []
        if r.missing_glyphs:
            notes.append(f"no glyph for {_cell(r.missing_glyphs)}")
        if r.lost:
            notes.append(f"drawn but not extracted as drawn: {_cell(r.lost[:60])}")
        notes.extend(_cell(w) for w in r.warnings)
        bad = sum(v for k, v in r.results.items() if k not in EXACT)
        lines.append(
            f"| {pdf_name(r.name)} | {r.pages} | {r.chars} | {r.headings} | {r.spans} | {bad} | {'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="the Markdown set (docs/*.md, golden.jsonl)")
    parser.add_argument("out", type=Path, help="where the PDF set goes")
    parser.add_argument("--limit", type=int, default=None, help="first N documents (those with questions first)")
    parser.add_argument("--font-dir", default=None, help="a folder holding DejaVuSans.ttf (default: the usual ones)")
    args = parser.parse_args(argv)
    summary = build(args.src, args.out, limit=args.limit, font_dir=args.font_dir)
    results = ", ".join(f"{k} {v}" for k, v in summary["results"].items() if v)
    print(
        f"{summary['documents']} documents, {summary['pages']} pages, {summary['questions_written']} of "
        f"{summary['questions']} questions written; spans: {summary['spans']} ({results}); exact "
        f"{summary['mapped_exact']}, kept inexact {summary['kept_inexact']}, unmapped {summary['unmapped']}; "
        f"headings {summary['headings_found']}/{summary['headings']} placed; {summary['seconds']} s -> {args.out}"
    )
    return summary


if __name__ == "__main__":
    main()
