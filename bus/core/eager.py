"""Run a coroutine's first step inline, and only make a task if it has to wait.

Most event handlers finish without waiting on anything (they count, filter,
queue something). Creating an asyncio task per message costs more than such a
handler; running its first step inline costs almost nothing. A handler that
does wait continues in a task, so handlers of one subscription still overlap.
This is what ``asyncio.eager_task_factory`` does from Python 3.12 on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def start_eager(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
    """Run ``coro`` until it first waits; then hand the rest to a new task.

    Returns None when the coroutine finished inline (its exception, if any, is
    raised here), else the task that drives it to completion.
    """
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_drive(coro, yielded))


def run_eager(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Like :func:`start_eager`, keeping the result: ``(True, value)`` if ``coro``
    finished inline, else ``(False, task)`` with the task that drives the rest
    (its result is the coroutine's value). The middleware's handlers use it.
    """
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, asyncio.get_running_loop().create_task(_drive(coro, yielded))


async def _drive(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Go on where :func:`start_eager` stopped, as an asyncio Task would; return the coroutine's value."""
    while True:
        try:
            if yielded is None:  # a bare yield, as in asyncio.sleep(0)
                await asyncio.sleep(0)
            elif getattr(yielded, "_asyncio_future_blocking", None) is not None:
                # The handler's yield set this flag for a Task to take; take it, as a Task does.
                yielded._asyncio_future_blocking = False
                await yielded
            else:
                yielded = coro.throw(RuntimeError(f"handler yielded a non-future: {yielded!r}"))
                continue
        except asyncio.CancelledError as exc:
            if yielded is None or not yielded.cancelled():
                # Our task was cancelled but the future it waited on was not:
                # pass the cancellation into the handler ourselves.
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
        except BaseException:  # noqa: S110 - the handler reads the future's outcome itself below
            pass
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value
