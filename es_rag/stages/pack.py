"""Token-budget context packing with citations.

Blocks are counted in model tokens with a configurable tokenizer (default: the embedding model's);
the most relevant evidence goes to the head and the tail of the context, the weakest in the middle
("lost in the middle"). A block's text is the hit's ``display_text`` (its text; for an HTML chunk written as markup
by an earlier version, its visible text), and the budget counts that rendered text. Each block is
delimited by a fence derived from a hash of all block texts,
so retrieved text cannot forge a delimiter, and citation ids in an answer can be validated against
the packed set with :func:`validate_citations`.

An expanded block (a parent section, a neighbour block) that does not fit is not simply lost with the children it
stands for: its :class:`Fallback` children -- the units retrieval and selection chose -- are packed in its place when
they fit, and the trace says so per block (``parent P over budget (N tokens > M left): kept the child c1``). At most
``limit`` (``context_k``) blocks are packed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from es_rag.encoders.tokenizer import Tokenizer
from es_rag.errors import ConfigError
from es_rag.records import Hit, is_content_digest, page_label
from es_rag.stages.base import StageOutput

PROMPT_VERSION = "ctx-5"


@dataclass(frozen=True)
class Citation:
    """Where a cited block came from."""

    citation_id: str
    chunk_id: str
    source_id: str
    source_version: str | None
    heading_path: tuple[str, ...]
    start_offset: int | None
    end_offset: int | None
    expanded_from: tuple[str, ...] = ()
    page_start: int | None = None
    page_end: int | None = None
    page_label_start: str | None = None
    page_label_end: str | None = None

    @property
    def label(self) -> str:
        """How a reader names it: ``S2``, with its pages for a paged source (``S2, p. 14``, ``S2, pp. 14-15``; the
        printed page labels where the document has them)."""
        pages = page_label(self.page_start, self.page_end, self.page_label_start, self.page_label_end)
        return f"{self.citation_id}, {pages}" if pages else self.citation_id

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "id": self.citation_id,
            "chunk_id": self.chunk_id,
            "source_id": self.source_id,
            "source_version": self.source_version,
            "heading_path": list(self.heading_path),
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "page_start": self.page_start,
            "page_end": self.page_end,
            "page_label_start": self.page_label_start,
            "page_label_end": self.page_label_end,
            "label": self.label,
            "expanded_from": list(self.expanded_from),
        }


@dataclass
class PackedContext:
    """The rendered context, its token count, its citations and what did not fit."""

    text: str
    tokens: int
    citations: list[Citation] = field(default_factory=list)
    omitted: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form used by ``search --json``."""
        return {"text": self.text, "tokens": self.tokens, "citations": [c.to_dict() for c in self.citations]}


def lost_in_the_middle_order(n: int) -> list[int]:
    """Positions for ``n`` items ranked best first: best at the head, second best at the tail,
    third after the head, and so on, so the weakest land in the middle.

    Args:
        n: Number of items.
    """
    head: list[int] = []
    tail: list[int] = []
    for i in range(n):
        (head if i % 2 == 0 else tail).append(i)
    return head + tail[::-1]


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent.parent / "templates")),
    autoescape=False,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
)


def _attribute(value: str) -> str:
    """A block attribute value (title, URL or path) on one line, without the quote or the ``<<``/``>>`` that
    delimit a block header."""
    return " ".join(value.split()).replace('"', "'").replace("<<", "< <").replace(">>", "> >")


def _section(hit: Hit) -> str:
    """Where an excerpt sits, on one line: its heading path without a first heading that is the document title
    (the group's header shows the title)."""
    path = [" ".join(p.split()) for p in hit.heading_path if p and p.strip()]
    title = " ".join(hit.title.split()) if hit.title else ""
    if path and path[0] == title:
        path = path[1:]
    return _attribute(" > ".join(path))


def _block_date(hit: Hit) -> str | None:
    """The date a block shows: ``meta.updated``, ``published`` or ``valid_from``, when it says more than the
    version (a version that is itself that date is not repeated)."""
    for name in ("updated", "published", "valid_from"):
        value = hit.meta.get(name) if hit.meta else None
        if isinstance(value, str) and value:
            day = value[:10]
            return None if day == (hit.source_version or "")[:10] else day
    return None


def _fence(texts: Sequence[str]) -> str:
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()[:12]
    return f"EVIDENCE-{digest}"


_MARKER_RE = re.compile(r"\[S\d+\]")


