"""Blue-green reindex: build a new generation from the sources, evaluate it next to the live one, swap atomically, roll
back, clean up.

When the embedding model or the chunker changes, every vector must be recomputed from the sources, so a new
generation is ingested from them (:func:`es_rag.ingest.ingest_sources`, the one ingest flow), not copied. Searches
never see a half-built generation: they address the names (Elasticsearch aliases, the embedded ``CURRENT`` pointer),
and the swap moves all of them at once.

* Elasticsearch: :mod:`es_rag.elasticsearch.aliases` (three indices per generation, one ``POST _aliases``).
* Embedded: :mod:`es_rag.embedded.generations` (a folder per generation, a pointer file replaced atomically).

Evaluation (before the swap): chunk and parent counts of both generations for the tenant, and for each query given the
sources the live and the new generation return; with gold source ids (a JSONL golden file), recall@k of both. The live
generation is queried with the same settings; when its vectors come from another model than the new query encoder its
dense channel is left out (BM25 only), and the report says so. The swap is refused when the new generation has no
chunks, a document failed, or its recall is lower than the live one's (``force`` overrides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_rag.backend import check_embedding
from es_rag.embedded import store
from es_rag.errors import ConfigError, EmbeddingMismatch, EsRagError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.ingest import IngestReport, SourceDoc, ingest_sources
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings, VectorMode, chunk_pipeline_id


@dataclass(frozen=True)
class EvalQuery:
    """One evaluation query: its text and, when known, the source ids that answer it."""

    query: str
    gold: tuple[str, ...] = ()


@dataclass
class Evaluation:
    """What the live and the new generation hold and return."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    queries: list[dict[str, Any]] = field(default_factory=list)
    recall: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"counts": self.counts, "recall": self.recall, "queries": self.queries, "notes": self.notes}


def _search_sources(pipeline: RagPipeline, query: str, flt: SearchFilter, k: int) -> list[str]:
    hits = pipeline.search(query, flt).candidates[:k]
    return list(dict.fromkeys(h.source_id for h in hits if h.source_id))


def evaluate(
    *,
    settings: Settings,
    live: Any | None,
    new: Any,
    embedder: Any,
    queries: Sequence[EvalQuery],
    flt: SearchFilter,
    k: int = 10,
) -> Evaluation:
    """Compare the new generation with the live one (None: nothing is live yet).

    Args:
        settings: The new generation's settings (also used to query the live one).
        live: The live generation's backend, or None.
        new: The new generation's backend.
        embedder: The new query encoder.
        queries: Evaluation queries (gold source ids optional).
        flt: The tenant and ACL the queries run under.
        k: Candidates per query counted for recall (after rerank, before selection).
    """
    out = Evaluation()
    tok = embedder.tokenizer()
    plain = settings.replace(rerank_model=None)
    sides: dict[str, RagPipeline] = {"new": RagPipeline(new, embedder=embedder, settings=plain, tokenizer=tok)}
    out.counts["new"] = _counts(new, flt)
    if live is not None:
        out.counts["live"] = _counts(live, flt)
        live_embedder = embedder
        try:
            check_embedding(live.embedding_state(), settings, str(embedder.version))
        except EmbeddingMismatch as exc:
            live_embedder = None
            out.notes.append(f"live generation queried with BM25 only: {exc}")
        sides["live"] = RagPipeline(live, embedder=live_embedder, settings=plain, tokenizer=tok)
    found: dict[str, list[float]] = {name: [] for name in sides}
    for q in queries:
        row: dict[str, Any] = {"query": q.query, "gold": list(q.gold)}
        for name, pipe in sides.items():
            got = _search_sources(pipe, q.query, flt, k)
            row[name] = got
            if q.gold:
                found[name].append(len(set(got) & set(q.gold)) / len(set(q.gold)))
        out.queries.append(row)
    for name in sides:
        scores = found[name]
        out.recall[name] = round(sum(scores) / len(scores), 4) if scores else None
    for pipe in sides.values():
        pipe.close()
    return out


def _counts(backend: Any, flt: SearchFilter) -> dict[str, int]:
    sources = backend.version_store().sources(flt.tenant_id)
    return {
        "sources": len(sources),
        "chunks": sum(s.chunks for s in sources),
        "chunks_all_tenants": int(backend.count()),
    }


