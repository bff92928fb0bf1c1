"""The safety check as a user meets it: a deliberately useless cross-encoder (a tiny BERT with random weights and a
random head, saved and loaded through the real code) is checked on held-out queries by ``calibrate``'s BEIR path,
marked ``hurts``, and search falls back to the fused order, visibly, unless told otherwise."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from es_rag.cross_encoder.fusion import FUSION_FILE, SAFETY_FILE
from es_rag.evaluation.calibrate import calibrate_beir
from es_rag.evaluation.run import evaluate
from es_rag.settings import Settings

FILLER = "study result method sample analysis data effect patients trial model".split()


def write_exact_beir(root: Path, n_dev: int = 30, n_test: int = 6) -> Path:
    """One document per query, found by a word only it and its query contain (BM25 ranks it first), so the fused
    order is nearly perfect and a random reranker can only make it worse. ``dev`` and ``test`` qrels."""
    root.mkdir(parents=True, exist_ok=True)
    docs, queries, qrels = [], [], {"dev": [], "test": []}
    for i in range(n_dev + n_test):
        word = "".join("abcdefghij"[int(c)] for c in f"{i:03d}") + "zon"
        docs.append({"_id": f"d{i}", "title": f"paper {i}", "text": " ".join([*FILLER[i % 5 : i % 5 + 5], word])})
        queries.append({"_id": f"q{i}", "text": f"what about {word}"})
        qrels["dev" if i < n_dev else "test"].append((f"q{i}", f"d{i}", 1))
    (root / "corpus-00.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels").mkdir(exist_ok=True)
    for split, rows in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text("".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows))
    return root


def test_a_useless_reranker_is_marked_hurts_and_search_falls_back(
    tiny_bi_encoder: Path, tiny_cross_encoder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dataset = write_exact_beir(tmp_path / "beir")
    model = tmp_path / "useless-ce"
    shutil.copytree(tiny_cross_encoder, model)
    settings = Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, analyzer="english", rerank_model=str(model),
        candidate_k=10, num_candidates=10, rerank_k=8, context_k=3,
    )  # fmt: skip
    check = calibrate_beir(dataset, str(model), split="dev", settings=settings, cache_dir=tmp_path / "cache")
    alone = check.fusion.checks[0]
    assert alone["method"] == "replace" and alone["queries"] == 30
    assert alone["baseline"] > 0.9  # the fused order finds nearly every document first
    assert alone["verdict"] == "hurts" and alone["ci"][1] < 0
    assert check.fusion.checks[1]["verdict"] != "helps"
    safety = check.fusion.safety_file()
    assert safety["verdict"] == "hurts" and safety["data"]["split"] == "dev" and safety["date"]
    check.written(model)
    assert json.loads((model / SAFETY_FILE).read_text())["verdict"] == "hurts"
    assert (model / FUSION_FILE).is_file()

    with caplog.at_level(logging.WARNING, logger="es_rag.stages.rerank"):
        result = evaluate(dataset, split="test", settings=settings, cache_dir=tmp_path / "cache", depth=10)
    path = result["paths"]["rerank"]
    assert result["stages"]["rerank"] is None  # nothing reranked: the fused order was kept
    assert path.startswith("fallback: fused order") and "hurts the fused order" in path
    assert "--allow-harmful-reranker" in path
    assert result["stages"]["safety"]["recorded"]["verdict"] == "hurts"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "--allow-harmful-reranker" in warnings[0]  # once, not once per query

    forced = evaluate(
        dataset,
        split="test",
        settings=settings.replace(allow_harmful_reranker=True),
        cache_dir=tmp_path / "cache",
        depth=10,
    )
    assert forced["stages"]["rerank"] is not None
    assert "allowed by allow_harmful_reranker" in forced["paths"]["rerank"]
    assert forced["stages"]["safety"]["check"]["queries"] == 6
