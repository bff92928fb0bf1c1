"""Reading a packed context (prompt ``ctx-5``, es_rag/templates/context.j2) back into its excerpts, by its real fence
only: the tests that check no text escapes its block, and that a block shows what it should, parse it here."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Excerpt:
    """One excerpt of a packed context: its citation id, its block's header line and its text."""

    citation_id: str
    header: str
    section: str
    text: str


def fence_of(context: str) -> str:
    """The context's fence: the ``EVIDENCE-<12 hex>`` that opens its first block.

    Args:
        context: A packed context.
    """
    m = re.search(r"^<<(EVIDENCE-[0-9a-f]{12}) source=", context, re.MULTILINE)
    assert m is not None, "no block header in the context"
    return m.group(1)


def excerpts(context: str) -> list[Excerpt]:
    """Every excerpt, in the order the context shows them. Block headers and fenced markers are found by the real
    fence (a text cannot hold it); plain ``[Sn]`` markers are used only when no text holds anything like one, so a
    line starting with ``[Sn]`` is a marker.

    Args:
        context: A packed context.
    """
    fence = re.escape(fence_of(context))
    start = re.search(rf"^<<{fence} source=", context, re.MULTILINE)
    assert start is not None
    closing = f"<</{fence_of(context)}>>\n"
    assert context.endswith(closing), "the evidence does not end with its closing line"
    body = context[start.start() : -len(closing)]
    fenced = re.search(rf"^<<{fence} S\d+>>", body, re.MULTILINE) is not None
    marker = rf"<<{fence} (S\d+)>>" if fenced else r"\[(S\d+)\]"
    token = re.compile(
        rf"^(?:(<<{fence} source=[^\n]*>>)|{marker}(?: pp?\. \d+(?:-\d+)?)?(?: § ([^\n]*))?)\n", re.MULTILINE
    )
    out: list[Excerpt] = []
    header = ""
    current: tuple[str, str, int] | None = None
    for m in token.finditer(body):
        if current is not None:
            # an excerpt is followed by "\n" before the next marker, by a blank line before the next block
            cut = 2 if m.group(1) is not None else 1
            cid, section, pos = current
            out.append(Excerpt(cid, header, section, body[pos : m.start() - cut]))
            current = None
        if m.group(1) is not None:
            header = m.group(1)
        else:
            current = (m.group(2), m.group(3) or "", m.end())
    if current is not None:
        cid, section, pos = current
        out.append(Excerpt(cid, header, section, body[pos:-1]))
    return out
