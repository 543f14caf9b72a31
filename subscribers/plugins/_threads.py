"""Daemon threads for plugin calls: a pool that grows when every thread is busy and never holds up an exit.

A plugin's call may be left behind, still inside a host call past its time
limit (see :func:`subscribers.plugins.plugin_worker.call_plugin`). A
``ThreadPoolExecutor`` would then have one thread less for every other plugin,
and the interpreter joins its threads at exit: ``hookbus up`` would not end
until the plugin woke. These threads are daemons, and a new one starts
whenever none is idle, so a left-behind call holds only its own thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")
_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None


class DaemonThreads(Executor):
    """Runs each submitted call in an idle daemon thread, or in a new one."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._work: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if kwargs:
            raise TypeError("DaemonThreads.submit takes positional arguments only")
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the plugin threads are shut down")
            if self._idle:
                self._idle -= 1
            else:
                self._started += 1
                threading.Thread(target=self._serve, name=f"{self._name}-{self._started}", daemon=True).start()
            self._work.put((future, fn, args))
        return future

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            if work is None:
                return
            future, fn, args = work
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to the waiter, as an executor does
                    future.set_exception(exc)
            del work, future, fn, args
            with self._lock:
                if self._closed:
                    return
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Idle threads end; busy ones end after their call (never waited for: they are daemons)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._work.put(None)
