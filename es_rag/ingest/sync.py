"""``ingest DIR --sync``: the index follows the folder (seed 004: "re-index or auto-sync"). After a clean
ingest, a source of the tenant whose id lies in a synced folder's scope and that the folder no longer yields
is deleted (all versions, chunks, parents and registry entries), and reported.

The scope of a folder is the ids it can give: every id when ids are relative to the folder itself (no
``--base-dir``), else the ids under the folder's path relative to ``--base-dir``. What the folder yields is
every source read in this run: its files (a file now ignored or of an unsupported type counts as gone) and
the records of its JSONL files. Nothing is deleted when any document of the run failed: a file that could not
be read must not lose its indexed version.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from es_rag.backend import SearchBackend
from es_rag.errors import ConfigError
from es_rag.ingest.report import IngestReport
from es_rag.ingest.sources import relative_id


def sync_scopes(paths: Sequence[str | Path], base_dir: str | Path | None) -> list[str]:
    """The id prefix each synced folder owns (``""``: every id of the tenant).

    Args:
        paths: The folders given to ``ingest``.
        base_dir: ``--base-dir``, or None (ids relative to each folder).

    Raises:
        ConfigError: A path that is not a folder (a file or stdin has no "removed" files).
    """
    not_dirs = [str(p) for p in paths if str(p) == "-" or not Path(p).is_dir()]
    if not_dirs:
        raise ConfigError(f"--sync follows folders; not a folder: {', '.join(not_dirs)}")
    if base_dir is None:
        return [""]
    base = Path(base_dir).resolve()
    scopes = []
    for p in paths:
        rel = relative_id(Path(p).resolve(), base)
        scopes.append("" if rel == "." else rel.rstrip("/") + "/")
    return scopes


def stale_sources(listed: Iterable[str], live: Iterable[str], scopes: Sequence[str]) -> list[str]:
    """The listed ids inside a scope that the run did not yield, sorted.

    Args:
        listed: The tenant's indexed source ids.
        live: The source ids read in this run.
        scopes: Id prefixes of the synced folders.
    """
    keep = set(live)
    return sorted(s for s in set(listed) if s not in keep and any(s.startswith(p) for p in scopes))


def sync_removed(
    backend: SearchBackend, tenant_id: str, live: Iterable[str], scopes: Sequence[str], report: IngestReport
) -> list[dict[str, Any]]:
    """Delete the tenant's sources the synced folders no longer yield; record each in ``report.removed``.

    Nothing is deleted when ``report.failed`` is not empty: the run's view of the folder is incomplete, and the
    reason is recorded in ``report.extra["sync"]``.

    Args:
        backend: Where the sources are indexed.
        tenant_id: The tenant ingested.
        live: The source ids read in this run.
        scopes: :func:`sync_scopes` of the folders.
        report: The run's report (read for failures, written with the removals).
    """
    from es_rag.ingest import delete_source

    if report.failed:
        report.extra["sync"] = (
            f"skipped: {len(report.failed)} documents failed, so the folder's content is not known; nothing deleted"
        )
        return []
    listed = [s.source_id for s in backend.version_store().sources(tenant_id)]
    for source_id in stale_sources(listed, live, scopes):
        result = delete_source(backend, tenant_id, source_id)
        report.removed.append({"source_id": source_id, "deleted": result["deleted"], "remaining": result["remaining"]})
    report.extra["sync"] = f"{len(report.removed)} sources removed"
    return report.removed
