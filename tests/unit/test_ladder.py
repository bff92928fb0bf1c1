"""Chunked retrieval units in eval (chunk -> document max-pooling) and the eight-step ladder ablation."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from es_rag.cli import build_parser, main
from es_rag.errors import ConfigError, InputError
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.index import ChunkUnit, build_chunk_index, build_index
from es_rag.evaluation.ladder import format_ladder, ladder
from es_rag.evaluation.metrics import documents_from_chunks, metrics, run_from_ids
from es_rag.evaluation.run import evaluate
from es_rag.settings import Settings

TOPICS = {
    "malaria": "mosquito parasite vaccine fever",
    "insulin": "diabetes glucose pancreas hormone",
    "telomere": "chromosome ageing cell division",
    "microbiome": "gut bacteria flora digestion",
    "prion": "protein misfolding brain disease",
}
FILLER = "study result method sample analysis data effect patients trial model cohort".split()
# The evidence of q-zebra sits only in the second half of d-long: the first chunk never holds it.
LONG_HEAD = "Background on the cohort: patients were sampled twice and the analysis used the usual model. "
LONG_TAIL = "Later the zebrafish telomerase assay showed a clear effect."


def write_chunky_beir(root: Path, *, seed: int = 5) -> Path:
    """BEIR folder whose documents are several sentences long, plus ``d-long`` (evidence in its tail)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    docs = [{"_id": "d-long", "title": "cohort methods report", "text": LONG_HEAD * 2 + LONG_TAIL}]
    queries = [{"_id": "q-zebra", "text": "zebrafish telomerase"}]
    qrels = [("q-zebra", "d-long", 1)]
    for t, (topic, words) in enumerate(TOPICS.items()):
        for j in range(3):
            sentences = [" ".join(rng.sample(FILLER, 6)) + "." for _ in range(3)]
            sentences.insert(j % 3, f"The {topic} finding involved {words}.")
            docs.append({"_id": f"d{t}{j}", "title": f"{topic} paper {j}", "text": " ".join(sentences)})
        queries.append({"_id": f"q{t}", "text": f"{topic} {words.split()[1]}"})
        qrels += [(f"q{t}", f"d{t}0", 2), (f"q{t}", f"d{t}1", 1)]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    )
    return root


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_chunky_beir(tmp_path_factory.mktemp("chunky-beir"))


@pytest.fixture(scope="module")
def settings(tiny_bi_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=None,
        candidate_k=20, num_candidates=40, rerank_k=8, context_k=3, token_budget=400, analyzer="english",
    )  # fmt: skip


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("emb-cache")


def test_documents_from_chunks_keeps_each_documents_best_rank() -> None:
    source_of = {"a2": "a", "b0": "b", "a0": "a", "c1": "c", "b1": "b"}
    docs = documents_from_chunks(["a2", "b0", "a0", "c1", "b1"], source_of)
    assert docs == ["a", "b", "c"]
    run = run_from_ids(docs)
    assert run["a"] > run["b"] > run["c"]
    # a judged document found by two chunks counts once, at its best chunk's rank
    qrels = {"q": {"b": 1, "c": 1}}
    got = metrics(qrels, {"q": run}, depths=(2,))
    assert got["recall@2"] == pytest.approx(0.5) and got["mrr@10"] == pytest.approx(0.5)
    with pytest.raises(InputError, match="zz"):
        documents_from_chunks(["a2", "zz"], source_of)


def test_chunk_unit_validates_its_fields() -> None:
    assert ChunkUnit().label == "document" and not ChunkUnit().chunked
    assert ChunkUnit("fixed", 64, 8).label == "fixed L64 O8"
    with pytest.raises(ConfigError, match="valid values: document, fixed, recursive, structure"):
        ChunkUnit("sentences")
    with pytest.raises(ConfigError, match="overlap"):
        ChunkUnit("fixed", 16, 16)


