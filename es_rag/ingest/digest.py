"""The digest of what a source's chunks hold, recorded in the version registry when the source is served
(:data:`es_rag.versions.registry.DIGESTS_FIELD`): an ingest that reads the same source again, chunks it the same way
and would embed it with the same model finds the same digest and skips it (issue 31: an unchanged re-run re-embedded
everything).

One digest per source, not per chunk: the registry holds a few dozen bytes per source on either backend, and the check
needs no scan of the chunk index.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from es_rag.records import Chunk

DIGEST_FORMAT = "es_rag-source-digest-1"
"""Changes when what the digest covers changes: every digest recorded before then differs, and each source is embedded
again once."""
VOLATILE = ("ingested_at", "content_hash", "embedding_version")
"""Fields a chunk's document gets when it is written or embedded, not from its source (the model is hashed apart)."""


def source_digest(chunks: Sequence[Chunk], model_version: str) -> str:
    """The digest of a source's chunks and parents as they would be written (ids, text, offsets, lineage, ACL,
    metadata, language, chunker version, source path, parent or child) and of the model that embeds them.

    Args:
        chunks: Every chunk and parent of one source (any order).
        model_version: The embedding model's version (its vectors are part of what is stored).
    """
    h = hashlib.sha256(f"{DIGEST_FORMAT}\n{model_version}\n".encode())
    for c in sorted(chunks, key=lambda c: (c.kind, c.chunk_id)):
        doc = {k: v for k, v in c.to_source(include_vector=False).items() if k not in VOLATILE}
        doc["kind"] = c.kind
        if c.source_path is not None:
            doc["source_path"] = c.source_path
        h.update(json.dumps(doc, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()