def _layout(selection: Sequence[Hit]) -> dict[str, Any]:
    """What the template renders for ``selection`` (best first; its citation ids are S1, S2, ... in that order):
    one group per source version, the groups in lost-in-the-middle order of their best excerpt, each group's
    excerpts in document order."""
    groups: dict[tuple[str, str | None], list[int]] = {}
    for pos, h in enumerate(selection):
        groups.setdefault((h.source_id, h.source_version), []).append(pos)
    ranked = list(groups.values())  # by best member: insertion order is rank order
    fence = _fence([h.display_text for h in selection])
    # an excerpt marker a block's own text could imitate is fenced too (the text cannot hold the fence)
    fenced = any(_MARKER_RE.search(h.display_text) for h in selection)
    out = []
    for g in lost_in_the_middle_order(len(ranked)):
        members = sorted(
            ranked[g], key=lambda i: (selection[i].start_offset is None, selection[i].start_offset or 0, i)
        )
        first = selection[members[0]]
        excerpts = []
        previous: str | None = None
        for i in members:
            h = selection[i]
            section = _section(h)
            excerpts.append(
                {
                    "citation_id": f"S{i + 1}",
                    "pages": page_label(h.page_start, h.page_end, h.page_label_start, h.page_label_end),
                    # the heading path, when it says more than the group's title and the previous excerpt
                    "section": section if section and section != previous else "",
                    # what the model reads (HTML: the visible text); the offsets still index the source
                    "text": h.display_text,
                }
            )
            previous = section
        out.append(
            {
                "source_id": first.source_id,
                # a content digest (sha256:...) is an internal id, never shown to the model
                "source_version": None if is_content_digest(first.source_version or "") else first.source_version,
                "title": _attribute(first.title) if first.title else "",
                "location": _attribute(str(first.meta.get("url") or "")),
                "date": _block_date(first),
                "excerpts": excerpts,
            }
        )
    return {"groups": out, "fence": fence, "fenced_markers": fenced}


@dataclass(frozen=True)
class Fallback:
    """What the pack stage packs instead of an expanded block that does not fit: the retrieved units it holds.

    Attributes:
        label: The block in words, for the trace (``parent P``, ``neighbour block of c2``).
        children: The selected (or refilled) children inside it, best first.
    """

    label: str
    children: tuple[Hit, ...]


def pack_context(
    hits: Sequence[Hit],
    tokenizer: Tokenizer,
    *,
    budget: int,
    template: str = "context.j2",
    fallbacks: Mapping[str, Fallback] | None = None,
    limit: int | None = None,
) -> PackedContext:
    """Pack ``hits`` (best first) into at most ``budget`` tokens with citation ids S1, S2, ...

    A hit that does not fit is skipped (recorded in ``omitted``) and smaller later hits may still
    fit. An expanded block that does not fit falls back to its children (``fallbacks``), each packed in its
    place when it fits. The rendered text, delimiters included, is re-counted so the budget holds for the
    final string.

    Args:
        hits: Selected evidence, best first.
        tokenizer: Counts model tokens.
        budget: Token budget of the whole rendered context.
        template: Jinja2 template file under ``es_rag/templates``.
        fallbacks: Expanded block id -> the children packed instead when it does not fit.
        limit: Most blocks packed (``context_k``); None = no limit.
    """
    return _pack(hits, tokenizer, budget=budget, template=template, fallbacks=fallbacks, limit=limit)[0]


