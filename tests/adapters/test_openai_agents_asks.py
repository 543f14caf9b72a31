"""The Agents SDK's needs_approval tools as fleet asks, answered by `hookbus allow/deny/edit` from another process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from bus import Bus
from bus._middleware.asks.store import AskStore
from bus.adapters.openai_agents_asks import ASKER, approve_from_fleet
from bus.testing.fake_llm import FakeLLM, text, tool_calls
from tests.conftest import run_cli, unique
from tests.support.asks_support import pending_ask

set_tracing_disabled(True)


@pytest.fixture
async def model(llm: FakeLLM) -> AsyncIterator[OpenAIChatCompletionsModel]:
    client = AsyncOpenAI(base_url=llm.url, api_key="test", max_retries=0)
    try:
        yield OpenAIChatCompletionsModel("scripted", client)
    finally:
        await client.close()


def _agent(model: OpenAIChatCompletionsModel, ran: list[str]) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    return Agent(name="sre", instructions="help", model=model, tools=[shell])


@pytest.mark.parametrize("answer", ["allow", "deny", "edit"])
async def test_an_approval_is_a_fleet_ask_and_the_run_resumes_from_the_answer(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus, answer: str
) -> None:
    session, ran = unique("oa"), list[str]()
    agent = _agent(model, ran)
    llm.script = [tool_calls(("shell", {"command": "rm -rf build"})), text("done")]
    result = await Runner.run(agent, "clean up")
    assert [item.name for item in result.interruptions] == ["shell"] and ran == []
    approving = asyncio.create_task(approve_from_fleet(result, kernel, session_id=session, timeout=60))
    async with Bus(nats_url, name="operator") as op:
        item = await pending_ask(AskStore(op.port), session)
    assert item.ask.handler == ASKER and item.ask.payload["input"] == {"command": "rm -rf build"}
    extra = {"allow": [], "deny": ["--reason", "not the build dir"], "edit": ['{"input": {"command": "rm -rf tmp"}}']}
    done = await asyncio.to_thread(run_cli, answer, item.ask.id, *extra[answer], "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    state = await approving
    resumed = await Runner.run(agent, state)
    assert resumed.final_output == "done"
    told = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    if answer == "allow":
        assert ran == ["rm -rf build"] and told == ["ran rm -rf build"]
    else:
        assert ran == []
        wanted = "not the build dir" if answer == "deny" else '{"command":"rm -rf tmp"}'
        assert len(told) == 1 and wanted in told[0]
