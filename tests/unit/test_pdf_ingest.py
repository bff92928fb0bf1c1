"""PDF sources end to end (issue 30): the extracted text is the source text offsets index, every chunk carries its
pages, headings come from the outline, a scanned page is reported once, and the pages reach the index (embedded and
the strict double), the citations (``S1, p. 2``), ``chunk --json`` and ``sources``. PDFs are written by hand
(tests/support/pdfs.py); two tests read real Debian manuals when this machine has them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.chunking import make_chunker
from es_rag.chunking.paged import PagedLayout, page_span
from es_rag.cli import main
from es_rag.client import RagClient
from es_rag.ingest import IngestReport, chunk_documents, load_files
from es_rag.ingest.pdf import PAGE_BREAK
from es_rag.records import Hit, page_label
from es_rag.settings import Settings
from es_rag.stages.pack import pack_context
from tests.support.pdfs import Bookmark, Line, Page, build_pdf

MANUAL = [
    Page(
        [
            Line("1 Installing", 18),
            "Download the archive and unpack it into a folder of your choice.",
            "Run the installer once as an administrator.",
        ]
    ),
    Page(
        [
            Line("2 Configuration", 18),
            "The configuration file lives in the home folder.",
            Line("2.1 Proxy settings", 14),
            "Set the proxy host and the proxy port before the first sync.",
        ]
    ),
    Page(
        [
            "The proxy password is stored in the keyring, never in the file.",
            Line("3 Troubleshooting", 18),
            "Error E1042 means the sync token expired: sign in again.",
        ]
    ),
    Page(scan=True),
]
OUTLINE = [
    Bookmark("1 Installing", 1, top=MANUAL[0].baselines()[0] + 18),
    Bookmark("2 Configuration", 2, top=MANUAL[1].baselines()[0] + 18),
    Bookmark("2.1 Proxy settings", 2, level=2, top=MANUAL[1].baselines()[2] + 14),
    Bookmark("3 Troubleshooting", 3, top=MANUAL[2].baselines()[1] + 18),
]
REAL_PDFS = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),  # Debian libtasn1-doc: texinfo manual, pdfTeX
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),  # Debian shared-mime-info: DocBook spec
]


@pytest.fixture
def manual_dir(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "manual.pdf").write_bytes(build_pdf(MANUAL, outline=OUTLINE, title="Sync Client Manual"))
    (root / "notes.md").write_text("# Notes\n\nThe desktop client syncs every five minutes.\n", encoding="utf-8")
    return root


def _settings(tiny_bi_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=None, candidate_k=10, num_candidates=20,
        rerank_k=8, context_k=4, chunk_max_tokens=40, chunk_overlap=0,
    )  # fmt: skip


def test_page_span_and_label() -> None:
    pages = (0, 10, 25)
    assert page_span(pages, 0, 5) == (1, 1)
    assert page_span(pages, 8, 12) == (1, 2)
    assert page_span(pages, 10, 25) == (2, 2)  # the end is exclusive
    assert page_span(pages, 26, 26) == (3, 3)
    assert [page_label(None, None), page_label(3, 3), page_label(3, 4)] == ["", "p. 3", "pp. 3-4"]


def test_sections_nest_by_heading_level_and_start_at_the_heading_line() -> None:
    text = "Preface text.\n\n1 Intro\nIntro body.\n2 Usage\nUsage body.\n2.1 Options\nOptions body.\n3 End\nEnd body."
    headings = [
        (text.index("1 Intro"), 1, "1 Intro"),
        (text.index("Usage") , 1, "2 Usage"),  # an offset inside its line: the section starts at the line
        (text.index("2.1 Options"), 2, "2.1 Options"),
        (text.index("3 End"), 1, "3 End"),
    ]  # fmt: skip
    layout = PagedLayout(text, headings)
    got = [(s.heading_path, text[s.start : s.end]) for s in layout.sections]
    assert got == [
        ((), "Preface text."),
        (("1 Intro",), "1 Intro\nIntro body."),
        (("2 Usage",), "2 Usage\nUsage body."),
        (("2 Usage", "2.1 Options"), "2.1 Options\nOptions body."),
        (("3 End",), "3 End\nEnd body."),
    ]


def test_a_block_splits_into_paragraphs_by_short_last_lines_then_sentences_then_lines() -> None:
    para = "This line of a paragraph runs all the way across the page width\nand this one ends it.\n"
    table = "Name Size\nalpha 10\nbeta 20"
    text = para + para + table
    layout = PagedLayout(text)
    (block,) = layout.sections[0].blocks
    parts = layout.parts(*block)
    assert [text[s:e] for s, e in parts] == [para.strip(), para.strip(), table]
    assert [text[s:e] for s, e in layout.parts(*parts[2])] == ["Name Size", "alpha 10", "beta 20"]


def test_pdf_chunks_round_trip_their_offsets_and_carry_pages_and_headings(
    manual_dir: Path, minilm_tokenizer: object
) -> None:
    report = IngestReport()
    docs = load_files([manual_dir], tenant_id="acme", acl=["public"], report=report)
    pdf = next(d for d in docs if d.source_id == "manual.pdf")
    assert pdf.fmt == "pdf" and pdf.title == "Sync Client Manual" and len(pdf.pages) == 4
    assert PAGE_BREAK in pdf.text and [h[2] for h in pdf.headings][:2] == ["1 Installing", "2 Configuration"]
    # the scanned page is named once, as a warning of the document
    (warning,) = [w for w in report.warnings if w["document"].endswith("manual.pdf")]
    assert "page 4" in warning["reason"] and "no text layer" in warning["reason"]
    chunker = make_chunker(minilm_tokenizer, max_tokens=24, overlap=0)  # type: ignore[arg-type]
    children, parents = chunk_documents([pdf], chunker, report)
    assert children and parents
    for c in [*children, *parents]:
        assert pdf.text[c.start_offset : c.end_offset] == c.text
        assert c.page_start is not None and c.page_end is not None and c.page_start <= c.page_end
        first, last = pdf.text.count("\f", 0, c.start_offset) + 1, pdf.text.count("\f", 0, c.end_offset) + 1
        assert (c.page_start, c.page_end) == (first, last)
        assert c.title == "Sync Client Manual"
    by_text = {c.text: c for c in children}
    proxy = next(c for t, c in by_text.items() if "proxy port" in t)
    assert proxy.heading_path == ("2 Configuration", "2.1 Proxy settings") and proxy.page_start == 2
    keyring = next(c for t, c in by_text.items() if "keyring" in t)
    assert keyring.heading_path == ("2 Configuration", "2.1 Proxy settings") and keyring.page_start == 3
    e1042 = next(c for t, c in by_text.items() if "E1042" in t)
    assert e1042.heading_path == ("3 Troubleshooting",) and (e1042.page_start, e1042.page_end) == (3, 3)
    assert e1042.to_source()["page_start"] == 3 and e1042.to_source()["page_end"] == 3


def test_a_pdf_without_a_title_is_named_by_its_file_not_its_first_heading(
    tmp_path: Path, minilm_tokenizer: object
) -> None:
    (tmp_path / "guide.pdf").write_bytes(build_pdf(MANUAL[:1], outline=OUTLINE[:1]))
    (doc,) = load_files([tmp_path], tenant_id="acme", acl=[], report=IngestReport())
    chunks = make_chunker(minilm_tokenizer, max_tokens=50, overlap=0).chunk(  # type: ignore[arg-type]
        doc.text, source_id=doc.source_id, source_version="1", tenant_id="acme", acl=(), fmt="pdf", pages=doc.pages,
        headings=doc.headings, source_path=doc.source_path,
    )  # fmt: skip
    assert {c.title for c in chunks} == {"guide"}


def test_citations_name_the_page_and_the_context_shows_it(minilm_tokenizer: object) -> None:
    hits = [
        Hit(chunk_id="a", source_id="manual.pdf", text="Error E1042 means the sync token expired.", tenant_id="t",
            start_offset=300, end_offset=341, page_start=14, page_end=14, heading_path=("3 Troubleshooting",)),
        Hit(chunk_id="b", source_id="manual.pdf", text="Set the proxy host.", tenant_id="t", start_offset=100,
            end_offset=119, page_start=2, page_end=3),
        Hit(chunk_id="c", source_id="notes.md", text="The client syncs.", tenant_id="t", start_offset=0, end_offset=17),
    ]  # fmt: skip
    ctx = pack_context(hits, minilm_tokenizer, budget=1000)  # type: ignore[arg-type]
    assert "[S1] p. 14 § 3 Troubleshooting\nError E1042" in ctx.text
    assert "[S2] pp. 2-3\nSet the proxy host." in ctx.text and "[S3]\nThe client syncs." in ctx.text
    assert [c.label for c in ctx.citations] == ["S1, p. 14", "S2, pp. 2-3", "S3"]
    assert ctx.to_dict()["citations"][0]["page_start"] == 14 and ctx.to_dict()["citations"][0]["label"] == "S1, p. 14"


def test_citations_name_the_printed_page_labels() -> None:
    assert page_label(15, 15, "8", "8") == "p. 8" and page_label(3, 4, "iv", "1") == "pp. iv-1"
    assert page_label(3, 3, "A-3") == "p. A-3" and page_label(5, 6) == "pp. 5-6" and page_label(None, None, "x") == ""
    stored = {"chunk_id": "a", "source_id": "m.pdf", "page_start": 15, "page_label_start": "8"}
    hit = Hit.from_source(stored)  # one page: the end is the start, as for page_end
    assert (hit.page_start, hit.page_end, hit.page_label_start, hit.page_label_end) == (15, 15, "8", "8")
    assert Hit.from_source({"chunk_id": "a", "source_id": "m.pdf", "page_start": 2}).page_label_start is None


LABELS = [(0, "r", "", 1), (2, "D", "", 1), (3, "", "Scan-", 1)]
"""Roman front matter on pages 1-2, Arabic from page 3, and a prefix-only range on the scan (ISO 32000-1, 12.4.2)."""


def test_page_labels_reach_the_chunks_the_citations_and_search(tmp_path: Path, tiny_bi_encoder: Path) -> None:
    from es_rag.ingest.pdf import extract_pdf

    data = build_pdf(MANUAL, outline=OUTLINE, title="Sync Client Manual", page_labels=LABELS)
    # a range with a prefix and no style prints the prefix alone (12.4.2: "no numeric portion")
    assert extract_pdf(data, name="m.pdf").page_labels == ("i", "ii", "1", "Scan-")
    assert extract_pdf(build_pdf(MANUAL, outline=OUTLINE), name="m.pdf").page_labels == ()  # no labels
    same = [(0, "D", "", 1)]  # labels that only repeat the page numbers are no labels
    assert extract_pdf(build_pdf(MANUAL, outline=OUTLINE, page_labels=same), name="m.pdf").page_labels == ()
    root = tmp_path / "docs"
    root.mkdir()
    (root / "manual.pdf").write_bytes(data)
    with RagClient.open(tmp_path / "idx", _settings(tiny_bi_encoder)) as rag:
        assert rag.ingest([root], tenant="acme").failed == []
        result = rag.search("What does error E1042 mean?", tenant="acme")
        top = next(h for h in result.hits if "E1042" in h.text)
        assert (top.page_start, top.page_end, top.page_label_start, top.page_label_end) == (3, 3, "1", "1")
        cited = next(c for c in result.context.citations if c.chunk_id == top.chunk_id)
        assert cited.label.endswith(", p. 1") and cited.to_dict()["page_label_start"] == "1"
        assert "p. 1 " in result.context.text or "p. 1\n" in result.context.text
        first = (
            next(h for h in result.hits if h.page_start == 1) if any(h.page_start == 1 for h in result.hits) else None
        )
        assert first is None or first.page_label_start == "i"


def test_a_real_manual_is_cited_by_its_printed_page_numbers() -> None:
    """Debian's libtasn1 manual (texinfo, pdfTeX) labels its title pages ``T-1``/``T-2``, its contents ``i`` and its
    body from ``1``: the fourth PDF page prints ``1``."""
    from es_rag.ingest.pdf import extract_pdf

    path = REAL_PDFS[0]
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine (its Debian package is not installed)")
    pdf = extract_pdf(path.read_bytes(), name=path.name)
    assert pdf.page_labels[:5] == ("T-1", "T-2", "i", "1", "2") and len(pdf.page_labels) == len(pdf.pages)


def test_the_chunker_refuses_labels_that_do_not_match_the_pages(minilm_tokenizer: object) -> None:
    from es_rag.errors import InputError

    chunker = make_chunker(minilm_tokenizer, max_tokens=40, overlap=0)  # type: ignore[arg-type]
    text = "Page one.\n\n\fPage two.\n"
    kw = {"source_id": "m.pdf", "source_version": "1", "tenant_id": "t", "acl": (), "fmt": "pdf", "pages": (0, 13)}
    chunks = chunker.chunk(text, **kw, page_labels=("vii", "viii"))  # type: ignore[arg-type]
    assert {(c.page_start, c.page_label_start) for c in chunks if c.kind == "child"} <= {(1, "vii"), (2, "viii")}
    with pytest.raises(InputError, match="1 labels for 2 pages"):
        chunker.chunk(text, **kw, page_labels=("vii",))  # type: ignore[arg-type]


def test_ingest_search_chunk_and_sources_show_the_pages(
    manual_dir: Path, tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert (
        main(["ingest", str(manual_dir), "--tenant", "acme", *model, *idx, "--chunk-max-tokens", "40", "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["sources"] == 2 and report["failed"] == []
    assert any("manual.pdf" in w["document"] and "no text layer" in w["reason"] for w in report["warnings"])
    argv = [
        "search",
        "What does error E1042 mean?",
        "--tenant",
        "acme",
        *model,
        *idx,
        "--json",
        "--rerank-model",
        "none",
    ]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    top = next(h for h in result["hits"] if h["source_id"] == "manual.pdf" and "E1042" in h["text"])
    assert top["page_start"] == 3 and top["page_end"] == 3
    cited = [c for c in result["context"]["citations"] if c["source_id"] == "manual.pdf"]
    assert cited and all(c["label"] == f"{c['id']}, " + page_label(c["page_start"], c["page_end"]) for c in cited)
    assert main(["chunk", str(manual_dir / "manual.pdf"), "--json", "--embedding-model", str(tiny_bi_encoder)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["page_start"] >= 1 and r["page_end"] >= r["page_start"] for r in rows)
    assert main(["sources", "--tenant", "acme", "--json", *idx]) == 0
    pages = {s["source_id"]: s["pages"] for s in json.loads(capsys.readouterr().out)["sources"]}
    assert pages == {"manual.pdf": 3, "notes.md": None}  # page 4 is a scan: no chunk is on it
    assert main(["sources", "--tenant", "acme", *idx]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "pages" in table[0] and table[1].split()[:1] == ["manual.pdf"] and " 3 " in table[1]


def test_pages_on_the_strict_double_and_an_index_of_an_older_mapping(manual_dir: Path, tiny_bi_encoder: Path) -> None:
    """The chunk and parent mappings map ``page_start``/``page_end`` (asset version 13), the search ``_source``
    returns them, and the sources listing's ``max`` sub-aggregation gives the page count. ``setup`` over indices an
    older version created (strict mapping, no page fields) adds the two fields, so a PDF is not refused."""
    from tests.support.double.client import strict_backend

    settings = _settings(tiny_bi_encoder)
    backend, _, cluster = strict_backend(settings, setup=True)
    for name in (settings.chunk_index, settings.parent_index):  # as an asset-12 index: no page fields
        mapping = cluster.indices[name].mapping
        for field in ("page_start", "page_end", "page_label_start", "page_label_end"):
            del mapping.fields[field]
            del mapping.raw["properties"][field]
    backend.setup()
    with RagClient.from_elasticsearch(backend.client, settings) as rag:
        report = rag.ingest([manual_dir], tenant="acme")
        assert report.failed == [] and report.sources == 2
        result = rag.search("What does error E1042 mean?", tenant="acme")
        top = next(h for h in result.hits if "E1042" in h.text)
        assert (top.page_start, top.page_end) == (3, 3)
        pages = {s.source_id: s.pages for s in rag.sources("acme")}
        assert pages == {"manual.pdf": 3, "notes.md": None}


@pytest.mark.parametrize("path", REAL_PDFS, ids=lambda p: p.name)
def test_real_debian_manuals_chunk_with_exact_offsets_and_pages(path: Path, minilm_tokenizer: object) -> None:
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine (its Debian package is not installed)")
    report = IngestReport()
    (doc,) = load_files([path], tenant_id="acme", acl=[], report=report)
    children, parents = chunk_documents([doc], make_chunker(minilm_tokenizer), report)  # type: ignore[arg-type]
    assert report.failed == [] and len(children) > 20
    n_pages = len(doc.pages)
    for c in [*children, *parents]:
        assert doc.text[c.start_offset : c.end_offset] == c.text
        assert c.page_start is not None and c.page_end is not None and 1 <= c.page_start <= c.page_end <= n_pages
        assert c.page_start == doc.text.count("\f", 0, c.start_offset) + 1
    assert sum(1 for c in children if c.heading_path) > len(children) // 2  # the outline gives the sections


def test_sync_and_delete_source_treat_a_pdf_like_any_source(
    manual_dir: Path, tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert main(["ingest", str(manual_dir), "--tenant", "acme", *model, *idx]) == 0
    (manual_dir / "guide.pdf").write_bytes(build_pdf(MANUAL[:1], outline=OUTLINE[:1], title="Guide"))
    (manual_dir / "manual.pdf").unlink()
    assert main(["ingest", str(manual_dir), "--tenant", "acme", "--sync", *model, *idx]) == 0
    capsys.readouterr()
    assert main(["sources", "--tenant", "acme", "--json", *idx]) == 0
    pages = {s["source_id"]: s["pages"] for s in json.loads(capsys.readouterr().out)["sources"]}
    assert pages == {"guide.pdf": 1, "notes.md": None}  # the gone PDF deleted, the new one added
    assert main(["delete-source", "guide.pdf", "--tenant", "acme", *idx]) == 0
    capsys.readouterr()
    assert main(["sources", "--tenant", "acme", "--json", *idx]) == 0
    assert [s["source_id"] for s in json.loads(capsys.readouterr().out)["sources"]] == ["notes.md"]


def test_the_documented_pdf_coverage_is_its_report_and_within_0_03_of_the_markdown_one() -> None:
    """Issue 30's bar: the PDF version of rag-en-train keeps answer coverage within 0.03 of the Markdown files'.
    The numbers in docs/ingestion.md are the two reports' (``es-rag eval --golden ... --json``, per question rows
    left out)."""
    import re

    root = Path(__file__).resolve().parents[2]
    pdf = json.loads((root / "reports/rag-en-pdf/result.json").read_text(encoding="utf-8"))
    md = json.loads((root / "reports/rag-en-train/result.json").read_text(encoding="utf-8"))
    assert pdf["token_budget"] == md["token_budget"] == 1500 and pdf["questions"] == md["questions"] == 1500
    doc = " ".join((root / "docs/ingestion.md").read_text(encoding="utf-8").split())
    m = re.search(
        r"answer coverage is \*\*([0-9.]+)\*\* \(whole answers ([0-9.]+), ([0-9,]+) context tokens\) against "
        r"\*\*([0-9.]+)\*\* \(([0-9.]+), ([0-9,]+) tokens\) for the Markdown files",
        doc,
    )
    assert m is not None, "the PDF coverage sentence of docs/ingestion.md"
    for (cov, whole, tokens), report in ((m.groups()[:3], pdf), (m.groups()[3:], md)):
        o = report["overall"]
        assert float(cov) == round(o["answer_coverage"], 3) and float(whole) == round(o["answer_whole"], 3)
        assert int(tokens.replace(",", "")) == round(o["context_tokens"])
    assert abs(pdf["overall"]["answer_coverage"] - md["overall"]["answer_coverage"]) <= 0.03


def test_a_heading_without_a_body_opens_no_section() -> None:
    """A chapter title followed at once by its first subsection is no chunk of its own (it would be a child of a
    few tokens): its title heads the subsection's path, as a Markdown heading without a body does."""
    text = "1 Chapter\n1.1 First\nFirst body.\n1.2 Second\nSecond body."
    headings = [(0, 1, "1 Chapter"), (text.index("1.1"), 2, "1.1 First"), (text.index("1.2"), 2, "1.2 Second")]
    layout = PagedLayout(text, headings)
    got = [(s.heading_path, text[s.start : s.end]) for s in layout.sections]
    assert got == [
        (("1 Chapter", "1.1 First"), "1.1 First\nFirst body."),
        (("1 Chapter", "1.2 Second"), "1.2 Second\nSecond body."),
    ]
    last = PagedLayout("Body.\n2 Closing", [(6, 1, "2 Closing")])  # the last heading keeps its line: no text lost
    assert [s.heading_path for s in last.sections] == [(), ("2 Closing",)]


