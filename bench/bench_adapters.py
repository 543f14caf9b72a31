"""The adapters' per-call overhead: a guarded tool against a bare call of the same tool (ratios).

    python bench/bench_adapters.py [--calls 300] [--rounds 5]

On a real nats-server (the embedded one), in one run:

- LangChain: ``tool.invoke`` bare, through ``guard_tool`` on a SyncBus with no
  handler on tool.call/tool.result (no network), and with one guard serving
  both stages from another event loop (two request/replies per call), against
  the bare call plus two raw ``SyncBus.intercept`` calls on the same stages.
- OpenAI Agents SDK: ``FunctionTool.on_invoke_tool`` bare and through
  ``guard_function_tool`` on a Bus, the same three ways.
- ``SyncBus.emit`` from a thread against ``Bus.emit`` awaited on the loop.

Prints the median per-call time of each over ``--rounds`` rounds of
``--calls`` calls and the ratios; the guard's replies are checked, so a
failing path cannot look fast.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents import function_tool  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402

from bench.common import median, print_table  # noqa: E402
from bus import Bus, Continue, Module, NatsServer, Patch  # noqa: E402
from bus.adapters.langchain import guard_tool  # noqa: E402
from bus.adapters.openai_agents import guard_function_tool  # noqa: E402
from bus.sync import SyncBus  # noqa: E402
from bus.testing import wait_for_chain  # noqa: E402

#: What a guarded call with one remote guard is compared with: the tool and the two round trips it needs.
FLOOR = "of bare + 2 raw intercepts"


def shell(command: str) -> str:
    """Run a shell command (here: echo it)."""
    return f"ran {command}"


def per_call_sync(call: Callable[[], Any], calls: int, rounds: int) -> float:
    """Median over rounds of the mean time of one call, in microseconds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return median(times)


