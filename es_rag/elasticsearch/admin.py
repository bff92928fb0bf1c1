"""Cluster administration: ``setup`` (preflight, then idempotent PUTs of the assets and the indices) and
``doctor`` (the probe, the path each stage takes, the text analysis as installed, stale assets)."""

from __future__ import annotations

from typing import Any

from es_rag.elasticsearch.assets import (
    ASSET_VERSION,
    KUROMOJI_PLUGIN,
    AnalyzerChoice,
    added_fields_request,
    index_creation_requests,
    obsolete_asset_paths,
    registry_mapping_request,
    resolve_analyzer,
    setup_requests,
    template_conflicts,
)
from es_rag.elasticsearch.cluster import ClusterClient
from es_rag.elasticsearch.probe import (
    UNKNOWN_VERSION,
    Capabilities,
    inference_endpoint_problems,
    semantic_text_support,
    version_tuple,
)
from es_rag.elasticsearch.responses import error_reason
from es_rag.errors import ClusterError, ConfigError
from es_rag.es_request import EsRequest
from es_rag.languages import needs_plugins, resolve_languages
from es_rag.query import native_blocker
from es_rag.settings import SEMANTIC_FIELD, Analyzer, Settings, VectorMode


def analysis_report(caps: Capabilities, settings: Settings) -> dict[str, Any]:
    """The ``analysis`` section of ``doctor``: analyzer configured (``auto`` resolved as ``setup`` would),
    whether kuromoji is present, the analyzer of every text field as installed, and whether they agree.

    Args:
        caps: The probe.
        settings: The configured analyzer and corpus language.
    """
    choice = resolve_analyzer(settings.index.analyzer, plugins=caps.analysis_plugins, language=settings.index.language)
    configured = choice.analyzer.value
    installed = caps.installed_analyzers
    main = sorted({v for fields in installed.values() for k, v in fields.items() if "." not in k})
    if not installed:
        check = "text analysis not installed: run es-rag setup"
    elif main == [f"{configured} (es_rag_text)"]:
        check = f"ok: every main text field uses {configured}"
    else:
        check = (
            f"MISMATCH: installed {main}, configured {configured}; a changed analyzer needs es-rag setup "
            "and a new index (reindex): index templates apply at index creation"
        )
    return {
        "configured": configured,
        "configured_as": settings.index.analyzer.value,
        "reason": choice.reason,
        "kuromoji_plugin": "installed" if KUROMOJI_PLUGIN in caps.analysis_plugins else "not installed",
        "installed": installed,
        "check": check,
    }


def _component_meta(got: Any) -> dict[str, Any]:
    """``_meta`` of a ``GET _component_template/<name>`` answer ({} when missing)."""
    if not isinstance(got, dict):
        return {}
    items = got.get("component_templates") or []
    meta = (items[0].get("component_template") or {}).get("_meta") if items else None
    return meta if isinstance(meta, dict) else {}


