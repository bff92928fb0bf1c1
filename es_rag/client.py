"""``RagClient``: the one object an app keeps for its whole life -- search, ingest, delete, list, explain, selftest --
over an Elasticsearch cluster (the app's own ``elasticsearch.Elasticsearch`` client, or one built from a URL) or an
embedded index folder.

It does what the CLI commands do, with the same functions (:mod:`es_rag.wiring`, :mod:`es_rag.ingest`,
:func:`es_rag.explain.explain_text`, :func:`es_rag.selftest.run_selftest`), and adds what a long-lived, multi-threaded
caller needs: models loaded once and shared, writes serialised, a lifecycle. Constructing one loads no model and
sends no request.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from es_rag.errors import ConfigError, EsRagError, InputError
from es_rag.settings import Settings

if TYPE_CHECKING:
    from es_rag.encoders.embedder import LocalEmbedder
    from es_rag.filters import SearchFilter
    from es_rag.ingest import IngestReport, SourceDoc
    from es_rag.ingest.sync import SyncScope
    from es_rag.pipeline import RagPipeline
    from es_rag.result import SearchResult
    from es_rag.selftest import SelftestReport
    from es_rag.telemetry import StageTelemetry
    from es_rag.versions.store import SourceSummary

T = TypeVar("T")

DEFAULT_ASYNC_WORKERS = 4
"""Threads of the executor :meth:`RagClient.asearch` runs model work in (``async_workers=``): small, as the models
take turns on their tokenizer lock anyway and the cores are shared with the app."""


class _ReadWriteLock:
    """Many readers or one writer; a waiting writer goes before readers that arrive after it (a stream of searches
    cannot starve a write). Not reentrant: no method of :class:`RagClient` calls another while holding it."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    def acquire_read(self, blocking: bool = True) -> bool:
        with self._cond:
            while self._writer or self._waiting_writers:
                if not blocking:
                    return False
                self._cond.wait()
            self._readers += 1
            return True

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        self.acquire_read()
        try:
            yield
        finally:
            self.release_read()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def _settings(
    settings: Settings | None, overrides: Mapping[str, Any], settings_file: str | Path | None = None
) -> Settings:
    if settings is not None and not isinstance(settings, Settings):
        raise ConfigError(
            f"settings: expected an es_rag.Settings, got {type(settings).__name__} "
            "(single settings go as keywords: RagClient.open(path, context_k=3))"
        )
    if settings_file is not None:
        if settings is not None:
            raise ConfigError(
                "settings and settings_file: give one (Settings.from_file(path).replace(...) combines them)"
            )
        return Settings.from_file(settings_file, **overrides)
    base = settings if settings is not None else Settings()
    return base.replace(**overrides) if overrides else base


def _tenant(tenant: Any) -> str:
    if not isinstance(tenant, str) or not tenant.strip():
        raise ConfigError(
            f"tenant: every call needs a non-empty tenant (tenant='acme'), got {tenant!r}; "
            "there is no all-tenants search or write"
        )
    return tenant


def _telemetry(telemetry: Any) -> StageTelemetry | None:
    if telemetry is False or telemetry is None:
        return None
    from es_rag.telemetry import StageTelemetry

    if telemetry is True:
        return StageTelemetry()
    if isinstance(telemetry, StageTelemetry):
        return telemetry
    raise ConfigError(f"telemetry: expected True, False or an es_rag.telemetry.StageTelemetry, got {telemetry!r}")


def _workers(async_workers: Any) -> int:
    if isinstance(async_workers, bool) or not isinstance(async_workers, int) or async_workers < 1:
        raise ConfigError(f"async_workers: must be an integer >= 1, got {async_workers!r}")
    return async_workers


def _groups(acl: Sequence[str] | str | None) -> tuple[str, ...]:
    """ACL groups in order, without repeats; a single string is one group (not its characters)."""
    if acl is None:
        return ()
    if isinstance(acl, str):
        acl = [acl]
    return tuple(dict.fromkeys(str(g) for g in acl if str(g).strip()))


