"""hookbus on a 3-node NATS cluster against a single node, in one run.

    python bench/bench_cluster.py [--events 100000] [--intercepts 3000]

Agent on node 1, the middleware module on node 2, a subscriber on node 3 (the
worst case: every message crosses routes); the single node runs all three.
Prints cluster / single ratios for emit throughput and intercept latency.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table
from bus import Bus, Continue, Module, NatsServer, Stage
from bus.testing import NatsCluster, serving, wait_for_chain

PAYLOAD = {"tool": "shell", "success": True, "output": "ok" * 50}


def guard() -> Module:
    module = Module("bench-guard")

    @module.stage(Stage.TOOL_CALL)
    async def allow(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    return module


async def measure(
    agent_url: str, module_url: str, sub_url: str, events: int, intercepts: int
) -> tuple[float, float, float]:
    """(emits per second until all delivered, intercept p50 us, p99 us)."""
    async with Bus(agent_url, managed=["bench-guard.allow"]) as agent, Bus(sub_url) as sub:
        got = 0
        done = asyncio.Event()

        def count(event: object) -> None:
            nonlocal got
            got += 1
            if got == events:
                done.set()

        await sub.subscribe("prx.lifecycle.tool_call", count, pending_msgs=events * 2)
        await sub.flush()
        await asyncio.sleep(0.5)  # interest crosses the routes
        start = time.perf_counter()
        for _ in range(events):
            await agent.emit("prx.lifecycle.tool_call", PAYLOAD)
        await agent.flush()
        await asyncio.wait_for(done.wait(), 120)
        rate = events / (time.perf_counter() - start)
        async with serving(guard(), module_url):
            await wait_for_chain(agent, "tool.call", ["bench-guard.allow"])
            for _ in range(200):
                await agent.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "ls"}})
            samples = []
            for _ in range(intercepts):
                t0 = time.perf_counter()
                await agent.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "ls"}})
                samples.append((time.perf_counter() - t0) * 1e6)
        samples.sort()
        return rate, statistics.median(samples), samples[int(len(samples) * 0.99)]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--intercepts", type=int, default=3_000)
    args = parser.parse_args()
    with NatsServer() as single:
        s_rate, s_p50, s_p99 = await measure(single.url, single.url, single.url, args.events, args.intercepts)
    with NatsCluster(3) as cluster:
        n1, n2, n3 = cluster.urls
        c_rate, c_p50, c_p99 = await measure(n1, n2, n3, args.events, args.intercepts)
    print_table(
        "3-node cluster vs single node (agent, module and subscriber on different nodes)",
        [
            ["emit -> delivered, events/s", f"{s_rate:,.0f}", f"{c_rate:,.0f}", f"{c_rate / s_rate:.2f}"],
            ["intercept p50, us", f"{s_p50:,.0f}", f"{c_p50:,.0f}", f"{c_p50 / s_p50:.2f}"],
            ["intercept p99, us", f"{s_p99:,.0f}", f"{c_p99:,.0f}", f"{c_p99 / s_p99:.2f}"],
        ],
        ["what", "single node", "cluster", "cluster / single"],
    )


if __name__ == "__main__":
    asyncio.run(main())
