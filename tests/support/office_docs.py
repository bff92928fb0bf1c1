"""Word (.docx) and OpenDocument (.odt) documents for the office extraction tests, written with python-docx and odfpy.

What the writers have no API for (hyperlinks, tracked changes, multi-level numbering, footnote and comment
references, hidden text, fields, content controls) is added as raw WordprocessingML. :func:`guide_docx` and
:func:`guide_odt` are the two documents most tests read; :func:`png` is a valid one-pixel PNG for embedded images;
:func:`zip_bytes` and :func:`ole_bytes` make the packages that are no such document.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
R_NS = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'


def png() -> bytes:
    """A 1x1 white PNG."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\xff\xff"))
        + chunk(b"IEND", b"")
    )


def raw_paragraph(doc: Any, inner: str, ppr: str = "") -> None:
    """Append ``<w:p>`` with ``ppr`` (``<w:pPr>`` content) and ``inner`` (runs) to the body of ``doc``."""
    from docx.oxml.parser import parse_xml

    p = parse_xml(f"<w:p {W_NS} {R_NS}>{f'<w:pPr>{ppr}</w:pPr>' if ppr else ''}{inner}</w:p>")
    doc.element.body.sectPr.addprevious(p)


def run(text: str, rpr: str = "") -> str:
    """A ``<w:r>`` of ``text`` (spaces kept)."""
    return f'<w:r>{f"<w:rPr>{rpr}</w:rPr>" if rpr else ""}<w:t xml:space="preserve">{text}</w:t></w:r>'


def hyperlink(doc: Any, text: str, url: str) -> str:
    """A ``<w:hyperlink>`` to ``url`` (an external relationship of the document part) around a run of ``text``."""
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    rid = doc.part.relate_to(url, RT.HYPERLINK, is_external=True)
    return f'<w:hyperlink r:id="{rid}">{run(text)}</w:hyperlink>'


def add_numbering(doc: Any, num_id: int, formats: list[str]) -> None:
    """Add a multi-level numbering definition ``num_id``: level ``i`` has ``formats[i]`` (``bullet``, ``decimal``)."""
    from docx.oxml.parser import parse_xml

    numbering = doc.part.numbering_part.element
    levels = "".join(
        f'<w:lvl w:ilvl="{i}"><w:start w:val="1"/><w:numFmt w:val="{fmt}"/><w:lvlText w:val="%{i + 1}."/></w:lvl>'
        for i, fmt in enumerate(formats)
    )
    abstract = parse_xml(f'<w:abstractNum {W_NS} w:abstractNumId="{num_id + 100}">{levels}</w:abstractNum>')
    numbering.insert(0, abstract)  # abstractNum elements come before num elements
    numbering.append(parse_xml(f'<w:num {W_NS} w:numId="{num_id}"><w:abstractNumId w:val="{num_id + 100}"/></w:num>'))


def list_item(doc: Any, text: str, num_id: int, ilvl: int) -> None:
    """A paragraph of list ``num_id`` at level ``ilvl``."""
    raw_paragraph(doc, run(text), f'<w:numPr><w:ilvl w:val="{ilvl}"/><w:numId w:val="{num_id}"/></w:numPr>')


