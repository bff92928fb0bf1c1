"""Deterministic dedup before rerank: ids, hashes, formatting-only copies, overlapping windows."""

from __future__ import annotations

from es_rag.records import Hit
from es_rag.stages.dedup import dedup_hits, jaccard, normalize_text, normalized_hash, shingles, span_overlap


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


# ------------------------------------------------------------------------------ normalisation, literal expectations
def test_normalize_text_inline_markers_are_removed_without_a_space() -> None:
    assert normalize_text("a*b_c`d~e") == "abcde"
    assert normalize_text("**bold** __under__ ``code`` ~~gone~~") == "bold under code gone"


def test_normalize_text_block_markers_become_a_space() -> None:
    assert normalize_text("> quoted") == "quoted"
    assert normalize_text("### Heading") == "heading"
    assert normalize_text("a|b||c") == "a b c"
    assert normalize_text("x>y#z") == "x y z"


def test_normalize_text_list_markers_only_at_line_start() -> None:
    assert normalize_text("- one\n+ two\n  3. three\n4) four") == "one two three four"
    assert normalize_text("well-known x - y 1.5 2) b") == "well-known x - y 1.5 2) b"
    assert normalize_text("-item\n1.item") == "-item 1.item"


def test_normalize_text_case_unicode_and_whitespace() -> None:
    assert normalize_text("  Straße\t\tDE\n\n ﬁle  ") == "strasse de file"
    assert normalize_text("") == ""
    assert normalize_text(" \n\t ") == ""


def test_normalized_hash_is_sha256_of_the_normalised_text() -> None:
    abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # SHA-256("abc")
    assert normalized_hash("abc") == abc
    assert normalized_hash("  **ABC**\n") == abc
    assert normalized_hash("# ") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # SHA-256("")


def test_shingles() -> None:
    assert shingles("") == frozenset()
    assert shingles("**") == frozenset()
    assert shingles("One") == frozenset({("one",)})
    assert shingles("one, two! three?") == frozenset({("one", "two", "three")})
    assert shingles("a b c d") == frozenset({("a", "b", "c"), ("b", "c", "d")})
    assert shingles("a b c d e") == frozenset({("a", "b", "c"), ("b", "c", "d"), ("c", "d", "e")})
    assert shingles("a b c", size=2) == frozenset({("a", "b"), ("b", "c")})
    assert shingles("a b", size=2) == frozenset({("a", "b")})
    assert shingles("a b c d", size=4) == frozenset({("a", "b", "c", "d")})


def test_jaccard() -> None:
    x, y, z = ("x",), ("y",), ("z",)
    assert jaccard(frozenset(), frozenset()) == 0.0
    assert jaccard(frozenset({x}), frozenset()) == 0.0
    assert jaccard(frozenset({x}), frozenset({x})) == 1.0
    assert jaccard(frozenset({x}), frozenset({x, y})) == 0.5
    assert jaccard(frozenset({x, y}), frozenset({y, z})) == 1 / 3
    assert jaccard(frozenset({x}), frozenset({y})) == 0.0


# ------------------------------------------------------------------------------ span overlap
def test_span_overlap_share_of_the_shorter_span() -> None:
    a = hit("a", "x", span=(0, 100))
    assert span_overlap(a, hit("b", "y", span=(10, 20))) == 1.0  # contained
    assert span_overlap(hit("b", "y", span=(10, 20)), a) == 1.0
    assert span_overlap(a, hit("b", "y", span=(80, 120))) == 0.5  # 20 of the shorter 40
    assert span_overlap(hit("b", "y", span=(80, 120)), a) == 0.5
    assert span_overlap(a, hit("b", "y", span=(100, 200))) == 0.0  # touching
    assert span_overlap(a, hit("b", "y", span=(150, 200))) == 0.0  # apart: no negative share
    assert span_overlap(hit("b", "y", span=(150, 200)), a) == 0.0
    assert span_overlap(a, hit("b", "y", span=(50, 50))) == 0.0  # empty span
    assert span_overlap(a, hit("b", "y", span=(5, 6))) == 1.0  # one character, inside
    assert span_overlap(a, hit("b", "y", span=(100, 101))) == 0.0  # one character, just after


