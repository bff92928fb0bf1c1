"""Generated documentation trees: what a folder walk skips in them, and why.

A built HTML site holds its pages beside the machinery that serves them. Ingested as they are, the machinery
crowds out the pages: in Debian's python3-doc (a Sphinx build), ``_static/jquery.js`` alone gave 566 chunks and
``_sources/*.rst.txt`` a second copy of every page, 820 chunks of junk beside one page's 19 (issue 46). A folder is
recognised as the root of a build by the files its generator always writes there, and then its theme assets, search
indexes, generated index pages and copies of the sources are skipped, each with the generator named in its reason.

==========  ======================================  =============================================================
generator   recognised by (in one folder)           skipped under it
==========  ======================================  =============================================================
Sphinx      ``objects.inv`` + ``searchindex.js``     ``_static/``, ``_sources/``, ``genindex*.html``,
            or ``_static/``                          ``search.html``, ``py-modindex.html``, ``searchindex.js``
MkDocs      ``search/search_index.json``            ``search/``, ``assets/``, ``css/``, ``js/``, ``fonts/``,
                                                    ``404.html``
Doxygen     ``doxygen.css`` or ``dynsections.js``   ``search/``, every ``.js`` and ``.css``
Javadoc     ``element-list`` or ``package-list``,   ``script-dir/``, ``jquery/``, ``resources/``, ``legal/``, the
            with ``stylesheet.css``                 ``*-index.html`` / ``index-all.html`` / ``*-tree.html`` pages,
                                                    every ``.js`` and ``.css``
==========  ======================================  =============================================================

A file named on the command line is read whatever tree it is in.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BuildTree:
    """One generator's build: where it is rooted and what under it is not content."""

    generator: str
    root: Path
    dirs: frozenset[str]
    """Folders directly under the root that hold no page (assets, search indexes, source copies)."""
    files: tuple[str, ...]
    """Glob patterns of file names, anywhere under the root, that are no page of the documentation."""

    def skips_dir(self, path: Path) -> str | None:
        """Why the folder ``path`` is skipped, or None.

        Args:
            path: A folder under the root.
        """
        if path.parent == self.root and path.name in self.dirs:
            return f"{self.generator} build: not a page ({path.name}/: assets, search index or source copies)"
        return None

    def skips_file(self, path: Path) -> str | None:
        """Why the file ``path`` is skipped, or None.

        Args:
            path: A file under the root.
        """
        if any(fnmatch.fnmatch(path.name, pattern) for pattern in self.files):
            return f"{self.generator} build: not a page ({path.name}: generated)"
        return None


def build_tree(folder: Path, dirnames: Collection[str], filenames: Collection[str]) -> BuildTree | None:
    """The build rooted at ``folder``, from the names it holds; None when it is no generator's root.

    Args:
        folder: The folder.
        dirnames: Its sub-folders' names.
        filenames: Its files' names.
    """
    files, dirs = set(filenames), set(dirnames)
    if "objects.inv" in files and ("searchindex.js" in files or "_static" in dirs):
        return BuildTree(
            "Sphinx",
            folder,
            frozenset({"_static", "_sources"}),
            ("genindex*.html", "search.html", "py-modindex.html", "searchindex.js"),
        )
    if "search" in dirs and (folder / "search" / "search_index.json").is_file():
        return BuildTree("MkDocs", folder, frozenset({"search", "assets", "css", "js", "fonts"}), ("404.html",))
    if "doxygen.css" in files or "dynsections.js" in files:
        return BuildTree("Doxygen", folder, frozenset({"search"}), ("*.js", "*.css"))
    if ("element-list" in files or "package-list" in files) and "stylesheet.css" in files:
        return BuildTree(
            "Javadoc",
            folder,
            frozenset({"script-dir", "jquery", "resources", "legal"}),
            ("*.js", "*.css", "*-index.html", "index-all.html", "*-tree.html", "help-doc.html", "search.html"),
        )
    return None
