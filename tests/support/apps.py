"""Two tenants' documents and a :class:`~es_rag.client.RagClient` holding them, for the framework adapters'
and the example apps' tests: each document has words the others lack, so where a text shows up says whose it is."""

from __future__ import annotations

from pathlib import Path

from es_rag import RagClient, Settings

ACME_SUPPORT = {
    "guide.md": "# Passwords\n\nReset the password from the login page. The reset link expires after one hour.\n",
    "sync.md": "# Sync\n\nSync stops when the token expires; sign in again to renew the token.\n",
}
ACME_LEGAL = {"policy.md": "# Legal hold\n\nLegal hold keeps the password history for seven years.\n"}
# public inside globex: a public document is still never another tenant's
GLOBEX_PUBLIC = {"guide.md": "# Passwords\n\nGlobex resets the password by phone; call the Globex hotline.\n"}
GLOBEX_WORD = "Globex"


def tiny_settings(model_dir: Path) -> Settings:
    """Settings for the tiny test bi-encoder (``tiny_bi_encoder``), no cross-encoder.

    Args:
        model_dir: The tiny model's folder.
    """
    return Settings(
        embedding_model=str(model_dir), vector_dims=32, rerank_model=None, candidate_k=10, num_candidates=20,
        rerank_k=8, context_k=4, chunk_max_tokens=60, chunk_overlap=0,
    )  # fmt: skip


def two_tenant_client(model_dir: Path) -> RagClient:
    """An in-memory client holding acme's support and legal documents and globex's public one.

    Args:
        model_dir: The tiny model's folder.
    """
    rag = RagClient.open(None, tiny_settings(model_dir))
    assert rag.ingest_texts(ACME_SUPPORT, tenant="acme", acl="support").sources == 2
    assert rag.ingest_texts(ACME_LEGAL, tenant="acme", acl="legal", meta={"doc_type": "policy"}).sources == 1
    assert rag.ingest_texts(GLOBEX_PUBLIC, tenant="globex", acl="public").sources == 1
    return rag
