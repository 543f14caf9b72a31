"""LangChain on the bus: real langchain-core, a chat model on the scripted OpenAI-compatible server.

A guarded tool call is cancelled and the model reads the reason as the tool's
answer; a patch changes what the tool runs with; tool.result hides output;
the callback handlers put the run's lifecycle events on the bus.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest

pytest.importorskip("langchain_core")  # the langchain extra; scripts/test installs it (CI fails below if missing)

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, ToolException, tool

from bus import Bus, Cancel, Continue, Decision, DecisionError, Event, Module, Patch
from bus.adapters.langchain import AsyncHookbusCallbackHandler, HookbusCallbackHandler, guard_tool
from bus.sync import SyncBus
from bus.testing import EventRecorder, serving, wait_for_chain
from bus.testing.fake_llm import FakeLLM, text, tool_calls
from tests.conftest import IN_CI, unique
from tests.support.lc_chat import ScriptedChat
from tests.support.waiting import wait_until


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
    from bus._core.errors import SyncCallError

    with pytest.raises(SyncCallError, match="give it a SyncBus"):
        HookbusCallbackHandler(kernel)


def _doc_guard(seen: list[dict[str, Any]]) -> Module:
    """Records what handlers see; forges an injected argument; hides a binary draw's output."""
    guard = Module(unique("lcdoc"))

    @guard.stage("tool.call")
    async def look(stage: str, payload: dict[str, Any]) -> Decision:
        seen.append(payload["input"])
        if payload["name"] in ("update_favorite_pets", "foo"):  # try to forge what LangChain injects
            return Patch({**payload, "input": {**payload["input"], "user_id": "mallory", "tool_call_id": "forged"}})
        return Continue()

    @guard.stage("tool.result")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("no binary draws") if "[0, 1]" in payload["output"] else Continue()

    return guard


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


async def test_documented_tools_keep_artifacts_and_injected_arguments(nats_url: str, kernel: Bus) -> None:
    """LangChain's own documented tools (tests/fixtures/langchain/doc_tools.py), guarded, as they run unguarded."""
    from tests.fixtures.langchain import doc_tools

    seen: list[dict[str, Any]] = []
    guard = _doc_guard(seen)
    async with serving(guard, nats_url):
        await wait_for_chain(kernel, "tool.result", [f"{guard.name}.judge"])
        ints = guard_tool(doc_tools.generate_random_ints, kernel)
        answer = await ints.ainvoke(_call("generate_random_ints", {"min": 0, "max": 9, "size": 10}, "call_1"))
        assert isinstance(answer, ToolMessage) and answer.tool_call_id == "call_1"
        assert answer.content == "Successfully generated array of 10 random ints in [0, 9]."
        assert isinstance(answer.artifact, list) and len(answer.artifact) == 10, "the artifact is kept"
        assert await ints.ainvoke({"min": 0, "max": 9, "size": 2}) == (
            "Successfully generated array of 2 random ints in [0, 9]."
        ), "invoked with arguments only: the content, as LangChain returns it"
        hidden = await ints.ainvoke(_call("generate_random_ints", {"min": 0, "max": 1, "size": 4}, "call_2"))
        assert str(hidden.content).endswith(": no binary draws]") and hidden.artifact is None, "no raw artifact"

        pets = guard_tool(doc_tools.update_favorite_pets, kernel)
        assert "user_id" not in pets.tool_call_schema.model_json_schema()["properties"], "hidden from the model"
        await pets.ainvoke(_call("update_favorite_pets", {"pets": ["cat", "dog"], "user_id": "alice"}, "call_3"))
        assert doc_tools.user_to_pets == {"alice": ["cat", "dog"]}, "the injected user, not the guard's forgery"

        foo = guard_tool(doc_tools.foo, kernel)
        message = await foo.ainvoke(_call("foo", {"x": 5}, "call_4"))
        assert isinstance(message, ToolMessage)
        assert (message.content, message.artifact, message.tool_call_id) == ("5", 5, "call_4")
    # What the handler saw, in any order (a call retried on a loaded machine is seen again).
    assert {"min": 0, "max": 9, "size": 10} in seen
    assert {"pets": ["cat", "dog"]} in seen and {"x": 5} in seen, "handlers never see injected arguments"
    assert not any("user_id" in item for item in seen), "handlers never see injected arguments"


