"""Deterministic dedup before rerank: ids, hashes, formatting-only copies, overlapping windows."""

from __future__ import annotations

from es_rag.records import Hit
from es_rag.stages.dedup import dedup_hits, normalize_text, span_overlap


def hit(
    cid: str,
    text: str,
    *,
    source: str = "s",
    version: str = "v1",
    span: tuple[int, int] | None = None,
    chash: str | None = None,
) -> Hit:
    return Hit(
        chunk_id=cid,
        source_id=source,
        source_version=version,
        text=text,
        tenant_id="t",
        content_hash=chash,
        start_offset=span[0] if span else None,
        end_offset=span[1] if span else None,
    )


def test_each_rule_names_the_kept_copy() -> None:
    hits = [
        hit("a", "Reset the password from Settings.", chash="h1", span=(0, 100)),
        hit("a", "Reset the password from Settings.", chash="h1", span=(0, 100)),
        hit("b", "Reset the password from Settings.", chash="h1", source="other"),
        hit("c", "**Reset** the   password from *Settings*.", source="third"),
        hit("d", "window text", span=(10, 100)),
        hit("e", "a different window", span=(90, 200)),
    ]
    res = dedup_hits(hits, adjacent_overlap=0.8)
    assert [h.chunk_id for h in res.hits] == ["a", "e"]
    assert res.dropped == [
        ("a", "same chunk_id"),
        ("b", "same content_hash as a"),
        ("c", "formatting-only duplicate of a"),
        ("d", "overlapping window of a (1.00 of the shorter span)"),
    ]


def test_adjacent_overlap_is_per_source_and_version() -> None:
    a = hit("a", "x", span=(0, 100))
    assert span_overlap(a, hit("b", "y", span=(50, 150))) == 0.5
    assert span_overlap(a, hit("b", "y", span=(50, 150), version="v2")) == 0.0
    assert span_overlap(a, hit("b", "y", span=(50, 150), source="o")) == 0.0
    res = dedup_hits([a, hit("b", "y", span=(50, 150))], adjacent_overlap=0.8)
    assert len(res.hits) == 2  # 50% overlap is normal chunk overlap: kept


def test_near_duplicates_are_off_by_default_and_never_across_versions() -> None:
    base = "the retention period for shared files is ninety days after deletion in every workspace"
    near = base + " today"
    assert len(dedup_hits([hit("a", base), hit("b", near, source="o")]).hits) == 2
    res = dedup_hits([hit("a", base), hit("b", near, source="o")], near_threshold=0.8)
    assert [h.chunk_id for h in res.hits] == ["a"] and res.dropped[0][1].startswith("near-duplicate of a")
    # Two versions of one source may disagree: both stay.
    res = dedup_hits([hit("a", base, version="2025"), hit("b", near, version="2026")], near_threshold=0.8)
    assert len(res.hits) == 2


def test_normalize_text() -> None:
    assert normalize_text("# Title\n\n- **Bold**  item | cell |") == "title bold item cell"
    assert normalize_text("ＡＢＣ") == "abc"
