"""Handlers that bound their own waits, use anyio, set context variables, or cancel themselves; real server.

Handlers run their first step inline (bus._runtime.eager). asyncio.timeout and
TaskGroup cancel "the current task" later; inline, that was the subscription's
reader, so the timeout stopped the module (or the subscriber) for good: a
fail-closed guard then cancelled every call, a fail-open one let them all by.
anyio's cancel scopes (httpx, the openai client) refused to run inline at all,
and a context variable one handler set was seen by the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from typing import Any

import anyio
import pytest

from bus import Bus, Cancel, Continue, Event, Module, Patch
from bus._transport.internals import use_internals
from bus.testing import serving, wait_for_chain
from tests.conftest import unique
from tests.support.waiting import wait_until


async def bounded_wait() -> str:
    try:
        async with asyncio.timeout(0.05):
            await asyncio.sleep(5)  # the scenario: a lookup slower than the handler's own bound
    except TimeoutError:
        return "timed out inside"
    return "finished"


async def test_a_guard_bounding_its_own_wait_answers_every_call(kernel: Bus, nats_url: str) -> None:
    mod, stage = Module(unique("bounded")), f"custom.{unique('bounded')}"

    @mod.stage(stage, fail_closed=True, timeout=3)
    async def guard(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel(await bounded_wait())

    @mod.stage(f"{stage}.other", timeout=3)
    async def other(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.guard"])
        for _ in range(3):
            decision = await kernel.intercept(stage, {"n": 1})
            assert decision == Cancel("timed out inside", f"{mod.name}.guard"), decision
        await asyncio.sleep(0.1)  # the scenario: past every handler's inner timeout, the module still answers
        await wait_for_chain(kernel, f"{stage}.other", [f"{mod.name}.other"])
        assert await kernel.intercept(f"{stage}.other", {"n": 2}) == Continue()


async def test_a_subscriber_bounding_its_own_wait_keeps_receiving(bus: Bus) -> None:
    subject = f"eva.custom.{unique('bounded')}"
    results: list[str] = []

    async def handler(event: Event) -> None:
        results.append(await bounded_wait())

    await bus.subscribe(subject, handler)
    await bus.flush()
    for index in range(3):
        await bus.emit(subject, {"n": index})
        await wait_until(lambda n=index: len(results) > n, what=f"event {index} handled")
    await asyncio.sleep(0.1)  # the scenario: every inner timeout has fired; the subscription must still deliver
    await bus.emit(subject, {"n": 3})
    await wait_until(lambda: len(results) == 4, what="the event after the timeouts handled")
    assert results == ["timed out inside"] * 4


async def test_a_handler_cancelling_itself_inline_fails_its_request_not_the_module(kernel: Bus, nats_url: str) -> None:
    mod, stage = Module(unique("selfcancel")), f"custom.{unique('selfcancel')}"

    @mod.stage(stage, fail_closed=True, timeout=3)
    async def guard(stage: str, payload: dict[str, Any]) -> Continue:
        if payload["n"] == 0:
            raise asyncio.CancelledError  # the scenario: a handler that cancels itself before any wait
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.guard"])
        decision = await kernel.intercept(stage, {"n": 0})
        assert isinstance(decision, Cancel) and "fail-closed and failed" in decision.reason, decision
        assert await kernel.intercept(stage, {"n": 1}) == Continue()


async def anyio_bounded_wait() -> str:
    """What httpx and the openai client do inside: an anyio cancel scope around a wait."""
    try:
        with anyio.fail_after(0.05):
            await anyio.sleep(5)  # the scenario: a request slower than the handler's own bound
    except TimeoutError:
        return "anyio timed out inside"
    return "finished"


async def test_a_guard_using_anyio_before_its_first_wait_answers(kernel: Bus, nats_url: str) -> None:
    mod, stage = Module(unique("anyio")), f"custom.{unique('anyio')}"

    @mod.stage(stage, fail_closed=True, timeout=3)
    async def guard(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel(await anyio_bounded_wait())

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.guard"])
        for _ in range(2):
            assert await kernel.intercept(stage, {}) == Cancel("anyio timed out inside", f"{mod.name}.guard")


async def test_subscribers_using_anyio_and_context_variables_keep_to_themselves(bus: Bus) -> None:
    user: contextvars.ContextVar[str | None] = contextvars.ContextVar("user", default=None)
    seen: list[str] = []

    async def sets_a_user(event: Event) -> None:
        user.set("alice")  # a handler-local "current user", as in any task

    async def reads_the_user(event: Event) -> None:
        seen.append(f"user={user.get()}")

    async def uses_anyio(event: Event) -> None:
        seen.append(await anyio_bounded_wait())

    subject = f"eva.custom.{unique('ctx')}"
    await bus.subscribe(f"{subject}.a", sets_a_user)
    await bus.subscribe(f"{subject}.b", reads_the_user)
    await bus.subscribe(f"{subject}.c", uses_anyio)
    await bus.flush()
    for suffix in ("a", "b", "c"):
        await bus.emit(f"{subject}.{suffix}", {})
        await bus.flush()
    await wait_until(lambda: len(seen) == 2, what="both handlers")
    assert sorted(seen) == ["anyio timed out inside", "user=None"]


@pytest.mark.parametrize("internals", [False, True], ids=["public-api", "big-replies"])
async def test_replies_that_wait_to_be_sent_hold_no_handler_slot(nats_url: str, internals: bool) -> None:
    """Without the internals every reply waits to be sent; with them, replies over the flush threshold do."""
    use_internals(internals)
    try:
        mod, stage = Module(unique("slots"), concurrency=1), f"custom.{unique('slots')}"
        blob = "x" * (300 * 1024 if internals else 10)

        @mod.stage(stage, fail_closed=True, timeout=2)
        async def guard(stage: str, payload: dict[str, Any]) -> Patch:
            return Patch({"blob": blob})  # answered inline: the handler never waits

        async with Bus(nats_url, trust_new=True) as kernel, serving(mod, nats_url):
            await wait_for_chain(kernel, stage, [f"{mod.name}.guard"])
            decisions = await asyncio.gather(*(kernel.intercept(stage, {"n": n}) for n in range(4)))
        assert all(isinstance(decision, Patch) for decision in decisions), decisions
    finally:
        use_internals(None)


class Abort(BaseException):
    """A BaseException that is not an Exception, raised before the handler's first wait."""


