"""es_rag: a production RAG retrieval stack on an existing Elasticsearch cluster.

The public face: ``RagClient`` (one object for apps: search, ingest, delete, explain, selftest), ``Settings``,
``SearchFilter``, ``SearchResult``, the lower-level builders (``build_backend``, ``build_embedder``,
``build_pipeline``) and the errors. Importing the package loads no model and opens no connection: everything but
the errors is imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from es_rag.errors import (
    ClusterError,
    ConfigError,
    EsRagError,
    InputError,
    LicenseError,
    MissingDependencyError,
    ModelLoadError,
)

if TYPE_CHECKING:
    from es_rag.client import RagClient
    from es_rag.filters import SearchFilter
    from es_rag.pipeline import RagPipeline
    from es_rag.result import SearchResult
    from es_rag.settings import Settings
    from es_rag.wiring import build_backend, build_embedder, build_pipeline

__version__ = "0.1.0"

_LAZY = {
    "RagClient": "es_rag.client",
    "Settings": "es_rag.settings",
    "SearchFilter": "es_rag.filters",
    "SearchResult": "es_rag.result",
    "RagPipeline": "es_rag.pipeline",
    "build_backend": "es_rag.wiring",
    "build_embedder": "es_rag.wiring",
    "build_pipeline": "es_rag.wiring",
}

__all__ = [
    "ClusterError",
    "ConfigError",
    "EsRagError",
    "InputError",
    "LicenseError",
    "MissingDependencyError",
    "ModelLoadError",
    "RagClient",
    "RagPipeline",
    "SearchFilter",
    "SearchResult",
    "Settings",
    "__version__",
    "build_backend",
    "build_embedder",
    "build_pipeline",
]


def __getattr__(name: str) -> Any:
    """The lazy part of the public face (see the module docstring).

    Args:
        name: The attribute looked up.
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'es_rag' has no attribute {name!r}")
    return getattr(import_module(module), name)
