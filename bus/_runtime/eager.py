"""Run a coroutine's first step inline, in a task of its own from the start.

Most handlers finish without waiting on anything (they count, filter, answer
at once). Letting the event loop start each one in a task costs a turn of the
loop per message and a task's scheduling; running its first step inline costs
neither, and a handler that does wait continues in its task, so handlers of
one subscription still overlap.

The handler's task exists before its first step runs and is
``asyncio.current_task()`` throughout, with a context of its own:

- ``asyncio.timeout``, ``TaskGroup`` and anyio's cancel scopes (httpx, the
  openai client) entered before the first wait cancel and find the handler's
  task, never the caller's (a connection's reader, or the request that runs
  several handlers in turn);
- a context variable a handler sets stays in its own context;
- cancels, done callbacks and exceptions behave as in any task;
- nothing a handler raises or does to its own task reaches its caller: a
  cancel of itself ends its own task (the caller reads it as that handler's
  failure), and ``KeyboardInterrupt``, ``SystemExit`` or any other
  BaseException it raises comes back as :class:`HandlerExit` (asyncio would
  otherwise re-raise the first two out of the event loop, stopping every
  handler of the process).

How, by :data:`MODE` (chosen once at import, by version):

- ``"eager"`` (Python 3.12 and later): the public ``asyncio.eager_task_factory``,
  a C-accelerated ``asyncio.Task`` whose first step runs in its constructor.
- ``"inline"`` (Python 3.11, where the internals below are there): asyncio's
  own pure-Python ``Task``, made without scheduling its first step, which is
  then run at once: the coroutine's own ``send`` with the task current and in
  its context, as the task's step would run it. A coroutine that ends there
  is done with (no future's result, callbacks or scheduling, unless it added
  a callback to its task or cancelled it); one that waits is handed to its
  task at that wait, which the task takes as if its own step had met it.
  The task is a future and a task to everything that asks by behaviour
  (``asyncio.isfuture``, ``await``, ``asyncio.wait``) but not an instance of the
  C-accelerated ``asyncio.Task``. Used only on 3.11 and while the switch is on
  (``HOOKBUS_ASYNCIO_INTERNALS=off`` turns it off).
- ``"task"`` (anything else): the coroutine starts in an ordinary task on the
  loop's next turn: correct, slower (a turn of the loop per handler).

The tests run every mode the running version offers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal

from bus._runtime.errors import HandlerCancelled, HandlerExit, HandlerTimedOut

__all__ = [
    "MODE",
    "HandlerCancelled",
    "HandlerExit",
    "HandlerTimedOut",
    "fault_cause",
    "modes_available",
    "run_bounded",
    "run_eager",
    "start_eager",
]

#: Set to "off" (or "0", "false", "no") to use no private asyncio name (Python 3.11 then starts handlers in tasks).
SWITCH_ENV: Final = "HOOKBUS_ASYNCIO_INTERNALS"

_PyTask: Final[Any] = getattr(asyncio.tasks, "_PyTask", None)
_step: Final[Callable[[Any], None] | None] = getattr(_PyTask, "_Task__step", None)
#: The pure-Python Future under it: how a task's own step ends it (a Task refuses ``set_result``).
_PyFuture: Final[Any] = getattr(asyncio.futures, "_PyFuture", None)
_register_task: Final[Callable[[Any], None] | None] = getattr(asyncio.tasks, "_register_task", None)
_enter_task: Final[Callable[[Any, Any], None] | None] = getattr(asyncio.tasks, "_enter_task", None)
_leave_task: Final[Callable[[Any, Any], None] | None] = getattr(asyncio.tasks, "_leave_task", None)
_eager_factory: Final[Callable[..., asyncio.Task[Any]] | None] = getattr(asyncio, "eager_task_factory", None)

Mode = Literal["eager", "inline", "task"]


def _switch_off() -> bool:
    return os.environ.get(SWITCH_ENV, "").strip().lower() in ("off", "0", "false", "no")


def modes_available() -> tuple[Mode, ...]:
    """The modes this Python offers, best first ("task" always works)."""
    offered: list[Mode] = []
    if sys.version_info >= (3, 12) and _eager_factory is not None:
        offered.append("eager")
    if sys.version_info[:2] == (3, 11) and None not in (_step, _PyFuture, _register_task, _enter_task, _leave_task):
        offered.append("inline")
    offered.append("task")
    return tuple(offered)


def _default_mode() -> Mode:
    best = modes_available()[0]
    return "task" if best == "inline" and _switch_off() else best


#: How handlers start here (see the module's docstring); tests set it to each of :func:`modes_available`.
MODE: Mode = _default_mode()


def fault_cause(exc: Exception) -> str:
    """How a handler's fault reads in a reaction and the journal: what it raised, or what it did."""
    if isinstance(exc, HandlerExit | HandlerCancelled):
        return str(exc)
    return f"raised {type(exc).__name__}: {exc}"


