"""The asks routes of a `hookbus up` running as the shipped `bus` user: it reads every agent's asks and
answers them for the console, the API and the links, as the permissions allow."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bus import Bus, Continue, NatsServer, Stage
from bus._journal.entries import ensure_journal_stream
from bus._middleware.asks.store import ensure_asks_bucket
from bus.testing import serving, wait_for_chain
from tests.cli.test_cli import UpProcess
from tests.conftest import as_user, shipped_server
from tests.middleware.test_asks_attacks import CALL, asking_guard
from tests.services.test_console_api import Client
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "asks-http-shipped")


@pytest.fixture
async def up(server: NatsServer, tmp_path: Path) -> AsyncIterator[UpProcess]:
    async with Bus(as_user(server, "bus")) as bus:
        await bus.middleware.start()
        await ensure_journal_stream(bus.port)
        await ensure_asks_bucket(bus.port)
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o700)
    process = await asyncio.to_thread(UpProcess, workspace, "--nats-url", as_user(server, "bus"))
    try:
        yield process
    finally:
        await asyncio.to_thread(process.close)


async def test_up_as_the_bus_user_lists_and_answers_an_agents_ask(server: NatsServer, up: UpProcess) -> None:
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(serving(asking_guard(), as_user(server, "module-guard")))
        eva = await stack.enter_async_context(Bus(as_user(server, "agent-eva"), managed=["guard.ask_push"]))
        await wait_for_chain(eva, "tool.call", ["guard.ask_push"])
        call = asyncio.create_task(eva.intercept(Stage.TOOL_CALL, CALL, {"session": "s-shipped", "agent": "eva"}))
        stack.callback(call.cancel)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        client = Client(up, session)
        found: list[dict[str, Any]] = []

        async def listed() -> bool:
            found[:] = [a for a in (await client.ok("GET", "/api/asks"))["asks"] if a["session"] == "s-shipped"]
            return bool(found)

        await wait_until(listed, timeout=30, what="eva's ask listed by hookbus up as the bus user")
        assert found[0]["user"] == "agent-eva" and found[0]["payload"] == CALL
        answered = await client.ok("POST", f"/api/asks/{found[0]['id']}/allow", {"sha256": found[0]["payload_sha256"]})
        assert answered["by"] == "api"
        assert isinstance(await asyncio.wait_for(call, 30), Continue)