def test_chunk_index_keeps_lineage_and_overlap_adds_chunks(beir: Path, settings: Settings, cache: Path) -> None:
    corpus, _, _ = load_beir(beir, "test")
    plain = build_chunk_index(corpus, settings, ChunkUnit("fixed", 24, 0), cache_dir=cache)
    overlapped = build_chunk_index(
        corpus, settings, ChunkUnit("fixed", 24, 8), cache_dir=cache, embedder=plain.embedder
    )
    for index in (plain, overlapped):
        assert set(index.source_of.values()) == set(corpus) and index.documents == len(corpus)
        assert len(set(index.ids)) == len(index.ids)  # chunk ids are unique
        for cid in index.ids:
            doc = index.backend._children[cid]
            text = corpus[doc["source_id"]]["text"]
            assert doc["text"] == text[doc["start_offset"] : doc["end_offset"]]
            assert doc["title"] == corpus[doc["source_id"]]["title"]
            assert doc["chunker_version"].startswith("fixed-2+L24.O")
    assert overlapped.stats["chunks"] > plain.stats["chunks"]
    assert overlapped.stats["indexed_token_ratio"] > plain.stats["indexed_token_ratio"]
    assert plain.stats["chunks_per_document"]["max"] >= 2
    assert plain.stats["index"]["vector_bytes"] == plain.stats["chunks"] * 32 * 4
    # a rerun reads every vector from the embedding cache
    again = build_chunk_index(corpus, settings, ChunkUnit("fixed", 24, 0), cache_dir=cache, embedder=plain.embedder)
    assert again.stats["encoded"] == 0 and again.stats["from_cache"] == again.stats["chunks"]
    with pytest.raises(ConfigError, match="input limit"):
        build_chunk_index(corpus, settings, ChunkUnit("fixed", 4000, 0), cache_dir=cache, embedder=plain.embedder)


def test_document_without_text_becomes_one_title_unit(settings: Settings, cache: Path) -> None:
    corpus = {"empty": {"title": "only a title here", "text": "  "}, "full": {"title": "t", "text": LONG_HEAD * 2}}
    index = build_chunk_index(corpus, settings, ChunkUnit("recursive", 24, 4), cache_dir=cache)
    assert index.stats["title_only_documents"] == 1
    units = [d for d in index.backend._children.values() if d["source_id"] == "empty"]
    assert len(units) == 1 and units[0]["text"] == "only a title here"
    assert sum(1 for v in index.source_of.values() if v == "full") >= 2


def test_second_chunk_evidence_is_found_and_scored_per_document(
    beir: Path, settings: Settings, cache: Path, tmp_path: Path
) -> None:
    corpus, _, qrels = load_beir(beir, "test")
    index = build_chunk_index(corpus, settings, ChunkUnit("fixed", 24, 0), cache_dir=cache)
    long_chunks = sorted(
        (d for d in index.backend._children.values() if d["source_id"] == "d-long"), key=lambda d: d["start_offset"]
    )
    assert len(long_chunks) >= 2 and "zebrafish" not in long_chunks[0]["text"]
    records = tmp_path / "runs.jsonl"
    result = evaluate(beir, settings=settings, index=index, depth=20, records_path=records)
    rows = {r["query_id"]: r for r in map(json.loads, records.read_text().splitlines())}
    top = rows["q-zebra"]["channels"]["bm25"][0]
    assert top["source_id"] == "d-long"
    hit = index.backend._children[top["id"]]
    assert hit["start_offset"] > 0 and "zebrafish" in hit["text"]  # a later chunk, not the first
    assert rows["q-zebra"]["versions"]["chunker_version"] == index.chunker_version
    assert len(rows["q-zebra"]["selected"]) == len(rows["q-zebra"]["selected_sources"])
    # Document-level scores are reproducible from the records: chunk ids -> source ids, first one wins.
    for ch in ("bm25", "dense"):
        run = {q: run_from_ids(documents_from_chunks([c["id"] for c in r["channels"][ch]], index.source_of))
               for q, r in rows.items()}  # fmt: skip
        assert run == {q: run_from_ids(list(dict.fromkeys(c["source_id"] for c in r["channels"][ch])))
                       for q, r in rows.items()}  # fmt: skip
        assert metrics(qrels, run) == result["stages"][ch]
    zebra = metrics({"q-zebra": qrels["q-zebra"]}, {"q-zebra": run_from_ids([top["source_id"]])})
    assert zebra["mrr@10"] == 1.0
    assert result["documents"] == len(corpus)
    ck = result["stages"]["chunking"]
    assert (ck["strategy"], ck["max_tokens"], ck["overlap"]) == ("fixed", 24, 0)
    assert ck["chunks"] == len(index.ids) and ck["gold_span_coverage"] is None and "spans" in ck["note"]
    assert ck["boundary_proxy"]["queries"] >= 1  # q-zebra's only judged document is split
    assert 0.0 <= ck["duplicate_rate@10"]["dense"] < 1.0
    assert "chunks ranked" in ck["scoring"] and "max-pooling" in result["paths"]["unit"]


