"""The bundled sample corpus holds English documents and one Japanese one (ja-quickstart.md): each document gets its
language at ingest, and a query searches the subfields of its own language -- on the embedded backend and on the
strict Elasticsearch double, through the real pipeline (tests/unit/test_languages.py cites Elasticsearch's rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.es_cluster import cluster_backend
from tests.support.sample import ingest_sample, sample_settings

JA_QUERY = "同期が止まったときはどうすればいいですか？"
EN_QUERY = "my laptop gets hot while syncing"
JA_SOURCE = "acme-nimbus-ja-quickstart"


@pytest.fixture(scope="module")
def settings(tiny_bi_encoder: Path) -> Settings:
    return sample_settings(tiny_bi_encoder)


def _ingest(backend: Any, settings: Settings, sample_dir: Path) -> Any:
    return ingest_sample(backend, settings, sample_dir)[0]


def _check(pipe: RagPipeline, chunks: list[dict[str, Any]]) -> None:
    languages = {d["source_id"]: d.get("language") for d in chunks}
    assert languages[JA_SOURCE] == "ja"
    assert {lang for sid, lang in languages.items() if sid != JA_SOURCE} == {"en"}
    flt = SearchFilter("acme", ("public",))
    ja = pipe.search(JA_QUERY, flt)
    retrieve = ja.trace.record("retrieve")
    assert retrieve is not None
    assert retrieve.info["query_language"].startswith("ja (detected")
    assert retrieve.info["bm25_fields"] == ["title.ja", "heading_path.ja", "text.ja"]
    top = ja.candidates[0]
    assert top.source_id == JA_SOURCE and top.language == "ja"
    en = pipe.search(EN_QUERY, flt)
    retrieve = en.trace.record("retrieve")
    assert retrieve is not None
    assert retrieve.info["query_language"].startswith("en (detected")
    assert retrieve.info["bm25_fields"] == ["title.en", "heading_path.en", "text.en"]
    assert en.hits and {h.language for h in en.hits} == {"en"}


def test_sample_corpus_on_the_embedded_backend(settings: Settings, sample_dir: Path) -> None:
    backend = EmbeddedBackend(None, dims=32)
    embedder = _ingest(backend, settings, sample_dir)
    pipe = RagPipeline(backend, embedder=embedder, settings=settings, tokenizer=embedder.tokenizer())
    _check(pipe, [{"source_id": h.source_id, "language": h.language} for h in backend.all_hits()])
    # the Japanese document is reached through text.ja alone (cjk bigrams): the standard base field splits Japanese
    # into single characters, which the same query also matches, but text.ja is the one the routed query searches
    flt = SearchFilter("acme", ("public",))
    only_ja = backend.bm25(JA_QUERY, flt, 5, fields=["text.ja"])
    assert only_ja and only_ja[0].source_id == JA_SOURCE


def test_sample_corpus_on_the_strict_double(settings: Settings, sample_dir: Path) -> None:
    backend, node, cluster = cluster_backend(settings)
    embedder = _ingest(backend, settings, sample_dir)
    pipe = RagPipeline(backend, embedder=embedder, settings=settings, tokenizer=embedder.tokenizer())
    name = next(n for n in cluster.indices if n.startswith("es-rag-chunks"))
    _check(pipe, list(cluster.docs(name).values()))
    sent = [r.body for r in node.calls("POST") if r.body]  # the ja query runs bm25 alone (dense fit check): _msearch
    assert any("text.ja" in str(b) for b in sent) and any("text.en" in str(b) for b in sent)
