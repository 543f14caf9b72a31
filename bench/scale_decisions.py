"""Decisions per second: one kernel against one module process, beside raw request/reply on the same server.

    python bench/bench_scale.py --only decisions [--quick]

The module process (``bench_scale.py --chains-child``) serves a module of one
handler (``scale.one1``), a module of five (``scale.one5``, one request per
call) and five modules of one (``scale.many5``, five requests per call), and a
raw nats-py echo. The kernel also holds a rules file: one rule on
``scale.rule1`` and 100 on ``scale.rule100`` (none matching, so every one is
evaluated), decided in the kernel with no module round trip. One kernel
``Bus`` keeps ``in_flight`` intercepts going for ``seconds``; the baseline
keeps as many raw requests going to the echo. Each row prints decisions/s per
kernel (= per module process for the module rows: one of each) and its ratio
to the raw request/reply rate measured in the same run.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
import orjson

from bench.common import print_table
from bus import Bus, Cancel, NatsServer
from bus.testing import wait_for_chain

CASES = (
    ("one module, one handler", "scale.one1", ["scale_one1.h0"]),
    ("one module, five handlers", "scale.one5", [f"scale_one5.h{h}" for h in range(5)]),
    ("five modules, one handler each", "scale.many5", [f"scale_many5_{h}.h" for h in range(5)]),
    ("rules in the kernel, one rule", "scale.rule1", []),  # rules are the kernel's own: nothing to wait for
    ("rules in the kernel, 100 rules", "scale.rule100", []),
)


def _rules_file(folder: str) -> Path:
    """A rule on ``scale.rule1`` and 100 on ``scale.rule100``, none of which holds for the bench's payload."""
    lines = ["rules:"]
    for name, stage in [("one", "scale.rule1"), *((f"all{i:02}", "scale.rule100") for i in range(100))]:
        condition = f'payload.input.command.contains("rm -rf /{name}")'
        lines.extend([f"  - name: {name}", f"    stage: {stage}", f"    if: '{condition}'", "    then: cancel"])
    path = Path(folder) / "decisions.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


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
    folder = tempfile.TemporaryDirectory()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        nc = await nats.connect(server.url)
        payload = {"name": "shell", "input": {"command": "ls"}}
        data = orjson.dumps({"stage": "x", "payload": payload, "ctx": {"depth": 0, "id": "x" * 16}})
        rules = [_rules_file(folder.name)]
        async with Bus(server.url, name="scale-decisions", trust_new=True, rules=rules) as kernel:
            for _, stage, handlers in CASES:
                if handlers:
                    await wait_for_chain(kernel, stage, handlers, timeout=30)
            for stage, last in (("scale.rule1", "one"), ("scale.rule100", "all99")):  # the rules are there and bite
                held = await kernel.intercept(stage, {"name": "shell", "input": {"command": f"rm -rf /{last}"}})
                assert held.handler == f"decisions.{last}", held

            async def raw() -> None:
                await nc.request(echo, data, timeout=10)

            rows: list[tuple[str, str, str, str]] = []
            for name, stage, _ in CASES:
                baseline = await _rate(raw, in_flight, seconds)  # measured beside each case: the load moves

                async def intercept(stage: str = stage) -> None:
                    await kernel.intercept(stage, payload)

                ours = await _rate(intercept, in_flight, seconds)
                assert not isinstance(await kernel.intercept(stage, payload), Cancel)  # no row cancels the payload
                rows.append((name, f"{ours:,.0f}", f"{baseline:,.0f}", f"{ours / baseline:.2f}x"))
        await nc.close()
        title = f"decisions per second, one kernel, one module process, {in_flight} in flight, {seconds:g} s each"
        print_table(title, rows, ["case", "decisions/s per kernel", "raw request/reply/s", "ratio"])
    finally:
        folder.cleanup()
        if proc.stdin is not None:
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(15)