def test_span_overlap_needs_every_offset() -> None:
    full = (0, 100)
    for start, end in ((None, 100), (0, None)):
        b = Hit(
            chunk_id="b",
            source_id="s",
            source_version="v1",
            text="y",
            tenant_id="t",
            start_offset=start,
            end_offset=end,
        )
        a = hit("a", "x", span=full)
        assert span_overlap(a, b) == 0.0
        assert span_overlap(b, a) == 0.0


# ------------------------------------------------------------------------------ dedup_hits
def test_dedup_defaults_and_rules_info() -> None:
    res = dedup_hits([])
    assert res.hits == [] and res.dropped == [] and res.path == ""
    assert res.info == {
        "rules": {
            "chunk_id": True,
            "content_hash": True,
            "formatting": True,
            "adjacent_overlap": 0.8,
            "near_threshold": None,
        }
    }
    res = dedup_hits([], adjacent_overlap=None, near_threshold=0.5)
    assert res.info["rules"]["adjacent_overlap"] is None and res.info["rules"]["near_threshold"] == 0.5


def test_default_adjacent_overlap_is_080_inclusive() -> None:
    a = hit("a", "first", span=(0, 100))
    at = hit("b", "second", span=(20, 120))  # 80 of 100
    below = hit("c", "third", span=(21, 121))  # 79 of 100
    res = dedup_hits([a, at])
    assert [h.chunk_id for h in res.hits] == ["a"]
    assert res.dropped == [("b", "overlapping window of a (0.80 of the shorter span)")]
    assert [h.chunk_id for h in dedup_hits([a, below]).hits] == ["a", "c"]


def test_adjacent_overlap_none_disables_the_rule() -> None:
    res = dedup_hits([hit("a", "first", span=(0, 100)), hit("b", "second", span=(0, 100))], adjacent_overlap=None)
    assert [h.chunk_id for h in res.hits] == ["a", "b"] and res.dropped == []


def test_adjacent_overlap_names_the_first_kept_window() -> None:
    hits = [hit("a", "one", span=(0, 100)), hit("b", "two", span=(100, 200)), hit("c", "three", span=(50, 150))]
    res = dedup_hits(hits, adjacent_overlap=0.5)
    assert [h.chunk_id for h in res.hits] == ["a", "b"]
    assert res.dropped == [("c", "overlapping window of a (0.50 of the shorter span)")]


def test_dropped_hits_are_not_remembered() -> None:
    # each rule drops a copy; a later hit equal only to the dropped copy (not to a kept one) is kept
    hits = [
        hit("a", "alpha text", chash="h1", span=(0, 100)),
        hit("b", "beta text", chash="h1", span=(200, 300)),  # dropped: same hash as a
        hit("b", "gamma text", chash="h2", span=(400, 500)),  # same id as the dropped b: kept
        hit("c", "**Alpha** TEXT", span=(600, 700)),  # dropped: formatting copy of a
        hit("c", "delta text", span=(800, 900)),  # same id as the dropped c: kept
        hit("d", "epsilon", span=(10, 90)),  # dropped: window inside a
        hit("e", "zeta", span=(15, 85)),  # overlaps only the dropped d (and a): names a
    ]
    res = dedup_hits(hits)
    assert [h.chunk_id for h in res.hits] == ["a", "b", "c"]
    assert res.dropped == [
        ("b", "same content_hash as a"),
        ("c", "formatting-only duplicate of a"),
        ("d", "overlapping window of a (1.00 of the shorter span)"),
        ("e", "overlapping window of a (1.00 of the shorter span)"),
    ]