def test_a_heading_placed_at_a_body_line_keeps_that_line() -> None:
    """An outline entry whose title is not on its page is placed at a line below its target: when that line is body
    text, its section is kept even if it is one line, so no text is lost."""
    text = "1 Chapter\nA body line only.\n1.1 First\nFirst body."
    headings = [(0, 1, "1 Chapter"), (text.index("A body"), 2, "Missing title"), (text.index("1.1"), 2, "1.1 First")]
    layout = PagedLayout(text, headings)
    assert [text[s.start : s.end] for s in layout.sections] == ["A body line only.", "1.1 First\nFirst body."]


def test_a_merged_block_spans_its_pieces_pages_and_their_labels() -> None:
    from es_rag.stages.expand import _page_range

    def piece(first: int | None, last: int | None, labels: tuple[str | None, str | None] = (None, None)) -> Hit:
        return Hit(chunk_id=f"c{first}", source_id="m.pdf", text="x", tenant_id="t", page_start=first,
                   page_end=last, page_label_start=labels[0], page_label_end=labels[1])  # fmt: skip

    got = _page_range(
        [piece(4, 5, ("1", "2")), piece(3, 3, ("ii", "ii")), piece(None, None), piece(6, None, ("3", None))]
    )
    assert got == {"page_start": 3, "page_end": 6, "page_label_start": "ii", "page_label_end": "3"}
    assert _page_range([piece(2, 3)]) == {
        "page_start": 2,
        "page_end": 3,
        "page_label_start": None,
        "page_label_end": None,
    }
    assert _page_range([piece(None, None)])["page_start"] is None
