"""Handlers start inline and continue in a task only if they wait (bus.core.eager)."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from bus.core.eager import start_eager

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


async def test_a_handler_that_never_waits_makes_no_task() -> None:
    log: list[str] = []

    async def quick() -> None:
        log.append("ran")

    assert start_eager(quick()) is None
    assert log == ["ran"]


async def test_an_exception_before_the_first_wait_is_raised_inline() -> None:
    async def broken() -> None:
        raise ValueError("early")

    with pytest.raises(ValueError, match="early"):
        start_eager(broken())


async def test_waiting_handler_continues_in_a_task_with_its_context() -> None:
    gate = asyncio.Event()
    seen: list[str] = []

    async def waits() -> None:
        seen.append(VAR.get())
        await gate.wait()
        await asyncio.sleep(0)  # the scenario: a bare yield and a timer, the waits a handler does
        await asyncio.sleep(0.001)
        seen.append(VAR.get())

    token = VAR.set("handler")
    task = start_eager(waits())
    VAR.reset(token)
    assert task is not None and not task.done()
    gate.set()
    await task
    assert seen == ["handler", "handler"]


async def test_an_exception_after_a_wait_fails_the_task() -> None:
    async def late() -> None:
        await asyncio.sleep(0)  # the scenario: fail after a wait, in the task
        raise KeyError("late")

    task = start_eager(late())
    assert task is not None
    with pytest.raises(KeyError):
        await task


async def test_cancelling_the_task_reaches_the_handler() -> None:
    cleaned: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)  # the scenario: waits until cancelled
        finally:
            cleaned.append("finally")

    task = start_eager(forever())
    assert task is not None
    await asyncio.sleep(0)  # one loop turn: the task takes over the coroutine's wait
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally"]


async def test_results_of_awaited_futures_reach_the_handler() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    got: list[int] = []

    async def reads() -> None:
        got.append(await fut)

    task = start_eager(reads())
    assert task is not None
    fut.set_result(42)
    await task
    assert got == [42]


async def test_failed_futures_raise_inside_the_handler() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    caught: list[str] = []

    async def reads() -> None:
        try:
            await fut
        except RuntimeError as exc:
            caught.append(str(exc))

    task = start_eager(reads())
    assert task is not None
    fut.set_exception(RuntimeError("nope"))
    await task
    assert caught == ["nope"]
