"""Elasticsearch assets (index templates, ingest pipelines, the stored search template) rendered from
the files that ship with the package, and the idempotent setup requests that install them.

The file name is the asset's id: ``index_templates/component-chunks.json.j2`` installs as
component template ``<prefix>-chunks`` (used by the index template ``<prefix>-chunks`` of
``index-chunks.json.j2``), ``search_templates/hybrid.mustache`` as stored script
``<prefix>-hybrid``. Every JSON asset carries ``_meta.version``; the stored script, which has no
``_meta``, carries the same number in a leading mustache comment (``{{! es_rag asset_version N }}``).

``Settings.analyzer`` ``auto`` is resolved by :func:`resolve_analyzer` before anything is rendered;
rendering with ``auto`` unresolved raises :class:`~es_rag.errors.ConfigError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from es_rag.elasticsearch.search_template import search_template_id
from es_rag.errors import ConfigError, EsRagError
from es_rag.es_request import EsRequest
from es_rag.metadata import METADATA_SCHEMA_VERSION
from es_rag.settings import SEMANTIC_FIELD, Analyzer, Settings, VectorMode

ASSET_VERSION = 14
"""Bumped whenever any asset body changes; ``doctor`` compares it with the installed ``_meta.version``. 10: the version
registry's ``retired`` field (the pending purge; ``es-rag setup`` adds it to an existing registry index). 11: its
``digests`` field (what each served source holds: an unchanged source is not embedded again). 12: the stored search
template's ``rescore`` param (the kNN search's ``rescore_vector`` of a quantized index), and no ``rescore_vector``
in the mapping of a cluster that refuses it (9.0, 8.18). 13: ``page_start`` / ``page_end`` (integer) in the chunk
and parent mappings: the pages of a PDF chunk, which its citations name. 14: ``page_label_start`` /
``page_label_end`` (keyword) beside them: the labels a PDF prints on those pages (``/PageLabels``), which citations
name instead of the page index."""

CHUNK_PIPELINE_ASSET = {
    VectorMode.CLIENT: "chunks",
    VectorMode.INFERENCE: "chunks-inference",
    VectorMode.SEMANTIC_TEXT: "chunks-semantic",
}
"""Ingest pipeline asset of the chunk index per vector mode (installed as ``Settings.pipeline_id``)."""


def asset_root() -> Path:
    """Directory holding ``index_templates/`` and ``ingest_pipelines/`` (wheel or source checkout)."""
    packaged = Path(__file__).parent.parent / "assets"
    if (packaged / "index_templates").is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2]
    if (source / "index_templates").is_dir():
        return source
    raise EsRagError(f"es_rag assets not found under {packaged} or {source}: broken installation")


@cache
def _env(root: str) -> jinja2.Environment:
    loader = jinja2.FileSystemLoader([str(Path(root) / "index_templates"), str(Path(root) / "ingest_pipelines")])
    return jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
    )


KUROMOJI_PLUGIN = "analysis-kuromoji"
CJK_LANGUAGES = {"ja": "Japanese", "zh": "Chinese", "ko": "Korean"}
"""Corpus languages (ISO 639-1) for which ``auto`` picks a CJK analyzer over ``standard``."""


@dataclass(frozen=True)
class AnalyzerChoice:
    """The analyzer ``auto`` resolved to, and why (printed by ``setup`` and ``doctor``).

    Attributes:
        analyzer: A concrete analyzer (never ``auto``).
        reason: The rule that picked it, in words.
    """

    analyzer: Analyzer
    reason: str


def _language_code(language: str | None) -> str | None:
    if language is None or not str(language).strip():
        return None
    code = re.split(r"[-_]", str(language).strip().lower(), maxsplit=1)[0]
    if not re.fullmatch(r"[a-z]{2,3}", code):
        raise ConfigError(f"language: {language!r} is not an ISO 639 code such as en, ja, zh, ko (or ja-JP)")
    return code


def resolve_analyzer(
    analyzer: Analyzer | str, *, plugins: Iterable[str] | None, language: str | None = None
) -> AnalyzerChoice:
    """Resolve ``auto`` to a concrete analyzer; any other value is returned as configured.

    The rule (``docs/retrieval.md``, "Text analyzer"):

    * the cluster has the analysis-kuromoji plugin and the corpus language is Japanese (``ja``) or not
      given -> ``kuromoji`` (Japanese morphology);
    * else the corpus language is Japanese, Chinese or Korean -> ``cjk`` (bigrams; kuromoji does not
      segment Chinese or Korean, so those get ``cjk`` even when the plugin is installed);
    * else -> ``standard``. ``cjk`` would index English as overlapping bigrams, so it is never picked
      unless the user says the corpus is CJK, and a language given as non-CJK (``--language en``) gets
      ``standard`` even when kuromoji is installed.

    Args:
        analyzer: The configured analyzer.
        plugins: Plugin names installed on the cluster (``Capabilities.analysis_plugins``); None when
            no cluster was probed (dry run): kuromoji is then assumed absent.
        language: Corpus language (ISO 639-1: ``en``, ``ja``, ``ja-JP``, ...), or None when unknown.

    Raises:
        ConfigError: ``language`` is not a language code.
    """
    chosen = analyzer if isinstance(analyzer, Analyzer) else Analyzer(str(analyzer).lower())
    code = _language_code(language)
    if chosen is not Analyzer.AUTO:
        return AnalyzerChoice(chosen, f"as configured (--analyzer {chosen.value})")
    if plugins is None:
        has_kuromoji = False
        where = f"no cluster probed ({KUROMOJI_PLUGIN} assumed absent)"
    else:
        has_kuromoji = KUROMOJI_PLUGIN in set(plugins)
        where = f"{KUROMOJI_PLUGIN} {'installed' if has_kuromoji else 'not installed'} on the cluster"
    lang = f"corpus language {code}" if code else "no --language given"
    if has_kuromoji and code in (None, "ja"):
        return AnalyzerChoice(Analyzer.KUROMOJI, f"--analyzer auto, {where}, {lang}")
    if code in CJK_LANGUAGES:
        return AnalyzerChoice(Analyzer.CJK, f"--analyzer auto, {where}, {lang} ({CJK_LANGUAGES[code]}): cjk bigrams")
    hint = "" if code else "; a Japanese/CJK corpus needs --language ja|zh|ko"
    return AnalyzerChoice(Analyzer.STANDARD, f"--analyzer auto, {where}, {lang}{hint}")


def resolved_settings(settings: Settings, *, plugins: Iterable[str] | None) -> Settings:
    """``settings`` with ``analyzer`` ``auto`` resolved by :func:`resolve_analyzer` for the ``language``
    setting (else unchanged). The one place ``auto`` becomes an analyzer.

    Args:
        settings: Settings, possibly with ``analyzer=auto``.
        plugins: Installed plugin names, or None when no cluster was probed (the no-plugin branch).
    """
    index = settings.index
    if index.analyzer is not Analyzer.AUTO:
        return settings
    return settings.replace(
        analyzer=resolve_analyzer(index.analyzer, plugins=plugins, language=index.language).analyzer
    )


def _context(settings: Settings, version: tuple[int, ...] | None = None) -> dict[str, Any]:
    if settings.index.analyzer is Analyzer.AUTO:
        raise ConfigError(
            "analyzer 'auto' must be resolved before assets are rendered: use "
            "es_rag.elasticsearch.assets.resolved_settings(settings, plugins=...) "
            "(es-rag setup probes the cluster for it), or pass a concrete --analyzer (standard, english, cjk, kuromoji)"
        )
    return {
        "index_prefix": settings.index.prefix,
        "vector_dims": settings.encoder.dims,
        "similarity": settings.index.similarity.value,
        "vector_index_options": settings.index.vector_index_options(version),
        "meta_mapping": settings.index.metadata_schema().es_properties(),
        "metadata_schema_version": METADATA_SCHEMA_VERSION,
        "analyzer": settings.index.analyzer.value,
        "languages": settings.index.language_analyses(),
        "bm25_k1": float(settings.index.bm25_k1),
        "bm25_b": float(settings.index.bm25_b),
        "inference_id": settings.encoder.inference_id,
        "vector_mode": settings.encoder.vectors.value,
        "semantic_field": SEMANTIC_FIELD,
        "chunking_settings": settings.encoder.semantic_chunking_settings(),
        "pipeline_id": settings.pipeline_id,
        "asset_version": ASSET_VERSION,
    }


def render_asset(
    folder: str, name: str, settings: Settings, *, version: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """Render one asset file into its JSON body.

    Args:
        folder: ``index_templates`` or ``ingest_pipelines``.
        name: File name without ``.json.j2``.
        settings: Values the template depends on.
        version: The cluster's version, where a mapping option depends on it; None renders for the newest.
    """
    root = asset_root()
    path = root / folder / f"{name}.json.j2"
    if not path.is_file():
        raise EsRagError(f"unknown asset {folder}/{name}")
    text = _env(str(root)).get_template(path.name).render(**_context(settings, version))
    try:
        body: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EsRagError(f"asset {folder}/{path.name} renders to invalid JSON: {exc}") from exc
    return body


def setup_requests(settings: Settings, *, version: tuple[int, ...] | None = None) -> list[EsRequest]:
    """Every request ``es-rag setup`` sends, in order; each is an idempotent PUT.

    Args:
        settings: Prefix, dims, similarity, analyzer and inference endpoint to render with.
        version: The cluster's version (the vector mapping's ``rescore_vector`` depends on it); None renders for
            the newest.
    """
    p = settings.index.prefix
    reqs = [
        EsRequest(
            "PUT",
            f"_ingest/pipeline/{settings.pipeline_id}",
            render_asset("ingest_pipelines", CHUNK_PIPELINE_ASSET[settings.encoder.vectors], settings),
        ),
        EsRequest("PUT", f"_ingest/pipeline/{p}-parents", render_asset("ingest_pipelines", "parents", settings)),
        EsRequest(
            "PUT",
            f"_component_template/{p}-chunks",
            render_asset("index_templates", "component-chunks", settings, version=version),
        ),
        EsRequest(
            "PUT", f"_component_template/{p}-parents", render_asset("index_templates", "component-parents", settings)
        ),
        EsRequest("PUT", f"_index_template/{p}-chunks", render_asset("index_templates", "index-chunks", settings)),
        EsRequest("PUT", f"_index_template/{p}-parents", render_asset("index_templates", "index-parents", settings)),
        # version registry (es_rag.versions.registry): one document per tenant, read once per search call
        EsRequest("PUT", f"_index_template/{p}-versions", render_asset("index_templates", "index-versions", settings)),
        # stored hybrid search template (_search/template for apps and Kibana), see search_template_requests
        *search_template_requests(settings),
    ]
    return reqs


TEMPLATE_PRIORITY = 500
"""The priority of es_rag's index templates (``index_templates/index-*.json.j2``)."""


