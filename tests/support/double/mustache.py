"""Mustache as Elasticsearch's ``lang-mustache`` module renders search templates (``CustomMustacheFactory``):
variables are JSON-escaped (the template is JSON), ``{{{x}}}`` is raw, ``{{#x}}...{{/x}}`` renders for a truthy
value (once per element of a list), ``{{^x}}...{{/x}}`` for a falsy one, ``{{#toJson}}x{{/toJson}}`` writes the
value as JSON, ``{{#join}}x{{/join}}`` joins a list with commas, ``{{! ... }}`` is a comment. An unclosed tag is
refused as the engine refuses it (``Improperly closed variable in query-template``). Written for the double,
independent of ``es_rag.elasticsearch.search_template.render_search_template``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_TAG = re.compile(r"\{\{(\{?)([#^/!]?)\s*([^}]*?)\s*\}?\}\}")


class MustacheError(Exception):
    """The template does not compile."""


def _lookup(stack: list[Any], name: str) -> Any:
    if name == ".":
        return stack[-1]
    for ctx in reversed(stack):
        node: Any = ctx
        found = True
        for part in name.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                found = False
                break
        if found:
            return node
    return None


def _check(template: str) -> None:
    depth: list[str] = []
    pos = 0
    while True:
        start = template.find("{{", pos)
        if start < 0:
            break
        triple = template.startswith("{{{", start)
        end = template.find("}}}" if triple else "}}", start)
        if end < 0:
            raise MustacheError("Improperly closed variable in query-template")
        inner = template[start + (3 if triple else 2) : end].strip()
        if triple and template[end + 3 : end + 4] == "}":
            raise MustacheError("Improperly closed variable in query-template")
        if inner.startswith(("#", "^")):
            depth.append(inner[1:].strip())
        elif inner.startswith("/"):
            if not depth or depth.pop() != inner[1:].strip():
                raise MustacheError(f"Mismatched start/end tags: {inner[1:].strip()}")
        pos = end + (3 if triple else 2)
    if depth:
        raise MustacheError(f"Unclosed tag {depth[-1]}")


def render_template(template: str, params: Mapping[str, Any], *, check_only: bool = False) -> str:
    """Render ``template`` with ``params``.

    Args:
        template: Mustache source.
        params: The call's params.
        check_only: Only compile (stored script PUT).
    """
    _check(template)
    if check_only:
        return ""
    return _render(template, [params])


def _find_close(template: str, name: str, start: int) -> tuple[int, int]:
    depth = 1
    pattern = re.compile(r"\{\{\s*([#^/])\s*" + re.escape(name) + r"\s*\}\}")
    for m in pattern.finditer(template, start):
        depth += -1 if m.group(1) == "/" else 1
        if depth == 0:
            return m.start(), m.end()
    raise MustacheError(f"Unclosed tag {name}")


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)[1:-1]
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


def _render(template: str, stack: list[Any]) -> str:
    out: list[str] = []
    pos = 0
    while True:
        m = re.compile(r"\{\{(\{)?\s*([#^!/]?)\s*([^}]*?)\s*\}\}(\})?").search(template, pos)
        if m is None:
            out.append(template[pos:])
            return "".join(out)
        out.append(template[pos : m.start()])
        raw, kind, name = m.group(1), m.group(2), m.group(3)
        if kind == "!":
            pos = m.end()
            continue
        if kind in ("#", "^"):
            close_start, close_end = _find_close(template, name, m.end())
            inner = template[m.end() : close_start]
            if kind == "#" and name == "toJson":
                out.append(json.dumps(_lookup(stack, inner.strip()), ensure_ascii=False))
            elif kind == "#" and name == "join":
                value = _lookup(stack, inner.strip())
                out.append(",".join(_scalar(v) for v in value or []))
            else:
                value = _lookup(stack, name)
                truthy = value not in (None, False, "", [], {})
                if kind == "^":
                    if not truthy:
                        out.append(_render(inner, stack))
                elif isinstance(value, list):
                    for item in value:
                        out.append(_render(inner, [*stack, item]))
                elif truthy:
                    out.append(_render(inner, [*stack, value] if isinstance(value, Mapping) else stack))
            pos = close_end
            continue
        if kind == "/":
            raise MustacheError(f"Unexpected close tag {name}")
        value = _lookup(stack, name)
        out.append(("" if value is None else str(value)) if raw else _scalar(value))
        pos = m.end()
