"""Index-pattern overlap as Elasticsearch decides it.

``MetadataIndexTemplateService.findConflictingV2Templates`` builds an automaton of each template's
``index_patterns`` (``Regex.simpleMatchToAutomaton``: ``*`` is any string, every other character literal)
and reports a conflict when the intersection of two templates' automata is not empty. Two ``*``-globs
intersect when some name matches both; :func:`globs_intersect` decides that exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache


def globs_intersect(a: str, b: str) -> bool:
    """Whether some string matches both ``*``-patterns ``a`` and ``b``.

    Args:
        a: A pattern (``*`` = any sequence, other characters literal).
        b: Another pattern.
    """

    @cache
    def f(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == "*":
            if f(i + 1, j):
                return True
            return j < len(b) and f(i, j + 1)
        if j < len(b) and b[j] == "*":
            if f(i, j + 1):
                return True
            return i < len(a) and f(i + 1, j)
        return i < len(a) and j < len(b) and a[i] == b[j] and f(i + 1, j + 1)

    return f(0, 0)


def any_intersect(left: Iterable[str], right: Iterable[str]) -> bool:
    """Whether any pattern of ``left`` intersects any pattern of ``right``."""
    rights = list(right)
    return any(globs_intersect(x, y) for x in left for y in rights)


def glob_match(pattern: str, name: str) -> bool:
    """Whether ``name`` matches the ``*``-pattern (``Regex.simpleMatch``)."""
    return globs_intersect(pattern, name.replace("*", "\x00"))
