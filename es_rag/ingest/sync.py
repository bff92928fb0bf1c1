"""``ingest DIR --sync``: the index follows the folder (seed 004: "re-index or auto-sync"). After a clean
ingest, a source of the tenant that lies in a synced folder and that the folder no longer yields is deleted (all
versions, chunks, parents and registry entries), and reported with the path it was read from.

A source lies in a synced folder when:

- ids are relative to ``--base-dir``: its id is under the folder's path relative to ``--base-dir``;
- ids are relative to each folder (no ``--base-dir``): one of the ``source_path`` values its chunks carry (the file it
  was read from, as given then, resolved against the current folder when relative) is inside the folder. Ids alone
  cannot say it here: ``ingest X`` then ``ingest Y --sync`` gives ``a.md`` of X and ``b.md`` of Y ids of the same
  form, and deleting every id Y does not yield removed all of X's sources (issue 31). A source with no recorded path
  (written by other tools) is never deleted by a sync.

What the folder yields is every source read in this run: its files (a file now ignored or of an unsupported type
counts as gone) and the records of its JSONL files. Nothing is deleted when any document of the run failed: a file
that could not be read must not lose its indexed version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.backend import SearchBackend
from es_rag.errors import ConfigError
from es_rag.ingest.report import IngestReport
from es_rag.ingest.sources import relative_id


@dataclass(frozen=True)
class SyncScope:
    """What one synced folder reaches.

    Attributes:
        folder: The folder, resolved.
        prefix: The id prefix it owns when ids are relative to ``--base-dir`` (``""``: every id); None when ids are
            relative to the folder itself, and the stored ``source_path`` decides.
    """

    folder: Path
    prefix: str | None = None

    def reaches(self, source_id: str, paths: Iterable[str]) -> bool:
        """Whether a stored source lies in this folder.

        Args:
            source_id: Its id.
            paths: The ``source_path`` values its chunks carry.
        """
        if self.prefix is not None:
            return source_id.startswith(self.prefix)
        return any(_inside(path, self.folder) for path in paths)


def _inside(stored: str, folder: Path) -> bool:
    path = Path(stored)
    path = (path if path.is_absolute() else Path.cwd() / path).resolve()
    return path == folder or folder in path.parents


def sync_scopes(paths: Sequence[str | Path], base_dir: str | Path | None) -> list[SyncScope]:
    """What each synced folder reaches (:class:`SyncScope`).

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
        return [SyncScope(Path(p).resolve()) for p in paths]
    base = Path(base_dir).resolve()
    scopes = []
    for p in paths:
        rel = relative_id(Path(p).resolve(), base)
        scopes.append(SyncScope(Path(p).resolve(), "" if rel == "." else rel.rstrip("/") + "/"))
    return scopes


def stale_sources(
    listed: Iterable[str], live: Iterable[str], scopes: Sequence[SyncScope], paths: Mapping[str, Iterable[str]]
) -> list[str]:
    """The listed ids that a synced folder reaches and that the run did not yield, sorted.

    Args:
        listed: The tenant's indexed source ids.
        live: The source ids read in this run.
        scopes: :func:`sync_scopes` of the folders.
        paths: ``source_id`` -> the ``source_path`` values stored with it.
    """
    keep = set(live)
    return sorted(
        s for s in set(listed) if s not in keep and any(scope.reaches(s, paths.get(s, ())) for scope in scopes)
    )


def sync_removed(
    backend: SearchBackend, tenant_id: str, live: Iterable[str], scopes: Sequence[SyncScope], report: IngestReport
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
    store = backend.version_store()
    listed = [s.source_id for s in store.sources(tenant_id)]
    paths = store.source_paths(tenant_id)
    for source_id in stale_sources(listed, live, scopes, paths):
        result = delete_source(backend, tenant_id, source_id)
        report.removed.append(
            {
                "source_id": source_id,
                "source_path": sorted(paths.get(source_id, ()))[0] if paths.get(source_id) else None,
                "deleted": result["deleted"],
                "remaining": result["remaining"],
            }
        )
    report.extra["sync"] = f"{len(report.removed)} sources removed"
    return report.removed
