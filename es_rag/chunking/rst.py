"""reStructuredText layout: heading sections and block spans with exact offsets into the source.

docutils (the reference reStructuredText parser) finds the sections, their nesting and each title's underline
line; the spans are then cut from the source by lines, so every offset indexes the file as written (docutils'
own tree holds no character offsets). A section runs from its title (overline included) to the next section's
title; its blocks are the title line and the blank-line separated paragraphs of its body (adornment lines are
left out). A title with no body of its own opens no section, as in Markdown. ``include`` / ``raw`` directives
are disabled: parsing a document never reads another file.
"""

from __future__ import annotations

import re
from typing import Any

from es_rag.chunking.spans import Section, Span, line_starts, trim

_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1+\s*$")


def _titles(text: str) -> list[tuple[int, int, tuple[str, ...]]]:
    """``(first line, title line, heading path)`` of every section title, 0-based lines, in document order."""
    from docutils import nodes
    from docutils.core import publish_doctree

    doc = publish_doctree(
        text,
        settings_overrides={
            "report_level": 5,
            "halt_level": 5,
            "doctitle_xform": False,
            "file_insertion_enabled": False,
            "raw_enabled": False,
            "warning_stream": False,
        },
    )
    lines = text.splitlines()
    out = []
    for section in doc.findall(nodes.section):
        title = section.next_node(nodes.title)
        if title is None or title.line is None:
            continue
        path = tuple(
            s.next_node(nodes.title).astext().strip()
            for s in reversed(list(_ancestors(section)))
            if s.next_node(nodes.title) is not None
        )
        under = title.line - 1  # docutils reports the underline's line (1-based)
        text_line = under - 1
        first = text_line
        if first > 0 and _ADORNMENT.match(lines[first - 1]) and lines[first - 1].strip()[0] == lines[under].strip()[0]:
            first -= 1  # an overline of the same character
        out.append((first, text_line, path))
    return out


def _ancestors(section: Any) -> list[Any]:
    from docutils import nodes

    chain = []
    node = section
    while node is not None:
        if isinstance(node, nodes.section):
            chain.append(node)
        node = getattr(node, "parent", None)
    return chain


def parse_rst(text: str) -> list[Section]:
    """Split reStructuredText into heading sections with block spans.

    Args:
        text: reStructuredText source.
    """
    starts = line_starts(text)
    lines = text.splitlines(keepends=True)

    def offset(line: int) -> int:
        return starts[line] if line < len(starts) else len(text)

    titles = _titles(text)
    bounds = [(0, None, ())] + [(first, tline, path) for first, tline, path in titles]
    sections: list[Section] = []
    for i, (first, tline, path) in enumerate(bounds):
        end_line = bounds[i + 1][0] if i + 1 < len(bounds) else len(lines)
        if end_line <= first:
            continue
        blocks: list[Span] = []
        body_from = first
        if tline is not None:
            blocks.append(trim(text, offset(tline), offset(tline + 1)))
            body_from = tline + 2  # past the underline
        para_start = None
        for ln in range(body_from, end_line + 1):
            blank = ln >= end_line or not lines[ln].strip()
            if not blank and para_start is None:
                para_start = ln
            elif blank and para_start is not None:
                blocks.append(trim(text, offset(para_start), offset(ln)))
                para_start = None
        body = [b for b in blocks[1 if tline is not None else 0 :] if b[1] > b[0]]
        if not body:
            continue
        spans = [b for b in blocks if b[1] > b[0]]
        s, e = trim(text, spans[0][0], spans[-1][1])
        sections.append(Section(tuple(path), s, e, tuple(spans)))
    return sections