async def _guarded(coro: Coroutine[Any, Any, Any]) -> Any:
    """``coro``, with any BaseException but a cancel turned into :class:`HandlerExit`."""
    try:
        return await coro
    except (Exception, asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException as exc:
        raise HandlerExit(exc) from exc


class _Empty:
    pass


_TaskBase: Any = _PyTask if "inline" in modes_available() else _Empty


class EagerTask(_TaskBase):  # type: ignore[misc]
    """asyncio's pure-Python Task, made without scheduling its first step (:func:`run_eager` runs it).

    One whose coroutine ends in its first step is dropped unfinished (its result is returned as it is):
    it never says it was destroyed pending; one that goes on says so again, as any task.
    """

    _log_destroy_pending = False

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

    def _Task__step(self, exc: BaseException | None = None) -> None:  # the step the loop calls (its mangled name)
        """asyncio's step, then what :func:`_guarded` does in the other modes, without a coroutine more per
        handler: a BaseException that is not an Exception becomes :class:`HandlerExit` (the step re-raises
        KeyboardInterrupt and SystemExit after keeping them: caught here, they never reach the loop)."""
        with contextlib.suppress(KeyboardInterrupt, SystemExit):  # kept as the task's exception: converted below
            _step(self, exc)  # type: ignore[misc,call-arg]
        raised: BaseException | None = getattr(self, "_exception", None) if self._state == "FINISHED" else None
        if raised is not None and not isinstance(raised, Exception):
            converted = HandlerExit(raised)
            converted.__cause__ = raised
            self._exception = converted
            self._exception_tb = None


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

    A coroutine that ended inline with an exception raises it here (a
    BaseException that is not an Exception as :class:`HandlerExit`); one that
    ended cancelled raises CancelledError here, as awaiting its task would
    (nobody but the coroutine itself can have cancelled it: read it as the
    coroutine's own fault, see :func:`run_bounded`). A task that goes on fails
    the same way: with an Exception, or cancelled.
    """
    loop = asyncio.get_running_loop()
    mode = MODE
    if mode == "inline":  # what _guarded converts is converted there (no coroutine more per handler)
        return _step_inline(coro, loop)
    if mode == "eager":
        task: Any = _eager_factory(loop, _guarded(coro))  # type: ignore[misc]
    else:
        return False, loop.create_task(_guarded(coro))
    if task.done():
        return True, task.result()  # raises the exception, or CancelledError for a cancel
    return False, task


def _step_inline(coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> tuple[bool, Any]:
    """Python 3.11: the first step of ``coro`` with an :class:`EagerTask` current, run here.

    The step is the coroutine's own ``send``, as the task's step would make it (in the task's context,
    the task current): a coroutine that ends there costs no future's result, callbacks or state. One
    that waits is handed to its task at the point it waits: the task takes what it yielded as if its
    own step had (a cancel it asked of itself meanwhile included). Returns ``(True, value)`` or
    ``(False, task)``, raising as the task's ``result()`` would.
    """
    context = contextvars.copy_context()
    task = EagerTask(coro, loop, context)
    outer = asyncio.current_task(loop)
    if outer is not None:
        _leave_task(loop, outer)  # type: ignore[misc]  # the step makes its own task current, then none
    try:
        _enter_task(loop, task)  # type: ignore[misc]
        try:
            yielded = context.run(coro.send, None)
        except StopIteration as stop:
            if task._must_cancel or task._callbacks:  # it cancelled its task, or waits for its end: end it
                return _ended(task, stop.value)
            return True, stop.value
        except (Exception, asyncio.CancelledError) as exc:
            if task._callbacks:
                return _ended(task, None, exc)
            raise
        except BaseException as exc:  # KeyboardInterrupt, SystemExit ...: the handler's own exit, not the loop's
            converted = HandlerExit(exc)
            converted.__cause__ = exc
            if task._callbacks:
                return _ended(task, None, converted)
            raise converted from exc
        finally:
            _leave_task(loop, task)  # type: ignore[misc]
        _hand_over(task, coro, yielded)
    finally:
        if outer is not None:
            _enter_task(loop, outer)  # type: ignore[misc]
    _register_task(task)  # type: ignore[misc]  # it goes on: asyncio.all_tasks() lists it
    return False, task


def _ended(task: Any, value: Any, exc: BaseException | None = None) -> tuple[bool, Any]:
    """End ``task`` as its own step would have (a cancel it asked for wins over a value), so that the
    callbacks added to it run; then return or raise as :func:`run_eager` does."""
    if exc is None and task._must_cancel:
        task._must_cancel = False
        _PyFuture.cancel(task, msg=task._cancel_message)
    elif isinstance(exc, asyncio.CancelledError):
        _PyFuture.cancel(task)
    elif exc is not None:
        _PyFuture.set_exception(task, exc)
    else:
        _PyFuture.set_result(task, value)
    return True, task.result()


def _hand_over(task: Any, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
    """Let ``task`` drive ``coro`` from the wait it stopped at: its step takes what the coroutine yielded
    (and a cancel the coroutine asked of its task before it waited cancels that wait, as the step does)."""
    task._coro = _Resumed(coro, yielded)
    task._log_destroy_pending = True
    cancel, task._must_cancel = task._must_cancel, False
    task._Task__step()
    if cancel:
        waiter = task._fut_waiter
        if waiter is None or not waiter.cancel(msg=task._cancel_message):
            task._must_cancel = True


_FRESH: Final = object()


class _Resumed:
    """A coroutine stopped at its first wait, as its task drives it: the first ``send`` hands the task what
    it yielded (it is still waiting on that), the rest go to the coroutine itself."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded

    def send(self, value: Any) -> Any:
        yielded = self._yielded
        if yielded is not _FRESH:
            self._yielded = _FRESH
            return yielded
        return self._coro.send(value)

    def throw(self, exc: BaseException) -> Any:
        self._yielded = _FRESH
        return self._coro.throw(exc)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Any:
        return self._coro.__await__()

    def __getattr__(self, name: str) -> Any:  # cr_code, cr_frame, __qualname__ ...: the coroutine's (repr, debug)
        return getattr(self._coro, name)


#: Handler tasks that outlived their timeout (cancelled, not yet ended): held so that they are not
#: collected while they unwind, and their outcome is read (no "exception was never retrieved").
_OUTLIVED: set[asyncio.Task[Any]] = set()


def _forget(task: asyncio.Task[Any]) -> None:
    _OUTLIVED.discard(task)
    if not task.cancelled():
        task.exception()


async def run_bounded(coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
    """Run ``coro`` in a task of its own (inline until it waits); its value, or :class:`HandlerTimedOut`
    past ``timeout`` seconds, or :class:`HandlerCancelled` if it cancelled itself.

    The caller waits for the handler's task, never inside it: whatever the handler does to its own
    task (a cancel, an uncaught timeout of its own, a cancel it swallows and goes on) stays with that
    task. Past ``timeout`` the task is cancelled and the caller goes on at once, whether or not the
    handler lets the cancel end it. A cancel of the caller (a module stopping) cancels the handler's
    task too and goes on up. The timer is armed only if the handler waits: most answer without
    waiting, and a timer each would cost more than they do.
    """
    try:
        finished, task = run_eager(coro)
    except asyncio.CancelledError:
        raise HandlerCancelled() from None
    if finished:
        return task
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        _outlive(task)
        raise
    if not done:
        task.cancel()
        _outlive(task)
        raise HandlerTimedOut
    if task.cancelled():
        raise HandlerCancelled()
    return task.result()


def _outlive(task: asyncio.Task[Any]) -> None:
    if task.done():
        _forget(task)
        return
    _OUTLIVED.add(task)
    task.add_done_callback(_forget)
