"""The fleet's budgets: books in JetStream counter buckets, under the shipped permissions on a real server.

Two runners of agent-eva (each on a connection of its own, as two processes
are) spend from one book, a runner started afterwards (a restart) finds the
day as it was, and agent-bob can neither write eva's share of a book nor
lower, roll up, purge or remake one. Against the scripted model reporting
``usage`` (40 tokens a call).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, NatsServer, TurnRequest
from bus._core.errors import RegistryError
from bus._core.subjects import BUDGET_BUCKETS, BUDGET_MAX_AGE_S, RULES_BUCKET, kv_key_subject, kv_stream
from bus._middleware.registry import ensure_buckets
from bus._turns.errors import TurnFailed
from bus.testing import fake_llm
from tests.conftest import as_user as url
from tests.conftest import shipped_permissions, shipped_server
from tests.middleware.test_attacks import Attacker
from triggers.agent._books import SharedBooks, grant_turn
from triggers.agent._budgets import BudgetBook, Usage
from triggers.agent._config_schema import BudgetLayer, BudgetsFile
from triggers.agent._llm import ChatClient
from triggers.agent.turn_runner import TurnRunner

USAGE = (30, 10)
#: Three calls of 40 tokens.
BOOK = BudgetsFile(session=BudgetLayer(max=120, unit="tokens"), user=BudgetLayer(max=1000, unit="tokens"))
USER_BOOK = kv_key_subject(BUDGET_BUCKETS["user"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "budgets-shared")


@pytest.fixture
async def state(server: NatsServer) -> None:
    """What `hookbus up` makes as the bus role: the middleware buckets and the budgets' books."""
    async with Bus(url(server, "bus")) as up:
        await ensure_buckets(up.port, (RULES_BUCKET, None))
        for name in BUDGET_BUCKETS.values():
            await up.port.counter_bucket(name, BUDGET_MAX_AGE_S).ensure()


@contextlib.asynccontextmanager
async def runner(
    server: NatsServer, llm: fake_llm.FakeLLM, day: str, user: str = "agent-eva"
) -> AsyncIterator[TurnRunner]:
    """A runner of agent ``eva`` as one process has it: its own connection as ``user``, the fleet's books."""
    client = ChatClient(llm.url, "model-a", provider="fake", attempts=1, timeout=5.0)
    async with Bus(url(server, user), trust_new=True) as bus:
        await bus.middleware.start()
        book = BudgetBook(BOOK, today=lambda: day, ledger=SharedBooks.of(bus))
        try:
            yield TurnRunner(bus, "eva", client, budgets=book)
        finally:
            await client.close()


async def turn(runner: TurnRunner, session: str) -> str:
    request = TurnRequest(agent="eva", prompt="go", session_id=session, publisher="worker")
    try:
        return await runner.handle(request)
    except TurnFailed as exc:
        return f"failed: {exc}"


def day() -> str:
    """A day of this test's own: the books on the module's server outlive a test."""
    return f"2026-12-{uuid.uuid4().hex[:6]}"


@pytest.mark.usefixtures("state")
async def test_two_processes_spend_from_one_book_and_a_restart_keeps_the_day(
    server: NatsServer, llm: fake_llm.FakeLLM
) -> None:
    llm.default = fake_llm.text("ok", usage=USAGE)
    today = day()
    async with runner(server, llm, today) as first, runner(server, llm, today) as second:
        assert await turn(first, "s1") == "ok"
        assert await turn(second, "s1") == "ok"
        assert await turn(first, "s1") == "ok"  # 120 of 120 tokens, two processes together
        refused = await turn(second, "s1")
        assert (
            refused
            == "failed: llm.request cancelled: budget exhausted: session s1 spent 120 tokens of 120 tokens today"
        )
        assert len(llm.requests) == 3
    async with runner(server, llm, today) as restarted:
        assert (await turn(restarted, "s1")).startswith("failed: llm.request cancelled: budget exhausted: session s1")
        assert await SharedBooks.of(restarted.bus).spent("user", today, "worker") == 120
        assert await turn(restarted, "s2") == "ok"  # another session's book is open; the user's counts on
        assert await SharedBooks.of(restarted.bus).spent("user", today, "worker") == 160
    assert len(llm.requests) == 4


