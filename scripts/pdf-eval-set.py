"""Make a PDF version of a Markdown evaluation set, with its gold answer spans mapped into the PDFs' extracted text.

Usage::

    python scripts/pdf-eval-set.py SRC_DIR OUT_DIR [--limit N]

``SRC_DIR`` holds ``docs/*.md`` and ``golden.jsonl`` (es_rag's golden format: ``spans`` are ``[start, end)`` offsets
into the Markdown file's text); for example ``shared/eval/rag-en-train``. The script:

1. Renders each ``docs/X.md`` to ``OUT_DIR/docs/X.pdf`` with reportlab: the Markdown is parsed with markdown-it-py
   (``MarkdownIt("commonmark").enable("table")``, as es_rag parses it); headings become larger bold paragraphs and
   one outline entry (bookmark) each, at its level and position; paragraphs are body text (10.5 pt on A4, 2.5 cm
   margins, ragged right, no hyphenation, no page furniture); list items are bulleted or numbered paragraphs;
   tables are reportlab Tables; code is preformatted monospace; emphasis is oblique or bold. Fonts: DejaVu (TTF,
   embedded and subset), with reportlab's CID fonts for Chinese, Japanese kana and Korean characters that DejaVu
   lacks; Helvetica, with a warning, only when no DejaVu font is found. Right-to-left runs (Hebrew, Arabic) are
   drawn in visual order, as PDF writers draw them. The PDF's ``Title`` is the article's title (its first
   ``#`` heading). The bytes are the same on every run (reportlab ``invariant=1``).
2. Extracts each PDF with :func:`es_rag.ingest.pdf.extract_pdf` and maps every gold span from Markdown offsets to
   offsets into ``PdfText.text`` (the source text es_rag's PDF chunks index). Two character alignments are
   composed, both over non-whitespace characters: the Markdown source of each block against the text the script
   drew for it (Markdown syntax, such as ``#``, ``*``, escapes and pipes, has no counterpart there), then the drawn
   text against the PDF's text (located block by block; ``difflib.SequenceMatcher`` where they differ). A span maps
   to the PDF range its characters align with, and is verified: the PDF range's text must equal the Markdown
   span's text with whitespace runs collapsed (``exact``), or with the Markdown syntax characters the span covers
   left out (``markdown-syntax``), or with invisible format characters (U+200B..U+200F, ...) left out
   (``format-chars``). A span whose text is elsewhere near its aligned range is moved there (``relocated``); one
   whose characters the extractor returns in another order (right-to-left text) keeps the range those characters
   span (``reordered``); one that is located but whose text differs is kept (``differs``, listed in
   ``MAPPING.md``); one with no aligned character is left out (``unlocated``), and a question left without spans
   is left out.
3. Writes ``OUT_DIR/golden.jsonl`` (``X.md`` renamed ``X.pdf`` in ``gold`` and ``source_id``, offsets into the
   extracted text), copies ``SOURCE.md`` and the ``LICENSE*`` files, and writes ``OUT_DIR/MAPPING.md`` with the
   counts (documents, pages, questions, spans per verification result) and every span that is not ``exact``.

``--limit N`` takes the first N documents, documents with questions first (in the order golden.jsonl first
names them), then the others by name, and only the questions whose gold documents are all among them. One
progress line per document; the summary is printed at the end. Needs reportlab (a dev dependency).
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import re
import shutil
import sys
import textwrap
import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from es_rag.ingest.pdf import PdfText, extract_pdf  # noqa: E402

FONT_DIRS = (
    "/usr/share/fonts/truetype/dejavu",
    "/usr/share/fonts/dejavu",
    "/usr/share/fonts/TTF",
    "/usr/share/fonts/truetype",
    "/usr/local/share/fonts",
    "/Library/Fonts",
)
FACES = {
    "regular": "DejaVuSans.ttf",
    "bold": "DejaVuSans-Bold.ttf",
    "italic": "DejaVuSans-Oblique.ttf",
    "bolditalic": "DejaVuSans-BoldOblique.ttf",
    "mono": "DejaVuSansMono.ttf",
}
CID_FONTS = {"han": "STSong-Light", "kana": "HeiseiMin-W3", "hangul": "HYSMyeongJo-Medium"}
BODY_SIZE = 10.5
BODY_LEADING = 14.0
HEADING_SIZES = {1: 18.0, 2: 15.0, 3: 13.0, 4: 12.0, 5: 11.0, 6: 10.5}
MARGIN_CM = 2.5
LINK_COLOR = "#1a4d99"
RESULTS = ("exact", "markdown-syntax", "format-chars", "relocated", "reordered", "differs", "unlocated")
"""Verification results, best first; all but ``unlocated`` stay in the golden file."""
EXACT = ("exact", "markdown-syntax", "format-chars")
"""Results whose PDF text is the span's visible text."""
_MIRROR = dict(zip("()[]{}<>«»‹›", ")(][}{><»«›‹", strict=True))


# --------------------------------------------------------------------------------------------------------- fonts


