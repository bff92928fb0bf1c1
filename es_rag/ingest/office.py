"""Word (.docx) and OpenDocument text (.odt) extraction: one source text per document, laid out as Markdown.

:func:`extract_office` lays a document's body out as Markdown once; that text is *the* source text of the document
(chunk offsets index it, as :attr:`es_rag.ingest.pdf.PdfText.text` does for a PDF), and the structure-aware Markdown
chunker reads its headings, lists and tables. python-docx (MIT) opens a ``.docx`` package and odfpy (Apache-2.0) an
``.odt``; their XML (body, styles, numbering) is walked directly, so runs inside hyperlinks, fields, content controls
and tracked insertions keep their text.

The body's blocks in document order (paragraphs and tables interleaved), separated by a blank line:

* Headings: Word styles ``Heading N`` (or based on one) or an ``outlineLvl`` (the paragraph's, else its styles'),
  ODF ``text:h`` with its ``text:outline-level``. A ``Title`` paragraph (Word style, ODF paragraph style) is level 1,
  and when a document has one every heading moves one level down (``Heading 1`` -> ``##``); levels stop at 6.
* Paragraphs: their runs' text (hyperlink text kept, targets dropped); a line break is a newline inside the
  paragraph, a tab a space; lines are stripped, empty lines and paragraphs without text are left out.
* Lists: Word numbering (``numPr``: the paragraph's, else its style's; ``List Bullet N`` / ``List Number N`` styles
  add N-1 levels) and ODF ``text:list`` nesting. ``- item`` for bullets (formats ``bullet``/``none``, ODF bullet and
  image levels), ``N. item`` for any other format, N counted per Word list (``numId``, from its ``start``) or per ODF
  list; nested items are indented to their parent's text, items of a run of lists have no blank line between them
  (but before a nested ordered list starting at N > 1, which CommonMark lets interrupt no paragraph).
* Tables: GFM tables, the first row the header row; a cell's paragraphs (and nested tables) on one line; a merged
  cell's text is in its first cell and the cells it covers are empty; rows are padded to the table's width; a
  table without text is left out.
* Text as written: no backslash is added to a paragraph, list item or heading (``# apt-get install x`` in a paragraph
  stays so, and reaches BM25, the models and the LLM's context so). Where Markdown would read such a line as
  structure, the escapes that keep it text are recorded beside the text (``OfficeText.escapes``) and only the
  chunker's Markdown rendering has them (:mod:`es_rag.ingest.office_render`); a ``|`` inside a table cell is ``\\|``.
* Line ends are ``\\n``, no line ends in spaces, the text ends with one newline.

Left out, each kind named once in ``warnings`` with its count: images, other drawings (text boxes, shapes, charts,
embedded objects), footnotes and endnotes (their text is not appended), comments, equations. Headers, footers and
Word's hidden text (``vanish``) are left out silently. Tracked changes read as accepted (insertions kept, deletions
and deleted table rows dropped), with a warning.

An empty file, one that is not a ZIP package of the kind (a ``.doc``, RTF or text file named ``.docx``), a damaged
package (an ODF package's XML parts are parsed with expat first: odfpy would print a part it cannot parse to stdout
and go on without it), an encrypted document (an OLE compound file holding an ``EncryptedPackage``, an ODF package
whose manifest has ``encryption-data``) and a document without text raise :class:`~es_rag.errors.InputError` naming
the document; no library exception escapes.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from xml.parsers import expat

from es_rag.errors import InputError
from es_rag.ingest.odf_package import missing_parts, without_missing_parts
from es_rag.ingest.office_render import Block, flat, render

OFFICE_SUFFIXES = {".docx": "docx", ".odt": "odt"}
"""File suffix -> ``kind`` of :func:`extract_office`."""

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED = "the document is password-protected (encrypted); save it without a password"
_MAX_REPEAT = 256
"""Largest ODF ``number-columns-repeated`` / ``number-rows-repeated`` honoured (spreadsheet-like padding)."""
_LEFT_OUT = {  # counts key -> what, and a note for the warning
    "image": ("embedded image", ""),
    "drawing": ("drawing object", " (text boxes, shapes, charts, embedded objects: their text is not read)"),
    "note": ("footnote/endnote", ""),
    "comment": ("comment", ""),
    "equation": ("equation", ""),
    "missing part": ("listed part", " (in the manifest, not in the package: read without them, as LibreOffice does)"),
}
_SPACE_RE = re.compile(r"[ \t\r\n]+")
_HEADING_STYLE_RE = re.compile(r"heading ([1-9])")
_LIST_STYLE_RE = re.compile(r"list (bullet|number)(?: ([2-9]))?")


@dataclass(frozen=True)
class OfficeText:
    """A Word or OpenDocument text laid out as Markdown (see the module doc).

    Args:
        name: The document (path or source id), as errors and warnings name it.
        text: The source text, as the document wrote it; chunk offsets index this string.
        title: The document's title property (core properties / ``dc:title``), when set and not blank.
        warnings: What was left out (images, drawings, notes, comments, equations) and tracked changes, each once.
        escapes: Offsets of ``text`` before which its Markdown rendering has a backslash
            (:mod:`es_rag.ingest.office_render`).
    """

    name: str
    text: str
    title: str | None
    warnings: tuple[str, ...] = ()
    escapes: tuple[int, ...] = ()

    @property
    def markdown(self) -> str:
        """The Markdown rendering the chunker reads the structure from: ``text`` with its escapes."""
        from es_rag.chunking.markdown import with_escapes

        return with_escapes(self.text, self.escapes)


def _warnings(counts: Counter[str]) -> tuple[str, ...]:
    out = [f"{_n(counts[k], what)} skipped{note}" for k, (what, note) in _LEFT_OUT.items() if counts[k]]
    changes = [f"{_n(counts['inserted'], 'insertion')} kept", f"{_n(counts['deleted'], 'deletion')} dropped"]
    if counts["inserted"] or counts["deleted"]:
        out.append("tracked changes read as accepted: " + ", ".join(c for c in changes if not c.startswith("0 ")))
    return tuple(out)


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'s' * (count != 1)}"


def extract_office(data: bytes, *, name: str, kind: str) -> OfficeText:
    """Render a Word or OpenDocument text document to its Markdown source text (see the module doc).

    Args:
        data: The file's bytes.
        name: The document (path or source id), named by errors and warnings.
        kind: ``docx`` or ``odt`` (the values of :data:`OFFICE_SUFFIXES`).

    Raises:
        InputError: An unknown kind, an empty file, not a document of ``kind``, a damaged or encrypted document, or
            a document without any text.
    """
    if kind not in ("docx", "odt"):
        raise InputError(name, "format", f"unknown office document kind {kind!r}; expected docx or odt")
    label = "Word document (.docx)" if kind == "docx" else "OpenDocument text (.odt)"
    if not data.strip():
        raise InputError(name, kind, "the file is empty")
    if data.startswith(_OLE_MAGIC):
        if "EncryptedPackage".encode("utf-16-le") in data:
            raise InputError(name, "encryption", _ENCRYPTED)
        raise InputError(name, kind, f"not a {label}: an OLE compound file (a Word 97-2003 .doc?); save it as .{kind}")
    if not zipfile.is_zipfile(io.BytesIO(data)):
        if data.startswith(b"PK"):  # the signature of a ZIP, whose directory (at its end) is missing
            raise InputError(name, kind, f"a truncated or damaged {label}: its ZIP package has no central directory")
        raise InputError(name, kind, f"not a {label}: not a ZIP package (it starts with {data[:8]!r})")
    counts: Counter[str] = Counter()
    try:
        blocks, title = _read(data, name, kind, label, counts)
        rendered = render(blocks)
    except InputError:
        raise
    except Exception as exc:  # a damaged package: zipfile, lxml, SAX, odfpy and python-docx errors alike
        raise InputError(name, kind, f"cannot be read as a {label}: {type(exc).__name__}: {exc}") from None
    left_out = _warnings(counts)
    if not rendered.text:
        left = f" (left out: {'; '.join(left_out)})" if left_out else ""
        raise InputError(name, "text", f"the document has no text{left}")
    return OfficeText(name=name, text=rendered.text, title=title, warnings=left_out, escapes=rendered.escapes)


def _read(data: bytes, name: str, kind: str, label: str, counts: Counter[str]) -> tuple[list[Block], str | None]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = set(z.namelist())
        manifest = z.read("META-INF/manifest.xml") if "META-INF/manifest.xml" in names else b""
        mimetype = z.read("mimetype")[:80].decode("ascii", "replace").strip() if "mimetype" in names else ""
        xml_parts = {part: z.read(part) for part in ("content.xml", "styles.xml", "meta.xml") if part in names}
    main = "[Content_Types].xml" if kind == "docx" else "content.xml"
    if main not in names:
        like = "an OpenDocument file" if "content.xml" in names else "an Office Open XML file"
        hint = f" (it looks like {like})" if {"content.xml", "[Content_Types].xml"} & names else ""
        raise InputError(name, kind, f"not a {label}: a ZIP archive without {main}{hint}")
    if kind == "docx":
        return _docx(data, name, label, counts)
    if mimetype and not mimetype.startswith("application/vnd.oasis.opendocument.text"):
        raise InputError(name, kind, f"not a {label}: its mimetype is {mimetype!r}")
    if b"encryption-data" in manifest:
        raise InputError(name, "encryption", _ENCRYPTED)
    for part, xml in xml_parts.items():  # odfpy prints a part it cannot parse to stdout, and goes on without it
        try:
            parser = expat.ParserCreate()
            parser.EntityDeclHandler = _no_entities
            parser.Parse(xml, True)
        except expat.ExpatError as exc:
            raise InputError(name, kind, f"not a {label}: its {part} is damaged ({exc})") from None
    from odf import dc, office
    from odf.opendocument import load

    missing = missing_parts(manifest, names) if manifest else []
    if missing:  # listed, absent: LibreOffice opens such a package, odfpy stops at the first (odf_package.py)
        data, counts["missing part"] = without_missing_parts(data, missing), len(missing)
    document = load(io.BytesIO(data))
    bodies = document.getElementsByType(office.Text)  # (its .text is wrong when content.xml is indented)
    if not bodies:
        raise InputError(name, kind, f"not a {label}: no office:text body (content.xml or its manifest entry missing)")
    walker = _Odf(document, counts)
    blocks = [b for body in bodies for b in walker.blocks(_elements(body))]
    titles = [_odf_text(el, counts).strip() for el in document.getElementsByType(dc.Title)]
    return blocks, next((t for t in titles if t), None)


def _no_entities(*args: object) -> None:
    raise expat.ExpatError("XML entity declarations are refused (as defusedxml does)")


# -- Word (.docx) ----------------------------------------------------------------------------------------------

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_IMAGES = ("{http://schemas.openxmlformats.org/drawingml/2006/main}blip", "{urn:schemas-microsoft-com:vml}imagedata")
_W_SKIP = {_W + t for t in ("pPr", "rPr", "instrText", "delText", "sdtPr", "sdtEndPr", "sectPr", "tcPr", "tblPr")}
_W_DRAWINGS = {_W + "drawing", _W + "pict", _W + "object", _MC + "AlternateContent"}
_W_COUNTED = {_W + "footnoteReference": "note", _W + "endnoteReference": "note", _W + "commentReference": "comment"}
_W_COUNTED |= {_M + "oMath": "equation", _M + "oMathPara": "equation", _W + "altChunk": "drawing"}
_W_COUNTED |= {_W + "del": "deleted", _W + "moveFrom": "deleted"}
_W_INSERTED = {_W + "ins", _W + "moveTo"}
_W_WRAPPERS = {_W + "sdt", _W + "customXml", *_W_INSERTED}


def _val(el: Any, child: str, default: str | None = None) -> str | None:
    """The ``w:val`` of ``el``'s child ``w:<child>``: ``default`` without that child, ``""`` without its ``w:val``."""
    c = el.find(_W + child) if el is not None else None
    return default if c is None else c.get(_W + "val", "")


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _docx(data: bytes, name: str, label: str, counts: Counter[str]) -> tuple[list[Block], str | None]:
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    try:
        document = docx.Document(io.BytesIO(data))
    except ValueError as exc:  # another Office Open XML kind (.xlsx, .pptx)
        raise InputError(name, "docx", f"not a {label}: {exc}") from None
    part = document.part
    words = _Word(_related_xml(part, RT.STYLES), _related_xml(part, RT.NUMBERING), counts)
    blocks = list(words.blocks(document.element.find(_W + "body")))
    try:
        core = part.package.part_related_by(RT.CORE_PROPERTIES)
    except KeyError:  # python-docx would invent a default title ("Word Document") for it
        return blocks, None
    return blocks, (core.core_properties.title or "").strip() or None


