"""The Python subscriber SDK against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest

from bus import Bus, Event
from bus.testing import EventRecorder
from subscribers import Subscriber
from tests.support.hooks_support import wait_until


async def test_handlers_get_the_event_and_emit_at_depth_plus_one(nats_url: str, bus: Bus) -> None:
    app = Subscriber("echo")
    seen: list[Event] = []

    @app.on("tool_call")
    async def echo(event: Event, out: Bus) -> None:
        seen.append(event)
        await out.emit("eva.custom.echoed", {"tool": event.payload["tool"]})

    recorder = EventRecorder()
    await bus.subscribe("eva.custom.echoed", recorder)
    await app.start(bus)
    await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})
    echoed = await recorder.wait_for(1)
    assert seen[0].payload == {"tool": "shell"}
    assert (seen[0].depth, echoed[0].depth) == (0, 1)
    await app.stop()


async def test_a_queue_group_splits_events_between_subscribers(nats_url: str, bus: Bus) -> None:
    counts = {"a": 0, "b": 0}

    def make(name: str) -> Subscriber:
        app = Subscriber(name, queue="sdk-split")

        @app.on("eva.custom.work")
        async def work(event: Event, out: Bus) -> None:
            counts[name] += 1

        return app

    async with Bus(nats_url, name="other") as other:
        first, second = make("a"), make("b")
        await first.start(bus)
        await second.start(other)
        for n in range(40):
            await bus.emit("eva.custom.work", {"n": n})
        await wait_until(lambda: counts["a"] + counts["b"] == 40, what="40 handled")
        await first.stop()
        await second.stop()
    assert counts["a"] > 0
    assert counts["b"] > 0


async def test_concurrency_is_bounded_and_stop_drains_in_flight_work(bus: Bus) -> None:
    app = Subscriber("slow", concurrency=2, drain_timeout=10)
    running = 0
    peak = 0
    finished = 0
    release = asyncio.Event()

    @app.on("eva.custom.slow")
    async def slow(event: Event, out: Bus) -> None:
        nonlocal running, peak, finished
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        finished += 1

    await app.start(bus)
    for _ in range(5):
        await bus.emit("eva.custom.slow", {})
    await wait_until(lambda: running == 2, what="two handlers in flight")
    stopping = asyncio.create_task(app.stop())
    await bus.flush()  # a round trip: time for stop() to unsubscribe and return, were it not waiting for the two
    assert not stopping.done()
    release.set()
    await stopping
    assert peak == 2
    assert finished >= 2, "in-flight handlers finished before stop returned"


async def test_stop_cancels_handlers_past_the_drain_bound(bus: Bus) -> None:
    app = Subscriber("stuck", drain_timeout=0.1)
    cancelled = asyncio.Event()
    started = asyncio.Event()

    @app.on("eva.custom.stuck")
    async def stuck(event: Event, out: Bus) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await app.start(bus)
    await bus.emit("eva.custom.stuck", {})
    await asyncio.wait_for(started.wait(), 10)
    await app.stop()
    assert cancelled.is_set()


def test_bad_patterns_and_sync_handlers_fail_at_decoration() -> None:
    app = Subscriber("x")
    with pytest.raises(ValueError, match="invalid subject"):
        app.on("bad pattern!")
    with pytest.raises(TypeError, match="async"):
        app.on("tool_call")(lambda event, bus: None)  # type: ignore[arg-type,return-value]


async def test_serve_runs_until_cancelled(nats_url: str, bus: Bus) -> None:
    app = Subscriber("served", queue="served")
    got = asyncio.Event()

    @app.on("eva.custom.served")
    async def handle(event: Event, out: Bus) -> None:
        got.set()

    task = asyncio.create_task(app.serve(nats_url))
    await wait_until(lambda: len(app._subs) == 1, what="the subscription")
    await bus.emit("eva.custom.served", {})
    await asyncio.wait_for(got.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert app._subs == []
