"""``hookbus mcp``'s cost per tools/call: through the proxy with one guard against straight to the server (ratios).

    python bench/bench_mcp.py [--calls 200]

On a real nats-server (the embedded one), in one run, with the SDK's own
ClientSession over stdio and the SDK-built fixture server's ``echo`` tool:

- direct: the client spawns the server itself;
- proxied: the client spawns ``hookbus mcp -- server`` with one trusted guard
  on ``tool.call`` (one intercept round trip per call; ``tool.result`` has no
  handler, so it costs nothing);
- one raw ``Bus.intercept`` on the guarded stage, the round trip the proxy adds.

The three are measured interleaved, call by call, so a loaded machine slows
them alike. Prints p50 and p99 of each and the ratios proxied/direct and
proxied/(direct + intercept); every answer is checked, so a failing path
cannot look fast.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from bus import Bus, Continue, Module, NatsServer  # noqa: E402
from bus.testing import serving, wait_for_chain  # noqa: E402

SERVER = [sys.executable, "-m", "bus.testing._mcp_server"]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def session(stack: AsyncExitStack, params: StdioServerParameters) -> ClientSession:
    read, write = await stack.enter_async_context(stdio_client(params))
    opened = await stack.enter_async_context(ClientSession(read, write))
    await opened.initialize()
    return opened


async def call(opened: ClientSession, i: int) -> float:
    started = time.perf_counter()
    result = await opened.call_tool("echo", {"text": f"call {i}"})
    elapsed = time.perf_counter() - started
    assert result.content[0].text == f"call {i}", result  # type: ignore[union-attr]
    return elapsed


async def trip(kernel: Bus) -> float:
    payload = {"name": "mcp__fixture__echo", "input": {"text": "x"}, "server": "fixture", "tool": "echo"}
    started = time.perf_counter()
    decision = await kernel.intercept("tool.call", payload)
    elapsed = time.perf_counter() - started
    assert isinstance(decision, Continue)
    return elapsed


async def main(n: int) -> None:
    with NatsServer() as nats:
        module = Module("benchmcp")

        @module.stage("tool.call", fail_closed=True)
        async def allow(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()

        env = {**os.environ, "PYTHONPATH": str(ROOT), "NATS_URL": nats.url, "XDG_STATE_HOME": "/tmp/hookbus-bench-mcp"}
        async with serving(module, nats.url, detach_on_stop=True), Bus(nats.url, trust_new=True) as kernel:
            await wait_for_chain(kernel, "tool.call", ["benchmcp.allow"])
            async with AsyncExitStack() as stack:
                direct_params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], env=env, cwd=str(ROOT))
                proxy_args = ["-m", "bus._cli", "mcp", "--name", "fixture", "--", *SERVER]
                proxy_params = StdioServerParameters(command=sys.executable, args=proxy_args, env=env, cwd=str(ROOT))
                straight, through = await session(stack, direct_params), await session(stack, proxy_params)
                direct: list[float] = []
                proxied: list[float] = []
                trips: list[float] = []
                for i in range(n + 10):  # interleaved: the three see the same load on the machine
                    timings = (await call(straight, i), await call(through, i), await trip(kernel))
                    if i >= 10:  # warm-up
                        for values, elapsed in zip((direct, proxied, trips), timings, strict=True):
                            values.append(elapsed)
    rows = [("direct", direct), ("proxied, one guard", proxied), ("one intercept", trips)]
    for name, values in rows:
        print(f"{name:22} p50 {quantile(values, 0.5) * 1e3:8.3f} ms   p99 {quantile(values, 0.99) * 1e3:8.3f} ms")
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        d, p, t = quantile(direct, q), quantile(proxied, q), quantile(trips, q)
        print(f"{label}: proxied/direct {p / d:5.2f}x   proxied/(direct + intercept) {p / (d + t):5.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    asyncio.run(main(parser.parse_args().calls))
