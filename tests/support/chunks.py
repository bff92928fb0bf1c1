"""One chunk with lineage, for tests that write chunks directly (the backend contract, the crash harness). A module
of its own: the crash harness forks a process per kill point and must not import the double's client to build one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from es_rag.records import Chunk


def _vec(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def chunk(
    cid: str,
    text: str,
    *,
    tenant: str = "acme",
    source: str = "guide",
    version: str = "v1",
    parent: str | None = "p-guide",
    acl: Sequence[str] = ("public",),
    start: int = 0,
    vector: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
    kind: str = "child",
) -> Chunk:
    """One chunk with lineage; children get a vector, parents none.

    Args:
        cid: chunk_id.
        text: Text.
        tenant: tenant_id.
        source: source_id.
        version: source_version.
        parent: parent_id (None for a parent).
        acl: Groups allowed to read it.
        start: Start offset in the source.
        vector: The embedding (children).
        kind: ``child`` or ``parent``.
    """
    c = Chunk(
        chunk_id=cid,
        source_id=source,
        source_version=version,
        parent_id=parent if kind == "child" else None,
        heading_path=("Guide", source),
        start_offset=start,
        end_offset=start + len(text),
        chunker_version="contract-1",
        tenant_id=tenant,
        acl=tuple(acl),
        title=source,
        text=text,
        token_count=len(text.split()),
        kind=kind,
    )
    return c.with_vector(_vec(*vector), "contract-vec") if kind == "child" else c
