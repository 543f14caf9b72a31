"""The OpenAI Agents SDK on the bus: real openai-agents, a chat-completions model on the scripted server.

A guarded tool call is cancelled and the model reads the reason; a patch
changes the arguments; the run and agent hooks put lifecycle events on the
bus; user.message and assistant.message middleware trip the guardrails.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("agents")  # the openai-agents extra; scripts/test installs it

from agents import (
    Agent,
    InputGuardrailTripwireTriggered,
    OpenAIChatCompletionsModel,
    OutputGuardrailTripwireTriggered,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from bus import Bus, Cancel, Continue, Decision, Module, Patch
from bus.adapters.openai_agents import (
    HookbusAgentHooks,
    HookbusRunHooks,
    guard_function_tool,
    input_guardrail,
    output_guardrail,
)
from bus.testing import EventRecorder, serving, wait_for_chain

from .conftest import IN_CI, unique
from .fake_llm import FakeLLM, text, tool_calls

set_tracing_disabled(True)  # the SDK would export its own traces to OpenAI


def test_the_extra_is_installed_under_ci() -> None:
    import importlib.util

    assert importlib.util.find_spec("agents") is not None or not IN_CI


@pytest.fixture
async def model(llm: FakeLLM) -> AsyncIterator[OpenAIChatCompletionsModel]:
    """The SDK's chat-completions model on the scripted server (its HTTP client closed after the test)."""
    client = AsyncOpenAI(base_url=llm.url, api_key="test", max_retries=0)
    try:
        yield OpenAIChatCompletionsModel("scripted", client)
    finally:
        await client.close()


def _guard() -> Module:
    guard = Module(unique("agguard"))

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        command = payload["input"].get("command", "")
        if "rm -rf" in command:
            return Cancel("only by hand")
        if command == "ls":
            return Patch({**payload, "input": {"command": "ls -la"}})
        return Continue()

    @guard.stage("user.message")
    async def screen(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("no secrets asked") if "password" in payload["content"] else Continue()

    @guard.stage("assistant.message")
    async def leak(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("that answer leaks") if "hunter2" in payload["content"] else Continue()

    return guard


async def _ready(kernel: Bus, guard: Module) -> None:
    for stage, handler in (("tool.call", "judge"), ("user.message", "screen"), ("assistant.message", "leak")):
        await wait_for_chain(kernel, stage, [f"{guard.name}.{handler}"])


def _shell(ran: list[str]) -> Any:
    @function_tool
    def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    return shell


async def test_guarded_tool_hooks_and_events(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus, bus: Bus
) -> None:
    guard, session = _guard(), unique("ag")
    events = EventRecorder(lambda e: e.session_id == session)
    await bus.subscribe("prx.lifecycle.*", events)
    agent_events = EventRecorder(lambda e: e.session_id == f"{session}-agent")
    await bus.subscribe("prx.lifecycle.*", agent_events)
    llm.script = [tool_calls(("shell", {"command": "rm -rf /"}), ("shell", {"command": "ls"})), text("all done")]
    ran: list[str] = []
    async with serving(guard, nats_url):
        await _ready(kernel, guard)
        agent = Agent(
            name="sre",
            instructions="help",
            model=model,
            tools=[guard_function_tool(_shell(ran), kernel, session_id=session, agent="sre")],
            input_guardrails=[input_guardrail(kernel, session_id=session)],
            output_guardrails=[output_guardrail(kernel, session_id=session)],
            hooks=HookbusAgentHooks(kernel, session_id=f"{session}-agent"),
        )
        result = await Runner.run(agent, "tidy the disk", hooks=HookbusRunHooks(kernel, session_id=session))
    assert result.final_output == "all done"
    assert ran == ["ls -la"]
    answers = sorted(m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool")
    assert answers == ["cancelled by middleware: only by hand", "ran ls -la"]
    expected = ["agent_start", "agent_end"] + ["llm_request", "llm_response"] * 2 + ["tool_call_start", "tool_call"] * 2
    await events.wait_for(len(expected))
    names = sorted(e.event for e in events.events)
    assert names == sorted(expected)
    starts = [e.payload for e in events.events if e.event == "tool_call_start"]
    assert {"tool": "shell", "arguments": {"command": "rm -rf /"}} in starts
    request = next(e.payload for e in events.events if e.event == "llm_request")
    assert request["provider"] == "openai-agents" and request["messages_count"] == 2  # instructions + input
    await agent_events.wait_for(len(expected))  # the agent's own hooks see the same run
    assert sorted(e.event for e in agent_events.events) == sorted(expected)


async def test_guardrails_trip_on_middleware_cancels(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus
) -> None:
    guard = _guard()
    async with serving(guard, nats_url):
        await _ready(kernel, guard)
        agent = Agent(
            name="sre",
            model=model,
            input_guardrails=[input_guardrail(kernel)],
            output_guardrails=[output_guardrail(kernel)],
        )
        with pytest.raises(InputGuardrailTripwireTriggered) as tripped_in:
            await Runner.run(agent, "what is the root password?")
        assert llm.requests == []  # the refused message never reached the model
        info = tripped_in.value.guardrail_result.output.output_info
        assert info == {"reason": "no secrets asked", "handler": f"{guard.name}.screen"}

        llm.script = [text("it is hunter2")]
        with pytest.raises(OutputGuardrailTripwireTriggered) as tripped_out:
            await Runner.run(agent, "tell me a story")
        assert tripped_out.value.guardrail_result.output.output_info["reason"] == "that answer leaks"

        llm.script = [text("once upon a time")]
        assert (await Runner.run(agent, "tell me a story")).final_output == "once upon a time"


async def test_arguments_that_are_not_an_object_never_reach_the_tool(kernel: Bus) -> None:
    ran: list[str] = []
    guarded = guard_function_tool(_shell(ran), kernel)
    answer = await guarded.on_invoke_tool(None, "[1, 2]")  # type: ignore[arg-type]
    assert answer == "invalid tool arguments for shell: an object is needed, not array"
    assert "not JSON" in await guarded.on_invoke_tool(None, "{oops")  # type: ignore[arg-type]
    assert ran == []
