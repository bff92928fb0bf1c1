"""The one request record every builder returns, and its Kibana Dev Tools / JSON renderings."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EsRequest:
    """An Elasticsearch HTTP request: method, path (no leading slash) and JSON body.

    For ``_msearch`` and ``_bulk`` the body is the list of NDJSON objects.
    """

    method: str
    path: str
    body: Any = None

    @property
    def is_ndjson(self) -> bool:
        """True for endpoints whose body is newline-delimited JSON."""
        return self.path.split("?")[0].rsplit("/", 1)[-1] in ("_msearch", "_bulk")

    def to_dict(self) -> dict[str, Any]:
        """``{"method", "path", "body"}`` as printed by ``--format json``."""
        return {"method": self.method, "path": self.path, "body": self.body}

    def to_console(self) -> str:
        """Kibana Dev Tools text: ``METHOD path`` then the body (NDJSON one object per line)."""
        head = f"{self.method} {self.path}"
        if self.body is None:
            return head
        if self.is_ndjson:
            lines = [json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")) for obj in self.body]
            return "\n".join([head, *lines])
        return head + "\n" + _numbers_on_one_line(json.dumps(self.body, ensure_ascii=False, indent=2))


_NUMBER_LIST = re.compile(r"\[\n\s+(-?[0-9][0-9.eE+-]*(?:,\n\s+-?[0-9][0-9.eE+-]*)*)\n\s*\]")


def _numbers_on_one_line(text: str) -> str:
    """A list of numbers (a query vector) on one line: ``explain`` printed 384 numbers one per line (issue 31)."""
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def render(requests: Sequence[EsRequest], fmt: str) -> str:
    """Render requests as ``console`` text (blank line between requests) or a ``json`` array.

    Args:
        requests: The requests.
        fmt: ``console`` or ``json``.
    """
    if fmt == "json":
        return json.dumps([r.to_dict() for r in requests], ensure_ascii=False, indent=2)
    if fmt == "console":
        return "\n\n".join(r.to_console() for r in requests) + "\n"
    from es_rag.errors import ConfigError

    raise ConfigError(f"format: invalid value {fmt!r}; valid values: console, json")