@dataclass
class Fonts:
    """The faces the renderer draws with, and which characters each has a glyph for (None: any)."""

    regular: str
    bold: str
    italic: str
    bolditalic: str
    mono: str
    glyphs: dict[str, frozenset[int] | None] = field(default_factory=dict)
    warning: str = ""

    def face(self, *, bold: bool = False, italic: bool = False, mono: bool = False) -> str:
        if mono:
            return self.mono
        if bold:
            return self.bolditalic if italic else self.bold
        return self.italic if italic else self.regular

    def has(self, font: str, char: str) -> bool:
        covered = self.glyphs.get(font)
        return covered is None or ord(char) in covered


_FONTS: dict[str | None, Fonts] = {}


def load_fonts(font_dir: str | None = None) -> Fonts:
    """Register DejaVu (or, with a warning, Helvetica) and the CID fonts with reportlab, once per ``font_dir``
    (default: :data:`FONT_DIRS`)."""
    if font_dir in _FONTS:
        return _FONTS[font_dir]
    from reportlab.lib.fonts import addMapping
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfbase.ttfonts import TTFont

    paths = _find_faces([font_dir] if font_dir else list(FONT_DIRS))
    if paths is not None:
        names = {kind: f"EvalSet-{kind}" for kind in FACES}
        glyphs: dict[str, frozenset[int] | None] = {}
        for kind, path in paths.items():
            font = TTFont(names[kind], str(path))
            pdfmetrics.registerFont(font)
            glyphs[names[kind]] = frozenset(font.face.charToGlyph)
        fonts = Fonts(**names, glyphs=glyphs)
        for bold, italic, kind in ((0, 0, "regular"), (1, 0, "bold"), (0, 1, "italic"), (1, 1, "bolditalic")):
            addMapping(names["regular"], bold, italic, names[kind])
    else:
        winansi = frozenset(ord(c) for c in bytes(range(32, 256)).decode("cp1252", errors="ignore"))
        names = {"regular": "Helvetica", "bold": "Helvetica-Bold", "italic": "Helvetica-Oblique"}
        names |= {"bolditalic": "Helvetica-BoldOblique", "mono": "Courier"}
        fonts = Fonts(**names, glyphs=dict.fromkeys(names.values(), winansi))
        fonts.warning = (
            "no DejaVu TTF font found (looked in " + ", ".join(FONT_DIRS) + "): Helvetica draws WinAnsi characters "
            "only, so the others are lost and spans holding them will not map"
        )
        print(f"WARNING: {fonts.warning}", file=sys.stderr)
    for name in CID_FONTS.values():
        pdfmetrics.registerFont(UnicodeCIDFont(name))
        fonts.glyphs[name] = None
    _FONTS[font_dir] = fonts
    return fonts


def _find_faces(dirs: Sequence[str]) -> dict[str, Path] | None:
    for d in dirs:
        base = Path(d)
        if not base.is_dir():
            continue
        found: dict[str, Path] = {}
        for kind, filename in FACES.items():
            hits = sorted(base.rglob(filename))
            if hits:
                found[kind] = hits[0]
        if "regular" in found:
            return {kind: found.get(kind, found["regular"]) for kind in FACES}
    return None


def _cid_font(char: str) -> str | None:
    """The CID font for a CJK character that the TTF faces lack, by script."""
    code = ord(char)
    if 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF or 0x3130 <= code <= 0x318F:
        return CID_FONTS["hangul"]
    if 0x3040 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF:
        return CID_FONTS["kana"]
    if (
        0x2E80 <= code <= 0x2FDF
        or 0x3000 <= code <= 0x303F
        or 0x3400 <= code <= 0x4DBF
        or 0x4E00 <= code <= 0x9FFF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF
        or 0x20000 <= code <= 0x3FFFF
    ):
        return CID_FONTS["han"]
    return None


# -------------------------------------------------------------------------------------------------- inline text


def visual_order(text: str) -> str:
    """Right-to-left runs of ``text`` (in a left-to-right paragraph) in the order their glyphs are drawn.

    A run is strong right-to-left characters (Hebrew, Arabic, ...) with the marks on them and the neutral characters
    (spaces, punctuation) between them; it is reversed and its brackets mirrored (UAX #9, rules L2 and L4, for the
    one embedding level an English paragraph has). Marks are reversed too, so each is drawn before its base: DejaVu's
    Hebrew points lie right of their origin, over the glyph drawn next (no shaping engine positions them here).
    """
    classes = "".join(_bidi_class(c) for c in text)
    if "R" not in classes:
        return text
    out: list[str] = []
    done = 0
    for m in re.finditer(r"R(?:[RM]|N+(?=R))*", classes):
        out.append(text[done : m.start()])
        out.append("".join(_MIRROR.get(c, c) for c in reversed(text[m.start() : m.end()])))
        done = m.end()
    out.append(text[done:])
    return "".join(out)


def _bidi_class(c: str) -> str:
    kind = unicodedata.bidirectional(c)
    if kind in ("R", "AL"):
        return "R"
    if kind == "NSM":
        return "M"
    if kind in ("WS", "ON", "CS", "ES", "ET", "BN", "S"):
        return "N"
    return "L"


