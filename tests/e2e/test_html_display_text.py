"""HTML reaches the reranker and the LLM as visible text, never as markup, on the embedded backend and through the
Elasticsearch path on the strict cluster double; its citations still slice the original file (issue 19, item 5).

A real ingest (parent-child chunker, tiny bi-encoder) writes one HTML and one Markdown source; a real pipeline
(tiny cross-encoder, packing) answers a query. A reranker that records the passages it is given shows what the
cross-encoder read; the packed context shows what the LLM reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from es_rag.chunking import make_chunker, visible_text
from es_rag.cross_encoder.model import CrossEncoderReranker, RerankOutput
from es_rag.encoders.embedder import SentenceTransformerEmbedder
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.context import excerpts
from tests.support.contract import open_backend

HTML = """<!doctype html>
<html><head><title>Wipe &amp; Sync guide</title>
<style>p { color: red }</style><script>var leak = "<b>script words</b>";</script></head>
<body>
<h1>Remote wipe</h1>
<p>Remote wipe erases a lost device &amp; its keys. Admins start a <b>remote wipe</b> from the console &mdash;
it takes &lt;5 minutes.</p>
<h2>Plans</h2>
<table>
<tr><th>Plan</th><th>Remote wipe</th></tr>
<tr><td>Free</td><td>no remote wipe &amp; no sync</td></tr>
<tr><td>Pro</td><td>remote wipe included</td></tr>
</table>
<h2>Sync</h2>
<ul><li>Sync runs hourly<li>A remote wipe stops sync<br>for good</ul>
</body></html>
"""
MARKDOWN = "# Remote wipe FAQ\n\nRemote wipe on *Markdown* & `code` stays as written.\n"
TAG_RE = re.compile(r"</?[A-Za-z!][^>]*>")
ENTITY_RE = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#x[0-9A-Fa-f]+);")


class RecordingReranker(CrossEncoderReranker):
    """The real cross-encoder, keeping every ``(header, content)`` passage it scores."""

    passages: list[tuple[str, str]]

    def score(self, query: str, passages: Sequence[tuple[str, str]]) -> RerankOutput:
        self.passages = [*getattr(self, "passages", []), *passages]
        return super().score(query, passages)


@pytest.fixture(scope="module")
def embedder(tiny_bi_encoder: Path) -> SentenceTransformerEmbedder:
    emb = SentenceTransformerEmbedder(str(tiny_bi_encoder))
    emb.warm_up()
    return emb


def _markup_free(text: str) -> None:
    assert not TAG_RE.search(text), text
    assert not ENTITY_RE.search(text), text
    assert "script words" not in text and "color: red" not in text, text


@pytest.fixture(
    params=[("embedded", False, "none"), ("embedded", True, "parent"), ("strict-double", False, "none"),
            ("strict-double", True, "parent")],
    ids=lambda p: f"{p[0]}-{'contextual' if p[1] else 'plain'}-expand-{p[2]}",
)  # fmt: skip
def searched(
    request: pytest.FixtureRequest, embedder: SentenceTransformerEmbedder, tiny_cross_encoder: Path
) -> Iterator[tuple[Any, RecordingReranker, bool]]:
    kind, contextual, expand = request.param
    settings = Settings(
        vector_dims=embedder.dims,
        rerank_model=str(tiny_cross_encoder),
        candidate_k=20,
        num_candidates=40,
        rerank_k=20,
        context_k=8,
        token_budget=4000,
        gate_cliff=None,
        expand_mode=expand,
        expand_max_parent_tokens=400,
    )
    chunker = make_chunker(
        embedder.tokenizer(), strategy="parent-child", max_tokens=40, overlap=0, contextual=contextual
    )
    docs = [
        SourceDoc("guide.html", HTML, "acme", ("public",), "v1", source_path="guide.html", fmt="html"),
        SourceDoc("faq.md", MARKDOWN, "acme", ("public",), "v1", source_path="faq.md"),
    ]
    with open_backend(kind, settings) as (backend, settings):
        report = ingest_documents(docs, chunker=chunker, embedder=embedder, backend=backend)
        assert not report.failed, report.failed
        reranker = RecordingReranker(str(tiny_cross_encoder))
        pipe = RagPipeline(
            backend, embedder=embedder, settings=settings, tokenizer=embedder.tokenizer(), reranker=reranker
        )
        result = pipe.search("remote wipe sync plans", SearchFilter("acme", ("public",)))
        yield result, reranker, contextual


def test_rerank_passages_are_visible_text_without_doubled_headings(searched: Any) -> None:
    result, reranker, _ = searched
    html_hits = [h for h in result.candidates if h.source_id == "guide.html"]
    assert html_hits and all(h.visible_text is None for h in html_hits)  # one clean text: nothing else to show
    by_content = {content: header for header, content in reranker.passages}
    clean = visible_text(HTML)
    for h in html_hits:
        assert clean[h.start_offset : h.end_offset] == h.text  # offsets index the page's visible text (issue 31)
        header = by_content[h.text]  # the cross-encoder read the visible text ...
        _markup_free(h.text)  # ... which holds no tag, entity, script or style
        assert header.startswith("Title: Wipe & Sync guide\nSection: Remote wipe")
        # no contextual prefix in the content: title and section are said once, in the header
        assert not h.text.startswith("Wipe & Sync guide")
    shown = "\n".join(h.display_text for h in html_hits)
    assert any(decoded in shown for decoded in ("&", "\u2014", "<5"))  # entities decoded, not dropped
    md_hits = [h for h in result.candidates if h.source_id == "faq.md"]
    assert md_hits and all(h.visible_text is None and h.text in by_content for h in md_hits)  # Markdown as written


def test_packed_context_is_visible_text_with_source_offsets(
    searched: Any, embedder: SentenceTransformerEmbedder
) -> None:
    result, _, contextual = searched
    ctx = result.context
    blocks = {e.citation_id: e.text for e in excerpts(ctx.text)}
    assert len(blocks) == len(ctx.citations) >= 2
    # citations index the text each source is chunked from: Markdown as written, HTML its visible text
    sources = {"guide.html": visible_text(HTML), "faq.md": MARKDOWN}
    seen_html = False
    for c in ctx.citations:
        body = blocks[c.citation_id]
        span = sources[c.source_id][c.start_offset : c.end_offset]
        if c.source_id == "guide.html":
            seen_html = True
            _markup_free(body)
        assert body == span and body.strip()
    assert seen_html
    if contextual:  # expand=parent: the HTML blocks are parent sections, shown as visible text as well
        assert any(c.expanded_from for c in ctx.citations if c.source_id == "guide.html")
    # the budget counted the text placed in the context, not the markup behind it
    tokenizer = embedder.tokenizer()
    assert ctx.tokens == tokenizer.count(ctx.text) <= 4000
    pack = result.trace.record("pack")
    assert pack is not None and pack.info["tokens"] == ctx.tokens