def swap_refusal(report: IngestReport, evaluation: Evaluation) -> str | None:
    """Why the new generation must not be served (None: it may).

    Args:
        report: The new generation's ingest.
        evaluation: Its evaluation.
    """
    if report.failed:
        return f"{len(report.failed)} documents failed to ingest into the new generation"
    if not evaluation.counts.get("new", {}).get("chunks"):
        return "the new generation holds no chunks for this tenant"
    new, live = evaluation.recall.get("new"), evaluation.recall.get("live")
    if new is not None and live is not None and new < live:
        return f"recall@k of the new generation ({new}) is below the live one's ({live})"
    return None


def smoke_query(doc: SourceDoc) -> str:
    """A query when none is given: the document's title, else its first eight words (markup characters dropped).

    Args:
        doc: The first source read.
    """
    if doc.title:
        return doc.title
    words = [w.strip("#*_`>|-") for w in doc.text.split()]
    return " ".join([w for w in words if w][:8]) or doc.source_id


@dataclass
class BuildResult:
    """A new generation built and evaluated."""

    generation: str
    live: str | None
    ingest: IngestReport
    evaluation: Evaluation
    refusal: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "generation": self.generation,
            "live_before": self.live,
            "ingest": self.ingest.to_dict(),
            "evaluation": self.evaluation.to_dict(),
            "swap_refused": self.refusal,
        }


def build_generation(
    *,
    settings: Settings,
    generation: str,
    live_generation: str | None,
    new_backend: Any,
    live_backend: Any | None,
    docs: Sequence[SourceDoc],
    report: IngestReport,
    embedder: Callable[[], Any],
    tenant_id: str,
    acl: Sequence[str],
    chunking: dict[str, Any] | None,
    queries: Sequence[EvalQuery],
    on_cluster: bool,
) -> BuildResult:
    """Ingest ``docs`` into ``new_backend`` (a generation nobody searches yet) and evaluate it next to the live one.

    Args:
        settings: The new generation's settings (``index_generation`` set on Elasticsearch).
        generation: Its name.
        live_generation: The live generation's name (None: none).
        new_backend: A backend writing into the new generation.
        live_backend: A backend reading the live generation (None: none).
        docs: The sources, read.
        report: The ingest report (reading failures already in it).
        embedder: Returns the loaded embedding model.
        tenant_id: The tenant ingested.
        acl: ACL groups the evaluation queries run with.
        chunking: More chunker options (strategy, contextual, parent size).
        queries: Evaluation queries; none: the title of the first source, as a smoke query.
        on_cluster: The backends are Elasticsearch.
    """
    if not docs:
        raise EsRagError("reindex: no source could be read, nothing was built")
    ingest_sources(
        docs,
        backend=new_backend,
        settings=settings,
        embedder=embedder,
        report=report,
        tenant_id=tenant_id,
        chunking=chunking,
        on_cluster=on_cluster,
    )
    new_backend.flush()
    model = embedder()
    qs = list(queries) or [EvalQuery(smoke_query(docs[0]))]
    flt = SearchFilter(tenant_id, tuple(acl))
    evaluation = evaluate(settings=settings, live=live_backend, new=new_backend, embedder=model, queries=qs, flt=flt)
    if not queries:
        evaluation.notes.append(f"no --queries file: one smoke query (from the first source: {qs[0].query!r})")
    return BuildResult(generation, live_generation, report, evaluation, swap_refusal(report, evaluation))


