"""TaskSet: background tasks held until done, then gone from the set by themselves."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from bus._runtime.tasks import TaskSet, stop_if_cancelled
from tests.support.waiting import wait_until


async def test_a_started_task_is_held_until_it_finishes_then_leaves() -> None:
    tasks: TaskSet[str] = TaskSet()
    gate = asyncio.Event()

    async def job() -> str:
        await gate.wait()
        return "done"

    task = tasks.start(job())
    assert tasks == {task}
    gate.set()
    assert await task == "done"
    await wait_until(lambda: not tasks, 5, "the finished task to leave the set")


async def test_a_failed_or_cancelled_task_leaves_too() -> None:
    tasks: TaskSet[object] = TaskSet()

    async def fail() -> None:
        raise ValueError("boom")

    failed = tasks.start(fail())
    cancelled = tasks.start(asyncio.Event().wait())
    cancelled.cancel()
    with pytest.raises(ValueError, match="boom"):
        await failed
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await wait_until(lambda: not tasks, 5, "both tasks to leave the set")


async def test_a_loop_whose_cancel_an_await_swallowed_still_stops() -> None:
    """asyncio.wait_for in Python 3.11 can return a result that arrived with the cancel; the loop must end anyway."""
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            beats += 1
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)  # the reply is already there when the cancel lands ...
            await asyncio.wait_for(done, 5)  # ... so wait_for may hand back the result and drop the cancel
            if beats == 1:
                me = asyncio.current_task()
                assert me is not None
                me.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)  # swallowed, as wait_for does in that race
            stop_if_cancelled()
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(heartbeat())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert beats == 1
