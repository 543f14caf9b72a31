"""``hookbus shadow NAME``: any module's handler on live traffic, its decisions journaled as would_*, never applied."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bus import Ask, Bus, Cancel, Continue, Module, Patch
from bus._middleware.asks.records import payload_sha256
from bus._switching import shadow_handler
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.cli.test_cli import UpProcess
from tests.conftest import run_cli, unique
from tests.support.waiting import wait_until


def _in_shadow(bus: Bus, stage: str, name: str, shadow: bool = True) -> bool:
    view = bus.middleware.view
    chain = view.chains.get(stage) if view is not None else None
    return chain is not None and any(link.decl.qualname == name and link.shadow is shadow for link in chain.links)


def _module(stage: str, calls: list[str]) -> Module:
    """A fail-closed cancel, a patch and an ask, in chain order, each noting that it was called."""
    mod = Module(unique("shadowed"), heartbeat=0.2)

    @mod.stage(stage, fail_closed=True, priority=3)
    async def deny(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
        calls.append("deny")
        return Cancel("no rm") if "rm" in payload.get("command", "") else Continue()

    @mod.stage(stage, priority=2)
    async def tag(stage: str, payload: dict[str, Any]) -> Patch:
        calls.append(f"tag:{payload.get('tagged', False)}")
        return Patch({**payload, "tagged": True})

    @mod.stage(stage, priority=1)
    async def confirm(stage: str, payload: dict[str, Any]) -> Ask:
        calls.append(f"confirm:{payload.get('tagged', False)}")
        return Ask("a person decides", timeout=60)

    return mod


async def test_shadow_runs_every_handler_journals_would_and_applies_nothing(kernel: Bus, nats_url: str) -> None:
    stage = f"custom.{unique('sh')}"
    calls: list[str] = []
    mod = _module(stage, calls)
    names = [f"{mod.name}.{handler}" for handler in ("deny", "tag", "confirm")]
    journal = await JournalRecorder().attach(kernel)
    async with Bus(nats_url, name="second", trust_new=True) as second, serving(mod, nats_url):
        for bus in (kernel, second):
            await wait_for_chain(bus, stage, names)
        for name in names:
            done = await asyncio.to_thread(run_cli, "shadow", name, "--nats-url", nats_url)
            assert done.returncode == 0, done.stderr
            assert f"{name}: enabled, shadow, global" in done.stdout
        for bus in (kernel, second):
            await wait_until(lambda bus=bus: all(_in_shadow(bus, stage, n) for n in names), what="every switch")
        payload = {"command": "rm -rf /"}
        for bus in (kernel, second):
            calls.clear()
            assert await bus.intercept(stage, payload, {"agent": "eva", "session": "s1"}) == Continue()
            # each called, on the payload unpatched; the ask returned at once (held, it would wait 60 s)
            assert calls == ["deny", "tag:False", "confirm:False"]
        await wait_until(
            lambda: sum(e.decision.startswith("would_") for e in journal.entries) >= 6, what="the would_ entries"
        )
        would = [(e.who, e.decision) for e in journal.entries if e.decision.startswith("would_")][:3]
        assert would == [(names[0], "would_cancel"), (names[1], "would_patch"), (names[2], "would_ask")]
        digest = payload_sha256(payload)
        shadowed = [e for e in journal.entries if e.decision.startswith("would_")]
        assert all(e.cause is not None and e.cause.startswith(f"payload {digest}") for e in shadowed)
        assert "no rm" in (shadowed[0].cause or "") and "a person decides" in (shadowed[2].cause or "")
        done = await asyncio.to_thread(run_cli, "shadow", names[0], "--off", "--nats-url", nats_url)
        assert done.returncode == 0 and f"{names[0]}: enabled, global" in done.stdout, done.stdout + done.stderr
        await wait_until(lambda: _in_shadow(kernel, stage, names[0], shadow=False), what="the guard out of shadow")
        assert await kernel.intercept(stage, payload) == Cancel("no rm", names[0])
    switched = [(e.who, e.decision) for e in journal.entries if e.decision in ("shadowed", "unshadowed")]
    assert switched == [*((name, "shadowed") for name in names), (names[0], "unshadowed")]


async def test_a_guard_in_shadow_neither_bites_nor_holds_when_its_module_is_gone(kernel: Bus, nats_url: str) -> None:
    stage = f"custom.{unique('gone')}"
    calls: list[str] = []
    mod = _module(stage, calls)
    name = f"{mod.name}.deny"
    async with serving(mod, nats_url) as task:
        await wait_until(lambda: name in kernel.middleware.view.declarations(), what="the module")  # type: ignore[union-attr]
        await wait_for_chain(kernel, stage, [name, f"{mod.name}.tag", f"{mod.name}.confirm"])
        await shadow_handler(kernel, name)
        for other in ("tag", "confirm"):
            await shadow_handler(kernel, f"{mod.name}.{other}")
        await wait_until(lambda: _in_shadow(kernel, stage, f"{mod.name}.confirm"), what="the switches")
        assert await kernel.intercept(stage, {"command": "rm"}) == Continue()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    view = kernel.middleware.view
    assert view is not None
    await wait_until(lambda: name in {r.decl.qualname for r in view.guards.values()}, what="the guard record")
    await wait_until(lambda: not view.declarations(), what="the module gone")
    assert not view.chains.get(stage) or not view.chains[stage].holds
    assert await kernel.intercept(stage, {"command": "rm"}) == Continue()  # a shadow guard never holds its stage


async def test_shadow_report_counts_a_module_handlers_would_be_decisions(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    stage = f"custom.{unique('rep')}"
    up = UpProcess(workspace)
    try:
        mod = Module(unique("reported"), heartbeat=0.2)

        @mod.stage(stage, fail_closed=True)
        async def deny(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
            return Cancel("no rm") if "rm" in payload["command"] else Continue()

        name = f"{mod.name}.deny"
        async with Bus(up.nats_url, trust_new=True) as agent, serving(mod, up.nats_url):
            await wait_for_chain(agent, stage, [name])
            done = await asyncio.to_thread(run_cli, "shadow", name, "--nats-url", up.nats_url)
            assert done.returncode == 0, done.stderr
            await wait_until(lambda: _in_shadow(agent, stage, name), what="the switch")
            for command in ("rm -rf /", "ls", "rm x"):
                ctx = {"agent": "eva", "session": "s7"}
                assert await agent.intercept(stage, {"command": command}, ctx) == Continue()

        def reported() -> str:
            done = run_cli("shadow", "report", name, "--since", "1h", "--workspace", str(workspace))
            assert done.returncode == 0, done.stderr
            return done.stdout

        await wait_until(lambda: "2 calls would have changed" in reported(), what="the shadow entries stored")
        text = reported()
        assert "would_cancel: 2" in text and "agent=eva session=s7" in text and "no rm" in text, text
    finally:
        up.close()


async def test_the_same_switch_puts_an_enforcing_rule_in_shadow(nats_url: str, tmp_path: Path) -> None:
    stem = unique("ruled")
    stage = f"custom.{unique('r')}"
    path = tmp_path / f"{stem}.yaml"
    condition = 'payload.command == "rm"'
    path.write_text(f"rules:\n  - name: no-rm\n    stage: {stage}\n    if: '{condition}'\n    then: cancel\n")
    name = f"{stem}.no-rm"
    async with Bus(nats_url, rules=[path]) as bus:
        await bus.middleware.start()
        journal = await JournalRecorder().attach(bus)
        assert await bus.intercept(stage, {"command": "rm"}) == Cancel("cancelled by a rule", name)
        await shadow_handler(bus, name)
        await wait_until(lambda: _in_shadow(bus, stage, name), what="the rule in shadow")
        assert await bus.intercept(stage, {"command": "rm"}) == Continue()
        await wait_until(lambda: any(e.decision == "would_cancel" for e in journal.entries), what="would_cancel")
        await shadow_handler(bus, name, on=False)
        await wait_until(lambda: _in_shadow(bus, stage, name, shadow=False), what="the rule enforcing again")
        assert await bus.intercept(stage, {"command": "rm"}) == Cancel("cancelled by a rule", name)
    [would] = [e for e in journal.entries if e.decision == "would_cancel"]
    assert would.who == name and (would.cause or "").startswith(f"payload {payload_sha256({'command': 'rm'})}")
