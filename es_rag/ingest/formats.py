"""Reading one file's text: which format a file is read as, its decoding, its front matter, its version and day.

Split from :mod:`es_rag.ingest.sources` (which walks folders and names sources) and re-exported there.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from es_rag.chunking.code import CODE_FORMATS, CODE_SUFFIXES
from es_rag.errors import InputError
from es_rag.metadata import MetadataSchema

SUFFIX_FORMAT = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".rest": "rst",
    ".txt": "plain",
    ".text": "plain",
    ".html": "html",
    ".htm": "html",
    ".jsonl": "jsonl",
    ".pdf": "pdf",
    ".docx": "docx",
    ".odt": "odt",
    **CODE_SUFFIXES,
}
"""File suffix -> the format its file is read as (source code: :data:`es_rag.chunking.code.CODE_SUFFIXES`, chunked
one function, method or class at a time)."""
BINARY_FORMATS = ("pdf", "docx", "odt")
"""Formats whose file is not text: a source text is extracted from it once (:func:`read_source`), and chunk offsets
index that text, never the file's bytes."""
MAX_FILE_BYTES = 50 * 1024 * 1024


PLAIN_NAMES = frozenset(
    "README COPYING COPYRIGHT LICENSE LICENCE NOTICE AUTHORS CONTRIBUTORS CHANGELOG CHANGES NEWS HISTORY INSTALL TODO "
    "THANKS BUGS".split()
)
"""Names of text files without a suffix that a folder walk reads as plain text (a Debian package's ``copyright``,
a project's ``README``; compared upper-cased)."""


def path_format(path: Path) -> str:
    """The format a file is read as: by its suffix (:data:`SUFFIX_FORMAT`), ``plain`` for a suffixless
    :data:`PLAIN_NAMES` file, else ``""`` (unsupported).

    Args:
        path: The file.
    """
    if not path.suffix and path.name.upper() in PLAIN_NAMES:
        return "plain"
    return SUFFIX_FORMAT.get(path.suffix.lower(), "")


def format_of(name: str) -> str:
    """The format a file of this name is read as, for a text given in memory (``jsonl``, binary formats and unknown
    suffixes: ``markdown``).

    Args:
        name: A file name or source id (``page.html``).
    """
    found = SUFFIX_FORMAT.get(Path(name).suffix.lower(), "markdown")
    return "markdown" if found == "jsonl" or found in BINARY_FORMATS else found


@dataclass(frozen=True)
class SourceText:
    """The source text of one file, as :func:`read_source` reads it.

    Args:
        text: The text chunk offsets index (a text file as decoded; a PDF's extracted text; a Word or OpenDocument
            file's text as written, laid out as Markdown).
        fmt: The format the chunker reads it as (``docx`` and ``odt`` become ``markdown``).
        extracted: Whether ``text`` was extracted from a binary file (no front matter is read from it).
        title: The title the file's metadata gives, when it does.
        pages: Start offset of each page in ``text`` (a PDF), else empty.
        headings: ``(offset, level, title)`` of each heading the extraction found (a PDF).
        warnings: What the extraction could not read (scanned pages, skipped images), each said once.
        escapes: A Word or OpenDocument file's: the offsets before which its Markdown rendering has a backslash
            (:mod:`es_rag.ingest.office_render`); None for any other file.
        page_labels: The label each page prints (a PDF with ``/PageLabels``), one per page; else empty.
    """

    text: str
    fmt: str
    extracted: bool = False
    title: str | None = None
    pages: tuple[int, ...] = ()
    headings: tuple[tuple[int, int, str], ...] = ()
    warnings: tuple[str, ...] = ()
    escapes: tuple[int, ...] | None = None
    page_labels: tuple[str, ...] = ()


