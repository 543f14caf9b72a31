"""A fail-closed guard always guards: killed, stopped, replaced, next to handlers nobody approved.

Real nats-server, real module processes (tests/support/mw_module.py), the real CLI as
a fresh agent process and as the operator.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Continue, Decision, MiddlewareOptions, Module, Patch
from bus._core.declaration import declare
from bus._journal.entries import JournalEntry
from bus._middleware.guards import GUARDS_BUCKET, GuardRecord
from bus._middleware.kernel.view import View
from bus._middleware.registry import open_bucket
from bus.testing import EventRecorder, JournalRecorder, serving, wait_for_chain
from tests.conftest import run_cli, unique
from tests.support.mwproc import module_process

HEARTBEAT = 0.2
#: The kernel's liveness window for these modules: LIVENESS_FACTOR heartbeats.
WINDOW = 3 * HEARTBEAT
RM = {"name": "shell", "input": {"command": "rm -rf /"}}
LS = {"name": "shell", "input": {"command": "ls"}}


async def cli(nats_url: str, *args: str) -> str:
    done = await asyncio.to_thread(run_cli, *args, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def journaled(journal: JournalRecorder, predicate: Callable[[JournalEntry], bool]) -> None:
    """Wait (bounded) until the journal holds an entry ``predicate`` accepts."""
    async with asyncio.timeout(10):
        while not any(predicate(entry) for entry in journal.entries):
            await journal.wait_for(len(journal.entries) + 1)


def held(view: View, stage: str) -> list[str]:
    chain = view.chains.get(stage)
    return [link.hold or "" for link in chain.holds] if chain else []


async def cancelled_for(kernel: Bus, stage: str, qualname: str, seconds: float) -> list[Decision]:
    """Intercept for ``seconds`` of the kernel's clock; every decision must be a cancel naming the guard."""
    decisions: list[Decision] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        decision = await kernel.intercept(stage, LS)
        assert isinstance(decision, Cancel), f"call {len(decisions)} after the guard's death: {decision}"
        assert decision.handler == qualname and qualname in decision.reason
        decisions.append(decision)
        await asyncio.sleep(0.02)  # a steady agent, not a busy loop
    return decisions


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
async def test_a_dead_guard_keeps_cancelling_until_detached(nats_url: str, how: signal.Signals) -> None:
    name, stage = unique("guard"), f"custom.{unique('g')}"
    qualname = f"{name}.no_rm"
    flags = ("--behaviour", "guard", "--fail-closed", "--handler", "no_rm", "--heartbeat", str(HEARTBEAT))
    async with Bus(nats_url, name="agent", trust_new=True) as kernel:
        view = await kernel.middleware.start()
        events = EventRecorder(lambda event: event.payload.get("module") == name)
        await kernel.subscribe("eva.module.*", events)
        await kernel.flush()
        journal = await JournalRecorder().attach(kernel)
        with module_process(nats_url, name, stage, *flags) as proc:
            await wait_for_chain(kernel, stage, [qualname])
            assert isinstance(await kernel.intercept(stage, LS), Patch)  # the live guard answers
            proc.send_signal(how)
            await asyncio.to_thread(proc.wait, 10)
            decisions = await cancelled_for(kernel, stage, qualname, 4 * WINDOW + 0.5)
        await view.wait_until(lambda: bool(held(view, stage)), 10)
        assert "is gone since" in held(view, stage)[0]
        decision = await kernel.intercept(stage, LS)
        assert isinstance(decision, Cancel) and f"{qualname} is gone since" in decision.reason
        assert len(decisions) > 10
        await journaled(journal, lambda e: e.decision == "absent" and e.who == qualname and "is gone" in str(e.cause))

        # A fresh agent process, started after the death, enforces it too.
        fresh = await cli(nats_url, "intercept", stage, orjson.dumps(LS).decode())
        assert orjson.loads(fresh)["decision"] == "cancel" and "is gone" in orjson.loads(fresh)["reason"]
        assert f"! {qualname}" in await cli(nats_url, "chain", stage)

        # The module coming back ends the hold; gone again, it holds again.
        with module_process(nats_url, name, stage, *flags) as proc:
            await view.wait_until(lambda: not held(view, stage), 10)
            assert isinstance(await kernel.intercept(stage, LS), Patch)
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 10)
        await view.wait_until(lambda: bool(held(view, stage)), 10)

        # Only the operator ends it: journaled, announced, and calls continue again.
        out = await cli(nats_url, "detach", qualname)
        assert f"detached {qualname}" in out
        await view.wait_until(lambda: stage not in view.chains, 10)
        assert await kernel.intercept(stage, LS) == Continue()
        subjects = [event.subject for event in await events.wait_for(3)]
        assert subjects == ["eva.module.attached", "eva.module.attached", "eva.module.detached"]
        assert events.events[-1].payload["handlers"] == [qualname]
        await journaled(journal, lambda e: e.decision == "detached" and e.who == qualname)


