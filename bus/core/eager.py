"""Run a coroutine's first step inline, in a task of its own from the start.

Most handlers finish without waiting on anything (they count, filter, answer
at once). Letting the event loop start each one in a task costs a turn of the
loop per message; running its first step inline costs none, and a handler that
does wait continues in its task, so handlers of one subscription still overlap.
This is what ``asyncio.eager_task_factory`` does from Python 3.12 on; this
module does it on 3.11.

The handler's task exists before its first step runs, and is
``asyncio.current_task()`` throughout, with a context of its own:

- ``asyncio.timeout``, ``TaskGroup``, anyio's cancel scopes (httpx, the openai
  client) entered before the first wait cancel and find the handler's task,
  never the caller's (a connection's reader, which handlers share);
- a context variable a handler sets stays in its own context;
- a cancel asked for before the task's first turn reaches the handler where it
  waits, as a task's cancel does.

Making the task current for the inline step writes asyncio's table of current
tasks (``asyncio.tasks._current_tasks``, checked at import to be what
``current_task`` reads), else goes through ``_enter_task``/``_leave_task``;
where neither is there, the coroutine starts in its task on the loop's next
turn (correct, slower).
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final

_enter_task: Final[Callable[[Any, Any], None] | None] = getattr(asyncio.tasks, "_enter_task", None)
_leave_task: Final[Callable[[Any, Any], None] | None] = getattr(asyncio.tasks, "_leave_task", None)


def _current_tasks() -> dict[Any, Any] | None:
    """asyncio's table of each loop's current task, if ``current_task`` reads it (a probe says), else None."""
    table = getattr(asyncio.tasks, "_current_tasks", None)
    if not isinstance(table, dict):
        return None
    key, probe = object(), object()
    table[key] = probe
    try:
        return table if asyncio.current_task(key) is probe else None  # type: ignore[arg-type]
    except Exception:  # an asyncio that keeps them elsewhere
        return None
    finally:
        table.pop(key, None)


#: Swapping the current task is three operations on this table where it can be (a quarter of the calls' cost).
_CURRENT: Final = _current_tasks()
#: Whether the first step can run inline in its task (else the task starts it on the loop's next turn).
INLINE: Final = _CURRENT is not None or (_enter_task is not None and _leave_task is not None)


class _Inline:
    """How the inline first step ended: finished (with what) or waiting on ``yielded``."""

    __slots__ = ("finished", "yielded")

    def __init__(self) -> None:
        self.finished = False
        self.yielded: Any = None


def start_eager(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
    """Run ``coro`` until it first waits; then its task drives the rest.

    Returns None when the coroutine finished inline (its exception, if any, is
    raised here), else the task that drives it to completion.
    """
    finished, value = run_eager(coro)
    return None if finished else value


def run_eager(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Like :func:`start_eager`, keeping the result: ``(True, value)`` if ``coro``
    finished inline, else ``(False, task)`` with the task that drives the rest
    (its result is the coroutine's value). The middleware's handlers use it.

    A coroutine that finished inline after its task was cancelled raises
    CancelledError here, as awaiting that task would.
    """
    loop = asyncio.get_running_loop()
    if not INLINE:
        return False, loop.create_task(coro)
    context = contextvars.copy_context()
    inline = _Inline()
    driver = _drive(coro, inline)
    driver.send(None)  # up to its first turn, where the task's first step resumes it (or throws a cancel in)
    task = loop.create_task(driver, context=context)
    outer = _swap_in(loop, task)
    try:
        inline.yielded = context.run(coro.send, None)
    except StopIteration as stop:
        inline.finished = True
        if task.cancelling():  # cancelled while it ran: it ends cancelled, as its task does
            raise asyncio.CancelledError from None
        return True, stop.value
    except BaseException:
        inline.finished = True  # its task ends quietly; the exception is the caller's
        raise
    finally:
        _swap_out(loop, task, outer)
    return False, task


def _swap_in(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> Any:
    """Make ``task`` the loop's current task; return the one it replaces (None if none)."""
    current = _CURRENT
    if current is not None:
        outer = current.get(loop)
        current[loop] = task
        return outer
    outer = asyncio.current_task(loop)
    if outer is not None:
        _leave_task(loop, outer)  # type: ignore[misc]
    _enter_task(loop, task)  # type: ignore[misc]
    return outer


def _swap_out(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], outer: Any) -> None:
    """Undo :func:`_swap_in`: ``outer`` is the current task again (or none is)."""
    current = _CURRENT
    if current is not None:
        if outer is None:
            current.pop(loop, None)
        else:
            current[loop] = outer
        return
    _leave_task(loop, task)  # type: ignore[misc]
    if outer is not None:
        _enter_task(loop, outer)  # type: ignore[misc]


@types.coroutine
def _first_turn() -> Generator[None, None, None]:
    """Where the task's first step finds its coroutine (already started, so a cancel thrown in is caught)."""
    yield


async def _drive(coro: Coroutine[Any, Any, Any], inline: _Inline) -> Any:
    """Go on where the inline first step stopped, as an asyncio Task would; return the coroutine's value."""
    try:
        await _first_turn()
    except asyncio.CancelledError as exc:
        if inline.finished:
            raise
        yielded = inline.yielded
        if yielded is None or not _is_future(yielded) or not yielded.cancel():
            try:  # nothing to cancel it at: the cancel goes into the handler itself
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            return await _continue(coro, yielded)
        # Cancelled what the handler waits on, as a task's cancel does: it sees CancelledError there.
    if inline.finished:
        return None
    return await _continue(coro, inline.yielded)


def _is_future(value: Any) -> bool:
    return getattr(value, "_asyncio_future_blocking", None) is not None


async def _continue(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive ``coro`` from a point where it yielded ``yielded``; return its value."""
    while True:
        try:
            if yielded is None:  # a bare yield, as in asyncio.sleep(0)
                await asyncio.sleep(0)
            elif _is_future(yielded):
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