async def test_a_handler_raising_a_base_exception_inline_fails_its_call_not_the_reader(
    kernel: Bus, nats_url: str, bus: Bus
) -> None:
    mod, stage = Module(unique("aborts")), f"custom.{unique('aborts')}"

    @mod.stage(stage, fail_closed=True, timeout=3)
    async def guard(stage: str, payload: dict[str, Any]) -> Continue:
        if payload["n"] == 0:
            raise Abort("unwind")
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.guard"])
        decision = await kernel.intercept(stage, {"n": 0})
        assert isinstance(decision, Cancel) and "fail-closed" in decision.reason, decision
        assert await kernel.intercept(stage, {"n": 1}) == Continue()

    subject = f"eva.custom.{unique('aborts')}"
    got: list[int] = []

    async def handler(event: Event) -> None:
        if event.payload["n"] == 0:
            raise Abort("unwind")
        got.append(event.payload["n"])

    await bus.subscribe(subject, handler)
    await bus.flush()
    await bus.emit(subject, {"n": 0})
    await bus.emit(subject, {"n": 1})
    await wait_until(lambda: got == [1], what="the event after the abort")
    await wait_until(lambda: bus.stats.handler_errors[subject] == 1, what="the abort counted")


async def _fault(kind: str) -> None:
    """Each way a handler can turn on its own task or its caller, before or after its first wait."""
    me = asyncio.current_task()
    assert me is not None
    if kind.endswith("-late"):
        await asyncio.sleep(0)  # the scenario: the same fault after the first wait, in the handler's task
        kind = kind.removesuffix("-late")
    if kind == "raise-cancelled":
        raise asyncio.CancelledError
    if kind == "cancel-and-return":
        me.cancel()
        return
    if kind == "cancel-and-wait":
        me.cancel()
        await asyncio.sleep(1)  # the scenario: the wait the self-cancel reaches
    if kind == "spent-timeout":
        async with asyncio.timeout(0):  # left uncaught
            await asyncio.sleep(1)  # the scenario: a wait whose bound is already spent
    if kind == "keyboard-interrupt":
        raise KeyboardInterrupt
    if kind == "system-exit":
        raise SystemExit(2)


FAULTS = [
    "raise-cancelled", "cancel-and-return", "cancel-and-wait", "spent-timeout", "keyboard-interrupt", "system-exit",
]  # fmt: skip


@pytest.mark.timeout(40)  # unanswered, the call would wait out the handler's 60 s bound: failed by this
@pytest.mark.parametrize("fault", [*FAULTS, *(f"{kind}-late" for kind in FAULTS)])
async def test_no_fault_of_one_handler_stops_its_module_or_waits_for_the_kernels_timeout(
    kernel: Bus, nats_url: str, fault: str
) -> None:
    """A fail-closed guard module with one broken handler: the broken call is answered at once as that
    handler's failure (never the kernel's timeout: the kernel's bound is a minute), and the module's other
    handler, and the broken one's next call, keep answering."""
    mod, stage = Module(unique("faults")), f"custom.{unique('faults')}"

    @mod.stage(stage, fail_closed=True, timeout=60)
    async def broken(stage: str, payload: dict[str, Any]) -> Continue:
        if payload.get("fault"):
            await _fault(payload["fault"])
        return Continue()

    @mod.stage(stage, fail_closed=True, timeout=60, after=[f"{mod.name}.broken"])
    async def sound(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "checked": True})

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.broken", f"{mod.name}.sound"])
        decision = await kernel.intercept(stage, {"fault": fault})
        assert isinstance(decision, Cancel), decision
        assert f"{mod.name}.broken is fail-closed and failed" in decision.reason, decision
        for _ in range(3):
            assert await kernel.intercept(stage, {"n": 1}) == Patch({"n": 1, "checked": True})


async def test_a_handler_swallowing_its_cancel_is_timed_out_and_its_module_goes_on(kernel: Bus, nats_url: str) -> None:
    mod, stage = Module(unique("swallows")), f"custom.{unique('swallows')}"
    release = asyncio.Event()

    @mod.stage(stage, fail_closed=True, timeout=0.2)
    async def stubborn(stage: str, payload: dict[str, Any]) -> Continue:
        if payload.get("stuck"):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(30)  # the scenario: a wait past its bound, whose cancel it swallows
            await release.wait()
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.stubborn"])
        decision = await kernel.intercept(stage, {"stuck": True})
        assert isinstance(decision, Cancel) and "fail-closed and timeout" in decision.reason, decision
        assert await kernel.intercept(stage, {}) == Continue()
        release.set()
