"""Fast, honest model-hub availability check.

Without it an offline machine waits about a minute in the hub client's retries before a load fails;
with it the caller learns in a second that the hub is unreachable and can take its fallback.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path
from urllib.parse import urlparse


def hub_offline_forced() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set to a true value."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_cached(name: str) -> bool:
    """Whether the local Hugging Face cache holds a snapshot of the hub model ``name`` with its ``config.json``
    (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``), read without the hub client.

    Args:
        name: A hub model name (``org/model``).
    """
    root = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub"
    )
    snapshots = Path(root) / ("models--" + name.replace("/", "--")) / "snapshots"
    return snapshots.is_dir() and any((s / "config.json").exists() for s in snapshots.iterdir())


@cache
def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether a TCP connection to the hub endpoint (``HF_ENDPOINT``) opens within ``timeout`` seconds.

    Args:
        timeout: Seconds to wait for DNS + connect.
    """
    if hub_offline_forced():
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