def test_document_unit_is_the_default(beir: Path, settings: Settings, cache: Path) -> None:
    corpus, _, _ = load_beir(beir, "test")
    doc_index = build_index(corpus, settings, cache_dir=cache)
    default = evaluate(beir, settings=settings, index=doc_index, depth=20)
    explicit = evaluate(beir, settings=settings, index=doc_index, depth=20, unit=ChunkUnit())
    assert default["stages"] == explicit["stages"]
    assert default["stages"]["chunking"]["unit"] == "whole document (BEIR protocol)"
    with pytest.raises(ConfigError, match="holds document units, not fixed L24 O0"):
        evaluate(beir, settings=settings, index=doc_index, depth=20, unit=ChunkUnit("fixed", 24, 0))


@pytest.fixture(scope="module")
def ladder_out(beir: Path, settings: Settings, cache: Path) -> dict:  # type: ignore[type-arg]
    return ladder(beir, settings=settings, cache_dir=cache, depth=20, short_tokens=16, long_tokens=32, overlap=8)


def test_ladder_has_eight_cumulative_steps_with_deltas(ladder_out: dict) -> None:  # type: ignore[type-arg]
    table = ladder_out["table"]
    assert [r["step"] for r in table] == list(range(1, 9))
    assert ladder_out["params"]["units"] == {
        "1": "fixed L16 O0", "2": "fixed L32 O0", "3": "fixed L32 O8", "4": "recursive L32 O8",
    }  # fmt: skip
    assert [r["result"] for r in table] == [1, 2, 3, 4, 4, 4, 4, 4]
    by_step = {r["step"]: r for r in table}
    runs = ladder_out["results"]
    for step in (1, 2, 3, 4):
        dense = runs[str(step)]["stages"]["dense"]
        assert by_step[step]["metrics"]["ndcg@10"] == dense["ndcg@10"]
        assert by_step[step]["metrics"]["chunks"] == runs[str(step)]["stages"]["chunking"]["chunks"]
    assert by_step[1]["metrics"]["chunks"] > by_step[2]["metrics"]["chunks"]  # longer chunks, fewer of them
    assert by_step[3]["metrics"]["chunks"] > by_step[2]["metrics"]["chunks"]  # overlap adds chunks
    top = runs["4"]["stages"]
    assert by_step[5]["metrics"]["recall@100"] == top["union"]["recall@100"]
    assert by_step[6]["metrics"]["ndcg@10"] == top["hybrid"]["ndcg@10"]
    assert by_step[8]["metrics"]["context_recall"] == top["selection"]["context_recall"]
    assert by_step[8]["metrics"]["duplicate_rate"] == top["selection"]["duplicate_rate"]
    # each delta is the difference to the nearest earlier step reporting the same metric
    checked = 0
    for row in table:
        for key, delta in row["delta"].items():
            vs = row["delta_vs"][key]
            earlier = [r for r in table if r["step"] < row["step"] and r["metrics"].get(key) is not None]
            if not earlier or row["metrics"][key] is None:
                assert delta is None and vs is None
                continue
            assert vs == earlier[-1]["step"]
            assert delta == pytest.approx(row["metrics"][key] - by_step[vs]["metrics"][key], abs=1e-4)
            checked += 1
    assert checked > 20
    assert by_step[5]["delta_vs"]["recall@100"] == 4 and by_step[6]["delta_vs"]["ndcg@10"] == 4
    assert by_step[6]["delta_vs"]["recall@100"] == 5
    assert by_step[2]["delta"]["chunks"] == by_step[2]["metrics"]["chunks"] - by_step[1]["metrics"]["chunks"]