@pytest.mark.usefixtures("state")
async def test_another_agent_cannot_spend_reset_or_erase_a_users_book(
    server: NatsServer, llm: fake_llm.FakeLLM
) -> None:
    llm.default = fake_llm.text("ok", usage=USAGE)
    today = day()
    async with runner(server, llm, today) as eva:
        assert await turn(eva, "s1") == "ok"
        books = SharedBooks.of(eva.bus)
        assert await books.spent("user", today, "worker") == 40
        async with Bus(url(server, "agent-bob")) as bob:
            as_eva = SharedBooks(SharedBooks.of(bob).buckets, "agent-eva")  # bob writing eva's share
            with pytest.raises(RegistryError, match=r"add to .*agent-eva failed"):
                await as_eva.add("user", today, "worker", 10_000)
            with pytest.raises(RegistryError):
                await as_eva.add("user", today, "worker", -40)  # nor lower it to nothing
        attacker = await Attacker().connect(server, "agent-bob")
        try:
            stream = kv_stream(BUDGET_BUCKETS["user"])
            key = f"{USER_BOOK}{today}.worker"
            await attacker.nc.publish(f"{key}.agent-eva", b"", headers={"Nats-Incr": "-40"})
            for api in ("PURGE", "DELETE", "UPDATE", "CREATE"):
                await attacker.nc.publish(f"$JS.API.STREAM.{api}.{stream}", b"{}")
            await attacker.nc.publish(f"$JS.API.STREAM.MSG.DELETE.{stream}", b'{"seq": 1}')
            await attacker.settle()
            assert len(attacker.denied) == 6, attacker.denied
            rollup = await attacker.nc.request(
                f"{key}.agent-bob", b"", headers={"Nats-Incr": "+0", "Nats-Rollup": "sub"}, timeout=2
            )
            assert b"error" in rollup.data  # the book refuses a rollup even on bob's own share
        finally:
            await attacker.nc.close()
        assert await books.spent("user", today, "worker") == 40  # eva's share stands as eva spent it
        assert await turn(eva, "s1") == "ok"
        assert await books.spent("user", today, "worker") == 80


async def test_an_agent_without_the_books_is_told_at_start_and_no_call_goes_out(tmp_path: Path) -> None:
    """Before `hookbus up` made the books an agent may not make them: ready() says so, and a check refuses."""
    with NatsServer(config_file=shipped_permissions(tmp_path), jetstream=False) as bare:
        async with Bus(url(bare, "agent-eva")) as eva:
            books = SharedBooks.of(eva)
            with pytest.raises(RegistryError, match=r"hookbus_budget_session bucket does not exist.*hookbus up"):
                await books.ready()
            book = BudgetBook(BOOK, ledger=books)
            assert await book.charge({"session": "s1"}, "model-a", Usage(30, 10)) == []  # said in the log
            reason = await book.exhausted({"session": "s1"})
            assert (
                reason
                == "budget books unreachable: the hookbus_budget_session bucket does not exist: start 'hookbus up'"
            )


@pytest.mark.usefixtures("state")
async def test_charges_racing_from_two_processes_lose_nothing(server: NatsServer) -> None:
    """Two connections of agent-eva add to the same key at once: the server adds every charge (no lost update)."""
    today = day()
    async with Bus(url(server, "agent-eva")) as one, Bus(url(server, "agent-eva")) as two:
        first, second = SharedBooks.of(one), SharedBooks.of(two)
        charges = [books.add("group", today, "eva", 1) for _ in range(50) for books in (first, second)]
        await asyncio.gather(*charges)
        assert await first.spent("group", today, "eva") == await second.spent("group", today, "eva") == 100


