"""Semantic chunking (``strategy="semantic"``): children cut where neighbouring sentences change topic, measured
with a deterministic fake embedding (topic A and topic B words map to orthogonal vectors); exact offsets, the
token limit, parents, versions, and the ``es-rag ingest --strategy semantic`` wiring with a tiny model."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.chunking import Chunker, Strategy, make_chunker
from es_rag.chunking.html import visible_text
from es_rag.chunking.semantic import SemanticChunker
from es_rag.encoders.tokenizer import HFTokenizer, Tokenizer
from es_rag.errors import ConfigError
from es_rag.records import Chunk

CATS = [
    "The cat sleeps on the warm sofa all afternoon.",
    "A kitten chases the cat toy across the kitchen floor.",
    "Our cat purrs loudly when the kitten curls up beside her.",
    "Every cat in the house waits for fish at six.",
    "The old cat ignores the kitten most mornings.",
    "A cat flap lets the kitten out into the garden.",
]
MARKETS = [
    "The stock market fell sharply on Monday morning.",
    "Investors sold bonds as the market priced in new rates.",
    "Bond yields rose while the market waited for the central bank.",
    "Analysts expect the market to stay volatile for investors.",
    "Currency traders followed the bond market closely.",
    "Investors bought gold when the market slid again.",
]
TOPIC_A = ("cat", "kitten")
TOPIC_B = ("market", "investors", "bond")


def topic_embed(texts: list[str]) -> np.ndarray:
    """Topic A words point along x, topic B words along y, anything else along a small z: unit rows."""
    rows = []
    for text in texts:
        low = text.lower()
        a = sum(low.count(w) for w in TOPIC_A)
        b = sum(low.count(w) for w in TOPIC_B)
        v = np.array([a, b, 0.05 if a + b else 1.0])
        rows.append(v / np.linalg.norm(v))
    return np.array(rows)


def hashed_embed(texts: list[str]) -> np.ndarray:
    """A stable pseudo-random unit vector per text (no topic structure at all)."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        v = np.random.default_rng(seed).normal(size=16)
        rows.append(v / np.linalg.norm(v))
    return np.array(rows)


def chunker(tok: Tokenizer, **kw: Any) -> Chunker:
    options: dict[str, Any] = {
        "embed": topic_embed,
        "embed_version": "fake-model@1",
        "max_tokens": 200,
        "overlap": 20,
        **kw,
    }
    if "min_tokens" in options or "buffer" in options:  # not make_chunker options
        return SemanticChunker(tok, **options)
    return make_chunker(tok, strategy="semantic", **options)


def run(ch: Chunker, text: str, fmt: str = "markdown") -> list[Chunk]:
    return ch.chunk(text, source_id="doc-1", source_version="v1", tenant_id="acme", acl=["public"], fmt=fmt)


def children(chunks: list[Chunk]) -> list[Chunk]:
    return [c for c in chunks if c.kind == "child"]


def test_a_document_is_cut_where_the_topic_changes(minilm_tokenizer: HFTokenizer) -> None:
    text = "# Notes\n\n" + " ".join(CATS) + " " + " ".join(MARKETS) + "\n"
    ch = chunker(minilm_tokenizer)
    assert isinstance(ch, SemanticChunker) and ch.strategy is Strategy.SEMANTIC
    chunks = run(ch, text)
    kids = children(chunks)
    assert len(kids) == 2
    assert kids[0].text.startswith("# Notes") and kids[0].text.endswith(CATS[-1])
    assert kids[1].text == " ".join(MARKETS)
    for c in chunks:
        assert c.text == text[c.start_offset : c.end_offset]
        assert c.chunker_version == ch.version and c.chunker_version.startswith("semantic-1+")
    (parent,) = [c for c in chunks if c.kind == "parent"]
    assert all(k.parent_id == parent.chunk_id and k.heading_path == ("Notes",) for k in kids)
    # the same document on one topic has no breakpoint: one child while it fits
    one = "# Notes\n\n" + " ".join(CATS) + "\n"
    assert [k.text for k in children(run(ch, one))] == [one.strip()]


def test_topics_change_across_paragraphs_and_sections(minilm_tokenizer: HFTokenizer) -> None:
    text = (
        "# Pets\n\n"
        + " ".join(CATS[:3])
        + "\n\n"
        + " ".join(MARKETS[:3])
        + "\n\n## More pets\n\n"
        + " ".join(CATS[3:])
        + "\n"
    )
    kids = children(run(chunker(minilm_tokenizer), text))
    assert [k.heading_path for k in kids] == [("Pets",), ("Pets",), ("Pets", "More pets")]
    assert kids[0].text.endswith(CATS[2]) and kids[1].text == " ".join(MARKETS[:3])
    assert kids[2].text.startswith("## More pets")