def font_markup(text: str, face: str, fonts: Fonts, missing: Counter[str], *, base: str | None = None) -> str:
    """``text`` as reportlab paragraph markup in ``face``: XML-escaped, and each character the face has no glyph
    for in a face that has one (the regular face, or a CID font for CJK); characters none has are counted in
    ``missing`` and drawn in ``face`` (a blank box; extraction loses them). ``base`` is the paragraph style's font
    (default: the regular face): runs in it need no ``<font>`` tag."""
    runs: list[list[str]] = []  # [font, text]
    for c in visual_order(text):
        font = face
        if not c.isspace() and not fonts.has(face, c):
            if fonts.has(fonts.regular, c):
                font = fonts.regular
            elif (cid := _cid_font(c)) is not None:
                font = cid
            else:
                missing[c] += 1
        if runs and runs[-1][0] == font:
            runs[-1][1] += c
        else:
            runs.append([font, c])
    _widen_single_cid_runs(runs)
    return "".join(
        escape(chunk) if font == (base or fonts.regular) else f'<font name="{font}">{escape(chunk)}</font>'
        for font, chunk in runs
    )


def _widen_single_cid_runs(runs: list[list[str]]) -> None:
    """Give a one-character CID-font run a neighbouring ASCII character: PDFium (pypdfium2 5) drops the character of
    a text object that holds a single character of a non-embedded CID font, so ``(林)`` is drawn as ``(`` + ``林)``.
    """
    cids = set(CID_FONTS.values())
    for i, (font, chunk) in enumerate(runs):
        if font not in cids or len(chunk) != 1:
            continue
        after = runs[i + 1][1] if i + 1 < len(runs) else ""
        before = runs[i - 1][1] if i > 0 else ""
        if after and after[0].isascii() and not after[0].isspace():
            runs[i][1] += after[0]
            runs[i + 1][1] = after[1:]
        elif before and before[-1].isascii() and not before[-1].isspace():
            runs[i][1] = before[-1] + chunk
            runs[i - 1][1] = before[:-1]
        elif after and after[0].isascii():
            runs[i][1] += after[0]
            runs[i + 1][1] = after[1:]
    runs[:] = [r for r in runs if r[1]]


def render_inline(
    children: Sequence[Any], fonts: Fonts, missing: Counter[str], *, bold: bool = False
) -> tuple[str, str]:
    """An inline token's children as (reportlab markup, the text drawn in logical order); ``bold``: the paragraph's
    style is the bold face (headings, table header cells)."""
    markup: list[str] = []
    plain: list[str] = []
    strong = 1 if bold else 0
    base = fonts.bold if bold else fonts.regular
    em = 0
    link = 0
    for tok in children:
        kind = tok.type
        if kind in ("text", "code_inline"):
            face = fonts.face(bold=strong > 0, italic=em > 0, mono=kind == "code_inline")
            piece = font_markup(tok.content, face, fonts, missing, base=base)
            if link:
                piece = f'<font color="{LINK_COLOR}">{piece}</font>'
            markup.append(piece)
            plain.append(tok.content)
        elif kind in ("softbreak",):
            markup.append(" ")
            plain.append(" ")
        elif kind == "hardbreak":
            markup.append("<br/>")
            plain.append("\n")
        elif kind == "strong_open":
            strong += 1
        elif kind == "strong_close":
            strong -= 1
        elif kind == "em_open":
            em += 1
        elif kind == "em_close":
            em -= 1
        elif kind == "link_open":
            link += 1
        elif kind == "link_close":
            link -= 1
        elif kind == "image":  # its alt text, in italics
            alt = "".join(c.content for c in (tok.children or []) if c.type in ("text", "code_inline"))
            if alt:
                markup.append(font_markup(alt, fonts.face(bold=strong > 0, italic=True), fonts, missing, base=base))
                plain.append(alt)
        # html_inline: tags are not shown
    return "".join(markup), "".join(plain)


# ------------------------------------------------------------------------------------------------------ render


@dataclass
class Block:
    """A rendered block: its Markdown source range and the text drawn for it (in logical order)."""

    md_start: int
    md_end: int
    drawn: str


@dataclass
class Rendered:
    pdf: bytes
    blocks: list[Block]
    title: str
    headings: list[tuple[int, str]]
    """(level, title) of every heading, in order."""
    missing: Counter[str]


def line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(m.end() for m in re.finditer("\n", text))
    return starts


