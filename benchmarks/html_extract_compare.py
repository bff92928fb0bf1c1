"""What es_rag's HTML text keeps beside two well-kept extractors, trafilatura and jusText, on real documentation pages
(issue 31: "compare what a well-kept extractor does on real documentation").

    python benchmarks/html_extract_compare.py [PAGE.html ...]

Needs ``trafilatura`` and ``justext`` (not dependencies of es_rag: ``pip install trafilatura justext lxml_html_clean``
in a scratch environment). Default pages: the Sphinx-built IDLE manual that ships with CPython (``idlelib/help.html``:
Python-docs markup, navigation, permalinks, code) and libffi's texinfo manual pages under ``/usr/share/doc``, where
present. For each page and extractor it prints:

- ``chars``: the text's length;
- ``code kept``: of the page's ``<pre>`` blocks, how many appear in the text with their line breaks and spaces intact;
- ``inline kept``: of its ``<code>``/``<kbd>``/``<tt>`` fragments, how many appear with their inner spaces;
- ``chrome``: how many of the page's navigation strings ("Table of Contents", "Previous topic", "Next topic", "Quick
  search", "Navigation", "¶", "This Page") the text still holds;
- ``body recall``: the share of the words of the page's main paragraphs (``<p>`` outside navigation) in the text.
"""

from __future__ import annotations

import argparse
import glob
import html as html_lib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHROME = ("Table of Contents", "Previous topic", "Next topic", "Quick search", "Navigation", "¶", "This Page")
NAV_RE = re.compile(r"<(nav|div)[^>]*(sphinxsidebar|related|navigation|footer|header)[^>]*>.*?</\1>", re.S | re.I)
TAG_RE = re.compile(r"<[^>]+>")


def default_pages() -> list[Path]:
    pages = sorted(Path(p) for p in glob.glob(f"{sys.base_prefix}/lib/python3*/idlelib/help.html"))
    pages += sorted(Path(p) for p in glob.glob("/usr/share/doc/libffi*/html/*Example*.html"))[:3]
    return pages


def _text(fragment: str) -> str:
    return html_lib.unescape(TAG_RE.sub("", fragment))


def targets(markup: str) -> tuple[list[str], list[str], list[str]]:
    """The page's ``pre`` blocks, inline code fragments with an inner space, and main-paragraph words."""
    pres = [t.strip("\n") for t in (_text(m) for m in re.findall(r"<pre[^>]*>(.*?)</pre>", markup, re.S)) if t.strip()]
    inline = [
        t
        for t in (_text(m) for m in re.findall(r"<(?:code|kbd|tt)[^>]*>(.*?)</(?:code|kbd|tt)>", markup, re.S))
        if " " in t.strip() and "\n" not in t
    ]
    body = NAV_RE.sub("", markup)
    words = [w for p in re.findall(r"<p[^>]*>(.*?)</p>", body, re.S) for w in _text(p).split()]
    return pres, inline, words


def score(text: str, pres: list[str], inline: list[str], words: list[str]) -> tuple[int, str, str, int, float]:
    kept = sum(1 for p in pres if p in text)
    inl = sum(1 for i in inline if i.strip() in text)
    chrome = sum(1 for c in CHROME if c in text)
    vocab = set(text.split())
    recall = sum(1 for w in words if w in vocab) / len(words) if words else 1.0
    return len(text), f"{kept}/{len(pres)}", f"{inl}/{len(inline)}", chrome, recall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path)
    args = parser.parse_args()
    from es_rag.chunking import visible_text

    try:
        import justext
        import trafilatura
    except ImportError:
        raise SystemExit("needs trafilatura and justext: pip install trafilatura justext lxml_html_clean") from None

    def jt(markup: str) -> str:
        paragraphs = justext.justext(markup.encode("utf-8"), justext.get_stoplist("English"))
        return "\n".join(p.text for p in paragraphs if not p.is_boilerplate)

    extractors = {
        "es_rag": visible_text,
        "trafilatura": lambda m: trafilatura.extract(m, include_formatting=False, include_tables=True) or "",
        "jusText": jt,
    }
    print(f"{'page':28} {'extractor':12} {'chars':>7} {'code kept':>10} {'inline kept':>12} {'chrome':>7} {'body':>6}")
    for page in args.pages or default_pages():
        markup = page.read_text(encoding="utf-8", errors="replace")
        pres, inline, words = targets(markup)
        for name, extract in extractors.items():
            chars, code, inl, chrome, recall = score(extract(markup), pres, inline, words)
            print(f"{page.name[:28]:28} {name:12} {chars:7d} {code:>10} {inl:>12} {chrome:7d} {recall:6.2f}")


if __name__ == "__main__":
    main()
