"""One contract, two brokers: a real Bus on a real nats-server, and bus.testing.TestBus.

Every test here runs against both, so what a user's handler test sees on
TestBus is what production does. Absence is checked with a barrier message
(tests/support/waiting.py), never by waiting a while.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Continue, Event, Module, Patch, Stage, StageCtx, TurnRequest
from bus._transport.port import RawMessage
from bus.testing import EventRecorder, JournalRecorder, TestBus, serving
from tests.support.waiting import barrier, is_barrier, probe_until, wait_until, without_barriers

BACKENDS = ("nats", "in_process")


class Backend:
    """Opens a Bus and serves Modules to it, on one kind of broker."""

    def __init__(self, kind: str, nats_url: str | None) -> None:
        self.kind = kind
        self.nats_url = nats_url

    @asynccontextmanager
    async def bus(self, **options: Any) -> AsyncIterator[Bus]:
        opened: Bus = TestBus(**options) if self.kind == "in_process" else Bus(self.nats_url, trust_new=True, **options)
        async with opened:
            yield opened

    @asynccontextmanager
    async def serving(self, bus: Bus, *modules: Module) -> AsyncIterator[None]:
        """Serve ``modules`` until the block ends; their handlers are in ``bus``'s chains when it begins."""
        if isinstance(bus, TestBus):
            for module in modules:
                await bus.serve(module)
            yield
            return
        async with AsyncExitStack() as stack:
            for module in modules:
                await stack.enter_async_context(serving(module, self.nats_url, detach_on_stop=True))
            view = await bus.middleware.start()
            wanted = {decl.qualname for module in modules for decl in module.declarations}

            def in_chain() -> bool:
                runs = {link.decl.qualname for chain in view.chains.values() for link in chain.links if link.trust.runs}
                return wanted <= runs

            await view.wait_until(in_chain, 10.0)
            yield


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "in_process":
        return Backend("in_process", None)
    return Backend("nats", request.getfixturevalue("nats_url"))


