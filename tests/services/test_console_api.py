"""The console's API on a real `hookbus up`: the token on every route, the live stream, actions journaled."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import pytest

from bus import Bus, Cancel, Continue, Stage
from bus._core.subjects import MODULE_DETACHED
from bus.testing import EventRecorder
from subscribers.http_api._console_api import Console
from subscribers.http_api._console_files import POLICY
from subscribers.http_api._live import DISPLAY_RATE
from subscribers.http_api.server import make_app
from tests.cli.test_cli import UpProcess
from tests.support.mwproc import module_process
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("console-api"))
    yield process
    process.close()


class Client:
    """An HTTP client of one `hookbus up`, with or without its token."""

    def __init__(self, up: UpProcess, session: aiohttp.ClientSession) -> None:
        match = re.search(r"console\s+(http://\S+)/console/", "\n".join(up.lines))
        assert match is not None, up.lines
        self.base = match.group(1)
        self.session = session
        workspace = Path(re.search(r"workspace (\S+)", up.lines[0]).group(1))  # type: ignore[union-attr]
        self.workspace = workspace
        self.auth = {"Authorization": f"Bearer {(workspace / 'api-token').read_text().strip()}"}

    async def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        data = orjson.dumps(body) if body is not None else None
        async with self.session.request(method, self.base + path, data=data, headers=headers) as response:
            text = await response.read()
            return response.status, orjson.loads(text) if text else None

    async def ok(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        status, answer = await self.call(method, path, body, {**self.auth, **headers})
        assert status in (200, 201), (method, path, status, answer)
        return answer


@pytest.fixture
async def client(up: UpProcess) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as session:
        yield Client(up, session)


def api_routes() -> list[tuple[str, str]]:
    """Every API route the app serves (hooks API and console), read from the app itself, ids filled in."""
    app = make_app(Path("/nonexistent/hooks.json"), "t", console=cast(Console, object()))
    routes = []
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if route.method != "HEAD" and path.startswith(("/api/", "/v1/")):
            routes.append((route.method, re.sub(r"\{[^}]+\}", "x", path)))
    return routes


async def test_every_api_route_refuses_a_request_without_the_token(client: Client) -> None:
    routes = api_routes()
    for expected in (
        "/api/live",
        "/api/journal",
        "/api/middleware/approve",
        "/api/status",
        "/api/hooks",
        "/v1/hooks/metrics",
    ):
        assert any(path == expected for _, path in routes), expected
    bare = client.auth["Authorization"][len("Bearer ") :]
    wrong: tuple[dict[str, str], ...] = ({}, {"Authorization": "Bearer wrong"}, {"Authorization": bare})
    for method, path in routes:
        for headers in wrong:
            status, body = await client.call(method, path, {"name": "m.h"}, headers)
            assert (status, body) == (401, {"error": "missing or wrong bearer token"}), (method, path, headers)


async def test_the_console_files_need_no_token_and_load_nothing_from_elsewhere(client: Client) -> None:
    files = (
        ("", "text/html"),
        ("console.js", "text/javascript"),
        ("asks.js", "text/javascript"),
        ("console.css", "text/css"),
    )
    for name, kind in files:
        async with client.session.get(f"{client.base}/console/{name}") as response:
            assert response.status == 200
            assert response.content_type == kind
            assert response.headers["Content-Security-Policy"] == POLICY
            text = await response.text()
        assert "http://" not in text and "https://" not in text, name  # every asset is shipped, none fetched
    status, _ = await client.call("GET", "/console/../api-token")
    assert status in (401, 404)
    status, _ = await client.call("GET", "/console/secret.txt")
    assert status == 401


@asynccontextmanager
async def live_stream(client: Client, query: str) -> AsyncIterator[asyncio.Queue[tuple[str, Any]]]:
    """The live stream while the block runs: a queue receives (event name, data) as the server sends them."""
    response = await client.session.get(f"{client.base}/api/live?{query}", headers=client.auth)
    assert response.status == 200, await response.text()
    assert response.content_type == "text/event-stream"
    messages: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def read() -> None:
        name = ""
        async for line in response.content:
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                name = text[len("event: ") :]
            elif text.startswith("data: "):
                messages.put_nowait((name, orjson.loads(text[len("data: ") :])))

    task = asyncio.create_task(read())
    try:
        name, hello = await asyncio.wait_for(messages.get(), 15)
        assert name == "hello" and hello["rate"] == DISPLAY_RATE
        yield messages
    finally:
        task.cancel()
        response.close()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_live_stream_filters_and_samples_a_flood_saying_how_much(client: Client, up: UpProcess) -> None:
    total = 10_000  # at once: more than a window's share, however the machine spreads their arrival
    async with live_stream(client, "pattern=prx.lifecycle.*&session=mine") as messages, Bus(up.nats_url) as bus:
        await bus.emit("prx.lifecycle.tool_call", {"n": -1}, session_id="other")  # not this session
        await bus.emit("eva.custom.elsewhere", {"n": -1}, session_id="mine")  # not this pattern
        for n in range(total):
            await bus.emit("prx.lifecycle.tool_call", {"n": n}, session_id="mine")
        await bus.flush()
        shown: list[dict[str, Any]] = []
        skipped = 0
        while len(shown) + skipped < total:
            name, data = await asyncio.wait_for(messages.get(), 15)
            if name == "events":
                assert len(data) <= DISPLAY_RATE, "a batch holds at most a second's worth of the display rate"
                shown.extend(data)
            elif name == "sampled":
                skipped += data["skipped"]
    assert len(shown) + skipped == total, "every event is either shown or counted as skipped"
    assert skipped > 0, "a burst above the display rate is sampled, and the stream says how much"
    assert {e["session_id"] for e in shown} == {"mine"}
    assert {e["subject"] for e in shown} == {"prx.lifecycle.tool_call"}
    numbers = [e["payload"]["n"] for e in shown]
    assert numbers == sorted(numbers) and numbers[-1] == total - 1, "the newest of each window are kept, in order"


@pytest.mark.parametrize("size", [30_000, 200_000], ids=["over the preview", "claimed (over the bus limit)"])
async def test_a_large_payload_comes_as_a_preview_and_whole_on_demand(client: Client, up: UpProcess, size: int) -> None:
    big = {"blob": "x" * size}
    async with live_stream(client, "session=big") as messages, Bus(up.nats_url) as bus:
        await bus.emit("eva.custom.big", big, session_id="big")
        await bus.flush()
        name, data = await asyncio.wait_for(messages.get(), 15)
    assert name == "events"
    [event] = data
    assert event["payload_whole_on_demand"] is True
    assert len(orjson.dumps(event["payload"])) < size
    assert ("payload_ref" in event) is (size > 64 * 1024), "over the bus limit the event carries its reference"
    whole = await client.ok("GET", f"/api/live/{event['id']}/payload")
    assert whole == {"id": event["id"], "payload": big}
    assert (await client.call("GET", "/api/live/nope/payload", headers=client.auth))[0] == 404


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("kind=nope", "kind 'nope'"),
        ("decision=cancelled", "decision 'cancelled'"),
        ("limit=0", "limit 0"),
        ("limit=x", "limit 'x'"),
        ("since=yesterday", "'yesterday'"),
    ],
)
async def test_a_bad_journal_search_is_refused_naming_what_was_wrong(client: Client, query: str, named: str) -> None:
    status, body = await client.call("GET", f"/api/journal?{query}", headers=client.auth)
    assert status == 400
    assert named in body["error"]


async def journal(client: Client, query: str, count: int = 1) -> list[dict[str, Any]]:
    """Journal entries matching ``query`` once the sink has stored ``count`` of them."""
    found: list[dict[str, Any]] = []

    async def stored() -> bool:
        nonlocal found
        status, body = await client.call("GET", f"/api/journal?{query}", headers=client.auth)
        found = body["entries"] if status == 200 else []
        return len(found) >= count

    await wait_until(stored, what=f"{count} journal entries matching {query}")
    return found


async def console_shows(client: Client, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """GET /api/middleware until ``predicate`` holds: the console's own view learns of changes in its own time."""
    listing: dict[str, Any] = {}

    async def holds() -> bool:
        nonlocal listing
        listing = await client.ok("GET", "/api/middleware")
        return predicate(listing)

    await wait_until(holds, what=what)
    return listing


