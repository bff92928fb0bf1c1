"""Cross-encoder reranking: ranking_text, one tokenisation per pair, windows, calibration, fallbacks, cache."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.cross_encoder.model import (
    CALIBRATION_FILE,
    RANKING_TEXT_VERSION,
    Calibration,
    CrossEncoderReranker,
    aggregate,
    load_calibration,
    plan_windows,
    ranking_text,
)
from es_rag.cross_encoder.result_cache import cache_key, normalize_query
from es_rag.errors import ConfigError
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.records import Hit
from es_rag.settings import Settings
from tests.support.rerank_corpus import Embedder
from tests.support.rerank_corpus import rerank_backend as _backend


def test_ranking_text_has_structure_and_no_internal_fields() -> None:
    h = Hit(
        chunk_id="abc123",
        source_id="src-1",
        text="Annual subscriptions may be refunded.",
        tenant_id="t",
        title="Refund Policy",
        heading_path=("Enterprise Plan", "Cancellation"),
        source_version="2026-06",
        content_hash="deadbeef",
    )
    header, content = ranking_text(h, document_type="Official Product Documentation")
    assert header == (
        "Title: Refund Policy\nSection: Enterprise Plan > Cancellation\n"
        "Document Type: Official Product Documentation\nVersion: 2026-06\nContent:\n"
    )
    assert content == h.text
    assert "abc123" not in header and "deadbeef" not in header and "src-1" not in header
    # the declared type (meta.doc_type, seed-audit row 85) when none is passed
    typed = h.replace(meta={"doc_type": ["policy", "faq"]}, source_version="sha256:0123456789abcdef")
    assert ranking_text(typed)[0] == (
        "Title: Refund Policy\nSection: Enterprise Plan > Cancellation\nDocument Type: policy, faq\nContent:\n"
    )


@pytest.mark.parametrize(
    "version", ["sha256:3f2a9c0d1e4b5a6f", "SHA256:3F2A9C0D", "md5:0123456789abcdef", "0123456789abcdef" * 2]
)
def test_ranking_text_leaves_out_content_digest_versions(version: str) -> None:
    """A file ingested without a version gets ``sha256:<16 hex>``: the reranker never sees it (seed 002: no internal
    ids in the ranking text)."""
    h = Hit(chunk_id="c", source_id="s", text="Body.", tenant_id="t", title="T", source_version=version)
    assert ranking_text(h)[0] == "Title: T\nContent:\n"


def test_ranking_text_reads_the_visible_text_of_html_and_plain_text_as_written() -> None:
    """Issue 19 item 5: an HTML chunk's text is its markup span; the cross-encoder reads its visible text (no tags, no
    entities), once under the header that names title and section. A chunk without ``visible_text`` (Markdown, or
    written by another tool) is read as its text. The version changed with it, so cached results are not reused."""
    markup = "<h2>Refunds</h2>\n<p>Annual plans &amp; <b>monthly</b> plans</p>"
    h = Hit(
        chunk_id="c",
        source_id="s.html",
        text=markup,
        visible_text="Refunds\nAnnual plans & monthly plans",
        tenant_id="t",
        title="Policy",
        heading_path=("Policy", "Refunds"),
    )
    assert ranking_text(h) == (
        "Title: Policy\nSection: Policy > Refunds\nContent:\n",
        "Refunds\nAnnual plans & monthly plans",
    )
    assert ranking_text(h.replace(visible_text=None))[1] == markup  # no field: plain text, as stored
    assert RANKING_TEXT_VERSION == "rt-4"


@pytest.mark.parametrize("version", ["2026-06", "v2.3.1", "2025 policy", "sha256", "deadbeef"])
def test_ranking_text_keeps_human_versions(version: str) -> None:
    h = Hit(chunk_id="c", source_id="s", text="Body.", tenant_id="t", title="T", source_version=version)
    assert ranking_text(h)[0] == f"Title: T\nVersion: {version}\nContent:\n"


def test_calibration_and_thresholds_are_per_model(tmp_path: Path) -> None:
    cal = Calibration(temperature=2.0, bias=1.0)
    assert cal.apply(1.0) == pytest.approx(0.5)
    assert cal.apply(5.0) == pytest.approx(1 / (1 + np.exp(-2.0)))
    assert cal.threshold is None  # no universal 0.5
    assert Calibration(method="none").apply(3.0) is None
    with pytest.raises(ConfigError, match="threshold"):
        Calibration(method="none", threshold=0.5)
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps({"temperature": 3.0, "bias": -1.0, "threshold": 0.4}))
    from_file = load_calibration(tmp_path)
    assert (from_file.temperature, from_file.bias, from_file.threshold) == (3.0, -1.0, 0.4)
    assert from_file.source.endswith(CALIBRATION_FILE)
    explicit = load_calibration(tmp_path, threshold=0.7)
    assert explicit.threshold == 0.7 and explicit.temperature == 3.0 and explicit.source == "settings"
    assert load_calibration(None).threshold is None


def test_aggregate_and_windows() -> None:
    assert aggregate([0.1, 0.9, 0.5]) == 0.9
    assert aggregate([0.1, 0.9, 0.5], "mean_top_m", 2) == pytest.approx(0.7)
    assert plan_windows(50, 100, 5) == [(5, 50)]
    # 100 content tokens after a 10-token header, 40-token budget: 30 per window, overlap 7.
    assert plan_windows(110, 40, 10) == [(10, 40), (33, 63), (56, 86), (79, 109), (102, 110)]


def test_scores_equal_cross_encoder_predict_and_tokenise_once(tiny_cross_encoder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import torch

    rr = CrossEncoderReranker(str(tiny_cross_encoder), batch_size=2)
    passages = [("Title: A\nContent:\n", "reset the password"), ("", "checksum error code"), ("", "sync")]
    expected = rr.model.predict(
        [(q, h + c) for q, (h, c) in zip(["how to reset"] * 3, passages, strict=True)],
        activation_fn=torch.nn.Identity(),
    )
    tok_cls = type(rr.model.tokenizer)
    calls: list[int] = []
    original = tok_cls.__call__

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(tok_cls, "__call__", counting)
    out = rr.score("how to reset", passages)
    assert len(calls) == 1  # one batched tokenisation for every pair
    np.testing.assert_allclose(out.scores, expected, rtol=1e-5, atol=1e-6)
    assert [t.strategy for t in out.truncation] == ["none"] * 3


def test_long_passages_windows_and_truncation_records(tiny_cross_encoder) -> None:  # type: ignore[no-untyped-def]
    long_text = " ".join(f"word{i % 17}" for i in range(400))
    win = CrossEncoderReranker(str(tiny_cross_encoder), long_text="windows", aggregation="max")
    out = win.score("query", [("Title: T\nContent:\n", long_text)])
    rec = out.truncation[0]
    assert rec.strategy == "windows" and rec.windows > 1 and not rec.truncated
    assert rec.model_tokens <= win.limit() and rec.original_tokens > win.limit()
    assert out.scores[0] == max(out.window_scores[0])
    assert out.pairs == rec.windows
    cut = CrossEncoderReranker(str(tiny_cross_encoder), long_text="truncate")
    rec2 = cut.score("query", [("Title: T\nContent:\n", long_text)]).truncation[0]
    assert rec2.truncated and rec2.to_dict()["truncation_strategy"] == "truncate"
    assert rec2.original_tokens == rec.original_tokens and rec2.model_tokens < rec2.original_tokens


def test_cache_key_covers_model_versions_and_query_normalisation() -> None:
    base = dict(model="m", model_version="1", ranking_text_version="rt", prompt_version="p")
    k = cache_key("Reset  Password", ["a", "b"], **base)  # type: ignore[arg-type]
    assert k == cache_key("reset password", ["a", "b"], **base)  # type: ignore[arg-type]
    assert normalize_query(" Ｒeset\tPASSWORD ") == "reset password"
    for change in ({"model_version": "2"}, {"ranking_text_version": "x"}, {"prompt_version": "x"}, {"model": "n"}):
        assert cache_key("reset password", ["a", "b"], **{**base, **change}) != k  # type: ignore[arg-type]
    assert cache_key("reset password", ["b", "a"], **base) != k  # type: ignore[arg-type]


# -- through the pipeline -------------------------------------------------------------------------


def _pipeline(settings: Settings, reranker: CrossEncoderReranker, tokenizer: Any) -> RagPipeline:
    return RagPipeline(_backend(), embedder=Embedder(), settings=settings, tokenizer=tokenizer, reranker=reranker)


SETTINGS = Settings(vector_dims=3, candidate_k=4, num_candidates=4, rerank_k=4, context_k=3, rerank_model="x")


class SlowReranker(CrossEncoderReranker):
    def score(self, query: str, passages: Any) -> Any:
        time.sleep(1.0)
        return super().score(query, passages)


def test_timeout_falls_back_to_fused_order(tiny_cross_encoder, minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    settings = SETTINGS.replace(rerank_timeout=0.05)
    result = _pipeline(settings, SlowReranker(str(tiny_cross_encoder)), minilm_tokenizer).search(
        "password", SearchFilter("acme")
    )
    assert result.trace.paths["rerank"].startswith("fallback: fused order (reranker timed out after 0.05s)")
    assert all(h.rerank_score is None for h in result.candidates)
    assert result.trace.paths["gate"].startswith("undecided")


def test_cache_hit_returns_the_same_scores(tiny_cross_encoder, minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    pipe = _pipeline(SETTINGS, CrossEncoderReranker(str(tiny_cross_encoder)), minilm_tokenizer)
    first = pipe.search("checksum error", SearchFilter("acme"))
    second = pipe.search("Checksum  ERROR", SearchFilter("acme"))
    rr1 = next(s for s in first.trace.stages if s.name == "rerank")
    rr2 = next(s for s in second.trace.stages if s.name == "rerank")
    assert rr1.info["cache"] == "miss" and rr2.info["cache"] == "hit"
    assert rr1.info["scores"] == rr2.info["scores"]
    assert second.trace.paths["rerank"].endswith("(cache hit)")


def test_calibrated_threshold_gives_no_sufficient_evidence(tiny_cross_encoder, minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    # The untrained tiny model scores everything near sigmoid(-4.5); a per-model threshold of 0.9 rejects all.
    settings = SETTINGS.replace(rerank_threshold=0.9)
    result = _pipeline(settings, CrossEncoderReranker(str(tiny_cross_encoder)), minilm_tokenizer).search(
        "password", SearchFilter("acme")
    )
    assert result.status == "no_sufficient_evidence" and result.no_sufficient_evidence
    assert result.hits == [] and result.context.citations == [] and result.context.text == ""
    gate = next(s for s in result.trace.stages if s.name == "gate")
    assert gate.out_count == 0 and len(gate.dropped) == 4
    assert result.to_dict()["status"] == "no_sufficient_evidence"
    # Calibrated scores are recorded next to the raw ones.
    assert all(h.calibrated_score is not None and 0 < h.calibrated_score < 1 for h in result.candidates)