async def test_detach_is_refused_while_the_guard_is_alive(nats_url: str) -> None:
    name, stage = unique("alive"), f"custom.{unique('a')}"
    async with Bus(nats_url, trust_new=True) as kernel:
        with module_process(nats_url, name, stage, "--fail-closed"):
            await wait_for_chain(kernel, stage, [f"{name}.h"])
            done = await asyncio.to_thread(run_cli, "detach", name, "--nats-url", nats_url)
            assert done.returncode == 1 and "is alive" in done.stderr


async def test_a_changed_guard_old_version_answers_then_cancels_until_approved(nats_url: str) -> None:
    name, stage = unique("ver"), f"custom.{unique('v')}"
    qualname = f"{name}.no_rm"
    # A slower beat than the kill tests: v1 must stay alive through v2's arrival even on a loaded machine
    # (a module starved of CPU for a whole short window is rightly taken as gone, and then the stage holds).
    flags = ("--behaviour", "guard", "--fail-closed", "--handler", "no_rm", "--heartbeat", "1.0")
    async with Bus(nats_url, name="strict-agent") as kernel:
        view = await kernel.middleware.start()
        with module_process(nats_url, name, stage, *flags) as v1:
            await view.wait_until(lambda: bool(view.chains.get(stage) and view.chains[stage].waiting), 10)
            await cli(nats_url, "approve", qualname)
            await wait_for_chain(kernel, stage, [qualname])
            with module_process(nats_url, name, stage, *flags, "--code", "v2") as v2:
                await view.wait_until(lambda: bool(view.chains[stage].waiting), 10)  # v2: modified
                # v1 alive while v2 waits: every call goes to v1 only (a rolling deploy never mixes them).
                decisions = await asyncio.gather(*(kernel.intercept(stage, LS) for _ in range(30)))
                assert all(isinstance(d, Patch) for d in decisions), decisions
                assert {d.payload["served_by"] for d in decisions if isinstance(d, Patch)} == {v1.pid}
                v1.send_signal(signal.SIGTERM)
                await asyncio.to_thread(v1.wait, 10)
                await view.wait_until(lambda: bool(held(view, stage)), 10)
                decision = await kernel.intercept(stage, LS)
                assert decision == Cancel(f"{qualname} changed, waiting for approval", qualname)
                await cli(nats_url, "approve", qualname)
                await wait_for_chain(kernel, stage, [qualname])
                decision = await kernel.intercept(stage, LS)
                assert isinstance(decision, Patch) and decision.payload["served_by"] == v2.pid


