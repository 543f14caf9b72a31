"""TaskSet: the tasks a component started and has not seen finish, for waiting on or cancelling at close.

asyncio keeps only a weak reference to a task, so a component that starts one
in the background must hold it until it is done; every component did so with
a set and ``add_done_callback(set.discard)``. This is that set, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class TaskSet(set[asyncio.Task[_T]]):
    """A set of running tasks; each leaves the set by itself when it finishes."""

    def keep(self, task: asyncio.Task[_T]) -> asyncio.Task[_T]:
        """Hold ``task`` until it is done; returns it."""
        self.add(task)
        task.add_done_callback(self.discard)
        return task

    def start(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """Run ``coro`` in a task on the running loop and hold it until it is done."""
        return self.keep(asyncio.get_running_loop().create_task(coro))

    async def cancel_all(self) -> None:
        """Cancel every task held and wait until each has ended (what they raise is dropped: they were told to stop)."""
        tasks = list(self)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def stop_if_cancelled() -> None:
    """Raise CancelledError if the running task was asked to stop and an await swallowed the request.

    In Python 3.11 ``asyncio.wait_for`` (under every nats-py request) returns
    the result when it arrives in the same loop pass as the cancel, and the
    cancel is lost; a ``while True`` loop (a heartbeat) then runs on and its
    owner waits for it for ever. Loops call this after each such await.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
