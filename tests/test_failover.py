"""Faults under steady load: the agent's cluster node dies, or the single server restarts.

Every intercept must come back with a decision (the handler's, or its declared
fail mode) within its timeout; emits must never raise or stall the agent loop.
The figures (outage window, events lost) are printed; at-most-once allows loss
only around the fault.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bus import Bus, Cancel, Continue, Module, NatsServer, Stage
from bus.testing import NatsCluster, serving, wait_for_chain

TIMEOUT = 1.0


def guard() -> Module:
    module = Module("failover-guard")

    @module.stage(Stage.TOOL_CALL, fail_closed=True, timeout=TIMEOUT)
    async def check(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
        return Cancel("rm") if payload["input"]["command"] == "rm" else Continue()

    return module


@dataclass
class Load:
    sent: int = 0
    decisions: list[tuple[float, str]] = field(default_factory=list)
    received: set[int] = field(default_factory=set)
    fault_at: float = 0.0


async def steady(agent: Bus, seconds: float, fault: Callable[[], None], fault_after: float) -> Load:
    """Emit and intercept at a steady rate; call ``fault`` once after ``fault_after`` seconds."""
    load = Load()
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if not load.fault_at and time.monotonic() - start > fault_after:
            await asyncio.to_thread(fault)
            load.fault_at = time.monotonic()
        await asyncio.wait_for(agent.emit("eva.custom.tick", {"n": load.sent}), timeout=TIMEOUT)
        load.sent += 1
        command = "rm" if load.sent % 2 else "ls"
        # the decision must come within the handler's timeout (plus scheduling slack)
        decision = await asyncio.wait_for(
            agent.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": command}}), timeout=TIMEOUT * 3
        )
        load.decisions.append((time.monotonic(), f"{command}:{type(decision).__name__}"))
        await asyncio.sleep(0.01)
    return load


def report(what: str, load: Load) -> None:
    lost = load.sent - len(load.received)
    wrong = [d for _, d in load.decisions if d == "ls:Cancel"]  # fail-closed during the outage
    after = [t for t, d in load.decisions if t > load.fault_at and d == "ls:Continue"]
    window = (after[0] - load.fault_at) if after else float("nan")
    print(
        f"\n{what}: {load.sent} events, {lost} lost; {len(load.decisions)} intercepts, "
        f"{len(wrong)} answered by the fail-closed mode; handler decisions again {window * 1000:.0f} ms after the fault"
    )


async def test_cluster_node_of_the_agent_dies() -> None:
    with NatsCluster(3) as cluster:
        n1, n2, n3 = cluster.urls
        async with Bus(n1, name="agent", managed=["failover-guard"]) as agent, Bus(n3) as watcher:
            load_box: list[Load] = []
            await watcher.subscribe(
                "eva.custom.tick", lambda e: load_box[0].received.add(e.payload["n"]) if load_box else None
            )
            await watcher.flush()
            async with serving(guard(), n2):
                await wait_for_chain(agent, "tool.call", ["failover-guard.check"])
                load_box.append(Load())
                load = await steady(agent, 4.0, cluster.nodes[0].kill, 1.0)
                load.received = load_box[0].received
                await asyncio.sleep(0.5)
            assert agent.stats.reconnects >= 1
            assert {d for _, d in load.decisions} <= {"rm:Cancel", "ls:Continue", "ls:Cancel"}
            assert load.decisions[-1][1] in ("rm:Cancel", "ls:Continue")  # the handler answers again
            assert max(load.received) == load.sent - 1
            report("cluster node killed", load)


async def test_single_server_restarts_under_load(own_server: NatsServer) -> None:
    async with Bus(own_server.url, name="agent", managed=["failover-guard"]) as agent, Bus(own_server.url) as watcher:
        received: set[int] = set()
        await watcher.subscribe("eva.custom.tick", lambda e: received.add(e.payload["n"]))
        await watcher.flush()
        async with serving(guard(), own_server.url):
            await wait_for_chain(agent, "tool.call", ["failover-guard.check"])
            load = await steady(agent, 5.0, own_server.restart, 1.0)
            load.received = received
            await asyncio.sleep(0.5)
        assert agent.stats.reconnects >= 1
        assert {d for _, d in load.decisions} <= {"rm:Cancel", "ls:Continue", "ls:Cancel"}
        assert load.decisions[-1][1] in ("rm:Cancel", "ls:Continue")
        assert max(received) == load.sent - 1
        report("single server restarted", load)