def links(listing: dict[str, Any], part: str) -> list[tuple[str, str]]:
    """(name, state) of every handler in the ``part`` (links, holds, waiting, disabled) of every chain."""
    return [(link["name"], link["state"]) for chain in listing["chains"] for link in chain[part]]


async def test_a_handler_approved_on_first_sight_is_shown_trust_new_not_approved(client: Client, up: UpProcess) -> None:
    with module_process(up.nats_url, "tnguard", Stage.TOOL_CALL.value, "--behaviour", "cancel"):
        async with Bus(up.nats_url, trust_new=True) as kernel:  # a development kernel: approves what is new
            view = await kernel.middleware.start()
            await view.wait_until(lambda: bool(view.chains.get(Stage.TOOL_CALL.value, None) and view.chains[
                Stage.TOOL_CALL.value].links), 15)  # fmt: skip
            listing = await console_shows(
                client, lambda got: ("tnguard.h", "trusted") in links(got, "links"), "tnguard.h trusted"
            )
    [shown] = [link for chain in listing["chains"] for link in chain["links"] if link["name"] == "tnguard.h"]
    assert shown["shown"] == "trust-new" and "first sight" in shown["by"], shown


async def test_approving_through_the_console_runs_the_handler_and_is_journaled_as_the_console(
    client: Client, up: UpProcess
) -> None:
    with module_process(up.nats_url, "apiguard", Stage.TOOL_CALL.value, "--behaviour", "cancel"):
        async with Bus(up.nats_url) as kernel:
            view = await kernel.middleware.start()
            await view.wait_until(lambda: Stage.TOOL_CALL.value in view.chains, 15)
            listing = await console_shows(
                client, lambda got: any(w["name"] == "apiguard.h" for w in got["approvals"]), "apiguard.h waiting"
            )
            [waiting] = [w for w in listing["approvals"] if w["name"] == "apiguard.h"]
            assert waiting["state"] == "untrusted"
            assert '+  "module": "apiguard",' in waiting["diff"], "a new handler's whole declaration is the diff"
            assert (await kernel.intercept(Stage.TOOL_CALL, {"name": "shell"})).kind == "continue", "not yet"

            assert (await client.ok("POST", "/api/middleware/approve", {"name": "apiguard.h"}))["approved"][0][
                "name"
            ] == "apiguard.h"
            trusted = ("apiguard.h", "trusted")
            listing = await console_shows(client, lambda got: trusted in links(got, "links"), "apiguard.h trusted")
            [shown] = [link for chain in listing["chains"] for link in chain["links"] if link["name"] == "apiguard.h"]
            assert shown["shown"] == "approved" and "@" in shown["by"], "approved, by whom, as the trust store says"
            status, body = await client.call("POST", "/api/middleware/approve", {"name": "apiguard.h"}, client.auth)
            assert status == 409 and "no handler named 'apiguard.h' is waiting" in body["error"]
            await view.wait_until(lambda: bool(view.chains[Stage.TOOL_CALL.value].links), 15)
            decision = await kernel.intercept(Stage.TOOL_CALL, {"name": "shell"})
            assert isinstance(decision, Cancel) and decision.reason == "denied by the process"
    [entry] = await journal(client, "who=apiguard.h&decision=approved")
    assert entry["cause"] == "approved by console"
    assert entry["kind"] == "middleware" and entry["point"] == Stage.TOOL_CALL.value


