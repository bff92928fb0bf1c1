"""Word and OpenDocument sources through ingestion (issue 30): a folder walk reads ``.docx`` and ``.odt``, their
Markdown rendering is the source text every chunk's offsets index, headings reach ``heading_path``, and a search
finds them. Real files: the two shipped by packages installed here (python-docx's own ``default.docx`` template, which
holds no text, and docutils' ``styles.odt``); no Debian package ships a Word file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from es_rag.chunking import make_chunker
from es_rag.cli import main
from es_rag.ingest import IngestReport, chunk_documents, load_files
from tests.support.corpus import WordTokenizer
from tests.support.office_docs import guide_docx, guide_odt


def _real_office_files() -> list[Path]:
    import docutils
    import docx

    found = [
        Path(docx.__file__).parent / "templates" / "default.docx",
        Path(docutils.__file__).parent / "writers" / "odf_odt" / "styles.odt",
    ]
    return [p for p in found if p.is_file()]


@pytest.fixture
def office_dir(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.docx").write_bytes(guide_docx())
    (root / "guide.odt").write_bytes(guide_odt())
    for real in _real_office_files():
        shutil.copy(real, root / f"real-{real.name}")
    return root


def test_a_folder_of_word_and_odf_files_reads_and_chunks_with_exact_offsets(office_dir: Path) -> None:
    report = IngestReport()
    docs = load_files([office_dir], tenant_id="acme", acl=[], report=report)
    by_id = {d.source_id: d for d in docs}
    assert {"guide.docx", "guide.odt"} <= set(by_id) and report.skipped == []
    assert by_id["guide.docx"].fmt == "markdown" and by_id["guide.docx"].title == "Guide title"
    # the Word template python-docx ships holds no text: one failed document naming the file, the rest go on
    failed = {Path(f["document"]).name: f for f in report.failed}
    if (office_dir / "real-default.docx").exists():
        assert failed["real-default.docx"]["field"] == "text" and len(failed) == 1
    if (office_dir / "real-styles.odt").exists():
        assert "real-styles.odt" in by_id
    # images left out are reported once per document, as warnings
    assert any(w["document"].endswith("guide.docx") and "image" in w["reason"] for w in report.warnings)
    children, parents = chunk_documents(docs, make_chunker(WordTokenizer(), max_tokens=24, overlap=4), report)
    for c in [*children, *parents]:
        assert by_id[c.source_id].text[c.start_offset : c.end_offset] == c.text
        assert c.page_start is None
    paths = {c.heading_path for c in children if c.source_id == "guide.docx"}
    assert ("The Guide", "Install", "Tables") in paths
    assert not any("# not a heading" in p for path in paths for p in path)  # escaped: a paragraph, not a heading


def test_front_matter_is_never_read_from_a_rendered_document(tmp_path: Path) -> None:
    """A Word document whose first paragraph is ``---`` is not YAML front matter: its text is the document's."""
    from tests.support.office_docs import docx_bytes

    data = docx_bytes(lambda d: d.add_paragraph("---"), lambda d: d.add_paragraph("title: x"))
    (tmp_path / "fm.docx").write_bytes(data)
    report = IngestReport()
    (doc,) = load_files([tmp_path], tenant_id="acme", acl=[], report=report)
    assert "title: x" in doc.text and doc.title is None and report.warnings == []
    children, _ = chunk_documents([doc], make_chunker(WordTokenizer(), max_tokens=24, overlap=4), report)
    assert any(c.text.startswith("---") for c in children) and report.failed == []


# issue 46: lines of Debian's live-manual (package live-manual-odf) that the packed context showed as ``\# apt-get``
LIVE_MANUAL = [
    "Install the tools:",
    "# apt-get install virtualbox virtualbox-qemu",
    "# lb clean",
    "--mirror-binary http://deb.debian.org/debian/",
    "#!/usr/bin/env python",
    "1986. The year | the release",
]


def test_the_context_holds_a_word_file_as_written(
    tmp_path: Path, tiny_bi_encoder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.office_docs import docx_bytes, odt_bytes

    def word(doc: object) -> None:
        doc.add_heading("Building an image", level=1)  # type: ignore[attr-defined]
        for line in LIVE_MANUAL:
            doc.add_paragraph(line)  # type: ignore[attr-defined]

    def odf(doc: object) -> None:
        from odf import text

        for line in LIVE_MANUAL:
            doc.text.addElement(text.P(text=line))  # type: ignore[attr-defined]

    root = tmp_path / "docs"
    root.mkdir()
    (root / "manual.docx").write_bytes(docx_bytes(word))
    (root / "manual.odt").write_bytes(odt_bytes(odf))
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert main(["ingest", str(root), "--tenant", "acme", *model, *idx, "--json"]) == 0
    capsys.readouterr()
    args = ["--tenant", "acme", *model, *idx, "--json", "--rerank-model", "none"]
    assert main(["search", "apt-get install virtualbox lb clean mirror-binary", *args]) == 0
    out = json.loads(capsys.readouterr().out)
    for name in ("manual.docx", "manual.odt"):
        texts = [h["text"] for h in out["hits"] if h["source_id"] == name]
        assert texts and all("\\" not in t for t in texts), texts
        assert all(f"\n{line}\n" in "\n".join(texts) + "\n" for line in LIVE_MANUAL[1:]), texts
    context = out["context"]["text"] if isinstance(out.get("context"), dict) else str(out.get("context"))
    assert "# apt-get install virtualbox" in context and "\\#" not in context and "\\-" not in context
    # the heading is still a heading (the rendering's structure), the '# ...' paragraphs are not
    assert all(h["heading_path"] in ([], ["Building an image"]) for h in out["hits"])


def test_ingest_and_search_a_word_file(
    office_dir: Path, tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    rc = main(["ingest", str(office_dir), "--tenant", "acme", *model, *idx, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["sources"] >= 2 and rc == (1 if report["failed"] else 0)
    assert (
        main(["search", "wide table cell", "--tenant", "acme", *model, *idx, "--json", "--rerank-model", "none"]) == 0
    )
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert any(h["source_id"] == "guide.docx" and h["heading_path"][-1] == "Tables" for h in hits)
