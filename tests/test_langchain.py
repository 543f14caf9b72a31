"""LangChain on the bus: real langchain-core, a chat model on the scripted OpenAI-compatible server.

A guarded tool call is cancelled and the model reads the reason as the tool's
answer; a patch changes what the tool runs with; tool.result hides output;
the callback handlers put the run's lifecycle events on the bus.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain_core")  # the langchain extra; scripts/test installs it (CI fails below if missing)

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool

from bus import Bus, Cancel, Continue, Decision, DecisionError, Event, Module, Patch
from bus.adapters.langchain import AsyncHookbusCallbackHandler, HookbusCallbackHandler, guard_tool
from bus.sync import SyncBus
from bus.testing import EventRecorder, serving, wait_for_chain

from .conftest import IN_CI, unique
from .fake_llm import FakeLLM, text, tool_calls
from .lc_chat import ScriptedChat
from .waiting import wait_until


def test_the_extra_is_installed_under_ci() -> None:
    import importlib.util

    assert importlib.util.find_spec("langchain_core") is not None or not IN_CI


def _guard() -> Module:
    guard = Module(unique("lcguard"))

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        command = payload["input"].get("command", "")
        if "rm -rf" in command:
            return Cancel("only by hand")
        if command == "ls":
            return Patch({**payload, "input": {"command": "ls -la"}})
        if command == "bad":
            return Patch({**payload, "input": ["not", "an", "object"]})
        return Continue()

    @guard.stage("tool.result")
    async def redact(stage: str, payload: dict[str, Any]) -> Decision:
        if "secret" in payload["output"]:
            return Patch({**payload, "output": "[redacted]"})
        return Continue()

    return guard


def _shell(ran: list[str]) -> Any:
    @tool
    def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        if command == "boom":
            raise ValueError("the tool broke")
        return f"listing of {command}: secret.txt" if command == "ls -la" else f"ran {command}"

    return shell


def _strict() -> Any:
    @tool
    def cat(path: str) -> str:
        """Print a file."""
        raise ToolException("no such file")

    return cat


def _tool_answers(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def _recorder(bus: Bus, session: str) -> EventRecorder:
    recorder = EventRecorder(lambda e: e.session_id == session)
    await bus.subscribe("prx.lifecycle.*", recorder)
    return recorder


def _names(events: list[Event]) -> list[str]:
    return [e.event for e in events]


async def test_sync_agent_cancel_patch_and_events(nats_url: str, llm: FakeLLM, bus: Bus) -> None:
    guard, session = _guard(), unique("lc")
    recorder = await _recorder(bus, session)
    llm.script = [tool_calls(("shell", {"command": "rm -rf /"}), ("shell", {"command": "ls"})), text("done")]
    ran: list[str] = []
    async with serving(guard, nats_url):
        sync = await asyncio.to_thread(SyncBus, nats_url, name="lc-sync", trust_new=True)
        try:
            order = [[f"{guard.name}.judge"], [f"{guard.name}.redact"]]
            for stage, names in zip(("tool.call", "tool.result"), order, strict=True):
                await asyncio.to_thread(sync.run, wait_for_chain(sync.bus, stage, names))
            guarded = guard_tool(_shell(ran), sync, session_id=session, agent="lc")

            def agent() -> list[BaseMessage]:
                config: Any = {"callbacks": [HookbusCallbackHandler(sync, session_id=session)]}
                model = ScriptedChat(base_url=llm.url).bind_tools([guarded])
                messages: list[BaseMessage] = [HumanMessage("clean up")]
                answer = model.invoke(messages, config=config)
                messages.append(answer)
                messages.extend(guarded.invoke(call, config=config) for call in answer.tool_calls)
                messages.append(model.invoke(messages, config=config))
                return messages

            messages = await asyncio.to_thread(agent)
        finally:
            await asyncio.to_thread(sync.close)
    assert ran == ["ls -la"]  # the cancelled call never ran; the patched one ran with the patched input
    cancelled, listed = messages[2], messages[3]
    assert isinstance(cancelled, ToolMessage) and cancelled.status == "error"
    assert _tool_answers(llm.requests[1]) == ["cancelled by middleware: only by hand", "[redacted]"]
    assert listed.content == "[redacted]" and messages[-1].content == "done"
    await recorder.wait_for(8)
    events = recorder.events
    assert sorted(_names(events)) == sorted(["llm_request", "llm_response"] * 2 + ["tool_call_start", "tool_call"] * 2)
    request = next(e for e in events if e.event == "llm_request")
    assert request.payload == {"provider": "scripted", "model": "scripted", "messages_count": 1}
    ends = {e.payload["output"]: e.payload["success"] for e in events if e.event == "tool_call"}
    assert ends == {"cancelled by middleware: only by hand": False, "[redacted]": True}
    starts = [e.payload for e in events if e.event == "tool_call_start"]
    assert {"tool": "shell", "arguments": {"command": "rm -rf /"}} in starts


async def test_async_agent_on_a_bus(nats_url: str, llm: FakeLLM, kernel: Bus, bus: Bus) -> None:
    guard, session = _guard(), unique("lca")
    recorder = await _recorder(bus, session)
    llm.script = [tool_calls(("shell", {"command": "rm -rf /tmp"})), text("fine")]
    ran: list[str] = []
    async with serving(guard, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{guard.name}.judge"])
        guarded = guard_tool(_shell(ran), kernel, session_id=session)
        config: Any = {"callbacks": [AsyncHookbusCallbackHandler(kernel, session_id=session)]}
        model = ScriptedChat(base_url=llm.url).bind_tools([guarded])
        messages: list[BaseMessage] = [HumanMessage("go")]
        answer = await model.ainvoke(messages, config=config)
        messages += [answer, *[await guarded.ainvoke(call, config=config) for call in answer.tool_calls]]
        final = await model.ainvoke(messages, config=config)
        assert final.content == "fine" and ran == []
        assert _tool_answers(llm.requests[1]) == ["cancelled by middleware: only by hand"]

        with pytest.raises(ValueError, match="the tool broke"):  # a failing tool fails as it would unguarded
            await guarded.ainvoke({"command": "boom"}, config=config)
        with pytest.raises(DecisionError, match="'input' must be an object, not array"):
            await guarded.ainvoke({"command": "bad"}, config=config)
        strict = guard_tool(_strict(), kernel, session_id=session)
        with pytest.raises(ToolException, match="no such file"):  # not handled by the tool: raised, and reported
            await strict.ainvoke({"path": "/nope"}, config=config)
    assert ran == ["boom"]
    await wait_until(lambda: _names(recorder.events).count("error") == 3, what="the tools' error events")
    errors = [e.payload for e in recorder.events if e.event == "error"]
    assert errors[0] == {"component": "tool:shell", "message": "ValueError: the tool broke"}
    assert errors[1]["component"] == "tool:shell" and errors[1]["message"].startswith("DecisionError: ")
    assert errors[2] == {"component": "tool:cat", "message": "ToolException: no such file"}


async def test_a_sync_handler_refuses_an_asyncio_bus(kernel: Bus) -> None:
    from bus.core.errors import SyncCallError

    with pytest.raises(SyncCallError, match="give it a SyncBus"):
        HookbusCallbackHandler(kernel)
