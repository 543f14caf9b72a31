"""The record runner over a real nats-server: approval, hot swap, fail modes, timeouts, disabling, two runners."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bus import Bus, Cancel, Continue, Patch
from bus._middleware.kernel.approvals import approve, queue
from bus._records.record import Record, from_fields
from bus._records.store import RecordStore
from bus._turns.server import TurnRequest
from bus.testing import EventRecorder, JournalRecorder, fake_llm, wait_for_chain
from subscribers.records_runner.record_runner import RecordsRunner, RecordsRunnerSettings
from tests.conftest import unique
from tests.support.waiting import wait_until
from triggers.agent._llm import ChatClient
from triggers.agent._tools import with_record_tools
from triggers.agent.turn_runner import TurnRunner
from triggers.engine.problems import ProblemsSettings, ProblemsTrigger

NO_RM = """
async def handle(stage, payload, ctx):
    command = payload.get("input", {}).get("command", "")
    if "rm -rf /" in command:
        return Cancel("rm -rf / only by hand")
    return Patch({**payload, "input": {**payload["input"], "command": command + " # checked"}})
"""


def record(name: str, source: str = NO_RM, **fields: Any) -> Record:
    return from_fields({"name": name, "stage": "tool.call", "source": source, **fields}, author="test")


@pytest.fixture
async def kernel(nats_url: str) -> AsyncIterator[Bus]:
    """The agent side, trusting nothing on its own: records run only once approved."""
    async with Bus(nats_url, name="kernel") as bus:
        await bus.middleware.start()
        yield bus


@pytest.fixture
async def runners(nats_url: str) -> AsyncIterator[Callable[..., Any]]:
    started: list[tuple[RecordsRunner, Bus]] = []

    async def start(module: str, **options: Any) -> RecordsRunner:
        bus = Bus(nats_url, name="runner")
        await bus.start()
        runner = RecordsRunner(bus, RecordsRunnerSettings(module=module, heartbeat=0.5, **options))
        await runner.start()
        started.append((runner, bus))
        return runner

    yield start
    for runner, bus in started:
        await runner.stop()
        await bus.close()


async def approve_when_waiting(kernel: Bus, qualname: str) -> None:
    view = await kernel.middleware.start()
    await view.wait_until(lambda: any(w.decl.qualname == qualname for w in queue(view)), 10)
    await approve(view, qualname)


async def approved_no_rm(kernel: Bus, runners: Any) -> tuple[str, RecordsRunner, RecordStore]:
    """A fresh module's runner and store, with record ``no_rm`` put, approved and in the tool.call chain."""
    module = unique("rec")
    runner = await runners(module)
    store = RecordStore(kernel.port, module)
    await store.put(record("no_rm"))
    await approve_when_waiting(kernel, f"{module}.no_rm")
    await wait_for_chain(kernel, "tool.call", [f"{module}.no_rm"])
    return module, runner, store


def call(command: str) -> dict[str, Any]:
    return {"name": "shell", "input": {"command": command}}


async def test_a_record_waits_for_approval_then_cancels_and_patches(kernel: Bus, runners: Any) -> None:
    module = unique("rec")
    runner = await runners(module)
    store = RecordStore(kernel.port, module)
    await store.put(record("no_rm"))
    await approve_when_waiting_check(kernel, f"{module}.no_rm", runner)
    assert await kernel.intercept("tool.call", call("rm -rf /")) == Continue()  # waiting: no effect at all
    assert runner.served == {}

    await approve_when_waiting(kernel, f"{module}.no_rm")
    await wait_for_chain(kernel, "tool.call", [f"{module}.no_rm"])
    cancelled = await kernel.intercept("tool.call", call("rm -rf /"))
    assert isinstance(cancelled, Cancel) and cancelled.reason == "rm -rf / only by hand"
    patched = await kernel.intercept("tool.call", call("ls"))
    assert isinstance(patched, Patch) and patched.payload["input"]["command"] == "ls # checked"


