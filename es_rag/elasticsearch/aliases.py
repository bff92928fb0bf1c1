"""Blue-green generations on Elasticsearch: the request bodies (pure functions) and the reading of the answers.

A *generation* is three concrete indices built together, ``<prefix>-chunks-<gen>``, ``<prefix>-parents-<gen>``
and ``<prefix>-versions-<gen>`` (chunks, parents and their version registry: a registry belongs to the documents it
gates). Searches, ingest and deletes address ``<prefix>-chunks``, ``<prefix>-parents`` and ``<prefix>-versions``;
after the first swap these are aliases with one index each, so a swap is invisible to them.

The swap is ONE ``POST _aliases`` request: for each of the three names a ``remove`` of the live index with
``must_exist: true`` and an ``add`` of the new one with ``is_write_index: true``. Elasticsearch applies the actions
list atomically (``MetadataIndexAliasesService.applyAliasActions`` builds one new cluster state), and a ``remove``
with ``must_exist: true`` of an alias that is not there fails the whole request with 404 and applies nothing
(``rest-api-spec/test/indices.update_aliases/40_must_exist.yml``, "Remove alias with must_exist"): two swaps racing
from the same live generation cannot both succeed. Without ``must_exist`` a missing alias is only reported in
``action_results`` (8.14+, "Partial success with must_exist == null") and the rest applied.

Migration: before the first swap the three names are concrete indices (what ``es-rag setup`` created). An alias
cannot take the name of an existing index (``AliasValidator``: "an index or data stream exists with the same name as
the alias"), so the first swap removes the concrete index in the same request (``remove_index``, as in
``indices.update_aliases/30_remove_index_and_replace_with_alias.yml``). That deletes the old documents: it is done
only when asked (``es-rag reindex --migrate``) and that first swap cannot be rolled back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from es_rag.errors import ConfigError
from es_rag.es_request import EsRequest
from es_rag.settings import Settings

ROLES = ("chunks", "parents", "versions")
"""The three names a generation provides, in the order every request lists them."""


def generation_fingerprint(settings: Settings) -> str:
    """Eight hex digits of what makes documents differ between generations: the embedding model or inference endpoint,
    the vector mode and mapping, and the chunking settings.

    Args:
        settings: The settings the new generation is built with.
    """
    enc, idx = settings.encoder, settings.index
    key = {
        "model": enc.model,
        "inference_id": enc.inference_id,
        "vectors": enc.vectors.value,
        "dims": enc.dims,
        "similarity": idx.similarity.value,
        "vector_index_type": idx.vector_index_type.value,
        "analyzer": idx.analyzer.value,
        "chunking": {k: v for k, v in settings.flat().items() if k.startswith("chunk")},
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:8]


def new_generation(settings: Settings, now: datetime | None = None, existing: Sequence[str] = ()) -> str:
    """A new generation name: UTC time to the second, then :func:`generation_fingerprint`
    (``20261201t061502-1a2b3c4d``), so names sort by age and say which configuration built them.

    Args:
        settings: The settings the generation is built with.
        now: The time (default: now).
        existing: The generations there are: the new name sorts after each (two builds within one second would
            otherwise sort by fingerprint, and the newer could be taken for the older).
    """
    moment = now or datetime.now(timezone.utc)
    stamps = [g[:15] for g in existing if _STAMP.match(g)]
    if stamps and moment.strftime("%Y%m%dt%H%M%S") <= max(stamps):
        latest = datetime.strptime(max(stamps), "%Y%m%dt%H%M%S").replace(tzinfo=timezone.utc)
        moment = latest + timedelta(seconds=1)
    return f"{moment.strftime('%Y%m%dt%H%M%S')}-{generation_fingerprint(settings)}"


_STAMP = re.compile(r"^\d{8}t\d{6}-")


def layout_request(settings: Settings) -> EsRequest:
    """``GET <prefix>-chunks*,<prefix>-parents*,<prefix>-versions*/_alias``: every es_rag index of the prefix with its
    aliases (an index without one is listed with ``{}``), the legacy concrete indices included.

    Args:
        settings: Gives the prefix.
    """
    p = settings.index.prefix
    return EsRequest("GET", ",".join(f"{p}-{r}*" for r in ROLES) + "/_alias")


@dataclass
class Layout:
    """What :func:`layout_request` found: per role the live index behind the name (or the concrete index of that name,
    ``legacy``), and every generation present.

    Attributes:
        live: role -> the concrete index the name resolves to (None when the name does not exist).
        legacy: roles whose name is a concrete index (the layout before the first swap).
        generations: generation -> the roles it has an index for.
    """

    live: dict[str, str | None] = field(default_factory=dict)
    legacy: list[str] = field(default_factory=list)
    generations: dict[str, list[str]] = field(default_factory=dict)

    def live_generation(self, settings: Settings) -> str | None:
        """The generation the names point at (``legacy`` before the first swap, None when nothing is set up)."""
        chunks = self.live.get("chunks")
        if chunks is None:
            return None
        if "chunks" in self.legacy:
            return "legacy"
        return chunks[len(f"{settings.index.prefix}-chunks-") :]

    def complete(self) -> list[str]:
        """Generations with all three indices, oldest first."""
        return sorted(g for g, roles in self.generations.items() if set(roles) == set(ROLES))


def parse_layout(resp: Any, settings: Settings) -> Layout:
    """Read a :func:`layout_request` answer.

    Args:
        resp: ``{index: {"aliases": {alias: {...}}}}``.
        settings: Gives the prefix.

    Raises:
        ConfigError: A name is an alias over several indices (not made by es_rag; nothing is changed then).
    """
    p = settings.index.prefix
    out = Layout(live={r: None for r in ROLES})
    behind: dict[str, list[str]] = {}
    pattern = re.compile(rf"^{re.escape(p)}-({'|'.join(ROLES)})(?:-(.+))?$")
    for index, info in (resp or {}).items() if isinstance(resp, dict) else []:
        m = pattern.match(str(index))
        if not m:
            continue
        role, gen = m.group(1), m.group(2)
        if gen is None:
            out.live[role] = index
            out.legacy.append(role)
        else:
            out.generations.setdefault(gen, []).append(role)
        for alias in ((info or {}).get("aliases") or {}) if isinstance(info, dict) else {}:
            behind.setdefault(str(alias), []).append(str(index))
    for role in ROLES:
        name = f"{p}-{role}"
        indices = sorted(behind.get(name, []))
        if len(indices) > 1:
            raise ConfigError(
                f"alias {name} points at {len(indices)} indices ({', '.join(indices)}): es_rag keeps one index behind "
                "each name; remove the extra ones with POST _aliases, then run es-rag reindex --status"
            )
        if indices:
            out.live[role] = indices[0]
    out.legacy.sort()
    return out


def legacy_refusal(settings: Settings, layout: Layout) -> str | None:
    """Why a swap needs ``--migrate`` (None: the names are aliases already, or nothing is set up).

    Args:
        settings: Gives the prefix.
        layout: The current layout.
    """
    if not layout.legacy:
        return None
    names = ", ".join(f"{settings.index.prefix}-{r}" for r in layout.legacy)
    return (
        f"{names} {'is a concrete index' if len(layout.legacy) == 1 else 'are concrete indices'} (the layout before "
        "blue-green): an alias cannot take an index's name, so the first swap deletes them in the same atomic "
        "request and cannot be rolled back. Add --migrate to accept that (take a snapshot first if you may need "
        "the old indices), or --no-swap to build and evaluate only"
    )


def swap_request(settings: Settings, layout: Layout, generation: str, *, migrate: bool = False) -> EsRequest:
    """The one ``POST _aliases`` request that points the three names at ``generation``.

    For a name that is an alias: ``remove`` from the live index with ``must_exist: true`` (the request fails whole if
    another swap moved it meanwhile), then ``add`` with ``is_write_index: true``. For a name that is still a concrete
    index: ``remove_index`` then ``add``, only with ``migrate``.

    Args:
        settings: Gives the prefix.
        layout: The current layout (:func:`parse_layout`).
        generation: The generation to serve.
        migrate: Allow deleting legacy concrete indices in the swap.

    Raises:
        ConfigError: ``generation`` is incomplete or already live; a legacy index without ``migrate``.
    """
    p = settings.index.prefix
    if set(layout.generations.get(generation, [])) != set(ROLES):
        have = ", ".join(layout.complete()) or "none"
        raise ConfigError(
            f"generation {generation!r} is not complete ({p}-chunks/-parents/-versions-{generation}); complete "
            f"generations: {have}"
        )
    refusal = legacy_refusal(settings, layout)
    if refusal and not migrate:
        raise ConfigError(refusal)
    actions: list[dict[str, Any]] = []
    for role in ROLES:
        name = f"{p}-{role}"
        target = f"{name}-{generation}"
        live = layout.live.get(role)
        if live == target:
            raise ConfigError(f"generation {generation!r} is already live ({name} -> {target})")
        if role in layout.legacy:
            actions.append({"remove_index": {"index": name}})
        elif live is not None:
            actions.append({"remove": {"index": live, "alias": name, "must_exist": True}})
        actions.append({"add": {"index": target, "alias": name, "is_write_index": True}})
    return EsRequest("POST", "_aliases", {"actions": actions})


def delete_generation_request(settings: Settings, generation: str) -> EsRequest:
    """``DELETE`` the three indices of a retired generation (never a name: Elasticsearch refuses to delete an index
    through an alias, ``IndexNameExpressionResolver``: "matches an alias, specify the corresponding concrete indices
    instead").

    Args:
        settings: Gives the prefix.
        generation: The retired generation.
    """
    p = settings.index.prefix
    return EsRequest("DELETE", ",".join(f"{p}-{r}-{generation}" for r in ROLES))


def embedding_versions_request(settings: Settings) -> EsRequest:
    """One ``size: 0`` search of the chunk index: which ``embedding_version`` values its chunks carry (at most 10),
    how many carry none, and which concrete indices answered (an alias resolves to its generation).

    Args:
        settings: Gives the chunk index.
    """
    body = {
        "size": 0,
        "track_total_hits": True,
        "aggs": {
            "versions": {"terms": {"field": "embedding_version", "size": 10}},
            "unversioned": {"missing": {"field": "embedding_version"}},
            "indices": {"terms": {"field": "_index", "size": 10}},
        },
    }
    return EsRequest("POST", f"{settings.chunk_index}/_search", body)


def parse_embedding_versions(resp: Mapping[str, Any]) -> tuple[dict[str, int], int, tuple[str, ...]]:
    """Read an :func:`embedding_versions_request` answer: ``(version -> chunks, chunks without one, indices)``.

    Args:
        resp: The search answer.
    """
    aggs = resp.get("aggregations") or {}
    versions = {str(b["key"]): int(b["doc_count"]) for b in (aggs.get("versions") or {}).get("buckets", [])}
    unversioned = int((aggs.get("unversioned") or {}).get("doc_count", 0))
    indices = tuple(sorted(str(b["key"]) for b in (aggs.get("indices") or {}).get("buckets", [])))
    return versions, unversioned, indices


def generation_names(settings: Settings, generation: str) -> Sequence[str]:
    """The three concrete index names of ``generation``.

    Args:
        settings: Gives the prefix.
        generation: A generation.
    """
    return [f"{settings.index.prefix}-{r}-{generation}" for r in ROLES]
