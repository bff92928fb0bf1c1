"""Generated documentation trees (issue 46, item 5): a folder walk skips a build's assets, search indexes, generated
pages and source copies, and says which generator made them. The Sphinx tree is laid out as Debian's python3-doc
ships its HTML (``/usr/share/doc/python3.11/html``: ``objects.inv``, ``searchindex.js``, ``_static/jquery.js``,
``_sources/*.rst.txt``, ``genindex-A.html``, ...); the pages themselves are this test's own."""

from __future__ import annotations

from pathlib import Path

from es_rag.ingest.report import IngestReport
from es_rag.ingest.sources import discover


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _walk(root: Path) -> tuple[list[str], dict[str, str]]:
    report = IngestReport()
    found = [f.source_id for f in discover([root], report=report)]
    return sorted(found), {Path(s["path"]).relative_to(root).as_posix(): s["reason"] for s in report.skipped}


PAGE = "<html><head><title>{0}</title></head><body><h1>{0}</h1><p>About {0}.</p></body></html>"


def test_a_sphinx_build_keeps_its_pages_and_skips_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "html"
    _tree(
        root,
        {
            "objects.inv": "# Sphinx inventory version 2",
            "searchindex.js": "Search.setIndex({})",
            "index.html": PAGE.format("Python documentation"),
            "library/os.html": PAGE.format("os"),
            "genindex.html": PAGE.format("Index"),
            "genindex-A.html": PAGE.format("Index A"),
            "search.html": PAGE.format("Search"),
            "py-modindex.html": PAGE.format("Modules"),
            "_static/jquery.js": "/*! jQuery */ function jQuery() {}",
            "_static/doctools.js": "const Documentation = {};",
            "_static/pygments.css": ".hll { }",
            "_sources/index.rst.txt": "Python documentation\n====================\n",
            "_sources/library/os.rst.txt": "os\n==\n",
        },
    )
    found, skipped = _walk(root)
    assert found == ["index.html", "library/os.html"]
    assert skipped["_static"].startswith("Sphinx build: not a page (_static/")
    assert skipped["_sources"].startswith("Sphinx build: not a page (_sources/")
    for name in ("genindex.html", "genindex-A.html", "search.html", "py-modindex.html", "searchindex.js"):
        assert skipped[name] == f"Sphinx build: not a page ({name}: generated)"


def test_mkdocs_doxygen_and_javadoc_builds(tmp_path: Path) -> None:
    _tree(
        tmp_path / "site",
        {
            "index.html": PAGE.format("Home"),
            "404.html": PAGE.format("Not found"),
            "search/search_index.json": "{}",
            "assets/javascripts/bundle.js": "var x;",
            "guide/index.html": PAGE.format("Guide"),
        },
    )
    _tree(
        tmp_path / "dox",
        {"doxygen.css": "body {}", "dynsections.js": "function x() {}", "classFoo.html": PAGE.format("Foo")},
    )
    _tree(
        tmp_path / "api",
        {
            "element-list": "com.example",
            "stylesheet.css": "body {}",
            "script.js": "var x;",
            "index-all.html": PAGE.format("Index"),
            "com/example/Foo.html": PAGE.format("Foo"),
        },
    )
    found, skipped = _walk(tmp_path)
    assert found == ["api/com/example/Foo.html", "dox/classFoo.html", "site/guide/index.html", "site/index.html"]
    assert skipped["site/search"].startswith("MkDocs build") and skipped["site/assets"].startswith("MkDocs build")
    assert skipped["dox/dynsections.js"].startswith("Doxygen build") and skipped["api/script.js"].startswith("Javadoc")


def test_a_folder_that_is_no_build_keeps_its_scripts(tmp_path: Path) -> None:
    _tree(tmp_path, {"app/main.js": "function main() { return 1 }", "_static/notes.md": "# Notes\n\ntext\n"})
    found, skipped = _walk(tmp_path)
    assert found == ["_static/notes.md", "app/main.js"] and skipped == {}