def render_markdown(md_text: str, *, title: str, fonts: Fonts | None = None) -> Rendered:
    """Render a Markdown document as a PDF (see the module doc)."""
    from markdown_it import MarkdownIt
    from reportlab.lib import colors
    from reportlab.lib.enums import TA_LEFT
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import cm
    from reportlab.platypus import (
        BaseDocTemplate,
        Frame,
        PageTemplate,
        Paragraph,
        Preformatted,
        Spacer,
        Table,
        TableStyle,
    )
    from reportlab.platypus.flowables import HRFlowable

    fonts = fonts or load_fonts()
    tokens = MarkdownIt("commonmark").enable("table").parse(md_text)
    starts = [*line_starts(md_text), len(md_text)]

    def md_range(tok: Any) -> tuple[int, int]:
        first, last = tok.map if tok.map else (0, 0)
        return starts[min(first, len(starts) - 1)], starts[min(last, len(starts) - 1)]

    common = {"hyphenationLang": "", "embeddedHyphenation": 0, "uriWasteReduce": 0, "splitLongWords": 0}
    body = ParagraphStyle(
        "body",
        fontName=fonts.regular,
        fontSize=BODY_SIZE,
        leading=BODY_LEADING,
        spaceAfter=6,
        alignment=TA_LEFT,
        **common,
    )
    headings_style = {
        level: ParagraphStyle(
            f"h{level}",
            parent=body,
            fontName=fonts.bold,
            fontSize=size,
            leading=size * 1.25,
            spaceBefore=10 if level > 1 else 0,
            spaceAfter=6,
            keepWithNext=1,
        )
        for level, size in HEADING_SIZES.items()
    }
    code_style = ParagraphStyle(
        "code", parent=body, fontName=fonts.mono, fontSize=9, leading=11.5, leftIndent=12, spaceAfter=8
    )
    cell_style = ParagraphStyle("cell", parent=body, fontSize=9.5, leading=12, spaceAfter=0)
    head_cell_style = ParagraphStyle("headcell", parent=cell_style, fontName=fonts.bold)

    width, height = A4
    margin = MARGIN_CM * cm
    frame_width = width - 2 * margin
    story: list[Any] = []
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []
    missing: Counter[str] = Counter()
    lists: list[dict[str, Any]] = []  # open lists: {"ordered", "next", "tight"}
    item_first = False  # the next paragraph is the first of a list item (it gets the bullet)
    quote = 0
    outline_level = -1
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        kind = tok.type
        if kind == "heading_open":
            level = int(tok.tag[1])
            inline = tokens[i + 1]
            markup, plain = render_inline(inline.children or [], fonts, missing, bold=True)
            text = " ".join(plain.split())
            outline_level = min(level - 1, outline_level + 1)
            flow = Paragraph(markup, headings_style[level])
            flow._outline = (text, outline_level, f"h{len(headings)}")  # type: ignore[attr-defined]
            story.append(flow)
            headings.append((level, text))
            start, end = md_range(tok)
            blocks.append(Block(start, end, plain))
            i += 3
            continue
        if kind == "paragraph_open":
            inline = tokens[i + 1]
            markup, plain = render_inline(inline.children or [], fonts, missing)
            indent = 18.0 * (len(lists) + quote)
            style = ParagraphStyle(
                f"p{len(lists)}.{quote}",
                parent=body,
                leftIndent=indent,
                bulletIndent=max(0.0, indent - 12),
                textColor=colors.HexColor("#333333") if quote else colors.black,
                spaceAfter=2 if lists and lists[-1]["tight"] else 6,
            )
            bullet = None
            if lists and item_first:
                top = lists[-1]
                bullet = f"{top['next']}." if top["ordered"] else ("•" if len(lists) % 2 else "◦")
                top["next"] += 1
                item_first = False
            story.append(Paragraph(markup, style, bulletText=bullet))
            start, end = md_range(tok)
            blocks.append(Block(start, end, f"{bullet} {plain}" if bullet else plain))
            i += 3
            continue
        if kind in ("bullet_list_open", "ordered_list_open"):
            first = int(tok.attrs.get("start", 1) or 1) if kind == "ordered_list_open" else 1
            tight = any(t.type == "paragraph_open" and t.hidden for t in tokens[i + 1 : i + 4])
            lists.append({"ordered": kind == "ordered_list_open", "next": first, "tight": tight})
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            if not lists:
                story.append(Spacer(1, 4))
        elif kind == "list_item_open":
            item_first = True
        elif kind == "blockquote_open":
            quote += 1
        elif kind == "blockquote_close":
            quote -= 1
        elif kind in ("fence", "code_block"):
            drawn = wrap_code(tok.content.rstrip("\n"), int((frame_width - 12) / (0.602 * 9)))
            story.append(Preformatted(drawn, code_style))
            start, end = md_range(tok)
            blocks.append(Block(start, end, drawn))
        elif kind == "hr":
            story.append(HRFlowable(width="100%", thickness=0.5, color=colors.grey, spaceBefore=4, spaceAfter=8))
        elif kind == "html_block":
            text = " ".join(re.sub(r"<[^>]*>", " ", tok.content).split())
            if text:
                story.append(Paragraph(font_markup(text, fonts.regular, fonts, missing), body))
                start, end = md_range(tok)
                blocks.append(Block(start, end, text))
        elif kind == "table_open":
            j = i
            rows: list[list[Any]] = []
            texts: list[str] = []
            head_rows = 0
            while tokens[j].type != "table_close":
                t = tokens[j]
                if t.type == "tr_open":
                    rows.append([])
                elif t.type in ("th_open", "td_open"):
                    cell = tokens[j + 1]
                    header = t.type == "th_open"
                    markup, plain = render_inline(cell.children or [], fonts, missing, bold=header)
                    rows[-1].append(Paragraph(markup, head_cell_style if header else cell_style))
                    texts.append(plain)
                    if header and len(rows) > head_rows:
                        head_rows = len(rows)
                j += 1
            columns = max((len(r) for r in rows), default=1)
            for r in rows:
                r.extend(Paragraph("", cell_style) for _ in range(columns - len(r)))
            table = Table(rows, colWidths=[frame_width / columns] * columns, repeatRows=head_rows)
            table.setStyle(
                TableStyle(
                    [
                        ("GRID", (0, 0), (-1, -1), 0.4, colors.grey),
                        ("VALIGN", (0, 0), (-1, -1), "TOP"),
                        ("BACKGROUND", (0, 0), (-1, head_rows - 1), colors.HexColor("#eeeeee")),
                    ]
                    if head_rows
                    else [("GRID", (0, 0), (-1, -1), 0.4, colors.grey), ("VALIGN", (0, 0), (-1, -1), "TOP")]
                )
            )
            story.extend([table, Spacer(1, 8)])
            start, end = md_range(tok)
            blocks.append(Block(start, end, " ".join(texts)))
            i = j + 1
            continue
        i += 1

    class Doc(BaseDocTemplate):
        def afterFlowable(self, flowable: Any) -> None:  # reportlab's hook
            mark = getattr(flowable, "_outline", None)
            if mark is None:
                return
            text, level, key = mark
            top = self.frame._y + flowable.height + flowable.getSpaceAfter()  # the heading's top on the page
            self.canv.bookmarkHorizontalAbsolute(key, top)
            self.canv.addOutlineEntry(text, key, level=level, closed=False)

    buf = io.BytesIO()
    doc = Doc(
        buf,
        pagesize=A4,
        leftMargin=margin,
        rightMargin=margin,
        topMargin=margin,
        bottomMargin=margin,
        title=title,
        author="Wikipedia contributors",
        subject=f"{title} (rendered from Markdown for es_rag evaluation)",
        creator="es_rag scripts/pdf-eval-set.py",
        invariant=1,
    )
    frame = Frame(margin, margin, frame_width, height - 2 * margin, id="body")
    doc.addPageTemplates([PageTemplate(id="page", frames=[frame], onPage=_show_outline if headings else _noop)])
    doc.build(story or [Spacer(1, 1)])
    return Rendered(buf.getvalue(), blocks, title, headings, missing)


