"""Small PDFs written by hand for the PDF extraction tests: text pages, scanned (image-only) and blank pages, an
outline, document metadata, and the standard security handler's RC4 encryption.

No PDF writer is a dependency of es_rag (PDFium, which reads them, writes no outlines), so :func:`build_pdf`
serialises the objects itself (ISO 32000-1: section 7 for the syntax, 7.6.3 for RC4 encryption, revision 2 with a
40-bit key, 12.3.3 for the outline). Text is set in Helvetica (a standard font, not embedded) with
``WinAnsiEncoding``, one line per :class:`Line`, from the top of a US Letter page down.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

WIDTH, HEIGHT = 612, 792
TOP = 740.0
"""Baseline of a page's first line."""
LEADING = 1.5
"""Distance between two baselines, in times the larger of their font sizes."""
PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
"""The standard security handler's password padding (ISO 32000-1, 7.6.3.3)."""


@dataclass(frozen=True)
class Line:
    """One line of text and its font size in points."""

    text: str
    size: float = 11.0


@dataclass(frozen=True)
class Page:
    """A page: lines of text (a ``str`` is an 11-point line), and whether a page-sized image covers it (a scan)."""

    lines: Sequence[Line | str] = ()
    scan: bool = False

    def baselines(self) -> list[float]:
        """The baseline of each line, from :data:`TOP` down."""
        out: list[float] = []
        y = TOP
        previous = 0.0
        for line in self.lines:
            size = line.size if isinstance(line, Line) else 11.0
            if out:
                y -= LEADING * max(size, previous)
            out.append(y)
            previous = size
        return out


@dataclass(frozen=True)
class Bookmark:
    """An outline entry: ``title``, 1-based ``page`` (0: no destination at all), ``level`` (1 = top), ``top`` (an
    ``/XYZ`` destination at that height; ``None``: ``/Fit``, the whole page), ``action`` (reached through a ``/GoTo``
    action, not ``/Dest``)."""

    title: str
    page: int
    level: int = 1
    top: float | None = None
    action: bool = False


class Name(str):
    """A PDF name (``/Type``)."""


@dataclass(frozen=True)
class Ref:
    """An indirect reference to object ``num``."""

    num: int


@dataclass
class Stream:
    """A stream: its dictionary (``/Length`` is added) and its data."""

    meta: dict[str, Value]
    data: bytes


Value: TypeAlias = bool | int | float | str | bytes | Name | Ref | list["Value"] | dict[str, "Value"] | Stream | None
"""``str`` is a text string (WinAnsi, as ``PDFDocEncoding`` reads it for ASCII), ``bytes`` a byte string."""


