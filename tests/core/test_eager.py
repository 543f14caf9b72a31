"""Handlers start inline and continue in a task only if they wait (bus._runtime.eager)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import sys
from typing import Any

import pytest

from bus._runtime import eager
from bus._runtime.eager import run_bounded, run_eager, start_eager

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


@pytest.fixture(params=eager.modes_available())
def swap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every way bus._runtime.eager starts a coroutine on this Python: asyncio's eager start (3.12 and later),
    the first step inline in its own task (3.11), and an ordinary task started by the loop (everywhere)."""
    monkeypatch.setattr(eager, "MODE", request.param)
    return str(request.param)


def test_the_best_mode_of_this_python_is_the_default() -> None:
    """3.12 and later: asyncio's public eager start; 3.11: the inline step; no Python falls to tasks."""
    expected = "eager" if sys.version_info >= (3, 12) else "inline"
    assert eager.modes_available()[0] == expected
    assert expected == eager.MODE or os.environ.get(eager.SWITCH_ENV) == "off"


async def test_a_timeout_entered_before_the_first_wait_fires_in_the_handler_not_in_its_caller(swap: str) -> None:
    """asyncio.timeout cancels "the current task": inline, that must be the handler's own, not the caller's."""
    seen: list[str] = []
    ended = asyncio.Event()

    async def bounded() -> None:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()  # the scenario: a wait that outlasts the handler's own timeout
        except TimeoutError:
            seen.append("timed out")
        ended.set()

    task = start_eager(bounded())
    assert task is not None
    # The caller waits on something else, as a subscription's reader does: a timeout aimed at the
    # caller would cancel this wait (CancelledError here) instead of the handler's.
    await ended.wait()
    assert seen == ["timed out"]
    await task
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_task_group_opened_inline_belongs_to_the_handler(swap: str) -> None:
    async def child() -> None:
        await asyncio.sleep(0)  # the scenario: a child that waits, then fails
        raise KeyError("child")

    ended = asyncio.Event()

    async def grouped() -> str:
        outcome = "group ended"
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(child())
                await asyncio.Event().wait()  # cancelled by the group when the child fails
        except* KeyError:
            outcome = "group failed"
        ended.set()
        return outcome

    finished, task = run_eager(grouped())
    assert not finished
    await ended.wait()  # a group cancelling the caller instead would raise CancelledError here
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
    assert inline is task and driven is task  # one task from the first step to the last


async def test_a_timeout_already_spent_when_entered_fires_inside_the_handler(swap: str) -> None:
    """asyncio.timeout(0) cancels before the handler's task has had a turn: the handler still sees it."""
    seen: list[str] = []

    async def spent() -> None:
        try:
            async with asyncio.timeout(0):
                await asyncio.Event().wait()  # the scenario: a wait whose budget is already spent
        except TimeoutError:
            seen.append("timed out")
        finally:
            seen.append("finally ran")

    task = start_eager(spent())
    assert task is not None
    await task
    assert seen == ["timed out", "finally ran"]


async def test_a_handler_cancelling_itself_then_waiting_sees_the_cancel(swap: str) -> None:
    seen: list[str] = []

    async def self_cancel() -> None:
        current = asyncio.current_task()
        assert current is not None
        current.cancel()
        try:
            await asyncio.Event().wait()  # the scenario: the wait the cancel must reach
        except asyncio.CancelledError:
            seen.append("cancelled where it waited")
            raise

    task = start_eager(self_cancel())
    assert task is not None
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled where it waited"] and task.cancelled()


async def test_a_handler_that_finishes_inline_after_cancelling_itself_ends_cancelled(swap: str) -> None:
    async def quits() -> str:
        current = asyncio.current_task()
        assert current is not None
        current.cancel()
        return "finished"

    if swap == "task":  # started by the loop, the cancel reaches it before it runs at all
        task = start_eager(quits())
        assert task is not None
        with pytest.raises(asyncio.CancelledError):
            await task
        return
    with pytest.raises(asyncio.CancelledError):
        run_eager(quits())


