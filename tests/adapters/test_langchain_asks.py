"""LangChain v1's HumanInTheLoopMiddleware shape, its interrupts fleet asks answered by `hookbus allow/deny/edit`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from bus import Bus
from bus._middleware.asks.store import AskStore, Pending
from bus.adapters.langchain_asks import ASKER, FleetHumanInTheLoopMiddleware
from bus.sync import SyncBus
from bus.testing.fake_llm import FakeLLM, text, tool_calls
from tests.conftest import run_cli, unique
from tests.support.lc_chat import ScriptedChat
from tests.support.waiting import wait_until


def _tools(ran: list[str]) -> list[Any]:
    @tool
    def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    @tool
    def clock() -> str:
        """The time."""
        ran.append("clock")
        return "noon"

    return [shell, clock]


async def _pending(nats_url: str, session: str) -> Pending:
    found: list[Pending] = []
    async with Bus(nats_url, name="operator") as op:
        store = AskStore(op.port)

        async def one() -> bool:
            found[:] = [item for item in await store.pending() if item.ask.session == session]
            return bool(found)

        await wait_until(one, what=f"the ask of {session}")
    assert len(found) == 1, "only the gated tool is asked about"
    return found[0]


async def _answer(nats_url: str, item: Pending, answer: str) -> None:
    extra = {"allow": [], "deny": ["--reason", "not the build dir"], "edit": ['{"input": {"command": "rm -rf tmp"}}']}
    done = await asyncio.to_thread(run_cli, answer, item.ask.id, *extra[answer], "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("answer", ["allow", "deny", "edit"])
async def test_a_review_is_a_fleet_ask_and_the_agent_goes_on_with_the_answer(
    nats_url: str, llm: FakeLLM, kernel: Bus, answer: str
) -> None:
    session, ran = unique("lh"), list[str]()
    middleware = FleetHumanInTheLoopMiddleware(kernel, {"shell": True, "clock": False}, session_id=session, timeout=60)
    agent = create_agent(ScriptedChat(base_url=llm.url), tools=_tools(ran), middleware=[middleware])
    llm.script = [tool_calls(("shell", {"command": "rm -rf build"}), ("clock", {})), text("done")]
    run = asyncio.create_task(agent.ainvoke({"messages": [HumanMessage("clean up")]}))
    item = await _pending(nats_url, session)
    assert item.ask.handler == ASKER and item.ask.payload["input"] == {"command": "rm -rf build"}
    assert not run.done() and ran == [], "nothing runs while the review is held"
    await _answer(nats_url, item, answer)
    state = await run
    assert state["messages"][-1].content == "done"
    told = sorted(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool")
    if answer == "allow":
        assert sorted(ran) == ["clock", "rm -rf build"] and told == ["noon", "ran rm -rf build"]
    elif answer == "edit":
        assert sorted(ran) == ["clock", "rm -rf tmp"] and any("ran rm -rf tmp" in t for t in told)
    else:
        assert ran == ["clock"] and any("not the build dir" in t for t in told)


async def test_a_sync_agent_on_a_sync_bus_is_held_the_same_way(nats_url: str, llm: FakeLLM) -> None:
    session, ran = unique("lhs"), list[str]()
    sync = await asyncio.to_thread(SyncBus, nats_url, name="sync-kernel")
    try:
        middleware = FleetHumanInTheLoopMiddleware(sync, {"shell": True}, session_id=session, timeout=60)
        agent = create_agent(ScriptedChat(base_url=llm.url), tools=_tools(ran), middleware=[middleware])
        llm.script = [tool_calls(("shell", {"command": "make"})), text("built")]
        run = asyncio.create_task(asyncio.to_thread(lambda: agent.invoke({"messages": [HumanMessage("build")]})))
        await _answer(nats_url, await _pending(nats_url, session), "allow")
        state = await run
        assert state["messages"][-1].content == "built" and ran == ["make"]
    finally:
        await asyncio.to_thread(sync.close)
