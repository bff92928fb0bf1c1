"""An OpenDocument package opened as LibreOffice opens it: a manifest entry whose part the ZIP lacks is left out.

Real files have them. Debian's ``live-manual.en.odt`` (package live-manual-odf 2:20151217.2) lists
``Thumbnails/thumbnail.png``, ``layout-cache`` and ``Configurations2/accelerator/current.xml``, and its ZIP holds none
of them. odfpy's ``load`` reads every manifest entry with ``ZipFile.read`` and stops at the first missing one
(``KeyError: "There is no item named 'Thumbnails/thumbnail.png' in the archive"``); LibreOffice opens the file. The
manifest is rewritten without those entries before odfpy reads the package, and the caller says which were missing.
"""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree
from xml.parsers import expat

MANIFEST = "META-INF/manifest.xml"
_NS = "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"
_PATH = f"{{{_NS}}}full-path"


def _refuse_entities(*args: object) -> None:
    raise expat.ExpatError("XML entity declarations are refused (as defusedxml does)")


def missing_parts(manifest: bytes, names: set[str]) -> list[str]:
    """The files ``manifest`` lists that the package's ZIP (its member ``names``) lacks; folders (``Pictures/``)
    and the package itself (``/``) are not files.

    Args:
        manifest: ``META-INF/manifest.xml``.
        names: The ZIP's member names.

    Raises:
        expat.ExpatError: The manifest is not XML, or declares entities.
    """
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.EntityDeclHandler = _refuse_entities
    listed: list[str] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        path = attrs.get(f"{_NS} full-path")
        if tag == f"{_NS} file-entry" and path:
            listed.append(path)

    parser.StartElementHandler = start
    parser.Parse(manifest, True)
    return [p for p in listed if not p.endswith("/") and p not in names]


def without_missing_parts(data: bytes, missing: list[str]) -> bytes:
    """The package ``data`` with a manifest that no longer lists ``missing``; every other member as it was.

    Args:
        data: The ``.odt`` file.
        missing: What :func:`missing_parts` found.
    """
    ElementTree.register_namespace("manifest", _NS)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            content = src.read(info.filename)
            if info.filename == MANIFEST:
                root = ElementTree.fromstring(content)  # entities refused by missing_parts before
                for entry in [e for e in root if e.get(_PATH) in set(missing)]:
                    root.remove(entry)
                content = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
            dst.writestr(info, content)
    return out.getvalue()
