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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from es_rag.client.common import DEFAULT_ASYNC_WORKERS, _ReadWriteLock, _settings, _telemetry, _workers
from es_rag.client.reads import ClientReads
from es_rag.client.writes import ClientWrites
from es_rag.errors import ConfigError, EsRagError
from es_rag.settings import Settings

if TYPE_CHECKING:
    from es_rag.encoders.embedder import LocalEmbedder
    from es_rag.pipeline import RagPipeline
    from es_rag.telemetry import StageTelemetry

T = TypeVar("T")


class RagClient(ClientReads, ClientWrites):
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
