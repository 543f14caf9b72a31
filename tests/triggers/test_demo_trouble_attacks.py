"""The demo's trouble scene as an attacker meets it: its relay adds no access, its operator answers no other ask."""

from __future__ import annotations

import asyncio
from typing import Any

import nats.errors as nats_errors
import pytest
from nats.aio.client import Client

from bus import Ask, Bus, Continue, Module, NatsServer
from bus._middleware.asks.store import AskStore
from bus.testing import serving
from tests.conftest import as_user, shipped_permissions, unique
from tests.support.waiting import wait_until
from triggers._demo_trouble import EDGE_AGENT, _operator, edge_link


async def test_the_edge_relay_listens_on_loopback_and_lets_the_server_judge_every_login(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with NatsServer(config_file=shipped_permissions(tmp_path_factory.mktemp("relay")), jetstream=False) as server:
        async with edge_link([as_user(server, "agent-eva")]) as relay:
            assert relay is not None and relay.url.startswith("nats://127.0.0.1:")
            port = relay.url.rsplit(":", 1)[1]
            anon = Client()
            with pytest.raises(nats_errors.Error):  # no credentials through the relay: refused, as directly
                await anon.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, connect_timeout=3)
            await anon.close()
            denied: list[str] = []

            async def on_error(exc: Exception) -> None:
                denied.append(str(exc))

            eva = Client()
            await eva.connect(
                f"nats://agent-eva:change-me-agent-eva@127.0.0.1:{port}", allow_reconnect=False, error_cb=on_error
            )
            try:  # nor does the relay lift the user's permissions: eva may not speak as bob
                await eva.publish("hookbus.from.agent-bob.eva.spend.day", b"{}")
                await eva.flush()
                await wait_until(lambda: any("permissions violation" in item.lower() for item in denied))
            finally:
                await eva.close()


def _asker(name: str, tool: str) -> Module:
    module = Module(name)

    @module.stage("tool.call", match=tool)
    async def ask_push(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("a person decides", timeout=30)

    return module


async def test_the_demo_operator_answers_only_its_own_handlers_asks_of_the_edge_agent(nats_url: str) -> None:
    guard, rival = _asker(unique("guard"), "push"), _asker(unique("rival"), "pull")
    asker = f"{guard.name}.ask_push"
    async with (
        Bus(nats_url, name="kernel", trust_new=True) as kernel,
        Bus(nats_url, name="operator") as op,
        serving(guard, nats_url),
        serving(rival, nats_url),
    ):
        view = await kernel.middleware.start()
        both = {asker, f"{rival.name}.ask_push"}
        await view.wait_until(
            lambda: both <= {link.decl.qualname for link in getattr(view.chains.get("tool.call"), "links", ())}, 15
        )
        held = {
            "rival": asyncio.create_task(
                kernel.intercept("tool.call", {"name": "pull"}, {"agent": EDGE_AGENT, "session": "s1"})
            ),
            "other agent": asyncio.create_task(
                kernel.intercept("tool.call", {"name": "push"}, {"agent": "agent-1", "session": "s2"})
            ),
            "own": asyncio.create_task(
                kernel.intercept("tool.call", {"name": "push"}, {"agent": EDGE_AGENT, "session": "s3"})
            ),
        }
        store = AskStore(op.port)

        async def three_waiting() -> bool:
            return len(await store.pending()) == 3

        await wait_until(three_waiting, what="three asks held")
        await asyncio.wait_for(_operator(op, asker, allow=1), 30)
        assert await asyncio.wait_for(held["own"], 15) == Continue()
        waiting = await store.pending()
        assert sorted((item.ask.handler, item.ask.agent) for item in waiting) == sorted(
            [(f"{rival.name}.ask_push", EDGE_AGENT), (asker, "agent-1")]
        )
        assert not held["rival"].done() and not held["other agent"].done()
        for task in held.values():
            task.cancel()
        await asyncio.gather(*held.values(), return_exceptions=True)
