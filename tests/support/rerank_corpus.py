"""A four-chunk embedded corpus with fixed vectors and a constant query embedder, shared by the reranker and the
calibration tests."""

from __future__ import annotations

import numpy as np

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.records import Chunk

TEXTS = [
    "Reset your password from the account settings page.",
    "The sync engine retries failed uploads with backoff.",
    "Error NIM-E1042 means a checksum mismatch during upload.",
    "Retention keeps deleted files for ninety days.",
]


class Embedder:
    def embed_query(self, query: str) -> np.ndarray:
        return np.asarray([1.0, 0.5, 0.25], dtype=np.float32)


def rerank_backend() -> EmbeddedBackend:
    """The four chunks of :data:`TEXTS`, tenant ``acme``, public."""
    be = EmbeddedBackend(None, dims=3)
    chunks = []
    for i, text in enumerate(TEXTS):
        chunks.append(
            Chunk(
                chunk_id=f"c{i}",
                source_id=f"s{i}",
                source_version="v1",
                parent_id=None,
                heading_path=("Doc",),
                start_offset=0,
                end_offset=len(text),
                chunker_version="t",
                tenant_id="acme",
                acl=("public",),
                title=f"Doc {i}",
                text=text,
                token_count=10,
                vector=np.asarray([1.0, i / 4, (3 - i) / 4], dtype=np.float32),
            )
        )
    be.index(chunks)
    return be
