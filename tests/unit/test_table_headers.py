"""Seed 000: a table's header and its cells must not part. A table split at row boundaries repeats its header rows
in every later chunk's ``contextual_text`` (what the model embeds and ranks); ``text`` and the offsets still point
at the source rows. Counts use whitespace words, so every budget below is worked out by hand."""

from __future__ import annotations

from es_rag.chunking import make_chunker
from es_rag.chunking.html import visible_text
from es_rag.chunking.markdown import markdown_tables
from es_rag.records import Chunk
from tests.support.corpus import WordTokenizer

HEADER = "| Plan | Wipe | Days |\n|---|---|---|"  # 7 + 1 = 8 words
ROWS = [f"| P{i} | yes | {i}0 |" for i in range(1, 7)]  # 7 words each
MD = "# Retention\n\n" + HEADER + "\n" + "\n".join(ROWS) + "\n\nAfter the table.\n"


def children(text: str, *, fmt: str = "markdown", strategy: str = "structure", max_tokens: int = 30) -> list[Chunk]:
    chunker = make_chunker(WordTokenizer(), strategy=strategy, max_tokens=max_tokens, overlap=0)
    out = chunker.chunk(text, source_id="s", source_version="v1", tenant_id="t", acl=(), fmt=fmt)
    return [c for c in out if c.kind == "child"]


def test_markdown_tables_locate_the_header_rows() -> None:
    tables = markdown_tables(MD)
    assert len(tables) == 1
    (start, end), (hs, he) = tables[0].span, tables[0].header
    assert MD[hs:he] == HEADER
    assert MD[start:end] == HEADER + "\n" + "\n".join(ROWS)


def test_split_table_repeats_its_header_in_every_later_chunk() -> None:
    """Budget 30 words. The section's blocks: "# Retention" (2) and the table (8 + 6 x 7 = 50), which does not fit
    and splits at its lines: header row (7), delimiter (1), six rows of 7. Packing: 2 + 7 + 1 + 7 + 7 = 24 fit, a
    third row makes 31. A chunk starting at row 3 carries the 8-word header: 8 + 3 x 7 = 29 fit, a 4th row makes
    36; row 6 starts the last one: 8 + 7 + "After the table." (3) = 18."""
    got = children(MD)
    body = [c for c in got if "| P" in c.text]
    assert [c.text for c in body] == [
        "# Retention\n\n" + HEADER + "\n" + "\n".join(ROWS[:2]),
        "\n".join(ROWS[2:5]),
        ROWS[5] + "\n\nAfter the table.",
    ]
    assert body[0].contextual_text is None  # it holds the header itself
    assert body[1].contextual_text == HEADER + "\n" + "\n".join(ROWS[2:5])
    assert body[2].contextual_text == HEADER + "\n" + ROWS[5] + "\n\nAfter the table."
    assert [c.token_count for c in body] == [24, 29, 18]
    for c in body:  # the offsets still point at the source rows
        assert MD[c.start_offset : c.end_offset] == c.text


def test_header_tokens_count_in_the_budget() -> None:
    """Budget 20: a chunk of body rows may hold 20 - 8 = 12 words of rows, so one row (7) each; without the
    reserve two rows (14) would have fit."""
    body = [c for c in children(MD, max_tokens=20) if "| P" in c.text and "| Plan" not in c.text]
    assert [c.text.count("| P") for c in body] == [1, 1, 1, 1, 1]
    assert [c.token_count for c in body] == [15, 15, 15, 15, 18]  # the last takes "After the table." (3)


def test_a_table_that_fits_is_not_repeated_and_other_blocks_get_no_header() -> None:
    small = "# T\n\n" + HEADER + "\n" + ROWS[0] + "\n\nA paragraph here.\n"
    assert all(c.contextual_text is None for c in children(small))
    after = children(MD, max_tokens=12)  # "After the table." is its own chunk here: it is not a table row
    tail = [c for c in after if c.text == "After the table."]
    assert tail and tail[0].contextual_text is None


def test_the_contextual_prefix_comes_before_the_header() -> None:
    chunker = make_chunker(WordTokenizer(), strategy="structure", max_tokens=40, overlap=0, contextual=True)
    got = [c for c in chunker.chunk(MD, source_id="s", source_version="v1", tenant_id="t", acl=()) if c.kind == "child"]
    later = [c for c in got if c.text.startswith("| P") and c.contextual_text]
    assert later
    assert later[0].contextual_text.startswith("Retention\nRetention\n\n" + HEADER + "\n| P")  # type: ignore[union-attr]


def test_fixed_windows_stay_plain() -> None:
    """The baseline strategies do not repeat headers: their windows are plain token windows."""
    assert all(c.contextual_text is None for c in children(MD, strategy="fixed", max_tokens=12))


HTML = (
    "<html><body><h1>Retention</h1><table>"
    "<thead><tr><th>Plan</th><th>Wipe</th></tr></thead><tbody>"
    + "".join(f"<tr><td>P{i}</td><td>yes {i}</td></tr>" for i in range(1, 7))
    + "</tbody></table></body></html>"
)


def test_html_table_rows_repeat_the_thead_text() -> None:
    """Visible words: heading "Retention" (1), header "Plan Wipe" (2), each row "P<i> yes <i>" (3). Budget 8: the
    table (2 + 18) splits into thead and tbody, the tbody into rows. Heading + thead + row 1 = 6 fit, row 2 makes
    9; later chunks reserve the 2 header words: 2 + 3 + 3 = 8, so two rows each, and row 6 alone (5)."""
    got = [c for c in children(HTML, fmt="html", max_tokens=8) if "yes" in c.text]
    assert [c.token_count for c in got] == [6, 8, 8, 5]
    # the first chunk holds the header itself (its text is the visible text: nothing to repeat)
    assert got[0].text == "Retention\nPlan\nWipe\nP1\nyes 1" and got[0].contextual_text is None
    assert [c.contextual_text for c in got[1:]] == [
        "Plan\nWipe\nP2\nyes 2\nP3\nyes 3",
        "Plan\nWipe\nP4\nyes 4\nP5\nyes 5",
        "Plan\nWipe\nP6\nyes 6",
    ]
    clean = visible_text(HTML)
    for c in got:
        assert clean[c.start_offset : c.end_offset] == c.text  # one clean text: offsets index the visible text


def test_html_table_without_a_header_repeats_nothing() -> None:
    plain = "<table>" + "".join(f"<tr><td>P{i}</td><td>yes {i}</td></tr>" for i in range(1, 7)) + "</table>"
    got = children(plain, fmt="html", max_tokens=8)
    assert len(got) > 1
    assert all(c.contextual_text is None and not c.text.startswith("P1\nyes 1\nP") for c in got[1:])
