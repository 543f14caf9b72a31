"""The asks webhook and its signed links against a real `hookbus up` and a real HTTP receiver.

The receiver gets each new ask with an allow and a deny link; a link works
once, for its ask, its payload hash and its answer only, until its deadline;
a GET only shows what the call is. Every altered, replayed or late link is refused.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
import orjson
import pytest
from aiohttp import web

from bus import Bus, Cancel, Patch
from bus._middleware.asks.records import payload_sha256
from subscribers.http_api._ask_links import KEY_FILE
from subscribers.http_api._ask_webhook import Webhook, message
from tests.cli.test_cli import UpProcess
from tests.services.test_asks_http import Held
from tests.services.test_console_api import Client
from tests.support.waiting import wait_until


class Receiver:
    """A local HTTP server standing for a chat webhook: what it was POSTed, in order."""

    def __init__(self) -> None:
        self.posts: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.url = ""

    async def receive(self, request: web.Request) -> web.Response:
        self.posts.put_nowait(orjson.loads(await request.read()))
        return web.Response(status=204)

    async def next_for(self, session: str) -> dict[str, Any]:
        """The next POST about the ask of ``session`` (posts about other asks are skipped)."""
        while True:
            body = await asyncio.wait_for(self.posts.get(), 30)
            if body["ask"]["session"] == session:
                return body


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    got = Receiver()
    app = web.Application()
    app.router.add_post("/incoming", got.receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    got.url = f"http://{host}:{port}/incoming"
    try:
        yield got
    finally:
        await runner.cleanup()


@pytest.fixture
async def up(tmp_path: Path, receiver: Receiver) -> AsyncIterator[UpProcess]:
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o700)
    (workspace / "asks.webhook").write_text(f"url: {receiver.url}\n")
    process = await asyncio.to_thread(UpProcess, workspace)
    try:
        yield process
    finally:
        await asyncio.to_thread(process.close)


@pytest.fixture
async def held(up: UpProcess) -> AsyncIterator[Held]:
    async with AsyncExitStack() as stack:
        kernel = await stack.enter_async_context(Bus(up.nats_url, name="links-kernel", trust_new=True))
        yield Held(up, kernel, stack)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def use(http: aiohttp.ClientSession, method: str, url: str, **form: str) -> tuple[int, str]:
    """A link used as a phone's browser would: no token, maybe a form."""
    async with http.request(method, url, data=form or None, allow_redirects=False) as response:
        return response.status, await response.text()


def altered(url: str, *, path: str | None = None, **query: str) -> str:
    """The link with its path or some query values replaced."""
    parts = urlsplit(url)
    values = {name: found[0] for name, found in parse_qs(parts.query).items()}
    return parts._replace(path=path or parts.path, query=urlencode({**values, **query})).geturl()


async def test_a_new_ask_is_posted_with_links_that_answer_once(
    up: UpProcess, receiver: Receiver, held: Held, http: aiohttp.ClientSession
) -> None:
    assert any("asks     webhook to 127.0.0.1" in line for line in up.lines), up.lines
    assert "/incoming" not in "\n".join(up.lines), "a webhook's path (a chat's secret) is never printed"
    workspace = Path(held.up.lines[0].split("workspace ")[1].split()[0])
    assert (workspace / KEY_FILE).stat().st_mode & 0o077 == 0
    payload = {"name": "shell", "input": {"command": "git push --force"}}
    call, session = await held.call(payload)
    posted = await receiver.next_for(session)
    assert posted["ask"]["payload"] == payload and posted["ask"]["payload_sha256"] == payload_sha256(payload)
    allow, deny = posted["allow"], posted["deny"]
    assert urlsplit(allow).path == f"/asks/link/{posted['ask']['id']}/allow"
    status, page = await use(http, "GET", allow)  # a preview fetch: it shows the call, answers nothing
    assert status == 200 and "git push --force" in page and "a person decides over HTTP" in page
    assert "method='post'" in page
    assert not call.done()
    status, page = await use(http, "POST", allow)
    assert status == 200 and "allowed" in page, page
    assert await call == Patch({**payload, "after_saw": payload})
    status, page = await use(http, "POST", allow)  # replayed
    assert status == 409 and "already answered (allow by link)" in page, page
    status, page = await use(http, "POST", deny)  # its twin, after the answer
    assert status == 409 and "already answered" in page