def test_offsets_round_trip_and_max_tokens_hold_on_a_mixed_document(minilm_tokenizer: HFTokenizer) -> None:
    long_sentence = "This sentence goes on " + "and on " * 60 + "until it ends."
    text = (
        "---\ntitle: Mixed\n---\n# Guide\n\n"
        + " ".join(CATS)
        + "\n\n| Plan | Price |\n|------|-------|\n| Free | 0 |\n| Pro | 10 |\n\n"
        + "- first item about the market\n- second item about investors\n\n"
        + "```python\nprint('market')\nprint('cat')\n```\n\n"
        + long_sentence
        + "\n\n## Rates\n\n"
        + " ".join(MARKETS)
        + "\n\n    indented code block\n    second line\n"
    )
    for embed in (topic_embed, hashed_embed):
        for max_tokens in (24, 40, 128):
            ch = chunker(minilm_tokenizer, embed=embed, max_tokens=max_tokens, overlap=4, parent_max_tokens=300)
            chunks = run(ch, text)
            kids = children(chunks)
            parents = {c.chunk_id: c for c in chunks if c.kind == "parent"}
            assert kids and parents
            for c in chunks:
                assert c.text == text[c.start_offset : c.end_offset]
            for k in kids:
                assert k.token_count <= max_tokens, (max_tokens, k.text)
                parent = parents[str(k.parent_id)]
                assert parent.start_offset <= k.start_offset and k.end_offset <= parent.end_offset
                assert parent.token_count <= 300
            assert "title: Mixed" not in " ".join(c.text for c in chunks)  # front matter is never a chunk
            # children follow each other; only token windows (a unit too long alone) share their overlap
            ordered = sorted(kids, key=lambda k: k.start_offset)
            for a, b in itertools.pairwise(ordered):
                shared = text[b.start_offset : a.end_offset] if b.start_offset < a.end_offset else ""
                assert minilm_tokenizer.count(shared) <= 4
    # the table and the code block stay whole when they fit
    kids = children(run(chunker(minilm_tokenizer, embed=hashed_embed, max_tokens=128), text))
    table = "| Plan | Price |\n|------|-------|\n| Free | 0 |\n| Pro | 10 |"
    fence = "```python\nprint('market')\nprint('cat')\n```"
    assert any(table in k.text for k in kids) and any(fence in k.text for k in kids)


def test_an_over_long_run_is_cut_at_its_largest_distance(minilm_tokenizer: HFTokenizer) -> None:
    # one topic all along (no breakpoint), too long for one child: cut until every piece fits
    text = "# Cats\n\n" + " ".join(CATS * 3) + "\n"
    ch = chunker(minilm_tokenizer, max_tokens=60, overlap=5)
    kids = children(run(ch, text))
    assert len(kids) > 1
    assert all(k.token_count <= 60 for k in kids)
    assert all(k.text == text[k.start_offset : k.end_offset] for k in kids)
    assert kids[0].text.startswith("# Cats")  # the heading stays with its first sentence


def test_a_small_piece_joins_its_closer_neighbour(minilm_tokenizer: HFTokenizer) -> None:
    text = "# Notes\n\n" + " ".join(CATS) + " Bond yields rose.\n"
    merged = children(run(chunker(minilm_tokenizer, min_tokens=10, buffer=0), text))
    assert [k.text for k in merged] == [text.strip()]
    split = children(run(chunker(minilm_tokenizer, min_tokens=0, buffer=0), text))
    assert [k.text for k in split][-1] == "Bond yields rose."


def test_html_children_keep_exact_offsets(minilm_tokenizer: HFTokenizer) -> None:
    html = (
        "<html><head><title>T</title></head><body><h1>Mixed</h1>"
        f"<p>{' '.join(CATS)}</p><p>{' '.join(MARKETS)}</p>"
        "<table><tr><th>a</th></tr><tr><td>cat</td></tr></table></body></html>"
    )
    kids = children(run(chunker(minilm_tokenizer), html, fmt="html"))
    assert len(kids) >= 2
    for k in kids:
        assert k.text == visible_text(html)[k.start_offset : k.end_offset]  # one clean text (issue 31)
        assert k.visible_text is None and "<" not in k.text
    assert any(k.text.startswith(MARKETS[0]) for k in kids)


def test_version_follows_the_model_and_the_percentile(minilm_tokenizer: HFTokenizer) -> None:
    base = chunker(minilm_tokenizer).version
    assert chunker(minilm_tokenizer).version == base  # deterministic
    assert chunker(minilm_tokenizer, embed_version="fake-model@2").version != base
    assert chunker(minilm_tokenizer, breakpoint_percentile=90).version != base
    assert chunker(minilm_tokenizer, embed=hashed_embed).version == base  # the function itself is not the identity
    assert ".B95." in base and ".B90." in chunker(minilm_tokenizer, breakpoint_percentile=90).version
    parent_child = make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=200, overlap=20).version
    assert base != parent_child and base.startswith("semantic-1+L200.O20.")


def test_bad_settings_are_refused(minilm_tokenizer: HFTokenizer) -> None:
    with pytest.raises(ConfigError, match="needs embed= and embed_version="):
        make_chunker(minilm_tokenizer, strategy="semantic")
    for pct in (0, 101, -5):
        with pytest.raises(ConfigError, match="breakpoint_percentile"):
            chunker(minilm_tokenizer, breakpoint_percentile=pct)
    with pytest.raises(ConfigError, match="embed_version"):
        chunker(minilm_tokenizer, embed_version=" ")
    with pytest.raises(ConfigError, match="min_tokens"):
        chunker(minilm_tokenizer, min_tokens=200)
    with pytest.raises(ConfigError, match="one row per text"):
        run(chunker(minilm_tokenizer, embed=lambda texts: np.zeros((1, 3))), "# A\n\n" + " ".join(CATS))


def test_ingest_with_strategy_semantic(tiny_bi_encoder: Path, tmp_path: Path) -> None:
    from es_rag.cli import main
    from es_rag.settings import Settings
    from es_rag.wiring import build_backend

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Notes\n\n" + " ".join(CATS) + "\n\n" + " ".join(MARKETS) + "\n", encoding="utf-8")
    idx = tmp_path / "idx"
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    argv = ["ingest", str(docs), "--tenant", "t", "--index-dir", str(idx), "--strategy", "semantic", *model]
    assert main([*argv, "--chunk-max-tokens", "100", "--breakpoint-percentile", "80"]) == 0
    settings = Settings(embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=None)
    hits = build_backend(settings, index_dir=idx).all_hits()
    assert hits and {h.chunker_version.split("+")[0] for h in hits if h.chunker_version} == {"semantic-1"}
    assert all(".B80." in str(h.chunker_version) for h in hits)
