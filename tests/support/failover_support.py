"""The failover scenario under steady load, shared by the failover tests and bench/bench_failover.py.

A fail-closed guard answers intercepts while a fault (a cluster node killed, a
server restarted) hits the bus; :class:`Load` records every decision and its origin.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bus import Bus, Cancel, Module, Patch, Stage
from bus.testing import NatsCluster, serving, wait_for_chain
from tests.support.waiting import wait_until

TIMEOUT = 1.0
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
