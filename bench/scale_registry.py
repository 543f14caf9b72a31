"""Registry traffic per kernel, idle: 50 kernels x 1, 10 and 100 modules, protocol 1 against protocol 2.

    python bench/bench_scale.py --only registry-idle [--quick]

The modules run in a child process (``bench_scale.py --modules-child``; a tag
starting with ``p2`` serves them without a heartbeat, protocol 2, else with a
1 s heartbeat, protocol 1). Each kernel is a ``Bus`` with its middleware view
started; once the first kernel sees every module, the messages each kernel's
connection receives in an idle window are counted (watch deliveries of every
bucket and the ordered consumers' own heartbeats: all a kernel reads while
nothing happens) and printed per kernel per second, beside protocol 1's on
the same server in the same run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import print_table
from bus import Bus, NatsServer


def _in_msgs(bus: Bus) -> int:
    return int(bus.port.nc.stats["in_msgs"])


async def idle_row(server: NatsServer, spawn: Any, read_line: Any, tell: Any, kernels_n: int, modules_n: int,
                   protocol: int, idle_s: float) -> float:  # fmt: skip
    """Messages per second per kernel received while ``modules_n`` modules and ``kernels_n`` kernels are idle."""
    tag = f"p{protocol}i{kernels_n}x{modules_n}"
    modules = spawn("--modules-child", server.url, tag, "0", str(modules_n))
    kernels: list[Bus] = []
    try:
        await asyncio.to_thread(read_line, modules)
        for start in range(0, kernels_n, 25):
            batch = [
                Bus(server.url, name=f"idle-{start + i}", connect_timeout=60) for i in range(min(25, kernels_n - start))
            ]
            await asyncio.gather(*(bus.start() for bus in batch))
            await asyncio.gather(*(bus.middleware.start() for bus in batch))
            kernels += batch
        end = time.monotonic() + 60
        while time.monotonic() < end:
            seen = {ann.module for ann, _ in kernels[-1].middleware.view.instances.values()}
            if sum(name.startswith(f"scale_{tag}_") for name in seen) >= modules_n:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the last deliveries of the start-up are in
        before = [_in_msgs(bus) for bus in kernels]
        started = time.perf_counter()
        await asyncio.sleep(idle_s)
        wall = time.perf_counter() - started
        received = sum(_in_msgs(bus) - then for bus, then in zip(kernels, before, strict=True))
    finally:
        tell(modules, "stop")
        modules.wait(timeout=60)
        for start in range(0, len(kernels), 50):
            await asyncio.gather(*(bus.close() for bus in kernels[start : start + 50]))
    return received / wall / kernels_n


async def idle_curve(server: NatsServer, spawn: Any, read_line: Any, tell: Any, kernels_n: int,
                     sizes: list[int], idle_s: float) -> None:  # fmt: skip
    rows = []
    for modules_n in sizes:
        v1 = await idle_row(server, spawn, read_line, tell, kernels_n, modules_n, 1, idle_s)
        v2 = await idle_row(server, spawn, read_line, tell, kernels_n, modules_n, 2, idle_s)
        rows.append([f"{kernels_n}", f"{modules_n}", f"{v1:.2f}/s", f"{v2:.2f}/s", f"{v2 / v1:.3f}" if v1 else "-"])
    print_table(
        f"registry traffic per kernel, idle ({idle_s:g} s window, protocol 1 heartbeat 1 s)",
        rows,
        ["kernels", "modules", "protocol 1 msgs/s per kernel", "protocol 2 msgs/s per kernel", "2 / 1"],
    )