def read_source(name: str, data: bytes, fmt: str, encoding: str = "utf-8") -> SourceText:
    """The source text of a file's bytes: decoded (:func:`decode_source`), or extracted from a PDF
    (:func:`es_rag.ingest.pdf.extract_pdf`) or a Word / OpenDocument file (:func:`es_rag.ingest.office.extract_office`).

    Args:
        name: The file (or ``<stdin>``), for messages.
        data: Its bytes.
        fmt: Its format (:func:`path_format`).
        encoding: The text encoding of a text file.

    Raises:
        InputError: An empty, undecodable, encrypted or unreadable file, or one without any text.
    """
    if fmt == "pdf":
        from es_rag.ingest.pdf import extract_pdf

        pdf = extract_pdf(data, name=name)
        return SourceText(
            pdf.text,
            "pdf",
            extracted=True,
            title=pdf.title,
            pages=pdf.pages,
            page_labels=pdf.page_labels,
            headings=tuple((h.offset, h.level, h.title) for h in pdf.headings),
            warnings=tuple(w.removeprefix(f"{name}: ") for w in pdf.warnings),
        )
    if fmt in ("docx", "odt"):
        from es_rag.ingest.office import extract_office

        office = extract_office(data, name=name, kind=fmt)
        return SourceText(
            office.text,
            "markdown",
            extracted=True,
            title=office.title,
            warnings=office.warnings,
            escapes=office.escapes,
        )
    return SourceText(decode_source(Path(name), data, encoding), fmt)


JSONL_FORMATS = ("markdown", "rst", "plain", "html", *CODE_FORMATS)


def default_version(text: str) -> str:
    """Version derived from the content (changes whenever the text does).

    Args:
        text: Source text.
    """
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def decode_source(path: Path, data: bytes, encoding: str = "utf-8") -> str:
    """Decode a file (UTF-8 by default, a BOM dropped), refusing binary data with a clear error.

    Args:
        path: The file (for messages).
        data: Its bytes.
        encoding: Its text encoding (``ingest --encoding latin-1``); a UTF-8 file stays readable under it only when
            it is ASCII.
    """
    if not data.strip():
        raise InputError(str(path), "text", "the file is empty")
    if b"\x00" in data[:8192]:
        raise InputError(str(path), "encoding", "binary file (NUL bytes); only text is ingested")
    codec = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        text = data.decode(codec)
    except UnicodeDecodeError as exc:
        name = "UTF-8" if codec == "utf-8-sig" else encoding
        hint = (
            "; if it is Latin-1 or cp1252, pass --encoding latin-1 or --encoding cp1252" if codec == "utf-8-sig" else ""
        )
        raise InputError(
            str(path), "encoding", f"not valid {name} (byte {exc.start}: {data[exc.start : exc.start + 1]!r}){hint}"
        ) from None
    except LookupError:
        raise InputError(str(path), "encoding", f"unknown encoding {encoding!r}") from None
    return text


_FRONT_MATTER_RE = re.compile(r"\A(---[ \t]*\r?\n)(.*?)(\r?\n---[ \t]*)(?:\r?\n|\Z)", re.DOTALL)


@dataclass(frozen=True)
class FrontMatter:
    """What a Markdown file's front matter says, and the text with the block blanked."""

    text: str
    title: str | None = None
    version: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()


def read_front_matter(text: str, *, document: str, schema: MetadataSchema) -> FrontMatter:
    """Split YAML front matter off a Markdown source (see the module doc).

    Args:
        text: The decoded file.
        document: Its name, for errors.
        schema: The metadata fields; keys that are none of them and not ``title``/``source_version``/``version``
            are ignored (reported by the caller).

    Raises:
        InputError: Front matter that is not valid YAML or not a mapping.
    """
    m = _FRONT_MATTER_RE.match(text)
    if m is None:
        return FrontMatter(text)
    import yaml

    try:
        data = yaml.safe_load(m.group(2))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise InputError(document, "front_matter", f"invalid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(document, "front_matter", f"must be a mapping of keys to values, got {type(data).__name__}")
    blanked = re.sub(r"[^\r\n]", " ", m.group(0)) + text[m.end() :]
    title = data.pop("title", None)
    version = data.pop("source_version", data.pop("version", None))
    meta = {str(k): v for k, v in data.items() if schema.get(str(k)) is not None}
    ignored = tuple(str(k) for k in data if schema.get(str(k)) is None)
    return FrontMatter(
        blanked,
        title=str(title) if title is not None else None,
        version=str(version) if version is not None else None,
        meta=meta,
        ignored=ignored,
    )


def mtime_day(path: Path) -> str:
    """The UTC day of a file's modification time (``YYYY-MM-DD``).

    Args:
        path: The file.
    """
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).date().isoformat()
