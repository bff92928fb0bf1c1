"""Markdown to PDF with reportlab, for ``scripts/pdf-eval-set.py``: the fonts (DejaVu, CID fonts for CJK, Helvetica as
a fallback), inline text as reportlab markup (a face with a glyph for every character, right-to-left runs in visual
order) and the document (headings with outline entries, paragraphs, lists, tables, code), with the text drawn for each
Markdown block (what :mod:`pdf_eval_set.align` aligns). Step 1 of the script's module doc describes the rendering.
"""

from __future__ import annotations

import io
import re
import sys
import textwrap
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

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
    """Render a Markdown document as a PDF (see the module doc and step 1 of ``scripts/pdf-eval-set.py``'s)."""
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
