"""Composition of handlers against a real server: when, enable/disable, priority and approval order, grants."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from bus import Bus, Cancel, Continue, Module, Patch
from bus._core.declaration import declare
from bus._core.errors import MiddlewareError
from bus._middleware.registry import TRUST_BUCKET, open_bucket
from bus._middleware.schema import TrustRecord
from bus._switching import disable_handler, enable_handler, grant_handler, revoke_handler
from bus._transport.port import RawMessage
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.conftest import run_cli, unique
from tests.support.waiting import wait_until


async def cli(*args: str) -> Any:
    """``hookbus ARGS`` in a thread: the modules served in this loop keep beating meanwhile."""
    return await asyncio.to_thread(run_cli, *args)


@pytest.fixture
async def strict(nats_url: str) -> AsyncIterator[Bus]:
    """A kernel that trusts nothing by itself: the test approves, in the order it chooses."""
    async with Bus(nats_url, name="strict") as bus:
        await bus.middleware.start()
        yield bus


def _appender(mod: Module, stage: str, name: str, **options: Any) -> None:
    """Declare ``name`` on ``stage``: it appends its name to ``payload['seen']``."""

    async def handler(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "seen": [*payload.get("seen", []), name]})

    mod.stage(stage, name=name, **options)(handler)


async def _requests_to(bus: Bus, mod: Module) -> list[RawMessage]:
    """Every middleware request sent to ``mod``'s instances (a plain subscription beside its queue group)."""
    seen: list[RawMessage] = []

    async def keep(msg: RawMessage) -> None:
        seen.append(msg)

    await bus.port.subscribe_raw(f"hookbus.mw.{mod.name}.*", keep)
    await bus.flush()
    return seen


async def test_when_takes_only_matching_calls_and_skips_the_rest_without_a_request(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("scoped"))
    stage = f"custom.{unique('w')}"
    calls: list[dict[str, Any]] = []

    @mod.stage(stage, when={"agents": ["eva"], "templates": ["support-*"]})
    async def only_eva(stage: str, payload: dict[str, Any], ctx: Any) -> Cancel:
        calls.append({"agent": ctx.agent, "template": ctx.template, "user": ctx.user, "process": ctx.process})
        return Cancel("eva's support guard")

    requests = await _requests_to(kernel, mod)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.only_eva"])
        for ctx in (
            {"agent": "bob", "template": "support-1"},
            {"agent": "eva", "template": "sales"},
            {"agent": "eva"},  # a filled field the call does not carry does not match
            {"template": "support-1"},
        ):
            assert await kernel.intercept(stage, {}, ctx) == Continue(), ctx
        assert requests == [] and calls == []
        eva = {"agent": "eva", "template": "support-7", "user": "alice", "process": "runner/42", "session": "s1"}
        assert await kernel.intercept(stage, {}, eva) == Cancel("eva's support guard", f"{mod.name}.only_eva")
        await wait_until(lambda: len(requests) == 1, what="the one request")
        done = await cli(
            "intercept",
            stage,
            "{}",
            "--agent",
            "eva",
            "--template",
            "support-2",
            "--user",
            "bo",
            "--nats-url",
            nats_url,
        )
        assert '"decision":"cancel"' in done.stdout, done.stdout + done.stderr
    assert calls[0] == {"agent": "eva", "template": "support-7", "user": "alice", "process": "runner/42"}
    assert calls[1:] == [{"agent": "eva", "template": "support-2", "user": "bo", "process": None}]


async def test_when_in_a_module_chain_sends_only_the_handlers_it_takes(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("mixed"))
    stage = f"custom.{unique('w')}"
    _appender(mod, stage, "every")
    _appender(mod, stage, "users", when={"users": ["a*"]}, after="every")
    _appender(mod, stage, "sessions", when={"sessions": ["s-?"]}, after="users")
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.{n}" for n in ("every", "users", "sessions")])
        assert await kernel.intercept(stage, {}, {"user": "bob", "session": "s-1"}) == Patch(
            {"seen": ["every", "sessions"]}
        )
        assert await kernel.intercept(stage, {}, {"user": "ann", "session": "s-10"}) == Patch(
            {"seen": ["every", "users"]}
        )