@dataclass
class _Writer:
    key: bytes | None = None
    objects: list[Value] = field(default_factory=list)

    def add(self, value: Value = None) -> Ref:
        self.objects.append(value)
        return Ref(len(self.objects))

    def set(self, ref: Ref, value: Value) -> None:
        self.objects[ref.num - 1] = value

    def crypt(self, num: int, data: bytes) -> bytes:
        if self.key is None:
            return data
        digest = hashlib.md5(self.key + struct.pack("<i", num)[:3] + b"\0\0").digest()
        return rc4(digest[: len(self.key) + 5], data)

    def value(self, num: int, v: Value) -> bytes:
        if v is None:
            return b"null"
        if isinstance(v, bool):
            return b"true" if v else b"false"
        if isinstance(v, (int, float)):
            return (f"{v:.4f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)).encode()
        if isinstance(v, Name):
            return b"/" + v.encode("ascii")
        if isinstance(v, (str, bytes)):
            raw = v.encode("cp1252") if isinstance(v, str) else v
            return b"<" + self.crypt(num, raw).hex().encode() + b">"
        if isinstance(v, Ref):
            return f"{v.num} 0 R".encode()
        if isinstance(v, list):
            return b"[" + b" ".join(self.value(num, x) for x in v) + b"]"
        if isinstance(v, dict):
            return b"<<" + b"".join(b"/" + k.encode() + b" " + self.value(num, x) for k, x in v.items()) + b">>"
        data = self.crypt(num, v.data)
        meta = self.value(num, {**v.meta, "Length": len(data)})
        return meta + b"\nstream\n" + data + b"\nendstream"

    def write(self, root: Ref, info: Ref | None, encrypt: Ref | None, file_id: bytes) -> bytes:
        out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
        offsets = []
        for num, obj in enumerate(self.objects, start=1):
            offsets.append(len(out))
            key, self.key = self.key, (None if encrypt is not None and num == encrypt.num else self.key)
            out += f"{num} 0 obj\n".encode() + self.value(num, obj) + b"\nendobj\n"
            self.key = key
        xref = len(out)
        out += f"xref\n0 {len(offsets) + 1}\n0000000000 65535 f \n".encode()
        out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
        trailer: dict[str, Value] = {"Size": len(offsets) + 1, "Root": root, "ID": [file_id, file_id]}
        if info is not None:
            trailer["Info"] = info
        if encrypt is not None:
            trailer["Encrypt"] = encrypt
        self.key = None  # the trailer's strings are never encrypted
        out += b"trailer\n" + self.value(0, trailer) + f"\nstartxref\n{xref}\n%%EOF\n".encode()
        return bytes(out)


def rc4(key: bytes, data: bytes) -> bytes:
    """RC4 of ``data`` under ``key`` (the cipher of the standard security handler's revision 2).

    Args:
        key: The key.
        data: Plain or cipher text.
    """
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def _escape(text: str) -> bytes:
    raw = text.encode("cp1252")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _content(page: Page) -> bytes:
    ops = [b"q %d 0 0 %d 0 0 cm /Scan Do Q" % (WIDTH, HEIGHT)] if page.scan else []
    for line, y in zip(page.lines, page.baselines(), strict=True):
        text, size = (line.text, line.size) if isinstance(line, Line) else (line, 11.0)
        ops.append(b"BT /F1 %s Tf 72 %s Td (%s) Tj ET" % (str(size).encode(), str(y).encode(), _escape(text)))
    return b"\n".join(ops)


def build_pdf(
    pages: Sequence[Page],
    *,
    outline: Sequence[Bookmark] = (),
    title: str | None = None,
    user_password: str | None = None,
    owner_password: str = "owner",
    page_labels: Sequence[tuple[int, str, str, int]] = (),
) -> bytes:
    """A PDF of these pages, with this outline and ``Title``, encrypted when ``user_password`` is given.

    Args:
        pages: The pages, in order.
        outline: Outline entries in document order; an entry of level ``n + 1`` nests under the last of level ``n``.
        title: The ``Title`` of the document information dictionary.
        user_password: Encrypt (RC4, 40 bits, revision 2) with this password to open it; ``""`` is a PDF every
            reader opens without asking (only the owner password protects its permissions).
        owner_password: The owner password, when encrypted.
        page_labels: The ``/PageLabels`` ranges (ISO 32000-1, 12.4.2), each ``(first page index (0-based), style
            (``D``, ``r``, ``R``, ``a``, ``A`` or ``""`` for none), prefix, start number)``.
    """
    w = _Writer()
    root, tree = w.add(), w.add()
    font = w.add(
        {
            "Type": Name("Font"),
            "Subtype": Name("Type1"),
            "BaseFont": Name("Helvetica"),
            "Encoding": Name("WinAnsiEncoding"),
        }
    )
    scan = w.add(
        Stream(
            {
                "Type": Name("XObject"),
                "Subtype": Name("Image"),
                "Width": 2,
                "Height": 2,
                "ColorSpace": Name("DeviceGray"),
                "BitsPerComponent": 8,
            },
            b"\x20\xe0\xe0\x20",
        )
    )
    page_refs = []
    for page in pages:
        contents = w.add(Stream({}, _content(page)))
        resources: dict[str, Value] = {"Font": {"F1": font}}
        if page.scan:
            resources["XObject"] = {"Scan": scan}
        page_refs.append(
            w.add(
                {
                    "Type": Name("Page"),
                    "Parent": tree,
                    "MediaBox": [0, 0, WIDTH, HEIGHT],
                    "Resources": resources,
                    "Contents": contents,
                }
            )
        )
    w.set(tree, {"Type": Name("Pages"), "Kids": list(page_refs), "Count": len(page_refs)})
    catalog: dict[str, Value] = {"Type": Name("Catalog"), "Pages": tree}
    if page_labels:
        nums: list[Value] = []
        for first, style, prefix, start in page_labels:
            entry: dict[str, Value] = {"St": start}
            if style:
                entry["S"] = Name(style)
            if prefix:
                entry["P"] = prefix
            nums.extend([first, entry])
        catalog["PageLabels"] = {"Nums": nums}
    if outline:
        catalog["Outlines"] = _outline(w, outline, page_refs)
        catalog["PageMode"] = Name("UseOutlines")
    w.set(root, catalog)
    info = w.add({"Title": title, "Producer": "tests/support/pdfs.py"}) if title is not None else None
    file_id = hashlib.md5(repr((pages, outline, title)).encode()).digest()
    encrypt = None
    if user_password is not None:
        user, owner = _pad(user_password), _pad(owner_password or user_password)
        o_value = rc4(hashlib.md5(owner).digest()[:5], user)
        permissions = -4
        w.key = hashlib.md5(user + o_value + struct.pack("<i", permissions) + file_id).digest()[:5]
        encrypt = w.add(
            {
                "Filter": Name("Standard"),
                "V": 1,
                "R": 2,
                "Length": 40,
                "O": o_value,
                "U": rc4(w.key, PAD),
                "P": permissions,
            }
        )
    return w.write(root, info, encrypt, file_id)


def _pad(password: str) -> bytes:
    return (password.encode("latin-1") + PAD)[:32]


def _outline(w: _Writer, entries: Sequence[Bookmark], page_refs: Sequence[Ref]) -> Ref:
    """The outline dictionary and its items (``First``/``Last``/``Next``/``Prev``/``Parent``, open counts)."""
    top = w.add()
    refs = [w.add() for _ in entries]
    children: dict[int, list[int]] = {-1: []}  # parent entry index (-1: the outline) -> child entry indices
    parents: list[int] = []
    stack: list[tuple[int, int]] = []  # (level, entry index)
    for i, entry in enumerate(entries):
        while stack and stack[-1][0] >= entry.level:
            stack.pop()
        parent = stack[-1][1] if stack else -1
        parents.append(parent)
        children.setdefault(parent, []).append(i)
        children.setdefault(i, [])
        stack.append((entry.level, i))

    def descendants(i: int) -> int:
        return sum(1 + descendants(c) for c in children[i])

    for i, entry in enumerate(entries):
        item: dict[str, Value] = {"Title": entry.title, "Parent": top if parents[i] == -1 else refs[parents[i]]}
        if entry.page:
            dest: list[Value] = [page_refs[entry.page - 1]]
            dest += [Name("XYZ"), 72, entry.top, None] if entry.top is not None else [Name("Fit")]
            item["A" if entry.action else "Dest"] = {"S": Name("GoTo"), "D": dest} if entry.action else dest
        siblings = children[parents[i]]
        at = siblings.index(i)
        if at > 0:
            item["Prev"] = refs[siblings[at - 1]]
        if at + 1 < len(siblings):
            item["Next"] = refs[siblings[at + 1]]
        if children[i]:
            item["First"], item["Last"] = refs[children[i][0]], refs[children[i][-1]]
            item["Count"] = descendants(i)
        w.set(refs[i], item)
    w.set(
        top,
        {
            "Type": Name("Outlines"),
            "First": refs[children[-1][0]],
            "Last": refs[children[-1][-1]],
            "Count": len(entries),
        },
    )
    return top