def _show_outline(canvas: Any, doc: Any) -> None:
    canvas.showOutline()  # a viewer opens the PDF with its outline panel shown


def _noop(canvas: Any, doc: Any) -> None:
    return None


def wrap_code(code: str, width: int) -> str:
    """Code lines longer than ``width`` broken at spaces (never inside a word, so no character is added)."""
    out: list[str] = []
    for line in code.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip(" "))
        out.extend(
            textwrap.wrap(
                line,
                width=max(width, 20),
                subsequent_indent=" " * indent,
                break_long_words=False,
                break_on_hyphens=False,
                drop_whitespace=True,
            )
            or [line]
        )
    return "\n".join(out)


def doc_title(md_text: str, stem: str) -> str:
    m = re.search(r"^ {0,3}#[ \t]+(.+?)[ \t#]*$", md_text, re.MULTILINE)
    return m.group(1).strip() if m else stem.replace("_", " ")


# --------------------------------------------------------------------------------------------------- alignment


def collapse(text: str) -> str:
    """Whitespace runs as one space, no leading or trailing whitespace."""
    return " ".join(text.split())


def visible(text: str) -> str:
    """:func:`collapse` without invisible format characters (zero-width spaces and joiners, direction marks)."""
    return collapse("".join(c for c in text if unicodedata.category(c) != "Cf"))


@dataclass
class Alignment:
    """Markdown offsets to PDF text ranges, through the text drawn for each block (non-whitespace characters).

    ``md_lo[k]:md_hi[k]`` are the drawn characters Markdown character ``k`` became (``-1`` when it became none: Markdown
    syntax or whitespace); ``pdf_lo[r]:pdf_hi[r]`` the PDF text range drawn character ``r`` was extracted as (``-1``
    when the extraction lost it).
    """

    md_text: str
    pdf_text: str
    md_lo: list[int]
    md_hi: list[int]
    pdf_lo: list[int]
    pdf_hi: list[int]
    lost: str = ""
    """Drawn characters the extraction lost or changed (for the report)."""