@pytest.mark.usefixtures("state")
async def test_an_agent_spends_a_users_book_only_after_the_user_sent_it_a_turn(server: NatsServer) -> None:
    """Bob adds a fortune to alice's book in his own share: nobody else counts it until a trigger started a
    turn of alice's on bob (the worker's grant), and bob may not write himself that grant."""
    today = day()
    async with (
        Bus(url(server, "agent-eva")) as eva_bus,
        Bus(url(server, "agent-bob")) as bob_bus,
        Bus(url(server, "worker")) as worker,
    ):
        eva, bob = SharedBooks.of(eva_bus), SharedBooks.of(bob_bus)
        await grant_turn(worker, "alice", "eva", day=today)  # a trigger started a turn of alice's on eva
        await eva.add("user", today, "alice", 40)  # which spent 40
        await bob.add("user", today, "alice", 1_000_000)  # bob was never sent one
        assert await eva.spent("user", today, "alice") == 40  # refused: alice's book as everyone else reads it
        assert await bob.spent("user", today, "alice") == 1_000_040  # bob's own reading stops bob alone
        with pytest.raises(RegistryError):
            await grant_turn(bob_bus, "alice", "bob", day=today)  # bob may not grant himself alice's book
        assert await eva.spent("user", today, "alice") == 40
        await grant_turn(worker, "alice", "bob", day=today)  # a trigger started a turn of alice's on bob
        assert await eva.spent("user", today, "alice") == 1_000_040


@pytest.mark.usefixtures("state")
async def test_every_handler_is_told_what_the_fleet_spent_not_what_this_process_did(
    server: NatsServer, llm: fake_llm.FakeLLM
) -> None:
    llm.default = fake_llm.text("ok", usage=USAGE)
    today = day()
    async with runner(server, llm, today) as first, runner(server, llm, today) as second:
        assert await turn(first, "s-told") == "ok"  # 40 tokens from the first process
        told: list[tuple[str, Any]] = []
        asked = second.bus.intercept

        async def spy(stage: str, payload: dict[str, Any], ctx: Any = None, **kw: Any) -> Any:
            told.append((stage, dict(ctx or {})))
            return await asked(stage, payload, ctx, **kw)

        second.bus.intercept = spy  # type: ignore[method-assign]  # what the runner hands every point
        assert await turn(second, "s-told") == "ok"
    ctx_of = dict(told)
    # The session layer (40 of 120) is nearer its limit than the user's; the second process had spent nothing.
    assert {k: ctx_of["agent.spawn"][k] for k in ("budget_total", "budget_spent", "budget_unit")} == {
        "budget_total": 120, "budget_spent": 40, "budget_unit": "tokens"
    }  # fmt: skip
    assert ctx_of["agent.terminate"]["budget_spent"] == 80  # its own call charged to the same book


@pytest.mark.usefixtures("state")
async def test_another_agent_cannot_lower_a_shared_book_with_a_negative_share(
    server: NatsServer, llm: fake_llm.FakeLLM
) -> None:
    """agent-bob may add to its own share of eva's session and group books: a negative share lowers nothing."""
    llm.default = fake_llm.text("ok", usage=USAGE)
    today = day()
    async with runner(server, llm, today) as eva:
        for _ in range(3):
            assert await turn(eva, "s9") == "ok"  # 120 of 120 tokens: the session's book is spent
        books = SharedBooks.of(eva.bus)
        assert await books.spent("session", today, "s9") == 120
        async with Bus(url(server, "agent-bob")) as bob:
            as_bob = SharedBooks.of(bob)
            for layer, key in (("session", "s9"), ("group", "eva"), ("user", "worker")):
                await as_bob.add(layer, today, key, -1_000_000)  # its own share, on the shipped permissions
        assert await books.spent("session", today, "s9") == 120
        assert await books.spent("group", today, "eva") == 0  # no group layer here: no share below nothing
        assert await books.spent("user", today, "worker") == 120
        refused = await turn(eva, "s9")
        assert refused.startswith("failed: llm.request cancelled: budget exhausted: session s9"), refused
    assert len(llm.requests) == 3