class ClusterAdmin(ClusterClient):
    """Installs es_rag's assets (:meth:`setup`, after :meth:`preflight`) and reports what the cluster supports and
    which path each stage takes (:meth:`doctor`)."""

    def resolve_analyzer(self) -> AnalyzerChoice:
        """The analyzer the templates get on this cluster: ``auto`` resolved against the probed plugins and
        the ``language`` setting (:func:`es_rag.elasticsearch.assets.resolve_analyzer`), any other value as
        configured."""
        index = self.settings.index
        return resolve_analyzer(index.analyzer, plugins=self.probe().analysis_plugins, language=index.language)

    def doctor(self) -> dict[str, Any]:
        """The probe plus the path each stage will take, and the text analysis as installed (``analyzer=auto``
        resolved as ``setup`` would)."""
        caps = self.probe()
        s = self.settings
        try:
            fusion = self.fusion_path()
            if fusion == "native":
                version = version_tuple(caps.version) if caps.version != UNKNOWN_VERSION else None
                blocker = native_blocker(s, version)
                fusion = (
                    f"client ({blocker})"
                    if blocker
                    else f"native {s.fusion.method} retriever ({caps.native_rrf_reason})"
                )
            else:
                fusion = f"client {s.fusion.method} over _msearch ({caps.native_rrf_reason})"
        except ConfigError as exc:
            fusion = f"ERROR: {exc}"
        expected = ASSET_VERSION
        stale = {k: v for k, v in caps.installed_assets.items() if v != expected}
        semantic = semantic_text_support(caps, s.encoder.inference_id)
        mode = s.encoder.vectors
        if mode is VectorMode.SEMANTIC_TEXT:
            vectors = (
                f"elasticsearch semantic_text field '{SEMANTIC_FIELD}' ({s.encoder.inference_id}): server-side chunking"
            )
            vectors += f" {s.encoder.semantic_chunking_settings() or 'as the endpoint'} and embedding of whole sections"
            knn = f"elasticsearch semantic query on '{SEMANTIC_FIELD}' (query embedded by {s.encoder.inference_id})"
            if not semantic["usable"]:
                vectors += f" -- NOT USABLE: {semantic['reason']}"
        elif mode is VectorMode.INFERENCE:
            vectors = f"elasticsearch inference processor ({s.encoder.inference_id}) on contextual_text else text"
            knn = f"elasticsearch knn (query embedded client-side by {s.encoder.model})"
            if s.encoder.inference_id not in caps.inference_endpoints:
                vectors += f" -- inference endpoint {s.encoder.inference_id!r} not found on the cluster"
        else:
            vectors = f"client-side sentence-transformers ({s.encoder.model})"
            knn = "elasticsearch knn"
        privileges = self.privileges()
        try:
            setup_check = "; ".join(self.preflight()) or "ok: nothing would be refused"
        except ClusterError as exc:
            setup_check = f"not checked: {exc}"
        analysis = analysis_report(caps, s)
        analyzer = str(analysis["configured"])
        if analyzer == "kuromoji" and KUROMOJI_PLUGIN not in caps.analysis_plugins:
            analyzer += f" -- MISSING plugin {KUROMOJI_PLUGIN}: use --analyzer cjk or install the plugin"
        return {
            "cluster": caps.to_dict(),
            "privileges": privileges,
            "setup_preflight": setup_check,
            "assets": {"expected_version": expected, "missing_or_stale": stale},
            "analysis": analysis,
            "semantic_text": semantic,
            "paths": {
                "vector_mode": mode.value,
                "chunking": (
                    "python (sections) + elasticsearch semantic_text (chunks)"
                    if mode is VectorMode.SEMANTIC_TEXT
                    else "python"
                ),
                "vectors": vectors,
                "bm25": f"elasticsearch multi_match (analyzer {analyzer})",
                "knn": knn,
                "fusion": fusion,
                "rerank": f"python cross-encoder ({s.rerank.model})" if s.rerank.model else "disabled",
                "select/pack": "python (mmr, per-source cap, token budget)",
            },
            # the device of the client-side models (query embedding, cross-encoder); resolved when they load
            "device": {"requested": f"{s.encoder.device} {s.encoder.precision}"},
        }

    # -- setup --------------------------------------------------------------------------------
    def setup(self, *, create_indices: bool = True) -> list[dict[str, Any]]:
        """Install pipelines, templates and the stored search template (idempotent PUTs) and create the
        indices if absent. ``analyzer=auto`` is resolved against the cluster first (:meth:`resolve_analyzer`).

        Args:
            create_indices: Also create the chunk and parent indices.
        """
        settings = self.settings
        if settings.index.analyzer is Analyzer.AUTO:  # the probe is needed only to resolve auto
            settings = settings.replace(analyzer=self.resolve_analyzer().analyzer)
        if needs_plugins(settings.index.languages):  # ja -> ja:kuromoji with the plugin, else ja:cjk
            plugins = self.probe().analysis_plugins
            settings = settings.replace(languages=resolve_languages(settings.index.languages, plugins=plugins))
        problems = self.preflight()
        if problems:
            raise ConfigError("setup would be refused, nothing was sent: " + "; ".join(problems))
        results = []
        # the mapping's rescore_vector depends on the version (probed only for a quantized index that rescores)
        version = self.version() if settings.index.vector_rescore() is not None else None
        for req in setup_requests(settings, version=version):
            resp = self.send(req)
            results.append({"request": f"{req.method} {req.path}", "acknowledged": resp.get("acknowledged")})
        for path in obsolete_asset_paths(settings):  # replaced by the self-contained components (asset version 6)
            got = self.send(EsRequest("GET", path), ignore=(403, 404))
            if _component_meta(got).get("managed_by") == "es_rag":
                self.send(EsRequest("DELETE", path))
                results.append({"request": f"DELETE {path}", "acknowledged": "obsolete es_rag component removed"})
        if create_indices:
            existed = False
            for req in index_creation_requests(self.settings):
                if self._index_exists(req.path):
                    existed = True
                    results.append({"request": f"{req.method} {req.path}", "acknowledged": "exists"})
                    update = None  # the fields added since it was created
                    if req.path == self.settings.index_name("versions"):
                        update = registry_mapping_request(self.settings)
                    elif req.path in (self.settings.chunk_index, self.settings.parent_index):
                        kind = "chunks" if req.path == self.settings.chunk_index else "parents"
                        update = added_fields_request(self.settings, kind)
                    if update is not None:
                        resp = self.send(update)
                        results.append(
                            {"request": f"{update.method} {update.path}", "acknowledged": resp.get("acknowledged")}
                        )
                    continue
                resp = self.send(req, ignore=(400,))
                if isinstance(resp, dict) and "error" in resp:
                    if "resource_already_exists" in str(resp):
                        results.append({"request": f"{req.method} {req.path}", "acknowledged": "exists"})
                        continue
                    raise ClusterError(f"creating {req.path} failed: {error_reason(resp)}", status=400, response=resp)
                results.append({"request": f"{req.method} {req.path}", "acknowledged": resp.get("acknowledged")})
            if existed and not self.settings.index.generation:  # an upgrade: generations kept for a rollback too
                results += self._update_other_generations()
        self._caps = None  # installed asset versions changed: the next probe must look again
        return results

    def _update_other_generations(self) -> list[dict[str, Any]]:
        """The fields of later asset versions, added to every generation's indices, not only to those behind the
        names: a generation kept for ``reindex --rollback`` is served again as it is, and a strict mapping without
        them would refuse the chunks written after the rollback (``PUT <index>/_mapping`` per index,
        ``MapperService.merge``; the fields it has already are the same, so nothing else changes)."""
        from es_rag.elasticsearch.aliases import layout_request, parse_layout

        request = layout_request(self.settings)
        try:
            layout = parse_layout(self.send(request), self.settings)
        except ConfigError as exc:  # a name over several indices, not made by es_rag: its indices are left alone
            return [
                {"request": f"{request.method} {request.path}", "acknowledged": f"other generations not updated: {exc}"}
            ]
        live = layout.live_generation(self.settings)
        results = []
        for generation, roles in sorted(layout.generations.items()):
            if generation == live:
                continue  # updated through the names above
            settings = self.settings.replace(index_generation=generation)
            for role in sorted(roles):
                update = (
                    registry_mapping_request(settings) if role == "versions" else added_fields_request(settings, role)
                )
                resp = self.send(update)
                results.append({"request": f"{update.method} {update.path}", "acknowledged": resp.get("acknowledged")})
        return results

    def preflight(self) -> list[str]:
        """What a cluster would refuse of this setup, found before anything is sent (setup then stops at once
        instead of half way): an index template at priority 500 whose patterns overlap es_rag's (Elasticsearch
        refuses overlapping templates of equal priority, ``MetadataIndexTemplateService.findConflictingV2Templates``),
        and an inference endpoint that is missing, of the wrong task type, or of other dimensions than
        ``vector_dims`` (the ``dense_vector`` mapping would refuse every embedding).
        """
        s = self.settings
        problems = template_conflicts(s, self.send(EsRequest("GET", "_index_template"), ignore=(403, 404)))
        if s.encoder.vectors is VectorMode.INFERENCE:
            problems += inference_endpoint_problems(self.probe(), s)
        elif s.encoder.vectors is VectorMode.SEMANTIC_TEXT:
            support = semantic_text_support(self.probe(), s.encoder.inference_id)
            if not support["usable"]:
                problems.append(f"vector_mode semantic_text: {support['reason']}")
        return problems

    def _index_exists(self, name: str) -> bool:
        # The client answers HEAD with a boolean body (404 is "absent", not an error).
        return self.send(EsRequest("HEAD", name)) is True
