"""Standing rules: `hookbus allow ID --remember session|agent` answers the next such ask without holding it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from bus import Ask, Asked, Bus, Continue, Module
from bus._middleware.asks.rules import AskRules
from bus._middleware.asks.store import AskStore
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.conftest import run_cli, unique
from tests.support.asks_support import pending_ask
from tests.support.waiting import wait_until


@pytest.fixture
async def operator(nats_url: str) -> AsyncIterator[AskStore]:
    async with Bus(nats_url, name="operator") as bus:
        yield AskStore(bus.port)


def _asker(name: str, stage: str) -> Module:
    mod = Module(name)

    @mod.stage(stage)
    async def ask(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("a person decides", timeout=60)

    return mod


def call(tool: str, n: int) -> dict[str, Any]:
    return {"name": tool, "input": {"n": n}}


async def _remembered(
    kernel: Bus, nats_url: str, operator: AskStore, stage: str, ctx: dict[str, str], scope: str
) -> str:
    """Hold one call of ``ctx``, answer it with ``hookbus allow --remember SCOPE``; the rule's id."""
    held = asyncio.create_task(kernel.intercept(stage, call("shell", 1), ctx))
    item = await pending_ask(operator, ctx["session"])
    done = await asyncio.to_thread(run_cli, "allow", item.ask.id, "--remember", scope, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    assert await held == Continue()
    listed = await asyncio.to_thread(run_cli, "asks", "--rules", "--json", "--nats-url", nats_url)
    assert listed.returncode == 0, listed.stderr
    rules = [orjson.loads(line) for line in listed.stdout.splitlines()]
    mine = [rule for rule in rules if rule["from_ask"] == item.ask.id]
    assert len(mine) == 1 and mine[0]["scope"] == scope and mine[0]["value"] == "shell"
    rule_id: str = mine[0]["id"]
    return rule_id


async def test_a_session_rule_answers_without_holding_until_revoked(
    kernel: Bus, nats_url: str, operator: AskStore
) -> None:
    stage = f"custom.{unique('r')}"
    mod = _asker(unique("ask"), stage)
    journal = await JournalRecorder().attach(kernel)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask"])
        ctx = {"session": unique("s"), "agent": "eva"}
        rule_id = await _remembered(kernel, nats_url, operator, stage, ctx, "session")
        # The same handler, tool and session: answered by the rule at once, with other arguments too.
        assert await kernel.intercept(stage, call("shell", 2), ctx, hold=False) == Continue()

        def by_rule() -> bool:
            return any(
                e.decision == "allowed" and f"rule {rule_id}" in (e.cause or "") and e.session == ctx["session"]
                for e in journal.entries
            )

        await wait_until(by_rule, what="the journal entry of the rule's answer")
        # Another tool, or another session of the same agent: asked as before.
        other_tool = await kernel.intercept(stage, call("write", 3), ctx, hold=False)
        other_session = await kernel.intercept(stage, call("shell", 4), {**ctx, "session": unique("s")}, hold=False)
        assert isinstance(other_tool, Asked) and isinstance(other_session, Asked)
        for asked in (other_tool, other_session):
            await operator.answer(asked.id, "deny", "alice", reason="not this one")
            await kernel.answer(asked.id)
        revoked = await asyncio.to_thread(run_cli, "asks", "--revoke", rule_id, "--nats-url", nats_url)
        assert revoked.returncode == 0, revoked.stderr
        held: list[Asked] = []

        async def asked_again() -> bool:  # the kernel's mirror of its rules hears of the revocation in a moment
            decision = await kernel.intercept(stage, call("shell", 5), ctx, hold=False)
            if isinstance(decision, Asked):
                held.append(decision)
            return bool(held)

        await wait_until(asked_again, what="the revoked rule answering no more")
        again = held[0]
        listed = await asyncio.to_thread(run_cli, "asks", "--rules", "--json", "--nats-url", nats_url)
        assert rule_id not in listed.stdout
        remember_again = await asyncio.to_thread(
            run_cli, "allow", again.id, "--remember", "session", "--nats-url", nats_url
        )
        assert remember_again.returncode != 0 and "stays revoked" in remember_again.stderr
        await operator.answer(again.id, "allow", "alice")
        assert await kernel.answer(again.id) == Continue()


async def test_an_agent_rule_answers_the_agents_other_sessions(kernel: Bus, nats_url: str, operator: AskStore) -> None:
    stage = f"custom.{unique('g')}"
    mod = _asker(unique("ask"), stage)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask"])
        agent = unique("agent")
        rule_id = await _remembered(
            kernel, nats_url, operator, stage, {"session": unique("s"), "agent": agent}, "agent"
        )
        assert await kernel.intercept(
            stage, call("shell", 2), {"session": unique("s"), "agent": agent}, hold=False
        ) == (Continue())
        stranger = await kernel.intercept(stage, call("shell", 3), {"session": unique("s"), "agent": "bob"}, hold=False)
        assert isinstance(stranger, Asked), "another agent's asks are not answered by this agent's rule"
        await operator.answer(stranger.id, "allow", "alice")
        await kernel.answer(stranger.id)
        assert (await asyncio.to_thread(run_cli, "asks", "--revoke", rule_id, "--nats-url", nats_url)).returncode == 0


async def test_a_kernel_mirroring_its_rules_hears_of_a_new_rule_and_a_revocation(
    nats_url: str, operator: AskStore
) -> None:
    stage = f"custom.{unique('m')}"
    mod = _asker(unique("ask"), stage)
    async with (
        serving(mod, nats_url),
        Bus(nats_url, name="operator-rules") as op,
        Bus(nats_url, name="mirroring", trust_new=True) as kernel,
    ):
        # The bucket exists before the kernel's first ask; a key that is no rule is ignored.
        await op.port.once_bucket("hookbus_ask_rules", 0).create("rule.anon.0000000000000000", b"{}", None)
        await kernel.middleware.start()
        await wait_for_chain(kernel, stage, [f"{mod.name}.ask"])
        ctx = {"session": unique("s"), "agent": "eva"}
        first = await kernel.intercept(stage, call("shell", 1), ctx, hold=False)
        assert isinstance(first, Asked)
        rules = kernel.middleware.asks.rules
        await wait_until(lambda: rules.mirror_live, what="the kernel's mirror of its rules")
        ask = await operator.find(first.id)
        assert ask is not None
        rule = await AskRules(op.port).remember(ask, "session", "alice")
        await operator.answer(first.id, "allow", "alice")
        assert await kernel.answer(first.id) == Continue()

        async def answered_by_rule() -> bool:
            decision = await kernel.intercept(stage, call("shell", 2), ctx, hold=False)
            if isinstance(decision, Asked):
                await operator.answer(decision.id, "deny", "alice", reason="not yet")
                await kernel.answer(decision.id)
                return False
            return decision == Continue()

        await wait_until(answered_by_rule, what="the new rule reaching the mirror")
        assert rules.mirror_live
        await AskRules(op.port).revoke(rule.id, "alice")
        held: list[Asked] = []

        async def asked_again() -> bool:
            decision = await kernel.intercept(stage, call("shell", 3), ctx, hold=False)
            if isinstance(decision, Asked):
                held.append(decision)
            return bool(held)

        await wait_until(asked_again, what="the revocation reaching the mirror")
        await operator.answer(held[0].id, "deny", "alice", reason="revoked")
        await kernel.answer(held[0].id)
