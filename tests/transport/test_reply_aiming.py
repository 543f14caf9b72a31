"""Responders answer inboxes only: a request's reply subject cannot aim a responder's rights elsewhere.

``allow_responses`` lets a user publish to the reply subject of any request it
received, whatever its publish grants say. An agent may send requests to the
agent-hook relay (served by ``bus``) and to every module; were they to answer
any reply subject, agent-bob could make the bus write a turn request, the bus's
journal or the claude-hooks registry key, and make module-guard overwrite
module-audit's announcement. Each attack runs as agent-bob on the shipped
permissions; the operator watches the aimed-at subjects and a barrier request
answered after the attack proves nothing was written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nats.aio.client import Client

from bus import Bus, Continue, Module, NatsServer, Stage
from bus._core.errors import ConfigError
from bus._middleware.registry import announcement_of, ensure_buckets, request_subject
from bus.adapters._subjects import adapter_subject
from bus.adapters.claude_code.relay import Relay
from bus.testing import serving
from tests.conftest import as_user, shipped_server

#: Subjects the bus may write and agent-bob may not.
BUS_ONLY = ("hookbus.turn.eva", "hookbus.journal.middleware.bus", "$KV.hookbus_modules.claude-hooks.forged")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "aiming")


@pytest.fixture
async def clients(shipped: NatsServer) -> AsyncIterator[tuple[Client, Client]]:
    """(operator, agent-bob), raw connections."""
    operator, bob = Client(), Client()
    await operator.connect(as_user(shipped, "operator"), inbox_prefix="_INBOX.operator")
    await bob.connect(as_user(shipped, "agent-bob"), inbox_prefix="_INBOX.agent-bob")
    yield operator, bob
    await bob.close()
    await operator.close()


async def aimed(operator: Client, bob: Client, request: str, targets: tuple[str, ...]) -> list[str]:
    """Bob's request on ``request`` with each target as reply subject; what reached the targets by a barrier."""
    seen: list[str] = []

    async def take(msg: Any) -> None:
        seen.append(msg.subject)

    for target in targets:
        await operator.subscribe(target, cb=take)
    await operator.flush()
    for target in targets:
        await bob.publish(request, b"not a request", reply=target)
    await bob.flush()  # routed to the responder before the barrier below
    barrier = await operator.request(request, b"not a request either", timeout=10)
    assert b"error" in barrier.data, barrier.data  # the barrier is answered: the attack's answers came first
    return seen


async def test_the_relay_answers_no_reply_subject_but_an_inbox(
    shipped: NatsServer, clients: tuple[Client, Client]
) -> None:
    operator, bob = clients
    async with Bus(as_user(shipped, "bus"), name="hookbus-up") as bus:
        await ensure_buckets(bus.port)
        relay = Relay(bus)
        await relay.start()
        try:
            assert await aimed(operator, bob, adapter_subject("claude-code", "agent-bob"), BUS_ONLY) == []
        finally:
            await relay.stop()


async def test_a_module_answers_no_reply_subject_but_an_inbox(
    shipped: NatsServer, clients: tuple[Client, Client]
) -> None:
    operator, bob = clients
    guard = Module("guard")

    @guard.stage(Stage.TOOL_CALL)
    async def allow(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    async with Bus(as_user(shipped, "bus"), name="hookbus-up") as bus:
        await ensure_buckets(bus.port)  # what hookbus up does; a module may not create them (nor rely on another test)
    async with serving(guard, as_user(shipped, "module-guard"), detach_on_stop=True):
        others = ("$KV.hookbus_modules.audit.forged", "hookbus.mw.audit")
        assert await aimed(operator, bob, request_subject(announcement_of(guard)), others) == []


def test_an_inbox_prefix_no_responder_would_answer_is_refused_up_front() -> None:
    with pytest.raises(ConfigError) as refused:
        Bus("nats://127.0.0.1:4222", nats_options={"inbox_prefix": "_I.eva"})
    assert str(refused.value) == "inbox prefix '_I.eva' is not under _INBOX: set HOOKBUS_NATS_INBOX to _INBOX.<name>"
    assert Bus("nats://127.0.0.1:4222", nats_options={"inbox_prefix": "_INBOX.eva"}).journal_origin == "eva"
