"""Asks against a real server: a handler's Ask holds the call until an operator answers or the deadline comes."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bus import Ask, Asked, Bus, Cancel, Module, Patch, register_collectors
from bus._core.errors import AskRefused
from bus._middleware.asks.records import payload_sha256
from bus._middleware.asks.store import AskStore
from bus._middleware.kernel.asking import ASKS
from bus.adapters.claude_code._mapping import answer as claude_answer
from bus.adapters.claude_code._mapping import parse as parse_hook
from bus.testing import EventRecorder, JournalRecorder, serving, wait_for_chain
from tests.conftest import hookbus_cmd, run_cli, unique
from tests.support.asks_support import pending_ask
from tests.support.waiting import wait_until


def _registry_with_asks() -> CollectorRegistry:
    registry = CollectorRegistry()
    register_collectors(registry)
    return registry


@pytest.fixture
async def operator(nats_url: str) -> AsyncIterator[AskStore]:
    async with Bus(nats_url, name="operator") as bus:
        yield AskStore(bus.port)


def _asker(name: str, stage: str, *, fail_closed: bool = False, timeout: float = 30.0) -> Module:
    """A module whose ``ask`` handler asks about every call, and whose ``after`` handler records what it saw."""
    mod = Module(name)

    @mod.stage(stage, fail_closed=fail_closed)
    async def ask(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("a person decides", timeout=timeout)

    @mod.stage(stage, after=[f"{name}.ask"])
    async def after(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "after_saw": dict(payload)})

    return mod


async def test_allow_resumes_the_chain_after_the_asking_handler(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('a')}"
    mod = _asker(unique("ask"), stage)
    journal = await JournalRecorder().attach(kernel)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        session = unique("s")
        call = asyncio.create_task(kernel.intercept(stage, {"n": 1}, {"session": session, "agent": "eva"}))
        item = await pending_ask(operator, session)
        assert item.ask.payload == {"n": 1} and item.ask.payload_sha256 == payload_sha256({"n": 1})
        assert item.ask.handler == f"{mod.name}.ask" and item.ask.reason == "a person decides"
        assert not call.done()
        assert ASKS.holding.get(item.ask.id) == item.ask.asked_at
        allowed = ASKS.answered.get("allow", 0)
        await operator.answer(item.ask.id, "allow", "alice", item.ask.payload_sha256)
        decision = await call
    assert decision == Patch({"n": 1, "after_saw": {"n": 1}})
    assert ASKS.answered["allow"] == allowed + 1 and item.ask.id not in ASKS.holding
    scraped = generate_latest(_registry_with_asks()).decode()
    assert "hookbus_asks_pending 0.0" in scraped and 'hookbus_asks_answered_total{kind="allow"}' in scraped
    wanted = {"asked", "allowed", "answered allow"}
    await wait_until(lambda: wanted <= {entry.decision for entry in journal.entries}, what="the ask's journal")
    by_decision = {entry.decision: entry for entry in journal.entries}
    assert "a person decides" in (by_decision["asked"].cause or "")
    assert "allow by alice after" in (by_decision["allowed"].cause or "")
    assert by_decision["allowed"].session == session and by_decision["allowed"].who == f"{mod.name}.ask"


async def test_deny_cancels_with_the_operators_reason(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('d')}"
    mod = _asker(unique("ask"), stage)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        session = unique("s")
        call = asyncio.create_task(kernel.intercept(stage, {"n": 2}, {"session": session}))
        item = await pending_ask(operator, session)
        await operator.answer(item.ask.id, "deny", "bob", reason="not on a Friday")
        decision = await call
    assert isinstance(decision, Cancel)
    assert decision.reason == "denied by bob: not on a Friday" and decision.handler == f"{mod.name}.ask"


async def test_edit_reaches_the_later_handlers(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('e')}"
    mod = _asker(unique("ask"), stage)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        session = unique("s")
        call = asyncio.create_task(kernel.intercept(stage, {"n": 3}, {"session": session}))
        item = await pending_ask(operator, session)
        await operator.answer(item.ask.id, "edit", "carol", payload={"n": 30})
        decision = await call
    assert decision == Patch({"n": 30, "after_saw": {"n": 30}})


@pytest.mark.parametrize(("fail_closed", "expected"), [(True, "cancel"), (False, "continue")])
async def test_the_deadline_applies_the_asking_handlers_fail_mode(
    kernel: Bus, nats_url: str, fail_closed: bool, expected: str
) -> None:
    stage = f"custom.{unique('t')}"
    mod = _asker(unique("ask"), stage, fail_closed=fail_closed, timeout=1.0)
    before = ASKS.expired
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        decision = await kernel.intercept(stage, {"n": 4}, {"session": unique("s")})
    assert ASKS.expired == before + 1
    if expected == "cancel":
        assert isinstance(decision, Cancel) and "nobody answered" in decision.reason
    else:
        assert decision == Patch({"n": 4, "after_saw": {"n": 4}})


async def test_an_answer_for_another_payload_hash_is_refused(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('h')}"
    mod = _asker(unique("ask"), stage)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        session = unique("s")
        call = asyncio.create_task(kernel.intercept(stage, {"n": 5}, {"session": session}))
        item = await pending_ask(operator, session)
        with pytest.raises(AskRefused, match="asks about payload"):
            await operator.answer(item.ask.id, "allow", "mallory", payload_sha256({"n": 6}))
        assert not call.done()
        await operator.answer(item.ask.id, "deny", "alice", item.ask.payload_sha256, reason="no")
        assert isinstance(await call, Cancel)


async def test_two_answers_race_and_one_wins(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('r')}"
    mod = _asker(unique("ask"), stage)
    async with serving(mod, nats_url), Bus(nats_url, name="operator-2") as other:
        second = AskStore(other.port)
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        session = unique("s")
        call = asyncio.create_task(kernel.intercept(stage, {"n": 7}, {"session": session}))
        item = await pending_ask(operator, session)
        results = await asyncio.gather(
            operator.answer(item.ask.id, "allow", "alice"),
            second.answer(item.ask.id, "deny", "bob", reason="mine first"),
            return_exceptions=True,
        )
        decision = await call
    refused = [result for result in results if isinstance(result, AskRefused)]
    won = [result for result in results if not isinstance(result, BaseException)]
    assert len(refused) == 1 and len(won) == 1 and "already answered" in refused[0].reason
    kind = won[0][1].kind
    assert (kind == "allow") == isinstance(decision, Patch) and (kind == "deny") == isinstance(decision, Cancel)


async def test_hold_false_returns_asked_and_answer_waits(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('n')}"
    mod = _asker(unique("ask"), stage)
    events = EventRecorder()
    await kernel.subscribe("eva.ask.requested", events)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        asked = await kernel.intercept(stage, {"n": 8}, {"session": unique("s")}, hold=False)
        assert isinstance(asked, Asked) and asked.deadline > time.time()
        await events.wait_for(1)
        assert events.events[0].payload["id"] == asked.id and "payload" not in events.events[0].payload
        await operator.answer(asked.id, "allow", "alice")
        assert await kernel.answer(asked.id) == Patch({"n": 8, "after_saw": {"n": 8}})


async def test_allow_from_the_cli_resumes_an_intercept(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('c')}"
    mod = _asker(unique("ask"), stage)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        session = unique("s")
        call = asyncio.create_task(kernel.intercept(stage, {"n": 10}, {"session": session}))
        item = await pending_ask(operator, session)
        listed = await asyncio.to_thread(run_cli, "asks", "--json", "--nats-url", nats_url)
        assert listed.returncode == 0, listed.stderr
        rows = [orjson.loads(line) for line in listed.stdout.splitlines()]
        assert item.ask.id in [row["id"] for row in rows]
        done = await asyncio.to_thread(run_cli, "allow", item.ask.id, "--nats-url", nats_url)
        assert done.returncode == 0, done.stderr
        assert await call == Patch({"n": 10, "after_saw": {"n": 10}})
        again = await asyncio.to_thread(run_cli, "deny", item.ask.id, "--reason", "late", "--nats-url", nats_url)
        assert again.returncode != 0 and "already answered" in again.stderr


@pytest.mark.parametrize("expire", [False, True])
async def test_a_kernel_restarted_mid_ask_finds_it_again(
    kernel: Bus, nats_url: str, operator: AskStore, expire: bool
) -> None:
    stage = f"custom.{unique('k')}"
    mod = _asker(unique("ask"), stage, timeout=2.0 if expire else 60.0)
    session = unique("s")
    journal = await JournalRecorder().attach(kernel)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        args = ["intercept", stage, '{"n": 11}', "--session", session, "--trust-new", "--nats-url", nats_url]
        first = subprocess.Popen([*hookbus_cmd(), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            item = await pending_ask(operator, session)
        finally:
            first.kill()
            first.wait()
        if expire:
            await wait_until(lambda: time.time() > item.ask.deadline, what="the deadline")
        call = asyncio.create_task(kernel.intercept(stage, {"n": 11}, {"session": session}))
        if not expire:
            await wait_until(lambda: item.ask.id in ASKS.holding, what="the restarted kernel holding the ask")
            await operator.answer(item.ask.id, "allow", "alice")
        decision = await call
    # Answered or expired (fail-open: the deadline continues), the rest of the chain runs after it.
    assert decision == Patch({"n": 11, "after_saw": {"n": 11}})
    ended = "expired" if expire else "allowed"
    await wait_until(lambda: any(e.decision == ended for e in journal.entries), what=f"the ask {ended}")
    entry = next(e for e in journal.entries if e.decision == ended)
    assert ("found again after a restart" in (entry.cause or "")) == expire
    asked = [e.cause or "" for e in journal.entries if e.decision == "asked"]
    assert asked and all(f"ask {item.ask.id};" in cause for cause in asked), "the same ask, not a new one"


def _pre_tool_use(session: str, command: str) -> Any:
    raw = {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "tool_name": "Bash",
        "tool_input": {"command": command},
    }
    return parse_hook(orjson.dumps(raw))


async def test_claude_code_asks_at_its_terminal_or_holds_for_the_fleet(
    kernel: Bus, nats_url: str, operator: AskStore
) -> None:
    mod = Module(unique("ccask"))

    @mod.stage("tool.call")
    async def confirm(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("confirm the push")

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.confirm"])
        session = unique("s")
        terminal = await claude_answer(kernel, _pre_tool_use(session, "git push"), asks="terminal")
        specific = (terminal.output or {})["hookSpecificOutput"]
        assert specific["permissionDecision"] == "ask" and "confirm the push" in specific["permissionDecisionReason"]
        assert [p for p in await operator.pending() if p.ask.session == session] == [], "nothing held for the fleet"
        fleet = asyncio.create_task(claude_answer(kernel, _pre_tool_use(session, "git push")))
        item = await pending_ask(operator, session)
        await operator.answer(item.ask.id, "deny", "alice", reason="not from here")
        denied = await fleet
    specific = (denied.output or {})["hookSpecificOutput"]
    assert (
        specific["permissionDecision"] == "deny"
        and "denied by alice: not from here" in specific["permissionDecisionReason"]
    )


async def test_watch_sees_each_new_ask_and_its_answer(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('w')}"
    mod = _asker(unique("ask"), stage)
    seen: list[tuple[str, Any]] = []

    async def follow() -> None:
        async for kind, msg in operator.watch():
            seen.append((kind, msg))

    watching = asyncio.create_task(follow())
    try:
        async with serving(mod, nats_url):
            await wait_for_chain(kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
            session = unique("s")
            call = asyncio.create_task(kernel.intercept(stage, {"n": 12}, {"session": session}))
            await wait_until(lambda: any(kind == "ask" and msg.session == session for kind, msg in seen), what="ask")
            ask_id = next(msg.id for kind, msg in seen if kind == "ask" and msg.session == session)
            await operator.answer(ask_id, "allow", "alice")
            await call
            await wait_until(lambda: any(kind == "answer" and msg.id == ask_id for kind, msg in seen), what="answer")
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
