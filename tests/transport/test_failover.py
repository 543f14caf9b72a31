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

import os

import pytest

from bus import Bus, NatsServer
from bus.testing import serving, wait_for_chain
from tests.support.failover_support import (
    ALLOWED,
    FROM_HANDLER,
    cluster_failover,
    guard,
    last_tick_arrived,
    report,
    steady,
)

RUNS = int(os.environ.get("HOOKBUS_FAILOVER_RUNS", "2"))


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
