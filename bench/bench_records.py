"""Record benchmark: a handler record's intercept against a process module doing the same work, and
against spawning a process per call, on the same server in the same run.

    python bench/bench_records.py [--calls 2000] [--spawns 20]

The module and the record runner run together in one separate process; the
kernel in this one. Both handlers cancel ``rm -rf`` and patch everything else.
The spawn baseline starts ``python -c`` per call with the payload on stdin (what
a command hook does). Prints ratios: record / module (expected near 1) and
spawn / record (expected many times).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus import Bus, Cancel, Module, NatsServer, Patch
from bus._records.record import from_fields
from bus._records.store import RecordStore
from bus.testing import wait_for_chain

PAYLOAD = {"name": "shell", "input": {"command": "ls -la /srv/project"}}
SOURCE = """
async def handle(stage, payload, ctx):
    command = payload.get("input", {}).get("command", "")
    if "rm -rf" in command:
        return Cancel("only by hand")
    return Patch({**payload, "input": {"command": command + " --color=never"}})
"""
SPAWNED = """
import json, sys
payload = json.load(sys.stdin)
command = payload.get("input", {}).get("command", "")
if "rm -rf" in command:
    print(json.dumps({"decision": "cancel", "reason": "only by hand"}))
else:
    print(json.dumps({"decision": "patch", "payload": {**payload, "input": {"command": command + " --color=never"}}}))
"""
MODULE = "bench_mod"
RECORDS = "bench_records"


def build_module() -> Module:
    module = Module(MODULE)

    @module.stage("bench.module")
    async def guard(stage: str, payload: dict[str, Any]) -> Cancel | Patch:
        command = payload.get("input", {}).get("command", "")
        if "rm -rf" in command:
            return Cancel("only by hand")
        return Patch({**payload, "input": {"command": command + " --color=never"}})

    return module


async def serve(url: str) -> None:
    """The handler process: the module and a record runner."""
    from subscribers.records_runner.record_runner import RecordsRunner, RecordsRunnerSettings

    async with Bus(url) as bus:
        runner = RecordsRunner(bus, RecordsRunnerSettings(module=RECORDS, managed=frozenset({"guard"})))
        async with runner.running():
            task = asyncio.create_task(build_module().serve(bus=bus))
            print("ready", flush=True)
            await task


async def timed(bus: Bus, stage: str, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        decision = await bus.intercept(stage, PAYLOAD)
        out.append(time.perf_counter() - started)
        assert isinstance(decision, Patch), decision
    return out


async def spawned(calls: int) -> list[float]:
    data = __import__("json").dumps(PAYLOAD).encode()
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SPAWNED, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        stdout, _ = await proc.communicate(data)
        out.append(time.perf_counter() - started)
        assert b'"patch"' in stdout
    return out


def p99(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.99) - 1]


async def run(calls: int, spawns: int) -> None:
    with NatsServer() as server:
        url = server.url
        async with Bus(url, name="bench-operator") as op:
            record = from_fields({"name": "guard", "stage": "bench.records", "source": SOURCE})
            await RecordStore(op.port, RECORDS).put(record)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        helper = subprocess.Popen(
            [sys.executable, __file__, "--serve", url], stdout=subprocess.PIPE, text=True, env=env
        )
        try:
            assert helper.stdout is not None
            assert helper.stdout.readline().strip() == "ready"
            managed = [f"{MODULE}.guard", f"{RECORDS}.guard"]
            async with Bus(url, name="bench-kernel", managed=managed) as bus:
                await wait_for_chain(bus, "bench.module", [f"{MODULE}.guard"], timeout=30)
                await wait_for_chain(bus, "bench.records", [f"{RECORDS}.guard"], timeout=30)
                await timed(bus, "bench.module", 200)  # warm-up
                await timed(bus, "bench.records", 200)
                module_times: list[float] = []
                record_times: list[float] = []
                for index in range(8):  # interleaved rounds, alternating who goes first: load hits both alike
                    first, second = (module_times, record_times) if index % 2 else (record_times, module_times)
                    stages = ("bench.module", "bench.records") if index % 2 else ("bench.records", "bench.module")
                    first += await timed(bus, stages[0], calls // 8)
                    second += await timed(bus, stages[1], calls // 8)
            spawn_times = await spawned(spawns)
        finally:
            helper.terminate()
            helper.wait(10)
    ratio_p50 = median(record_times) / median(module_times)
    ratio_p99 = p99(record_times) / p99(module_times)
    spawn_ratio = median(spawn_times) / median(record_times)
    rows = [
        ["record / module, p50", f"{ratio_p50:.2f}", verdict(ratio_p50, 1.3, higher_is_better=False)],
        ["record / module, p99", f"{ratio_p99:.2f}", verdict(ratio_p99, 1.5, higher_is_better=False)],
        ["spawn per call / record, p50", f"{spawn_ratio:.0f}x", verdict(spawn_ratio, 10.0)],
    ]
    print_table(f"handler records ({calls} intercepts each, {spawns} spawns)", rows, ["ratio", "value", "verdict"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    asyncio.run(run(args.calls, args.spawns))


if __name__ == "__main__":
    main()