def _related_xml(part: Any, reltype: str) -> Any:
    try:
        return getattr(part.part_related_by(reltype), "element", None)
    except KeyError:
        return None


class _Word:
    """Walks a Word body into blocks, with the document's styles and numbering definitions."""

    def __init__(self, styles: Any, numbering: Any, counts: Counter[str]) -> None:
        self.counts = counts
        self.styles: dict[str, Any] = {}
        self.default_style: str | None = None
        for s in styles.iterchildren(_W + "style") if styles is not None else ():
            if s.get(_W + "type") == "paragraph":
                self.styles[s.get(_W + "styleId", "")] = s
                if s.get(_W + "default") in ("1", "true", "on"):
                    self.default_style = s.get(_W + "styleId")
        self.formats: dict[tuple[str, int], tuple[str, int]] = {}  # (numId, ilvl) -> (numFmt, start)
        abstract = {
            a.get(_W + "abstractNumId"): {
                _int(lvl.get(_W + "ilvl"), 0): (_val(lvl, "numFmt") or "decimal", _int(_val(lvl, "start"), 1))
                for lvl in a.iterchildren(_W + "lvl")
            }
            for a in (numbering.iterchildren(_W + "abstractNum") if numbering is not None else ())
        }
        for num in numbering.iterchildren(_W + "num") if numbering is not None else ():
            levels = dict(abstract.get(_val(num, "abstractNumId"), {}))
            for o in num.iterchildren(_W + "lvlOverride"):
                ilvl = _int(o.get(_W + "ilvl"), 0)
                fmt, start = levels.get(ilvl, ("decimal", 1))
                levels[ilvl] = (fmt, _int(_val(o, "startOverride"), start))
            for ilvl, spec in levels.items():
                self.formats[num.get(_W + "numId", ""), ilvl] = spec
        self.counters: dict[str, dict[int, int]] = {}

    def blocks(self, parent: Any) -> Iterator[Block]:
        for el in parent.iterchildren() if parent is not None else ():
            tag = el.tag
            if tag == _W + "p":
                yield self.paragraph(el)
            elif tag == _W + "tbl":
                yield Block("table", rows=self.table(el))
            elif tag in _W_COUNTED:
                self.counts[_W_COUNTED[tag]] += 1
            elif tag in _W_WRAPPERS:
                self.counts["inserted"] += tag in _W_INSERTED
                yield from self.blocks(el.find(_W + "sdtContent") if tag == _W + "sdt" else el)

    def text(self, el: Any, acc: list[str] | None = None) -> str:
        acc = [] if acc is None else acc
        for ch in el.iterchildren():
            tag = ch.tag
            if not isinstance(tag, str) or tag in _W_SKIP:
                continue
            if tag == _W + "t":
                acc.append(ch.text or "")
            elif tag in (_W + "tab", _W + "ptab", _W + "br", _W + "cr", _W + "noBreakHyphen"):
                acc.append("-" if tag == _W + "noBreakHyphen" else "\t" if tag.endswith("tab") else "\n")
            elif tag == _W + "r" and _val(ch.find(_W + "rPr"), "vanish", "0") not in ("0", "false", "off"):
                continue  # hidden text
            elif tag == _MC + "AlternateContent" and ch.find(f".//{_W}drawing") is None:
                fallback = ch.find(_MC + "Fallback")
                self.text(ch if fallback is None else fallback, acc)
            elif tag in _W_DRAWINGS:
                image = tag != _W + "object" and any(True for _ in ch.iter(*_IMAGES))
                self.counts["image" if image else "drawing"] += 1
            elif tag in _W_COUNTED:
                self.counts[_W_COUNTED[tag]] += 1
            else:  # runs, hyperlinks, fields, content controls, smart tags, insertions
                self.counts["inserted"] += tag in _W_INSERTED
                self.text(ch, acc)
        return "".join(acc)

    def paragraph(self, p: Any) -> Block:
        text = self.text(p)
        p_pr = p.find(_W + "pPr")
        chain, sid = [], _val(p_pr, "pStyle") or self.default_style
        while sid and sid in self.styles and self.styles[sid] not in chain:  # the style, then its basedOn styles
            chain.append(self.styles[sid])
            sid = _val(self.styles[sid], "basedOn")
        for style in (None, *chain):  # the paragraph's own properties first
            style_name = (_val(style, "name") or "").lower()
            if style_name == "title":
                return Block("title", text)
            if m := _HEADING_STYLE_RE.fullmatch(style_name):
                return Block("h", text, int(m.group(1)))
            outline = _val(p_pr if style is None else style.find(_W + "pPr"), "outlineLvl")
            if outline is not None:  # 9: body text
                if (level := _int(outline, 9) + 1) > 9:
                    break
                return Block("h", text, level)
        return self._list_item(text, p_pr, chain) or Block("p", text)

    def _list_item(self, text: str, p_pr: Any, chain: list[Any]) -> Block | None:
        num_pr = p_pr.find(_W + "numPr") if p_pr is not None else None
        style_num = next((n for s in chain if (n := s.find(f"{_W}pPr/{_W}numPr")) is not None), None)
        num_id = _val(num_pr, "numId") or _val(style_num, "numId")
        if not num_id or num_id == "0":
            return None
        ilvl = _int(_val(num_pr, "ilvl") or _val(style_num, "ilvl"), 0)
        named = next((m for s in chain if (m := _LIST_STYLE_RE.fullmatch((_val(s, "name") or "").lower()))), None)
        fmt, start = self.formats.get((num_id, ilvl), ("", 1))
        ordered = fmt not in ("bullet", "none", "") or (not fmt and named is not None and named.group(1) == "number")
        levels = self.counters.setdefault(num_id, {})
        for deeper in [k for k in levels if k > ilvl]:
            del levels[deeper]
        levels[ilvl] = levels.get(ilvl, start - 1) + 1
        level = ilvl + (int(named.group(2) or 1) - 1 if named else 0)
        return Block("li", text, level, levels[ilvl] if ordered else None)

    def table(self, tbl: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        for tr in _w_children(tbl, "tr"):
            tr_pr = tr.find(_W + "trPr")
            if tr_pr is not None and tr_pr.find(_W + "del") is not None:
                self.counts["deleted"] += 1
                continue
            cells = [""] * _int(_val(tr_pr, "gridBefore"), 0)
            for tc in _w_children(tr, "tc"):
                tc_pr = tc.find(_W + "tcPr")
                merged = {_val(tc_pr, "vMerge", "restart"), _val(tc_pr, "hMerge", "restart")} != {"restart"}
                cells.append("" if merged else flat(self.blocks(tc)))
                cells.extend([""] * (_int(_val(tc_pr, "gridSpan"), 1) - 1))
            rows.append(cells + [""] * _int(_val(tr_pr, "gridAfter"), 0))
        return rows


def _w_children(el: Any, name: str) -> Iterator[Any]:
    """``el``'s ``w:<name>`` children, also those wrapped in content controls and custom XML."""
    for ch in el.iterchildren() if el is not None else ():
        if ch.tag == _W + name:
            yield ch
        elif ch.tag in (_W + "sdt", _W + "customXml"):
            yield from _w_children(ch.find(_W + "sdtContent") if ch.tag == _W + "sdt" else ch, name)


# -- OpenDocument text (.odt) ------------------------------------------------------------------------------------

_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
_ODT_SKIP = {(_OFFICE, "forms"), (_TEXT, "index-title-template")} | {
    (_TEXT, t) for t in ("tracked-changes", "sequence-decls", "variable-decls", "user-field-decls")
}
_ODT_CHARS = {(_TEXT, "tab"): "\t", (_TEXT, "line-break"): "\n"}
_ODT_COUNTED = {(_TEXT, "note"): "note", (_OFFICE, "annotation"): "comment"}


def _elements(el: Any) -> Iterator[Any]:
    for ch in el.childNodes if el is not None else ():
        if ch.nodeType == ch.ELEMENT_NODE:
            yield ch


def _attr(el: Any, ns: str, name: str) -> str | None:
    value = el.attributes.get((ns, name))
    return None if value is None else str(value)


def _odf_text(el: Any, counts: Counter[str], acc: list[str] | None = None) -> str:
    acc = [] if acc is None else acc
    for ch in el.childNodes:
        if ch.nodeType == ch.TEXT_NODE:
            acc.append(_SPACE_RE.sub(" ", ch.data))  # ODF collapses white space; text:s and text:tab are spelled out
        elif ch.nodeType != ch.ELEMENT_NODE:
            continue
        elif ch.qname == (_TEXT, "s"):
            acc.append(" " * min(_int(_attr(ch, _TEXT, "c"), 1), _MAX_REPEAT))
        elif ch.qname in _ODT_CHARS:
            acc.append(_ODT_CHARS[ch.qname])
        elif ch.qname in _ODT_COUNTED:
            counts[_ODT_COUNTED[ch.qname]] += 1
        elif ch.qname[0] == _DRAW:
            _count_drawing(ch, counts)
        elif ch.qname not in _ODT_SKIP:
            _odf_text(ch, counts, acc)
    return "".join(acc)


def _count_drawing(el: Any, counts: Counter[str]) -> None:
    if el.qname == (_DRAW, "a"):  # a linked frame
        for ch in _elements(el):
            _count_drawing(ch, counts)
    else:
        image = el.qname == (_DRAW, "image") or any(c.qname == (_DRAW, "image") for c in _elements(el))
        counts["image" if image else "drawing"] += 1


class _Odf:
    """Walks an ODF text body into blocks, with its paragraph and list styles."""

    def __init__(self, document: Any, counts: Counter[str]) -> None:
        self.counts = counts
        self.parents: dict[str, str] = {}  # paragraph style -> parent style
        self.lists: dict[str, dict[int, bool]] = {}  # list style -> level -> ordered
        for s in [*_elements(document.styles), *_elements(document.automaticstyles)]:
            style_name = _attr(s, _STYLE, "name") or ""
            if s.qname == (_STYLE, "style") and (parent := _attr(s, _STYLE, "parent-style-name")):
                self.parents[style_name] = parent
            elif s.qname == (_TEXT, "list-style"):
                self.lists[style_name] = {
                    _int(_attr(lvl, _TEXT, "level"), 1) - 1: lvl.qname[1] == "list-level-style-number"
                    and bool(_attr(lvl, _STYLE, "num-format"))
                    for lvl in _elements(s)
                }

    def _is_title(self, style: str | None) -> bool:
        seen: set[str] = set()
        while style and style not in seen:
            seen.add(style)
            style = self.parents.get(style)
        return "Title" in seen

    def blocks(self, children: Iterable[Any]) -> Iterator[Block]:
        for ch in children:
            qn = ch.qname
            if qn == (_TEXT, "p"):
                title = self._is_title(_attr(ch, _TEXT, "style-name"))
                yield Block("title" if title else "p", _odf_text(ch, self.counts))
            elif qn == (_TEXT, "h"):
                yield Block("h", _odf_text(ch, self.counts), max(1, _int(_attr(ch, _TEXT, "outline-level"), 1)))
            elif qn == (_TEXT, "list"):
                yield from self.items(ch, 0, None)
            elif qn == (_TABLE, "table"):
                yield Block("table", rows=self.table(ch))
            elif qn[0] == _DRAW:
                _count_drawing(ch, self.counts)
            elif qn == (_TEXT, "tracked-changes"):  # deleted text lives here, inserted text in the body
                for kinds in ({c.qname[1] for c in _elements(region)} for region in _elements(ch)):
                    self.counts["inserted"] += "insertion" in kinds
                    self.counts["deleted"] += "deletion" in kinds
            elif qn not in _ODT_SKIP and not qn[1].endswith("-source"):
                yield from self.blocks(_elements(ch))  # sections, index bodies, soft page breaks

    def items(self, el: Any, depth: int, style: str | None) -> Iterator[Block]:
        style = _attr(el, _TEXT, "style-name") or style
        ordered = self.lists.get(style or "", {}).get(depth, False)
        number = 0
        for item in _elements(el):
            if item.qname not in ((_TEXT, "list-item"), (_TEXT, "list-header")):
                continue
            number = _int(_attr(item, _TEXT, "start-value"), number + 1)
            texts: list[str] = []
            nested: list[Block] = []
            for ch in _elements(item):
                if ch.qname == (_TEXT, "p"):
                    texts.append(_odf_text(ch, self.counts))
                elif ch.qname == (_TEXT, "list"):
                    nested.extend(self.items(ch, depth + 1, style))
                else:  # headings in a list (numbered headings), tables
                    nested.extend(self.blocks([ch]))
            yield Block("li", "\n".join(texts), depth, number if ordered else None)
            yield from nested

    def table(self, el: Any) -> list[list[str]]:
        rows: list[list[str]] = []
        for ch in _elements(el):
            if ch.qname == (_TABLE, "table-row"):
                cells: list[str] = []
                for cell in _elements(ch):
                    if cell.qname in ((_TABLE, "table-cell"), (_TABLE, "covered-table-cell")):
                        text = flat(self.blocks(_elements(cell))) if cell.qname[1] == "table-cell" else ""
                        repeat = _int(_attr(cell, _TABLE, "number-columns-repeated"), 1)
                        cells.extend([text] * max(1, min(repeat, _MAX_REPEAT)))
                repeat = _int(_attr(ch, _TABLE, "number-rows-repeated"), 1)
                rows.extend([list(cells) for _ in range(max(1, min(repeat, _MAX_REPEAT)))])
            elif ch.qname in ((_TABLE, "table-header-rows"), (_TABLE, "table-rows"), (_TABLE, "table-row-group")):
                rows.extend(self.table(ch))
        return rows
