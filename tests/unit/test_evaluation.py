"""Stage-wise evaluation, run records, ablations, report and embedding cache on a tiny BEIR dataset."""

from __future__ import annotations

import json
from pathlib import Path

import ir_measures
import numpy as np
import pytest
from ir_measures import RR, R, nDCG

from es_rag.encoders.cache import EmbeddingCache
from es_rag.errors import InputError
from es_rag.evaluation.ablation import ablate
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.metrics import metrics, run_from_ids
from es_rag.evaluation.run import evaluate, format_report
from es_rag.settings import Settings
from tests.support.beir import write_beir


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir"))


@pytest.fixture(scope="module")
def settings(tiny_bi_encoder: Path, tiny_cross_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=str(tiny_cross_encoder),
        candidate_k=20, num_candidates=40, rerank_k=8, context_k=3, token_budget=400, analyzer="english",
    )  # fmt: skip


def test_load_beir_reads_split_files_in_order_and_grades(beir: Path) -> None:
    corpus, queries, qrels = load_beir(beir, "test")
    assert len(corpus) == 24 and list(corpus)[:2] == ["d00", "d01"]
    assert set(queries) == {f"te{t}" for t in range(6)}
    assert qrels["te0"] == {"d00": 2, "d01": 1, "d03": 0}
    with pytest.raises(InputError, match="no qrels"):
        load_beir(beir, "dev")


def test_metrics_come_from_ir_measures() -> None:
    qrels = {"q1": {"a": 2, "b": 1, "z": 0}, "q2": {"c": 1}}
    run = {"q1": run_from_ids(["x", "b", "a", "b"]), "q2": run_from_ids(["c"])}
    got = metrics(qrels, run, depths=(1, 10))
    expect = ir_measures.calc_aggregate([nDCG @ 10, RR @ 10, R @ 1, R @ 10], qrels, run)
    assert got["ndcg@10"] == round(expect[nDCG @ 10], 4)
    assert got["mrr@10"] == pytest.approx(0.75)
    assert got["recall@1"] == pytest.approx(0.5) and got["recall@10"] == pytest.approx(1.0)
    # a query that retrieved nothing counts as 0, it is not dropped from the mean
    assert metrics(qrels, {"q2": {"c": 1.0}}, depths=(10,))["recall@10"] == pytest.approx(0.5)


def test_evaluate_scores_every_stage_and_records_trace(beir: Path, settings: Settings, tmp_path: Path) -> None:
    records = tmp_path / "runs.jsonl"
    result = evaluate(
        beir, split="test", settings=settings, cache_dir=tmp_path / "cache", depth=20, records_path=records
    )
    stages = result["stages"]
    assert set(stages) >= {"bm25", "dense", "union", "hybrid", "rerank", "selection", "chunking"}
    for name in ("bm25", "dense", "hybrid", "rerank"):
        assert set(stages[name]) >= {"ndcg@10", "mrr@10", "recall@10", "recall@50", "recall@100", "recall@200"}
    for n in (10, 50):
        assert stages["union"][f"recall@{n}"] >= max(stages["bm25"][f"recall@{n}"], stages["dense"][f"recall@{n}"])
    assert result["paths"]["rerank"].startswith("cross-encoder")
    assert {"retrieve", "fusion", "rerank", "select", "pack", "retrieve.bm25"} <= set(result["latency_ms"])
    assert 0.0 <= stages["selection"]["context_recall"] <= 1.0
    assert "gold_span_coverage" in stages["chunking"]

    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["query_id"] for r in rows] == [f"te{t}" for t in range(6)]
    first = rows[0]
    assert set(first["versions"]) >= {"source_version", "chunker_version", "embedding_version", "sparse_index_version"}
    assert set(first["channels"]) == {"bm25", "dense"} and first["fused"][0]["rank"] == 1
    assert len(first["reranker_scores"]) == settings.rerank.k
    assert 0 < len(first["selected"]) <= settings.select.context_k
    assert any("context_k" in e["reason"] or "cap" in e["reason"] for e in first["excluded"])
    # The per-stage numbers are reproducible from the records alone (no hidden state).
    _, _, qrels = load_beir(beir, "test")
    for ch in ("bm25", "dense"):
        run = {r["query_id"]: run_from_ids([c["id"] for c in r["channels"][ch]]) for r in rows}
        assert metrics(qrels, run) == stages[ch]
    fused = {r["query_id"]: run_from_ids([c["id"] for c in r["fused"]]) for r in rows}
    assert metrics(qrels, fused) == stages["hybrid"]
    assert "rerank" in format_report(result) and "selection" in format_report(result)


