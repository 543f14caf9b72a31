"""Decisions per second: one kernel against one module process, beside raw request/reply on the same server.

    python bench/bench_scale.py --only decisions [--quick]

The module process (``bench_scale.py --chains-child``) serves a module of one
handler (``scale.one1``), a module of five (``scale.one5``, one request per
call) and five modules of one (``scale.many5``, five requests per call), and a
raw nats-py echo. One kernel ``Bus`` keeps ``in_flight`` intercepts going for
``seconds``; the baseline keeps as many raw requests going to the echo. Each
row prints decisions/s per kernel (= per module process here: one of each) and
its ratio to the raw request/reply rate measured in the same run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats
import orjson

from bench.common import print_table
from bus import Bus, NatsServer
from bus.testing import wait_for_chain

CASES = (
    ("one module, one handler", "scale.one1", ["scale_one1.h0"]),
    ("one module, five handlers", "scale.one5", [f"scale_one5.h{h}" for h in range(5)]),
    ("five modules, one handler each", "scale.many5", [f"scale_many5_{h}.h" for h in range(5)]),
)


async def _rate(call: Any, in_flight: int, seconds: float) -> float:
    """Calls per second with ``in_flight`` callers looping for ``seconds``."""
    loop = asyncio.get_running_loop()
    done = 0
    end = loop.time() + seconds

    async def caller() -> None:
        nonlocal done
        while loop.time() < end:
            await call()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(in_flight)))
    return done / (time.perf_counter() - started)


async def decisions_curve(server: NatsServer, child: Any, echo: str, in_flight: int, seconds: float) -> None:
    proc = child("--chains-child", server.url, "1,5")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        nc = await nats.connect(server.url)
        payload = {"name": "shell", "input": {"command": "ls"}}
        data = orjson.dumps({"stage": "x", "payload": payload, "ctx": {"depth": 0, "id": "x" * 16}})
        async with Bus(server.url, name="scale-decisions", trust_new=True) as kernel:
            for _, stage, handlers in CASES:
                await wait_for_chain(kernel, stage, handlers, timeout=30)

            async def raw() -> None:
                await nc.request(echo, data, timeout=10)

            rows: list[tuple[str, str, str, str]] = []
            for name, stage, _ in CASES:
                baseline = await _rate(raw, in_flight, seconds)  # measured beside each case: the load moves

                async def intercept(stage: str = stage) -> None:
                    await kernel.intercept(stage, payload)

                ours = await _rate(intercept, in_flight, seconds)
                rows.append((name, f"{ours:,.0f}", f"{baseline:,.0f}", f"{ours / baseline:.2f}x"))
        await nc.close()
        title = f"decisions per second, one kernel, one module process, {in_flight} in flight, {seconds:g} s each"
        print_table(title, rows, ["case", "decisions/s per kernel", "raw request/reply/s", "ratio"])
    finally:
        if proc.stdin is not None:
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(15)
