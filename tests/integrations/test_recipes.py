"""``es_rag.integrations.recipes`` (``es-rag eval --golden --recipes``): es_rag beside LangChain's and LlamaIndex's
default recipes and BM25 alone, on a tiny Markdown corpus ingested by ``es-rag ingest`` and the tiny bi-encoder."""

from __future__ import annotations

import importlib
import itertools
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from es_rag import Settings
from es_rag.cli import main
from es_rag.errors import ConfigError, InputError, MissingDependencyError
from es_rag.evaluation.golden import GoldenQuestion, GoldSpan, load_golden
from es_rag.integrations.recipes import (
    ES_RAG,
    RECIPES,
    compare_recipes,
    format_recipes,
    parse_recipes,
    read_corpus,
    stuff,
)
from es_rag.integrations.recipes_common import checked_chunk
from es_rag.records import Hit

# long.md: 12 short paragraphs (~115 characters each) so LangChain's 1000-character chunks overlap by whole
# paragraphs (its overlap keeps trailing pieces of at most 200 characters).
PARAGRAPHS = [
    f"Paragraph {i} covers topic{i}: the remote wipe option {i} and how the sync client applies it." for i in range(12)
]
LONG = "# Long guide\n\n" + "\n\n".join(PARAGRAPHS) + "\n"
ZEBRA = "# Zebra\n\nZebras have black and white stripes.\n\nThey live in the grasslands of Africa.\n"
QUOKKA = "# Quokka\n\nThe quokka is a small marsupial.\n"
PAGE = "<html><body><h1>Page</h1><p>An HTML page.</p></body></html>\n"
BIG_BUDGET = 8000
SMALL_BUDGET = 300