# -- where generations live ----------------------------------------------------------------------------------------
class EsGenerations:
    """Generations on a cluster (:mod:`es_rag.elasticsearch.aliases`): three indices each, the names are aliases.

    Args:
        backend: An :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend` with the base settings (no
            ``index_generation``); its client is shared by the backends this opens.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.settings: Settings = backend.settings

    def preflight(self) -> None:
        """Refuse a build the credentials cannot finish, before anything is embedded: a reindex needs setup's and
        ingest's privileges for the new generation, index ``manage`` for the swap's ``POST _aliases`` and
        ``delete_index`` (``ROLE_PRIVILEGES["reindex"]``, from ``_has_privileges``; nothing is refused when
        security is off or the check is unavailable).

        Raises:
            ConfigError: A privilege is missing (each is named).
        """
        verdict = self.backend.privileges().get("reindex", "ok")
        if verdict.startswith("missing"):
            raise ConfigError(
                f"reindex would fail part-way, nothing was changed: the credentials lack {verdict[len('missing: ') :]}"
                " (docs/cluster.md, Least privilege)"
            )

    def layout(self) -> Any:
        """The indices and aliases of the prefix, read now."""
        from es_rag.elasticsearch.aliases import layout_request, parse_layout

        return parse_layout(self.backend.send(layout_request(self.settings)), self.settings)

    def live(self) -> str | None:
        """The live generation (``legacy`` before the first swap, None when nothing is set up)."""
        return str(self.layout().live_generation(self.settings) or "") or None

    def generations(self) -> list[str]:
        """Every generation with at least one index, oldest first (``legacy`` first when present)."""
        layout = self.layout()
        return (["legacy"] if layout.legacy else []) + sorted(layout.generations)

    def complete(self, generation: str) -> bool:
        """Whether ``generation`` has all its indices."""
        layout = self.layout()
        return bool(layout.legacy) if generation == "legacy" else generation in layout.complete()

    def embedding_versions(self, generation: str) -> dict[str, int]:
        """The ``embedding_version`` values a generation's chunks carry (one aggregation).

        Args:
            generation: A generation (``legacy``: the concrete index before the first swap).
        """
        from es_rag.elasticsearch.aliases import embedding_versions_request, parse_embedding_versions

        target = self.settings if generation == "legacy" else self.settings.replace(index_generation=generation)
        return parse_embedding_versions(self.backend.send(embedding_versions_request(target)))[0]

    def open_new(self, settings: Settings, generation: str) -> Any:
        """Install the assets of ``settings`` (idempotent PUTs) and create the generation's indices (if absent);
        return a backend writing into them.

        Args:
            settings: The new generation's settings (analyzer resolved).
            generation: Its name.
        """
        from es_rag.elasticsearch.backend import ElasticsearchBackend

        new = ElasticsearchBackend(
            self.backend.client, settings.replace(index_generation=generation), url=self.backend.url
        )
        new.setup(create_indices=True)
        return new

    def open_live(self, settings: Settings) -> Any:
        """A backend reading the live generation through the names, or None."""
        from es_rag.elasticsearch.backend import ElasticsearchBackend

        if self.live() is None:
            return None
        return ElasticsearchBackend(self.backend.client, settings, url=self.backend.url)

    def swap(self, generation: str, *, migrate: bool = False) -> str:
        """Point the names at ``generation`` in one ``POST _aliases`` request; returns what it did.

        Args:
            generation: A complete generation.
            migrate: Allow deleting the legacy concrete indices in the same request.
        """
        from es_rag.elasticsearch.aliases import swap_request

        if generation == "legacy":
            raise ConfigError("the legacy indices were deleted by the first swap (--migrate): they cannot be served")
        request = swap_request(self.settings, self.layout(), generation, migrate=migrate)
        self.backend.send(request)
        actions = len(request.body["actions"])
        return f"POST _aliases: {actions} actions, {self.settings.index.prefix}-chunks -> {generation}"

    def delete(self, generation: str) -> str:
        """Delete a retired generation's indices (the live one is refused before any request).

        Args:
            generation: A retired generation.
        """
        from es_rag.elasticsearch.aliases import delete_generation_request, generation_names

        if generation == self.live():
            raise ConfigError(f"generation {generation!r} is live: it is never deleted")
        if generation == "legacy":
            raise ConfigError("the legacy indices are live until the first swap; they are never deleted by cleanup")
        present = set(self.layout().generations.get(generation, []))
        names = [
            n
            for n, r in zip(generation_names(self.settings, generation), ("chunks", "parents", "versions"), strict=True)
            if r in present
        ]
        request = delete_generation_request(self.settings, generation)
        if len(names) < 3:  # an incomplete generation (a build that stopped): delete what is there
            request = EsRequest("DELETE", ",".join(names))
        self.backend.send(request)
        done = f"DELETE {request.path}"
        # the generation's own chunk pipeline (Settings.pipeline_id), once no index names it any more
        for mode in VectorMode:
            pid = chunk_pipeline_id(self.settings.index.prefix, generation, mode)
            got = self.backend.send(EsRequest("DELETE", f"_ingest/pipeline/{pid}"), ignore=(404,))
            if isinstance(got, dict) and got.get("acknowledged"):
                done += f", DELETE _ingest/pipeline/{pid}"
        return done


class EmbeddedGenerations:
    """Generations of an embedded index folder (:mod:`es_rag.embedded.generations`).

    Args:
        root: The ``--index-dir`` folder.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def live(self) -> str | None:
        """The live generation (``legacy``: the folder's own index; None: no index)."""
        from es_rag.embedded.generations import LEGACY, current_generation

        current = current_generation(self.root)
        if current is not None:
            return current
        return LEGACY if store.has_manifest(self.root) else None

    def generations(self) -> list[str]:
        """Every generation with an index, oldest first."""
        from es_rag.embedded.generations import GENERATIONS, LEGACY, list_generations

        found = list_generations(self.root)
        base = self.root / GENERATIONS
        partial = sorted(p.name for p in base.iterdir() if p.is_dir() and p.name not in found) if base.is_dir() else []
        return [g for g in found if g == LEGACY] + sorted([g for g in found if g != LEGACY] + partial)

    def complete(self, generation: str) -> bool:
        """Whether ``generation`` holds an index."""
        from es_rag.embedded.generations import generation_dir

        return store.has_manifest(generation_dir(self.root, generation))

    def embedding_versions(self, generation: str) -> dict[str, int]:
        """The ``embedding_version`` values a generation's chunks carry.

        Args:
            generation: A generation with an index.
        """
        from es_rag.embedded.generations import generation_dir, stored_embedding_versions

        return stored_embedding_versions(generation_dir(self.root, generation))

    def open_new(self, settings: Settings, generation: str) -> Any:
        """A backend writing into the generation's folder.

        Args:
            settings: The new generation's settings.
            generation: Its name.
        """
        from es_rag.embedded.generations import generation_dir
        from es_rag.wiring import embedded_backend

        return embedded_backend(settings, generation_dir(self.root, generation))

    def open_live(self, settings: Settings) -> Any:
        """A backend reading the live generation, or None (dimension and similarity as stored, so a generation of
        another model opens)."""
        from es_rag.embedded.backend import EmbeddedBackend
        from es_rag.wiring import embedded_backend

        if self.live() is None:
            return None
        like = embedded_backend(settings, None)
        return EmbeddedBackend(
            self.root,
            analyzer=like.analyzer,
            bm25_fields=settings.retrieve.bm25_fields,
            tie_breaker=like.tie_breaker,
            bm25_k1=like.k1,
            bm25_b=like.b,
            languages=settings.index.languages,
        )

    def swap(self, generation: str, *, migrate: bool = False) -> str:
        """Serve ``generation``: the pointer file replaced atomically (no ``migrate``: the legacy files stay).

        Args:
            generation: A generation with an index.
            migrate: Ignored here (accepted so both backends take the same options).
        """
        from es_rag.embedded.generations import POINTER, write_pointer

        if generation == self.live():
            raise ConfigError(f"generation {generation!r} is already live in {self.root}")
        write_pointer(self.root, generation)
        return f"{self.root / POINTER} -> {generation}"

    def delete(self, generation: str) -> str:
        """Delete a retired generation's files.

        Args:
            generation: A retired generation.
        """
        from es_rag.embedded.generations import generation_dir, remove_generation

        remove_generation(self.root, generation)
        return f"deleted {generation_dir(self.root, generation)}"


