"""Budgets benchmark: what the fleet's budget check and charge cost per model call, against a KV get and a plain
intercept measured in the same run.

    python bench/bench_budgets.py [--calls 2000] [--rounds 5]

One nats-server with JetStream; everything in this process, each part on its
own connection. Per call, in µs (median over rounds, rounds interleaved so
load on the machine hits each alike):

- ``kv get``: one get of one key of a KV bucket (the baseline: one JetStream read);
- ``intercept``: a one-handler intercept whose handler continues (the baseline: one middleware decision);
- ``check``: ``BudgetBook.exhausted`` with all three layers on the fleet's books (one batched direct
  get per layer, the three at once), what the runner does before every model call;
- ``charge``: ``BudgetBook.charge`` (an atomic counter increment and a total per layer);
- ``check, local``: the same check on the process's own books (no NATS).

Prints each as µs per call and as a ratio to the KV get and to the intercept.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table
from bus import Bus, Continue, Module, NatsServer
from bus.testing import serving, wait_for_chain
from triggers.agent._books import SharedBooks
from triggers.agent._budgets import BudgetBook, Usage
from triggers.agent._config_schema import BudgetLayer, BudgetsFile, ModelPrice

STAGE = "bench.budget"
KEYS: dict[str, str | None] = {"session": "s-bench", "group": "bench", "user": "agent-bench"}
CONFIG = BudgetsFile(
    prices={"m": ModelPrice(input=1.0, output=2.0)},
    session=BudgetLayer(max=1e9),
    group=BudgetLayer(max=1e12, unit="tokens"),
    user=BudgetLayer(max=1e9),
)


async def per_call_us(run: Callable[[], Awaitable[Any]], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await run()
    return (time.perf_counter() - started) / calls * 1e6


async def main(calls: int, rounds: int) -> None:
    with NatsServer() as server:
        module = Module("bench")

        @module.stage(STAGE)
        async def allow(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()

        async with (
            Bus(server.url, name="bench-kernel", trust_new=True) as kernel,
            Bus(server.url, name="bench-agent") as agent,
            serving(module, server.url),
        ):
            await kernel.middleware.start()
            await wait_for_chain(kernel, STAGE, ["bench.allow"])
            kv = await agent.port.jetstream().create_key_value(bucket="bench_kv")
            await kv.put("key", b"0" * 64)
            shared = BudgetBook(CONFIG, ledger=SharedBooks.of(agent))
            local = BudgetBook(CONFIG)
            usage = Usage(30, 10)
            await shared.charge(KEYS, "m", usage)  # the books exist, each key holds a value
            await local.charge(KEYS, "m", usage)
            cases: dict[str, Callable[[], Awaitable[Any]]] = {
                "kv get": lambda: kv.get("key"),
                "intercept": lambda: kernel.intercept(STAGE, {"n": 1}),
                "check": lambda: shared.exhausted(KEYS),
                "charge": lambda: shared.charge(KEYS, "m", usage),
                "check, local": lambda: local.exhausted(KEYS),
            }
            for run in cases.values():  # warm up
                await per_call_us(run, max(calls // 10, 10))
            timings: dict[str, list[float]] = {name: [] for name in cases}
            for r in range(rounds):
                order = list(cases) if r % 2 == 0 else list(reversed(cases))
                for name in order:
                    timings[name].append(await per_call_us(cases[name], calls))
    us = {name: median(values) for name, values in timings.items()}
    rows = [
        [name, f"{us[name]:.0f}", f"{us[name] / us['kv get']:.2f}x", f"{us[name] / us['intercept']:.2f}x"]
        for name in cases
    ]
    print_table(
        f"budgets per model call ({calls} calls x {rounds} rounds, median)",
        rows,
        ["what", "µs/call", "/ kv get", "/ intercept"],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
