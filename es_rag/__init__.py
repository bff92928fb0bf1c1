"""es_rag: a production RAG retrieval stack on an existing Elasticsearch cluster.

Importing the package loads no model and opens no connection; heavy dependencies load lazily.
"""

from es_rag.errors import (
    ClusterError,
    ConfigError,
    EsRagError,
    InputError,
    LicenseError,
    MissingDependencyError,
    ModelLoadError,
)

__version__ = "0.1.0"

__all__ = [
    "ClusterError",
    "ConfigError",
    "EsRagError",
    "InputError",
    "LicenseError",
    "MissingDependencyError",
    "ModelLoadError",
    "__version__",
]
