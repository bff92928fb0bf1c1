"""``eval --es`` measures the native fusion bodies too (issue 29): every query runs again with
``fusion_path=native`` on the strict double (which executes the ``rrf`` retriever as ``RRFRetrieverBuilder`` does)
and its fused list is compared, rank by rank, with the client path's."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rag.evaluation.native_check import compare_lists
from es_rag.evaluation.run import evaluate, format_report
from es_rag.settings import Settings
from tests.support.beir import write_beir
from tests.support.double.client import strict_backend
from tests.support.double.cluster import StrictCluster


def _settings(tiny_bi_encoder: Path) -> Settings:
    return Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=None, candidate_k=20,
        num_candidates=40, rerank_k=8, context_k=3, token_budget=400, index_prefix="es-rag-eval",
    )  # fmt: skip


@pytest.mark.parametrize(("licence", "compared"), [("trial", True), ("basic", False)])
def test_eval_es_compares_the_native_bodies_with_the_client_path(
    tmp_path: Path, tiny_bi_encoder: Path, licence: str, compared: bool
) -> None:
    settings = _settings(tiny_bi_encoder)
    backend, node, _cluster = strict_backend(settings, StrictCluster(license_type=licence))
    result = evaluate(
        write_beir(tmp_path / "beir"), split="test", settings=settings, es_backend=backend, cache_dir=tmp_path / "c"
    )
    native = result["stages"]["native_vs_client"]
    if not compared:
        assert "skipped" in native and "basic" in native["skipped"]
        assert "native fusion path: not compared" in format_report(result)
        return
    assert native["queries"] == result["queries"] > 0
    assert native["different"] == 0, native["different_examples"]
    assert native["identical"] + native["ties"] == native["queries"]
    assert native["max_score_difference"] < 1e-6
    assert native["native_paths"] == ["native-rrf"]
    rrf = [r for r in node.calls("POST", ".*/_search") if "rrf" in str((r.body or {}).get("retriever"))]
    assert len(rrf) == result["queries"]  # one native search per query, beside the client _msearch ones
    assert "native fusion path vs client" in format_report(result)


def test_compare_lists_tells_ties_from_differences() -> None:
    a = [("x", 0.5), ("y", 0.25), ("z", 0.25), ("w", 0.1)]
    assert compare_lists(a, list(a))[0] == "identical"
    swapped_tie = [("x", 0.5), ("z", 0.25), ("y", 0.25), ("w", 0.1)]
    assert compare_lists(a, swapped_tie)[:2] == ("ties", 2)
    other = [("x", 0.5), ("w", 0.25), ("z", 0.25), ("y", 0.1)]
    assert compare_lists(a, other)[:2] == ("different", 2)
    assert compare_lists(a, a[:3])[:2] == ("different", 4)
    assert compare_lists(a, [("x", 0.5 + 1e-3), *a[1:]])[2] == pytest.approx(1e-3)