@pytest.mark.usefixtures("state")
async def test_a_share_on_a_wildcard_key_charges_no_other_book(server: NatsServer) -> None:
    """agent-bob adds to `<day>.*.agent-bob` and `<day>.>`: no session's book counts it."""
    today = day()
    async with Bus(url(server, "agent-eva")) as eva:
        books = SharedBooks.of(eva)
        await books.add("session", today, "s9", 40)
        attacker = await Attacker().connect(server, "agent-bob")
        try:
            prefix = kv_key_subject(BUDGET_BUCKETS["session"])
            for key in (f"{today}.*.agent-bob", f"{today}.>", f"{today}.s9.*"):
                with contextlib.suppress(Exception):
                    await attacker.nc.request(f"{prefix}{key}", b"", headers={"Nats-Incr": "+1000000"}, timeout=1)
            await attacker.settle()
        finally:
            await attacker.nc.close()
        assert await books.spent("session", today, "s9") == 40
        assert await books.spent("session", today, "s10") == 0


@pytest.mark.usefixtures("state")
async def test_a_share_past_any_number_reads_as_an_exhausted_book(server: NatsServer) -> None:
    """agent-bob, handed eva's session by a trigger, adds a 5000-digit number to its share of the session's
    book: eva reads it as spent, no error."""
    today = day()
    async with Bus(url(server, "agent-eva")) as eva, Bus(url(server, "worker")) as worker:
        books = SharedBooks.of(eva)
        await grant_turn(worker, None, "bob", day=today, session="s9")
        attacker = await Attacker().connect(server, "agent-bob")
        try:
            key = f"{kv_key_subject(BUDGET_BUCKETS['session'])}{today}.s9.agent-bob"
            ack = await attacker.nc.request(key, b"", headers={"Nats-Incr": "+" + "9" * 5000}, timeout=2)
            assert b"error" not in ack.data, ack.data  # the server takes it: the reader must
        finally:
            await attacker.nc.close()
        assert await books.spent("session", today, "s9") >= 10**18
        book = BudgetBook(BOOK, today=lambda: today, ledger=books)
        reason = await book.exhausted({"session": "s9"})
        assert reason is not None and reason.startswith("budget exhausted: session s9 spent"), reason
        assert await book.exhausted({"session": "s10"}) is None


@pytest.mark.usefixtures("state")
async def test_another_agent_cannot_exhaust_a_session_or_group_book_it_was_never_handed(
    server: NatsServer,
) -> None:
    """agent-bob adds a fortune to its own share of eva's session and group books: eva's reading counts it only
    once a trigger started a turn in that session on bob (the worker's grant, which bob may not write), or once
    budgets.yaml names bob in the group."""
    today = day()
    async with (
        Bus(url(server, "agent-eva")) as eva_bus,
        Bus(url(server, "agent-bob")) as bob_bus,
        Bus(url(server, "worker")) as worker,
    ):
        eva, bob = SharedBooks.of(eva_bus), SharedBooks.of(bob_bus)
        await eva.add("session", today, "s-owned", 40)
        await eva.add("group", today, "eva", 40)
        await bob.add("session", today, "s-owned", 1_000_000)
        await bob.add("group", today, "eva", 1_000_000)
        assert await eva.spent("session", today, "s-owned") == 40
        assert await eva.spent("group", today, "eva") == 40
        assert await bob.spent("session", today, "s-owned") == 1_000_000  # bob's own reading stops bob alone
        with pytest.raises(RegistryError):
            await grant_turn(bob_bus, None, "bob", day=today, session="s-owned")  # no grant of its own
        assert await eva.spent("session", today, "s-owned") == 40
        await grant_turn(worker, "alice", "bob", day=today, session="s-owned")  # a trigger handed bob the session
        assert await eva.spent("session", today, "s-owned") == 1_000_040
        assert await eva.spent("user", today, "alice") == 0  # eva spent nothing of alice's; bob's share: none yet
        assert await SharedBooks.of(eva_bus, {"eva": ["bob"]}).spent("group", today, "eva") == 1_000_040
        assert await SharedBooks.of(eva_bus, {"research": ["bob"]}).spent("group", today, "eva") == 40