def template_patterns(settings: Settings) -> dict[str, list[str]]:
    """es_rag's index template names and their ``index_patterns``."""
    p = settings.index.prefix
    return {f"{p}-chunks": [f"{p}-chunks*"], f"{p}-parents": [f"{p}-parents*"], f"{p}-versions": [f"{p}-versions"]}


def patterns_overlap(a: str, b: str) -> bool:
    """Whether some index name matches both ``*``-patterns -- the test ``MetadataIndexTemplateService`` applies to
    index templates of equal priority (the intersection of the patterns' automata is not empty)."""
    memo: dict[tuple[int, int], bool] = {}

    def both(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            if i == len(a) and j == len(b):
                memo[key] = True
            elif i < len(a) and a[i] == "*":
                memo[key] = both(i + 1, j) or (j < len(b) and both(i, j + 1))
            elif j < len(b) and b[j] == "*":
                memo[key] = both(i, j + 1) or (i < len(a) and both(i + 1, j))
            else:
                memo[key] = i < len(a) and j < len(b) and a[i] == b[j] and both(i + 1, j + 1)
        return memo[key]

    return both(0, 0)


def template_conflicts(settings: Settings, installed: Any) -> list[str]:
    """Index templates of the cluster (a ``GET _index_template`` answer) that Elasticsearch would refuse es_rag's
    templates next to: another template at priority 500 whose patterns overlap ours (another es_rag prefix such as
    ``rag`` next to ``rag-chunks``, or an app's own), one line each.

    Args:
        settings: Gives the prefix.
        installed: ``{"index_templates": [{"name", "index_template": {"index_patterns", "priority"}}]}``.
    """
    ours = template_patterns(settings)
    out = []
    for item in (installed or {}).get("index_templates", []) if isinstance(installed, dict) else []:
        name = str(item.get("name"))
        body = item.get("index_template") or {}
        if name in ours or int(body.get("priority") or 0) != TEMPLATE_PRIORITY:
            continue
        theirs = body.get("index_patterns") or []
        theirs = [theirs] if isinstance(theirs, str) else list(theirs)
        for our_name, patterns in ours.items():
            hit = [(a, b) for a in patterns for b in theirs if patterns_overlap(a, str(b))]
            if hit:
                out.append(
                    f"index template {name!r} (priority {TEMPLATE_PRIORITY}, patterns {theirs}) overlaps "
                    f"{our_name!r} ({hit[0][0]})"
                )
    return out


def setup_paths(settings: Settings) -> list[str]:
    """The path of every :func:`setup_requests` request, in order, without rendering any asset (so it
    also works with ``analyzer=auto`` unresolved); ``doctor`` GETs each to read the installed version.

    Args:
        settings: Gives the prefix and the chunk pipeline id.
    """
    p = settings.index.prefix
    return [
        f"_ingest/pipeline/{settings.pipeline_id}",
        f"_ingest/pipeline/{p}-parents",
        f"_component_template/{p}-chunks",
        f"_component_template/{p}-parents",
        f"_index_template/{p}-chunks",
        f"_index_template/{p}-parents",
        f"_index_template/{p}-versions",
        f"_scripts/{search_template_id(settings)}",
    ]


def obsolete_asset_paths(settings: Settings) -> list[str]:
    """Components of asset versions <= 5 that the self-contained ``<prefix>-chunks`` / ``<prefix>-parents``
    components replaced; ``setup`` deletes them when their ``_meta.managed_by`` is ``es_rag``.

    Args:
        settings: Gives the prefix.
    """
    p = settings.index.prefix
    return [
        f"_component_template/{p}-chunk-settings",
        f"_component_template/{p}-chunk-mappings",
        f"_component_template/{p}-parent-mappings",
    ]


def index_creation_requests(settings: Settings) -> list[EsRequest]:
    """Create the chunk, parent and version-registry indices (bodies empty: the index templates supply
    everything; with ``index_generation`` set, that generation's concrete indices, the registry with its body
    given, since the registry's template matches ``<prefix>-versions`` alone).

    Args:
        settings: Gives the index names.
    """
    versions: dict[str, Any] = {}
    if settings.index.generation:
        # the versions template matches <prefix>-versions only: a generation's registry gets the same body explicitly
        template = render_asset("index_templates", "index-versions", settings)["template"]
        versions = {"settings": template["settings"], "mappings": template["mappings"]}
    return [
        EsRequest("PUT", settings.chunk_index, {}),
        EsRequest("PUT", settings.parent_index, {}),
        EsRequest("PUT", settings.index_name("versions"), versions),
    ]


def registry_mapping_request(settings: Settings) -> EsRequest:
    """``PUT <prefix>-versions/_mapping`` with the registry template's properties and ``_meta``: an index created
    under an older asset version gains the fields added since (``retired``, asset version 10). Adding a field to a
    mapping is allowed on a live index (``PutMappingRequest``, ``MapperService.merge``); the fields it already has
    are the same, so the request changes nothing else.

    Args:
        settings: Gives the registry's name.
    """
    mappings = render_asset("index_templates", "index-versions", settings)["template"]["mappings"]
    body = {"_meta": mappings["_meta"], "properties": mappings["properties"]}
    return EsRequest("PUT", f"{settings.index_name('versions')}/_mapping", body)


PAGE_FIELDS = ("page_start", "page_end", "page_label_start", "page_label_end")
"""Fields of the chunk and parent mappings added since asset version 12: a PDF chunk's pages (13) and their printed
labels (14)."""


def added_fields_request(settings: Settings, kind: str) -> EsRequest:
    """``PUT <chunk or parent index>/_mapping`` with the fields added since asset version 12 (:data:`PAGE_FIELDS`), as
    the current template maps them: an index created before gains them, so a PDF chunk's pages are not refused by
    its strict mapping. Adding a field is allowed on a live index (``MapperService.merge``); only the new fields are
    sent, so nothing else of the mapping (analyzers, the vector field) is touched.

    Args:
        settings: Gives the index names.
        kind: ``chunks`` or ``parents``.
    """
    asset = "component-chunks" if kind == "chunks" else "component-parents"
    properties = render_asset("index_templates", asset, settings)["template"]["mappings"]["properties"]
    index = settings.chunk_index if kind == "chunks" else settings.parent_index
    return EsRequest("PUT", f"{index}/_mapping", {"properties": {f: properties[f] for f in PAGE_FIELDS}})


def search_template_source() -> str:
    """The mustache source of the stored hybrid search template (``search_templates/hybrid.mustache``)."""
    path = asset_root() / "search_templates" / "hybrid.mustache"
    if not path.is_file():
        raise EsRagError(f"search template asset missing: {path}: broken installation")
    return path.read_text(encoding="utf-8")


SCRIPT_VERSION_RE = re.compile(r"\{\{!\s*es_rag asset_version (\d+)\s*\}\}")
"""The version marker leading the stored script's source (a stored script has no ``_meta``)."""


def search_template_requests(settings: Settings) -> list[EsRequest]:
    """``PUT _scripts/<prefix>-hybrid``: the stored mustache template apps and Kibana call through
    ``_search/template`` (native ``rrf``; needs an Enterprise/trial licence like the rrf retriever).

    The stored source is ``search_templates/hybrid.mustache`` behind a mustache comment carrying
    :data:`ASSET_VERSION` (``{{! es_rag asset_version N }}``), which ``doctor`` reads back.

    Args:
        settings: Gives the prefix (template id).
    """
    source = f"{{{{! es_rag asset_version {ASSET_VERSION} }}}}\n{search_template_source()}"
    body = {"script": {"lang": "mustache", "source": source}}
    return [EsRequest("PUT", f"_scripts/{search_template_id(settings)}", body)]
