"""Source code through ingestion (issue 30): a folder walk reads Python, JavaScript/TypeScript, Java and Go files, each
function, method or class is a chunk headed ``file > Class > method``, a later part of a long function carries its
signature in ``contextual_text`` (what the reranker reads), and the identifier channel finds a function by its name
through ``heading_path.ident`` even in a part whose text never names it. Real files: Python modules of Debian's
``libpython3.11-minimal`` / ``libpython3.11-stdlib`` and ``python3-yaml`` packages when this machine has them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from es_rag.chunking import make_chunker
from es_rag.cli import main
from es_rag.ingest import IngestReport, chunk_documents, load_files

REAL_PYTHON = [
    Path("/usr/lib/python3.11/textwrap.py"),  # Debian libpython3.11-minimal
    Path("/usr/lib/python3.11/shlex.py"),  # Debian libpython3.11-stdlib
    Path("/usr/lib/python3/dist-packages/yaml/constructor.py"),  # Debian python3-yaml
]
STEPS = "\n".join(f"    step_{i} = load_section(raw, {i})  # read section {i} of the file" for i in range(60))
MODULE = f'''"""Settings files."""

import os


class Config:
    """Settings read from a file."""

    def parse_config_file(self, path):
        """Read every section of a settings file into a dict."""
        raw = open(path).read()
{STEPS}
        return raw


def main():
    return Config().parse_config_file(os.environ["CONFIG"])
'''
SERVER_GO = """package server

// Server answers requests.
type Server struct{ port int }

// Start listens on the server's port.
func (s *Server) Start() error { return nil }
"""
WIDGET_TS = """export interface Widget { name: string }

/** Render a widget. */
export const renderWidget = (w: Widget): string => w.name;
"""
HELLO_JAVA = """package demo;

public class Hello {
    /** Say hello. */
    public String greet(String name) { return "Hello " + name; }
}
"""


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "config.py").write_text(MODULE.replace("\n    step_", "\n        step_"), encoding="utf-8")
    (root / "server.go").write_text(SERVER_GO, encoding="utf-8")
    (root / "widget.ts").write_text(WIDGET_TS, encoding="utf-8")
    (root / "Hello.java").write_text(HELLO_JAVA, encoding="utf-8")
    (root / "README.md").write_text("# Demo\n\nA demo project.\n", encoding="utf-8")
    return root


def test_a_folder_of_code_chunks_by_definition_with_exact_offsets(code_dir: Path, minilm_tokenizer: object) -> None:
    report = IngestReport()
    docs = load_files([code_dir], tenant_id="acme", acl=[], report=report)
    fmts = {d.source_id: d.fmt for d in docs}
    assert fmts == {
        "Hello.java": "java", "README.md": "markdown", "pkg/config.py": "python", "server.go": "go",
        "widget.ts": "typescript",
    }  # fmt: skip
    children, _ = chunk_documents(docs, make_chunker(minilm_tokenizer, max_tokens=128, overlap=0), report)  # type: ignore[arg-type]
    text = {d.source_id: d.text for d in docs}
    for c in children:
        assert text[c.source_id][c.start_offset : c.end_offset] == c.text
    paths = {c.heading_path for c in children}
    assert {
        ("pkg/config.py", "Config", "parse_config_file"), ("server.go", "Server", "Start"),
        ("widget.ts", "renderWidget"), ("Hello.java", "Hello", "greet"),
    } <= paths  # fmt: skip
    parts = [c for c in children if c.heading_path[-1] == "parse_config_file"]
    assert len(parts) > 1  # over the limit: split at its statements
    assert parts[0].text.lstrip().startswith("def parse_config_file") and parts[0].contextual_text is None
    for later in parts[1:]:  # a later part repeats the signature and docstring before its own text
        assert later.contextual_text is not None and "def parse_config_file(self, path):" in later.contextual_text
        assert "Read every section" in later.contextual_text and later.contextual_text.endswith(later.text)


def test_search_finds_a_function_by_its_name_and_cites_it(
    code_dir: Path, tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = ["--index-dir", str(tmp_path / "idx")]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    assert main(["ingest", str(code_dir), "--tenant", "acme", *model, *idx, "--chunk-max-tokens", "128"]) == 0
    capsys.readouterr()
    argv = ["search", "what does parse_config_file return", "--tenant", "acme", *model, *idx, "--json"]
    assert main([*argv, "--rerank-model", "none", "--context-k", "10"]) == 0
    result = json.loads(capsys.readouterr().out)
    exact = [h for h in result["hits"] if "exact" in h["sources"]]
    assert exact and all(
        h["heading_path"][-1] == "parse_config_file" or "parse_config_file" in h["text"] for h in exact
    )
    # a later part of the function: its text never names it; heading_path.ident does
    assert any(h["heading_path"][-1] == "parse_config_file" and "parse_config_file" not in h["text"] for h in exact)
    assert "main" in {h["heading_path"][-1] for h in exact}  # the caller names it in its text
    assert "§ Config > parse_config_file" in result["context"]["text"]
    assert main(["chunk", str(code_dir / "server.go"), "--json", "--embedding-model", str(tiny_bi_encoder)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert ["server.go", "Server", "Start"] in [r["heading_path"] for r in rows]


def test_real_debian_python_modules_ingest_without_a_traceback(tmp_path: Path, minilm_tokenizer: object) -> None:
    present = [p for p in REAL_PYTHON if p.is_file()]
    if not present:
        pytest.skip("no Debian Python module on this machine (libpython3.11-minimal, python3-yaml)")
    for p in present:
        shutil.copy(p, tmp_path / p.name)
    report = IngestReport()
    docs = load_files([tmp_path], tenant_id="acme", acl=[], report=report)
    children, parents = chunk_documents(docs, make_chunker(minilm_tokenizer), report)  # type: ignore[arg-type]
    assert report.failed == [] and len(docs) == len(present)
    text = {d.source_id: d.text for d in docs}
    for c in [*children, *parents]:
        assert text[c.source_id][c.start_offset : c.end_offset] == c.text
        assert c.heading_path[0] == c.source_id
    names = {c.heading_path[-1] for c in children}
    if Path("/usr/lib/python3.11/textwrap.py") in present:
        assert {"TextWrapper", "wrap", "dedent", "_wrap_chunks"} <= names
