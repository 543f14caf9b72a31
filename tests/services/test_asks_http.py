"""The asks routes of a real `hookbus up`: list a held call exactly, answer it once, name who answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest

from bus import Ask, Bus, Cancel, Module, Patch
from bus._middleware.asks.records import payload_sha256
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.cli.test_cli import UpProcess
from tests.conftest import unique
from tests.services.test_console_api import Client
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("asks-http"))
    yield process
    process.close()


@pytest.fixture
async def client(up: UpProcess) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as session:
        yield Client(up, session)


def asker(name: str, stage: str, timeout: float = 60.0) -> Module:
    """A module whose ``ask`` handler asks about every call; ``after`` records the payload it ran on."""
    mod = Module(name)

    @mod.stage(stage)
    async def ask(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("a person decides over HTTP", timeout=timeout)

    @mod.stage(stage, after=[f"{name}.ask"])
    async def after(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "after_saw": dict(payload)})

    return mod


async def listed(client: Client, session: str) -> dict[str, Any]:
    """The ask of ``session`` as GET /api/asks lists it, once it is there."""
    found: list[dict[str, Any]] = []

    async def one() -> bool:
        found[:] = [a for a in (await client.ok("GET", "/api/asks"))["asks"] if a["session"] == session]
        return bool(found)

    await wait_until(one, what=f"the ask of {session} in /api/asks")
    return found[0]


class Held:
    """Calls held by asking modules served while the test runs."""

    def __init__(self, up: UpProcess, kernel: Bus, stack: AsyncExitStack) -> None:
        self.up, self.kernel, self.stack = up, kernel, stack

    async def call(self, payload: dict[str, Any], timeout: float = 60.0) -> tuple[asyncio.Task[Any], str]:
        """An intercept held by a new asker (the task) and its session."""
        stage = f"custom.{unique('h')}"
        mod = asker(unique("ask"), stage, timeout)
        await self.stack.enter_async_context(serving(mod, self.up.nats_url))
        await wait_for_chain(self.kernel, stage, [f"{mod.name}.ask", f"{mod.name}.after"])
        session = unique("s")
        call = asyncio.create_task(self.kernel.intercept(stage, payload, {"session": session, "agent": "eva"}))
        self.stack.callback(call.cancel)
        return call, session


@pytest.fixture
async def held(up: UpProcess) -> AsyncIterator[Held]:
    async with AsyncExitStack() as stack:
        kernel = await stack.enter_async_context(Bus(up.nats_url, name="asks-http-kernel", trust_new=True))
        yield Held(up, kernel, stack)


async def test_the_api_lists_an_ask_exactly_and_the_console_allows_it_once(client: Client, held: Held) -> None:
    journal = await JournalRecorder().attach(held.kernel)
    payload = {"name": "shell", "input": {"command": "git push --force"}}
    call, session = await held.call(payload)
    ask = await listed(client, session)
    assert ask["payload"] == payload and ask["payload_sha256"] == payload_sha256(payload)
    assert ask["reason"] == "a person decides over HTTP" and ask["handler"].endswith(".ask")
    assert 0 < ask["left_s"] <= 60 and ask["answer"] is None
    path = f"/api/asks/{ask['id']}"
    status, body = await client.call("POST", f"{path}/allow", {"sha256": "0" * 64}, client.auth)
    assert status == 409 and "payload" in body["refused"], body
    assert not call.done()
    console = {**client.auth, "X-Hookbus-Actor": "console"}
    status, answered = await client.call("POST", f"{path}/allow", {"sha256": ask["payload_sha256"]}, console)
    assert status == 200, answered
    assert answered["answer"] == "allow" and answered["by"] == "console"
    assert await call == Patch({**payload, "after_saw": payload})
    status, body = await client.call("POST", f"{path}/deny", {"reason": "too late"}, client.auth)
    assert status == 409 and "already answered (allow by console)" in body["refused"], body
    await wait_until(
        lambda: any("allow by console" in (e.cause or "") for e in journal.entries), what="the answer journaled"
    )
    assert all(a["id"] != ask["id"] for a in (await client.ok("GET", "/api/asks"))["asks"])


async def test_deny_and_edit_through_the_api_are_named_api(client: Client, held: Held) -> None:
    denied, denied_session = await held.call({"n": 1})
    edited, edited_session = await held.call({"n": 2})
    deny_id = (await listed(client, denied_session))["id"]
    edit_id = (await listed(client, edited_session))["id"]
    status, body = await client.call("POST", f"/api/asks/{deny_id}/deny", {}, client.auth)
    assert status == 400 and "reason" in body["error"]
    status, body = await client.call("POST", f"/api/asks/{edit_id}/edit", {"payload": [1]}, client.auth)
    assert status == 400 and "payload" in body["error"]
    status, body = await client.call("POST", f"/api/asks/{edit_id}/approve", {}, client.auth)
    assert status == 404
    assert (await client.ok("POST", f"/api/asks/{deny_id}/deny", {"reason": "not today"}))["by"] == "api"
    decision = await denied
    assert isinstance(decision, Cancel) and decision.reason == "denied by api: not today"
    await client.ok("POST", f"/api/asks/{edit_id}/edit", {"payload": {"n": 20}})
    assert await edited == Patch({"n": 20, "after_saw": {"n": 20}})
    status, body = await client.call("POST", "/api/asks/nosuch-0/allow", {}, client.auth)
    assert status == 409 and "no such ask" in body["refused"]
