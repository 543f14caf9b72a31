"""The recursion-depth counter: through handlers, spawned tasks, `hookbus emit`, and the drop at the limit."""

from __future__ import annotations

import asyncio

from bus import Bus, Event
from bus._core.depth import depth_from_env
from bus.testing import EventRecorder
from tests.conftest import run_cli
from tests.support.waiting import barrier, is_barrier, wait_until, without_barriers


async def test_handler_emits_carry_depth_plus_one(bus: Bus) -> None:
    rec = EventRecorder()

    async def relay(event: Event) -> None:
        await bus.emit("eva.custom.second", {"from": event.id})

    await bus.subscribe("eva.custom.first", relay)
    await bus.subscribe("eva.custom.second", rec)
    await bus.flush()
    await bus.emit("eva.custom.first", {})
    [event] = await rec.wait_for(1)
    assert event.depth == 1


async def test_tasks_spawned_by_a_handler_inherit_depth(bus: Bus) -> None:
    rec = EventRecorder()
    spawned: list[asyncio.Task[None]] = []

    async def later() -> None:
        await asyncio.sleep(0.01)  # the scenario: emit after the handler returned, from the task it spawned
        await bus.emit("eva.custom.spawned", {})

    def spawn(event: Event) -> None:
        spawned.append(asyncio.get_running_loop().create_task(later()))

    await bus.subscribe("eva.custom.parent", spawn)
    await bus.subscribe("eva.custom.spawned", rec)
    await bus.flush()
    await bus.emit("eva.custom.parent", {})
    await bus.emit("eva.custom.parent", {})
    events = await rec.wait_for(2)
    assert [e.depth for e in events] == [1, 1]


async def run_loop(bus: Bus, subject: str) -> list[int]:
    """Start an emit loop on ``subject``; after its drop at the limit, the depths of every event that arrived."""
    seen = EventRecorder()

    async def again(event: Event) -> None:
        if not is_barrier(event):
            await bus.emit(subject, {})

    await bus.subscribe(subject, again)
    await bus.subscribe(subject, seen)
    await bus.flush()
    before = bus.stats.dropped["depth"]
    await bus.emit(subject, {})
    await wait_until(lambda: bus.stats.dropped["depth"] > before, 10, "the drop at the limit")
    await barrier(bus, subject, seen)  # whatever the loop sent before the drop is in now
    assert bus.stats.dropped["depth"] == before + 1
    return [event.depth for event in without_barriers(seen.events)]


async def test_a_loop_stops_at_the_limit_and_counts_the_drop(bus: Bus) -> None:
    assert await run_loop(bus, "eva.custom.loop") == list(range(8))


async def test_max_depth_is_configurable(nats_url: str) -> None:
    async with Bus(nats_url, max_depth=2) as bus:
        assert await run_loop(bus, "eva.custom.short") == [0, 1]


def test_depth_from_env() -> None:
    assert depth_from_env({}) == 0
    assert depth_from_env({"HOOKBUS_DEPTH": "3"}) == 3


async def test_cli_emit_reads_hookbus_depth(bus: Bus, nats_url: str) -> None:
    rec = EventRecorder()
    await bus.subscribe("eva.custom.from_shell", rec)
    await bus.flush()
    done = await asyncio.to_thread(
        run_cli, "emit", "eva.custom.from_shell", '{"x": 1}', env={"NATS_URL": nats_url, "HOOKBUS_DEPTH": "5"}
    )
    assert done.returncode == 0, done.stderr
    [event] = await rec.wait_for(1)
    assert event.depth == 5
    assert event.payload == {"x": 1}


async def test_cli_emit_at_the_limit_is_dropped_silently(bus: Bus, nats_url: str) -> None:
    rec = EventRecorder()
    await bus.subscribe("eva.custom.too_deep", rec)
    await bus.flush()
    done = await asyncio.to_thread(
        run_cli, "emit", "eva.custom.too_deep", "{}", env={"NATS_URL": nats_url, "HOOKBUS_DEPTH": "8"}
    )
    assert done.returncode == 0
    assert done.stderr == ""
    # the CLI flushed before it exited: had it published, its event would be ahead of this barrier
    await barrier(bus, "eva.custom.too_deep", rec)
    assert without_barriers(rec.events) == []


async def test_cli_emit_rejects_a_bad_depth(nats_url: str) -> None:
    done = await asyncio.to_thread(
        run_cli, "emit", "eva.custom.x", "{}", env={"NATS_URL": nats_url, "HOOKBUS_DEPTH": "deep"}
    )
    assert done.returncode == 1
    assert "HOOKBUS_DEPTH='deep' is not a whole number" in done.stderr
