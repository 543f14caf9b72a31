"""TaskSet: background tasks held until done, then gone from the set by themselves."""

from __future__ import annotations

import asyncio

import pytest

from bus.core.tasks import TaskSet

from .waiting import wait_until


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