async def test_done_callbacks_added_inline_are_called(swap: str) -> None:
    called: list[object] = []

    async def adds() -> None:
        current = asyncio.current_task()
        assert current is not None
        current.add_done_callback(called.append)

    task = start_eager(adds())
    if task is not None:
        await task
    await wait_until_true(lambda: len(called) == 1)
    assert asyncio.isfuture(called[0]) and called[0].done()


async def test_a_context_variable_set_inline_stays_in_the_handlers_context(swap: str) -> None:
    async def sets() -> None:
        VAR.set("set by the handler")

    async def sets_then_resets_after_a_wait() -> str:
        token = VAR.set("inner")
        await asyncio.sleep(0)  # the scenario: a token set before the first wait, reset after it
        VAR.reset(token)
        return VAR.get()

    task = start_eager(sets())
    if task is not None:
        await task
    assert VAR.get() == "unset"  # the caller's context is untouched
    finished, value = run_eager(sets_then_resets_after_a_wait())
    result = value if finished else await value
    assert result == "unset"


async def wait_until_true(condition: Any) -> None:
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)  # the scenario: the loop's next turns, where done callbacks run
    raise AssertionError("condition never held")


async def test_run_bounded_returns_what_the_coroutine_returns_through_its_waits() -> None:
    loop = asyncio.get_running_loop()

    async def waits() -> int:
        await asyncio.sleep(0)  # the scenario: a bare yield, then a future
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon(future.set_result, 5)
        return await future + 1

    async def quick() -> str:
        return "inline"

    assert await run_bounded(waits(), 1.0) == 6
    assert await run_bounded(quick(), 1.0) == "inline"


async def test_run_bounded_times_out_a_wait_and_the_coroutine_sees_the_cancel() -> None:
    seen: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.Event().wait()  # the scenario: a wait past the bound
        except asyncio.CancelledError:
            seen.append("cancelled inside")
            raise

    with pytest.raises(eager.HandlerTimedOut):
        await run_bounded(slow(), 0.01)
    await wait_until_true(lambda: seen == ["cancelled inside"])  # its task is cancelled; the caller went on
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_run_bounded_lets_an_inner_timeout_be_the_coroutines_own() -> None:
    async def bounded() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()  # the scenario: the coroutine's own, shorter bound
        except TimeoutError:
            return "own timeout"
        return "finished"

    assert await run_bounded(bounded(), 5.0) == "own timeout"


class Abort(BaseException):
    """A BaseException of its own kind, as some libraries raise to unwind."""


@pytest.mark.parametrize("raised", [Abort("unwind"), KeyboardInterrupt(), SystemExit(3)], ids=repr)
async def test_a_base_exception_inline_comes_back_as_the_handlers_failure(swap: str, raised: BaseException) -> None:
    """asyncio re-raises KeyboardInterrupt and SystemExit out of a task's step (and so out of the event loop):
    from a handler, they and every other BaseException are its failure, a HandlerExit, never its caller's."""

    async def aborts() -> None:
        raise raised

    if swap == "task":
        finished, task = run_eager(aborts())
        assert not finished
        with pytest.raises(eager.HandlerExit) as caught:
            await task
    else:
        with pytest.raises(eager.HandlerExit) as caught:
            run_eager(aborts())
    assert caught.value.raised is raised and type(raised).__name__ in str(caught.value)


@pytest.mark.parametrize("raised", [Abort("unwind"), KeyboardInterrupt(), SystemExit(3)], ids=repr)
async def test_a_base_exception_after_a_wait_fails_the_task_not_the_loop(swap: str, raised: BaseException) -> None:
    async def aborts_later() -> None:
        await asyncio.sleep(0)  # the scenario: raised from the task's later step, on the event loop
        raise raised

    task = start_eager(aborts_later())
    assert task is not None
    with pytest.raises(eager.HandlerExit):
        await task