def test_ladder_without_reranker_skips_step_7_with_reason(ladder_out: dict) -> None:  # type: ignore[type-arg]
    row7 = ladder_out["table"][6]
    assert row7["step"] == 7 and row7["metrics"] == {} and "skipped: no reranker" in row7["skipped"]
    assert all(v is None for v in row7["delta"].values())
    text = format_ladder(ladder_out["table"])
    lines = text.splitlines()
    assert len(lines) == 10 and "skipped: no reranker" in lines[8]
    assert "(+" in text or "(-" in text


def test_ladder_with_reranker_measures_rank_change_and_latency(
    beir: Path, settings: Settings, cache: Path, tiny_cross_encoder: Path
) -> None:
    out = ladder(
        beir,
        settings=settings.replace(rerank_model=str(tiny_cross_encoder)),
        cache_dir=cache,
        depth=20,
        short_tokens=16,
        long_tokens=1000,
        overlap=8,
        structure="structure",
    )
    assert out["params"]["long_tokens"] == 126 and "input limit (126 tokens)" in out["notes"][0]
    assert out["params"]["units"]["4"] == "structure L126 O8"
    row7 = out["table"][6]
    assert row7["skipped"] is None
    rerank = out["results"]["4"]["stages"]["rerank"]
    assert row7["metrics"]["ndcg@10"] == rerank["ndcg@10"] and row7["metrics"]["rerank_ms_p50"] > 0
    assert row7["delta_vs"]["ndcg@10"] == 6
    assert row7["delta"]["mrr@10"] == pytest.approx(rerank["mrr@10"] - out["table"][5]["metrics"]["mrr@10"], abs=1e-4)
    # steps 1-3 ran without the reranker, step 4 with it
    assert out["results"]["3"]["stages"]["rerank"] is None


def test_cli_eval_unit_and_ablate_ladder(
    beir: Path, tiny_bi_encoder: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build_parser().parse_args(["eval", "--dataset", "x", "--ablate"]).ablate == "one-change"
    assert build_parser().parse_args(["eval", "--dataset", "x"]).ablate is None
    common = [
        "eval", "--dataset", str(beir), "--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32",
        "--rerank-model", "none", "--index-dir", str(cache), "--depth", "20", "--analyzer", "english",
    ]  # fmt: skip
    assert main([*common, "--unit", "fixed", "--chunk-max-tokens", "24", "--chunk-overlap", "4", "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert single["stages"]["chunking"]["unit"].startswith("fixed L24 O4")
    args = ["--ablate", "ladder", "--ladder-short-tokens", "16", "--ladder-long-tokens", "32", "--ladder-overlap", "8"]
    report = tmp_path / "report"
    assert main([*common, *args, "--json", "--report", str(report)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in out["ladder"]["table"]] == list(range(1, 9))
    assert out["ladder"]["table"][6]["skipped"].startswith("skipped: no reranker")
    assert set(out["ladder_runs"]) == {"1", "2", "3", "4"}
    assert out["stages"]["chunking"]["unit"].startswith("recursive L32 O8")
    md = (report / "report.md").read_text()
    assert "## Ladder ablation" in md and "](ladder.png)" in md
    assert (report / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(json.loads((report / "result.json").read_text())["ladder"]["table"]) == 8
    # one ablation chooses the units: a chunked --unit with --ablate is refused with a clear message
    assert main([*common, "--unit", "fixed", "--ablate", "ladder"]) == 2
    assert "drop --unit" in capsys.readouterr().err
