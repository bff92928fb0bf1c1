"""Reading Elasticsearch's answers: hits into :class:`~es_rag.records.Hit`, error bodies into one-line
reasons, bulk item failures, and the ``semantic`` highlighter's server-side chunk."""

from __future__ import annotations

from typing import Any

from es_rag.records import Hit
from es_rag.settings import SEMANTIC_FIELD


def locate_server_chunk(section: Hit, fragment: str) -> Hit:
    """Narrow a section hit to the server-side chunk the ``semantic`` highlighter returned.

    Elasticsearch stores ``semantic_text`` chunks as offsets into the field value but does not return
    them; the highlighter returns the chunk's text. When that text is a span of the section's ``text``
    (always so when the field was filled from ``text``; for ``contextual_text`` only when the chunk lies
    in the part equal to the source), the hit becomes that span with source offsets, so
    ``source[start_offset:end_offset] == text`` still holds. Otherwise (chunk spans a contextual prefix,
    HTML visible text) the whole section is kept: its lineage stays exact, the chunk is not located.

    Args:
        section: The hit as stored (a whole section).
        fragment: The best chunk's text from ``highlight.<semantic field>[0]``.
    """
    if not fragment or section.start_offset is None:
        return section
    at = section.text.find(fragment)
    if at < 0 or len(fragment) == len(section.text):
        return section
    start = section.start_offset + at
    # the fragment is a literal span of the stored text: it is its own visible text (a section's visible_text would
    # describe the whole section)
    return section.replace(
        text=fragment, visible_text=None, start_offset=start, end_offset=start + len(fragment), token_count=None
    )


def hit_from_es(raw: dict[str, Any]) -> Hit:
    source = dict(raw.get("_source", {}))
    source.setdefault("chunk_id", raw.get("_id"))
    hit = Hit.from_source(source)
    fragments = (raw.get("highlight") or {}).get(SEMANTIC_FIELD) or []
    return locate_server_chunk(hit, str(fragments[0])) if fragments else hit


def server_chunk_note(raw_hits: list[dict[str, Any]]) -> str:
    """Trace note: how many semantic hits were narrowed to their best server-side chunk."""
    with_fragment = [h for h in raw_hits if (h.get("highlight") or {}).get(SEMANTIC_FIELD)]
    located = sum(1 for h in with_fragment if hit_from_es(h).text != str((h.get("_source") or {}).get("text", "")))
    return (
        f"semantic_text: {located} of {len(raw_hits)} hits narrowed to their best server-side chunk "
        f"({len(with_fragment)} highlighted; the rest keep the whole section)"
    )


def error_reason(error: Any) -> str:
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict):
            cause = inner.get("caused_by") or {}
            reason = inner.get("reason") or inner.get("type") or str(inner)
            if isinstance(cause, dict) and cause.get("reason"):
                return f"{reason}: {cause['reason']}"
            return str(reason)
        return str(inner)
    return str(error)


def failed_field(error: Any) -> str:
    text = error_reason(error)
    for name in ("tenant_id", "source_id", "chunk_id", "text", "vector"):
        if f"'{name}'" in text or f"[{name}]" in text:
            return name
    return "document"


def fatal_bulk_reason(status: int, info: dict[str, Any]) -> str:
    """A bulk refusal that no retry fixes, in words."""
    error = info.get("error", {})
    text = error_reason(error) if isinstance(error, dict) else str(error)
    if status == 401:
        return f"authentication failed (HTTP 401): set ES_API_KEY, or ES_USERNAME and ES_PASSWORD ({text})"
    if status == 403:
        return f"permission denied (HTTP 403): ingest needs the index privileges write and read ({text})"
    return f"request too large (HTTP 413): fewer or smaller documents per bulk ({text})"
