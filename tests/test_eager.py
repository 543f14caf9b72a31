"""Handlers start inline and continue in a task only if they wait (bus.core.eager)."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from bus.core import eager
from bus.core.eager import run_eager, start_eager

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


@pytest.fixture(params=["table", "enter-leave", "task"])
def swap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way bus.core.eager can give the first step its identity: the current-task table, asyncio's
    enter/leave calls, or (where neither exists) a task from the start."""
    if request.param != "table":
        monkeypatch.setattr(eager, "_CURRENT", None)
    if request.param == "task":
        monkeypatch.setattr(eager, "INLINE", False)
    return str(request.param)


async def test_a_timeout_entered_before_the_first_wait_fires_in_the_handler_not_in_its_caller(swap: str) -> None:
    """asyncio.timeout cancels "the current task": inline, that must be the handler's own, not the caller's."""
    seen: list[str] = []

    async def bounded() -> None:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()  # the scenario: a wait that outlasts the handler's own timeout
        except TimeoutError:
            seen.append("timed out")

    task = start_eager(bounded())
    assert task is not None
    await task
    assert seen == ["timed out"]
    assert asyncio.current_task() is not None and asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0.02)  # past the timeout again: nothing left to cancel the caller with
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_task_group_opened_inline_belongs_to_the_handler(swap: str) -> None:
    async def child() -> None:
        await asyncio.sleep(0)  # the scenario: a child that waits, then fails
        raise KeyError("child")

    async def grouped() -> str:
        outcome = "group ended"
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(child())
                await asyncio.Event().wait()  # cancelled by the group when the child fails
        except* KeyError:
            outcome = "group failed"
        return outcome

    finished, task = run_eager(grouped())
    assert not finished
    assert await task == "group failed"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_the_current_task_inline_is_the_handlers_own(swap: str) -> None:
    outer = asyncio.current_task()
    seen: list[object] = []

    async def looks() -> None:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)  # the scenario: after a wait, the task that drives it
        seen.append(asyncio.current_task())

    task = start_eager(looks())
    assert asyncio.current_task() is outer  # the caller's task is back once the first step ends
    assert task is not None
    await task
    inline, driven = seen
    assert inline is not outer and inline is not None
    assert driven is task
    assert inline.get_name() == task.get_name()  # type: ignore[attr-defined]  # the stand-in answers for it
    assert isinstance(inline, eager.EagerTask) is (swap != "task")