async def test_priority_then_references_then_first_approval_order(strict: Bus, nats_url: str) -> None:
    """Five handlers, declared alphabetically; the chain follows references, priority, then first approval."""
    mod = Module(unique("prio"))
    stage = f"custom.{unique('p')}"
    _appender(mod, stage, "alpha")
    _appender(mod, stage, "beta")
    _appender(mod, stage, "gamma")
    _appender(mod, stage, "delta", priority=50, after="gamma")  # references first: after gamma despite 50
    _appender(mod, stage, "zeta", priority=10)
    decls = {decl.name: decl for decl in mod.declarations}
    view = await strict.middleware.start()
    kv = await open_bucket(strict.port, TRUST_BUCKET)
    async with serving(mod, nats_url):
        await wait_until(lambda: len(view.chains.get(stage, _NONE).waiting) == 5, what="five waiting handlers")
        # beta: a trust record written before first approval times existed (its `at` orders it), approved earliest.
        old = TrustRecord(
            identity=decls["beta"].identity(),
            declaration=decls["beta"].to_wire(),
            approved_by="old",
            how="approved",
            at=time.time() - 3600,
        )
        wire = msgspec.to_builtins(old)
        del wire["first_at"]
        await kv.put(decls["beta"].qualname, msgspec.json.encode(wire))
        for name in ("zeta", "gamma", "alpha", "delta"):
            await view.approve(decls[name])
        expected = ["zeta", "beta", "gamma", "delta", "alpha"]
        await wait_for_chain(strict, stage, [f"{mod.name}.{n}" for n in expected])
        assert await strict.intercept(stage, {}) == Patch({"seen": expected})
        # Re-approving keeps the first approval time: alpha stays last among equals.
        await view.approve(decls["alpha"])
        entry = await kv.get(decls["alpha"].qualname)
        assert entry is not None
        record = msgspec.json.decode(entry.value, type=TrustRecord)
        assert record.first_at is not None and record.first_at < record.at
        assert [link.decl.name for link in view.chains[stage].links] == expected


async def test_priority_is_part_of_the_identity_and_defaults_are_not() -> None:
    plain = declare("m", "h", "tool.call")
    assert declare("m", "h", "tool.call", priority=0, when={}).identity() == plain.identity()
    assert declare("m", "h", "tool.call", priority=1).identity() != plain.identity()
    assert declare("m", "h", "tool.call", when={"agents": "eva"}).identity() != plain.identity()