async def per_call_async(call: Callable[[], Awaitable[Any]], calls: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            await call()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return median(times)


def guard_module() -> Module:
    guard = Module("bench-adapters")

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Continue | Patch:
        return Patch({**payload, "input": {**payload["input"], "seen": True}})

    @guard.stage("tool.result")
    async def look(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    return guard


async def serve_guard(url: str, kernels: list[Bus]) -> asyncio.Task[None]:
    """Serve the guard on the loop this runs on; wait until every kernel sees both handlers."""
    ready = asyncio.Event()
    task = asyncio.create_task(guard_module().serve(url, ready=ready))
    await ready.wait()
    for kernel in kernels:
        await serve_guard_seen(kernel)
    return task


async def serve_guard_seen(kernel: Bus) -> None:
    await wait_for_chain(kernel, "tool.call", ["bench-adapters.judge"])
    await wait_for_chain(kernel, "tool.result", ["bench-adapters.look"])


def langchain_rows(sync: SyncBus, calls: int, rounds: int, serve: Callable[[], None]) -> list[list[str]]:
    """LangChain's three paths; ``serve()`` starts the guard between the local and the remote ones."""
    bare_tool = StructuredTool.from_function(shell)
    guarded = guard_tool(StructuredTool.from_function(shell), sync)
    arguments = {"command": "ls"}
    bare = per_call_sync(lambda: bare_tool.invoke(arguments), calls, rounds)
    local = per_call_sync(lambda: guarded.invoke(arguments), calls, rounds)
    serve()
    assert guarded.invoke(arguments) == "ran ls", "the guarded call failed"

    def raw_pair() -> None:
        assert isinstance(sync.intercept("tool.call", {"name": "shell", "input": arguments}), Patch)
        sync.intercept("tool.result", {"name": "shell", "output": "ran ls", "is_error": False})

    remote = per_call_sync(lambda: guarded.invoke(arguments), calls, rounds)
    floor = per_call_sync(raw_pair, calls, rounds) + bare
    return [
        ["LangChain tool.invoke, bare", f"{bare:.1f}", "1.00"],
        ["guard_tool, no handlers (SyncBus)", f"{local:.1f}", f"{local / bare:.2f}"],
        ["guard_tool, one remote guard", f"{remote:.1f}", f"{remote / floor:.2f} {FLOOR}"],
    ]


class AgentsTool:
    """The Agents SDK's paths on one Bus: bare, guarded without handlers, guarded with the guard."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.arguments = '{"command": "ls"}'
        self.ctx = ToolContext(context=None, tool_name="shell", tool_call_id="c1", tool_arguments=self.arguments)
        self.bare_tool = function_tool(shell)
        self.guarded = guard_function_tool(function_tool(shell), bus)
        self.bare = self.local = 0.0

    def call(self, tool: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: tool.on_invoke_tool(self.ctx, self.arguments)

    async def measure_local(self, calls: int, rounds: int) -> None:
        self.bare = await per_call_async(self.call(self.bare_tool), calls, rounds)
        self.local = await per_call_async(self.call(self.guarded), calls, rounds)

    async def rows(self, calls: int, rounds: int) -> list[list[str]]:
        assert await self.call(self.guarded)() == "ran ls", "the guarded call failed"
        remote = await per_call_async(self.call(self.guarded), calls, rounds)

        async def raw_pair() -> None:
            await self.bus.intercept("tool.call", {"name": "shell", "input": {"command": "ls"}})
            await self.bus.intercept("tool.result", {"name": "shell", "output": "ran ls", "is_error": False})

        floor = await per_call_async(raw_pair, calls, rounds) + self.bare
        return [
            ["Agents SDK on_invoke_tool, bare", f"{self.bare:.1f}", "1.00"],
            ["guard_function_tool, no handlers", f"{self.local:.1f}", f"{self.local / self.bare:.2f}"],
            [
                "guard_function_tool, one remote guard",
                f"{remote:.1f}",
                f"{remote / floor:.2f} of bare + 2 raw intercepts",
            ],
        ]


async def emit_rows(bus: Bus, sync: SyncBus, calls: int, rounds: int) -> list[list[str]]:
    payload = {"tool": "shell", "success": True, "output": "ok"}
    on_loop = await per_call_async(lambda: bus.emit("prx.lifecycle.tool_call", payload), calls * 10, rounds)
    threaded = await asyncio.to_thread(
        per_call_sync, lambda: sync.emit("prx.lifecycle.tool_call", payload), calls * 10, rounds
    )
    return [
        ["Bus.emit, awaited on its loop", f"{on_loop:.1f}", "1.00"],
        ["SyncBus.emit, from a thread", f"{threaded:.1f}", f"{threaded / on_loop:.2f}"],
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with NatsServer() as server:
        url = server.url
        async with Bus(url, name="bench-plain") as bus, Bus(url, name="bench-kernel", trust_new=True) as kernel:
            await kernel.middleware.start()
            sync = await asyncio.to_thread(SyncBus, url, name="bench-sync", trust_new=True)
            host = await asyncio.to_thread(SyncBus, url, name="bench-host")
            try:
                emit = await emit_rows(bus, sync, args.calls, args.rounds)
                agents = AgentsTool(kernel)
                await agents.measure_local(args.calls, args.rounds)  # before any handler exists

                def serve() -> None:  # the guard on a loop of its own; both kernels wait until they see it
                    host.run(serve_guard(url, [sync.bus]))
                    asyncio.run_coroutine_threadsafe(serve_guard_seen(kernel), loop).result(30)

                loop = asyncio.get_running_loop()
                lc = await asyncio.to_thread(langchain_rows, sync, args.calls, args.rounds, serve)
                ag = await agents.rows(args.calls, args.rounds)
            finally:
                await asyncio.to_thread(sync.close)
                await asyncio.to_thread(host.close)
    header = ["path", "per call (us)", "ratio"]
    print_table("LangChain tool (sync, SyncBus)", lc, header)
    print_table("OpenAI Agents SDK function tool (async, Bus)", ag, header)
    print_table("emit", emit, header)


if __name__ == "__main__":
    asyncio.run(main())