async def approve_when_waiting_check(kernel: Bus, qualname: str, runner: RecordsRunner) -> None:
    """The draft is announced as waiting (the kernel lists it for approval), and nothing serves it."""
    view = await kernel.middleware.start()
    await view.wait_until(lambda: any(w.decl.qualname == qualname for w in queue(view)), 10)
    await wait_until(lambda: qualname.split(".")[1] in runner.waiting, what="the runner holding the draft")


async def test_an_edit_waits_while_the_old_version_keeps_serving(kernel: Bus, runners: Any) -> None:
    module, runner, store = await approved_no_rm(kernel, runners)
    await wait_until(lambda: "no_rm" in runner.served, what="the approved version served")
    old = runner.served["no_rm"]

    edited = NO_RM.replace("only by hand", "never")
    await store.put(record("no_rm", edited))
    await wait_until(lambda: "no_rm" in runner.waiting, what="the edit announced as waiting")
    cancelled = await kernel.intercept("tool.call", call("rm -rf /"))
    assert isinstance(cancelled, Cancel) and cancelled.reason == "rm -rf / only by hand"  # the old version
    assert runner.served["no_rm"] == old

    await (await kernel.port.open_bucket("hookbus_records")).delete(store.key("no_rm"))  # a hostile delete of the draft
    await wait_until(lambda: "no_rm" not in runner.waiting, what="the deleted draft no longer waiting")
    cancelled = await kernel.intercept("tool.call", call("rm -rf /"))
    assert isinstance(cancelled, Cancel) and cancelled.reason == "rm -rf / only by hand"  # still served

    await store.put(record("no_rm", edited))
    await approve_when_waiting(kernel, f"{module}.no_rm")
    await wait_until(lambda: runner.served.get("no_rm") not in (None, old), what="the new version served")
    view = await kernel.middleware.start()
    await view.wait_until(
        lambda: (
            [link.identity for link in view.chains["tool.call"].links if link.decl.module == module]
            == [runner.served["no_rm"]]
        ),
        10,
    )
    cancelled = await kernel.intercept("tool.call", call("rm -rf /"))
    assert isinstance(cancelled, Cancel) and cancelled.reason == "rm -rf / never"


RAISES = """
async def handle(stage, payload, ctx):
    raise RuntimeError("boom")
"""

LOOPS = """
async def handle(stage, payload, ctx):
    while True:
        await sleep(0.01)
"""

IMPORTS_OS = """
import os

async def handle(stage, payload, ctx):
    return Continue()
"""


async def test_faults_apply_the_fail_mode_and_a_record_that_keeps_failing_is_disabled(
    kernel: Bus, runners: Any
) -> None:
    module = unique("rec")
    runner = await runners(module, max_failures=2)
    store = RecordStore(kernel.port, module)
    journal = await JournalRecorder().attach(kernel)
    await store.put(record("raises", RAISES, fail_closed=True, match=["danger"]))  # its guard outlives the test
    await store.put(record("loops", LOOPS, timeout=0.2, match=["other"]))
    for name in ("raises", "loops"):
        await approve_when_waiting(kernel, f"{module}.{name}")
    view = await kernel.middleware.start()
    await view.wait_until(
        lambda: (
            {link.decl.name for link in view.chains["tool.call"].links if link.decl.module == module}
            == {"raises", "loops"}
        ),
        10,
    )

    danger = {"name": "danger", "input": {}}
    first = await kernel.intercept("tool.call", danger)
    assert isinstance(first, Cancel) and "fail-closed and failed: raised RuntimeError: boom" in first.reason
    timed_out = await kernel.intercept("tool.call", {"name": "other", "input": {}})
    assert timed_out == Continue()  # fail-open: a looping record times out and the call goes on
    await kernel.intercept("tool.call", danger)  # the second failure in a row: disabled

    await wait_until(
        lambda: any(e.decision == "disabled" and e.who == f"{module}.raises" for e in journal.entries),
        what="the journal entry saying it was disabled",
    )
    await wait_until(lambda: "raises" not in runner.served, what="the failing record taken out of service")
    copy = await store.get_approved("raises")
    assert copy is not None and copy.disabled and "failed 2 times in a row" in copy.disabled
    assert "loops" in runner.served  # one timeout is not two in a row