def _opcodes(a: str, b: str) -> list[tuple[str, int, int, int, int]]:
    if a == b:
        return [("equal", 0, len(a), 0, len(b))] if a else []
    return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def align(md_text: str, blocks: Sequence[Block], pdf_text: str) -> Alignment:
    """Align a Markdown document, the blocks drawn from it and the PDF's extracted text (see :class:`Alignment`)."""
    md_lo = [-1] * len(md_text)
    md_hi = [-1] * len(md_text)
    drawn: list[str] = []
    spans: list[tuple[int, int]] = []  # drawn range of each block
    for block in blocks:
        where = [k for k in range(block.md_start, min(block.md_end, len(md_text))) if not md_text[k].isspace()]
        source = "".join(md_text[k] for k in where)
        text = "".join(c for c in block.drawn if not c.isspace())
        base = len(drawn)
        drawn.extend(text)
        spans.append((base, len(drawn)))
        for op, a1, a2, b1, b2 in _opcodes(source, text):
            if op == "equal":
                for d in range(a2 - a1):
                    md_lo[where[a1 + d]] = base + b1 + d
                    md_hi[where[a1 + d]] = base + b1 + d + 1
            elif op == "replace":  # e.g. an entity or escape drawn as its character: the group maps as a whole
                for k in where[a1:a2]:
                    md_lo[k], md_hi[k] = base + b1, base + b2
    offsets = [k for k, c in enumerate(pdf_text) if not c.isspace()]
    extracted = "".join(pdf_text[k] for k in offsets)
    all_drawn = "".join(drawn)
    pdf_lo = [-1] * len(drawn)
    pdf_hi = [-1] * len(drawn)
    lost: list[str] = []
    cursor = 0
    for start, end in spans:
        text = all_drawn[start:end]
        if not text:
            continue
        slack = 64 + len(text) // 4
        at = extracted.find(text, cursor, cursor + len(text) + slack)
        if at >= 0:
            for d in range(len(text)):
                pdf_lo[start + d] = offsets[at + d]
                pdf_hi[start + d] = offsets[at + d] + 1
            cursor = at + len(text)
            continue
        window = extracted[cursor : cursor + len(text) + slack]
        last = 0
        for op, a1, a2, b1, b2 in _opcodes(text, window):
            if op == "equal":
                for d in range(a2 - a1):
                    pdf_lo[start + a1 + d] = offsets[cursor + b1 + d]
                    pdf_hi[start + a1 + d] = offsets[cursor + b1 + d] + 1
                last = b2
            elif op == "replace":
                lost.append(text[a1:a2])
                for r in range(start + a1, start + a2):
                    pdf_lo[r], pdf_hi[r] = offsets[cursor + b1], offsets[cursor + b2 - 1] + 1
                last = b2
            elif op == "delete":
                lost.append(text[a1:a2])
        cursor += last
    return Alignment(md_text, pdf_text, md_lo, md_hi, pdf_lo, pdf_hi, "".join(lost))


@dataclass
class Mapped:
    """A gold span mapped into the PDF text: ``start``/``end`` index ``PdfText.text`` (-1 when unlocated)."""

    start: int
    end: int
    result: str
    want: str
    got: str


def map_span(al: Alignment, start: int, end: int) -> Mapped:
    """Map the Markdown span ``[start, end)`` into the PDF text and verify it (see the module doc for results)."""
    md, pdf = al.md_text, al.pdf_text
    want = collapse(md[start:end])
    los: list[int] = []
    his: list[int] = []
    syntax: set[int] = set()
    for k in range(start, min(end, len(md))):
        if md[k].isspace():
            continue
        if al.md_lo[k] < 0:
            syntax.add(k)
            continue
        for r in range(al.md_lo[k], al.md_hi[k]):
            if al.pdf_lo[r] >= 0:
                los.append(al.pdf_lo[r])
                his.append(al.pdf_hi[r])
    if not los:
        return Mapped(-1, -1, "unlocated", want, "")
    lo, hi = min(los), max(his)
    got = collapse(pdf[lo:hi])
    if got == want:
        return Mapped(lo, hi, "exact", want, got)
    shown = collapse("".join(c for k, c in enumerate(md[start:end], start) if k not in syntax))
    if syntax and got == shown:
        return Mapped(lo, hi, "markdown-syntax", want, got)
    if visible(got) == visible(shown):
        return Mapped(lo, hi, "format-chars", want, got)
    target = visible(shown)
    reach = 2 * len(target) + 200
    region_lo, region_hi = max(0, lo - reach), min(len(pdf), hi + reach)
    if target:
        pattern = r"\s+".join(re.escape(w) for w in target.split())
        hits = list(re.finditer(pattern, pdf[region_lo:region_hi]))
        if hits:
            best = min(hits, key=lambda m: abs(region_lo + m.start() - lo))
            a, b = region_lo + best.start(), region_lo + best.end()
            return Mapped(a, b, "relocated", want, collapse(pdf[a:b]))
    found = _anagram(pdf, region_lo, region_hi, target, lo)
    if found is not None:
        a, b = found
        return Mapped(a, b, "reordered", want, collapse(pdf[a:b]))
    return Mapped(lo, hi, "differs", want, got)


def _anagram(pdf: str, region_lo: int, region_hi: int, target: str, near: int) -> tuple[int, int] | None:
    """The PDF range nearest ``near`` whose visible characters are those of ``target`` in some order."""
    want = Counter(c for c in target if not c.isspace())
    size = sum(want.values())
    if size == 0:
        return None
    where = [k for k in range(region_lo, region_hi) if not pdf[k].isspace() and unicodedata.category(pdf[k]) != "Cf"]
    best: tuple[int, int] | None = None
    for i in range(len(where) - size + 1):
        if Counter(pdf[k] for k in where[i : i + size]) == want:
            a, b = where[i], where[i + size - 1] + 1
            if best is None or abs(a - near) < abs(best[0] - near):
                best = (a, b)
    return best


# ------------------------------------------------------------------------------------------------------ the set


@dataclass
class DocReport:
    name: str
    pages: int
    chars: int
    headings: int
    headings_found: int
    spans: int
    results: Counter[str]
    missing_glyphs: str
    lost: str
    warnings: tuple[str, ...]
    seconds: float