async def test_an_unapproved_handler_with_a_dangling_reference_changes_nothing(nats_url: str) -> None:
    guard, stranger, stage = unique("guard"), unique("stranger"), f"custom.{unique('u')}"
    async with Bus(nats_url, name="strict-agent", managed=[f"{guard}.no_rm"]) as kernel:
        view = await kernel.middleware.start()
        broken = EventRecorder(lambda event: event.payload.get("stage") in (stage, "barrier"))
        await kernel.subscribe("eva.broken.*", broken)
        await kernel.flush()
        with (
            module_process(nats_url, guard, stage, "--behaviour", "guard", "--fail-closed", "--handler", "no_rm"),
            module_process(nats_url, stranger, stage, "--behaviour", "continue", "--after", "nosuch.handler"),
        ):
            await wait_for_chain(kernel, stage, [f"{guard}.no_rm"])
            await view.wait_until(lambda: [w.decl.module for w in view.chains[stage].waiting] == [stranger], 10)
            decisions = [await kernel.intercept(stage, RM) for _ in range(20)]
            assert decisions == [Cancel("only by hand", f"{guard}.no_rm")] * 20
            assert view.chains[stage].broken is None
            await kernel.emit("eva.broken.set", {"stage": "barrier"})  # nothing about our stage before it
            [event] = await broken.wait_for(1)
            assert event.payload == {"stage": "barrier"}


