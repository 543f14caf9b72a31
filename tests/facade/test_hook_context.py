"""The call's context reaches every kind of handler: a stored record and a hook-turn see what StageCtx holds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from bus import Bus, Continue, Module, Patch, StageCtx
from bus._middleware.kernel.approvals import approve
from bus._records.record import from_fields
from bus._records.store import RecordStore
from bus.testing import fake_llm, serving, wait_for_chain
from subscribers.records_runner.record_runner import RecordsRunner, RecordsRunnerSettings
from tests.conftest import unique
from triggers.agent import _hook_turn as hook_turn
from triggers.agent._hook_turn import HookTurnSpec
from triggers.agent._llm import ChatClient

CTX = {"agent": "eva", "session": "s-ctx", "user": "ann", "template": "coder", "process": "p-7"}
#: The agent's run as the caller claims it (bus._core.run_context): what agent_os's HookContext adds.
RUN = {"parent": "boss/t0", "spawn_depth": 2, "tools": ["echo"], "budget_total": 10.0, "budget_spent": 4.0}

#: Patches the payload with what its ctx holds, and writes a bag value for whoever reads it next.
SHOW_CTX = """
async def handle(stage, payload, ctx):
    ctx.outputs["ctx.seen"] = ctx.agent
    ctx.outputs["not.declared"] = "dropped"
    seen = {"agent": ctx.agent, "session": ctx.session, "user": ctx.user, "template": ctx.template,
            "process": ctx.process, "depth": ctx.depth, "request_id": ctx.request_id,  # no getattr in a record
            "event_depth": ctx.event_depth, "parent": ctx.parent, "tools": list(ctx.tools),
            "budget": [ctx.budget_total, ctx.budget_spent, ctx.budget_remaining(), ctx.budget_unit],
            "config": dict(ctx.config)}
    return Patch({**payload, "seen": seen, "inputs": dict(ctx.inputs), "deadline_set": ctx.deadline > 0})
"""


@pytest.fixture
async def runner(nats_url: str) -> AsyncIterator[RecordsRunner]:
    async with Bus(nats_url, name="runner") as bus:
        started = RecordsRunner(bus, RecordsRunnerSettings(module=unique("rec"), heartbeat=0.5))
        await started.start()
        try:
            yield started
        finally:
            await started.stop()


async def test_a_record_sees_the_calls_context_and_its_bag_input_and_writes_its_output(
    kernel: Bus, nats_url: str, runner: RecordsRunner
) -> None:
    stage = f"custom.{unique('c')}"
    mod = Module(unique("bag"))
    read_back: list[dict[str, Any]] = []

    @mod.stage(stage, outputs=["intent.label"], priority=10)
    async def label(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        ctx.outputs["intent.label"] = "question"
        return Continue()

    @mod.stage(stage, inputs=["ctx.seen"], priority=-10)
    async def reader(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        read_back.append(dict(ctx.inputs))
        return Continue()

    module = runner.settings.module
    fields = {"name": "show", "stage": stage, "source": SHOW_CTX, "inputs": ["intent.label"], "outputs": ["ctx.seen"]}
    await RecordStore(kernel.port, module).put(from_fields(fields, author="test"))
    view = await kernel.middleware.start()
    await view.wait_until(
        lambda: any(link.decl.qualname == f"{module}.show" for c in view.chains.values() for link in c.waiting), 10
    )
    await approve(view, f"{module}.show")
    async with serving(mod, nats_url, detach_on_stop=True):
        await wait_for_chain(kernel, stage, [f"{mod.name}.label", f"{module}.show", f"{mod.name}.reader"])
        got = await kernel.intercept(stage, {"text": "why?"}, {**CTX, **RUN, "budget_unit": "usd"})
    assert isinstance(got, Patch)
    seen = got.payload["seen"]
    assert {k: seen[k] for k in CTX} == CTX
    assert (seen["depth"], seen["event_depth"], seen["parent"], seen["tools"]) == (2, 0, "boss/t0", ["echo"])
    assert seen["budget"] == [10.0, 4.0, 6.0, "usd"] and seen["config"] == {}
    assert seen["request_id"] and got.payload["deadline_set"] is True
    assert got.payload["inputs"] == {"intent.label": "question"}
    assert read_back == [{"ctx.seen": "eva"}]  # its declared output reached the next handler; the undeclared did not
    assert kernel.middleware.bags.of("s-ctx", "p-7") == {"intent.label": "question", "ctx.seen": "eva"}


async def test_a_hook_turns_prompt_carries_the_calls_context(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    name = unique("ht")
    llm.script = [fake_llm.tool_calls(("hook_continue", {}))]
    client = ChatClient(llm.url, "judge-model", attempts=1)
    spec = HookTurnSpec(name="judge", stage="tool.call", prompt="judge it", timeout=5.0, config={"strict": True})
    try:
        async with serving(hook_turn.build_module(name, [spec], client), nats_url, detach_on_stop=True):
            await wait_for_chain(kernel, "tool.call", [f"{name}.judge"])
            assert await kernel.intercept("tool.call", {"name": "shell", "input": {}}, {**CTX, **RUN}) == Continue()
    finally:
        await client.close()
    shown = orjson.loads(llm.requests[-1]["messages"][1]["content"])
    assert shown["stage"] == "tool.call" and shown["payload"] == {"name": "shell", "input": {}}
    context = shown["context"]
    assert {k: context[k] for k in CTX} == CTX
    assert context["handler"] == f"{name}.judge" and context["request_id"]
    assert (context["depth"], context["event_depth"], context["parent"]) == (2, 0, "boss/t0")
    assert context["tools"] == ["echo"] and context["config"] == {"strict": True}
    assert (context["budget_total"], context["budget_spent"], context["budget_remaining"]) == (10.0, 4.0, 6.0)
    assert context["budget_unit"] is None  # none claimed
    assert context["deadline"] > 0 and context["inputs"] == {}