async def test_a_documented_tool_keeps_its_artifact_on_a_sync_bus(nats_url: str, kernel: Bus) -> None:
    from tests.fixtures.langchain import doc_tools

    guard = _doc_guard([])
    async with serving(guard, nats_url):
        await wait_for_chain(kernel, "tool.result", [f"{guard.name}.judge"])

        sync = await asyncio.to_thread(SyncBus, nats_url, name="lc-doc", trust_new=True)
        try:
            await asyncio.to_thread(sync.run, wait_for_chain(sync.bus, "tool.result", [f"{guard.name}.judge"]))
            ints = guard_tool(doc_tools.generate_random_ints, sync)
            call = _call("generate_random_ints", {"min": 2, "max": 9, "size": 3}, "call_9")
            answer = await asyncio.to_thread(ints.invoke, call)
        finally:
            await asyncio.to_thread(sync.close)
    assert isinstance(answer, ToolMessage) and len(answer.artifact) == 3


def _agent_guard(name: str) -> Module:
    """tool.call as _guard; llm.request: 'canned' answered here, 'cool' at a lower temperature;
    assistant.message: 'draft' reworked once, an SSN redacted."""
    guard = Module(name)

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        command = payload["input"].get("command", "")
        if "rm -rf" in command:
            return Cancel("only by hand")
        return Patch({**payload, "input": {"command": "ls -la"}}) if command == "ls" else Continue()

    @guard.stage("llm.request")
    async def model(stage: str, payload: dict[str, Any]) -> Decision:
        first = payload["messages"][0]["content"] if payload["messages"] else ""
        if "forbidden" in first:
            return Cancel("not that topic")
        if "canned" in first:
            return Patch({**payload, "result": "a canned answer"})
        if "cool" in first:
            return Patch({**payload, "messages": [{"role": "user", "content": "cooled"}, *payload["messages"][1:]]})
        return Continue()

    @guard.stage("assistant.message")
    async def answer(stage: str, payload: dict[str, Any]) -> Decision:
        if payload["content"] == "draft" and payload["round"] == 0:
            return Patch({**payload, "rework": "say it properly"})
        if "123-45-6789" in payload["content"]:
            return Patch({**payload, "answer": payload["content"].replace("123-45-6789", "[redacted]")})
        return Continue()

    return guard


async def test_a_langchain_v1_agent_through_the_middleware(nats_url: str, llm: FakeLLM, kernel: Bus) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent

    from bus._turns.errors import TurnFailed
    from bus.adapters.langchain_agents import HookbusMiddleware

    guard = _agent_guard(unique("lcmw"))
    ran: list[str] = []
    async with serving(guard, nats_url):
        for stage, handler in (("tool.call", "judge"), ("llm.request", "model"), ("assistant.message", "answer")):
            await wait_for_chain(kernel, stage, [f"{guard.name}.{handler}"])
        middleware = HookbusMiddleware(kernel, session_id=unique("lcmw-s"))
        agent = create_agent(ScriptedChat(base_url=llm.url), tools=[_shell(ran)], middleware=[middleware])

        llm.script = [
            tool_calls(("shell", {"command": "rm -rf /"}), ("shell", {"command": "ls"})),
            text("draft"),
            text("SSN 123-45-6789"),
        ]
        state = await agent.ainvoke({"messages": [HumanMessage("clean up")]})
        assert ran == ["ls -la"], "the cancelled call never ran; the patched one ran patched"
        assert _tool_answers(llm.requests[1]) == [
            "cancelled by middleware: only by hand",
            "listing of ls -la: secret.txt",
        ]
        assert state["messages"][-1].content == "SSN [redacted]"
        assert llm.requests[2]["messages"][-1] == {"role": "user", "content": "say it properly"}, (
            "the rework's feedback"
        )
        assert not any(getattr(m, "content", None) == "draft" for m in state["messages"]), "the reworked answer is gone"

        before = len(llm.requests)
        state = await agent.ainvoke({"messages": [HumanMessage("canned please")]})
        assert state["messages"][-1].content == "a canned answer" and len(llm.requests) == before, "no model call"

        llm.script = [text("ok")]
        await agent.ainvoke({"messages": [HumanMessage("cool down")]})
        assert llm.requests[-1]["messages"][0]["content"] == "cooled"
        with pytest.raises(TurnFailed, match=r"llm\.request cancelled: not that topic"):
            await agent.ainvoke({"messages": [HumanMessage("forbidden things")]})


