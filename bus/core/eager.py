"""Run a coroutine's first step inline, in a task of its own from the start.

Most handlers finish without waiting on anything (they count, filter, answer
at once). Letting the event loop start each one in a task costs a turn of the
loop per message and a task's scheduling; running its first step inline costs
neither, and a handler that does wait continues in its task, so handlers of
one subscription still overlap. This is what ``asyncio.eager_task_factory``
does from Python 3.12 on; this module does it on 3.11.

The handler's task exists before its first step runs and is
``asyncio.current_task()`` throughout, with a context of its own:

- ``asyncio.timeout``, ``TaskGroup`` and anyio's cancel scopes (httpx, the
  openai client) entered before the first wait cancel and find the handler's
  task, never the caller's (a connection's reader, which handlers share);
- a context variable a handler sets stays in its own context;
- cancels, done callbacks and exceptions behave as in any task.

How: on Python 3.11 the task is asyncio's own pure-Python ``Task``, made
without scheduling its first step, which is then run at once (the step itself
makes the task current, as the event loop would). Being the pure-Python class,
it is a future and a task to everything that asks by behaviour
(``asyncio.isfuture``, ``await``, ``asyncio.wait``), but not an instance of
the C-accelerated ``asyncio.Task``. Elsewhere (or if those internals are not
there) the coroutine starts in an ordinary task on the loop's next turn:
correct, slower.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final

_PyTask: Final[Any] = getattr(asyncio.tasks, "_PyTask", None)
_step: Final[Callable[[Any], None] | None] = getattr(_PyTask, "_Task__step", None)
_register_task: Final[Callable[[Any], None] | None] = getattr(asyncio.tasks, "_register_task", None)
_enter_task: Final[Callable[[Any, Any], None] | None] = getattr(asyncio.tasks, "_enter_task", None)
_leave_task: Final[Callable[[Any, Any], None] | None] = getattr(asyncio.tasks, "_leave_task", None)
#: Whether a first step can run inline in its own task (the internals this module uses are the 3.11 ones).
INLINE: Final = sys.version_info[:2] == (3, 11) and None not in (_step, _register_task, _enter_task, _leave_task)


class _Empty:
    pass


_TaskBase: Any = _PyTask if INLINE else _Empty


class EagerTask(_TaskBase):  # type: ignore[misc]
    """asyncio's pure-Python Task, made without scheduling its first step (:func:`run_eager` runs it)."""

    def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop, context: Any) -> None:
        # What Future.__init__ and Task.__init__ set, but the first step's scheduling and registration.
        self._loop = loop
        self._callbacks: list[Any] = []
        self._name = "hookbus-handler"
        self._num_cancels_requested = 0
        self._must_cancel = False
        self._fut_waiter = None
        self._coro = coro
        self._context = context


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

    A coroutine that ended inline with an exception, or cancelled, raises it
    here (CancelledError for a cancel), as awaiting its task would; one that
    ended with a BaseException of another kind (not KeyboardInterrupt or
    SystemExit) is returned as its finished task, so that callers report it
    as a task's failure instead of letting it reach a connection's reader.
    """
    loop = asyncio.get_running_loop()
    if not INLINE:
        return False, loop.create_task(coro)
    context = contextvars.copy_context()
    task = EagerTask(coro, loop, context)
    outer = asyncio.current_task(loop)
    if outer is not None:
        _leave_task(loop, outer)  # type: ignore[misc]  # the step makes its own task current, then none
    try:
        context.run(_step, task)  # type: ignore[arg-type]
    except (KeyboardInterrupt, SystemExit):  # the step re-raises these, as a task's does; the task is read
        task.exception()
        raise
    finally:
        if outer is not None:
            _enter_task(loop, outer)  # type: ignore[misc]
    if task.done():
        if task.cancelled():
            return True, task.result()  # raises CancelledError
        failed = task.exception()
        if failed is None:
            return True, task.result()
        if isinstance(failed, Exception):
            raise failed
        return False, task  # a BaseException of its own kind: the task keeps it, reported as a task's failure
    _register_task(task)  # type: ignore[misc]  # it goes on: asyncio.all_tasks() lists it
    return False, task


async def run_bounded(coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
    """Await ``coro`` in the current task; TimeoutError past ``timeout`` seconds.

    The timer is armed only if the coroutine waits: most handlers answer
    without waiting, and a timer each would cost more than they do.
    """
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    async with asyncio.timeout(timeout):
        return await _resume(coro, yielded)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """Go on with ``coro`` from where it yielded ``yielded``, in the awaiting task (``yield from`` by hand)."""
    while True:
        try:
            sent = yield yielded  # the future it waits on goes up to the task, as its own await would
        except BaseException as exc:  # a cancel (or any throw) from the task goes into the coroutine
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(sent)
        except StopIteration as stop:
            return stop.value
