"""What every part of :class:`~es_rag.client.RagClient` shares: its read/write lock and the checks of its arguments."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from es_rag.errors import ConfigError
from es_rag.principals import check_name
from es_rag.settings import Settings

if TYPE_CHECKING:
    from es_rag.telemetry import StageTelemetry


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
    return check_name(tenant, "tenant")


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
