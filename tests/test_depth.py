"""The recursion-depth counter: through handlers, spawned tasks, `hookbus emit`, and the drop at the limit."""

from __future__ import annotations

import asyncio

from bus import Bus, Event
from bus.depth import depth_from_env
from bus.testing import EventRecorder

from .conftest import run_cli


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
        await asyncio.sleep(0.01)
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


async def test_a_loop_stops_at_the_limit_and_counts_the_drop(bus: Bus) -> None:
    depths: list[int] = []

    async def again(event: Event) -> None:
        depths.append(event.depth)
        await bus.emit("eva.custom.loop", {})

    await bus.subscribe("eva.custom.loop", again)
    await bus.flush()
    before = bus.stats.dropped["depth"]
    await bus.emit("eva.custom.loop", {})
    for _ in range(300):
        if bus.stats.dropped["depth"] > before:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # nothing more may arrive after the drop
    assert depths == list(range(8))
    assert bus.stats.dropped["depth"] == before + 1


async def test_max_depth_is_configurable(nats_url: str) -> None:
    async with Bus(nats_url, max_depth=2) as bus:
        depths: list[int] = []

        async def again(event: Event) -> None:
            depths.append(event.depth)
            await bus.emit("eva.custom.short", {})

        await bus.subscribe("eva.custom.short", again)
        await bus.flush()
        await bus.emit("eva.custom.short", {})
        for _ in range(300):
            if bus.stats.dropped["depth"]:
                break
            await asyncio.sleep(0.01)
        assert depths == [0, 1]


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
    await bus.subscribe("eva.custom.marker", rec)
    await bus.flush()
    done = await asyncio.to_thread(
        run_cli, "emit", "eva.custom.too_deep", "{}", env={"NATS_URL": nats_url, "HOOKBUS_DEPTH": "8"}
    )
    assert done.returncode == 0
    assert done.stderr == ""
    await bus.emit("eva.custom.marker", {})
    await rec.wait_for(1)
    await asyncio.sleep(0.05)
    assert rec.subjects == ["eva.custom.marker"]


async def test_cli_emit_rejects_a_bad_depth(nats_url: str) -> None:
    done = await asyncio.to_thread(
        run_cli, "emit", "eva.custom.x", "{}", env={"NATS_URL": nats_url, "HOOKBUS_DEPTH": "deep"}
    )
    assert done.returncode == 1
    assert "HOOKBUS_DEPTH='deep' is not a whole number" in done.stderr