async def test_a_disabled_record_is_skipped_and_a_record_cannot_import_what_is_not_allowed(
    kernel: Bus, runners: Any
) -> None:
    module, runner, store = await approved_no_rm(kernel, runners)

    disabled = record("no_rm", enabled=False)
    await store.put(disabled)  # disabling is a change too: it waits for approval
    await wait_until(lambda: "no_rm" in runner.waiting, what="the disabled version waiting")
    assert isinstance(await kernel.intercept("tool.call", call("rm -rf /")), Cancel)
    await approve_when_waiting(kernel, f"{module}.no_rm")
    await wait_until(lambda: "no_rm" not in runner.served and "no_rm" not in runner.waiting, what="skipped")
    await wait_for_chain(kernel, "tool.call", [])
    assert await kernel.intercept("tool.call", call("rm -rf /")) == Continue()

    drafts = await kernel.port.open_bucket("hookbus_records")
    await drafts.put(f"{module}.junk", b"\xff not json")  # garbage in the store: ignored, named in the log
    await drafts.put(f"{module}.renamed", record("other").to_bytes())  # named unlike its key: ignored
    await store.put(record("bad_import", IMPORTS_OS))
    await approve_when_waiting(kernel, f"{module}.bad_import")
    await wait_until(lambda: runner.state.copies.get("bad_import") is not None, what="the approved copy")
    await wait_until(lambda: (runner.state.copies["bad_import"].disabled or "").find("may not import 'os'") >= 0)
    assert "bad_import" not in runner.served
    assert runner.state.drafts.keys() == {"no_rm", "bad_import"}  # the garbage came first and was left out


async def test_two_runners_share_the_load(kernel: Bus, runners: Any) -> None:
    module = unique("rec")
    first = await runners(module)
    second = await runners(module)
    store = RecordStore(kernel.port, module)
    counter = """
async def handle(stage, payload, ctx):
    return Continue()
"""
    await store.put(record("count", counter))
    await approve_when_waiting(kernel, f"{module}.count")
    await wait_until(
        lambda: all("count" in r.served and not r.waiting for r in (first, second)),
        what="both serving, their instances of drafts stopped",
    )
    await wait_for_chain(kernel, "tool.call", [f"{module}.count"])
    view = await kernel.middleware.start()
    await view.wait_until(lambda: sum(ann.module == module for ann, _ in view.instances.values()) == 2, 10)
    for _ in range(40):
        assert await kernel.intercept("tool.call", call("ls")) == Continue()
    assert first.calls + second.calls == 40
    assert first.calls > 0 and second.calls > 0


