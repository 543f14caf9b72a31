"""Where the time goes for intercepts in flight: cProfile of the kernel's process and of the module's.

    python bench/profile_inflight.py [--calls 5000] [--concurrent 50] [--top 25]

Runs bench_middleware's one-handler stage (a patch) with ``--concurrent``
intercepts in flight, interleaved with raw nats-py request/reply to an echo
responder in the same module process, and prints the throughput ratio
hookbus / raw (unprofiled, median of five rounds each) and then the top
functions by own time of each process over one profiled round of intercepts.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import nats
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_middleware import ECHO, PAYLOAD, build_modules, journal_off, throughput
from bench.bench_scale import cpu_seconds
from bench.common import median
from bus import Bus, NatsServer
from bus.testing import wait_for_chain


async def serve(url: str, profile_to: str) -> None:
    """The module process: an echo responder and the bench modules; profiled between SIGUSR1 and SIGTERM."""
    nc = await nats.connect(url)

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(ECHO, cb=echo)
    profile = cProfile.Profile()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, profile.enable)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with Bus(url) as bus:
        tasks = [asyncio.create_task(module.serve(bus=bus)) for module in build_modules()]
        print("ready", flush=True)
        await stop.wait()
        profile.disable()
        profile.dump_stats(profile_to)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def top(stats_path: str, count: int) -> str:
    out = io.StringIO()
    pstats.Stats(stats_path, stream=out).sort_stats("tottime").print_stats(count)
    return out.getvalue()


def cpu(pids: tuple[int, ...]) -> list[float]:
    return [cpu_seconds(pid) for pid in pids]


async def accounted(calls: int, concurrent: int, one: Any, pids: tuple[int, ...]) -> tuple[float, list[float]]:
    """Throughput and CPU microseconds per call of each process in ``pids``."""
    before = cpu(pids)
    rate = await throughput(calls, concurrent, one)
    return rate, [(after - then) / calls * 1e6 for after, then in zip(cpu(pids), before, strict=True)]


async def measure(
    url: str, calls: int, concurrent: int, child: subprocess.Popen[str], count: int, server_pid: int
) -> None:
    nc = await nats.connect(url)
    data = orjson.dumps({"stage": "bench.one", "payload": PAYLOAD, "ctx": {"session": None, "depth": 0}})

    async def raw() -> None:
        await nc.request(ECHO, data, timeout=5)

    async with Bus(url, trust_new=True) as bus:
        await wait_for_chain(bus, "bench.one", ["bench_one.allow"], timeout=20)

        async def one() -> None:
            await bus.intercept("bench.one", PAYLOAD)

        await throughput(500, concurrent, raw)
        await throughput(500, concurrent, one)
        pids = (os.getpid(), child.pid, server_pid)
        runs: dict[str, list[tuple[float, list[float]]]] = {"raw": [], "hookbus": [], "journal off": []}
        for _ in range(5):  # interleaved, the median of five each
            runs["raw"].append(await accounted(calls, concurrent, raw, pids))
            runs["hookbus"].append(await accounted(calls, concurrent, one, pids))
            with journal_off(bus):  # diagnostic only
                runs["journal off"].append(await accounted(calls, concurrent, one, pids))
        base = median([rate for rate, _ in runs["raw"]])
        print(f"{concurrent} in flight, CPU microseconds per call (median of five rounds each):")
        print(f"{'':12} {'calls/s':>9} {'x raw':>6} {'requester':>10} {'responder':>10} {'server':>8}")
        for name, measured in runs.items():
            rate = median([r for r, _ in measured])
            each = [median([us[i] for _, us in measured]) for i in range(3)]
            print(f"{name:12} {rate:9.0f} {rate / base:6.2f} {each[0]:10.1f} {each[1]:10.1f} {each[2]:8.1f}")
        child.send_signal(signal.SIGUSR1)
        await asyncio.sleep(0.2)
        profile = cProfile.Profile()
        profile.enable()
        await throughput(calls, concurrent, one)
        profile.disable()
    await nc.close()
    with tempfile.NamedTemporaryFile(suffix=".prof", delete=False) as kernel_file:
        profile.dump_stats(kernel_file.name)
    print("=== kernel process (agent side), by own time")
    print(top(kernel_file.name, count))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrent", type=int, default=50)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        await serve(args.serve, args.profile_to)
        return
    module_file = Path(tempfile.mkdtemp()) / "module.prof"
    with NatsServer() as server:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        cmd = [sys.executable, __file__, "--serve", server.url, "--profile-to", str(module_file)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            assert server.pid is not None
            await measure(server.url, args.calls, args.concurrent, proc, args.top, server.pid)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print("=== module process (handler side, echo responder idle meanwhile), by own time")
    print(top(str(module_file), args.top))


if __name__ == "__main__":
    asyncio.run(main())