def read_golden(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def order_docs(docs: Sequence[str], questions: Sequence[dict[str, Any]]) -> list[str]:
    """Documents with questions first, in the order the golden file first names them, then the others by name."""
    first: dict[str, int] = {}
    for q in questions:
        for name in [*q.get("gold", []), *(s["source_id"] for s in q.get("spans", []))]:
            first.setdefault(name, len(first))
    known = set(docs)
    asked = sorted((n for n in first if n in known), key=first.__getitem__)
    return asked + sorted(n for n in docs if n not in first)


def pdf_name(name: str) -> str:
    return name[: -len(".md")] + ".pdf" if name.endswith(".md") else name + ".pdf"


def build(src: Path, out: Path, *, limit: int | None = None, font_dir: str | None = None) -> dict[str, Any]:
    """Render, extract and map (see the module doc); returns the summary written to MAPPING.md."""
    t0 = time.perf_counter()
    fonts = load_fonts(font_dir)
    questions = read_golden(src / "golden.jsonl")
    names = sorted(p.name for p in (src / "docs").glob("*.md"))
    names = order_docs(names, questions)[: limit if limit is not None else None]
    chosen = set(names)
    questions = [
        q
        for q in questions
        if set(q.get("gold", [])) <= chosen and all(s["source_id"] in chosen for s in q.get("spans", []))
    ]
    by_doc: dict[str, list[tuple[int, int]]] = {}
    for qi, q in enumerate(questions):
        for si, s in enumerate(q.get("spans", [])):
            by_doc.setdefault(s["source_id"], []).append((qi, si))
    (out / "docs").mkdir(parents=True, exist_ok=True)
    mapped: dict[tuple[int, int], Mapped] = {}
    reports: list[DocReport] = []
    for n, name in enumerate(names, 1):
        started = time.perf_counter()
        md_text = (src / "docs" / name).read_text(encoding="utf-8")
        title = doc_title(md_text, Path(name).stem)
        rendered = render_markdown(md_text, title=title, fonts=fonts)
        target = out / "docs" / pdf_name(name)
        target.write_bytes(rendered.pdf)
        pdf: PdfText = extract_pdf(rendered.pdf, name=f"docs/{pdf_name(name)}")
        al = align(md_text, rendered.blocks, pdf.text)
        results: Counter[str] = Counter()
        for qi, si in by_doc.get(name, []):
            s = questions[qi]["spans"][si]
            m = map_span(al, int(s["start"]), int(s["end"]))
            mapped[(qi, si)] = m
            results[m.result] += 1
        titles = [t for _, t in rendered.headings]
        found = sum(1 for h in pdf.headings if h.found)
        report = DocReport(
            name=name,
            pages=len(pdf.pages),
            chars=len(pdf.text),
            headings=len(titles),
            headings_found=found if [h.title for h in pdf.headings] == titles else -1,
            spans=sum(results.values()),
            results=results,
            missing_glyphs="".join(sorted(rendered.missing)),
            lost=al.lost,
            warnings=pdf.warnings,
            seconds=time.perf_counter() - started,
        )
        reports.append(report)
        bad = sum(v for k, v in results.items() if k not in EXACT)
        print(
            f"[{n}/{len(names)}] {name}: {report.pages} pages, {report.chars} chars, {report.spans} spans"
            f" ({bad} not exact), {report.seconds:.1f}s",
            flush=True,
        )
    golden: list[dict[str, Any]] = []
    dropped_questions = 0
    for qi, q in enumerate(questions):
        spans = []
        for si, s in enumerate(q.get("spans", [])):
            m = mapped[(qi, si)]
            if m.result != "unlocated":
                spans.append({**s, "source_id": pdf_name(s["source_id"]), "start": m.start, "end": m.end})
        if not spans and q.get("spans"):
            dropped_questions += 1
            continue
        golden.append({**q, "gold": [pdf_name(g) for g in q.get("gold", [])], "spans": spans})
    with (out / "golden.jsonl").open("w", encoding="utf-8") as f:
        for q in golden:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    for extra in sorted([*src.glob("SOURCE.md"), *src.glob("LICENSE*")]):
        shutil.copyfile(extra, out / extra.name)
    totals: Counter[str] = Counter()
    for r in reports:
        totals.update(r.results)
    summary: dict[str, Any] = {
        "documents": len(reports),
        "pages": sum(r.pages for r in reports),
        "questions": len(questions),
        "questions_written": len(golden),
        "questions_dropped": dropped_questions,
        "spans": sum(totals.values()),
        "results": {k: totals[k] for k in RESULTS},
        "mapped_exact": sum(totals[k] for k in EXACT),
        "kept_inexact": sum(totals[k] for k in RESULTS if k not in EXACT and k != "unlocated"),
        "unmapped": totals["unlocated"],
        "headings": sum(r.headings for r in reports),
        "headings_found": sum(max(r.headings_found, 0) for r in reports),
        "outline_mismatch": [r.name for r in reports if r.headings_found < 0],
        "font_warning": fonts.warning,
    }
    (out / "MAPPING.md").write_text(mapping_md(src, summary, reports, questions, mapped), encoding="utf-8")
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    return summary


def mapping_md(
    src: Path,
    summary: dict[str, Any],
    reports: Sequence[DocReport],
    questions: Sequence[dict[str, Any]],
    mapped: dict[tuple[int, int], Mapped],
) -> str:
    """MAPPING.md: how the set was made and what mapped (no timings, so the file is the same on every run)."""
    lines = [
        f"# PDF version of `{src.name}`: rendering and span mapping",
        "",
        "Made by `scripts/pdf-eval-set.py` (see its module doc): every `docs/X.md` of the source set rendered to "
        "`docs/X.pdf` with reportlab (A4, 10.5 pt DejaVu Sans, headings as bold paragraphs and outline entries, "
        "no hyphenation, no page furniture), then extracted with `es_rag.ingest.pdf.extract_pdf`; `golden.jsonl` "
        "gives every gold span as `[start, end)` offsets into the extracted text (`PdfText.text`), `source_id` and "
        "`gold` renamed `X.md` -> `X.pdf`. `SOURCE.md` describes the Markdown set the PDFs were made from; its "
        "`answers.jsonl` (offsets into the Markdown paragraphs) is not carried over.",
        "",
        "## Counts",
        "",
        "| | value |",
        "| --- | --- |",
        f"| documents | {summary['documents']} |",
        f"| pages | {summary['pages']} |",
        f"| questions (of these documents) | {summary['questions']} |",
        f"| questions written | {summary['questions_written']} |",
        f"| questions left out (no span located) | {summary['questions_dropped']} |",
        f"| spans | {summary['spans']} |",
        f"| spans mapped exactly | {summary['mapped_exact']} |",
        f"| spans kept, text not exact | {summary['kept_inexact']} |",
        f"| spans not located (left out) | {summary['unmapped']} |",
        f"| headings (outline entries) | {summary['headings']} |",
        f"| headings placed on their title by extract_pdf | {summary['headings_found']} |",
        "",
        "Verification results (a span's PDF text against its Markdown text, whitespace runs collapsed):",
        "",
        "| result | spans | meaning |",
        "| --- | --- | --- |",
    ]
    meaning = {
        "exact": "the same text",
        "markdown-syntax": "the same once the Markdown syntax characters in the span (not drawn) are left out",
        "format-chars": "the same once invisible format characters (U+200B..U+200F, ...) are left out",
        "relocated": "the text found near the aligned range, and the span moved there",
        "reordered": "the same characters in another order (right-to-left text): the range they take",
        "differs": "located, text differs (kept; listed below)",
        "unlocated": "no character aligned (left out of golden.jsonl)",
    }
    for k in RESULTS:
        lines.append(f"| {k} | {summary['results'][k]} | {meaning[k]} |")
    if summary["font_warning"]:
        lines += ["", f"Font warning: {summary['font_warning']}"]
    if summary["outline_mismatch"]:
        lines += ["", "Outline titles that extract_pdf did not give back: " + ", ".join(summary["outline_mismatch"])]
    inexact = [(qi, si, m) for (qi, si), m in sorted(mapped.items()) if m.result not in EXACT]
    if inexact:
        lines += ["", "## Spans not mapped exactly", "", "| question | source | result | Markdown | PDF text |"]
        lines.append("| --- | --- | --- | --- | --- |")
        for qi, si, m in inexact:
            q = questions[qi]
            source = q["spans"][si]["source_id"]
            lines.append(f"| {q['id']} | {source} | {m.result} | {_cell(m.want)} | {_cell(m.got)} |")
    lines += ["", "## Documents", "", "| document | pages | characters | headings | spans | not exact | notes |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for r in reports:
        notes = []
        if r.missing_glyphs:
            notes.append(f"no glyph for {_cell(r.missing_glyphs)}")
        if r.lost:
            notes.append(f"drawn but not extracted as drawn: {_cell(r.lost[:60])}")
        notes.extend(_cell(w) for w in r.warnings)
        bad = sum(v for k, v in r.results.items() if k not in EXACT)
        lines.append(
            f"| {pdf_name(r.name)} | {r.pages} | {r.chars} | {r.headings} | {r.spans} | {bad} | {'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="the Markdown set (docs/*.md, golden.jsonl)")
    parser.add_argument("out", type=Path, help="where the PDF set goes")
    parser.add_argument("--limit", type=int, default=None, help="first N documents (those with questions first)")
    parser.add_argument("--font-dir", default=None, help="a folder holding DejaVuSans.ttf (default: the usual ones)")
    args = parser.parse_args(argv)
    summary = build(args.src, args.out, limit=args.limit, font_dir=args.font_dir)
    results = ", ".join(f"{k} {v}" for k, v in summary["results"].items() if v)
    print(
        f"{summary['documents']} documents, {summary['pages']} pages, {summary['questions_written']} of "
        f"{summary['questions']} questions written; spans: {summary['spans']} ({results}); exact "
        f"{summary['mapped_exact']}, kept inexact {summary['kept_inexact']}, unmapped {summary['unmapped']}; "
        f"headings {summary['headings_found']}/{summary['headings']} placed; {summary['seconds']} s -> {args.out}"
    )
    return summary


if __name__ == "__main__":
    main()
