"""Elasticsearch assets (index templates, ingest pipelines) rendered from the jinja2 files that
ship with the package, and the idempotent setup requests that install them.

The file name is the asset's id: ``index_templates/component-chunk-mappings.json.j2`` installs as
component template ``<prefix>-chunk-mappings``. Every asset carries ``_meta.version``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from es_rag.config import Settings
from es_rag.errors import EsRagError
from es_rag.requests import EsRequest

ASSET_VERSION = 3
"""Bumped whenever any asset body changes; ``doctor`` compares it with the installed ``_meta.version``."""


def asset_root() -> Path:
    """Directory holding ``index_templates/`` and ``ingest_pipelines/`` (wheel or source checkout)."""
    packaged = Path(__file__).parent / "assets"
    if (packaged / "index_templates").is_dir():
        return packaged
    source = Path(__file__).resolve().parent.parent
    if (source / "index_templates").is_dir():
        return source
    raise EsRagError(f"es_rag assets not found under {packaged} or {source}: broken installation")


@cache
def _env(root: str) -> jinja2.Environment:
    loader = jinja2.FileSystemLoader([str(Path(root) / "index_templates"), str(Path(root) / "ingest_pipelines")])
    return jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
    )


def _context(settings: Settings) -> dict[str, Any]:
    return {
        "index_prefix": settings.index_prefix,
        "vector_dims": settings.vector_dims,
        "similarity": settings.similarity.value,
        "analyzer": settings.analyzer.value,
        "inference_id": settings.inference_id,
        "pipeline_id": settings.pipeline_id,
        "asset_version": ASSET_VERSION,
    }


def render_asset(folder: str, name: str, settings: Settings) -> dict[str, Any]:
    """Render one asset file into its JSON body.

    Args:
        folder: ``index_templates`` or ``ingest_pipelines``.
        name: File name without ``.json.j2``.
        settings: Values the template depends on.
    """
    root = asset_root()
    path = root / folder / f"{name}.json.j2"
    if not path.is_file():
        raise EsRagError(f"unknown asset {folder}/{name}")
    text = _env(str(root)).get_template(path.name).render(**_context(settings))
    try:
        body: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EsRagError(f"asset {folder}/{path.name} renders to invalid JSON: {exc}") from exc
    return body


def setup_requests(settings: Settings) -> list[EsRequest]:
    """Every request ``es-rag setup`` sends, in order; each is an idempotent PUT.

    Args:
        settings: Prefix, dims, similarity, analyzer and inference endpoint to render with.
    """
    p = settings.index_prefix
    reqs = [
        EsRequest(
            "PUT",
            f"_ingest/pipeline/{settings.pipeline_id}",
            render_asset("ingest_pipelines", "chunks-inference" if settings.inference_id else "chunks", settings),
        ),
        EsRequest("PUT", f"_ingest/pipeline/{p}-parents", render_asset("ingest_pipelines", "parents", settings)),
        EsRequest(
            "PUT",
            f"_component_template/{p}-chunk-settings",
            render_asset("index_templates", "component-chunk-settings", settings),
        ),
        EsRequest(
            "PUT",
            f"_component_template/{p}-chunk-mappings",
            render_asset("index_templates", "component-chunk-mappings", settings),
        ),
        EsRequest(
            "PUT",
            f"_component_template/{p}-parent-mappings",
            render_asset("index_templates", "component-parent-mappings", settings),
        ),
        EsRequest("PUT", f"_index_template/{p}-chunks", render_asset("index_templates", "index-chunks", settings)),
        EsRequest("PUT", f"_index_template/{p}-parents", render_asset("index_templates", "index-parents", settings)),
        # version registry (es_rag.versioning): one document per tenant, read by every retriever's terms lookup
        EsRequest("PUT", f"_index_template/{p}-versions", render_asset("index_templates", "index-versions", settings)),
    ]
    return reqs


def index_creation_requests(settings: Settings) -> list[EsRequest]:
    """Create the chunk, parent and version-registry indices (bodies empty: the index templates supply
    everything).

    Args:
        settings: Gives the index names.
    """
    return [
        EsRequest("PUT", settings.chunk_index, {}),
        EsRequest("PUT", settings.parent_index, {}),
        EsRequest("PUT", f"{settings.index_prefix}-versions", {}),
    ]


def search_template_source() -> str:
    """The mustache source of the stored hybrid search template (``search_templates/hybrid.mustache``)."""
    path = asset_root() / "search_templates" / "hybrid.mustache"
    if not path.is_file():
        raise EsRagError(f"search template asset missing: {path}: broken installation")
    return path.read_text(encoding="utf-8")


def search_template_requests(settings: Settings) -> list[EsRequest]:
    """``PUT _scripts/<prefix>-hybrid``: the stored mustache template apps and Kibana call through
    ``_search/template`` (native ``rrf``; needs an Enterprise/trial licence like the rrf retriever).

    Args:
        settings: Gives the prefix (template id).
    """
    body = {"script": {"lang": "mustache", "source": search_template_source()}}
    return [EsRequest("PUT", f"_scripts/{settings.index_prefix}-hybrid", body)]