async def test_disable_on_every_kernel_and_a_disabled_guard_cancels_nothing(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("guard"), heartbeat=0.2)
    stage = f"custom.{unique('d')}"

    @mod.stage(stage, fail_closed=True)
    async def deny(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("no")

    name = f"{mod.name}.deny"
    journal = await JournalRecorder().attach(kernel)
    async with Bus(nats_url, name="second", trust_new=True) as second:
        async with serving(mod, nats_url) as task:
            for bus in (kernel, second):
                await wait_for_chain(bus, stage, [name])
            done = await cli("disable", name, "--nats-url", nats_url)
            assert done.returncode == 0, done.stderr
            assert f"{name}: disabled, global" in done.stdout
            for bus in (kernel, second):
                await wait_for_chain(bus, stage, [])
                assert await bus.intercept(stage, {}) == Continue()
            task.cancel()  # the guard's module goes: a disabled guard does not hold its stage
            await asyncio.gather(task, return_exceptions=True)
            await wait_until(lambda: name in {r.decl.qualname for r in kernel.middleware.view.guards.values()})  # type: ignore[union-attr]
            await wait_until(lambda: not kernel.middleware.view.declarations(), what="the module gone")  # type: ignore[union-attr]
            assert await kernel.intercept(stage, {}) == Continue()
        async with serving(mod, nats_url):
            await wait_until(lambda: name in kernel.middleware.view.declarations(), what="the module back")  # type: ignore[union-attr]
            await enable_handler(kernel, name)
            for bus in (kernel, second):
                await wait_for_chain(bus, stage, [name])
                assert await bus.intercept(stage, {}) == Cancel("no", name)
    await journal.wait_for(2)
    switched = [(e.who, e.decision) for e in journal.entries if e.decision in ("enabled", "disabled")]
    assert switched == [(name, "disabled"), (name, "enabled")]
    assert any(e.cause and "disabled by" in e.cause for e in journal.entries)


async def test_grant_and_revoke_per_agent(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("granted"))
    stage = f"custom.{unique('g')}"

    @mod.stage(stage)
    async def tag(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({"tagged": True})

    name = f"{mod.name}.tag"
    tagged = Patch({"tagged": True})
    requests = await _requests_to(kernel, mod)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [name])
        assert await kernel.intercept(stage, {}, {"agent": "bob"}) == tagged  # global: every agent
        view = kernel.middleware.view
        assert view is not None
        record = await grant_handler(kernel, name, "eva")
        assert record.agents == ["eva"]
        await view.wait_until(lambda: view.chains[stage].links[0].agents == frozenset({"eva"}), 10)
        sent = len(requests)
        assert await kernel.intercept(stage, {}, {"agent": "bob"}) == Continue()
        assert await kernel.intercept(stage, {}) == Continue()  # no agent named: not a granted one
        assert len(requests) == sent  # skipped before any request
        assert await kernel.intercept(stage, {}, {"agent": "eva"}) == tagged
        listed = await cli("chain", stage, "--agent", "bob", "--nats-url", nats_url)
        assert listed.returncode == 0, listed.stderr
        assert f"x {name}" in listed.stdout and "not for bob" in listed.stdout, listed.stdout
        listed = await cli("chain", stage, "--agent", "eva", "--nats-url", nats_url)
        assert f"1. {name}" in listed.stdout and "granted to eva" in listed.stdout, listed.stdout
        await revoke_handler(kernel, name, "eva")
        await view.wait_until(lambda: view.chains[stage].links[0].agents == frozenset(), 10)
        assert await kernel.intercept(stage, {}, {"agent": "eva"}) == Continue()
        with pytest.raises(MiddlewareError, match="not granted to eva"):
            await revoke_handler(kernel, name, "eva")
        await grant_handler(kernel, name, None)  # global again
        await view.wait_until(lambda: view.chains[stage].links[0].agents is None, 10)
        assert await kernel.intercept(stage, {}, {"agent": "bob"}) == tagged
        with pytest.raises(MiddlewareError, match="is global"):
            await revoke_handler(kernel, name, "bob")


async def test_switching_refuses_unknown_and_malformed_names(kernel: Bus) -> None:
    with pytest.raises(MiddlewareError, match=r"not module\.handler"):
        await disable_handler(kernel, "no-dot")
    with pytest.raises(MiddlewareError, match=r"no handler named 'nobody\.here'"):
        await disable_handler(kernel, "nobody.here")
    failed = await cli("grant", "nobody.here", "--agent", "bad agent", "--nats-url", kernel.servers[0])
    assert failed.returncode != 0 and "nobody.here" in failed.stderr


async def test_a_hostile_switch_record_is_ignored(kernel: Bus, nats_url: str) -> None:
    mod = Module(unique("hostile"))
    stage = f"custom.{unique('h')}"
    _appender(mod, stage, "one")
    name = f"{mod.name}.one"
    kv = await open_bucket(kernel.port, TRUST_BUCKET)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [name])
        await kv.put(f"switch.{name}", b'{"enabled": "false", "agents": [7]}')
        await kv.put(f"switch.{mod.name}.x.y", b'{"enabled": false}')  # not a handler's key: nothing switched
        await disable_handler(kernel, name)  # the operator's next switch overwrites the bad record
        await wait_for_chain(kernel, stage, [])  # the watch delivers in order: the bad records were read first
        view = kernel.middleware.view
        assert view is not None and set(view.switches) == {name}
        assert await kernel.intercept(stage, {}) == Continue()


_NONE: Any = type("_None", (), {"waiting": ()})()
