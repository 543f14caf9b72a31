"""The agent run on every handler: a worker turn spawned from a boss's tool tells its module handlers, rules,
records and hook-turns its parent, its depth in the process tree, its tools and its budget (reference runner,
scripted model, real nats-server)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Continue, Module, StageCtx, TurnRequest
from bus.testing import EventRecorder, fake_llm, serving, wait_for_chain
from tests.support.waiting import wait_until
from triggers.agent._budgets import BudgetBook
from triggers.agent._config_schema import BudgetLayer, BudgetsFile
from triggers.agent._llm import ChatClient
from triggers.agent._tools import TOOLS, Tool
from triggers.agent.turn_runner import TurnRunner

#: Cancels the worker's echo only when the run says what a spawned, budgeted run says.
RULE = """
rules:
  - name: spawned-echo
    stage: tool
    match: echo
    if: >-
      ctx.parent.startsWith("{boss}/") && ctx.depth == 1 && ctx.event_depth == 0 && "echo" in ctx.tools
      && has(ctx.budget_remaining) && ctx.budget_spent > 0.0 && ctx.budget_unit == "tokens"
    then: cancel
    reason: 'depth {{{{ ctx.depth }}}} of {{{{ ctx.parent }}}}, {{{{ ctx.budget_remaining }}}} left'
"""


async def test_a_spawned_turn_tells_every_handler_its_parent_depth_tools_and_budget(
    nats_url: str, tmp_path: Path, llm: fake_llm.FakeLLM
) -> None:
    boss, worker = f"boss{uuid.uuid4().hex[:6]}", f"work{uuid.uuid4().hex[:6]}"
    rules = tmp_path / "spawned.yaml"
    rules.write_text(RULE.format(boss=boss))
    seen: list[StageCtx] = []
    mod = Module(f"ctx{uuid.uuid4().hex[:6]}")

    @mod.stage("tool.call", match="echo", priority=10, config={"db_path": "/tmp/memory.db"})
    async def watch(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        seen.append(ctx)
        return Continue()

    boss_llm = await fake_llm.FakeLLM().start()
    clients = [ChatClient(boss_llm.url, "m", attempts=1), ChatClient(llm.url, "m", attempts=1)]
    try:
        async with Bus(nats_url, trust_new=True) as bus, Bus(nats_url, trust_new=True, rules=[rules]) as work_bus:

            async def delegate(arguments: dict[str, Any]) -> str:  # the boss's tool: a turn on the worker
                await bus.request_turn(TurnRequest(agent=worker, prompt="echo it", session_id="s-child"))
                return "delegated"

            spec = Tool("delegate", "Hand work on.", {"type": "object", "properties": {}}, delegate)
            runners = [
                TurnRunner(bus, boss, clients[0], tools={"delegate": spec}),
                TurnRunner(
                    work_bus, worker, clients[1], tools=dict(TOOLS),
                    budgets=BudgetBook(BudgetsFile(session=BudgetLayer(max=100_000, unit="tokens"))),
                ),
            ]  # fmt: skip
            boss_llm.script = [fake_llm.tool_calls(("delegate", {})), fake_llm.text("handed on")]
            llm.script = [fake_llm.tool_calls(("echo", {"text": "x"})), fake_llm.text("done")]
            done = EventRecorder()
            await bus.subscribe("eva.turn.completed", done)
            async with serving(mod, nats_url, detach_on_stop=True):
                await work_bus.middleware.start()
                await wait_for_chain(work_bus, "tool.call", [f"{mod.name}.watch", "spawned.spawned-echo"])
                await bus.serve_turns(boss, runners[0].handle)
                await work_bus.serve_turns(worker, runners[1].handle)
                await bus.flush()
                await bus.request_turn(TurnRequest(agent=boss, prompt="get it done", id="t0"))
                await wait_until(
                    lambda: {e.payload["agent"] for e in done.events} == {boss, worker}, timeout=30, what="both turns"
                )
    finally:
        for client in clients:
            await client.close()
        await boss_llm.stop()
    [ctx] = seen
    assert (ctx.parent, ctx.depth, ctx.event_depth) == (f"{boss}/t0", 1, 0)
    assert ctx.tools == ("clock", "echo") and ctx.config == {"db_path": "/tmp/memory.db"}
    assert ctx.budget_unit == "tokens" and ctx.budget_total == 100_000
    assert ctx.budget_spent is not None and ctx.budget_spent > 0  # the first model call was charged
    assert ctx.budget_remaining() == 100_000 - ctx.budget_spent
    tool_result = llm.requests[1]["messages"][-1]["content"]
    left = 100_000 - ctx.budget_spent
    assert tool_result == f"cancelled by middleware: depth 1 of {boss}/t0, {orjson.dumps(left).decode()} left"


async def test_claims_of_the_wrong_shape_never_reach_a_handler(kernel: Bus, nats_url: str) -> None:
    stage = f"custom.{uuid.uuid4().hex[:8]}"
    mod = Module(f"ctx{uuid.uuid4().hex[:6]}")
    seen: list[StageCtx] = []

    @mod.stage(stage)
    async def watch(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        seen.append(ctx)
        return Continue()

    bad = [
        {"parent": 7, "spawn_depth": -1, "tools": "echo", "budget_total": 5.0},  # no spent: says nothing
        {"spawn_depth": True, "tools": ["echo", 3], "budget_total": float("inf"), "budget_spent": 1.0},
        {"spawn_depth": 10**6, "budget_total": True, "budget_spent": 0.0, "budget_unit": "yen"},
    ]
    async with serving(mod, nats_url, detach_on_stop=True):
        await wait_for_chain(kernel, stage, [f"{mod.name}.watch"])
        for claims in bad:
            assert await kernel.intercept(stage, {}, {"agent": "eva", **claims}) == Continue()
    assert [(c.parent, c.depth, c.tools, c.budget_total, c.budget_spent, c.budget_remaining()) for c in seen] == [
        (None, 0, None, None, None, None)
    ] * 3


async def test_a_module_refuses_a_request_whose_claims_are_malformed() -> None:
    mod = Module("local")

    @mod.stage("tool.call")
    async def watch(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    for ctx, field in (
        ({"spawn_depth": -1}, "ctx.spawn_depth"),
        ({"tools": [1]}, "ctx.tools"),
        ({"budget_spent": -0.5}, "ctx.budget_spent"),
        ({"parent": None}, "ctx.parent"),
    ):
        with pytest.raises(ValueError, match=f"field '{field}"):
            await mod.handle({"stage": "tool.call", "ctx": ctx})
    reply = await mod.handle({"stage": "tool.call", "ctx": {"parent": "a/t", "spawn_depth": 3, "tools": []}})
    assert reply["decision"] == "continue"
