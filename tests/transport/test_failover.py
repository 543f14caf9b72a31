"""Faults under steady load: the agent's cluster node dies, or the single server restarts.

Every intercept must come back with a decision (the handler's, or its declared
fail mode) within its timeout, and never a continue the handler did not give:
the guard is fail-closed, so the kernel's own trouble may cancel but never let
a call through. Emits must never raise or stall the agent loop. The figures
(outage window, events lost, decisions from the handler) are printed;
at-most-once allows loss only around the fault. The cluster scenario repeats
``HOOKBUS_FAILOVER_RUNS`` times (bench/bench_failover.py runs it 20 times).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from bus import Bus, Cancel, Module, NatsServer, Patch, Stage
from bus.testing import NatsCluster, serving, wait_for_chain
from tests.support.waiting import wait_until

TIMEOUT = 1.0
RUNS = int(os.environ.get("HOOKBUS_FAILOVER_RUNS", "2"))
#: What a decision may be: the handler's own (a cancel of rm, a patch marking ls), or a fail-closed cancel.
FROM_HANDLER = {"rm:Cancel:handler", "ls:Patch:handler"}
ALLOWED = FROM_HANDLER | {"rm:Cancel:fail-closed", "ls:Cancel:fail-closed"}


def guard() -> Module:
    module = Module("failover-guard")

    @module.stage(Stage.TOOL_CALL, fail_closed=True, timeout=TIMEOUT)
    async def check(stage: str, payload: dict[str, Any]) -> Cancel | Patch:
        return Cancel("rm") if payload["input"]["command"] == "rm" else Patch({**payload, "checked": True})

    return module


@dataclass
class Load:
    sent: int = 0
    decisions: list[tuple[float, str]] = field(default_factory=list)
    received: set[int] = field(default_factory=set)
    fault_at: float = 0.0


async def steady(agent: Bus, seconds: float, fault: Callable[[], object], fault_after: float) -> Load:
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
        load.decisions.append((time.monotonic(), f"{command}:{type(decision).__name__}:{origin(decision)}"))
        await asyncio.sleep(0.01)  # the load's pacing
    return load


async def last_tick_arrived(load: Load) -> None:
    """Wait for the last tick: one publisher, one subscription, so every tick that arrives at all is in then."""
    await wait_until(lambda: load.sent - 1 in load.received, 10, f"tick {load.sent - 1} at the watcher")


def origin(decision: Any) -> str:
    """Who gave the decision: the handler, or the kernel reading a fault as fail-closed."""
    if isinstance(decision, Patch) and decision.payload.get("checked") is True:
        return "handler"
    if isinstance(decision, Cancel):
        return "handler" if decision.reason == "rm" else "fail-closed"
    return "kernel"  # a continue nobody gave: the guard was skipped


def from_handler(load: Load) -> int:
    return sum(1 for _, d in load.decisions if d in FROM_HANDLER)


def report(what: str, load: Load) -> None:
    lost = load.sent - len(load.received)
    closed = [d for _, d in load.decisions if d.endswith(":fail-closed")]  # fail-closed during the outage
    after = [t for t, d in load.decisions if t > load.fault_at and d == "ls:Patch:handler"]
    window = (after[0] - load.fault_at) if after else float("nan")
    print(
        f"\n{what}: {load.sent} events, {lost} lost; {len(load.decisions)} intercepts, {from_handler(load)} "
        f"from the handler, {len(closed)} by the fail-closed mode; handler decisions again "
        f"{window * 1000:.0f} ms after the fault"
    )


async def cluster_failover() -> Load:
    """The agent's node of a 3-node cluster dies under load; the handler lives on the other two."""
    with NatsCluster(3) as cluster:
        n1, n2, n3 = cluster.urls
        async with Bus(n1, name="agent", managed=["failover-guard.check"]) as agent, Bus(n3) as watcher:
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
                await last_tick_arrived(load)
            assert agent.stats.reconnects >= 1
            return load


@pytest.mark.parametrize("run", range(RUNS))
async def test_cluster_node_of_the_agent_dies(run: int) -> None:
    load = await cluster_failover()
    assert {d for _, d in load.decisions} <= ALLOWED, [d for _, d in load.decisions if d not in ALLOWED]
    assert load.decisions[-1][1] in FROM_HANDLER  # the handler answers again
    assert max(load.received) == load.sent - 1
    report("cluster node killed", load)


async def test_single_server_restarts_under_load(own_server: NatsServer) -> None:
    async with (
        Bus(own_server.url, name="agent", managed=["failover-guard.check"]) as agent,
        Bus(own_server.url) as watcher,
    ):
        received: set[int] = set()
        await watcher.subscribe("eva.custom.tick", lambda e: received.add(e.payload["n"]))
        await watcher.flush()
        async with serving(guard(), own_server.url):
            await wait_for_chain(agent, "tool.call", ["failover-guard.check"])
            load = await steady(agent, 5.0, own_server.restart, 1.0)
            load.received = received
            await last_tick_arrived(load)
        assert agent.stats.reconnects >= 1
        assert {d for _, d in load.decisions} <= ALLOWED, [d for _, d in load.decisions if d not in ALLOWED]
        assert load.decisions[-1][1] in FROM_HANDLER
        assert max(received) == load.sent - 1
        report("single server restarted", load)