def test_missing_reranker_is_reported_not_faked(beir: Path, settings: Settings, tmp_path: Path) -> None:
    result = evaluate(
        beir, settings=settings.replace(rerank_model=str(tmp_path / "nope")), cache_dir=tmp_path, depth=20
    )
    assert result["stages"]["rerank"] is None
    assert "unavailable" in result["paths"]["rerank"]


def test_ablation_changes_one_setting_and_reports_deltas(beir: Path, settings: Settings, tmp_path: Path) -> None:
    out = ablate(
        beir,
        settings=settings.replace(rerank_model=None),
        variants={"analyzer=standard": {"analyzer": "standard"}, "context_k=5": {"context_k": 5}},
        cache_dir=tmp_path,
        depth=20,
    )
    table = {row["variant"]: row for row in out["table"]}
    assert set(table) == {"base", "analyzer=standard", "context_k=5"}
    assert all(v == 0 for k, v in table["base"].items() if k.startswith("delta_"))
    # context_k only touches selection: retrieval numbers are identical
    assert table["context_k=5"]["delta_hybrid_ndcg@10"] == 0
    assert out["results"]["analyzer=standard"]["settings"]["analyzer"] == "standard"
    assert (
        table["analyzer=standard"]["bm25_ndcg@10"] == out["results"]["analyzer=standard"]["stages"]["bm25"]["ndcg@10"]
    )


def test_report_writes_markdown_and_plots(beir: Path, settings: Settings, tmp_path: Path) -> None:
    from es_rag.evaluation.report import write_report

    result = evaluate(beir, settings=settings.replace(rerank_model=None), cache_dir=tmp_path, depth=20)
    md = write_report(result, tmp_path / "report")
    text = md.read_text()
    assert "| bm25 |" in text and "not run" in text and "## Latency per stage" in text
    for png in ("recall_at_n.png", "ndcg_per_stage.png", "latency_per_stage.png"):
        assert f"]({png})" in text
        assert (tmp_path / "report" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "report" / "result.json").read_text())["stages"]["rerank"] is None


def test_embedding_cache_never_reencodes(tmp_path: Path) -> None:
    calls: list[int] = []

    def encode(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return np.asarray([[len(t), 1.0] for t in texts], dtype=np.float32)

    cache = EmbeddingCache(tmp_path, "model-a")
    m1, n1 = cache.embed(["x", "yy"], encode)
    again = EmbeddingCache(tmp_path, "model-a")
    m2, n2 = again.embed(["yy", "x", "zzz"], encode)
    assert (n1, n2) == (2, 1) and calls == [2, 1]
    assert np.array_equal(m2[:2], m1[::-1])
    other = EmbeddingCache(tmp_path, "model-b")  # another model never reads model-a's vectors
    assert other.embed(["x"], encode)[1] == 1


def test_bm25_protocols_are_the_published_setups() -> None:
    from es_rag.errors import ConfigError
    from es_rag.evaluation.beir import apply_bm25_protocol

    base = Settings(rerank_k=10)
    multi = apply_bm25_protocol(base, "beir-multifield")
    assert (multi.index.analyzer.value, multi.retrieve.bm25_fields, multi.retrieve.bm25_tie_breaker) == (
        "english",
        ("title", "text"),
        1.0,
    )
    assert (multi.index.bm25_k1, multi.index.bm25_b, multi.rerank.k) == (0.9, 0.4, 10)
    es = apply_bm25_protocol(base, "beir-es")
    assert (es.retrieve.bm25_tie_breaker, es.index.bm25_k1, es.index.bm25_b) == (0.5, 1.2, 0.75)
    assert apply_bm25_protocol(base, "settings") is base
    with pytest.raises(ConfigError, match="beir-multifield, beir-es, settings"):
        apply_bm25_protocol(base, "okapi")


def test_default_ablations_are_relative_to_the_base() -> None:
    from es_rag.evaluation.ablation import ablations_for
    from es_rag.evaluation.beir import apply_bm25_protocol

    multi = ablations_for(apply_bm25_protocol(Settings(), "beir-multifield"))
    assert "analyzer=standard" in multi and "bm25 protocol beir-es" in multi
    assert "bm25 protocol beir-multifield" not in multi
    product = ablations_for(Settings())
    assert "analyzer=english" in product
    assert {"bm25 protocol beir-es", "bm25 protocol beir-multifield", "no reranker"} <= set(product)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # no protocol named: the product defaults (docs/evaluation.md, "Product defaults, per language")
        ([], ("standard", ("title", "heading_path", "text"), 0.5, 1.2, 0.75)),
        (["--bm25-protocol", "beir-multifield"], ("english", ("title", "text"), 1.0, 0.9, 0.4)),
        (["--bm25-protocol", "beir-es"], ("english", ("title", "text"), 0.5, 1.2, 0.75)),
        (["--bm25-protocol", "settings"], ("standard", ("title", "heading_path", "text"), 0.5, 1.2, 0.75)),
        (
            ["--bm25-protocol", "beir-multifield", "--bm25-tie-breaker", "0.3", "--analyzer", "standard"],
            ("standard", ("title", "text"), 0.3, 0.9, 0.4),
        ),
        (
            ["--bm25-protocol", "beir-es", "--bm25-k1", "2.0", "--bm25-fields", "text"],
            ("english", ("text",), 0.5, 2.0, 0.75),
        ),
    ],
)
def test_cli_bm25_protocol_fills_only_the_options_not_given(argv: list[str], expected: tuple) -> None:  # type: ignore[type-arg]
    from es_rag.cli import build_parser
    from es_rag.cli.options import bm25_preset, settings_from_args

    for command in (["eval", "--dataset", "x"], ["train-reranker", "--dataset", "x", "--out", "y"]):
        args = build_parser().parse_args([*command, *argv])
        s = settings_from_args(args, presets=[bm25_preset(args)])
        assert (
            s.index.analyzer.value,
            s.retrieve.bm25_fields,
            s.retrieve.bm25_tie_breaker,
            s.index.bm25_k1,
            s.index.bm25_b,
        ) == expected