async def test_hook_writes_are_journaled_with_their_actor(client: Client) -> None:
    hook = {"event": "agent_start", "action": {"command": "./never.sh"}}
    created = await client.ok("POST", "/api/hooks", hook, **{"X-Hookbus-Actor": "console"})
    await client.ok("PATCH", f"/api/hooks/{created['id']}/toggle")
    entries = await journal(client, f"kind=shell_hook&who={created['id']}", 2)
    assert [(e["decision"], e["cause"]) for e in reversed(entries)] == [
        ("created", "created by console"),
        ("disabled", "disabled by api"),
    ]


@pytest.mark.parametrize(
    ("route", "body", "status", "named"),
    [
        ("disable", {"name": "nobody.h"}, 409, "nobody.h"),
        ("enable", {"name": "no dots"}, 409, "'no dots' is not module.handler"),
        ("detach", {"name": "nobody"}, 409, "no gone guard named 'nobody'"),
        ("approve", {"nome": "x"}, 400, 'give {"name": "module.handler"}'),
        ("approve", [1], 400, 'give {"name": "module.handler"}'),
    ],
)
async def test_a_middleware_action_on_nothing_is_refused_naming_why(
    client: Client, route: str, body: Any, status: int, named: str
) -> None:
    answer = await client.call("POST", f"/api/middleware/{route}", body, client.auth)
    assert answer[0] == status
    assert named in answer[1]["error"]


