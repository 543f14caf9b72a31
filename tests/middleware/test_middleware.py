"""Middleware against a real server: decisions, chain order, fail modes, matchers, typed payloads."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from bus import (
    Bus,
    BusClosedError,
    Cancel,
    Continue,
    Decision,
    DeclarationError,
    Module,
    NatsServer,
    Patch,
    RegistryError,
    Stage,
    StageCtx,
    ToolCall,
)
from bus._core.declaration import MAX_TIMEOUT
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.conftest import unique
from tests.support.waiting import wait_until


async def test_undeclared_stage_continues(kernel: Bus) -> None:
    assert await kernel.intercept("nobody.declared.this", {"x": 1}) == Continue()


async def test_each_decision_kind(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("kinds"))

    @mod.stage(Stage.TOOL_CALL)
    async def judge(stage: str, payload: dict[str, Any]) -> Continue | Cancel | Patch:
        command = payload["input"]["command"]
        if "rm -rf" in command:
            return Cancel("only by hand")
        if command == "ls":
            return Patch({**payload, "input": {"command": "ls -la"}})
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.judge"])
        call = {"name": "shell", "input": {"command": "ls"}}
        assert await kernel.intercept(Stage.TOOL_CALL, call) == Patch({"name": "shell", "input": {"command": "ls -la"}})
        denied = await kernel.intercept("tool.call", {"name": "shell", "input": {"command": "rm -rf /"}})
        assert denied == Cancel("only by hand", f"{mod.name}.judge")
        assert await kernel.intercept("tool.call", {"name": "shell", "input": {"command": "pwd"}}) == Continue()


async def test_patches_compose_in_reference_order_and_journal_follows(kernel: Bus, nats_url: str) -> None:
    first, second, third = Module(unique("c")), Module(unique("a")), Module(unique("b"))
    stage = f"custom.{unique('s')}"

    # Declared so that registration order and name order both disagree with the references.
    @third.stage(stage, after=[f"{second.name}.two"])
    async def three(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "seen": [*payload["seen"], "three"]})

    @second.stage(stage, after=[f"{first.name}.one"], before=[f"{third.name}.three"])
    async def two(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "seen": [*payload["seen"], "two"]})

    @first.stage(stage)
    async def one(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "seen": [*payload["seen"], "one"]})

    journal = await JournalRecorder().attach(kernel)
    async with serving(third, nats_url), serving(second, nats_url), serving(first, nats_url):
        order = [f"{first.name}.one", f"{second.name}.two", f"{third.name}.three"]
        await wait_for_chain(kernel, stage, order)
        decision = await kernel.intercept(stage, {"seen": []})
        assert decision == Patch({"seen": ["one", "two", "three"]})
        entries = await journal.wait_for(3)
        assert [e.who for e in entries] == order
        assert {(e.kind, e.point, e.phase, e.decision) for e in entries} == {("middleware", stage, "request", "patch")}
        assert len({e.trace_id for e in entries}) == 1
        assert all(e.identity for e in entries)


async def test_cancel_short_circuits(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("short"))
    called: list[str] = []

    @mod.stage("memory.save")
    async def deny(stage: str, payload: dict[str, Any]) -> Cancel:
        called.append("deny")
        return Cancel("secret inside")

    @mod.stage("memory.save", after="deny")
    async def later(stage: str, payload: dict[str, Any]) -> Continue:
        called.append("later")
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "memory.save", [f"{mod.name}.deny", f"{mod.name}.later"])
        decision = await kernel.intercept(Stage.MEMORY_SAVE, {"key": "k", "content": "token=abc"})
        assert isinstance(decision, Cancel)
        assert decision.reason == "secret inside"
        assert called == ["deny"]


async def test_matcher_runs_once_with_canonical_name(nats_url: str) -> None:
    mod = Module(unique("match"))
    seen: list[str] = []

    @mod.stage(Stage.TOOL_CALL, match="write_file|apply_patch|edit")
    async def writes(stage: str, payload: dict[str, Any]) -> Continue:
        seen.append(payload["name"])
        return Continue()

    options = {"tool_aliases": {"edit": "apply_patch"}}
    from bus import MiddlewareOptions

    async with Bus(nats_url, trust_new=True, middleware=MiddlewareOptions(**options)) as kernel, serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.writes"])
        await kernel.intercept("tool.call", {"name": "edit", "input": {}})
        await kernel.intercept("tool.call", {"name": "shell", "input": {}})
        await kernel.intercept("tool.call", {"name": "write_file", "input": {}})
        assert seen == ["apply_patch", "write_file"]


async def test_typed_patch_keeps_unknown_fields(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("typed"))

    @mod.stage(Stage.TOOL_CALL)
    async def quote(stage: str, call: ToolCall) -> Patch:
        call.input = {**call.input, "command": f"echo {call.input['command']}"}
        return Patch(call)

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.quote"])
        payload = {"name": "shell", "input": {"command": "ls"}, "call_id": "c-1", "future": {"nested": [1, 2]}}
        decision = await kernel.intercept("tool.call", payload)
        assert decision == Patch(
            {"name": "shell", "input": {"command": "echo ls"}, "call_id": "c-1", "future": {"nested": [1, 2]}}
        )


async def test_stage_ctx_carries_context_and_depth(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("ctx"))
    got: list[StageCtx] = []
    inner_depths: list[int] = []

    @mod.stage("llm.request")
    async def look(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        got.append(ctx)
        from bus._core import depth

        inner_depths.append(depth.current_depth())
        assert ctx.bus is not None
        await ctx.bus.emit("eva.custom.seen", {"by": ctx.handler})
        return Continue()

    events: list[Any] = []
    await kernel.subscribe("eva.custom.seen", events.append)
    await kernel.flush()
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "llm.request", [f"{mod.name}.look"])
        await kernel.intercept("llm.request", {"model": "m"}, {"session": "s1", "agent": "eva"})
        [ctx] = got
        assert (ctx.session, ctx.agent, ctx.depth, ctx.stage) == ("s1", "eva", 0, "llm.request")
        assert inner_depths == [1]
        await wait_until(lambda: events, 5, "the event the handler emitted")
        assert events[0].depth == 1


async def test_fifty_concurrent_intercepts_all_answered(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("many"))

    @mod.stage("custom.many")
    async def slow(stage: str, payload: dict[str, Any]) -> Patch:
        await asyncio.sleep(0.05)  # the scenario: a slow handler; overlapping calls must not queue behind each other
        return Patch({"n": payload["n"] * 2})

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "custom.many", [f"{mod.name}.slow"])
        decisions = await asyncio.gather(*(kernel.intercept("custom.many", {"n": n}) for n in range(50)))
        assert decisions == [Patch({"n": n * 2}) for n in range(50)]


def test_wire_reply_is_plain_json() -> None:
    assert orjson.loads(orjson.dumps(Cancel("x").to_wire())) == {"decision": "cancel", "reason": "x"}


async def test_reentry_a_b_a_does_not_deadlock(nats_url: str) -> None:
    a, b = Module(unique("ra"), concurrency=2), Module(unique("rb"), concurrency=2)
    s1, s2, s3 = (f"custom.{unique('re')}" for _ in range(3))

    @a.stage(s1)
    async def outer(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Decision:
        assert ctx.bus is not None
        return await ctx.bus.intercept(s2, payload)  # A -> B

    @b.stage(s2)
    async def middle(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Decision:
        assert ctx.bus is not None
        return await ctx.bus.intercept(s3, payload)  # B -> A again

    @a.stage(s3)
    async def inner(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Patch:
        return Patch({"depth": ctx.event_depth, "spawn_depth": ctx.depth})  # the event's depth; no spawn

    async with (
        Bus(nats_url, trust_new=True) as kernel,
        Bus(nats_url, trust_new=True) as bus_a,
        Bus(nats_url, trust_new=True) as bus_b,
    ):
        tasks = [asyncio.ensure_future(a.serve(bus=bus_a)), asyncio.ensure_future(b.serve(bus=bus_b))]
        try:
            for bus in (kernel, bus_a, bus_b):
                await wait_for_chain(bus, s3, [f"{a.name}.inner"])
                await wait_for_chain(bus, s2, [f"{b.name}.middle"])
            await wait_for_chain(kernel, s1, [f"{a.name}.outer"])
            decisions = await asyncio.gather(*(kernel.intercept(s1, {}) for _ in range(4)))
            assert decisions == [Patch({"depth": 2, "spawn_depth": 0})] * 4
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def test_handler_timeouts_are_clamped() -> None:
    mod = Module("clamp")  # at the protocol's bound (an hour); how long a kernel waits is its own ceiling

    @mod.stage("tool.call", timeout=7200)
    async def slow(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    assert mod.declarations[0].timeout == MAX_TIMEOUT


async def test_intercept_after_close_raises(nats_url: str) -> None:
    bus = await Bus(nats_url, trust_new=True).start()
    await bus.middleware.start()
    await bus.close()
    with pytest.raises(BusClosedError):
        await bus.intercept("tool.call", {})


async def test_no_jetstream_is_a_clear_error() -> None:
    with NatsServer(jetstream=False) as server:
        async with Bus(server.url) as bus:
            with pytest.raises(RegistryError, match="JetStream"):
                await bus.intercept("tool.call", {})


def test_bad_names_are_declaration_errors() -> None:
    with pytest.raises(DeclarationError):
        Module("bad name")
    mod = Module("ok")
    with pytest.raises(DeclarationError, match="reference"):

        @mod.stage("tool.call", before="a.b.c")
        async def h(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()


@pytest.mark.parametrize("name", [["shell"], {"tool": "shell"}, 7])
async def test_a_match_field_of_another_shape_reaches_the_guard(kernel: Bus, nats_url: str, name: object) -> None:
    """No honest agent sends a tool name that is a list or an object; a guard is called for it, never skipped."""
    module = Module(unique("shape"))

    @module.stage(Stage.TOOL_CALL, match="shell", fail_closed=True)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel(f"unreadable tool name {payload['name']!r}")

    async with serving(module, nats_url, detach_on_stop=True):
        await wait_for_chain(kernel, "tool.call", [f"{module.name}.no_rm"])
        decision = await kernel.intercept(Stage.TOOL_CALL, {"name": name, "input": {"command": "rm -rf /"}})
        assert decision == Cancel(f"unreadable tool name {name!r}", f"{module.name}.no_rm")
        assert await kernel.intercept(Stage.TOOL_CALL, {"name": "ls", "input": {}}) == Continue()
