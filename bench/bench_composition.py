"""Composition benchmark: a chain of ten handlers where ``when`` keeps one costs one round trip, not ten.

    python bench/bench_composition.py [--calls 2000]

Ten handlers on one stage, each in a module of its own (ten request subjects:
no batching), each with ``when: {agents: [aN, all]}``; one handler alone on
another stage. The modules run in a separate process. Prints the p50 of an
intercept by agent ``a3`` (nine handlers skipped by ``when``) and by agent
``all`` (all ten called) as ratios against the one-handler chain, same run.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus import Bus, Continue, Module, NatsServer
from bus.testing import wait_for_chain

PAYLOAD = {"name": "shell", "input": {"command": "ls"}}
TEN = [f"bench_when{i}" for i in range(10)]


def build_modules() -> list[Module]:
    modules = []
    for index, name in enumerate(TEN):
        mod = Module(name)

        async def allow(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()

        mod.stage("bench.ten", name="allow", when={"agents": [f"a{index}", "all"]})(allow)
        modules.append(mod)
    one = Module("bench_alone")

    async def alone(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    one.stage("bench.one", name="allow")(alone)
    return [*modules, one]


async def serve(url: str) -> None:
    async with Bus(url) as bus:
        tasks = [asyncio.create_task(module.serve(bus=bus)) for module in build_modules()]
        print("ready", flush=True)
        await asyncio.gather(*tasks)


async def p50(calls: int, stage: str, bus: Bus, ctx: dict[str, str]) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await bus.intercept(stage, PAYLOAD, ctx)
        times.append(time.perf_counter() - started)
    return median(times)


async def measure(url: str, calls: int) -> None:
    async with Bus(url, trust_new=True) as bus:
        await wait_for_chain(bus, "bench.one", ["bench_alone.allow"], timeout=30)
        view = await bus.middleware.start()  # ten equal priorities: ordered by approval, whichever came first
        await view.wait_until(lambda: "bench.ten" in view.chains and len(view.chains["bench.ten"].links) == 10, 30)
        one, scoped, every = [], [], []
        for _ in range(5):  # interleaved rounds: drift hits every row alike
            one.append(await p50(calls // 5, "bench.one", bus, {"agent": "a3"}))
            scoped.append(await p50(calls // 5, "bench.ten", bus, {"agent": "a3"}))
            every.append(await p50(calls // 5, "bench.ten", bus, {"agent": "all"}))
        base = median(one)
        rows = [
            [
                "10 handlers, when keeps 1 (p50)",
                f"{median(scoped) * 1e6:.0f} us",
                f"{base * 1e6:.0f} us",
                f"{median(scoped) / base:.2f}x",
                verdict(median(scoped) / base, 1.3, higher_is_better=False),
            ],
            [
                "10 handlers, all in scope (p50)",
                f"{median(every) * 1e6:.0f} us",
                f"{base * 1e6:.0f} us",
                f"{median(every) / base:.2f}x",
                "for scale: ten round trips",
            ],
        ]
        print_table("when: skipped handlers cost no round trip", rows, ["case", "ours", "one handler", "ratio", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    with NatsServer() as server:
        proc = subprocess.Popen([sys.executable, __file__, "--serve", server.url], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            asyncio.run(measure(server.url, args.calls))
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