def test_empty_or_missing_content_hash_never_matches() -> None:
    hits = [hit("a", "one text", chash=""), hit("b", "two text", chash=""), hit("c", "three text"), hit("d", "four")]
    res = dedup_hits(hits)
    assert [h.chunk_id for h in res.hits] == ["a", "b", "c", "d"] and res.dropped == []


def test_later_hits_are_still_examined_after_each_drop() -> None:
    hits = [
        hit("a", "one text", chash="h1"),
        hit("a", "dup id"),
        hit("x", "x text"),
        hit("b", "other", chash="h1"),
        hit("y", "y text"),
        hit("c", "ONE  text"),
        hit("z", "z text"),
    ]
    res = dedup_hits(hits)
    assert [h.chunk_id for h in res.hits] == ["a", "x", "y", "z"]
    assert res.dropped == [
        ("a", "same chunk_id"),
        ("b", "same content_hash as a"),
        ("c", "formatting-only duplicate of a"),
    ]


NEAR_A = "the retention period for shared files is ninety days"
# 7 shingles of NEAR_A; NEAR_B shares 6 of its 7: jaccard 6/8 = 0.75
NEAR_B = "the retention period for shared files is ninety weeks"


def test_near_duplicate_threshold_is_inclusive_and_named() -> None:
    res = dedup_hits([hit("a", NEAR_A), hit("b", NEAR_B, source="o")], near_threshold=0.75)
    assert [h.chunk_id for h in res.hits] == ["a"]
    assert res.dropped == [("b", "near-duplicate of a (shingle jaccard 0.75)")]
    res = dedup_hits([hit("a", NEAR_A), hit("b", NEAR_B, source="o")], near_threshold=0.76)
    assert [h.chunk_id for h in res.hits] == ["a", "b"]


def test_near_duplicate_same_source_same_version_is_dropped() -> None:
    res = dedup_hits([hit("a", NEAR_A), hit("b", NEAR_B)], near_threshold=0.75)
    assert [h.chunk_id for h in res.hits] == ["a"]
    res = dedup_hits([hit("a", NEAR_A), hit("b", NEAR_B, version="v2")], near_threshold=0.75)
    assert [h.chunk_id for h in res.hits] == ["a", "b"]  # two versions of one source: both kept
    res = dedup_hits([hit("a", NEAR_A), hit("b", NEAR_B, source="o", version="v2")], near_threshold=0.75)
    assert [h.chunk_id for h in res.hits] == ["a"]  # another source, another version: a duplicate


def test_near_duplicate_looks_past_another_version_of_the_same_source() -> None:
    other = "completely unrelated words about printers and toner cartridges"
    hits = [hit("a", other, version="v2"), hit("b", NEAR_A, source="o"), hit("c", NEAR_B)]
    res = dedup_hits(hits, near_threshold=0.7)
    assert [h.chunk_id for h in res.hits] == ["a", "b"]
    assert res.dropped == [("c", "near-duplicate of b (shingle jaccard 0.75)")]


def test_near_duplicate_names_the_first_kept_match() -> None:
    # b and c share 2 of 6 shingles (1/3: both kept); d shares 4 of 6 with each (2/3)
    hits = [
        hit("b", "w1 w2 w3 w4 w5 w6", source="o"),
        hit("c", "w3 w4 w5 w6 w7 w8", source="p"),
        hit("d", "w1 w2 w3 w4 w5 w6 w7 w8", source="q"),
    ]
    res = dedup_hits(hits, near_threshold=0.6)
    assert [h.chunk_id for h in res.hits] == ["b", "c"]
    assert res.dropped == [("d", "near-duplicate of b (shingle jaccard 0.67)")]


def test_overlap_reason_wins_over_near_duplicate() -> None:
    hits = [hit("a", NEAR_A, span=(0, 100)), hit("b", NEAR_B, span=(0, 100))]
    res = dedup_hits(hits, near_threshold=0.5)
    assert res.dropped == [("b", "overlapping window of a (1.00 of the shorter span)")]
