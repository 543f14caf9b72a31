"""Rule guards on a real nats-server: fleet rules across kernels, approval, hot reload, shadow, per-agent files."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bus import Bus, Cancel, Continue, Patch, RuleFileError
from bus._core.subjects import RULES_BUCKET
from bus._middleware.kernel.metrics import MIDDLEWARE
from bus._middleware.kernel.view import View
from bus._middleware.rules.compile import compile_file
from bus._middleware.rules.files import parse
from bus.testing import JournalRecorder
from tests.conftest import run_cli, unique
from tests.support.waiting import wait_until

LS = {"name": "shell", "input": {"command": "ls"}}


def rm(tool: str) -> dict[str, object]:
    """A call of the tool ``tool`` (each test's rules match their own tool: the server is shared)."""
    return {"name": tool, "input": {"command": "rm -rf /"}}


def rule_file(tool: str, reason: str = "no rm -rf", mode: str = "enforce") -> bytes:
    test = 'payload.input.command.contains("rm -rf")'
    return f"""
rules:
  - name: no-rm
    stage: tool
    match: {tool}
    if: '{test}'
    then: {{cancel: "{reason}: {{{{ payload.input.command }}}}"}}
    mode: {mode}
""".encode()


async def push(bus: Bus, stem: str, data: bytes) -> None:
    kv = await bus.port.ensure_bucket(RULES_BUCKET)
    await kv.put(stem, data)


async def until(view: View, check: Callable[[], bool]) -> None:
    await view.wait_until(check, 10)


def runs(view: View, qualname: str, identity_prefix: str = "") -> bool:
    chain = view.chains.get("tool.call")
    return chain is not None and any(
        link.decl.qualname == qualname and link.identity.startswith(identity_prefix) for link in chain.links
    )


def identity_of(view: View, qualname: str) -> str:
    return next(link.identity for link in view.chains["tool.call"].links if link.decl.qualname == qualname)


def waits(view: View, qualname: str) -> bool:
    chain = view.chains.get("tool.call")
    return chain is not None and any(link.decl.qualname == qualname for link in chain.waiting)


async def approve(nats_url: str, name: str) -> None:
    done = await asyncio.to_thread(run_cli, "approve", name, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr


def test_a_broken_file_is_refused_with_its_line() -> None:
    text = "rules:\n  - name: ok\n    stage: tool\n    if: 'true'\n"
    text += "  - name: bad\n    stage: tool\n    if: 'payld.x == 1'\n"

    with pytest.raises(RuleFileError) as caught:
        compile_file(parse(text, "guards.yaml", "guards"))
    assert (caught.value.file, caught.value.line) == ("guards.yaml", 7)
    assert "payld" in caught.value.reason
    with pytest.raises(RuleFileError) as unknown:
        parse("rules:\n  - name: x\n    stage: tool\n    iff: 'true'\n", "g.yaml", "g")
    assert unknown.value.line == 4 and "iff" in unknown.value.reason


async def test_a_fleet_rule_cancels_on_every_kernel_once_approved(nats_url: str) -> None:
    stem = unique("fleet")
    name = f"{stem}.no-rm"
    async with Bus(nats_url) as one, Bus(nats_url) as two, Bus(nats_url) as three:
        views = [await bus.middleware.start() for bus in (one, two, three)]
        await push(one, stem, rule_file(stem))
        for view in views:
            await until(view, lambda v=view: waits(v, name))  # type: ignore[misc]
        assert await one.intercept("tool.call", rm(stem)) == Continue()  # not approved: no effect at all
        await approve(nats_url, name)
        for bus, view in zip((one, two, three), views, strict=True):
            await until(view, lambda v=view: runs(v, name))  # type: ignore[misc]
            decision = await bus.intercept("tool.call", rm(stem))
            assert isinstance(decision, Cancel) and decision.handler == name
            assert decision.reason == "no rm -rf: rm -rf /"
            assert await bus.intercept("tool.call", {**LS, "name": stem}) == Continue()


#: A kernel of its own process: says "ready" once its view is loaded, then prints the decision on rm -rf
#: as soon as the rule runs there.
KERNEL = """
import asyncio, sys
from bus import Bus

async def main(url, name, tool):
    async with Bus(url) as bus:
        view = await bus.middleware.start()
        print("ready", flush=True)
        def runs():
            chain = view.chains.get("tool.call")
            return chain is not None and any(link.decl.qualname == name for link in chain.links)
        await view.wait_until(runs, 20)
        decision = await bus.intercept("tool.call", {"name": tool, "input": {"command": "rm -rf /"}})
        print(type(decision).__name__, getattr(decision, "handler", None), flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_fleet_rule_cancels_in_every_kernel_process(nats_url: str) -> None:
    stem = unique("procs")
    name = f"{stem}.no-rm"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", KERNEL, nats_url, name, stem, stdout=asyncio.subprocess.PIPE
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert (await asyncio.wait_for(proc.stdout.readline(), 20)).strip() == b"ready"
        async with Bus(nats_url) as bus:
            view = await bus.middleware.start()
            await push(bus, stem, rule_file(stem))
            await until(view, lambda: waits(view, name))
            await approve(nats_url, name)
            await until(view, lambda: runs(view, name))
            decision = await bus.intercept("tool.call", rm(stem))
            assert isinstance(decision, Cancel) and decision.handler == name
        for proc in procs:
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
            assert out.decode().strip() == f"Cancel {name}"
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_a_change_waits_while_the_old_rule_holds(nats_url: str) -> None:
    stem = unique("change")
    name = f"{stem}.no-rm"
    async with Bus(nats_url) as bus:
        view = await bus.middleware.start()
        await push(bus, stem, rule_file(stem, "old"))
        await until(view, lambda: waits(view, name))
        await approve(nats_url, name)
        await until(view, lambda: runs(view, name))
        old = identity_of(view, name)
        await push(bus, stem, rule_file(stem, "new"))
        await until(view, lambda: waits(view, name))
        decision = await bus.intercept("tool.call", rm(stem))
        assert isinstance(decision, Cancel) and decision.reason.startswith("old")  # the approved version holds
        async with Bus(nats_url) as fresh:  # a kernel that never saw the old text compiles it from the trust record
            fresh_view = await fresh.middleware.start()
            await until(fresh_view, lambda: runs(fresh_view, name, old))
            again = await fresh.intercept("tool.call", rm(stem))
            assert isinstance(again, Cancel) and again.reason.startswith("old")
        await approve(nats_url, name)
        await until(view, lambda: runs(view, name) and not runs(view, name, old))
        decision = await bus.intercept("tool.call", rm(stem))
        assert isinstance(decision, Cancel) and decision.reason.startswith("new")


async def test_a_broken_file_keeps_the_last_good(nats_url: str) -> None:
    stem = unique("broken")
    name = f"{stem}.no-rm"
    async with Bus(nats_url, trust_new=True) as bus:
        view = await bus.middleware.start()
        await push(bus, stem, rule_file(stem))
        await until(view, lambda: runs(view, name))
        await push(bus, stem, b"rules:\n  - name: no-rm\n    stage: tool\n    if: 'nosuch.field'\n")
        # A refused file changes no chain, so no rebuild wakes the view's waiters: poll for it.
        await wait_until(lambda: stem in view.rules.book.errors, what="the refusal")
        assert "nosuch" in view.rules.book.errors[stem] and ":4:" in view.rules.book.errors[stem]
        decision = await bus.intercept("tool.call", rm(stem))
        assert isinstance(decision, Cancel) and decision.handler == name


async def test_shadow_journals_without_changing_the_decision(nats_url: str) -> None:
    stem = unique("shadow")
    name = f"{stem}.no-rm"
    async with Bus(nats_url, trust_new=True) as bus:
        view = await bus.middleware.start()
        journal = await JournalRecorder().attach(bus)
        await push(bus, stem, rule_file(stem, mode="shadow"))
        await until(view, lambda: runs(view, name))
        assert await bus.intercept("tool.call", rm(stem), {"session": "s1"}) == Continue()
        assert await bus.intercept("tool.call", {**LS, "name": stem}, {"session": "s1"}) == Continue()
        await wait_until(lambda: any(entry.who == name for entry in journal.entries), what="the shadow entry")
        await asyncio.sleep(0.2)  # a second entry (for the ls call) would have come by now
        mine = [entry for entry in journal.entries if entry.who == name]
        assert [entry.decision for entry in mine] == ["would_cancel"]
        assert mine[0].identity == identity_of(view, name)
        assert "payload " in (mine[0].cause or "") and "no rm -rf: rm -rf /" in (mine[0].cause or "")


async def test_the_journal_names_the_rule_its_identity_and_the_result(nats_url: str) -> None:
    stem = unique("journal")
    name = f"{stem}.no-rm"
    async with Bus(nats_url, trust_new=True) as bus:
        view = await bus.middleware.start()
        journal = await JournalRecorder().attach(bus)
        await push(bus, stem, rule_file(stem))
        await until(view, lambda: runs(view, name))
        decision = await bus.intercept("tool.call", rm(stem), {"session": "s2", "agent": "eva"})
        assert isinstance(decision, Cancel)
        await wait_until(lambda: any(entry.who == name for entry in journal.entries), what="the rule's entry")
        entry = next(entry for entry in journal.entries if entry.who == name)
        assert (entry.decision, entry.identity, entry.agent) == ("cancel", identity_of(view, name), "eva")
        assert entry.cause == "if 'payload.input.command.contains(\"rm -rf\")' -> true; no rm -rf: rm -rf /"
        assert MIDDLEWARE.decisions[(name, "tool.call", "cancel")] == 1  # and counted, under its name


async def test_a_per_agent_file_applies_only_to_that_agent(nats_url: str, tmp_path: Path) -> None:
    stem = unique("agent")
    path = tmp_path / f"{stem}.yaml"
    path.write_bytes(
        b"rules:\n  - name: redact\n    stage: tool\n    if: 'has(payload.input.token)'\n"
        b"    then: {patch: {remove: [input.token]}}\n"
        b"  - name: eva-only\n    stage: tool\n    when: {agents: [eva]}\n    if: 'payload.input.command == \"ls\"'\n"
        b"    then: cancel\n    reason: 'not for {{ ctx.agent }}'\n"
    )
    async with Bus(nats_url, rules=[path]) as mine, Bus(nats_url) as other:
        await mine.middleware.start()
        call = {"name": "read", "input": {"path": "/x", "token": "t"}}
        assert await mine.intercept("tool.call", call) == Patch({"name": "read", "input": {"path": "/x"}})
        decision = await mine.intercept("tool.call", LS, {"agent": "eva"})
        assert isinstance(decision, Cancel) and decision.reason == "not for eva"
        assert await mine.intercept("tool.call", LS, {"agent": "bob"}) == Continue()
        assert await other.intercept("tool.call", call) == Continue()
        assert await other.intercept("tool.call", LS, {"agent": "eva"}) == Continue()


async def test_a_payload_cel_cannot_hold_reads_as_the_fail_mode(nats_url: str, tmp_path: Path) -> None:
    """A hostile payload (an int over 64 bits, a non-text key) never raises out of intercept: a fail-closed
    rule cancels, a fail-open one continues, each journaled as failed."""
    path = tmp_path / "odd.yaml"
    path.write_text(
        "rules:\n  - name: closed\n    stage: odd.closed\n    if: 'payload.x == 1'\n    then: cancel\n"
        "    fail_closed: true\n  - name: open\n    stage: odd.open\n    if: 'payload.x == 1'\n    then: cancel\n"
    )
    async with Bus(nats_url, rules=[path]) as bus:
        journal = await JournalRecorder().attach(bus)
        for odd in ({"x": 2**70}, {1: "a", "x": 1}, {"x": (1, 2)}):
            closed = await bus.intercept("odd.closed", odd)  # type: ignore[arg-type]
            assert isinstance(closed, Cancel) and "odd.closed is fail-closed and failed" in closed.reason
            assert await bus.intercept("odd.open", odd) == Continue()  # type: ignore[arg-type]
        entries = await journal.wait_for(6)
        assert {entry.decision for entry in entries} == {"failed"}


def test_a_broken_per_agent_file_refuses_the_bus(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("rules:\n  - name: x\n    stage: tool\n    if: 'payload.name =='\n")
    with pytest.raises(RuleFileError) as caught:
        Bus("nats://127.0.0.1:1", rules=[path])
    assert caught.value.line == 4