async def test_a_broken_chain_holding_a_fail_closed_guard_cancels(kernel: Bus, nats_url: str) -> None:
    guard, loop, stage = Module(unique("guard")), Module(unique("loop")), f"custom.{unique('b')}"

    @guard.stage(stage, fail_closed=True)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    @loop.stage(stage, before="b")
    async def a(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    @loop.stage(stage, before="a")
    async def b(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    view = await kernel.middleware.start()
    async with serving(guard, nats_url):
        await wait_for_chain(kernel, stage, [f"{guard.name}.no_rm"])
        async with serving(loop, nats_url):
            await view.wait_until(lambda: bool(view.chains[stage].broken), 10)
            decision = await kernel.intercept(stage, LS)
            assert isinstance(decision, Cancel) and decision.handler == f"{guard.name}.no_rm"
            assert decision.reason.startswith(f"chain of {stage} broken: cycle among")
        await wait_for_chain(kernel, stage, [f"{guard.name}.no_rm"])


async def test_a_reference_to_a_gone_handler_is_not_dangling(kernel: Bus, nats_url: str) -> None:
    first, second, stage = Module(unique("first")), Module(unique("second")), f"custom.{unique('r')}"
    events = EventRecorder(lambda event: event.payload.get("module") == first.name)
    await kernel.subscribe("eva.module.*", events)
    await kernel.flush()

    @first.stage(stage)
    async def a(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "a": True})

    @second.stage(stage, after=f"{first.name}.a")
    async def b(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel(f"b saw a={payload.get('a')}")

    async with serving(second, nats_url):
        async with serving(first, nats_url):
            await wait_for_chain(kernel, stage, [f"{first.name}.a", f"{second.name}.b"])
            assert await kernel.intercept(stage, {}) == Cancel("b saw a=True", f"{second.name}.b")
        await wait_for_chain(kernel, stage, [f"{second.name}.b"])  # a's module is gone: b keeps running
        assert await kernel.intercept(stage, {}) == Cancel("b saw a=None", f"{second.name}.b")
        assert [e.subject for e in await events.wait_for(2)] == ["eva.module.attached", "eva.module.detached"]
        assert events.events[1].payload["reason"] == "gone"


async def test_liveness_window_is_configurable_and_fail_open_modules_leave(nats_url: str) -> None:
    name, stage = unique("open"), f"custom.{unique('o')}"
    options = MiddlewareOptions(liveness_factor=2)
    async with Bus(nats_url, trust_new=True, middleware=options) as kernel:
        with module_process(nats_url, name, stage, "--heartbeat", str(HEARTBEAT)) as proc:
            await wait_for_chain(kernel, stage, [f"{name}.h"])
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)
            await wait_for_chain(kernel, stage, [], timeout=10)
        assert await kernel.intercept(stage, {}) == Continue()


async def test_a_typo_of_a_declared_stage_is_named(nats_url: str, caplog: pytest.LogCaptureFixture) -> None:
    mod = Module(unique("typo"))
    stage = f"custom.{unique('deploy')}.run"
    typo = stage.replace(".run", "_run")

    @mod.stage(stage)
    async def check(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    async with Bus(nats_url, trust_new=True) as kernel, serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.check"])
        assert await kernel.intercept(typo, {}) == Continue()
        assert await kernel.intercept(typo, {}) == Continue()
        warnings = [r.getMessage() for r in caplog.records if "a typo?" in r.getMessage()]
        assert warnings == [f"stage {typo!r} has no handler, but {stage!r} does: a typo? (the call continues)"]
        assert await kernel.intercept("custom.nothing.like.it", {}) == Continue()
        done = await asyncio.to_thread(run_cli, "intercept", typo, "{}", "--nats-url", nats_url)
        assert done.returncode == 0 and repr(stage) in done.stderr


async def test_detach_on_stop_ends_the_guard_with_its_module(kernel: Bus, nats_url: str) -> None:
    demo, kept, stage = Module(unique("demo")), Module(unique("kept")), f"custom.{unique('d')}"
    other = f"{stage}.kept"

    @demo.stage(stage, fail_closed=True)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    @kept.stage(other, fail_closed=True)
    async def guard(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    view = await kernel.middleware.start()
    async with serving(demo, nats_url, detach_on_stop=True), serving(kept, nats_url):
        await wait_for_chain(kernel, stage, [f"{demo.name}.no_rm"])
        await wait_for_chain(kernel, other, [f"{kept.name}.guard"])
    await view.wait_until(lambda: stage not in view.chains and bool(held(view, other)), 10)
    assert await kernel.intercept(stage, LS) == Continue()
    assert isinstance(await kernel.intercept(other, LS), Cancel)  # the default: it keeps guarding


async def test_a_stalled_registry_watch_forgets_no_chain(nats_url: str) -> None:
    name, stage = unique("stall"), f"custom.{unique('s')}"
    flags = ("--behaviour", "guard", "--fail-closed", "--heartbeat", str(HEARTBEAT))
    async with Bus(nats_url, trust_new=True) as kernel:
        view = await kernel.middleware.start()
        with module_process(nats_url, name, stage, *flags):
            await wait_for_chain(kernel, stage, [f"{name}.h"])
            watch = view._modules_watch
            assert watch is not None
            await watch.stop()  # the kernel's own trouble: it hears no more heartbeats
            until = time.monotonic() + 4 * WINDOW + 0.5
            while time.monotonic() < until:  # silence it could not hear is no death: the handler still decides
                decision = await kernel.intercept(stage, LS)
                assert isinstance(decision, Patch) and decision.payload["served_by"], decision
                await asyncio.sleep(0.02)
            assert view.chains[stage].links[0].decl.qualname == f"{name}.h"


async def test_a_held_stage_accounts_for_every_call_in_the_journal(nats_url: str) -> None:
    decl = declare(unique("gone"), "no_rm", f"custom.{unique('h')}", fail_closed=True)
    calls = 50
    async with Bus(nats_url) as reader:
        journal = await JournalRecorder().attach(reader)
        kernel = await Bus(nats_url, managed=[decl.qualname]).start()
        view = await kernel.middleware.start()
        guards = await open_bucket(kernel.port, GUARDS_BUCKET)
        record = GuardRecord(decl, decl.identity(), time.time())
        await guards.put(record.key, record.to_bytes())
        await view.wait_until(lambda: bool(held(view, decl.stage)), 10)
        decisions = [await kernel.intercept(decl.stage, LS) for _ in range(calls)]
        started = time.strftime("%H:%M:%S", time.localtime(record.at))
        assert decisions == [Cancel(f"{decl.qualname} is gone (it last started at {started})", decl.qualname)] * calls
        await kernel.close()  # ends the open window: its count is journaled
        mine = [e for e in await journal.wait_for(2) if e.who == decl.qualname]

        def accounted() -> int:
            counted = [re.search(r"; (\d+) more calls? cancelled alike", e.cause or "") for e in mine]
            return sum(int(m.group(1)) if m else 1 for m in counted)

        async with asyncio.timeout(10):
            while accounted() < calls:
                await journal.wait_for(len(journal.entries) + 1)
                mine = [e for e in journal.entries if e.who == decl.qualname]
        assert accounted() == calls and {e.decision for e in mine} == {"absent"}
        assert len(mine) < calls