class RagClient:
    """Search, ingest, delete, list, explain and selftest through one object; build it with
    :meth:`from_elasticsearch`, :meth:`from_url` or :meth:`open`, use it as a context manager (or call
    :meth:`close`).

    Every call names its ``tenant``: it is required and never empty, so no call can reach "all tenants".

    **Models** load once, on the first call that needs them (:meth:`search`, the ingests and :meth:`explain` unless
    ``vector=False`` load the embedding model; :meth:`search` also the cross-encoder, or records why it cannot, and
    the pack tokenizer), under a lock, so two threads never load one twice; every later call shares them.
    :meth:`delete_source`, :meth:`sources` and :meth:`selftest` load none.

    **Threads.** One client may be shared by all the threads of an app:

    * :meth:`search`, :meth:`explain`, :meth:`sources` and :meth:`selftest` run at the same time as each other. The
      calls into one model (query and document embedding, token counting, reranking) take turns on that model's
      tokenizer lock (:func:`~es_rag.encoders.tokenizer.tokenizer_lock`: a fast tokenizer cannot serve two threads);
      everything else -- Elasticsearch round trips, BM25 and kNN on the embedded index, fusion, selection,
      packing -- runs in parallel.
    * Writes (:meth:`ingest`, :meth:`ingest_texts`, :meth:`delete_source`) of one client run one at a time.
    * On Elasticsearch a write runs beside the searches; they keep being served the previous version of a source
      until the write switches it (the version registry, as for any writer of the cluster).
    * On an embedded index folder a write takes the folder's ``write.lock`` (the one ``es-rag ingest`` takes, so
      writers in other processes wait for each other), reads the index from disk into a new store (keeping what
      other processes wrote), writes and saves it, then swaps it in. Searches running meanwhile use the store as it
      was before the write and wait only for the swap; memory holds both stores during a write. A write that raises
      leaves the folder and the store searches use as they were.
    * On an in-memory embedded index (``open(None)``) a write excludes searches for its whole duration.
    * :meth:`close` waits for running calls; any call after it raises :class:`~es_rag.errors.EsRagError`.

    Across processes: on Elasticsearch every writer's switch is seen by the next search; on an embedded folder this
    client sees another process's writes after its own next write (or in a new client).

    **Async.** ``await rag.asearch(...)`` returns what :meth:`search` returns for the same query, from the same
    stages. On a client built from an ``AsyncElasticsearch`` the Elasticsearch requests are awaited on the event
    loop; the query embedding, the cross-encoder, token counting, expansion and any synchronous backend call (the
    embedded index, a synchronous ``Elasticsearch``) run in a bounded executor of ``async_workers`` threads, so the
    loop is never blocked by a model. Use ``async with`` or :meth:`aclose`. A client built from an
    ``AsyncElasticsearch`` serves :meth:`asearch` only; ingest, delete, explain, sources, selftest and :meth:`search`
    need a synchronous ``elasticsearch.Elasticsearch`` (build a second client from one).

    **Telemetry.** ``telemetry=True`` exports one OpenTelemetry span per stage and the stage metrics of every search
    (:mod:`es_rag.telemetry`; the ``otel`` extra), to the global tracer and meter providers; a
    :class:`~es_rag.telemetry.StageTelemetry` sends them to providers of its own. Off by default, and then nothing
    of OpenTelemetry is imported.

    Args:
        backend: The backend (use the constructors rather than this).
        settings: Settings as given (``selftest`` resolves ``analyzer=auto`` against the cluster).
        on_cluster: Whether ``backend`` is an Elasticsearch backend (else the embedded one).
        owns_backend: Whether :meth:`close` closes the backend's Elasticsearch client.
        index_dir: The embedded index folder; None in memory or on a cluster.
        async_workers: Threads of the executor :meth:`asearch` runs model work in.
        telemetry: True, False or a :class:`~es_rag.telemetry.StageTelemetry`.
        escalation_scorer: A ``(query, passages) -> scores`` callable (an LLM listwise ranker) for the escalate
            stage (:mod:`es_rag.stages.escalate`); None: the cross-encoder ``escalate_model`` names, or none.
    """

    def __init__(
        self,
        backend: Any,
        settings: Settings,
        *,
        on_cluster: bool,
        owns_backend: bool,
        index_dir: Path | None,
        async_workers: int = DEFAULT_ASYNC_WORKERS,
        telemetry: bool | StageTelemetry = False,
        escalation_scorer: Any = None,
    ) -> None:
        from es_rag.elasticsearch.assets import resolved_settings

        self._given = settings
        # analyzer=auto takes the no-plugin branch, as the CLI's search and ingest do (setup probes the cluster)
        self._settings = resolved_settings(settings, plugins=None)
        self._backend = backend
        self._owns = owns_backend
        self._index_dir = index_dir
        self._on_cluster = on_cluster
        self._rw = _ReadWriteLock()
        self._write_mutex = threading.Lock()
        self._load_lock = threading.RLock()
        self._embedder: LocalEmbedder | None = None
        self._pipeline: RagPipeline | None = None
        self._closed = False
        self._async_workers = _workers(async_workers)
        self._executor: ThreadPoolExecutor | None = None
        self._telemetry = _telemetry(telemetry)
        self._escalation_scorer = escalation_scorer

    # -- construction ---------------------------------------------------------------------------------------------
    @classmethod
    def from_elasticsearch(
        cls,
        es: Any,
        settings: Settings | None = None,
        *,
        settings_file: str | Path | None = None,
        async_workers: int = DEFAULT_ASYNC_WORKERS,
        telemetry: bool | StageTelemetry = False,
        escalation_scorer: Any = None,
        **overrides: Any,
    ) -> RagClient:
        """A client over the app's own ``elasticsearch.Elasticsearch`` or ``AsyncElasticsearch`` client: its connection
        pool, credentials and TLS are reused, and :meth:`close` / :meth:`aclose` leave it open (the app closes it).
        On an ``AsyncElasticsearch`` the client serves :meth:`asearch` (see the class docstring).

        Args:
            es: A configured ``elasticsearch.Elasticsearch`` or ``elasticsearch.AsyncElasticsearch``.
            settings: Settings (default ``Settings()``).
            settings_file: A TOML settings file (:meth:`Settings.from_file`) instead of ``settings``; ``overrides``
                apply over it.
            async_workers: Threads of the executor :meth:`asearch` runs model work in.
            telemetry: Export spans and metrics (:mod:`es_rag.telemetry`).
            escalation_scorer: A ``(query, passages) -> scores`` callable for the escalate stage (None: the
                cross-encoder ``escalate_model`` names, or no escalation).
            **overrides: Single settings by their flat names (``context_k=3``), applied over ``settings``.

        Raises:
            ConfigError: ``es`` is not an Elasticsearch client (a URL goes to :meth:`from_url`).
        """
        perform = getattr(es, "perform_request", None)
        if isinstance(es, (str, Path)) or not callable(perform) or not callable(getattr(es, "options", None)):
            raise ConfigError(
                f"from_elasticsearch takes an elasticsearch.Elasticsearch or AsyncElasticsearch client, got "
                f"{type(es).__name__} (for a URL use RagClient.from_url)"
            )
        from es_rag.elasticsearch.backend import ElasticsearchBackend

        # the backend keeps analyzer=auto as given: rag.backend.setup() resolves it against the cluster's plugins
        given = _settings(settings, overrides, settings_file)
        return cls(
            ElasticsearchBackend(es, given),
            given,
            on_cluster=True,
            owns_backend=False,
            index_dir=None,
            async_workers=async_workers,
            telemetry=telemetry,
            escalation_scorer=escalation_scorer,
        )

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        settings: Settings | None = None,
        *,
        api_key: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ca_certs: str | None = None,
        verify_certs: bool = True,
        ssl_assert_fingerprint: str | None = None,
        cloud_id: str | None = None,
        settings_file: str | Path | None = None,
        async_workers: int = DEFAULT_ASYNC_WORKERS,
        telemetry: bool | StageTelemetry = False,
        escalation_scorer: Any = None,
        **overrides: Any,
    ) -> RagClient:
        """A client over a new connection to ``url`` (or an Elastic Cloud ``cloud_id``), which :meth:`close` closes.
        No request is sent here. Credentials: the explicit ones, else ``ES_API_KEY``, else ``ES_USERNAME`` and
        ``ES_PASSWORD`` (as ``es-rag --es``).

        Args:
            url: ``http(s)://host:port``; None with ``cloud_id``.
            settings: Settings (default ``Settings()``; ``request_timeout`` applies to the connection).
            api_key: API key (base64 ``id:key``).
            username: Basic-auth user.
            password: Basic-auth password.
            ca_certs: CA that signed the cluster's certificate (Elasticsearch 9: ``config/certs/http_ca.crt``).
            verify_certs: Verify TLS certificates (False only for a throwaway dev cluster).
            ssl_assert_fingerprint: SHA-256 fingerprint of the cluster's certificate, instead of a CA.
            cloud_id: Elastic Cloud deployment id, instead of ``url``.
            settings_file: A TOML settings file (:meth:`Settings.from_file`) instead of ``settings``; ``overrides``
                apply over it.
            async_workers: Threads of the executor :meth:`asearch` runs model work and, over this synchronous
                connection, its Elasticsearch requests in.
            telemetry: Export spans and metrics (:mod:`es_rag.telemetry`).
            escalation_scorer: A ``(query, passages) -> scores`` callable for the escalate stage (None: the
                cross-encoder ``escalate_model`` names, or no escalation).
            **overrides: Single settings by their flat names, applied over ``settings``.

        Raises:
            ConfigError: A URL without scheme, host or port; TLS options on ``http://``; both url and cloud_id.
        """
        from es_rag.elasticsearch.backend import ElasticsearchBackend

        given = _settings(settings, overrides, settings_file)
        backend = ElasticsearchBackend.connect(
            url,
            given,
            api_key=api_key,
            username=username,
            password=password,
            ca_certs=ca_certs,
            verify_certs=verify_certs,
            ssl_assert_fingerprint=ssl_assert_fingerprint,
            cloud_id=cloud_id,
        )
        return cls(
            backend,
            given,
            on_cluster=True,
            owns_backend=True,
            index_dir=None,
            async_workers=async_workers,
            telemetry=telemetry,
            escalation_scorer=escalation_scorer,
        )

    @classmethod
    def open(
        cls,
        index_dir: str | Path | None,
        settings: Settings | None = None,
        *,
        settings_file: str | Path | None = None,
        async_workers: int = DEFAULT_ASYNC_WORKERS,
        telemetry: bool | StageTelemetry = False,
        escalation_scorer: Any = None,
        **overrides: Any,
    ) -> RagClient:
        """A client over the embedded index in ``index_dir`` (what ``es-rag ingest --index-dir`` writes; created by
        the first ingest when missing), or in memory with None.

        Args:
            index_dir: The index folder, or None for an in-memory index (gone with the client).
            settings: Settings (default ``Settings()``); ``vector_dims`` must match a stored index.
            settings_file: A TOML settings file (:meth:`Settings.from_file`) instead of ``settings``; ``overrides``
                apply over it.
            async_workers: Threads of the executor :meth:`asearch` runs model work and the index's searches in.
            telemetry: Export spans and metrics (:mod:`es_rag.telemetry`).
            escalation_scorer: A ``(query, passages) -> scores`` callable for the escalate stage (None: the
                cross-encoder ``escalate_model`` names, or no escalation).
            **overrides: Single settings by their flat names, applied over ``settings``.

        Raises:
            ConfigError: ``index_dir`` is a file; the stored index has another vector size or similarity;
                ``vector_mode=semantic_text`` (Elasticsearch only).
        """
        from es_rag.elasticsearch.assets import resolved_settings
        from es_rag.wiring import build_backend, index_settings

        folder = Path(index_dir) if index_dir is not None else None
        if folder is not None and folder.exists() and not folder.is_dir():
            raise ConfigError(f"index_dir {folder}: is a file, not a folder")
        given = index_settings(_settings(settings, overrides, settings_file), folder)  # the index's model, unless given
        backend = build_backend(resolved_settings(given, plugins=None), index_dir=folder)
        return cls(
            backend,
            given,
            on_cluster=False,
            owns_backend=False,
            index_dir=folder,
            async_workers=async_workers,
            telemetry=telemetry,
            escalation_scorer=escalation_scorer,
        )

    # -- properties -----------------------------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        """The settings every call uses (``analyzer=auto`` resolved)."""
        return self._settings

    @property
    def backend(self) -> Any:
        """The backend, for lower-level use (``rag.backend.setup()`` on a cluster); calls made on it directly are
        outside this class's thread-safety guarantee."""
        return self._backend

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        where = (
            f"elasticsearch {getattr(self._backend, 'url', '?')}"
            if self._on_cluster
            else f"embedded {self._index_dir if self._index_dir is not None else '(in memory)'}"
        )
        return f"RagClient({where}{', closed' if self._closed else ''})"

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for running calls, then release what this client made: the Elasticsearch client if
        :meth:`from_url` created it (an app's own client, given to :meth:`from_elasticsearch`, stays open) and the
        rerank timeout's worker and the :meth:`asearch` executor. Safe to call twice; later calls raise
        :class:`~es_rag.errors.EsRagError`."""
        if self._shut() and self._owns:
            self._backend.close()

    async def aclose(self) -> None:
        """:meth:`close` for async code: waits for running calls without blocking the event loop. An app's own
        ``AsyncElasticsearch`` stays open (the app closes it)."""
        if await asyncio.get_running_loop().run_in_executor(None, self._shut) and self._owns:
            await self._backend.aclose()

    def _shut(self) -> bool:
        """Mark the client closed once running calls are done and release its pipeline and executor; False when it
        was closed already."""
        with self._write_mutex, self._rw.write():
            if self._closed:
                return False
            self._closed = True
            pipeline, executor = self._pipeline, self._executor
        if pipeline is not None:
            pipeline.close()
        if executor is not None:
            executor.shutdown(wait=False)
        return True

    def __enter__(self) -> RagClient:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RagClient:
        self._check_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise EsRagError(f"{self!r}: the client is closed; create a new one (RagClient.open / from_url / ...)")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Any]:
        with self._rw.read():
            self._check_open()
            yield self._backend

    # -- models ---------------------------------------------------------------------------------------------------
    def _loaded_embedder(self) -> LocalEmbedder:
        embedder = self._embedder
        if embedder is None:
            with self._load_lock:
                if self._embedder is None:
                    from es_rag.wiring import build_embedder, cluster_settings

                    if self._on_cluster and not getattr(self._backend, "async_io", False):
                        # the index's own embedding model unless one was given (an AsyncElasticsearch client cannot
                        # be asked here: it keeps the configured model, and the embedding check names a mismatch)
                        self._settings = cluster_settings(self._settings, self._backend)
                    self._embedder = build_embedder(self._settings)
                embedder = self._embedder
        return embedder

    def _loaded_pipeline(self, probe: bool = True) -> RagPipeline:
        """The search pipeline, built and warmed once (callers hold the read lock, so the backend cannot be swapped
        meanwhile); ``probe=False``: the caller probed the cluster already (:meth:`asearch`)."""
        pipeline = self._pipeline
        if pipeline is None:
            with self._load_lock:
                if self._pipeline is None:
                    from es_rag.wiring import build_pipeline

                    if self._on_cluster and probe:
                        self._backend.probe()  # a cluster that is down or refuses us fails before a model loads
                    embedder = self._loaded_embedder()  # first: it may adopt the index's model into the settings
                    built = build_pipeline(
                        self._settings, self._backend, embedder, escalation_scorer=self._escalation_scorer
                    )
                    built.warm_up()
                    self._pipeline = built
                pipeline = self._pipeline
        return pipeline

    def _listeners(self) -> list[Any]:
        """The result cache of the search pipeline, told about retired versions and deleted sources."""
        pipeline = self._pipeline
        return [pipeline.cache] if pipeline is not None and pipeline.cache is not None else []

    # -- reads ----------------------------------------------------------------------------------------------------
    def _filter(
        self,
        tenant: str,
        acl: Sequence[str] | str | None,
        metadata: Mapping[str, str | Sequence[str]] | None,
        filters: Sequence[str] | str = (),
        as_of: str | None = "now",
    ) -> SearchFilter:
        from es_rag.filters import SearchFilter
        from es_rag.metadata import Validity, parse_filters

        exprs = [filters] if isinstance(filters, str) else list(filters)
        return SearchFilter(
            _tenant(tenant),
            _groups(acl),
            dict(metadata or {}),  # type: ignore[arg-type]
            conditions=parse_filters(exprs, self._settings.index.metadata_schema()),
            validity=None if as_of is None else Validity(as_of),
        )

    def search(
        self,
        query: str,
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        metadata: Mapping[str, str | Sequence[str]] | None = None,
        filters: Sequence[str] | str = (),
        as_of: str | None = "now",
    ) -> SearchResult:
        """Run every stage for ``query`` under the caller's hard filter (what ``es-rag search`` prints).

        Args:
            query: The user's query (non-empty).
            tenant: The caller's tenant (required).
            acl: The caller's ACL groups (``public`` is always added).
            metadata: Exact-match conditions on top-level keyword fields: field -> value or allowed values.
            filters: Metadata conditions as ``es-rag search --filter`` takes them (``doc_type=policy``,
                ``published>=2023``); all apply.
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
        filters: Sequence[str] | str = (),
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
        filters: Sequence[str] | str = (),
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

    # -- writes ---------------------------------------------------------------------------------------------------
    def _write(self, work: Callable[[Any], T]) -> T:
        """Run ``work(backend)`` as this client's only writer (see the class docstring for what it excludes)."""
        with self._write_mutex:
            self._check_open()
            if self._on_cluster:
                return work(self._backend)
            if self._index_dir is None:
                with self._rw.write():
                    return work(self._backend)
            from es_rag.embedded.backend import write_lock
            from es_rag.wiring import embedded_backend

            with write_lock(self._index_dir):
                fresh = embedded_backend(self._settings, self._index_dir)  # what is on disk now, every writer's
                result = work(fresh)
                fresh.flush()
            fresh.refresh()  # BM25 and vectors built here, not in the first search after the swap
            with self._rw.write():
                self._backend = fresh
                if self._pipeline is not None:
                    self._pipeline.backend = fresh
            return result

    def ingest(
        self,
        paths: str | Path | Sequence[str | Path],
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        base_dir: str | Path | None = None,
        source_id: str | None = None,
        ignore_file: str | Path | None = None,
        sync: bool = False,
        strategy: str = "parent-child",
        contextual: bool = False,
        parent_max_tokens: int | None = None,
        meta: Mapping[str, Any] | None = None,
        updated_from_mtime: bool = False,
    ) -> IngestReport:
        """Chunk, embed and index files and folders, as ``es-rag ingest`` does: folder walks skip hidden, vendor and
        index folders, ignore-file matches and unsupported types (``report.skipped``); a bad document is reported
        (``report.failed``) and the others are indexed; each source switches to its new version only when all its
        chunks landed. Nothing to read returns the report without loading a model.

        Args:
            paths: Files and folders (or one).
            tenant: Tenant written into every chunk (required).
            acl: Groups allowed to read the documents (default ``public``).
            base_dir: Source ids are paths relative to it (default: each folder given, or a file's own folder).
            source_id: The id of the single file given.
            ignore_file: Gitignore-style patterns skipped in every folder walked, besides each folder's own.
            sync: The index follows the folders given: after a run with no failed document, delete the tenant's
                sources they no longer yield (``report.removed``), as ``es-rag ingest --sync``.
            strategy: Chunking strategy: ``fixed``, ``recursive``, ``structure``, ``parent-child`` or ``semantic``
                (children cut where the embedding model sees the topic change); late chunking is the
                ``late_chunking`` setting of the client's settings.
            contextual: Embed ``title + heading path`` with each child.
            parent_max_tokens: Cap on parent size in tokens (``parent-child``, ``semantic``).
            meta: Metadata of every source (``es-rag ingest --meta``); a document's front matter or JSONL fields
                win. A bad field or value fails the documents it applies to, in ``report.failed``.
            updated_from_mtime: A file that declares no ``updated`` date gets its modification day.

        Raises:
            ConfigError: A missing tenant, a bad strategy, ``sync`` with a file, a missing ``base_dir``.
        """
        import itertools

        from es_rag.chunking import Strategy
        from es_rag.ingest import IngestReport, iter_files

        tenant = _tenant(tenant)
        Strategy.parse(strategy)
        items = [paths] if isinstance(paths, (str, Path)) else list(paths)
        scopes = None
        if sync:
            from es_rag.ingest.sync import sync_scopes

            scopes = sync_scopes(items, base_dir)  # a file is refused before anything is read
        self._check_open()
        report = IngestReport()
        stream = iter_files(  # read lazily, one file at a time
            items,
            tenant_id=tenant,
            acl=_groups(acl) or ("public",),
            report=report,
            base_dir=base_dir,
            source_id=source_id,
            ignore_file=ignore_file,
            exclude_dirs=[self._index_dir] if self._index_dir is not None else [],
            schema=self._settings.index.metadata_schema(),
            meta=meta,
            updated_from_mtime=updated_from_mtime,
        )
        first = next(stream, None)
        if first is None and scopes is None:
            return report
        docs = itertools.chain([] if first is None else [first], stream)
        chunking = {"strategy": strategy, "contextual": contextual, "parent_max_tokens": parent_max_tokens}
        return self._ingest(docs, report, tenant=tenant, scopes=scopes, chunking=chunking)

    def ingest_texts(
        self,
        texts: Mapping[str, str] | Iterable[tuple[str, str]],
        *,
        tenant: str,
        acl: Sequence[str] | str = (),
        format: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> IngestReport:
        """Index documents held in memory, ``{source_id: text}`` or ``(source_id, text)`` pairs, like files: the
        version is a digest of the text, an empty text or a repeated id is reported in ``report.failed``.

        Args:
            texts: The documents.
            tenant: Tenant written into every chunk (required).
            acl: Groups allowed to read them (default ``public``).
            format: ``markdown``, ``rst``, ``plain`` or ``html``; None: each id's suffix says, as for files
                (``page.html`` is HTML, ``notes.txt`` plain text), else ``markdown``.
            meta: Metadata of every document (validated like ``es-rag ingest --meta``).

        Raises:
            ConfigError: A missing tenant or an unknown format.
        """
        from es_rag.ingest import IngestReport, SourceDoc, default_version
        from es_rag.ingest.sources import JSONL_FORMATS, format_of

        tenant = _tenant(tenant)
        if format is not None and format not in JSONL_FORMATS:
            raise ConfigError(f"format: invalid value {format!r}; valid values: {', '.join(JSONL_FORMATS)}")
        groups = _groups(acl) or ("public",)
        pairs = list(texts.items()) if isinstance(texts, Mapping) else list(texts)
        report = IngestReport()
        docs: list[SourceDoc] = []
        seen: set[str] = set()
        for i, pair in enumerate(pairs):
            try:
                if not isinstance(pair, tuple) or len(pair) != 2:
                    raise InputError(f"texts[{i}]", "pair", "expected a (source_id, text) pair")
                sid, text = pair
                if not isinstance(sid, str) or not sid.strip():
                    raise InputError(f"texts[{i}]", "source_id", "missing or empty")
                if not isinstance(text, str) or not text.strip():
                    raise InputError(sid, "text", "missing, empty or not a string")
                if sid in seen:
                    raise InputError(sid, "source_id", "given twice in one call")
            except InputError as err:
                report.failed.append(err.as_dict())
                continue
            seen.add(sid)
            docs.append(
                SourceDoc(
                    source_id=sid,
                    text=text,
                    tenant_id=tenant,
                    acl=groups,
                    source_version=default_version(text),
                    fmt=format or format_of(sid),
                    meta=dict(meta or {}),
                )
            )
        self._check_open()
        if not docs:
            return report
        return self._ingest(docs, report, tenant=tenant, scopes=None, chunking={})

    def _ingest(
        self,
        docs: Iterable[SourceDoc],
        report: IngestReport,
        *,
        tenant: str,
        scopes: list[SyncScope] | None,
        chunking: Mapping[str, Any],
    ) -> IngestReport:
        from es_rag.ingest import ingest_sources

        def work(backend: Any) -> IngestReport:
            # saved by _write (an embedded folder); Elasticsearch has nothing to flush
            return ingest_sources(
                docs,
                backend=backend,
                settings=self._settings,
                embedder=self._loaded_embedder,
                report=report,
                tenant_id=tenant,
                chunking=chunking,
                sync_scopes=scopes,
                on_cluster=self._on_cluster,
                listeners=self._listeners(),
            )

        return self._write(work)

    def delete_source(self, source_id: str, *, tenant: str) -> dict[str, Any]:
        """Delete every chunk, parent and registry entry of one of the tenant's sources (all versions), as
        ``es-rag delete-source``; loads no model.

        Args:
            source_id: The source.
            tenant: Its tenant (required).

        Returns:
            ``{"deleted": n, "remaining": {"chunks": c, "parents": p}, "conflicts": k, "failures": [...]}``;
            ``deleted == 0`` with nothing remaining means the tenant has no such source.
        """
        from es_rag.ingest import delete_source

        tenant = _tenant(tenant)
        if not isinstance(source_id, str) or not source_id.strip():
            raise ConfigError(f"source_id: must be a non-empty string, got {source_id!r}")
        return self._write(lambda backend: delete_source(backend, tenant, source_id, listeners=self._listeners()))