async def test_an_altered_link_is_refused_and_the_ask_stays_held(
    up: UpProcess, receiver: Receiver, held: Held, http: aiohttp.ClientSession
) -> None:
    call, session = await held.call({"n": 1})
    other_call, other_session = await held.call({"n": 2})
    posted = await receiver.next_for(session)
    other = await receiver.next_for(other_session)
    allow, ask_id, other_id = posted["allow"], posted["ask"]["id"], other["ask"]["id"]
    later = f"{time.time() + 3600:.3f}"
    attacks = {
        "another ask's id": altered(allow, path=f"/asks/link/{other_id}/allow"),
        "another payload hash": altered(allow, sha256=other["ask"]["payload_sha256"]),
        "the deny link turned allow": altered(posted["deny"], path=f"/asks/link/{ask_id}/allow"),
        "the allow link turned edit": altered(allow, path=f"/asks/link/{ask_id}/edit"),
        "a flipped signature": altered(allow, sig=("0" if allow[-1] != "0" else "1") * 64),
        "a later deadline": altered(allow, until=later),
        "no signature": altered(allow, sig=""),
    }
    for what, url in attacks.items():
        for method in ("GET", "POST"):
            status, page = await use(http, method, url)
            assert status == 403, (what, method, status, page)
    status, _ = await use(http, "POST", altered(allow, path=f"/asks/link/{ask_id}/allow/x"))
    assert status in (401, 404)
    assert not call.done() and not other_call.done()
    status, _ = await use(http, "POST", other["deny"], reason="not that one")  # the control: the links were live
    assert status == 200
    decision = await other_call
    assert isinstance(decision, Cancel) and decision.reason == "denied by link: not that one"
    assert not call.done()


async def test_a_link_after_its_deadline_is_refused(
    up: UpProcess, receiver: Receiver, held: Held, http: aiohttp.ClientSession
) -> None:
    call, session = await held.call({"n": 3}, timeout=1.0)
    posted = await receiver.next_for(session)
    until = float(parse_qs(urlsplit(posted["allow"]).query)["until"][0])
    await call  # the deadline applied the fail mode (continue)
    await wait_until(lambda: time.time() > until, what="the link's deadline")
    for method in ("GET", "POST"):
        status, page = await use(http, method, posted["allow"])
        assert status == 403 and "deadline has passed" in page, (method, page)


def test_the_slack_format_is_a_message_with_both_links() -> None:
    from bus._middleware.asks.records import AskMsg

    ask = AskMsg(
        id="f00-0",
        user="anon",
        stage="tool.call",
        payload={"cmd": "x" * 5000},
        payload_sha256="a" * 64,
        handler="guard.ask",
        reason="a person decides",
        asked_at=0.0,
        deadline=60.0,
        on_timeout="cancel",
    )
    body = message(Webhook("https://chat.example/hook", "slack"), ask, "https://a/allow", "https://a/deny")
    assert set(body) == {"text"}
    assert "<https://a/allow|Allow>" in body["text"] and "<https://a/deny|Deny>" in body["text"]
    assert "guard.ask" in body["text"] and len(body["text"]) < 2000


async def test_a_webhook_that_fails_costs_nothing_but_its_post(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o700)
    (workspace / "asks.webhook").write_text(orjson.dumps({"url": f"http://127.0.0.1:{port}/gone"}).decode())
    up = await asyncio.to_thread(UpProcess, workspace)
    try:
        async with AsyncExitStack() as stack:
            kernel = await stack.enter_async_context(Bus(up.nats_url, name="links-kernel", trust_new=True))
            call, session = await Held(up, kernel, stack).call({"n": 4})
            client = Client(up, http)
            found: list[str] = []

            async def listed() -> bool:
                found[:] = [a["id"] for a in (await client.ok("GET", "/api/asks"))["asks"] if a["session"] == session]
                return bool(found)

            await wait_until(listed, what="the ask listed despite the failing webhook")
            await client.ok("POST", f"/api/asks/{found[0]}/allow")
            assert await call == Patch({"n": 4, "after_saw": {"n": 4}})
    finally:
        await asyncio.to_thread(up.close)
    assert up.proc.returncode == 0
