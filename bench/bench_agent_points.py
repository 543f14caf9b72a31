"""Agent hook points benchmark: what the runner's stages cost a turn, against the same turn without handlers.

    python bench/bench_agent_points.py [--turns 40] [--loops 20000]

1. Each stage the runner asks, with nobody declared for it: a dictionary
   lookup, no network call (target under 5 us per call, as for any
   undeclared stage).
2. A full turn of the reference runner (one tool call, a streamed answer)
   against the scripted OpenAI-compatible server: with one handler per point
   (served by a module in another process, answering continue) against the
   same turn with none. Prints the ratio, and the added cost per point asked
   as a multiple of a raw nats-py request/reply measured in the same run.
3. The same bare turn with budgets.yaml's three layers, whose budget every
   handler is told (read at the turn's start, before and after each model
   call), against the turn without budgets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import nats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus import Bus, Continue, Module, NatsServer, Stage, TurnRequest
from bus.testing import fake_llm, wait_for_chain
from triggers.agent._budgets import BudgetBook
from triggers.agent._config_schema import BudgetLayer, BudgetsFile
from triggers.agent._llm import ChatClient
from triggers.agent.turn_runner import TurnRunner

#: Every point the reference runner asks (turn.done and agent.error are declared, asked only with job_done or a
#: failure: a turn pays nothing for them).
POINTS = [
    Stage.AGENT_SPAWN, Stage.USER_MESSAGE, Stage.CONTEXT_EVICT, Stage.LLM_REQUEST, Stage.LLM_RETRY,
    Stage.LLM_TOKEN, Stage.TOOL_CALL, Stage.TOOL_EXEC, Stage.TOOL_RESULT, Stage.ASSISTANT_MESSAGE,
    Stage.TURN_DONE, Stage.LOOP_END, Stage.TURN_END, Stage.TURN_AFTER, Stage.AGENT_ERROR, Stage.AGENT_TERMINATE,
]  # fmt: skip
PAYLOAD = {"agent": "bench", "turn": "t1", "name": "echo", "model": "m", "content": "an answer of a few words"}
MODULE = "bench_points"


def build_module() -> Module:
    module = Module(MODULE)
    for stage in POINTS:

        async def handler(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()

        module.stage(stage, name=stage.replace(".", "_"))(handler)
    return module


async def serve(url: str) -> None:
    await build_module().serve(url)


async def per_point(bus: Bus, loops: int) -> list[list[str]]:
    rows = []
    for stage in POINTS:
        started = time.perf_counter()
        for _ in range(loops):
            await bus.intercept(stage, PAYLOAD)
        micros = (time.perf_counter() - started) / loops * 1e6
        rows.append([f"{stage}, nobody declared", f"{micros:.2f} us", verdict(micros, 5.0, higher_is_better=False)])
    return rows


class Counted:
    """Counts the intercepts of the runner's points (the bench's own wrapper around Bus.intercept)."""

    def __init__(self, bus: Bus) -> None:
        self.calls = 0
        self._intercept = bus.intercept
        bus.intercept = self  # type: ignore[method-assign]  # the bench counts what the runner asks

    async def __call__(self, stage: str, payload: dict[str, Any], ctx: Any = None) -> Any:
        self.calls += 1
        return await self._intercept(stage, payload, ctx)


def budgets() -> BudgetBook:
    """Three layers in tokens, far from their limits: the books are read and charged, nothing is refused."""
    layer = BudgetLayer(max=1e12, unit="tokens")
    return BudgetBook(BudgetsFile(session=layer, group=layer, user=layer))


async def turns(bus: Bus, llm: fake_llm.FakeLLM, count: int, book: BudgetBook | None = None) -> list[float]:
    """Seconds per turn of a fresh runner: one tool call, then a streamed answer."""
    agent = f"bench{uuid.uuid4().hex[:6]}"
    client = ChatClient(llm.url, "model-a", attempts=1)
    runner = TurnRunner(bus, agent, client, budgets=book)
    times = []
    try:
        for _ in range(count):
            llm.script = [fake_llm.tool_calls(("echo", {"text": "hi"})), fake_llm.text("it is done, all of it")]
            started = time.perf_counter()
            await runner.handle(TurnRequest(agent=agent, prompt="go", session_id="bench"))
            times.append(time.perf_counter() - started)
    finally:
        await client.close()
    return times


async def raw_request_s(url: str, count: int) -> float:
    """Median seconds of a raw nats-py request/reply on the same server."""
    nc = await nats.connect(url)
    try:

        async def echo(msg: Any) -> None:
            await msg.respond(msg.data)

        await nc.subscribe("bench.points.echo", cb=echo)
        await nc.flush()
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await nc.request("bench.points.echo", b'{"decision":"continue"}', timeout=5)
            times.append(time.perf_counter() - started)
        return median(times)
    finally:
        await nc.close()


async def intercept_s(bus: Bus, count: int) -> float:
    """Median seconds of one intercept of a stage with one handler (the module process's)."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await bus.intercept(Stage.TURN_END, PAYLOAD)
        times.append(time.perf_counter() - started)
    return median(times)


async def main(args: argparse.Namespace) -> None:
    with NatsServer() as server:
        await run(server, args)


async def run(server: NatsServer, args: argparse.Namespace) -> None:
    llm = await fake_llm.FakeLLM().start()
    module: subprocess.Popen[bytes] | None = None
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    try:
        async with Bus(server.url, name="bench-agent", trust_new=True) as bus:
            await bus.middleware.start()
            rows = await per_point(bus, args.loops)
            await turns(bus, llm, 3)  # warm up: connections, caches
            bare = median(await turns(bus, llm, args.turns))
            budgeted = median(await turns(bus, llm, args.turns, budgets()))
            module = subprocess.Popen([sys.executable, __file__, "--serve", server.url], env=env)
            for stage in POINTS:
                await wait_for_chain(bus, stage, [f"{MODULE}.{stage.replace('.', '_')}"], timeout=30)
            await turns(bus, llm, 3)
            counted = Counted(bus)
            full = median(await turns(bus, llm, args.turns))
            asked = counted.calls / args.turns
            raw = await raw_request_s(server.url, 500)
            one = await intercept_s(bus, 500)
        per_asked = (full - bare) / asked
        rows += [
            ["turn with one handler per point / turn with none", f"{full / bare:.2f}x", "ratio (lower is better)"],
            ["added per point asked / raw nats-py request", f"{per_asked / raw:.2f}x", f"{asked:.1f} asked a turn"],
            ["one intercept (turn.end, one handler) / raw nats-py request", f"{one / raw:.2f}x", "for scale"],
            ["turn with budgets (every handler told it) / turn without", f"{budgeted / bare:.2f}x", "no handlers"],
        ]
        print_table("agent hook points", rows, ["what", "figure", "note"])
    finally:
        if module is not None:
            module.terminate()
            module.wait(10)
        await llm.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        asyncio.run(serve(options.serve))
    else:
        asyncio.run(main(options))
