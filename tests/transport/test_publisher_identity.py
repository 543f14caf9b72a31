"""Publisher identity on the wire, attacked as the other agent on the shipped permissions.

Each participant connects as its NATS user of deploy/nats/permissions.conf as
shipped: the trigger engine as ``worker``, eva's turns as ``agent-eva``, the
attacker as ``agent-bob``. Bob may publish ``eva.>`` (every agent may), so what
his events start, suppress or charge must be decided by who published them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, NatsServer
from bus._core.envelope import Event
from bus._core.subjects import BUDGET_BUCKETS, BUDGET_MAX_AGE_S, split_vouched, vouched_pattern, wire_subject
from bus._middleware.registry import ensure_buckets
from bus.testing import fake_llm
from tests.conftest import as_user as url
from tests.conftest import run_cli, shipped_server
from tests.middleware.test_attacks import Attacker
from tests.support.waiting import wait_until
from tests.triggers.test_triggers import Agent
from triggers.agent._books import today
from triggers.agent._budgets import BudgetBook
from triggers.agent._config_schema import BudgetLayer, BudgetsFile, ModelPrice
from triggers.agent._llm import ChatClient
from triggers.agent.turn_runner import TurnRunner
from triggers.engine._config import parse
from triggers.engine.engine import TriggerEngine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "publisher-identity")


@pytest.fixture
async def worker(server: NatsServer) -> AsyncIterator[Bus]:
    async with Bus(url(server, "worker"), name="triggers") as bus:
        yield bus


@pytest.fixture
async def engine(worker: Bus) -> AsyncIterator[TriggerEngine]:
    eng = await TriggerEngine(worker).start()
    try:
        yield eng
    finally:
        await eng.stop()


def spend_trigger(**extra: Any) -> dict[str, Any]:
    entry = {
        "name": "spend",
        "on": "eva.spend.day",
        "prompt": "We spent {payload.total} today.",
        "agent": "eva",
        "cooldown_s": 3600,
    }
    return parse({"triggers": [{**entry, **extra}]}, "triggers.yaml")["spend"]


def forged(total: int) -> bytes:
    """An eva.spend.day envelope as anyone may write it on the plain subject."""
    return (
        b'{"event":"spend.day","timestamp":"2026-12-01T00:00:00.000Z","session_id":null,'
        b'"payload":{"agent":"eva","total":%d},"id":"forged-%d","depth":0}' % (total, total)
    )


async def test_events_carry_the_user_that_published_them(server: NatsServer, worker: Bus) -> None:
    seen: list[Event] = []
    await worker.subscribe("eva.spend.*", seen.append)
    attacker = await Attacker().connect(server, "agent-bob")
    try:
        async with Bus(url(server, "agent-eva")) as eva, Bus(url(server, "agent-bob")) as bob:
            assert (eva.publisher, bob.publisher) == ("agent-eva", "agent-bob")
            await eva.emit("eva.spend.day", {"total": 1})
            await bob.emit("eva.spend.day", {"total": 2})
            await attacker.nc.publish("eva.spend.day", forged(3))
            await attacker.nc.publish("hookbus.from.agent-eva.eva.spend.day", b"{}")  # bob as eva: refused
            await attacker.settle()
            await wait_until(lambda: len(seen) == 3, what="three events")
    finally:
        await attacker.nc.close()
    assert attacker.denied and "hookbus.from.agent-eva.eva.spend.day" in attacker.denied[0]
    by_total = {event.payload["total"]: event for event in seen}
    assert {total: (e.subject, e.publisher) for total, e in by_total.items()} == {
        1: ("eva.spend.day", "agent-eva"),
        2: ("eva.spend.day", "agent-bob"),
        3: ("eva.spend.day", None),  # the plain subject (PRX publishers, scripts): nobody vouches
    }
    assert "publisher" not in by_total[1].to_dict()  # never part of the envelope a hook reads


async def test_hookbus_emit_is_vouched_as_its_user(server: NatsServer, worker: Bus) -> None:
    seen: list[Event] = []
    await worker.subscribe("eva.custom.*", seen.append)
    done = await asyncio.to_thread(
        run_cli, "emit", "eva.custom.deploy", '{"n": 1}', "--nats-url", url(server, "agent-eva")
    )
    assert done.returncode == 0, done.stderr
    via_env = await asyncio.to_thread(
        run_cli,
        "emit",
        "eva.custom.deploy",
        '{"n": 2}',
        env={"NATS_URL": f"nats://127.0.0.1:{server.port}", "HOOKBUS_NATS_USER": "agent-bob",
             "HOOKBUS_NATS_PASSWORD": "change-me-agent-bob"},
    )  # fmt: skip
    assert via_env.returncode == 0, via_env.stderr
    await wait_until(lambda: len(seen) == 2, what="both emitted events")
    assert sorted((e.payload["n"], e.publisher) for e in seen) == [(1, "agent-eva"), (2, "agent-bob")]


async def test_a_forged_spend_report_neither_starts_a_turn_nor_burns_evas_cooldown(
    server: NatsServer, worker: Bus, engine: TriggerEngine
) -> None:
    await engine.apply({"spend": spend_trigger()})
    async with Bus(url(server, "agent-eva")) as eva, Bus(url(server, "agent-bob")) as bob:
        agent = Agent(eva)
        await eva.serve_turns("eva", agent)
        await bob.emit("eva.spend.day", {"agent": "eva", "total": 999})  # bob's numbers, vouched as bob
        await bob.port.publish_raw("eva.spend.day", forged(999))  # and unvouched, on the plain subject
        await bob.flush()
        await wait_until(lambda: engine.state["spend"].suppressed["publisher"] == 2, what="both forgeries refused")
        await eva.emit("eva.spend.day", {"agent": "eva", "total": 12})
        await wait_until(lambda: len(agent.requests) == 1, what="eva's real report starting its turn")
        await agent.barrier(worker)
    [request] = agent.requests
    assert request.prompt == "We spent 12 today." and request.publisher == "agent-eva"
    assert engine.state["spend"].fired == 1


async def test_cooldown_is_per_publisher(server: NatsServer, worker: Bus, engine: TriggerEngine) -> None:
    await engine.apply({"spend": spend_trigger(publishers=["agent-bob", "agent-eva"])})
    async with Bus(url(server, "agent-eva")) as eva, Bus(url(server, "agent-bob")) as bob:
        agent = Agent(eva)
        await eva.serve_turns("eva", agent)
        await bob.emit("eva.spend.day", {"total": 999})
        await wait_until(lambda: len(agent.requests) == 1, what="bob's turn (bob is accepted here)")
        await bob.emit("eva.spend.day", {"total": 998})  # bob's own cooldown holds
        await eva.emit("eva.spend.day", {"total": 12})  # eva's does not: bob's firing did not burn it
        await wait_until(lambda: len(agent.requests) == 2, what="eva's turn")
        await agent.barrier(worker)
    assert [(r.publisher, r.prompt) for r in agent.requests] == [
        ("agent-bob", "We spent 999 today."),
        ("agent-eva", "We spent 12 today."),
    ]
    assert engine.state["spend"].suppressed["cooldown"] == 1


async def test_a_trigger_event_naming_a_user_does_not_charge_that_users_budget(
    server: NatsServer, worker: Bus, engine: TriggerEngine, llm: fake_llm.FakeLLM
) -> None:
    async with Bus(url(server, "bus")) as bus:
        await ensure_buckets(bus.port)  # the agent's kernel reads them; only the bus role creates them
        for name in BUDGET_BUCKETS.values():  # the budgets' books, where the engine grants each turn
            await bus.port.counter_bucket(name, BUDGET_MAX_AGE_S).ensure()
    llm.default = fake_llm.text("ok", usage=(30, 10))  # 40 tokens a call
    config = BudgetsFile(prices={"model-a": ModelPrice(input=1.0, output=2.0)}, user=BudgetLayer(max=80, unit="tokens"))
    book = BudgetBook(config, today=lambda: "2026-12-01")
    spec = {"name": "ask", "on": "eva.custom.ask", "prompt": "{payload.q}", "agent": "eva"}
    await engine.apply(parse({"triggers": [{**spec, "publishers": ["agent-bob", "agent-eva"]}]}, "t.yaml"))
    async with Bus(url(server, "agent-eva")) as eva, Bus(url(server, "agent-bob")) as bob:
        client = ChatClient(llm.url, "model-a", provider="fake", attempts=1, timeout=5.0)
        runner = TurnRunner(eva, "eva", client, budgets=book)
        try:
            await eva.serve_turns("eva", runner.handle, concurrency=1)
            state = engine.state["ask"]
            for n in range(3):  # one at a time: the trigger runs one turn at once
                await bob.emit("eva.custom.ask", {"q": f"question {n}", "user": "alice"}, session_id="s-bob")
                await wait_until(lambda n=n: state.fired == n + 1 and not state.in_flight, what=f"bob's turn {n}")
        finally:
            await client.close()
    assert await book.exhausted({"user": "alice"}) is None  # alice spent nothing: bob's payload named her
    assert (
        await book.exhausted({"user": "agent-bob"})
        == "budget exhausted: user agent-bob spent 80 tokens of 80 tokens today"
    )
    async with Bus(url(server, "agent-eva")) as eva:  # the engine granted eva agent-bob's book, by the subject
        grants = eva.port.counter_bucket(BUDGET_BUCKETS["user"], BUDGET_MAX_AGE_S)
        book_of = f"{today()}.{{}}.agent-eva.granted"
        await wait_until(
            lambda: grants.total(book_of.format("agent-bob")), what="the trigger's grant of bob's book to eva"
        )
        assert await grants.total(book_of.format("alice")) == {}  # the payload's user: nothing granted
        sessions = eva.port.counter_bucket(BUDGET_BUCKETS["session"], BUDGET_MAX_AGE_S)  # and the event's session
        await wait_until(lambda: sessions.total(book_of.format("s-bob")), what="the trigger's grant of the session")
    assert len(llm.requests) == 2  # bob's third turn was stopped by his own budget


def test_publishers_in_triggers_yaml() -> None:
    default = spend_trigger()
    assert default.accepts("agent-eva", vouching=True)
    assert not default.accepts("agent-bob", vouching=True) and not default.accepts(None, vouching=True)
    assert default.accepts(None, vouching=False)  # a server without users: nothing is vouched
    anyone = spend_trigger(publishers=["*"])
    assert anyone.accepts(None, vouching=True) and anyone.accepts("agent-bob", vouching=True)
    named = spend_trigger(publishers=["worker"])
    assert not named.accepts(None, vouching=False) and named.accepts("worker", vouching=False)
    with pytest.raises(Exception, match="publishers"):
        spend_trigger(publishers=["agent.eva"])


def test_vouched_subjects_are_checked_as_if_the_sender_were_hostile() -> None:
    assert split_vouched("hookbus.from.agent-eva.eva.spend.day") == ("agent-eva", "eva.spend.day")
    assert split_vouched("hookbus.from.agent-eva") is None  # no event subject
    assert split_vouched("hookbus.from.agent$eva.eva.x") is None  # not one token
    assert split_vouched("hookbus.from.agent-eva.hookbus.mw.guard") is None  # plumbing is never an event
    assert split_vouched("hookbus.from.agent-eva.eva.ü") is None
    assert vouched_pattern("eva.>") == "hookbus.from.*.eva.>" and vouched_pattern(">") == "hookbus.from.*.>"
    assert vouched_pattern("hookbus.>") is None and vouched_pattern("_INBOX.x.>") is None
    assert wire_subject(None, "eva.x") == "eva.x" and wire_subject("worker", "hookbus.mw.x") == "hookbus.mw.x"


async def test_a_malformed_vouched_subject_is_dropped_and_counted(server: NatsServer) -> None:
    async with Bus(url(server, "operator")) as op:
        seen: list[Event] = []
        await op.subscribe("hookbus.from.>", seen.append)  # names the vouched subjects itself
        await op.port.publish_raw("hookbus.from.agent-eva.hookbus.mw.guard", forged(1))
        await op.emit("eva.spend.day", {"total": 2})  # vouched as operator: arrives
        await wait_until(lambda: len(seen) == 1, what="the valid event")
        assert (seen[0].subject, seen[0].publisher) == ("eva.spend.day", "operator")
        assert op.stats.dropped["malformed"] == 1


def test_triggers_test_says_whose_events_fire(workspace: Path) -> None:
    (workspace / "triggers.yaml").write_text(
        "triggers:\n  - {name: spend, on: eva.spend.day, prompt: 'spent {payload.total}', agent: eva}\n"
    )
    ws = ["--workspace", str(workspace)]
    own = run_cli("triggers", *ws, "test", "spend", '{"total": 12}')
    assert own.returncode == 0 and "would fire" in own.stdout, own.stderr
    other = run_cli("triggers", *ws, "test", "spend", '{"total": 12}', "--publisher", "agent-bob")
    assert other.returncode == 1
    assert "would NOT fire: published by agent-bob, not one this trigger accepts" in other.stdout