def docx_bytes(*steps: Callable[[Any], object], title: str | None = None) -> bytes:
    """A new python-docx document after ``steps`` (each called with the document), saved to bytes."""
    import docx

    doc = docx.Document()
    for step in steps:
        step(doc)
    if title is not None:
        doc.core_properties.title = title
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def odt_bytes(build: Callable[[Any], object], title: str | None = None) -> bytes:
    """A new odfpy text document after ``build`` (called with the document), saved to bytes."""
    from odf import dc
    from odf.opendocument import OpenDocumentText

    doc = OpenDocumentText()
    if title is not None:
        doc.meta.addElement(dc.Title(text=title))
    build(doc)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def zip_bytes(files: dict[str, bytes | str]) -> bytes:
    """A ZIP archive of ``files`` (name -> content)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, content in files.items():
            z.writestr(name, content)
    return out.getvalue()


def ole_bytes(*stream_names: str) -> bytes:
    """The start of an OLE compound file (its signature), with ``stream_names`` as UTF-16 directory names."""
    body = b"".join(name.encode("utf-16-le") + b"\x00\x00" for name in stream_names)
    return b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504 + body


def raw_body(doc: Any, xml: str) -> None:
    """Append a body-level element (``xml``, its ``w:`` namespace declared here) to ``doc``."""
    from docx.oxml.parser import parse_xml

    doc.element.body.sectPr.addprevious(parse_xml(xml.replace(">", f" {W_NS}>", 1)))


TRACKED = 'w:id="{id}" w:author="Ann" w:date="2024-05-01T10:00:00Z"'


def guide_docx() -> bytes:
    """A Word guide with what the extractor renders and what it leaves out (see the tests for the Markdown)."""
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml.parser import parse_xml

    def build(doc: Any) -> None:
        doc.add_paragraph("The Guide", style="Title")
        doc.add_heading("Install", level=1)
        p = doc.add_paragraph("First line")
        p.add_run().add_break()
        p.add_run("second\tline")
        for text in ("# not a heading", "1986. A year", "- dash", "a | b", "    indented", "<div>html</div>"):
            doc.add_paragraph(text)
        doc.add_paragraph("alpha", style="List Bullet")
        doc.add_paragraph("beta", style="List Bullet 2")
        doc.add_paragraph("gamma", style="List Bullet")
        doc.add_paragraph("one", style="List Number")
        doc.add_paragraph("two", style="List Number")
        doc.add_paragraph("Between the lists.")
        add_numbering(doc, 50, ["decimal", "bullet", "decimal"])
        for text, ilvl in (("n1", 0), ("n1a", 1), ("n1a-i", 2), ("n1a-ii", 2), ("n2", 0), ("# n2a", 1)):
            list_item(doc, text, 50, ilvl)
        custom = doc.styles.add_style("Sub Heading", WD_STYLE_TYPE.PARAGRAPH)
        custom.base_style = doc.styles["Heading 2"]
        doc.add_paragraph("Tables", style="Sub Heading")
        t = doc.add_table(rows=4, cols=3)
        for (r, c), text in {(0, 0): "Name", (0, 1): "Value | pipe", (0, 2): "Note", (1, 0): "a", (1, 2): "x"}.items():
            t.cell(r, c).text = text
        t.cell(2, 0).merge(t.cell(2, 1)).text = "wide"
        t.cell(1, 2).merge(t.cell(2, 2))  # "x" spans rows 2 and 3
        t.cell(3, 0).text = "gone"
        t.rows[3]._tr.get_or_add_trPr().append(parse_xml(f"<w:del {W_NS} {TRACKED.format(id=9)}/>"))
        inner = doc.add_table(rows=1, cols=1)
        inner.cell(0, 0).text = "after"
        nested = inner.cell(0, 0).add_table(rows=1, cols=2)
        nested.cell(0, 0).text = "in"
        nested.cell(0, 1).text = "side"
        raw_paragraph(doc, run("Outline level 2"), '<w:outlineLvl w:val="1"/>')
        raw_paragraph(doc, run("See ") + hyperlink(doc, "the site", "https://example.com") + run(" now."))
        ins = f"<w:ins {TRACKED.format(id=1)}>{run('inserted ')}</w:ins>"
        dele = f"<w:del {TRACKED.format(id=2)}><w:r><w:delText>deleted </w:delText></w:r></w:del>"
        raw_paragraph(doc, run("Kept ") + ins + dele + run("end."))
        fields = '<w:fldSimple w:instr="PAGE">' + run("7") + "</w:fldSimple>" + run(" and ")
        fields += '<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText>NUMPAGES</w:instrText></w:r>'
        fields += '<w:r><w:fldChar w:fldCharType="separate"/></w:r>' + run("9")
        fields += '<w:r><w:fldChar w:fldCharType="end"/></w:r>'
        raw_paragraph(doc, run("Page ") + fields + run(" pages."))
        note = '<w:r><w:footnoteReference w:id="1"/></w:r><w:r><w:commentReference w:id="0"/></w:r>'
        raw_paragraph(doc, run("Visible") + run(" hidden", "<w:vanish/>") + run(" text.") + note)
        control = f"<w:sdtPr><w:alias w:val='box'/></w:sdtPr><w:sdtContent>{_p('In a control.')}</w:sdtContent>"
        raw_body(doc, f"<w:sdt>{control}</w:sdt>")
        doc.add_paragraph().add_run().add_picture(io.BytesIO(png()))
        doc.add_paragraph("Last words.").add_run().add_picture(io.BytesIO(png()))

    return docx_bytes(build, title="  Guide title  ")


def _p(text: str) -> str:
    return f"<w:p>{run(text)}</w:p>"


def guide_odt() -> bytes:
    """An OpenDocument guide with what the extractor renders and leaves out (see the tests for the Markdown)."""
    from odf import draw, office, style, table, text

    def cell(content: str | Any = "", **kw: Any) -> Any:
        c = table.TableCell(**kw)
        c.addElement(text.P(text=content) if isinstance(content, str) else content)
        return c

    def build(doc: Any) -> None:
        doc.styles.addElement(style.Style(name="Title", family="paragraph"))
        doc.automaticstyles.addElement(style.Style(name="P1", family="paragraph", parentstylename="Title"))
        numbered = text.ListStyle(name="L1")
        numbered.addElement(text.ListLevelStyleNumber(level=1, numformat="1"))
        numbered.addElement(text.ListLevelStyleBullet(level=2, bulletchar="•"))
        doc.automaticstyles.addElement(numbered)
        body = doc.text
        tracked = text.TrackedChanges()
        region = text.ChangedRegion(qattributes={(TEXT_NS, "id"): "ct1"}, check_grammar=False)
        deletion = text.Deletion()
        deletion.addElement(office.ChangeInfo(check_grammar=False))
        deletion.addElement(text.P(text="deleted words"))
        region.addElement(deletion)
        tracked.addElement(region)
        body.addElement(tracked)
        body.addElement(text.P(stylename="P1", text="Manual"))
        body.addElement(text.H(outlinelevel=1, text="Intro"))
        p = text.P(text="Hello  world")
        p.addElement(text.S(c=2))
        p.addText("x")
        p.addElement(text.Tab())
        p.addText("y")
        p.addElement(text.LineBreak())
        p.addText("# next line")
        body.addElement(p)
        p = text.P(text="See ")
        p.addElement(text.A(href="https://example.com", text="the site"))
        p.addText(".")
        note = text.Note(noteclass="footnote")
        note.addElement(text.NoteCitation(text="1"))
        note_body = text.NoteBody()
        note_body.addElement(text.P(text="The note."))
        note.addElement(note_body)
        p.addElement(note)
        comment = office.Annotation()
        comment.addElement(text.P(text="A comment."))
        p.addElement(comment)
        body.addElement(p)
        body.addElement(text.P(text="1986. A year"))
        items = text.List(stylename=numbered)
        for label, children in (("first", ["a", "- b"]), ("second", [])):
            item = text.ListItem()
            item.addElement(text.P(text=label))
            if children:
                sub = text.List()
                for child in children:
                    sub_item = text.ListItem()
                    sub_item.addElement(text.P(text=child))
                    sub.addElement(sub_item)
                item.addElement(sub)
            items.addElement(item)
        body.addElement(items)
        section = text.Section(name="S1")
        section.addElement(text.H(outlinelevel=2, text="Data"))
        grid = table.Table(name="T1")
        grid.addElement(table.TableColumn(numbercolumnsrepeated=3))
        head = table.TableHeaderRows()
        row = table.TableRow()
        for label in ("A", "B | C", ""):
            row.addElement(cell(label))
        head.addElement(row)
        grid.addElement(head)
        row = table.TableRow()
        row.addElement(cell("span", numbercolumnsspanned=2))
        row.addElement(table.CoveredTableCell())
        inner = table.Table(name="T2")
        inner_row = table.TableRow()
        inner_row.addElement(cell("in"))
        inner_row.addElement(cell("side"))
        inner.addElement(inner_row)
        row.addElement(cell(inner))
        grid.addElement(row)
        section.addElement(grid)
        body.addElement(section)
        p = text.P(text="Picture: ")
        frame = draw.Frame(width="1cm", height="1cm", anchortype="as-char")
        frame.addElement(draw.Image(href="Pictures/x.png"))
        p.addElement(frame)
        box = draw.Frame(width="3cm", height="1cm", anchortype="paragraph")
        text_box = draw.TextBox()
        text_box.addElement(text.P(text="boxed"))
        box.addElement(text_box)
        p.addElement(box)
        p.addElement(text.Change(changeid="ct1"))
        p.addText(" done.")
        body.addElement(p)

    return odt_bytes(build, title="Meta title")
