"""Run a coroutine's first step inline, and only make a task if it has to wait.

Most handlers finish without waiting on anything (they count, filter, answer
at once). Creating an asyncio task per message costs more than such a
handler; running its first step inline costs almost nothing. A handler that
does wait continues in a task, so handlers of one subscription still overlap.
This is what ``asyncio.eager_task_factory`` does from Python 3.12 on.

While the first step runs, ``asyncio.current_task()`` is a stand-in of the
coroutine's own (:class:`EagerTask`), never the task of whoever called it
inline (a subscription's reader, a connection's read loop). A handler that
enters ``asyncio.timeout`` or a ``TaskGroup`` before its first wait (which
cancel "the current task" later) reaches its own task that way: the stand-in
forwards cancels to the task that drives the rest. Without it the timeout
cancelled the reader instead and the subscription stopped for good.

That swap writes asyncio's table of current tasks (``asyncio.tasks._current_tasks``,
checked at import to be what ``current_task`` reads), else goes through
``_enter_task``/``_leave_task``; where neither is there, every coroutine gets
a task of its own at once (correct, slower).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
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
#: Whether the first step can run inline with a task identity of its own (else a task from the start).
INLINE: Final = _CURRENT is not None or (_enter_task is not None and _leave_task is not None)


class EagerTask:
    """What ``asyncio.current_task()`` is while a coroutine runs its first step inline.

    It answers for the task that will drive the rest (if the coroutine waits):
    cancels asked for before that task exists are kept and handed to it, and
    everything after is forwarded to it.
    """

    __slots__ = ("_callbacks", "_cancels", "_coro", "_loop", "_task")

    def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        self._coro = coro
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None
        self._cancels = 0
        self._callbacks: list[Callable[[Any], object]] | None = None

    def attach(self, task: asyncio.Task[Any]) -> None:
        """The task that drives the rest: what was asked of the stand-in so far goes to it."""
        self._task = task
        for _ in range(self._cancels):
            task.cancel()
        for callback in self._callbacks or ():
            task.add_done_callback(callback)
        self._callbacks = None

    def cancel(self, msg: Any = None) -> bool:
        if self._task is not None:
            return self._task.cancel(msg)
        self._cancels += 1  # the first step is running: the task that goes on will be cancelled
        return True

    def uncancel(self) -> int:
        if self._task is not None:
            return self._task.uncancel()
        if self._cancels:
            self._cancels -= 1
        return self._cancels

    def cancelling(self) -> int:
        return self._task.cancelling() if self._task is not None else self._cancels

    def done(self) -> bool:
        return self._task is not None and self._task.done()

    def cancelled(self) -> bool:
        return self._task is not None and self._task.cancelled()

    def add_done_callback(self, callback: Callable[[Any], object], *, context: Any = None) -> None:
        if self._task is not None:
            self._task.add_done_callback(callback, context=context)
        else:
            self._callbacks = [*(self._callbacks or ()), callback]

    def remove_done_callback(self, callback: Callable[[Any], object]) -> int:
        if self._task is not None:
            return self._task.remove_done_callback(callback)
        before = len(self._callbacks or ())
        self._callbacks = [cb for cb in self._callbacks or () if cb != callback]
        return before - len(self._callbacks)

    def get_coro(self) -> Coroutine[Any, Any, Any]:
        return self._coro

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def get_name(self) -> str:
        return self._task.get_name() if self._task is not None else "hookbus-inline"

    def __repr__(self) -> str:
        return f"<EagerTask {self.get_name()} of {self._coro!r}>"


def start_eager(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
    """Run ``coro`` until it first waits; then hand the rest to a new task.

    Returns None when the coroutine finished inline (its exception, if any, is
    raised here), else the task that drives it to completion.
    """
    finished, value = run_eager(coro)
    return None if finished else value


def run_eager(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Like :func:`start_eager`, keeping the result: ``(True, value)`` if ``coro``
    finished inline, else ``(False, task)`` with the task that drives the rest
    (its result is the coroutine's value). The middleware's handlers use it.
    """
    loop = asyncio.get_running_loop()
    if not INLINE:
        return False, loop.create_task(coro)
    stand_in = EagerTask(coro, loop)
    outer = _swap_in(loop, stand_in)
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    finally:
        _swap_out(loop, stand_in, outer)
    task = loop.create_task(_drive(coro, yielded))
    stand_in.attach(task)
    return False, task


def _swap_in(loop: asyncio.AbstractEventLoop, stand_in: EagerTask) -> Any:
    """Make ``stand_in`` the loop's current task; return the one it replaces (None if none)."""
    current = _CURRENT
    if current is not None:
        outer = current.get(loop)
        current[loop] = stand_in
        return outer
    outer = asyncio.current_task(loop)
    if outer is not None:
        _leave_task(loop, outer)  # type: ignore[misc]
    _enter_task(loop, stand_in)  # type: ignore[misc]
    return outer


def _swap_out(loop: asyncio.AbstractEventLoop, stand_in: EagerTask, outer: Any) -> None:
    """Undo :func:`_swap_in`: ``outer`` is the current task again (or none is)."""
    current = _CURRENT
    if current is not None:
        if outer is None:
            current.pop(loop, None)
        else:
            current[loop] = outer
        return
    _leave_task(loop, stand_in)  # type: ignore[misc]
    if outer is not None:
        _enter_task(loop, outer)  # type: ignore[misc]


async def _drive(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Go on where :func:`run_eager` stopped, as an asyncio Task would; return the coroutine's value."""
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
