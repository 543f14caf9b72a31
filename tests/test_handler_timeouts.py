"""A handler that bounds its own waits with asyncio.timeout, against a real server.

Handlers run their first step inline (bus.core.eager). asyncio.timeout and
TaskGroup cancel "the current task" later; inline, that was the subscription's
reader, so the timeout stopped the module (or the subscriber) for good: a
fail-closed guard then cancelled every call, a fail-open one let them all by.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bus import Bus, Cancel, Continue, Event, Module
from bus.testing import serving, wait_for_chain
from tests.conftest import unique

from .waiting import wait_until


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
        assert isinstance(decision, Cancel) and "fail-closed and invalid" in decision.reason, decision
        assert await kernel.intercept(stage, {"n": 1}) == Continue()
