"""The asks bucket under the shipped permissions: only operators answer; agents neither answer, erase nor peek.

Each attack runs as ``agent-bob`` and as the asking agent ``agent-eva``
against deploy/nats/permissions.conf on a real server; the operator's answer
is the control that shows the ask was live all along.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
import orjson
import pytest

from bus import Ask, Bus, Cancel, Continue, Module, NatsServer, Patch, Stage
from bus._core.errors import RegistryError
from bus._core.subjects import ASK_RULES_BUCKET, ASKS_BUCKET, kv_key_subject, kv_stream
from bus._journal.entries import ensure_journal_stream
from bus._middleware.asks.records import AnswerMsg, answer_key, ask_key, done_key, encode_msg
from bus._middleware.asks.rules import AskRules, RuleMsg, revoked_key, rule_key
from bus._middleware.asks.store import AskStore, ensure_asks_bucket
from bus.testing import serving, wait_for_chain
from tests.conftest import as_user as url
from tests.conftest import shipped_server
from tests.middleware.test_attacks import Attacker
from tests.support.waiting import wait_until

CALL = {"name": "shell", "input": {"command": "git push --force"}}
ASKS = kv_key_subject(ASKS_BUCKET)
DIRECT = f"$JS.API.DIRECT.GET.{kv_stream(ASKS_BUCKET)}."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "asks-attacks")


@pytest.fixture
async def state(server: NatsServer) -> None:
    """What `hookbus up` makes as the bus role: the buckets, the journal stream, the asks bucket."""
    async with Bus(url(server, "bus")) as up:
        await up.middleware.start()
        await ensure_journal_stream(up.port)
        await ensure_asks_bucket(up.port)


@pytest.fixture
async def attacker() -> AsyncIterator[Attacker]:
    attack = Attacker()
    yield attack
    await attack.nc.close()


def asking_guard() -> Module:
    guard = Module("guard", heartbeat=0.5)

    @guard.stage(Stage.TOOL_CALL, fail_closed=True)
    async def ask_push(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("force-push: a person decides", timeout=60)

    return guard


@contextlib.asynccontextmanager
async def held_call(
    server: NatsServer, session: str = "s-attacks"
) -> AsyncIterator[tuple[asyncio.Task[Any], str, AskStore]]:
    """Eva's call held by the guard's ask: (the intercept, the ask's id, the operator's store)."""
    served = serving(asking_guard(), url(server, "module-guard"))
    async with (
        served,
        Bus(url(server, "agent-eva"), managed=["guard.ask_push"]) as eva,
        Bus(url(server, "operator")) as op,
    ):
        await wait_for_chain(eva, "tool.call", ["guard.ask_push"])
        call = asyncio.create_task(eva.intercept(Stage.TOOL_CALL, CALL, {"session": session, "agent": "eva"}))
        store = AskStore(op.port)
        found: list[str] = []

        async def pending() -> bool:
            found[:] = [item.ask.id for item in await store.pending("agent-eva") if not call.done()]
            return bool(found)

        await wait_until(pending, what="eva's ask")
        try:
            yield call, found[0], store
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call


async def _js_publish(attacker: Attacker, subject: str, data: bytes, headers: dict[str, str] | None = None) -> str:
    """A JetStream publish as the attacker: 'denied' (no ack: the server dropped it), 'refused' or 'stored'."""
    js = attacker.nc.jetstream(timeout=1.0)
    try:
        await js.publish(subject, data, headers=headers)
    except nats.errors.TimeoutError:
        return "denied"
    except nats.js.errors.APIError:
        return "refused"
    return "stored"


@pytest.mark.parametrize("user", ["agent-eva", "agent-bob"])
async def test_an_agent_cannot_answer_an_ask(server: NatsServer, state: None, attacker: Attacker, user: str) -> None:
    await attacker.connect(server, user)
    async with held_call(server) as (call, ask_id, store):
        ask = await store.find(ask_id)
        assert ask is not None
        forged = AnswerMsg(id=ask_id, kind="allow", by=user, payload_sha256=ask.payload_sha256, answered_at=0.0)
        assert await _js_publish(attacker, ASKS + answer_key("agent-eva", ask_id), encode_msg(forged)) == "denied"
        async with Bus(url(server, user)) as agent:  # the store's own answer path, as that agent
            with pytest.raises(RegistryError):
                await AskStore(agent.port).answer(ask_id, "allow", user)
        await attacker.settle()
        assert not call.done()
        await store.answer(ask_id, "deny", "operator", ask.payload_sha256, reason="not today")
        decision = await call
    assert isinstance(decision, Cancel) and decision.reason == "denied by operator: not today"


@pytest.mark.parametrize("user", ["agent-eva", "agent-bob"])
async def test_an_agent_cannot_erase_an_ask(server: NatsServer, state: None, attacker: Attacker, user: str) -> None:
    await attacker.connect(server, user)
    async with held_call(server) as (call, ask_id, store):
        key = ASKS + ask_key("agent-eva", ask_id)
        for headers in ({"KV-Operation": "DEL"}, {"KV-Operation": "PURGE", "Nats-Rollup": "sub"}):
            outcome = await _js_publish(attacker, key, b"", headers)
            # Eva may write her own ask keys, but the stream refuses a second write of a key; Bob may not at all.
            assert outcome == ("refused" if user == "agent-eva" else "denied")
        done = await _js_publish(attacker, ASKS + done_key("agent-eva", "0000000000000000-0"), b"1")
        assert done == ("stored" if user == "agent-eva" else "denied")  # a done marker of no ask: harmless
        stream = kv_stream(ASKS_BUCKET)
        for api in (f"$JS.API.STREAM.PURGE.{stream}", f"$JS.API.STREAM.MSG.DELETE.{stream}"):
            with pytest.raises(nats.errors.TimeoutError):
                await attacker.nc.request(api, b'{"seq": 1}', timeout=1.0)
        assert await store.find(ask_id) is not None
        await store.answer(ask_id, "allow", "operator")
        assert await call == Continue()


async def test_no_agent_reads_another_agents_asks(server: NatsServer, state: None, attacker: Attacker) -> None:
    await attacker.connect(server, "agent-bob")
    async with held_call(server) as (call, ask_id, store):
        for key in (ask_key("agent-eva", ask_id), answer_key("agent-eva", ask_id)):
            with pytest.raises(nats.errors.TimeoutError):
                await attacker.nc.request(DIRECT + ASKS + key, b"", timeout=1.0)
        with pytest.raises(nats.errors.TimeoutError):
            await attacker.nc.request(f"$JS.API.STREAM.INFO.{kv_stream(ASKS_BUCKET)}", b"{}", timeout=1.0)
        forged = await _js_publish(attacker, ASKS + ask_key("agent-eva", "0000000000000000-1"), b"{}")
        assert forged == "denied"  # nor ask in eva's name
        await attacker.settle()
        assert len(attacker.denied) >= 4
        await store.answer(ask_id, "edit", "operator", payload={**CALL, "input": {"command": "git push"}})
        assert await call == Patch({**CALL, "input": {"command": "git push"}})


async def test_the_bus_answers_for_the_operator(server: NatsServer, state: None) -> None:
    async with held_call(server) as (call, ask_id, _), Bus(url(server, "bus")) as up:
        await AskStore(up.port).answer(ask_id, "allow", "console")
        assert await call == Continue()


RULES = kv_key_subject(ASK_RULES_BUCKET)


@pytest.mark.parametrize("user", ["agent-eva", "agent-bob"])
async def test_an_agent_cannot_write_or_erase_a_standing_rule(
    server: NatsServer, state: None, attacker: Attacker, user: str
) -> None:
    await attacker.connect(server, user)
    session = f"s-rules-{user}"
    async with held_call(server, session) as (call, ask_id, store), Bus(url(server, "operator")) as op:
        ask = await store.find(ask_id)
        assert ask is not None
        rules = AskRules(op.port)
        rule = await rules.remember(ask, "session", "operator")
        await store.answer(ask_id, "allow", "operator")
        assert await call == Continue()
        forged = RuleMsg(**{**msgspec.to_builtins(rule), "id": "f" * 16, "value": "anything"})
        for key, data, headers in (
            (rule_key("agent-eva", "f" * 16), msgspec.json.encode(forged), None),
            (rule_key(user, "f" * 16), msgspec.json.encode(forged), None),
            (rule_key("agent-eva", rule.id), b"", {"KV-Operation": "DEL"}),
            (rule_key("agent-eva", rule.id), b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub"}),
            (revoked_key("agent-eva", rule.id), b"{}", None),
        ):
            assert await _js_publish(attacker, RULES + key, data, headers) == "denied"
        stream = kv_stream(ASK_RULES_BUCKET)
        for api in (f"$JS.API.STREAM.PURGE.{stream}", f"$JS.API.STREAM.MSG.DELETE.{stream}"):
            with pytest.raises(nats.errors.TimeoutError):
                await attacker.nc.request(api, b'{"seq": 1}', timeout=1.0)
        if user == "agent-bob":  # nor read eva's rules
            with pytest.raises(nats.errors.TimeoutError):
                await attacker.nc.request(
                    f"$JS.API.DIRECT.GET.{stream}.{RULES}{rule_key('agent-eva', rule.id)}", b"", timeout=1.0
                )
        async with Bus(url(server, user)) as agent:  # a mirror of one's own rules only
            own = agent.port.once_bucket(ASK_RULES_BUCKET, 0).mirror(f"*.{user}.>")
            await own.start()
            await wait_until(lambda: own.live, what="the mirror of its own rules")
            assert (rule_key("agent-eva", rule.id) in own.values) == (user == "agent-eva")
            await own.stop()
            if user == "agent-bob":
                with pytest.raises(RegistryError):
                    await agent.port.once_bucket(ASK_RULES_BUCKET, 0).mirror("*.agent-eva.>").start()
        if user == "agent-bob":  # the create subject names bob, the consumer's filter everyone: refused
            config = {"name": "m1", "filter_subject": f"{RULES}>", "deliver_subject": "_INBOX.agent-bob.x"}
            wide = orjson.dumps({"stream_name": stream, "config": {**config, "ack_policy": "none"}})
            create = f"$JS.API.CONSUMER.CREATE.{stream}.m1.{RULES}*.agent-bob.>"
            reply = await attacker.nc.request(create, wide, timeout=2.0)
            assert b'"error"' in reply.data
        await attacker.settle()
        assert [r.id for r in await rules.rules()] == [rule.id]
        async with Bus(url(server, "agent-eva"), managed=["guard.ask_push"]) as eva:  # the rule still answers
            await wait_for_chain(eva, "tool.call", ["guard.ask_push"])
            ctx = {"session": session, "agent": "eva"}
            assert await eva.intercept(Stage.TOOL_CALL, CALL, ctx, hold=False) == Continue()
        await rules.revoke(rule.id, "operator")
