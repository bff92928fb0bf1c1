"""Random multi-tenant corpora, an independent visibility oracle and cheap model stand-ins.

Everything here is deliberately small and model-free: chunks are hand-made :class:`~es_rag.records.Chunk`
records with tiny random vectors, the "embedder" returns a random vector, the tokenizer counts
whitespace-separated words. The real pipeline stages run on top of them.

The oracle (:func:`visible`) is written from the requirements (tenant equal, ACL overlap with the
caller's groups plus ``public``, version not hidden in the tenant's registry, source not deleted), not
from :meth:`es_rag.filters.SearchFilter.matches`, so a bug in the filter is not reproduced by the check.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from es_rag.cross_encoder.model import RerankOutput, Truncation
from es_rag.errors import ModelLoadError
from es_rag.records import Chunk, Hit

TENANTS = ("acme", "globex", "initech")
GROUPS = ("support", "eng", "hr", "legal")
SOURCES = ("guide", "faq", "policy")
WORDS = ("sync", "error", "password", "reset", "policy", "retention", "device", "wipe", "token", "rotate")
IDENTS = ("E1042", "ERR-SYNC-42", "sync_engine.start()", "X200")
DIMS = 4
_MARK_RE = re.compile(r"uid(\d+)q")


def marker(i: int) -> str:
    """A unique word per chunk, found verbatim in every text derived from that chunk."""
    return f"uid{i}q"


def markers_in(text: str) -> set[str]:
    """Every chunk marker occurring in ``text``."""
    return {f"uid{m}q" for m in _MARK_RE.findall(text)}


@dataclass
class Corpus:
    """Children and parents of several tenants, with registry state and deleted sources."""

    children: list[Chunk]
    parents: list[Chunk]
    hidden: dict[str, set[str]] = field(default_factory=dict)
    """tenant -> version keys hidden in its registry (in-flight or retired versions)."""
    deleted: set[tuple[str, str]] = field(default_factory=set)
    """(tenant, source_id) removed with delete-source after indexing."""

    def docs(self) -> list[Chunk]:
        return [*self.children, *self.parents]


def visible(chunk: Chunk | dict[str, Any], tenant: str, groups: Iterable[str], corpus: Corpus) -> bool:
    """The oracle: may a caller of ``tenant`` with ``groups`` see this chunk (child or parent)?"""
    get = chunk.get if isinstance(chunk, dict) else lambda k: getattr(chunk, k)
    if get("tenant_id") != tenant:
        return False
    if not set(get("acl")) & ({*groups, "public"}):
        return False
    if (tenant, get("source_id")) in corpus.deleted:
        return False
    key = f"{get('source_id')}@{get('source_version')}"
    return key not in corpus.hidden.get(tenant, set())


def random_corpus(rng: random.Random, n_children: int = 24) -> Corpus:
    """Children of every tenant sharing source ids, versions and parent ids across tenants.

    * the same ``source_id``/``source_version``/``parent_id`` exists in several tenants, so a neighbour
      or parent lookup that forgets the tenant filter pulls another tenant's text in;
    * some children point at a parent id owned by *another* tenant (a corrupt or hostile reference);
    * each source has versions ``v1``/``v2``; per tenant and source one of them may be hidden
      (not yet committed or retired);
    * every text contains words shared by all tenants, sometimes an identifier, and a unique marker.
    """
    children: list[Chunk] = []
    parents: list[Chunk] = []
    parent_owner: dict[str, str] = {}
    for t in TENANTS:
        for s in SOURCES:
            for v in ("v1", "v2"):
                pid = f"p-{t}-{s}-{v}"
                parent_owner[pid] = t
    i = 0
    offsets: dict[tuple[str, str, str], int] = {}
    for _ in range(n_children):
        tenant = rng.choice(TENANTS)
        source = rng.choice(SOURCES)
        version = rng.choice(("v1", "v2"))
        acl = tuple(rng.sample(("public", *GROUPS), rng.randint(1, 2)))
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        if rng.random() < 0.35:
            words.insert(rng.randrange(len(words) + 1), rng.choice(IDENTS))
        text = " ".join([*words, marker(i)])
        key = (tenant, source, version)
        start = offsets.get(key, 0)
        offsets[key] = start + len(text) + 2
        own_parent = f"p-{tenant}-{source}-{version}"
        if rng.random() < 0.15:  # hostile reference to a parent of another tenant
            own_parent = rng.choice([p for p, o in parent_owner.items() if o != tenant])
        vec = np.asarray([rng.uniform(-1, 1) for _ in range(DIMS)], dtype=np.float32)
        if not np.any(vec):
            vec[0] = 1.0
        children.append(
            Chunk(
                chunk_id=f"c{i}",
                source_id=source,
                source_version=version,
                parent_id=own_parent,
                heading_path=("Guide", source),
                start_offset=start,
                end_offset=start + len(text),
                chunker_version="rel-1",
                tenant_id=tenant,
                acl=acl,
                title=rng.choice(WORDS),
                text=text,
                token_count=len(text.split()),
            ).with_vector(vec, "rand-4")
        )
        i += 1
    used = {c.parent_id for c in children}
    for pid in sorted(used):
        assert pid is not None
        _, tenant, source, version = pid.split("-")
        members = [c for c in children if c.parent_id == pid and c.tenant_id == tenant]
        acl = tuple(sorted({g for c in members for g in c.acl})) or (rng.choice(("public", *GROUPS)),)
        text = f"parent section {source} {marker(i)}"
        parents.append(
            Chunk(
                chunk_id=pid,
                source_id=source,
                source_version=version,
                parent_id=None,
                heading_path=("Guide", source),
                start_offset=0,
                end_offset=len(text),
                chunker_version="rel-1",
                tenant_id=tenant,
                acl=acl,
                title=source,
                text=text,
                token_count=len(text.split()),
                kind="parent",
            )
        )
        i += 1
    hidden: dict[str, set[str]] = {}
    for t in TENANTS:
        for s in SOURCES:
            if rng.random() < 0.4:
                hidden.setdefault(t, set()).add(f"{s}@{rng.choice(('v1', 'v2'))}")
    deleted = {(rng.choice(TENANTS), rng.choice(SOURCES))} if rng.random() < 0.5 else set()
    return Corpus(children=children, parents=parents, hidden=hidden, deleted=deleted)


def random_query(rng: random.Random, *, identifier: bool) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    if identifier:
        words.append(rng.choice(IDENTS))
    return " ".join(words)


def random_groups(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.sample(GROUPS, rng.randint(0, 2)))


# ------------------------------------------------------------------------------ model stand-ins
class WordTokenizer:
    """Counts whitespace-separated words (implements :class:`es_rag.encoders.tokenizer.Tokenizer`)."""

    name = "words"
    max_tokens: int | None = None

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]

    def count(self, text: str) -> int:
        return len(text.split())


class RandomEmbedder:
    """``embed_query`` returns a deterministic pseudo-random vector of the query (no model)."""

    version = "rand-4"
    dims = DIMS

    def __init__(self, dims: int = DIMS) -> None:
        self.dims = dims

    def embed_query(self, query: str) -> np.ndarray:
        r = random.Random(query)
        v = np.asarray([r.uniform(-1, 1) for _ in range(self.dims)], dtype=np.float32)
        if not np.any(v):
            v[0] = 1.0
        return v

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.embed_query(t) for t in texts]) if texts else np.zeros((0, self.dims), np.float32)


class BrokenEmbedder:
    """A query embedder whose model is down: every call raises."""

    version = "broken"

    def embed_query(self, query: str) -> np.ndarray:
        raise ModelLoadError("embedding model unavailable (test)")


class DownReranker:
    """A cross-encoder whose model cannot be loaded."""

    name = "down-reranker"
    version = "none"
    long_text = "windows"
    aggregation = "max"
    top_m = 2
    max_length = None
    warm_ups = 0

    def warm_up(self) -> None:
        self.warm_ups += 1
        raise ModelLoadError("cross-encoder down-reranker: no such model (test)")

    def score(self, query: str, passages: Sequence[tuple[str, str]]) -> RerankOutput:  # pragma: no cover
        raise AssertionError("score must not be called when warm_up failed")


class OverlapReranker:
    """A deterministic "model": score = query words found in the content, minus position noise.

    It reads only the text it is given, so anything the pipeline does to the ranking beyond these
    scores is visible in a test. ``calls`` counts scoring calls (to observe the cache).
    """

    name = "overlap-reranker"
    version = "ov-1"
    long_text = "windows"
    aggregation = "max"
    top_m = 2
    max_length = None

    def __init__(self, scores: dict[str, float] | None = None) -> None:
        self.calls = 0
        self.fixed = scores

    def warm_up(self) -> None:
        return None

    def raw(self, query: str, content: str) -> float:
        if self.fixed is not None:
            for word, value in self.fixed.items():
                if word in content:
                    return value
        q = set(query.lower().split())
        words = content.lower().split()
        return float(sum(1 for w in words if w in q)) - 0.001 * len(words)

    def score(self, query: str, passages: Sequence[tuple[str, str]]) -> RerankOutput:
        self.calls += 1
        scores = [self.raw(query, content) for _, content in passages]
        trunc = [Truncation(len(c.split()), len(c.split()), "none") for _, c in passages]
        return RerankOutput(scores=scores, truncation=trunc, pairs=len(passages))


def hits_markers(hits: Iterable[Hit]) -> set[str]:
    out: set[str] = set()
    for h in hits:
        out |= markers_in(h.text)
    return out


def check_no_leak(result: Any, corpus: Corpus, tenant: str, groups: Sequence[str]) -> int:
    """Assert nothing the caller may not see appears anywhere in a :class:`SearchResult`; returns the
    number of hits checked."""
    by_id = {c.chunk_id: c for c in corpus.docs()}
    forbidden = {marker_of(c) for c in corpus.docs() if not visible(c, tenant, groups, corpus)}
    seen = [*result.candidates, *result.hits]
    for h in seen:
        assert h.tenant_id == tenant, f"hit {h.chunk_id} of tenant {h.tenant_id} served to {tenant}"
        for cid in (h.chunk_id, *h.expanded_from):
            doc = by_id.get(cid)
            assert doc is not None, f"unknown id {cid}"
            assert visible(doc, tenant, groups, corpus), f"{cid} not visible to {tenant}/{groups} was served"
    leaked = (hits_markers(seen) | markers_in(result.context.text)) & forbidden
    assert not leaked, f"text of forbidden chunks {sorted(leaked)} reached the result"
    for c in result.context.citations:
        for cid in (c.chunk_id, *c.expanded_from):
            assert visible(by_id[cid], tenant, groups, corpus), f"citation {c.citation_id} -> {cid} leaked"
    return len(seen)


def marker_of(chunk: Chunk) -> str:
    (m,) = markers_in(chunk.text)
    return m
