"""Adapters for the frameworks RAG apps are built on, each an optional extra; importing :mod:`es_rag` (or this
package) imports none of them.

* :mod:`es_rag.integrations.langchain` -- ``EsRagRetriever``, a LangChain ``BaseRetriever``
  (``pip install 'es-rag[langchain]'``);
* :mod:`es_rag.integrations.llamaindex` -- ``EsRagRetriever``, a LlamaIndex ``BaseRetriever``
  (``pip install 'es-rag[llamaindex]'``);
* :mod:`es_rag.integrations.haystack` -- ``EsRagRetriever``, a Haystack ``@component``
  (``pip install 'es-rag[haystack]'``).

Each wraps a :class:`~es_rag.client.RagClient` and one caller's scope (:class:`RetrievalScope`: tenant, ACL groups,
metadata conditions), fixed when the retriever is built: there is no retriever without a tenant, and no call can
widen the scope. The documents each returns are the search's packed evidence, best first, with the metadata of
:func:`hit_metadata`.
"""

from __future__ import annotations

from es_rag.integrations._common import RetrievalScope, hit_metadata

__all__ = ["RetrievalScope", "hit_metadata"]
