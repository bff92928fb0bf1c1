"""Running a flow: a generator that yields the steps it needs done (a request to send, model work, a backend call)
and receives each step's result. One synchronous and one async runner serve the Elasticsearch read paths
(:mod:`es_rag.elasticsearch.cluster`) and the search pipeline (:mod:`es_rag.pipeline`) alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

S = TypeVar("S")
R = TypeVar("R")


def drive(flow: Generator[S, Any, R], run: Callable[[S], Any]) -> R:
    """Run ``flow`` to its result, doing each step with ``run``; an error ``run`` raises is thrown into the flow at
    the step that caused it (the flow may catch it, e.g. a licence refusal).

    Args:
        flow: The flow.
        run: Does one step and returns its result.
    """
    try:
        step = next(flow)
        while True:
            try:
                value = run(step)
            except Exception as exc:
                step = flow.throw(exc)
                continue
            step = flow.send(value)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def adrive(flow: Generator[S, Any, R], arun: Callable[[S], Awaitable[Any]]) -> R:
    """:func:`drive` with each step awaited.

    Args:
        flow: The flow.
        arun: Does one step and returns (awaitably) its result.
    """
    try:
        step = next(flow)
        while True:
            try:
                value = await arun(step)
            except Exception as exc:
                step = flow.throw(exc)
                continue
            step = flow.send(value)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
