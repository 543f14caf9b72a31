"""Soak: 100k events and 10k intercepts through a subscriber and a module process, with faults injected.

Faults: the module process is killed (a handler crash) and started again, and
the server restarts. Afterwards: nothing died, memory is back in its band,
and the accounting adds up. HOOKBUS_SOAK_SCALE=10 runs ten times as much.
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

from bench.common import rss_mib
from bus import Bus, Event, NatsServer, Stage
from tests.support.mwproc import module_process
from tests.support.waiting import barrier_payload, is_barrier, probe_until, wait_until

SCALE = int(os.environ.get("HOOKBUS_SOAK_SCALE", "1"))
EVENTS = 100_000 * SCALE
INTERCEPTS = 10_000 * SCALE
#: RSS growth allowed after the run, over the baseline taken after warm-up (MiB).
MEMORY_BAND = 60


async def test_soak_with_faults(own_server: NatsServer) -> None:
    url = own_server.url
    delivered = barriers = 0

    def count(event: Event) -> None:
        nonlocal delivered, barriers
        if is_barrier(event):
            barriers += 1
        else:
            delivered += 1

    async with Bus(url, name="soak-agent", managed=["soak.h"]) as agent, Bus(url, name="soak-worker") as worker:
        await worker.subscribe("eva.custom.soak", count, pending_msgs=200_000)
        await worker.flush()
        with module_process(url, "soak", Stage.TOOL_CALL, "--heartbeat", "0.5") as first:
            await agent.middleware.start()
            view = agent.middleware.view
            assert view is not None
            await view.wait_until(lambda: "tool.call" in view.chains, 10)
            # warm up, then take the memory baseline
            for _ in range(2_000):
                await agent.emit("eva.custom.warm", {})
            gc.collect()
            baseline = rss_mib()[0]

            decisions: dict[str, int] = {}
            outage_emits = 0

            async def intercepts() -> None:
                for i in range(INTERCEPTS):
                    decision = await agent.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": str(i)}})
                    kind = type(decision).__name__
                    decisions[kind] = decisions.get(kind, 0) + 1

            async def events() -> None:
                nonlocal outage_emits
                for i in range(EVENTS):
                    await agent.emit("eva.custom.soak", {"i": i, "pad": "x" * 64})
                    if not agent.connected:
                        outage_emits += 1
                    if i % 500 == 0:
                        await asyncio.sleep(0)  # let the subscriber and the faults run

            async def faults(proc: Any) -> None:
                # the scenario's timeline, while the load runs: each fault a while into the run
                await asyncio.sleep(0.5)
                proc.kill()  # the handler process crashes ...
                await asyncio.sleep(0.5)
                with module_process(url, "soak", Stage.TOOL_CALL, "--heartbeat", "0.5") as second:  # ... comes back
                    await asyncio.sleep(0.5)
                    await asyncio.to_thread(own_server.restart)  # then the server restarts
                    await asyncio.sleep(2.0)  # and the module lives on through it
                    assert second.poll() is None, "the module process died"

            await asyncio.gather(intercepts(), events(), faults(first))
            stats = agent.stats
            emitted = stats.emitted["eva.custom.soak"]
            dropped = stats.dropped["disconnected"] + stats.dropped["closed"]
            # Barriers behind the last event, from the same connection, until one arrives: the
            # subscriber has then drained every event that will ever arrive.
            await wait_until(lambda: agent.connected and worker.connected, 30, "both back after the restart")
            await probe_until(
                lambda: agent.emit("eva.custom.soak", barrier_payload()), lambda: barriers, 60, "a barrier"
            )

        received_drops = worker.stats.dropped["slow_consumer"] + worker.stats.dropped["malformed"]
        gc.collect()
        after = rss_mib()[0]
        print(
            f"\nsoak: {EVENTS} events: emitted {emitted}, delivered {delivered}, dropped {dropped} (agent) "
            f"+ {received_drops} (worker), lost in flight {emitted - delivered - received_drops}; "
            f"{INTERCEPTS} intercepts: {decisions}; RSS {baseline:.0f} -> {after:.0f} MiB"
        )
    assert sum(decisions.values()) == INTERCEPTS  # every intercept came back with a decision
    assert emitted + dropped == EVENTS  # every emit is either sent (buffered) or a counted drop
    # at-most-once: besides counted drops, only what was in flight around the restart may be lost
    assert delivered + received_drops <= emitted
    assert emitted - delivered - received_drops <= outage_emits + 20_000
    assert after - baseline < MEMORY_BAND
    assert agent.stats.reconnects >= 1