def previous_generation(store: Any) -> str:
    """The generation ``--rollback`` serves: the newest complete one older than the live one.

    Args:
        store: :class:`EsGenerations` or :class:`EmbeddedGenerations`.

    Raises:
        ConfigError: Nothing older is left.
    """
    live = store.live()
    if live is None:
        raise ConfigError("nothing is served yet: there is nothing to roll back")
    gens = store.generations()
    older = [g for g in gens[: gens.index(live)] if store.complete(g)] if live in gens else []
    if not older:
        raise ConfigError(
            f"no generation older than the live one ({live}) is left to roll back to"
            + (" (the first swap on Elasticsearch deletes the legacy indices)" if live != "legacy" else "")
        )
    return str(older[-1])


def retired_generations(store: Any, keep: int) -> list[str]:
    """What ``--cleanup`` deletes: generations older than the live one, except the newest ``keep`` complete ones
    (rollback targets). Generations newer than the live one (built, not swapped) are left alone.

    Args:
        store: :class:`EsGenerations` or :class:`EmbeddedGenerations`.
        keep: Retired generations kept for rollback.
    """
    live = store.live()
    gens = store.generations()
    if live is None or live not in gens:
        return []
    older = gens[: gens.index(live)]
    kept = [g for g in older if store.complete(g)][-keep:] if keep > 0 else []
    return [g for g in older if g not in kept and not (g == "legacy" and isinstance(store, EsGenerations))]
