"""Build the ``eval/ja-debian-reference`` and ``eval/en-debian-reference`` BEIR sets from the Debian Reference.

Known-item retrieval sets built from one manual in two languages (Debian packages ``debian-reference-ja`` and
``debian-reference-en``, GPL-2+). Each section of the HTML manual (the text under one heading, up to the next
heading) is a document; the section's heading, with its number taken off, is the query for that document and
is removed from the document's text; every other section is a distractor. The document title is the chapter
title, the way a chunk carries its source document's title. Headings that do not ask for one section are not
queries: generic ones (``概要``, ``Introduction``), headings shorter than 4 characters, headings that occur
twice in the manual, and chapter titles (every document of the chapter carries them). The Japanese translations
are partial: the Japanese set keeps only sections that are at least 20 % kana and kanji, and a heading with no
kana or kanji is not a query (its section stays as a distractor). Queries are split
40/20/40 into train/dev/test with a seeded shuffle, so tuning on dev never reads test.

Download and unpack the packages yourself (this script does no network I/O and is not run in CI)::

    mkdir -p /tmp/dr && cd /tmp/dr && apt-get download debian-reference-ja debian-reference-en
    for f in *.deb; do d=${f%%_*}; mkdir -p $d; dpkg-deb -x $f $d; done
    python scripts/stage_eval_sets.py --debian-reference-ja /tmp/dr/debian-reference-ja \\
        --debian-reference-en /tmp/dr/debian-reference-en --out eval

It writes ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{train,dev,test}.tsv`` under ``OUT/ja-debian-reference``
and ``OUT/en-debian-reference`` and prints the counts that SOURCE.md records.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

SEED = 14
SPLITS = (("train", 0.4), ("dev", 0.2), ("test", 0.4))
MIN_QUERY_CHARS = 4
MIN_DOC_CHARS = {"ja": 80, "en": 160}
GENERIC_HEADINGS = {
    "ja": {"概要", "はじめに", "序論", "注記", "注意", "例", "基本", "基礎", "その他", "参考", "まとめ"}
    | {"ヒント", "警告"},
    "en": {
        "introduction",
        "overview",
        "basics",
        "examples",
        "example",
        "notes",
        "note",
        "tips",
        "summary",
        "references",
        "miscellaneous",
        "others",
        "other",
    },
}
_SKIP_CLASSES = {"navheader", "navfooter", "toc", "list-of-tables", "list-of-figures"}
_BLOCKS = {"p", "div", "li", "dt", "dd", "tr", "pre", "br", "table", "ul", "ol", "dl", "h1", "h2", "h3", "h4", "h5"}
_CELLS = {"td", "th"}
_VOID = {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr"}
_NUMBERING = re.compile(r"^(第\s*\d+\s*章|付録\s*[A-Z]|Chapter\s+\d+\.|Appendix\s+[A-Z]\.|[A-Z0-9]+(?:\.\d+)*\.)\s*")
_CJK = r"\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
_CJK_BREAK = re.compile(rf"(?<=[{_CJK}])[ \t]*\n\s*(?=[{_CJK}])")
_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
MIN_JAPANESE_SHARE = 0.2


@dataclass
class Section:
    """One heading of the manual and the text up to the next heading."""

    file: str
    level: int
    heading: str
    chapter: str
    parts: list[str] = field(default_factory=list)


class _SectionParser(HTMLParser):
    """Splits a DocBook XHTML page into sections at the ``h1``-``h4`` headings of its ``titlepage`` divs.

    Navigation bars and tables of contents are skipped; admonition titles (``注意``, ``Tip``) are not headings
    because they are not in a ``titlepage``.
    """

    def __init__(self, file: str) -> None:
        super().__init__(convert_charrefs=True)
        self.file = file
        self.sections: list[Section] = []
        self._stack: list[tuple[str, bool, bool]] = []  # tag, skips its content, is a titlepage
        self._heading: list[str] | None = None
        self._heading_level = 0
        self._chapter = ""

    def _skipping(self) -> bool:
        return any(skip for _, skip, _ in self._stack)

    def _in_titlepage(self) -> bool:
        return any(tp for _, _, tp in self._stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = set((dict(attrs).get("class") or "").split())
        skip = tag in {"head", "script", "style"} or bool(classes & _SKIP_CLASSES)
        if tag not in _VOID:
            self._stack.append((tag, skip, "titlepage" in classes))
        if re.fullmatch(r"h[1-4]", tag) and self._in_titlepage() and not self._skipping():
            self._heading, self._heading_level = [], int(tag[1])
        elif (tag in _BLOCKS or tag in _CELLS) and self.sections:
            self.sections[-1].parts.append("\n" if tag in _BLOCKS else " ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS and self.sections:
            self.sections[-1].parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self._heading is not None and tag == f"h{self._heading_level}":
            heading = _clean("".join(self._heading))
            if self._heading_level == 1:
                self._chapter = _NUMBERING.sub("", heading)
            self.sections.append(Section(self.file, self._heading_level, heading, self._chapter))
            self._heading = None
        while self._stack:
            open_tag, _, _ = self._stack.pop()
            if open_tag == tag:
                break
        if (tag in _BLOCKS or tag in _CELLS) and self.sections:
            self.sections[-1].parts.append("\n" if tag in _BLOCKS else " ")

    def handle_data(self, data: str) -> None:
        if self._skipping():
            return
        if self._heading is not None:
            self._heading.append(data)
        elif self.sections:
            self.sections[-1].parts.append(data)


def _clean(text: str, lang: str = "en") -> str:
    """Whitespace as a reader sees it: a line break between two Japanese characters joins them, other runs become
    one space."""
    if lang == "ja":
        text = _CJK_BREAK.sub("", text)
    return re.sub(r"\s+", " ", text).strip()


def _body(parts: list[str], lang: str) -> str:
    """Paragraph text of a section: blocks one per line, whitespace cleaned inside each."""
    lines = [_clean(block, lang) for block in "".join(parts).split("\n\n")]
    text = "\n".join(line for line in lines if line)
    return re.sub(r"\n{2,}", "\n", text)


def _query_text(heading: str) -> str:
    return unicodedata.normalize("NFKC", _NUMBERING.sub("", heading)).strip()


def _version(package_root: Path, package: str) -> str:
    doc = package_root / "usr/share/doc" / package
    names = ("changelog.Debian.gz", "changelog.gz")
    changelog = next((doc / n for n in names if (doc / n).is_file()), doc / names[-1])
    with gzip.open(changelog, "rt", encoding="utf-8") as fh:
        first = fh.readline()
    match = re.search(r"\(([^)]+)\)", first)
    if not match:
        raise SystemExit(f"{changelog}: no version in its first line {first!r}")
    return match.group(1)


@dataclass(frozen=True)
class Manual:
    """One DocBook manual of a Debian package: id prefix, package name and the folder of its HTML pages."""

    prefix: str
    package: str
    html: str


MANUALS = {
    "ja": (
        Manual("dr", "debian-reference-ja", "usr/share/debian-reference"),
        Manual("mg", "maint-guide-ja", "usr/share/doc/maint-guide-ja/html"),
        Manual("dd", "debmake-doc", "usr/share/doc/debmake-doc/html"),
    ),
    "en": (
        Manual("dr", "debian-reference-en", "usr/share/debian-reference"),
        Manual("mg", "maint-guide", "usr/share/doc/maint-guide/html"),
        Manual("dd", "debmake-doc", "usr/share/doc/debmake-doc/html"),
    ),
}


def _sections(root: Path, manual: Manual, lang: str) -> list[Section]:
    html_dir = root / manual.html
    pages = sorted(p for p in html_dir.glob(f"*.{lang}.html") if not p.name.startswith("index."))
    if not pages:
        raise SystemExit(f"{html_dir}: no *.{lang}.html pages; pass the folder {manual.package}.deb was unpacked into")
    sections: list[Section] = []
    for page in pages:
        parser = _SectionParser(f"{manual.prefix}-{page.name.split('.')[0]}")
        parser.feed(page.read_text(encoding="utf-8"))
        parser.close()
        sections.extend(parser.sections)
    return sections


def build(roots: dict[str, Path], lang: str, out: Path) -> dict[str, int | str]:
    """Write one BEIR set from the unpacked packages of :data:`MANUALS` (``roots`` by package); return its counts."""
    corpus: list[dict[str, str]] = []
    candidates: list[tuple[str, str]] = []  # doc id, query text
    dropped_language = untranslated = 0
    per_file: Counter[str] = Counter()
    for manual in MANUALS[lang]:
        for section in _sections(roots[manual.package], manual, lang):
            text = _body(section.parts, lang)
            if len(text) < MIN_DOC_CHARS[lang]:
                continue
            if lang == "ja" and len(_JAPANESE.findall(text)) < MIN_JAPANESE_SHARE * len(text):
                untranslated += 1
                continue
            per_file[section.file] += 1
            doc_id = f"{section.file}-{per_file[section.file]:03d}"
            corpus.append({"_id": doc_id, "title": section.chapter, "text": text})
            if section.level == 1:
                continue
            query = _query_text(section.heading)
            if lang == "ja" and not _JAPANESE.search(query):
                dropped_language += 1
                continue
            candidates.append((doc_id, query))

    seen = Counter(q.casefold() for _, q in candidates)
    queries = [
        (doc_id, q)
        for doc_id, q in candidates
        if seen[q.casefold()] == 1 and len(q) >= MIN_QUERY_CHARS and q.casefold() not in GENERIC_HEADINGS[lang]
    ]
    order = sorted(doc_id for doc_id, _ in queries)
    random.Random(SEED).shuffle(order)
    split_of: dict[str, str] = {}
    start = 0
    for n, (split, share) in enumerate(SPLITS):
        end = len(order) if n == len(SPLITS) - 1 else start + round(share * len(order))
        split_of.update({doc_id: split for doc_id in order[start:end]})
        start = end

    out.mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for doc in corpus:
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for doc_id, q in queries:
            fh.write(json.dumps({"_id": f"q-{doc_id}", "text": q}, ensure_ascii=False) + "\n")
    counts: dict[str, int | str] = {
        "packages": ", ".join(f"{m.package} {_version(roots[m.package], m.package)}" for m in MANUALS[lang]),
        "documents": len(corpus),
        **{f"documents_{m.prefix}": sum(d["_id"].startswith(m.prefix + "-") for d in corpus) for m in MANUALS[lang]},
        "queries": len(queries),
        "sections_not_japanese": untranslated,
        "headings_not_japanese": dropped_language,
        "headings_generic_short_or_repeated": len(candidates) - len(queries),
    }
    for split, _ in SPLITS:
        rows = [f"q-{doc_id}\t{doc_id}\t1" for doc_id, _ in queries if split_of[doc_id] == split]
        qrels = "query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n"
        (out / "qrels" / f"{split}.tsv").write_text(qrels, encoding="utf-8")
        counts[split] = len(rows)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    packages = sorted({m.package for manuals in MANUALS.values() for m in manuals})
    for package in packages:
        parser.add_argument(f"--{package}", type=Path, required=True, help=f"where the {package} .deb was unpacked")
    parser.add_argument("--out", type=Path, default=Path("eval"), help="parent folder of the two sets (eval)")
    args = parser.parse_args()
    roots = {package: getattr(args, package.replace("-", "_")) for package in packages}
    for lang in MANUALS:
        counts = build(roots, lang, args.out / f"{lang}-debian-docs")
        print(json.dumps({"set": f"{lang}-debian-docs", **counts}, ensure_ascii=False))


if __name__ == "__main__":
    main()
