"""Apps get the visible text of HTML sources, never their markup (issue 31: the LangChain, LlamaIndex and Haystack
adapters and the FastAPI example returned the raw markup; only the packed context was clean)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from es_rag import RagClient
from tests.support.apps import tiny_settings
from tests.support.html import PYDOC


@pytest.fixture(scope="module")
def html_rag(tiny_bi_encoder: Path) -> Iterator[RagClient]:
    rag = RagClient.open(None, tiny_settings(tiny_bi_encoder))
    assert rag.ingest_texts({"venv.html": PYDOC}, tenant="acme", acl="public").sources == 1  # html by its suffix
    yield rag
    rag.close()


def test_every_adapter_returns_the_visible_text(html_rag: RagClient) -> None:
    from es_rag.integrations.haystack import EsRagRetriever as HaystackRetriever
    from es_rag.integrations.langchain import EsRagRetriever as LangChainRetriever
    from es_rag.integrations.llamaindex import EsRagRetriever as LlamaIndexRetriever

    query = "python3 -m venv env"
    hits = html_rag.search(query, tenant="acme", acl=["public"]).hits
    texts = [h.text for h in hits]  # one clean text (issue 31): Hit.text is the visible text ...
    assert texts and texts == [h.display_text for h in hits]
    assert all("<" not in t and "¶" not in t for t in texts)  # ... and every adapter returns it
    lc = [d.page_content for d in LangChainRetriever(client=html_rag, tenant="acme", acl=["public"]).invoke(query)]
    hs = HaystackRetriever(client=html_rag, tenant="acme", acl=["public"]).run(query)["documents"]
    li = LlamaIndexRetriever(client=html_rag, tenant="acme", acl=["public"]).retrieve(query)
    assert lc == texts and [d.content for d in hs] == texts and [n.node.text for n in li] == texts
