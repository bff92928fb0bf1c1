"""The read side of :class:`~es_rag.client.RagClient`: search (sync and async), explain, sources, selftest."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from es_rag.client.common import _groups, _tenant
from es_rag.errors import ConfigError, EsRagError
from es_rag.settings import Settings

if TYPE_CHECKING:
    from es_rag.encoders.embedder import LocalEmbedder
    from es_rag.filters import SearchFilter
    from es_rag.pipeline import RagPipeline
    from es_rag.result import SearchResult
    from es_rag.selftest import SelftestReport
    from es_rag.telemetry import StageTelemetry
    from es_rag.versions.store import SourceSummary


class ClientReads:
    """Searches and reads of a :class:`~es_rag.client.RagClient` (a mixin: the client holds the state)."""

    _given: Settings
    _settings: Settings
    _backend: Any
    _on_cluster: bool
    _index_dir: Path | None
    _pipeline: RagPipeline | None
    _executor: ThreadPoolExecutor | None
    _async_workers: int
    _telemetry: StageTelemetry | None
    _load_lock: threading.RLock
    _rw: Any

    def _check_open(self) -> None:
        raise NotImplementedError

    def _reading(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _loaded_pipeline(self, probe: bool = True) -> RagPipeline:
        raise NotImplementedError

    def _loaded_embedder(self) -> LocalEmbedder:
        raise NotImplementedError

    def _filter(
        self,
        tenant: str,
        acl: Sequence[str] | str | None,
        metadata: Mapping[str, str | Sequence[str]] | None,
        filters: Sequence[Any] | str | Any = (),
        as_of: str | None = "now",
    ) -> SearchFilter:
        from es_rag.filters import SearchFilter
        from es_rag.metadata import Validity, parse_filters
        from es_rag.query_filters import check_query_fields, is_query

        given = [filters] if isinstance(filters, str) or is_query(filters) else list(filters)
        queries: list[Any] = [f for f in given if not isinstance(f, str)]  # elasticsearch.dsl queries or their dicts
        schema = self._settings.index.metadata_schema()
        flt = SearchFilter(
            _tenant(tenant),
            _groups(acl),
            dict(metadata or {}),  # type: ignore[arg-type]
            conditions=parse_filters([f for f in given if isinstance(f, str)], schema),
            validity=None if as_of is None else Validity(as_of),
            queries=tuple(queries),
        )
        check_query_fields(flt.queries, schema)
        return flt

    def search(
        self,
        query: str,
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        metadata: Mapping[str, str | Sequence[str]] | None = None,
        filters: Sequence[Any] | str | Any = (),
        as_of: str | None = "now",
    ) -> SearchResult:
        """Run every stage for ``query`` under the caller's hard filter (what ``es-rag search`` prints).

        Args:
            query: The user's query (non-empty).
            tenant: The caller's tenant (required).
            acl: The caller's ACL groups (``public`` is always added).
            metadata: Exact-match conditions on top-level keyword fields: field -> value or allowed values.
            filters: Metadata conditions as ``es-rag search --filter`` takes them (``doc_type=policy``,
                ``published>=2023``), and ``elasticsearch.dsl`` queries or their dicts
                (``Q("range", **{"meta.published": {"gte": "2024"}})``, :mod:`es_rag.query_filters`), placed in every
                retriever's filter; all apply.
            as_of: Serve what is valid on this day (``YYYY-MM-DD``), ``now`` (the default), or None for every date.

        Raises:
            ConfigError: A missing or empty tenant, a bad metadata filter.
            EsRagError: An empty query; the client is closed.
        """
        flt = self._filter(tenant, acl, metadata, filters, as_of)
        if not isinstance(query, str) or not query.strip():
            raise EsRagError("query: empty query")
        if getattr(self._backend, "async_io", False):
            raise ConfigError(
                "search: this client was built from an AsyncElasticsearch; use `await rag.asearch(...)`, or build a "
                "client from a synchronous elasticsearch.Elasticsearch for synchronous calls"
            )
        with self._reading():
            result = self._loaded_pipeline().search(query, flt)
        if self._telemetry is not None:
            self._telemetry.record(result)
        return result

    async def asearch(
        self,
        query: str,
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        metadata: Mapping[str, str | Sequence[str]] | None = None,
        filters: Sequence[Any] | str | Any = (),
        as_of: str | None = "now",
    ) -> SearchResult:
        """:meth:`search` as a coroutine: the same stages and the same result, with the Elasticsearch requests
        awaited on an ``AsyncElasticsearch`` and the model work in the client's bounded executor (see the class
        docstring). The first call loads the models, in the executor.

        Args:
            query: The user's query (non-empty).
            tenant: The caller's tenant (required).
            acl: The caller's ACL groups (``public`` is always added).
            metadata: Exact-match conditions on keyword fields: field -> value or allowed values.
            filters: Metadata conditions, as for :meth:`search`.
            as_of: The validity day, as for :meth:`search`.

        Raises:
            ConfigError: A missing or empty tenant, a bad metadata filter.
            EsRagError: An empty query; the client is closed.
        """
        flt = self._filter(tenant, acl, metadata, filters, as_of)
        if not isinstance(query, str) or not query.strip():
            raise EsRagError("query: empty query")
        loop = asyncio.get_running_loop()
        async with self._areading():
            executor = self._async_executor()
            pipeline = self._pipeline
            if pipeline is None:
                aio = bool(getattr(self._backend, "async_io", False))
                if aio:
                    await self._backend.aprobe()  # a cluster that is down or refuses us fails before a model loads
                pipeline = await loop.run_in_executor(executor, self._loaded_pipeline, not aio)
            result = await pipeline.asearch(query, flt, executor=executor)
        if self._telemetry is not None:
            self._telemetry.record(result)
        return result

    @contextlib.asynccontextmanager
    async def _areading(self) -> AsyncIterator[None]:
        """The read lock for a coroutine: taken at once when no write holds or awaits it, else waited for in a
        thread (the event loop goes on); a cancelled wait gives the lock back when the thread gets it."""
        if not self._rw.acquire_read(blocking=False):
            waiting = asyncio.get_running_loop().run_in_executor(None, self._rw.acquire_read)
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError:
                waiting.add_done_callback(lambda _: self._rw.release_read())
                raise
        try:
            self._check_open()
            yield
        finally:
            self._rw.release_read()

    def _async_executor(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is None:
            with self._load_lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self._async_workers, thread_name_prefix="es-rag-async")
                executor = self._executor
        return executor

    def explain(
        self,
        query: str,
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        metadata: Mapping[str, str | Sequence[str]] | None = None,
        filters: Sequence[Any] | str | Any = (),
        as_of: str | None = "now",
        format: str = "console",
        template: bool = False,
        vector: bool = True,
    ) -> str:
        """The Elasticsearch request(s) a search for ``query`` sends, as ``es-rag explain`` prints them: Kibana Dev
        Tools console text, or JSON. On a cluster: with the tenant's hidden version keys and the cluster's fusion
        path; on the embedded backend: what a cluster would be sent (both fusion paths when ``fusion_path=auto``).

        Args:
            query: The query.
            tenant: The caller's tenant (required).
            acl: The caller's ACL groups.
            metadata: Exact-match conditions, as for :meth:`search`.
            filters: Metadata conditions, as for :meth:`search`.
            as_of: The validity day, as for :meth:`search`.
            format: ``console`` or ``json``.
            template: Show the ``_search/template`` call of the stored hybrid template instead.
            vector: Embed the query (loads the embedding model); False puts a unit-vector placeholder
                (``es-rag explain --no-vector``).
        """
        from es_rag.explain import explain_text

        flt = self._filter(tenant, acl, metadata, filters, as_of)
        if not isinstance(query, str) or not query.strip():
            raise EsRagError("query: empty query")
        with self._reading() as backend:
            dims = self._settings.encoder.dims
            vec = self._loaded_embedder().embed_query(query).tolist() if vector else [1.0] + [0.0] * (dims - 1)
            return explain_text(
                query,
                vec,
                flt,
                self._settings,
                backend=backend if self._on_cluster else None,
                template=template,
                fmt=format,
            )

    def sources(self, tenant: str) -> list[SourceSummary]:
        """The tenant's sources as ``es-rag sources`` lists them: version served, chunks per version, parents.

        Args:
            tenant: The tenant (required).
        """
        tenant = _tenant(tenant)
        with self._reading() as backend:
            listing: list[SourceSummary] = backend.version_store().sources(tenant)
            return listing

    def selftest(self, *, keep: bool = False) -> SelftestReport:
        """``es-rag selftest`` on this client's cluster and connection: every request es_rag sends, checked under a
        throwaway ``es-rag-selftest-*`` prefix with this client's settings, then deleted. Loads no model.

        On the embedded backend there is no cluster to check (the embedded backend runs in this process and is
        tested by es_rag's own suite), so it raises instead of reporting checks that prove nothing.

        Args:
            keep: Leave the throwaway indices and assets in place for inspection.

        Raises:
            EsRagError: The client is on the embedded backend, or closed.
        """
        with self._reading() as backend:
            if not self._on_cluster:
                raise EsRagError(
                    "selftest checks an Elasticsearch cluster; this client is on the embedded backend "
                    "(use RagClient.from_elasticsearch or RagClient.from_url)"
                )
            from es_rag.elasticsearch.backend import ElasticsearchBackend
            from es_rag.selftest import run_selftest, throwaway_settings

            scratch = ElasticsearchBackend(backend.client, throwaway_settings(self._given), url=backend.url)
            return run_selftest(scratch, keep=keep)