@pytest.fixture(scope="module")
def corpus(tiny_bi_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Four sources (three Markdown, one HTML) ingested for tenant acme, and a golden file with spans."""
    root = tmp_path_factory.mktemp("recipes")
    docs = root / "docs"
    docs.mkdir()
    for name, text in (("long.md", LONG), ("zebra.md", ZEBRA), ("quokka.md", QUOKKA), ("page.html", PAGE)):
        (docs / name).write_text(text, encoding="utf-8")
    opts = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32", "--index-dir", str(root / "idx")]
    assert main(["ingest", str(docs), "--tenant", "acme", "--json", *opts]) == 0
    z = ZEBRA.index("Zebras")
    p7 = LONG.index(PARAGRAPHS[7])
    rows = [
        {"id": "z", "question": "zebras stripes", "gold": ["zebra.md"], "category": "animal",
         "spans": [{"source_id": "zebra.md", "start": z, "end": z + len("Zebras have black and white stripes.")}]},
        {"id": "q", "question": "quokka marsupial", "gold": ["quokka.md"], "category": "animal",
         "spans": [{"source_id": "quokka.md", "start": QUOKKA.index("The"), "end": len(QUOKKA) - 1}]},
        {"id": "l", "question": "topic7 remote wipe", "gold": ["long.md"], "category": "guide",
         "spans": [{"source_id": "long.md", "start": p7, "end": p7 + len(PARAGRAPHS[7])}]},
        {"id": "none", "question": "volcano eruption", "gold": [], "category": "no-answer"},
        {"id": "other", "question": "zebras", "gold": [], "tenant": "globex"},
    ]  # fmt: skip
    golden = root / "golden.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return SimpleNamespace(root=root, docs=docs, golden=golden, opts=opts, model=tiny_bi_encoder)


def _pipeline(corpus: SimpleNamespace, budget: int) -> Any:
    from es_rag.wiring import build_backend, build_embedder, build_pipeline

    settings = Settings(embedding_model=str(corpus.model), vector_dims=32, rerank_model=None, token_budget=budget)
    return build_pipeline(settings, build_backend(settings, index_dir=corpus.root / "idx"), build_embedder(settings))


@pytest.fixture(scope="module")
def compared(corpus: SimpleNamespace) -> dict[str, Any]:
    return compare_recipes(load_golden(corpus.golden), _pipeline(corpus, BIG_BUDGET), docs=corpus.docs, tenant="acme")


@pytest.fixture(scope="module")
def compared_small(corpus: SimpleNamespace) -> dict[str, Any]:
    return compare_recipes(load_golden(corpus.golden), _pipeline(corpus, SMALL_BUDGET), docs=corpus.docs, tenant="acme")


def _question(result: dict[str, Any], row: str, qid: str) -> dict[str, Any]:
    return next(r for r in result["per_question"][row] if r["id"] == qid)


def test_offsets_round_trip_for_both_frameworks(corpus: SimpleNamespace) -> None:
    from es_rag.integrations import recipes_langchain, recipes_llamaindex

    read = read_corpus(corpus.docs, tenant="acme", settings=Settings())
    assert sorted(d.source_id for d in read.docs) == ["long.md", "quokka.md", "zebra.md"]
    assert read.left_out == {"page.html"} and "HTML sources left out" in read.notes[0]
    texts = {d.source_id: d.text for d in read.docs}
    lc = recipes_langchain.split_documents(read.docs)
    li, nodes = recipes_llamaindex.split_documents(read.docs)
    assert [n.node_id for n in nodes] == [h.chunk_id for h in li]
    for h in [*lc, *li]:
        assert h.start_offset is not None and h.end_offset is not None
        assert texts[h.source_id][h.start_offset : h.end_offset] == h.text
    long = [h for h in lc if h.source_id == "long.md"]
    assert len(long) >= 2
    assert all(b.start_offset < a.end_offset for a, b in itertools.pairwise(long))  # type: ignore[operator]
    assert [h.source_id for h in li].count("long.md") == 1  # 1024 tiktoken tokens hold the whole file


def test_a_chunk_whose_offsets_miss_its_text_fails_naming_the_document(corpus: SimpleNamespace) -> None:
    read = read_corpus(corpus.docs, tenant="acme", settings=Settings())
    doc = next(d for d in read.docs if d.source_id == "zebra.md")
    assert checked_chunk(doc, doc.text[2:7], 2, 7, 0, "S").text == doc.text[2:7]
    with pytest.raises(InputError, match=r"zebra\.md: field 'offsets': S chunk 3: text\[0:5\] is not"):
        checked_chunk(doc, "Zebra", 0, 5, 3, "S")
    with pytest.raises(InputError, match=r"zebra\.md: field 'offsets': S chunk 0 has no usable"):
        checked_chunk(doc, "Zebra", -1, 4, 0, "S")


def test_every_row_holds_the_budget(compared: dict[str, Any], compared_small: dict[str, Any]) -> None:
    for result, budget in ((compared, BIG_BUDGET), (compared_small, SMALL_BUDGET)):
        assert result["token_budget"] == budget
        assert set(result["rows"]) == {ES_RAG, *RECIPES}
        for name, row in result["rows"].items():
            assert row["context_tokens"] <= budget, name
        for name, rows in result["per_question"].items():
            assert all(r["context_tokens"] <= budget for r in rows), name
    # At 300 tokens LlamaIndex's one-node long.md (over 300 tokens) is skipped and a smaller node still fits.
    small = compared_small["per_question"]["llamaindex"]
    assert any(r["retrieved"] == 2 and len(r["stuffed"]) == 1 for r in small)


def test_a_stuffed_answer_paragraph_is_covered(compared: dict[str, Any]) -> None:
    # k=50 retrieves every LangChain chunk and 8000 tokens hold them: every answer is in the context.
    assert compared["rows"]["langchain"]["answer_coverage"] == 1.0
    assert compared["rows"]["langchain"]["answer_whole"] == 1.0
    assert compared["rows"]["langchain"]["index_chunks"] == len(_question(compared, "langchain", "z")["stuffed"])
    # BM25 finds "zebras stripes" in zebra.md's chunk alone, and it is stuffed.
    z = _question(compared, "bm25", "z")
    assert z["stuffed_sources"] and set(z["stuffed_sources"]) == {"zebra.md"}
    assert (z["coverage"], z["whole"]) == (1.0, True)
    # es_rag's own row is its golden run's overall.
    assert compared["rows"][ES_RAG]["answer_coverage"] is not None
    assert compared["categories"]["animal"]["with_spans"] == 2
    assert set(compared["categories"]["animal"]) >= {ES_RAG, *RECIPES}


def test_llamaindex_stuffs_at_most_its_top_2(compared: dict[str, Any]) -> None:
    rows = compared["per_question"]["llamaindex"]
    assert all(r["retrieved"] == 2 and len(r["stuffed"]) <= 2 for r in rows)
    assert compared["rows"]["llamaindex"]["index_chunks"] == 3
    assert all(len(r["stuffed"]) <= 4 for r in compared["per_question"]["langchain-k4"])


def test_langchain_overlap_shows_as_duplicate_tokens(compared: dict[str, Any]) -> None:
    row = _question(compared, "langchain", "l")
    assert {"long.md#0", "long.md#1"} <= set(row["stuffed"])
    assert row["duplicate_tokens"] > 0
    assert compared["rows"]["langchain"]["duplicate_token_rate"] > 0


def test_questions_and_notes(compared: dict[str, Any]) -> None:
    assert compared["questions"] == 4 and compared["with_spans"] == 3 and compared["documents"] == 3
    notes = "\n".join(compared["notes"])
    assert "1 questions of other tenants than 'acme' left out" in notes and "page.html" in notes
    ratio = compared["ratio_to_es_rag"]["langchain"]
    rows = compared["rows"]
    assert ratio["index_chunks"] == round(rows["langchain"]["index_chunks"] / rows[ES_RAG]["index_chunks"], 3)


def test_the_table_prints_every_row(compared: dict[str, Any]) -> None:
    table = format_recipes(compared)
    lines = table.splitlines()
    for name in (ES_RAG, *RECIPES):
        assert any(line.startswith(f"{name} ") for line in lines), name
    assert "ratio to es_rag (row / es_rag)" in table and "answer coverage per category" in table
    assert any(line.startswith("animal ") for line in lines) and "note: " in table
    json.dumps(compared)  # the --json output


def test_stuff_skips_what_does_not_fit_and_keeps_rank_order() -> None:
    def hit(cid: str, text: str) -> Hit:
        return Hit(chunk_id=cid, source_id="s", text=text, tenant_id="t")

    hits = [hit("a", "x" * 4), hit("b", "y" * 10), hit("c", "z" * 2)]
    kept, tokens = stuff(hits, budget=10, count=len)
    assert [h.chunk_id for h in kept] == ["a", "c"] and tokens == len("xxxx\n\nzz")


def test_parse_recipes() -> None:
    assert parse_recipes("all") == RECIPES
    assert parse_recipes("bm25, langchain") == ("langchain", "bm25")
    with pytest.raises(ConfigError, match="unknown recipe 'haystack'; valid: langchain, langchain-k4"):
        parse_recipes("haystack")


def test_a_span_outside_the_folder_is_refused(corpus: SimpleNamespace) -> None:
    q = GoldenQuestion("x", "zebras", {"gone.md": ()}, spans=(GoldSpan("gone.md", 0, 4),), tenant="acme")
    with pytest.raises(InputError, match=r"golden question x: field 'spans.source_id': 'gone.md' is not a document"):
        compare_recipes([q], _pipeline(corpus, 1500), docs=corpus.docs, recipes=["bm25"])


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_text_splitters", None)
    monkeypatch.delitem(sys.modules, "es_rag.integrations.recipes_langchain", raising=False)
    with pytest.raises(MissingDependencyError, match=r"langchain-text-splitters.*pip install 'es-rag\[recipes\]'"):
        importlib.import_module("es_rag.integrations.recipes_langchain")


def test_cli_refuses_recipes_without_golden_or_docs(
    corpus: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    opts, golden, docs = corpus.opts, str(corpus.golden), str(corpus.docs)
    assert main(["eval", "--dataset", str(corpus.root), "--recipes", "all", *opts]) == 2
    assert "--recipes/--docs/--vary/--plot apply to --golden: add --golden FILE" in capsys.readouterr().err
    assert main(["eval", "--golden", golden, "--recipes", "all", "--tenant", "acme", *opts]) == 2
    assert "--recipes needs --docs DIR" in capsys.readouterr().err
    assert main(["eval", "--golden", golden, "--docs", docs, "--tenant", "acme", *opts]) == 2
    assert "--docs is the corpus of --recipes" in capsys.readouterr().err
    assert main(["eval", "--golden", golden, "--docs", docs, "--recipes", "nope", "--tenant", "acme", *opts]) == 2
    assert "unknown recipe 'nope'" in capsys.readouterr().err


def test_cli_prints_the_comparison(
    corpus: SimpleNamespace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ES_RAG_CACHE", str(tmp_path / "cache"))
    args = ["eval", "--golden", str(corpus.golden), "--tenant", "acme", "--rerank-model", "none", *corpus.opts]
    capsys.readouterr()
    assert main([*args, "--docs", str(corpus.docs), "--recipes", "all"]) == 0
    out = capsys.readouterr().out
    assert "what reaches the LLM: token budget 1500" in out
    assert f"recipe passage vectors cached in {tmp_path / 'cache' / 'embeddings'}" in out
    assert list((tmp_path / "cache" / "embeddings").glob("*/vectors.npy"))
    for name in (ES_RAG, *RECIPES):
        assert any(line.startswith(f"{name} ") for line in out.splitlines()), name
    assert main([*args, "--docs", str(corpus.docs), "--recipes", "bm25", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["recipes"]
    assert list(got["rows"]) == [ES_RAG, "bm25"] and got["token_budget"] == 1500


def test_recipe_passages_are_cached_a_batch_at_a_time(tmp_path: Path) -> None:
    """A recipe index of a large corpus costs an ingest (rag-ja-train: over half an hour a framework): its passage
    vectors go to the embedding cache a batch at a time, so a killed run keeps them and a second encodes nothing."""
    import numpy as np

    from es_rag.integrations.recipes_common import CachedPassages

    calls: list[list[str]] = []

    class Counting:
        version = "fake@1"

        def embed_documents(self, texts: list[str]) -> Any:
            calls.append(list(texts))
            return np.asarray([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

        def embed_query(self, text: str) -> Any:
            return np.asarray([0.0, 1.0], dtype=np.float32)

    texts = [f"passage {i}" * (i + 1) for i in range(5)]
    first = CachedPassages(Counting(), tmp_path, batch=2).embed_documents(texts)
    assert [len(c) for c in calls] == [2, 2, 1]  # encoded (and saved) batch by batch
    assert first[:, 0].tolist() == [float(len(t)) for t in texts]
    calls.clear()
    again = CachedPassages(Counting(), tmp_path, batch=2)
    assert np.array_equal(again.embed_documents(texts), first) and calls == []  # a new run reads the cache
    assert again.embed_query("q").tolist() == [0.0, 1.0] and again.version == "fake@1"  # the rest is delegated