def _fail_on(monkeypatch: pytest.MonkeyPatch, query: str, error: Exception) -> None:
    """Make ``RagPipeline.search`` raise ``error`` for ``query`` only."""
    from es_rag.pipeline import RagPipeline

    real = RagPipeline.search

    def search(self: RagPipeline, text: str, flt):  # type: ignore[no-untyped-def]
        if text == query:
            raise error
        return real(self, text, flt)

    monkeypatch.setattr(RagPipeline, "search", search)


def test_a_failing_query_is_recorded_counted_and_the_run_goes_on(
    beir: Path, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17: one query raising used to end ``eval`` with a traceback and no result at all."""
    _, queries, qrels = load_beir(beir, "test")
    _fail_on(
        monkeypatch,
        queries["te2"],
        ValueError("The maximum token ID in the query (1475) is higher than the number of tokens"),
    )
    records = tmp_path / "runs.jsonl"
    result = evaluate(beir, settings=settings, cache_dir=tmp_path / "cache", depth=20, records_path=records)
    assert [f["query_id"] for f in result["failed_queries"]] == ["te2"]
    assert "ValueError: The maximum token ID" in result["failed_queries"][0]["error"]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["query_id"] for r in rows] == [f"te{t}" for t in range(6)]
    assert rows[2]["error"].startswith("ValueError") and rows[2]["relevant"] == ["d20", "d21"]
    # the failed query is scored as retrieving nothing: the mean is over all six queries, not five
    ok = {r["query_id"]: run_from_ids([c["id"] for c in r["channels"]["bm25"]]) for r in rows if "error" not in r}
    assert metrics(qrels, {**ok, "te2": {}}) == result["stages"]["bm25"]
    assert result["stages"]["bm25"]["recall@10"] <= 5 / 6
    assert "FAILED: 1 of 6 queries" in format_report(result)


def test_cli_eval_exits_1_when_a_query_failed(
    beir: Path, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from es_rag.cli import main

    _, queries, _ = load_beir(beir, "test")
    _fail_on(monkeypatch, queries["te4"], RuntimeError("boom"))
    argv = ["eval", "--dataset", str(beir), "--index-dir", str(tmp_path), "--depth", "20",
            "--embedding-model", settings.encoder.model, "--vector-dims", "32", "--rerank-model", "none"]  # fmt: skip
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "te4: RuntimeError: boom" in out and "FAILED: 1 of 6" in out
    assert "queries failed (run: 1)" in err