async def test_detaching_a_gone_guard_through_the_console_ends_its_hold_journaled_and_announced(
    client: Client, up: UpProcess
) -> None:
    stage, name = "custom.console_detach", "dguard.h"
    flags = ("--behaviour", "guard", "--fail-closed", "--heartbeat", "0.2")
    async with Bus(up.nats_url) as kernel:
        view = await kernel.middleware.start()
        announced = EventRecorder(lambda event: event.payload.get("module") == "dguard")
        await kernel.subscribe(MODULE_DETACHED, announced)
        await kernel.flush()
        with module_process(up.nats_url, "dguard", stage, *flags) as proc:
            await console_shows(client, lambda got: (name, "waiting") in links(got, "waiting"), f"{name} waiting")
            await client.ok("POST", "/api/middleware/approve", {"name": name})
            await view.wait_until(lambda: bool(view.chains.get(stage) and view.chains[stage].links), 15)
            status, body = await client.call("POST", "/api/middleware/detach", {"name": name}, client.auth)
            assert status == 409 and f"{name} is alive" in body["error"]
            proc.kill()
        await view.wait_until(lambda: bool(view.chains.get(stage) and view.chains[stage].holds), 15)
        await console_shows(client, lambda got: links(got, "holds") == [(name, "gone")], f"{name} shown gone")
        assert isinstance(await kernel.intercept(stage, {}), Cancel), "the gone guard holds its stage"

        assert (await client.ok("POST", "/api/middleware/detach", {"name": name}))["detached"][0]["name"] == name
        await view.wait_until(lambda: stage not in view.chains, 15)
        assert await kernel.intercept(stage, {}) == Continue()
        by_console = {"module": "dguard", "handlers": [name], "reason": "detached by console"}

        def console_detach() -> bool:  # a kernel may also have said the module is gone
            return any(event.payload == by_console for event in announced.events)

        await wait_until(console_detach, what="the console's detach announced")
        others = [e.payload for e in announced.events if e.payload != by_console]
        assert all(p == {"module": "dguard", "reason": "gone"} for p in others), others
    [entry] = await journal(client, f"who={name}&decision=detached")
    assert entry["cause"] == "detached by console"


async def test_hookbus_up_stops_promptly_with_a_live_stream_open(tmp_path: Path) -> None:
    """An open stream never ends by itself: stopping must end it rather than wait out the server's shutdown."""
    up = UpProcess(tmp_path / "ws")
    try:
        async with aiohttp.ClientSession() as session:
            client = Client(up, session)
            async with session.get(f"{client.base}/api/live", headers=client.auth) as response:
                assert (await response.content.readline()).startswith(b"event: hello")
                code, _ = await asyncio.to_thread(up.stop)  # SIGTERM; fails if it takes more than 20 s
                assert code == 0
                rest = await asyncio.wait_for(response.content.read(), 15)
        assert b"event: events" not in rest, "the stream ended cleanly, nothing half-sent"
    finally:
        up.close()