def unique(prefix: str) -> str:
    """A name no earlier test used (the nats backend's server is shared by the module)."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def test_emit_reaches_a_subscriber_with_the_envelope(backend: Backend) -> None:
    subject = f"eva.custom.{unique('contract')}"
    async with backend.bus(source="contract-test") as bus:
        recorder = EventRecorder()
        await bus.subscribe(subject, recorder)
        assert await bus.emit(subject, {"n": 1, "text": "héllo"}, session_id="s-1")
        [event] = await recorder.wait_for(1)
    assert event.subject == subject
    assert event.event == subject.removeprefix("eva.")
    assert event.payload == {"n": 1, "text": "héllo"}
    assert event.session_id == "s-1"
    assert event.depth == 0
    assert event.source == "contract-test"
    assert event.id and not event.truncated
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", event.timestamp)


async def test_prx_style_patterns(backend: Backend) -> None:
    async with backend.bus() as bus:
        by_name, by_domain = EventRecorder(), EventRecorder()
        await bus.subscribe("tool_call", by_name)  # a bare PRX event name
        await bus.subscribe("prx.*", by_domain)  # the PRX hierarchical form: everything under prx
        await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})
        await bus.emit("prx.lifecycle.session_start", {})
        await by_domain.wait_for(2)
        await barrier(bus, "prx.lifecycle.tool_call", by_name)
    assert [event.subject for event in without_barriers(by_name.events)] == ["prx.lifecycle.tool_call"]
    assert [event.subject for event in without_barriers(by_domain.events)][:2] == [
        "prx.lifecycle.tool_call",
        "prx.lifecycle.session_start",
    ]


async def test_a_queue_group_gives_each_event_to_one_member(backend: Backend) -> None:
    subject = f"eva.custom.{unique('queue')}"
    group = unique("workers")
    async with backend.bus() as bus:
        first, second, everyone = EventRecorder(), EventRecorder(), EventRecorder()
        await bus.subscribe(subject, first, queue=group)
        await bus.subscribe(subject, second, queue=group)
        await bus.subscribe(subject, everyone)
        for n in range(40):
            await bus.emit(subject, {"n": n})
        await everyone.wait_for(40)
        # A barrier to each member: once both have one, all 40 sent before have arrived wherever they went.
        await probe_until(
            lambda: bus.emit(subject, {"barrier": uuid.uuid4().hex}),
            lambda: any(map(is_barrier, first.events)) and any(map(is_barrier, second.events)),
            what="a barrier at both members",
        )
    got = [event.payload["n"] for event in without_barriers(first.events + second.events)]
    assert sorted(got) == list(range(40))  # each event once, to one member
    assert without_barriers(first.events) and without_barriers(second.events)  # both shared the work


async def test_handlers_emit_one_level_deeper_and_the_limit_drops(backend: Backend) -> None:
    subject = f"eva.custom.{unique('hop')}"
    async with backend.bus(max_depth=3) as bus:
        recorder = EventRecorder()

        async def hop(event: Event) -> None:
            recorder(event)
            if not is_barrier(event):
                await bus.emit(subject, {"from_depth": event.depth})

        await bus.subscribe(subject, hop)
        await bus.emit(subject, {"from_depth": None})
        await recorder.wait_for(3)
        await wait_until(lambda: bus.stats.dropped["depth"] == 1, what="the emit at depth 3 to be dropped")
        await barrier(bus, subject, recorder)
    events = without_barriers(recorder.events)
    assert [event.depth for event in events] == [0, 1, 2]
    assert [event.payload["from_depth"] for event in events] == [None, 0, 1]


def two_module_chain(calls: list[str], how: str) -> tuple[Module, Module, str]:
    """Two modules on tool.call: ``z...`` runs first because one of them says so (by name it would be second).

    ``how``: ``before`` (the first names the second) or ``after`` (the second names the first).
    """
    first, second = Module(unique("zfirst")), Module(unique("asecond"))
    first_name, second_name = f"{first.name}.guard", f"{second.name}.tag"

    @first.stage(Stage.TOOL_CALL, before=second_name if how == "before" else (), name="guard")
    async def guard(stage: str, payload: dict[str, Any]) -> Continue | Cancel | Patch:
        calls.append("first")
        if payload["name"] == "rm":
            return Cancel("rm is not allowed")
        if payload["name"] == "ls":
            return Patch({**payload, "seen": ["first"]})
        return Continue()

    @second.stage(Stage.TOOL_CALL, after=first_name if how == "after" else (), name="tag")
    async def tag(stage: str, payload: dict[str, Any]) -> Continue | Patch:
        calls.append("second")
        if payload["name"] == "ls":
            return Patch({**payload, "seen": [*payload.get("seen", []), "second"]})
        return Continue()

    return first, second, first_name


@pytest.mark.parametrize("how", ["before", "after"])
async def test_intercept_runs_a_chain_in_declared_order(backend: Backend, how: str) -> None:
    calls: list[str] = []
    first, second, first_name = two_module_chain(calls, how)
    async with backend.bus() as bus, backend.serving(bus, first, second):
        patched = await bus.intercept(Stage.TOOL_CALL, {"name": "ls", "args": {}})
        assert patched == Patch({"name": "ls", "args": {}, "seen": ["first", "second"]})  # patches compose in order
        assert calls == ["first", "second"]

        calls.clear()
        assert await bus.intercept(Stage.TOOL_CALL, {"name": "cat", "args": {}}) == Continue()
        assert calls == ["first", "second"]

        calls.clear()
        cancelled = await bus.intercept(Stage.TOOL_CALL, {"name": "rm", "args": {}})
        assert isinstance(cancelled, Cancel)
        assert cancelled.reason == "rm is not allowed" and cancelled.handler == first_name
        # On tool.call the second is still asked (its result would beat the cancel, as in agent_os); it
        # continues, so the first cancel stands.
        assert calls == ["first", "second"]


async def test_reactions_are_journaled(backend: Backend) -> None:
    calls: list[str] = []
    first, second, first_name = two_module_chain(calls, "before")
    async with backend.bus() as bus, backend.serving(bus, first, second):
        journal = await JournalRecorder().attach(bus)
        await bus.intercept(Stage.TOOL_CALL, {"name": "ls", "args": {}}, {"session": "s-3"})
        await bus.intercept(Stage.TOOL_CALL, {"name": "rm", "args": {}}, {"session": "s-3"})
        entries = await journal.wait_for(3)
    assert [(entry.who, entry.decision) for entry in entries] == [
        (first_name, "patch"),
        (f"{second.name}.tag", "patch"),
        (first_name, "cancel"),
    ]
    assert {(entry.kind, entry.point, entry.phase, entry.session) for entry in entries} == {
        ("middleware", Stage.TOOL_CALL.value, "request", "s-3")
    }
    assert entries[2].cause == "rm is not allowed" and all(entry.identity for entry in entries)


async def test_what_a_stage_handler_emits_is_one_level_deeper(backend: Backend) -> None:
    subject = f"eva.custom.{unique('audit')}"
    module = Module(unique("auditor"))

    @module.stage(Stage.MEMORY_SAVE, name="audit")
    async def audit(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        assert ctx.bus is not None
        await ctx.bus.emit(subject, {"key": payload["key"]}, session_id=ctx.session)
        return Continue()

    async with backend.bus() as bus, backend.serving(bus, module):
        recorder = EventRecorder()
        await bus.subscribe(subject, recorder)
        decision = await bus.intercept(Stage.MEMORY_SAVE, {"key": "k", "value": "v"}, {"session": "s-2"})
        assert decision == Continue()
        [event] = await recorder.wait_for(1)
    assert (event.payload, event.session_id, event.depth) == ({"key": "k"}, "s-2", 1)


async def test_a_fail_closed_handler_that_raises_cancels_and_a_fail_open_one_continues(backend: Backend) -> None:
    closed, opened = Module(unique("strict")), Module(unique("lenient"))

    @closed.stage(Stage.LLM_REQUEST, fail_closed=True, name="check")
    async def check(stage: str, payload: dict[str, Any]) -> Continue:
        raise RuntimeError("the checker is broken")

    @opened.stage(Stage.MEMORY_SAVE, name="note")
    async def note(stage: str, payload: dict[str, Any]) -> Continue:
        raise RuntimeError("the note taker is broken")

    async with backend.bus() as bus, backend.serving(bus, closed, opened):
        decision = await bus.intercept(Stage.LLM_REQUEST, {"model": "m", "messages": []})
        assert isinstance(decision, Cancel) and decision.handler == f"{closed.name}.check"
        assert await bus.intercept(Stage.MEMORY_SAVE, {"key": "k", "value": "v"}) == Continue()


async def test_a_stage_nobody_declared_continues(backend: Backend) -> None:
    async with backend.bus() as bus:
        assert await bus.intercept(unique("nobody_declared"), {"anything": 1}) == Continue()


async def test_a_turn_request_reaches_the_agents_handler_and_its_result_the_reply(backend: Backend) -> None:
    agent = unique("agent")
    seen: list[TurnRequest] = []
    results: list[dict[str, Any]] = []

    async def turn(request: TurnRequest) -> str:
        seen.append(request)
        return f"done: {request.prompt}"

    async def on_result(msg: RawMessage) -> None:
        results.append(orjson.loads(msg.data))

    async with backend.bus() as bus:
        await bus.serve_turns(agent, turn)
        inbox = bus.port.new_inbox()
        await bus.port.subscribe_raw(inbox, on_result)
        request = TurnRequest(agent=agent, prompt="summarise", session_id="s-9")
        assert await bus.request_turn(request, reply=inbox)
        await wait_until(lambda: results, 10, "the turn's result")
    [received] = seen
    assert (received.id, received.prompt, received.session_id, received.depth) == (request.id, "summarise", "s-9", 0)
    assert results == [
        {"id": request.id, "agent": agent, "status": "completed", "answer": "done: summarise", "error": None}
    ]
