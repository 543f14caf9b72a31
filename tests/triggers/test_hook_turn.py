"""The model as a middleware handler: decisions, a model that ignores the tools or hangs, no re-entry."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bus import Ask, Bus, Cancel, ConfigError, Continue, Module, Patch, Stage
from bus._middleware.asks.store import AskStore
from bus.testing import fake_llm, serving, wait_for_chain
from tests.conftest import run_cli
from tests.support.waiting import wait_until
from triggers.agent import _hook_turn as hook_turn
from triggers.agent._errors import HookTurnError
from triggers.agent._hook_turn import HookTurnSpec
from triggers.agent._llm import ChatClient


async def judged(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM, payload: dict[str, Any], **spec: Any) -> Any:
    name = f"ht{uuid.uuid4().hex[:6]}"
    fields = {"name": "judge", "stage": "tool.call", "prompt": "block rm -rf", "timeout": 2.0, **spec}
    client = ChatClient(llm.url, "judge-model", attempts=1)
    module = hook_turn.build_module(name, [HookTurnSpec(**fields)], client)
    try:
        async with serving(module, nats_url, detach_on_stop=True):  # tests share tool.call
            await wait_for_chain(kernel, fields["stage"], [f"{name}.judge"])
            return await kernel.intercept(fields["stage"], payload)
    finally:
        await client.close()


CALL = {"name": "shell", "input": {"command": "rm -rf /"}}


async def test_each_decision(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    llm.script = [fake_llm.tool_calls(("hook_cancel", {"reason": "deletes everything"}))]
    decision = await judged(kernel, nats_url, llm, CALL)
    assert isinstance(decision, Cancel) and decision.reason == "deletes everything"
    request = llm.requests[-1]
    names = ["hook_continue", "hook_cancel", "hook_patch", "hook_ask"]
    assert [t["function"]["name"] for t in request["tools"]] == names
    assert request["tool_choice"] == "required" and "block rm -rf" in request["messages"][0]["content"]
    assert '"command":"rm -rf /"' in request["messages"][1]["content"]

    llm.script = [fake_llm.tool_calls(("hook_continue", {}))]
    assert await judged(kernel, nats_url, llm, CALL) == Continue()

    safe = {"name": "shell", "input": {"command": "rm -rf /tmp/x"}}
    llm.script = [fake_llm.tool_calls(("hook_patch", {"payload": safe}))]
    assert await judged(kernel, nats_url, llm, CALL) == Patch(safe)


async def test_a_hook_turn_asks_and_the_operator_answers(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    """hook_ask holds the call for an operator: an answer from another process (hookbus deny) decides it."""
    llm.script = [fake_llm.tool_calls(("hook_ask", {"reason": "deletes everything: a person decides", "timeout": 60}))]
    call = asyncio.create_task(judged(kernel, nats_url, llm, CALL, fail_closed=False))
    store = AskStore(kernel.port)

    async def held() -> list[Any]:
        return [p for p in await store.pending() if p.ask.reason == "deletes everything: a person decides"]

    await wait_until(held, timeout=30, what="the hook-turn's ask")
    (pending,) = await held()
    done = await asyncio.to_thread(run_cli, "deny", pending.ask.id, "--reason", "not today", "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    decision = await asyncio.wait_for(call, 30)
    assert isinstance(decision, Cancel) and "not today" in decision.reason


def test_hook_ask_arguments_are_checked() -> None:
    ask = hook_turn.decision_from([SimpleNamespace(name="hook_ask", arguments={"reason": "why", "timeout": 10**9})])
    assert isinstance(ask, Ask) and ask.reason == "why" and ask.timeout == Ask("x").timeout  # out of range: default
    with pytest.raises(HookTurnError):
        hook_turn.decision_from([SimpleNamespace(name="hook_ask", arguments={"timeout": 5})])


@pytest.mark.parametrize("fail_closed", [False, True])
@pytest.mark.parametrize(
    "answer",
    [
        fake_llm.text("I think it is fine"),
        fake_llm.tool_calls(("hook_continue", {}), ("hook_cancel", {"reason": "x"})),
        fake_llm.tool_calls(("hook_cancel", {})),
        fake_llm.hang(5),
        fake_llm.status(500),
    ],
    ids=["text", "two-calls", "no-reason", "hangs", "http-500"],
)
async def test_a_model_without_a_decision_gets_the_fail_mode(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM, answer: dict[str, Any], fail_closed: bool
) -> None:
    llm.script = [answer]
    decision = await judged(kernel, nats_url, llm, CALL, fail_closed=fail_closed, timeout=0.5)
    if fail_closed:
        assert isinstance(decision, Cancel) and decision.reason
    else:
        assert decision == Continue()


async def test_middleware_is_not_re_entered_from_a_hook_turn(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    seen: list[str] = []
    spy = Module(f"spy{uuid.uuid4().hex[:6]}")

    @spy.stage(Stage.LLM_REQUEST)
    async def watch(stage: str, payload: dict[str, Any]) -> Continue:
        seen.append(stage)
        return Continue()

    async with serving(spy, nats_url):
        await wait_for_chain(kernel, "llm.request", [f"{spy.name}.watch"])
        llm.script = [fake_llm.tool_calls(("hook_continue", {}))]
        assert await judged(kernel, nats_url, llm, CALL) == Continue()
        assert len(llm.requests) == 1  # the model was asked ...
        assert seen == []  # ... and no llm.request handler saw that call
        await kernel.intercept(Stage.LLM_REQUEST, {"model": "m", "messages": []})
        assert seen == ["llm.request"]  # while the spy does see the agent's own calls


def test_hook_turns_yaml_is_validated(tmp_path: Path) -> None:
    path = tmp_path / "hook_turns.yaml"
    path.write_text(
        "hook_turns:\n  - {name: j, stage: tool.call, prompt: p, match: [shell, write_file], fail_closed: true}\n"
    )
    [spec] = hook_turn.load(path)
    assert spec.match == ("shell", "write_file") and spec.fail_closed
    for text, message in [
        ("hook_turns:\n  - {name: j, stage: tool.call}\n", "field 'prompt' is required"),
        ("hook_turns:\n  - {name: j, stage: 'a..b', prompt: p}\n", "field 'stage'"),
        ("hook_turns:\n  - {name: j, stage: tool.call, prompt: p, timeout_s: 3601}\n", "'timeout_s'"),
        ("hook_turns:\n  - {name: j, stage: tool.call, prompt: p, timeout: 3601}\n", "'timeout'"),
        ("hook_turns:\n  - {name: j, stage: tool.call, prompt: p, colour: red}\n", "unknown field 'colour'"),
        ("hooks: []\n", "one key, 'hook_turns'"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            hook_turn.load(path)


def test_a_changed_prompt_is_a_changed_identity() -> None:
    client = ChatClient("http://127.0.0.1:1/v1", "m")
    a = hook_turn.build_module("same", [HookTurnSpec("j", "tool.call", "rule one")], client)
    b = hook_turn.build_module("same", [HookTurnSpec("j", "tool.call", "rule two")], client)
    assert a.declarations[0].identity != b.declarations[0].identity
