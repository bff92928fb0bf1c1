"""Elasticsearch backend: probes the cluster, installs assets, bulk-indexes and searches.

Bodies come from :mod:`es_rag.elasticsearch.bodies` and :mod:`es_rag.elasticsearch.assets` (pure
functions); this module only sends them and reads the answers. The probe decides the fusion path:
the native ``rrf`` retriever when the licence allows it (Enterprise or trial, Elasticsearch >= 8.16),
else client-side RRF over one ``_msearch`` round trip. A licence error at query time switches to the client path and
says so.

The read paths are request flows (:data:`~es_rag.elasticsearch.cluster.Flow`): ``retrieve`` drives them on a
synchronous client, ``aretrieve`` (and ``asnapshot_versions``, ``aget_parents``, ``aget_neighbors``) on an
``AsyncElasticsearch``, so both send byte-identical bodies and read the answers with the same code."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from es_rag.backend import EmbeddingState, IndexReport, Retrieval, validate_chunk_source
from es_rag.elasticsearch.admin import ClusterAdmin
from es_rag.elasticsearch.aliases import embedding_versions_request, parse_embedding_versions
from es_rag.elasticsearch.bodies import count_request, neighbors_request, parents_request, search_requests
from es_rag.elasticsearch.bulk import BULK_MAX_BACKOFF as BULK_MAX_BACKOFF  # re-exported
from es_rag.elasticsearch.bulk import BULK_MAX_RETRIES as BULK_MAX_RETRIES
from es_rag.elasticsearch.bulk import bulk_index
from es_rag.elasticsearch.cluster import TRANSPORT_RETRY_STATUSES, Flow, Send
from es_rag.elasticsearch.probe import UNKNOWN_VERSION, Capabilities, version_tuple
from es_rag.elasticsearch.responses import (
    error_reason,
    hit_from_es,
    server_chunk_note,
)
from es_rag.elasticsearch.versions import EsVersionStore
from es_rag.elasticsearch.wrappers import (
    MONITOR_INFERENCE_MISSING,
    diversify_blocker_of,
    diversify_spec,
    endpoint_score,
    es_rerank_blocker_of,
    hit_indices,
    lacks_monitor_inference,
    refused_wrapper,
)
from es_rag.errors import BulkStopped, ClusterError, ConfigError, InputError, LicenseError
from es_rag.es_request import EsRequest
from es_rag.filters import SearchFilter
from es_rag.flows import adrive, drive
from es_rag.query import plan_search, semantic_mode
from es_rag.records import CHANNEL_SCORE_FIELD, Chunk, Hit
from es_rag.settings import MmrPath, Settings, VectorMode
from es_rag.versions.registry import VersionSnapshot, registry_get_request, registry_index


class ElasticsearchBackend(ClusterAdmin):
    """The :class:`~es_rag.backend.SearchBackend` on Elasticsearch: bulk-indexes through the ingest pipelines, runs
    the search plan (:mod:`es_rag.query`) with the hard filter in every retriever, reads parents and neighbours.
    Connection, probe and transport: :class:`~es_rag.elasticsearch.cluster.ClusterClient`; setup and doctor:
    :class:`~es_rag.elasticsearch.admin.ClusterAdmin`.
    """

    name = "elasticsearch"

    # -- writes -------------------------------------------------------------------------------
    def _actions(
        self, chunks: Iterable[Chunk], index: str, include_vector: bool, failed: list[dict[str, str]]
    ) -> Iterable[dict[str, Any]]:
        for c in chunks:
            doc = c.to_source(include_vector=include_vector)
            if c.source_path is not None:
                doc["source_path"] = c.source_path
            try:
                validate_chunk_source(doc, document=c.source_path or c.source_id or c.chunk_id)
            except InputError as err:
                failed.append(err.as_dict())
                continue
            yield {"_op_type": "index", "_index": index, "_id": c.chunk_id, "_source": doc}

    def index(self, chunks: Sequence[Chunk], parents: Sequence[Chunk] = ()) -> IndexReport:
        """Bulk-index children and parents through the ingest pipelines (:func:`es_rag.elasticsearch.bulk.bulk_index`:
        429s resent with a jittered, doubling wait; ``settings.ingest.bulk_concurrency`` workers; a 401, 403 or 413
        stops the run after the first response that says it, with the count of what landed before).

        Args:
            chunks: Child chunks (with vectors unless the cluster embeds).
            parents: Parent sections.

        Raises:
            BulkStopped: A non-retryable refusal, with the count this call indexed (every worker's).
            BulkUnreachable: A transport failure, with the same count.
        """
        report = IndexReport()
        self._embedding = None  # the vectors written may change what the index holds
        server_embeds = self.settings.encoder.vectors is not VectorMode.CLIENT
        client = self.client.options(
            retry_on_status=TRANSPORT_RETRY_STATUSES, request_timeout=self.settings.connection.bulk_timeout
        )
        for docs, index in ((chunks, self.settings.chunk_index), (parents, self.settings.parent_index)):
            if not docs:
                continue
            by_id = {c.chunk_id: c for c in docs}

            def document_of(doc_id: str, by_id: dict[str, Chunk] = by_id) -> str:
                chunk = by_id.get(doc_id)
                return (chunk.source_path or chunk.source_id) if chunk else doc_id

            actions = list(self._actions(docs, index, not server_embeds, report.failed))
            try:
                indexed, failed = bulk_index(
                    client,
                    actions,
                    index=index,
                    concurrency=self.settings.ingest.bulk_concurrency,
                    document_of=document_of,
                    url=self.url,
                )
            except BulkStopped as exc:
                raise exc.with_total(report.indexed + exc.indexed) from exc.__cause__
            report.indexed += indexed
            report.failed.extend(failed)
        return report

    # -- reads --------------------------------------------------------------------------------
    def snapshot_versions(self, flt: SearchFilter) -> SearchFilter:
        """``flt`` with a snapshot of the tenant's active-version snapshot: the registry document read once (a
        real-time GET) and its hidden keys inlined (:mod:`es_rag.versions.registry`), so every request built from the
        returned filter serves the same committed version of each source.
        :meth:`es_rag.pipeline.RagPipeline.search` calls it once per search, before any other backend call;
        the backend sends the filter it is given.

        Args:
            flt: The caller's hard filter.

        Raises:
            ClusterError: The registry index is missing (``es-rag setup`` creates it) or unreadable.
        """
        return drive(self._snapshot_flow(flt), self.send_step)

    async def asnapshot_versions(self, flt: SearchFilter) -> SearchFilter:
        """:meth:`snapshot_versions` on the ``AsyncElasticsearch`` client (the same request).

        Args:
            flt: The caller's hard filter.
        """
        return await adrive(self._snapshot_flow(flt), self.asend_step)

    def _snapshot_flow(self, flt: SearchFilter) -> Flow[SearchFilter]:
        if flt.versions is not None:  # already a snapshot: a search reads the registry once
            return flt
        resp = yield Send(registry_get_request(self.settings, flt.tenant_id, snapshot=True), ignore=(404,))
        if isinstance(resp, dict) and "error" in resp:
            raise ClusterError(
                f"version registry {registry_index(self.settings)} cannot be read: {error_reason(resp)} "
                "(run es-rag setup)",
                status=404,
                response=resp,
            )
        found = isinstance(resp, dict) and resp.get("found")
        return flt.with_versions(VersionSnapshot.from_doc(flt.tenant_id, resp.get("_source") if found else None))

    def embedding_state(self, refresh: bool = False) -> EmbeddingState:
        """Which ``embedding_version`` values the chunk index holds: one ``size: 0`` search with ``terms`` on
        ``embedding_version`` and ``_index`` (:func:`es_rag.elasticsearch.aliases.embedding_versions_request`), read
        once and cached; the pipeline reads it again when hits come from an index it has not checked (an alias
        swapped to another generation). In vector mode ``inference`` the endpoint's ``model_id`` comes from the probe.

        Args:
            refresh: Read again.
        """
        state = self._embedding
        if state is None or refresh:
            resp = self.send(embedding_versions_request(self.settings))
            versions, unversioned, indices = parse_embedding_versions(resp)
            endpoint_model = None
            inference_id = self.settings.encoder.inference_id
            if self.settings.encoder.vectors is VectorMode.INFERENCE and inference_id:
                info = self.probe().inference_endpoint_info.get(inference_id) or {}
                endpoint_model = info.get("model_id") or None
            state = EmbeddingState(versions, unversioned, indices or (self.settings.chunk_index,), endpoint_model)
            self._embedding = state
        return state

    async def aembedding_state(self, refresh: bool = False) -> EmbeddingState:
        """:meth:`embedding_state` on the ``AsyncElasticsearch`` client (the same request, the same cache).

        Args:
            refresh: Read again.
        """
        state = self._embedding
        if state is None or refresh:
            resp = await self.asend(embedding_versions_request(self.settings))
            versions, unversioned, indices = parse_embedding_versions(resp)
            endpoint_model = None
            inference_id = self.settings.encoder.inference_id
            if self.settings.encoder.vectors is VectorMode.INFERENCE and inference_id:
                info = (await self.aprobe()).inference_endpoint_info.get(inference_id) or {}
                endpoint_model = info.get("model_id") or None
            state = EmbeddingState(versions, unversioned, indices or (self.settings.chunk_index,), endpoint_model)
            self._embedding = state
        return state

    def doctor(self) -> dict[str, Any]:
        """:meth:`ClusterAdmin.doctor` plus the ``index`` section (:meth:`index_report`)."""
        report = super().doctor()
        report["index"] = self.index_report()
        return report

    def index_report(self) -> dict[str, Any]:
        """Which generation the names serve (blue-green, :mod:`es_rag.elasticsearch.aliases`) and whether its vectors
        come from the configured query encoder (:func:`es_rag.backend.check_embedding`, the check every search runs;
        the model is located, not loaded)."""
        from es_rag.backend import check_embedding
        from es_rag.elasticsearch.aliases import layout_request, legacy_refusal, parse_layout
        from es_rag.encoders.embedder import resolve_model_path
        from es_rag.errors import EmbeddingMismatch

        out: dict[str, Any] = {}
        try:
            layout = parse_layout(self.send(layout_request(self.settings)), self.settings)
            out["live_generation"] = layout.live_generation(self.settings) or "none: run es-rag setup"
            out["generations"] = (["legacy"] if layout.legacy else []) + sorted(layout.generations)
            out["layout"] = (
                "concrete indices (before blue-green): the first es-rag reindex needs --migrate"
                if legacy_refusal(self.settings, layout)
                else "aliases (blue-green)"
            )
        except (ClusterError, ConfigError) as exc:
            out["layout"] = f"unreadable: {exc}"
        version = resolve_model_path(self.settings.encoder.model)[1]
        try:
            state = self.embedding_state(refresh=True)
            out["embedding_versions"] = state.versions
            out["unversioned_chunks"] = state.unversioned
            warning = check_embedding(state, self.settings, version)
            if self.settings.encoder.vectors is VectorMode.SEMANTIC_TEXT:
                out["embedding_check"] = "not needed: semantic_text embeds documents and queries with one endpoint"
            else:
                out["embedding_check"] = f"warning: {warning}" if warning else f"ok: queries embedded by {version}"
        except EmbeddingMismatch as exc:
            out["embedding_check"] = f"MISMATCH: {exc}"
        except ClusterError as exc:
            out["embedding_check"] = f"not checked: {exc}"
        return out

    def version_store(self) -> EsVersionStore:
        """Version switches and source deletes on this cluster (the registry index and ``_delete_by_query``)."""
        return EsVersionStore(self)

    def retrieve(
        self, query_text: str, query_vector: np.ndarray | None, flt: SearchFilter, settings: Settings
    ) -> Retrieval:
        """Native rrf (one ``_search``) or client-side channels (one ``_msearch``) with the same filters.

        Args:
            query_text: The query.
            query_vector: Its embedding, or None for BM25 only.
            flt: Hard filter, inside every child retriever.
            settings: Candidate counts and fusion mode.
        """
        return drive(self._retrieve_flow(query_text, query_vector, flt, settings, self.probe()), self.send_step)

    async def aretrieve(
        self, query_text: str, query_vector: np.ndarray | None, flt: SearchFilter, settings: Settings
    ) -> Retrieval:
        """:meth:`retrieve` on the ``AsyncElasticsearch`` client: the same plan, bodies, fallbacks and answer.

        Args:
            query_text: The query.
            query_vector: Its embedding, or None for BM25 only.
            flt: Hard filter, inside every child retriever.
            settings: Candidate counts and fusion mode.
        """
        caps = await self.aprobe()
        return await adrive(self._retrieve_flow(query_text, query_vector, flt, settings, caps), self.asend_step)

    def _retrieve_flow(
        self,
        query_text: str,
        query_vector: np.ndarray | None,
        flt: SearchFilter,
        settings: Settings,
        caps: Capabilities,
    ) -> Flow[Retrieval]:
        version = version_tuple(caps.version) if caps.version != UNKNOWN_VERSION else None
        plan = plan_search(
            query_text,
            query_vector,
            settings,
            native_available=self.fusion_path_of(caps, settings) == "native",
            version=version,
        )
        notes = plan.notes
        method = plan.method
        licence_fallback = False
        native = plan.native
        rerank_why = es_rerank_blocker_of(settings, native, version, caps)
        es_rerank = rerank_why is None
        inference_id = settings.rerank.inference_id
        if native:
            while True:
                mmr_why = diversify_blocker_of(settings, native, es_rerank, query_vector is not None, version, caps)
                diversify = mmr_why is None
                try:
                    resp, reqs = yield from self._search_flow(
                        query_text,
                        query_vector,
                        flt,
                        settings,
                        caps,
                        native=True,
                        channels=plan.channels,
                        es_rerank=es_rerank,
                        diversify=diversify,
                    )
                except (LicenseError, ClusterError) as exc:
                    refused = refused_wrapper(exc, es_rerank=es_rerank, diversify=diversify)
                    if refused is None:
                        if isinstance(exc, LicenseError):
                            licence_fallback = True
                            caps.native_rrf = False
                            caps.native_rrf_reason = f"licence error at query time: {exc}"
                            notes.append(
                                f"native {method} refused by licence (HTTP 403): switched to client-side {method} "
                                "over _msearch for this and every later query"
                            )
                            break
                        # only a 4xx is the cluster refusing this body; a timeout, an unreachable cluster or a 5xx
                        # is raised (re-sending after a timeout doubles the load of a cluster that is already slow)
                        if exc.status is None or not 400 <= exc.status < 500:
                            raise
                        notes.append(
                            f"native {method} refused ({exc}): retried on the client path, one search per channel"
                        )
                        break
                    kind, sticky = refused
                    if kind == "text_similarity_reranker":
                        es_rerank = False
                        rerank_why = (
                            MONITOR_INFERENCE_MISSING
                            if lacks_monitor_inference(exc)
                            else f"Elasticsearch refused text_similarity_reranker {inference_id}: {exc}"
                        )
                        if sticky:
                            caps.es_rerank_refused = rerank_why
                        notes.append(
                            f"{rerank_why}: retried without it, the local cross-encoder reranks"
                            + (" (for this and every later query)" if sticky else "")
                        )
                    else:
                        caps.diversify_refused = f"Elasticsearch refused the diversify retriever: {exc}"
                        notes.append(f"{caps.diversify_refused}: retried without it, client MMR")
                    continue
                hits = resp.get("hits", {}).get("hits", [])
                fused = [hit_from_es(h).replace(fused_score=h.get("_score"), final_score=h.get("_score")) for h in hits]
                if es_rerank:
                    fused = [
                        h.replace(rerank_score=endpoint_score(h.fused_score), reranker_model=f"es:{inference_id}")
                        for h in fused
                    ]
                if semantic_mode(settings):
                    notes.append(server_chunk_note(hits))
                div_spec = diversify_spec(reqs) if diversify else None
                return Retrieval(
                    channels={},
                    fused=fused,
                    path=f"native-{method}",
                    requests=reqs,
                    took_ms={"search": float(resp.get("took", 0))},
                    notes=notes,
                    es_reranker=inference_id if es_rerank else None,
                    es_rerank_fallback=None if es_rerank or inference_id is None else rerank_why,
                    diversified=div_spec,
                    mmr_note=None if settings.select.mmr_path is MmrPath.CLIENT else mmr_why,
                    indices=hit_indices([resp]),
                )
        if inference_id is not None and es_rerank:  # native fusion refused: nothing left to wrap
            rerank_why = "client fusion path: no native retriever to wrap"
        mmr_note = diversify_blocker_of(settings, False, False, query_vector is not None, version, caps)
        resp, reqs = yield from self._search_flow(
            query_text, query_vector, flt, settings, caps, native=False, channels=plan.channels
        )
        channels: dict[str, list[Hit]] = {}
        took: dict[str, float] = {"msearch": float(resp.get("took", 0))}
        errors = []
        responses = resp.get("responses", [])
        if len(responses) != len(plan.channels):
            raise ClusterError(
                f"_msearch returned {len(responses)} responses for {len(plan.channels)} searches", response=resp
            )
        for name, item in zip(plan.channels, responses, strict=True):
            if "error" in item:
                errors.append(f"{name}: {error_reason(item['error'])}")
                notes.append(f"channel {name} failed ({error_reason(item['error'])}): fused without it")
                continue
            attr = CHANNEL_SCORE_FIELD[name]
            channels[name] = [
                hit_from_es(h).replace(**{attr: h.get("_score")}) for h in item.get("hits", {}).get("hits", [])
            ]
            took[name] = float(item.get("took", 0))
        if not channels:
            raise ClusterError("every retrieval channel failed: " + "; ".join(errors), response=resp)
        if semantic_mode(settings) and "dense" in channels:
            # the semantic highlight narrowed the dense hits to their best server-side chunk: give the same
            # document the same span in every channel, so fusion keeps one consistent version of it
            spans = {h.chunk_id: h for h in channels["dense"]}
            for name in channels:
                channels[name] = [
                    h.replace(
                        text=spans[h.chunk_id].text,
                        visible_text=spans[h.chunk_id].visible_text,
                        start_offset=spans[h.chunk_id].start_offset,
                        end_offset=spans[h.chunk_id].end_offset,
                        token_count=spans[h.chunk_id].token_count,
                    )
                    if name != "dense" and h.chunk_id in spans
                    else h
                    for h in channels[name]
                ]
            dense_raw: dict[str, Any] = next(
                (
                    item
                    for n, item in zip(plan.channels, responses, strict=True)
                    if n == "dense" and "error" not in item
                ),
                {},
            )
            notes.append(server_chunk_note(dense_raw.get("hits", {}).get("hits", [])))
        path = f"client-{method}" if len(channels) > 1 else f"{next(iter(channels))}-only"
        return Retrieval(
            channels=channels,
            fused=None,
            path=path,
            requests=reqs,
            took_ms=took,
            notes=notes,
            licence_fallback=licence_fallback,
            es_rerank_fallback=rerank_why if inference_id is not None else None,
            mmr_note=None if settings.select.mmr_path is MmrPath.CLIENT else mmr_note,
            indices=hit_indices(responses),
        )

    def _search_flow(
        self,
        query_text: str,
        query_vector: np.ndarray | None,
        flt: SearchFilter,
        settings: Settings,
        caps: Capabilities,
        *,
        native: bool,
        channels: Sequence[str],
        es_rerank: bool = False,
        diversify: bool = False,
    ) -> Flow[tuple[dict[str, Any], list[EsRequest]]]:
        """Build and send one search (native ``_search`` or client ``_msearch``); returns the response and the
        requests sent. When the version is unknown (no ``monitor`` privilege) the first search sends
        ``_source.exclude_vectors``; a cluster before 9.1 (8.19 on 8.x) refuses it (``Unknown key for a VALUE_BOOLEAN in
        [exclude_vectors].``, the whole request or every ``_msearch`` item), which is learned once and the search
        resent without it."""

        def build() -> list[EsRequest]:
            return search_requests(
                query_text,
                query_vector,
                flt,
                settings,
                native=native,
                vectors_in_source_param=caps.vectors_in_source_param is not False,
                channels=channels,
                es_rerank=es_rerank,
                diversify=diversify,
            )

        reqs = build()
        resp: dict[str, Any] | None
        try:
            resp = dict((yield Send(reqs[0])))
        except ClusterError as exc:
            if not (caps.vectors_in_source_param is None and exc.status == 400 and "exclude_vectors" in str(exc)):
                raise
            resp = None
        if caps.vectors_in_source_param is None:
            items = [] if resp is None else resp.get("responses", [])
            refused = resp is None or any("exclude_vectors" in str(i.get("error", "")) for i in items)
            caps.vectors_in_source_param = not refused
            if refused:
                reqs = build()
                resp = dict((yield Send(reqs[0])))
        assert resp is not None
        return resp, reqs

    def get_parents(self, parent_ids: Sequence[str], flt: SearchFilter) -> dict[str, Hit]:
        """Parents by id under the same hard filter (a parent of another tenant is never returned).

        Args:
            parent_ids: Parent chunk ids.
            flt: Hard filter.
        """
        return drive(self._parents_flow(parent_ids, flt), self.send_step)

    async def aget_parents(self, parent_ids: Sequence[str], flt: SearchFilter) -> dict[str, Hit]:
        """:meth:`get_parents` on the ``AsyncElasticsearch`` client.

        Args:
            parent_ids: Parent chunk ids.
            flt: Hard filter.
        """
        return await adrive(self._parents_flow(parent_ids, flt), self.asend_step)

    def _parents_flow(self, parent_ids: Sequence[str], flt: SearchFilter) -> Flow[dict[str, Hit]]:
        if not parent_ids:
            return {}
        resp = yield Send(parents_request(parent_ids, flt, self.settings))
        return {h["_id"]: hit_from_es(h) for h in resp.get("hits", {}).get("hits", [])}

    def get_neighbors(self, anchors: Sequence[Hit], flt: SearchFilter, window: int) -> dict[str, list[Hit]]:
        """Up to ``window`` children before and after each anchor (same source, version and parent),
        under the same hard filter, in document order; one ``_msearch``.

        Args:
            anchors: Selected child hits.
            flt: Hard filter.
            window: Children per side.
        """
        return drive(self._neighbors_flow(anchors, flt, window), self.send_step)

    async def aget_neighbors(self, anchors: Sequence[Hit], flt: SearchFilter, window: int) -> dict[str, list[Hit]]:
        """:meth:`get_neighbors` on the ``AsyncElasticsearch`` client.

        Args:
            anchors: Selected child hits.
            flt: Hard filter.
            window: Children per side.
        """
        return await adrive(self._neighbors_flow(anchors, flt, window), self.asend_step)

    def _neighbors_flow(self, anchors: Sequence[Hit], flt: SearchFilter, window: int) -> Flow[dict[str, list[Hit]]]:
        anchors = [a for a in anchors if a.start_offset is not None]
        if not anchors or window < 1:
            return {}
        resp = yield Send(neighbors_request(anchors, flt, self.settings, window=window))
        responses = resp.get("responses", [])
        if len(responses) != 2 * len(anchors):
            raise ClusterError(f"_msearch returned {len(responses)} responses for {2 * len(anchors)} searches")
        out: dict[str, list[Hit]] = {}
        for i, a in enumerate(anchors):
            before, after = responses[2 * i], responses[2 * i + 1]
            for item in (before, after):
                if "error" in item:
                    raise ClusterError(f"neighbour search failed: {error_reason(item['error'])}", response=item)
            prev = [hit_from_es(h) for h in before.get("hits", {}).get("hits", [])][::-1]
            nxt = [hit_from_es(h) for h in after.get("hits", {}).get("hits", [])]
            out[a.chunk_id] = prev + nxt
        return out

    def flush(self) -> None:
        """Nothing to do: every bulk has returned, and the version switch refreshes before it commits."""

    def count(self, flt: SearchFilter | None = None) -> int:
        """Number of child chunks in the chunk index (only those ``flt`` allows, when given).

        Args:
            flt: Optional hard filter; without it every tenant's chunks are counted (admin use).
        """
        resp = self.send(count_request(flt, self.settings))
        return int(resp.get("count", 0))