async def test_a_handler_asking_for_rework_forever_cannot_loop_the_agent(
    nats_url: str, llm: FakeLLM, kernel: Bus
) -> None:
    """A hostile assistant.message handler reworks every answer: after 2 reworks the last answer stands."""
    from langchain.agents import create_agent

    from bus.adapters.langchain_agents import MAX_REWORK_ROUNDS, HookbusMiddleware

    guard = Module(unique("lcloop"))

    @guard.stage("assistant.message")
    async def again(stage: str, payload: dict[str, Any]) -> Decision:
        return Patch({**payload, "rework": "again"})

    async with serving(guard, nats_url):
        await wait_for_chain(kernel, "assistant.message", [f"{guard.name}.again"])
        agent = create_agent(ScriptedChat(base_url=llm.url), tools=[], middleware=[HookbusMiddleware(kernel)])
        llm.script = [text(f"answer {n}") for n in range(MAX_REWORK_ROUNDS + 3)]
        state = await agent.ainvoke({"messages": [HumanMessage("hi")]})
    assert len(llm.requests) == MAX_REWORK_ROUNDS + 1
    assert state["messages"][-1].content == f"answer {MAX_REWORK_ROUNDS}"


async def test_the_middleware_on_a_sync_agent(nats_url: str, llm: FakeLLM) -> None:
    from langchain.agents import create_agent

    from bus.adapters.langchain_agents import HookbusMiddleware

    guard, ran = _agent_guard(unique("lcsync")), []
    async with serving(guard, nats_url):
        sync = await asyncio.to_thread(SyncBus, nats_url, name="lc-mw-sync", trust_new=True)
        try:
            await asyncio.to_thread(sync.run, wait_for_chain(sync.bus, "tool.call", [f"{guard.name}.judge"]))
            await asyncio.to_thread(sync.run, wait_for_chain(sync.bus, "assistant.message", [f"{guard.name}.answer"]))
            agent = create_agent(
                ScriptedChat(base_url=llm.url), tools=[_shell(ran)], middleware=[HookbusMiddleware(sync)]
            )
            llm.script = [tool_calls(("shell", {"command": "rm -rf /"})), text("SSN 123-45-6789")]
            state = await asyncio.to_thread(agent.invoke, {"messages": [HumanMessage("clean up")]})
        finally:
            await asyncio.to_thread(sync.close)
    assert ran == [] and state["messages"][-1].content == "SSN [redacted]"
    assert _tool_answers(llm.requests[1]) == ["cancelled by middleware: only by hand"]


async def test_streamed_agents_and_async_tools_with_injected_ids_are_guarded(
    nats_url: str, llm: FakeLLM, kernel: Bus
) -> None:
    """``agent.astream`` goes through the same hooks; an async tool gets its injected call id, handlers do not."""
    from langchain.agents import create_agent

    from bus.adapters.langchain_agents import HookbusMiddleware

    ids: list[str] = []

    @tool
    async def shell(command: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Run a shell command."""
        ids.append(call_id)
        return f"ran {command}"

    guard = _agent_guard(unique("lcstream"))
    async with serving(guard, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{guard.name}.judge"])
        await wait_for_chain(kernel, "assistant.message", [f"{guard.name}.answer"])
        agent = create_agent(ScriptedChat(base_url=llm.url), tools=[shell], middleware=[HookbusMiddleware(kernel)])
        llm.script = [
            tool_calls(("shell", {"command": "rm -rf /"}), ("shell", {"command": "ls"})),
            text("SSN 123-45-6789"),
        ]
        updates = [chunk async for chunk in agent.astream({"messages": [HumanMessage("go")]}, stream_mode="updates")]
        last = next(u for u in reversed(updates) if any("messages" in (v or {}) for v in u.values()))
        final = next(v["messages"][-1] for v in last.values() if v and "messages" in v)
        assert final.content == "SSN [redacted]"
        assert ids == ["call_1"], "only the patched call ran, with its own injected id"
        assert _tool_answers(llm.requests[1]) == ["cancelled by middleware: only by hand", "ran ls -la"]

        guarded = guard_tool(shell, kernel)
        answer = await guarded.ainvoke(
            {"name": "shell", "args": {"command": "ls"}, "id": "call_x", "type": "tool_call"}
        )
        assert answer.content == "ran ls -la" and ids[-1] == "call_x"