async def test_the_agent_writes_moves_and_lists_its_records_through_its_tools(
    kernel: Bus, runners: Any, llm: fake_llm.FakeLLM
) -> None:
    module = unique("rec")
    runner = await runners(module)
    agent_bus = Bus(kernel.servers, name="agent")
    await agent_bus.start()
    tools = with_record_tools(agent_bus, "eva", module)
    agent = TurnRunner(agent_bus, "eva", ChatClient(llm.url, "m", provider="fake", attempts=1), tools=tools)
    try:
        custom = EventRecorder()
        await kernel.subscribe("eva.custom.>", custom)
        await kernel.flush()
        save = {"name": "no_rm", "stage": "tool.call", "source": NO_RM, "match": ["shell"]}
        llm.script = [
            fake_llm.tool_calls(("handler_save", save), ("event_emit", {"name": "noted", "payload": {"n": 1}})),
            fake_llm.text("saved"),
        ]
        assert await agent.handle(TurnRequest(agent="eva", prompt="guard rm", id="t1")) == "saved"
        tool_outputs = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
        assert "waits for an operator's approval" in tool_outputs[0]
        assert tool_outputs[1] == "emitted eva.custom.noted"
        await custom.wait_for(1)
        assert custom.events[0].payload == {"n": 1} and custom.events[0].depth == 0

        await wait_until(lambda: "no_rm" in runner.waiting, what="the agent's record waiting")
        assert await kernel.intercept("tool.call", call("rm -rf /")) == Continue()  # not before approval
        await approve_when_waiting(kernel, f"{module}.no_rm")
        await wait_for_chain(kernel, "tool.call", [f"{module}.no_rm"])
        assert isinstance(await kernel.intercept("tool.call", call("rm -rf /")), Cancel)
        patched = await kernel.intercept("tool.call", call("ls"))
        assert isinstance(patched, Patch) and patched.payload["input"]["command"] == "ls # checked"

        llm.script = [
            fake_llm.tool_calls(("handler_move", {"name": "no_rm", "after": ["other"]}), ("handler_list", {})),
            fake_llm.text("moved"),
        ]
        assert await agent.handle(TurnRequest(agent="eva", prompt="move it", id="t2")) == "moved"
        outputs = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
        assert "waits for an operator's approval" in outputs[0]
        assert "no_rm: stage tool.call, waiting for approval" in outputs[1] and f"{module}.other" in outputs[1]
        await wait_until(lambda: "no_rm" in runner.waiting, what="the reorder waiting for approval")
        assert isinstance(await kernel.intercept("tool.call", call("rm -rf /")), Cancel)  # the approved one serves
    finally:
        await agent.client.close()
        await agent_bus.close()


async def test_the_problems_turn_starts_on_a_broken_chain_and_stops_once_it_is_fixed(
    kernel: Bus, runners: Any, llm: fake_llm.FakeLLM
) -> None:
    module = unique("rec")
    runner = await runners(module)
    store = RecordStore(kernel.port, module)
    agent_name = unique("fixer")
    async with Bus(kernel.servers, name="agent") as agent_bus, Bus(kernel.servers, name="up") as up_bus:
        tools = with_record_tools(agent_bus, agent_name, module)
        agent = TurnRunner(agent_bus, agent_name, ChatClient(llm.url, "m", provider="fake", attempts=1), tools=tools)
        await agent_bus.serve_turns(agent_name, agent.handle)
        settings = ProblemsSettings(agent=agent_name, cooldown_s=3600, module=module)
        trigger = await ProblemsTrigger(up_bus, settings).start()
        llm.script = [
            fake_llm.tool_calls(("handler_move", {"name": "a", "after": []})),
            fake_llm.text("references fixed"),
        ]
        try:
            await store.put(record("a", NO_RM, stage="memory.save", after=[f"{module}.missing"]))
            await approve_when_waiting(kernel, f"{module}.a")
            await wait_until(lambda: "memory.save" in trigger.open, what="the problem opened")
            await wait_until(lambda: len(llm.requests) == 2, what="the problems turn's two model calls")
            approved = runner.served.get("a")
            await wait_until(lambda: runner.waiting.get("a") not in (None, approved), what="the fix waiting")
            prompt = llm.requests[0]["messages"][-1]["content"]
            assert "stage memory.save is broken" in prompt and f"{module}.missing" in prompt
            assert f"{module}.a" in prompt and "handler_move" in prompt

            again = {"stage": "memory.save", "reason": "reported again"}
            await kernel.emit("eva.broken.set", again)  # another kernel's report of the same break
            await wait_until(lambda: trigger.open["memory.save"].reason == "reported again", what="the copy seen")
            assert len(trigger.open["memory.save"].turns) == 1  # within the cooldown: no second turn

            await approve_when_waiting(kernel, f"{module}.a")  # the operator approves the agent's fix
            await wait_until(lambda: "memory.save" in trigger.closed, what="eva.broken.cleared closing it")
            assert "memory.save" not in trigger.open
            await wait_for_chain(kernel, "memory.save", [f"{module}.a"])
            assert len(llm.requests) == 2  # one turn: the model's tool call and its answer
        finally:
            await agent.client.close()
