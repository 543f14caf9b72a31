"""SyncBus: the Bus for synchronous code, on one background event-loop thread.

Synchronous frameworks (LangChain's sync callbacks, tool functions, scripts)
cannot ``await``. A SyncBus owns one daemon thread running an asyncio loop
with a :class:`bus._client.Bus` in it; ``emit``, ``intercept`` and
``subscribe`` hand their work to that loop and wait for the answer, so they
are safe to call from any number of threads at once. The caller's recursion
depth travels with each call (a sync handler that emits carries its event's
depth + 1, as an async one does).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any, Final, TypeVar

from bus._client import Bus, Subscription
from bus._core import depth as _depth
from bus._core.decisions import CONTINUE, Decision
from bus._core.envelope import Event
from bus._core.errors import BusClosedError, SyncCallError
from bus._middleware.kernel.asking import Asked

T = TypeVar("T")

#: A synchronous event handler; SyncBus runs it on a worker thread, never on the loop.
SyncEventHandler = Callable[[Event], None]

#: How long ``close()`` waits for the loop thread to finish after the Bus closed.
_JOIN_S: Final = 10.0

_OPEN: weakref.WeakSet[SyncBus] = weakref.WeakSet()


class SyncSubscription:
    """A subscription made through a SyncBus; ``unsubscribe()`` from any thread."""

    def __init__(self, owner: SyncBus, sub: Subscription) -> None:
        self._owner = owner
        self._sub = sub

    @property
    def pattern(self) -> str:
        return self._sub.pattern

    def unsubscribe(self) -> None:
        """Stop delivery and let the handlers in flight finish (bounded, as ``Subscription.unsubscribe``)."""
        self._owner._call(self._sub.unsubscribe(), None)


def _ask_wait(asked: Asked, timeout: float | None) -> float | None:
    """How long a call held by ``asked`` is waited for: until its deadline, then ``timeout`` more for its expiry."""
    if timeout is None:
        return None
    return max(0.0, asked.deadline - time.time()) + timeout


class SyncBus:
    """A Bus for synchronous code: ``emit``, ``intercept``, ``subscribe`` from any thread.

    ``SyncBus(servers, **options)`` takes what :class:`bus._client.Bus` takes and
    connects before returning. ``timeout`` bounds each call's wait (None: wait
    as long as the Bus takes; intercept is bounded by its handlers' timeouts, and a call held
    by an ask by the ask's deadline).
    Calling it from a handler running on its own loop would wait for itself:
    that is refused with :class:`bus._core.errors.SyncCallError`.
    """

    def __init__(self, servers: str | list[str] | None = None, *, timeout: float | None = 30.0, **options: Any) -> None:
        self._timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="hookbus-sync", daemon=True)
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread.start()
        try:
            self.bus: Bus = self._call(self._open(servers, options), None)
        except BaseException:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_JOIN_S)
            if not self._thread.is_alive():
                self._loop.close()
            raise
        _OPEN.add(self)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _open(self, servers: str | list[str] | None, options: dict[str, Any]) -> Bus:
        return await Bus(servers, **options).start()

    def _call(self, coro: Coroutine[Any, Any, T], depth: int | None, timeout: float | bool | None = True) -> T:
        """Run ``coro`` on the loop (at ``depth`` when given) and wait for its result in this thread
        (``timeout`` seconds; True: the SyncBus's own)."""
        wait = self._timeout if timeout is True else timeout
        if self._on_loop():
            coro.close()
            raise SyncCallError("a SyncBus call from its own loop thread would wait for itself: await the Bus")
        with self._close_lock:  # never submit to a loop that close() is stopping
            if self._closed:
                coro.close()
                raise BusClosedError("SyncBus is closed")
            future = asyncio.run_coroutine_threadsafe(coro if depth is None else _at(depth, coro), self._loop)
        try:
            return future.result(wait)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise SyncCallError(f"the Bus did not answer within {wait}s") from None

    def _on_loop(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def emit(self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None) -> bool:
        """:meth:`bus._client.Bus.emit`, waited for: True if it went out, False if dropped."""
        return self._call(self.bus.emit(subject, payload, session_id), _depth.current_depth())

    def intercept(self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None) -> Decision:
        """:meth:`bus._client.Bus.intercept`, waited for: Continue(), Cancel(reason) or Patch(payload).

        A stage nobody declared answers Continue() in the calling thread, as the
        Bus does without a network round trip: no hand-over to the loop either
        (the chains are read as the loop last left them).
        """
        view = self.bus.middleware.view
        if view is not None and stage not in view.chains and not self._closed and not self._on_loop():
            return CONTINUE
        depth = _depth.current_depth()
        first = self._call(self.bus.intercept(stage, payload, ctx, hold=False), depth)
        if not isinstance(first, Asked):
            return first
        # Held by an ask: the wait is the ask's deadline (plus the time its expiry takes), not ``timeout``.
        return self._call(self.bus.answer(first.id), depth, _ask_wait(first, self._timeout))

    def subscribe(self, pattern: str, handler: SyncEventHandler, queue: str | None = None) -> SyncSubscription:
        """Call ``handler(event)`` on a worker thread for each event matching ``pattern``.

        The handler runs at the event's depth + 1, so what it emits through
        this SyncBus is counted against the recursion limit.
        """

        async def on_event(event: Event) -> None:
            await asyncio.to_thread(handler, event)  # the depth set by the subscription travels in the context

        sub = self._call(self.bus.subscribe(pattern, on_event, queue), None)
        return SyncSubscription(self, sub)

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float | bool | None = True) -> T:
        """Run any coroutine on this SyncBus's loop (for example one using ``self.bus``) and wait for it
        (``timeout`` seconds, None: as long as it takes; by default the SyncBus's own timeout)."""
        return self._call(coro, _depth.current_depth(), timeout)

    def flush(self, timeout: float = 5.0) -> None:
        """:meth:`bus._client.Bus.flush`, waited for."""
        self._call(self.bus.flush(timeout), None)

    def close(self) -> None:
        """Close the Bus (handlers finish, events flush), cancel the loop's other tasks, stop the thread. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._thread.is_alive():
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(2 * _JOIN_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_JOIN_S)
            if not self._thread.is_alive():
                self._loop.close()
            _OPEN.discard(self)

    async def _shutdown(self) -> None:
        """Close the Bus, then cancel what else still runs on the loop (tasks started through ``run``)."""
        await self.bus.close()
        current = asyncio.current_task()
        rest = [task for task in asyncio.all_tasks() if task is not current]
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=_JOIN_S)

    def __enter__(self) -> SyncBus:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


async def _at(depth: int, coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` with the caller's recursion depth (each call runs in a task of its own)."""
    _depth.set_depth(depth)
    return await coro


@atexit.register
def _close_all() -> None:
    """Flush what SyncBuses still hold when the interpreter exits (their thread is a daemon)."""
    for sync_bus in list(_OPEN):
        sync_bus.close()
