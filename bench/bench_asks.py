"""Asks benchmark: from the operator's answer to the agent's return, against a raw NATS request/reply.

    python bench/bench_asks.py [--asks 200] [--raw 2000] [--ruled 2000]

One nats-server; the kernel, the asking module and the operator in this
process, each on its own connection. For each ask the kernel's intercept is
held (its ask written, the kernel waiting), then the clock runs from the
operator's ``AskStore.answer`` (find the ask, check it, write the answer, wake
the kernel) until ``intercept`` returns. The baseline is a raw nats-py
request/reply on the same server. Prints p50 and p99 of each and their ratio.

Then an ask answered by a standing rule (``hookbus allow --remember``: the
kernel reads the two rules that could answer it and goes on without holding)
against a plain one-handler intercept whose handler continues (target: at most
1.2x at p50).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import nats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table
from bus import Ask, Bus, Continue, Module, NatsServer
from bus._middleware.asks.rules import MIRROR_RETRY_S, AskRules
from bus._middleware.asks.store import AskStore
from bus._middleware.kernel.asking import ASKS
from bus.testing import serving, wait_for_chain

STAGE = "bench.ask"
#: How long each answer itself took (the rest is the kernel's wake-up and return).
PHASES: list[float] = []


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def raw_round_trips(url: str, count: int) -> list[float]:
    """Sequential raw request/reply: a responder echoing on its own connection."""
    server, client = await nats.connect(url), await nats.connect(url)

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await server.subscribe("bench.echo", cb=echo)
    await server.flush()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await client.request("bench.echo", b'{"decision": "continue"}', timeout=5)
        times.append(time.perf_counter() - started)
    await client.close()
    await server.close()
    return times


async def answered_asks(url: str, count: int) -> list[float]:
    module = Module("bench_asker")

    @module.stage(STAGE)
    async def ask(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("bench", timeout=60)

    times = []
    async with (
        serving(module, url),
        Bus(url, name="bench-kernel", trust_new=True) as kernel,
        Bus(url, name="bench-operator") as op,
    ):
        await wait_for_chain(kernel, STAGE, ["bench_asker.ask"])
        store = AskStore(op.port)
        for n in range(count):
            call = asyncio.create_task(kernel.intercept(STAGE, {"n": n}, {"session": "bench"}))
            while not ASKS.holding:  # the kernel has written its ask and waits
                await asyncio.sleep(0.001)
            ask_id = next(iter(ASKS.holding))
            await asyncio.sleep(0.01)  # the kernel is inside its wait, subscribed to its wake-up
            started = time.perf_counter()
            await store.answer(ask_id, "allow", "bench")
            written = time.perf_counter()
            await call
            times.append(time.perf_counter() - started)
            PHASES.append(written - started)
            while ASKS.holding:
                await asyncio.sleep(0.001)
    return times


async def ruled_vs_plain(url: str, count: int) -> tuple[list[float], list[float]]:
    """Intercepts answered by a remembered rule, and plain ones of a handler that continues."""
    module = Module("bench_ruled")

    @module.stage("bench.ruled")
    async def ask(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("bench", timeout=60)

    @module.stage("bench.plain")
    async def plain(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    ctx = {"session": "bench-ruled", "agent": "bench"}
    async with (
        serving(module, url),
        Bus(url, name="bench-kernel", trust_new=True) as kernel,
        Bus(url, name="bench-operator") as op,
    ):
        await wait_for_chain(kernel, "bench.ruled", ["bench_ruled.ask"])
        await wait_for_chain(kernel, "bench.plain", ["bench_ruled.plain"])
        store = AskStore(op.port)
        first = asyncio.create_task(kernel.intercept("bench.ruled", {"name": "shell"}, ctx))
        while not ASKS.holding:
            await asyncio.sleep(0.001)
        held = await store.find(next(iter(ASKS.holding)))
        assert held is not None
        await AskRules(op.port).remember(held, "session", "bench")
        await store.answer(held.id, "allow", "bench")
        await first
        # Warm up: the kernel mirrors its user's rules once the bucket exists (bus._middleware.asks.rules).
        warm_until = time.monotonic() + MIRROR_RETRY_S + 0.5
        while time.monotonic() < warm_until:
            await kernel.intercept("bench.ruled", {"name": "shell"}, ctx)
            await kernel.intercept("bench.plain", {"name": "shell"}, ctx)
        ruled: list[float] = []
        plain_times: list[float] = []
        for n in range(count):
            for stage, into in (("bench.ruled", ruled), ("bench.plain", plain_times)):
                started = time.perf_counter()
                await kernel.intercept(stage, {"name": "shell", "n": n}, ctx)
                into.append(time.perf_counter() - started)
    return ruled, plain_times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--asks", type=int, default=200)
    parser.add_argument("--raw", type=int, default=2000)
    parser.add_argument("--ruled", type=int, default=2000)
    args = parser.parse_args()
    with NatsServer() as server:
        raw = await raw_round_trips(server.url, args.raw)
        asks = await answered_asks(server.url, args.asks)
        ruled, plain = await ruled_vs_plain(server.url, args.ruled)
    rows = []
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        base, mine = _percentile(raw, q), _percentile(asks, q)
        rows.append([name, f"{base * 1e6:.0f} us", f"{mine * 1e6:.0f} us", f"{mine / base:.1f}x"])
    answer_p50 = _percentile(PHASES, 0.5)
    rows.append(["answer written, p50", "", f"{answer_p50 * 1e6:.0f} us", f"{answer_p50 / _percentile(raw, 0.5):.1f}x"])
    print_table(
        f"answer -> agent's return ({args.asks} asks) vs raw request/reply ({args.raw})",
        rows,
        ["", "raw request/reply", "ask answered", "ratio"],
    )
    print(
        "An answer is a few JetStream round trips (list the ask's key, read it, write the answer, wake the\n"
        "kernel) and the kernel's read of the answer: several raw round trips by construction."
    )
    rows = []
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        base, mine = _percentile(plain, q), _percentile(ruled, q)
        rows.append([name, f"{base * 1e6:.0f} us", f"{mine * 1e6:.0f} us", f"{mine / base:.2f}x"])
    print_table(
        f"ask answered by a remembered rule vs plain one-handler intercept ({args.ruled} each; target <= 1.2x)",
        rows,
        ["", "plain intercept", "answered by rule", "ratio"],
    )


if __name__ == "__main__":
    asyncio.run(main())