def _pack(
    hits: Sequence[Hit],
    tokenizer: Tokenizer,
    *,
    budget: int,
    template: str = "context.j2",
    fallbacks: Mapping[str, Fallback] | None = None,
    limit: int | None = None,
) -> tuple[PackedContext, list[Hit], dict[str, list[str]], list[str]]:
    """:func:`pack_context`, plus the packed hits in rank order, the children each over-budget block fell back
    to, and the children tried."""
    if budget < 1:
        raise ConfigError(f"budget: must be >= 1, got {budget}")
    tmpl = _ENV.get_template(template)
    chosen: list[Hit] = []
    omitted: list[dict[str, str]] = []
    fell_back: dict[str, list[str]] = {}
    tried: list[str] = []
    used = 0  # tokens of the context rendered from ``chosen``

    def render(selection: Sequence[Hit]) -> str:
        return tmpl.render(**_layout(selection))

    def place(hit: Hit) -> int | None:
        """Pack ``hit`` when it fits and return None; else the tokens it would take."""
        nonlocal chosen, used
        trial = [*chosen, hit]
        tokens = tokenizer.count(render(trial))
        if tokens <= budget:
            chosen, used = trial, tokens
            return None
        return tokens - used

    def full() -> bool:
        return limit is not None and len(chosen) >= limit

    for hit in hits:
        if full():
            omitted.append({"id": hit.chunk_id, "reason": f"context_k={limit} blocks already packed"})
            continue
        if any(c.chunk_id == hit.chunk_id for c in chosen):
            omitted.append({"id": hit.chunk_id, "reason": "duplicate chunk_id: packed once"})
            continue
        left = budget - used
        need = place(hit)
        if need is None:
            continue
        fallback = (fallbacks or {}).get(hit.chunk_id)
        if fallback is None:
            omitted.append({"id": hit.chunk_id, "reason": f"token budget {budget} exceeded"})
            continue
        kept: list[str] = []
        child_notes: list[dict[str, str]] = []
        for child in fallback.children:
            tried.append(child.chunk_id)
            if full():
                reason = f"context_k={limit} blocks already packed"
            elif any(c.chunk_id == child.chunk_id for c in chosen):
                reason = "duplicate chunk_id: packed once"
            elif place(child) is None:
                kept.append(child.chunk_id)
                continue
            else:
                reason = f"token budget {budget} exceeded"
            child_notes.append({"id": child.chunk_id, "reason": f"{reason} (in place of {fallback.label})"})
        if kept:
            outcome = f"kept the child{'ren' if len(kept) > 1 else ''} {', '.join(kept)}"
            fell_back[hit.chunk_id] = kept
        else:
            outcome = "no child fits either"
        omitted.append(
            {"id": hit.chunk_id, "reason": f"{fallback.label} over budget ({need} tokens > {left} left): {outcome}"}
        )
        omitted.extend(child_notes)
    text = render(chosen) if chosen else ""
    citations = [
        Citation(
            f"S{i + 1}",
            h.chunk_id,
            h.source_id,
            h.source_version,
            h.heading_path,
            h.start_offset,
            h.end_offset,
            h.expanded_from,
            h.page_start,
            h.page_end,
            h.page_label_start,
            h.page_label_end,
        )
        for i, h in enumerate(chosen)
    ]
    # Every citation must point at an input hit (or a child an input block fell back to), once: the set handed in
    # is the only valid one.
    input_ids = [h.chunk_id for h in hits] + tried
    cited = [c.chunk_id for c in citations]
    if len(set(cited)) != len(cited) or not set(cited) <= set(input_ids):
        raise ConfigError(f"pack_context: citations {cited} do not map one-to-one onto the input hits")
    ctx = PackedContext(text=text, tokens=tokenizer.count(text), citations=citations, omitted=omitted)
    return ctx, chosen, fell_back, tried


def run(
    hits: Sequence[Hit],
    tokenizer: Tokenizer,
    *,
    budget: int,
    fallbacks: Mapping[str, Fallback] | None = None,
    limit: int | None = None,
    warning: str | None = None,
) -> tuple[PackedContext, StageOutput]:
    """The pack stage: the packed context, and what the trace records of it (what did not fit, the tokens, the
    children packed in place of an over-budget block).

    Args:
        hits: Expanded evidence, best first.
        tokenizer: Counts the budget (the target LLM's tokenizer, else the embedding model's).
        budget: Token budget of the whole rendered context.
        fallbacks: Expanded block id -> the children packed instead when it does not fit.
        limit: Most blocks packed (``context_k``); None = no limit.
        warning: The settings' budget warning (:meth:`es_rag.settings.Settings.budget_warning`), recorded as is.
    """
    ctx, chosen, fell_back, tried = _pack(hits, tokenizer, budget=budget, fallbacks=fallbacks, limit=limit)
    info: dict[str, Any] = {"tokens": ctx.tokens, "budget": budget, "tokenizer": tokenizer.name}
    if fell_back:
        info["fell_back_to_children"] = fell_back
    if warning:
        info["budget_warning"] = warning
    return ctx, StageOutput(
        hits=chosen,
        dropped=[(o["id"], o["reason"]) for o in ctx.omitted],
        info=info,
        path=f"lost-in-the-middle order, {tokenizer.name} tokens, budget {budget}",
        added=tried,
    )


_CITE_RE = re.compile(r"\[(S\d+)\]")


def validate_citations(answer: str, context: PackedContext) -> tuple[list[str], list[str]]:
    """Split the ``[S<n>]`` citation ids in an answer into known and forged/unknown ones.

    Args:
        answer: Text produced from the context.
        context: The packed context the answer was generated from.
    """
    known = {c.citation_id for c in context.citations}
    found = list(dict.fromkeys(_CITE_RE.findall(answer)))
    return [c for c in found if c in known], [c for c in found if c not in known]
