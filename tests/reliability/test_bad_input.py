"""Bad input: every bad file or JSONL line gets a row naming the document and the field; every good document
is still indexed, on both backends (embedded, and Elasticsearch through the real client + FakeCluster)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from es_rag.chunking import make_chunker
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.errors import InputError
from es_rag.ingest import MAX_FILE_BYTES, IngestReport, decode_source, ingest_documents, load_files
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder
from tests.support.es_cluster import cluster_backend

GOOD_JSONL = [
    {"id": "j-ok-1", "text": "first good line about sync errors"},
    {"source_id": "j-ok-2", "text": "<p>html line</p><script>evil()</script>", "format": "html", "acl": "support"},
    {"id": "j-ok-3", "text": "# Title\n\nmarkdown line", "format": "markdown", "tenant_id": "acme"},
]
BAD_JSONL = [  # (raw line, field named in the report)
    ("{not json", "json"),
    ("[1, 2, 3]", "json"),
    (json.dumps({"text": "no id at all"}), "source_id"),
    (json.dumps({"id": "j-no-text"}), "text"),
    (json.dumps({"id": "j-blank", "text": "   "}), "text"),
    (json.dumps({"id": "j-num-text", "text": 42}), "text"),
    (json.dumps({"id": "j-fmt", "text": "t", "format": "docx"}), "format"),
    (json.dumps({"id": "j-acl", "text": "t", "acl": 5}), "acl"),
    (json.dumps({"id": "j-tenant", "text": "t", "tenant_id": ""}), "tenant_id"),
]


def _write_corpus(d: Path) -> tuple[list[Path], dict[str, str], set[str]]:
    """Files to ingest, the expected failure field per document name, and the good source ids."""
    files: dict[str, bytes] = {
        # good
        "good.md": b"# Guide\n\n## Sync\n\nThe sync engine retries E1042 errors.\n",
        "good.txt": "Plain text with \u65e5\u672c\u8a9e and emoji \U0001f600.\n".encode(),
        "bom.md": b"\xef\xbb\xbf# BOM\n\nA file with a UTF-8 byte order mark.\n",
        "script.html": (
            b"<html><head><title>T</title><script>var s='SCRIPTSECRET';</script></head>"
            b"<body><h1>H</h1><p>visible text</p><script>alert('SCRIPT2')</script><style>.x{}</style></body></html>"
        ),
        "nested.md": (
            "# Deep\n\n" + "> " * 300 + "deep quote\n\n" + "".join("  " * i + f"- item {i}\n" for i in range(150))
        ).encode(),
        "longline.txt": (" ".join(["token"] * 20_000)).encode(),
        "docs.jsonl": ("\n".join([json.dumps(r) for r in GOOD_JSONL] + [raw for raw, _ in BAD_JSONL]) + "\n").encode(),
        # skipped: nothing to index (issue 46: an empty file is no failure)
        "empty.md": b"",
        "blank.txt": b"  \n\t\n",
        # bad
        "binary.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
        "latin1.txt": "caf\u00e9 cr\u00e8me".encode("latin-1"),
        "mixed.md": "# \u65e5\u672c\u8a9e\n\n".encode() + "r\u00e9sum\u00e9 \u2013 cp1252".encode("cp1252"),
        "utf16.txt": "hello".encode("utf-16"),
        "headings.md": b"# Only\n\n## Headings\n",
        "notes.pdf": b"%PDF-1.7",  # a PDF cut after its header
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    big = d / "big.txt"
    with open(big, "wb") as fh:  # sparse: 50 MB + 1 byte without writing it
        fh.truncate(MAX_FILE_BYTES + 1)
    expected = {
        str(d / "binary.md"): "encoding",
        str(d / "latin1.txt"): "encoding",
        str(d / "mixed.md"): "encoding",
        str(d / "utf16.txt"): "encoding",
        str(d / "headings.md"): "text",
        str(d / "notes.pdf"): "pdf",  # read, and refused: a truncated PDF
        str(big): "size",
        str(d / "missing.md"): "path",
    }
    for lineno, (_, fld) in enumerate(BAD_JSONL, start=len(GOOD_JSONL) + 1):
        expected[f"{d / 'docs.jsonl'}:{lineno}"] = fld
    # a named file's id is its path relative to its own folder (es_rag.ingest.sources)
    good = {"good.md", "good.txt", "bom.md", "script.html", "nested.md", "longline.txt"}
    good |= {"j-ok-1", "j-ok-2", "j-ok-3"}
    paths = [*sorted(d.iterdir()), d / "missing.md"]
    return paths, expected, good


@pytest.mark.parametrize("backend_kind", ["embedded", "elasticsearch"])
def test_a_bulk_run_reports_every_bad_document_and_indexes_every_good_one(
    backend_kind: str, tmp_path: Path, minilm_tokenizer: Any
) -> None:
    paths, expected, good = _write_corpus(tmp_path)
    report = IngestReport()
    t0 = time.perf_counter()
    docs = load_files(paths, tenant_id="acme", acl=("public",), report=report)
    chunker = make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=64, overlap=8)
    if backend_kind == "embedded":
        backend: Any = EmbeddedBackend(dims=DIMS)
    else:
        backend, _, cluster = cluster_backend(Settings(vector_dims=DIMS))
    report = ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend, report=report)
    elapsed = time.perf_counter() - t0

    got = {f["document"]: f["field"] for f in report.failed}
    assert got == expected, {k: v for k, v in got.items() if expected.get(k) != v}
    assert len(report.failed) == len(expected) == 17  # one row each, none twice
    empty = {str(tmp_path / n) for n in ("empty.md", "blank.txt")}
    assert {s["path"] for s in report.skipped if s["reason"] == "empty file: nothing to index"} == empty
    assert all(f["reason"] for f in report.failed)
    assert report.sources == len(good) == 9
    if backend_kind == "embedded":
        stored = {d["source_id"] for d in backend._children.values()}
        n_children = len(backend._children)
    else:
        stored = {d["source_id"] for d in cluster.docs(backend.settings.chunk_index).values()}
        n_children = len(cluster.docs(backend.settings.chunk_index))
    assert stored == good
    assert n_children == report.chunks and report.indexed == report.chunks + report.parents
    assert {s["source_id"] for s in report.switched} == good  # every good source is served
    assert elapsed < 60  # the 50 MB file is refused by its size, never read


def test_script_and_style_never_reach_the_embedded_text(tmp_path: Path, minilm_tokenizer: Any) -> None:
    paths, _, _ = _write_corpus(tmp_path)
    report = IngestReport()
    docs = [d for d in load_files(paths, tenant_id="acme", acl=("public",), report=report) if d.fmt == "html"]
    chunker = make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=64, overlap=8)
    backend = EmbeddedBackend(dims=DIMS)
    out = ingest_documents(docs, chunker=chunker, embedder=RandomEmbedder(), backend=backend)
    assert out.chunks >= 2  # script.html and the html JSONL line
    for doc in [*backend._children.values(), *backend._parents.values()]:
        embedded = doc.get("contextual_text", doc["text"])
        assert "SCRIPTSECRET" not in embedded and "SCRIPT2" not in embedded and "evil()" not in embedded
        assert ".x{}" not in embedded


@pytest.mark.parametrize(
    ("data", "field", "needle"),
    [
        (b"", "text", "empty"),
        (b"\x00\x01binary", "encoding", "binary"),
        (b"ok \xff\xfe bad", "encoding", "byte 3"),
        (b"ok " + "\u00e9".encode("latin-1"), "encoding", "not valid UTF-8"),
    ],
)
def test_decode_errors_name_document_field_and_byte(data: bytes, field: str, needle: str) -> None:
    with pytest.raises(InputError) as err:
        decode_source(Path("docs/x.md"), data)
    assert err.value.document == "docs/x.md" and err.value.field == field
    assert needle in str(err.value) and str(err.value).startswith("docs/x.md: field '")