async def test_run_bounded_reads_every_self_cancel_as_the_handlers_own(swap: str) -> None:
    async def raises_cancel() -> None:
        raise asyncio.CancelledError

    async def cancels_and_returns() -> str:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        return "returned"

    async def cancels_then_waits() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.sleep(0)  # the scenario: the wait the self-cancel reaches

    async def waits_then_cancels() -> None:
        await asyncio.sleep(0)  # the scenario: a self-cancel after the first wait
        raise asyncio.CancelledError

    for handler in (raises_cancel, cancels_and_returns, cancels_then_waits, waits_then_cancels):
        with pytest.raises(eager.HandlerCancelled):
            await run_bounded(handler(), 5.0)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_run_bounded_goes_on_past_a_handler_that_swallows_its_cancel(swap: str) -> None:
    stubborn: list[str] = []
    release = asyncio.Event()

    async def swallows() -> None:
        try:
            await asyncio.Event().wait()  # the scenario: a wait past the bound
        except asyncio.CancelledError:
            stubborn.append("swallowed")
        await release.wait()  # goes on as if nothing happened

    with pytest.raises(eager.HandlerTimedOut):
        await run_bounded(swallows(), 0.01)
    await wait_until_true(lambda: stubborn == ["swallowed"])
    assert len(eager._OUTLIVED) == 1  # held while it unwinds, then let go
    release.set()
    await wait_until_true(lambda: not eager._OUTLIVED)


async def test_run_bounded_keeps_a_timeout_the_handler_left_uncaught_apart_from_its_own(swap: str) -> None:
    async def own_timeout() -> None:
        async with asyncio.timeout(0):
            await asyncio.Event().wait()  # the scenario: the handler's own, spent bound, left uncaught

    with pytest.raises(TimeoutError) as caught:
        await run_bounded(own_timeout(), 5.0)
    assert not isinstance(caught.value, eager.HandlerTimedOut)


async def test_cancelling_the_caller_of_run_bounded_cancels_the_handler(swap: str) -> None:
    cleaned: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()  # the scenario: waits until its caller stops
        finally:
            cleaned.append("handler unwound")

    caller = asyncio.get_running_loop().create_task(run_bounded(forever(), 60.0))
    await asyncio.sleep(0.01)  # the scenario: the caller is waiting on the handler
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await wait_until_true(lambda: cleaned == ["handler unwound"])


async def test_an_exception_inline_reaches_the_done_callbacks_the_handler_added(swap: str) -> None:
    called: list[asyncio.Future[Any]] = []

    async def adds_then_fails() -> None:
        current = asyncio.current_task()
        assert current is not None
        current.add_done_callback(called.append)
        raise ValueError("after adding")

    if swap == "task":
        finished, task = run_eager(adds_then_fails())
        assert not finished
        with pytest.raises(ValueError, match="after adding"):
            await task
    else:
        with pytest.raises(ValueError, match="after adding"):
            run_eager(adds_then_fails())
    await wait_until_true(lambda: len(called) == 1)
    assert isinstance(called[0].exception(), ValueError)


async def test_a_handler_cancelling_itself_then_yielding_bare_sees_the_cancel_at_its_next_step(swap: str) -> None:
    seen: list[str] = []

    async def cancels_then_yields() -> None:
        current = asyncio.current_task()
        assert current is not None
        current.cancel()
        try:
            await asyncio.sleep(0)  # the scenario: a bare yield, no future for the cancel to reach
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eager(cancels_then_yields())
    assert task is not None
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"] and task.cancelled()


async def test_a_handler_that_waits_is_a_suspended_coroutine_to_whoever_looks_at_its_task(swap: str) -> None:
    """What debuggers, asyncio's repr and anyio read of a task: its coroutine, suspended at its wait."""
    gate = asyncio.Event()

    async def waits_at_the_gate() -> str:
        await gate.wait()
        return "through"

    task = start_eager(waits_at_the_gate())
    assert task is not None
    await asyncio.sleep(0)  # the scenario: started by the loop ("task"), its first step runs in this turn
    coro = task.get_coro()
    assert asyncio.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_SUSPENDED  # type: ignore[arg-type]
    assert "pending" in repr(task)
    gate.set()
    assert await task == "through"
