"""Middleware benchmark: intercept against raw nats-py request/reply on the same server, same run.

    python bench/bench_middleware.py [--calls 3000] [--concurrent 50]

The handlers and the raw echo responder run together in one separate process
(as a module would), the kernel and the raw requester in this one. Prints
ratios hookbus / raw. The one-handler stage answers a patch (the reply carries
a payload, as the raw echo does). Each intercept also journals one entry per reaction (one
message each, the shared journal's format); a diagnostic row shows the
throughput with journal publishing switched off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus import Bus, Continue, Module, NatsServer, Patch
from bus._core.declaration import declare
from bus._middleware.guards import GuardRecord
from bus.testing import wait_for_chain

PAYLOAD = {"name": "shell", "input": {"command": "ls -la /srv/project"}, "call_id": "c-0001"}
PATCHED = {**PAYLOAD, "input": {"command": "ls -la /srv/project/public"}}
ECHO = "bench.echo"


def build_modules() -> list[Module]:
    one = Module("bench_one")

    @one.stage("bench.one")
    async def allow(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch(PATCHED)

    five = Module("bench_five")
    previous: str | None = None
    for index in range(5):
        name = f"h{index}"

        async def handler(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()

        five.stage("bench.five", after=[previous] if previous else (), name=name)(handler)
        previous = name
    return [one, five]


async def serve(url: str) -> None:
    """The responder process: a raw echo responder and the bench modules."""
    nc = await nats.connect(url)

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(ECHO, cb=echo)
    async with Bus(url) as bus:
        tasks = [asyncio.create_task(module.serve(bus=bus)) for module in build_modules()]
        print("ready", flush=True)
        await asyncio.gather(*tasks)


async def hold_a_stage(bus: Bus, stage: str) -> None:
    """A trusted fail-closed guard of ``stage`` whose module is gone: its record, its approval, no instance."""
    view = await bus.middleware.start()
    decl = declare("bench_gone", "no_rm", stage, fail_closed=True)
    await view.approve(decl)
    assert view.guards_kv is not None
    record = GuardRecord(decl, decl.identity(), time.time(), time.time())
    await view.guards_kv.put(record.key, record.to_bytes())
    await view.wait_until(lambda: bool(stage in view.chains and view.chains[stage].holds), 20)


#: What the kernel's journal publisher is handed entries by: entries, builders of entries, builders of encoded ones.
_JOURNAL_INPUTS = ("add", "add_later", "add_encoded_later")


@contextlib.contextmanager
def journal_off(bus: Bus) -> Iterator[None]:
    """Diagnostic only: the kernel's journal publisher drops whatever it is handed, however it is handed."""
    sink = bus.middleware._journal
    for name in _JOURNAL_INPUTS:
        setattr(sink, name, lambda *args: None)
    try:
        yield
    finally:
        for name in _JOURNAL_INPUTS:
            delattr(sink, name)  # the publisher's own methods again


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct))]


async def timed(calls: int, one: Any) -> list[float]:
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        await one()
        out.append(time.perf_counter() - started)
    return out


async def throughput(calls: int, in_flight: int, one: Any) -> float:
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await one()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return calls / (time.perf_counter() - started)


async def measure(url: str, calls: int, concurrent: int) -> None:
    nc = await nats.connect(url)
    data = orjson.dumps(
        {"stage": "bench.one", "payload": PAYLOAD, "ctx": {"session": None, "agent": None, "depth": 0, "id": "x" * 16}}
    )

    async def raw() -> None:
        await nc.request(ECHO, data, timeout=5)

    async with Bus(url, trust_new=True) as bus:
        await wait_for_chain(bus, "bench.one", ["bench_one.allow"], timeout=20)
        await wait_for_chain(bus, "bench.five", [f"bench_five.h{i}" for i in range(5)], timeout=20)

        async def one() -> None:
            await bus.intercept("bench.one", PAYLOAD)

        async def five() -> None:
            await bus.intercept("bench.five", PAYLOAD)

        for warm in (raw, one, five):
            await timed(300, warm)
        rows = []
        loops = 100_000
        started = time.perf_counter()
        for _ in range(loops):
            await bus.intercept("bench.undeclared", PAYLOAD)
        undeclared_us = (time.perf_counter() - started) / loops * 1e6
        rows.append(
            [
                "undeclared stage, per call",
                f"{undeclared_us:.2f} us",
                "-",
                "-",
                "meets target < 5 us" if undeclared_us < 5 else "MISSES target < 5 us",
            ]
        )

        held_loops = 20_000
        await hold_a_stage(bus, "bench.held")
        started = time.perf_counter()
        for _ in range(held_loops):
            await bus.intercept("bench.held", PAYLOAD)
        held_us = (time.perf_counter() - started) / held_loops * 1e6
        rows.append(
            [
                "stage held by a gone guard, per call",
                f"{held_us:.2f} us",
                f"{undeclared_us:.2f} us",
                f"{held_us / undeclared_us:.1f}x undeclared",
                "meets target < 5 us" if held_us < 5 else "MISSES target < 5 us",
            ]
        )

        raw_t, one_t, five_t = [], [], []
        rounds = 25  # short interleaved rounds, so drift on a shared machine hits both sides alike
        for _ in range(rounds):
            raw_t += await timed(calls // rounds, raw)
            one_t += await timed(calls // rounds, one)
            five_t += await timed(calls // rounds, five)
        for name, pct, target in (("p50", 0.5, 1.2), ("p99", 0.99, 1.5)):
            base, ours = percentile(raw_t, pct), percentile(one_t, pct)
            rows.append(
                [
                    f"one remote handler {name}",
                    f"{ours * 1e6:.0f} us",
                    f"{base * 1e6:.0f} us",
                    f"{ours / base:.2f}x",
                    verdict(ours / base, target, higher_is_better=False),
                ]
            )
        base50, five50 = percentile(raw_t, 0.5), percentile(five_t, 0.5)
        rows.append(
            [
                "chain of 5 in one module p50",
                f"{five50 * 1e6:.0f} us",
                f"{base50 * 1e6:.0f} us",
                f"{five50 / base50:.2f}x",
                verdict(five50 / base50, 5.0, higher_is_better=False),
            ]
        )
        raw_runs, our_runs, quiet_runs = [], [], []
        for _ in range(5):  # interleaved, the median of five each
            raw_runs.append(await throughput(calls, concurrent, raw))
            our_runs.append(await throughput(calls, concurrent, one))
            with journal_off(bus):
                quiet_runs.append(await throughput(calls, concurrent, one))
        raw_tp, our_tp, quiet_tp = median(raw_runs), median(our_runs), median(quiet_runs)
        rows.append(
            [
                f"{concurrent} in flight, throughput",
                f"{our_tp:.0f}/s",
                f"{raw_tp:.0f}/s",
                f"{our_tp / raw_tp:.2f}x",
                verdict(our_tp / raw_tp, 0.8),
            ]
        )
        rows.append(
            [
                "  same, journal off (diagnostic)",
                f"{quiet_tp:.0f}/s",
                f"{raw_tp:.0f}/s",
                f"{quiet_tp / raw_tp:.2f}x",
                "shows what the journal costs",
            ]
        )
    await nc.close()
    print_table(
        "middleware: hookbus intercept vs raw nats-py request", rows, ["what", "hookbus", "raw", "ratio", "target"]
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrent", type=int, default=50)
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        await serve(args.serve)
        return
    with NatsServer() as server:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", server.url], stdout=subprocess.PIPE, text=True, env=env
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            await measure(server.url, args.calls, args.concurrent)
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
