"""PRX's hooks API shapes against a real `hookbus up`: the requests PRX's web console sends, and PRX's ids.

The console lists (``GET``), creates with a flat body ``{event, command,
timeout_ms}``, toggles (``PATCH .../toggle``), updates with the same flat body
and deletes, always by the ``id`` the list gave it, with its bearer token and
``Accept``/``Content-Type: application/json``. Scripts and clients name hooks
the PRX way too: ``event`` or ``event:n``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from bus import Bus
from tests.cli.test_cli import UpProcess
from tests.support.hooks_support import script, wait_until


class Console:
    """An HTTP client that sends what PRX's console sends, to one `hookbus up`."""

    def __init__(self, up: UpProcess, session: aiohttp.ClientSession, token: str) -> None:
        match = re.search(r"api\s+(http://\S+)/api/hooks", "\n".join(up.lines))
        assert match is not None, up.lines
        self.base = match.group(1) + "/api/hooks"
        self.session = session
        self.headers = {"Accept": "application/json", "Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str = "", body: Any = None, token: bool = True) -> tuple[int, Any]:
        headers = dict(self.headers) if token else {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = orjson.dumps(body)
        async with self.session.request(method, self.base + path, data=data, headers=headers) as response:
            text = await response.read()
            return response.status, orjson.loads(text) if text else None

    async def hooks(self) -> list[dict[str, Any]]:
        status, answer = await self.call("GET")
        assert status == 200, answer
        hooks: list[dict[str, Any]] = answer["hooks"]
        return hooks


@pytest.fixture
def up(workspace: Path) -> Iterator[UpProcess]:
    process = UpProcess(workspace)
    yield process
    process.close()


@pytest.fixture
async def console(up: UpProcess, workspace: Path) -> AsyncIterator[Console]:
    async with aiohttp.ClientSession() as session:
        yield Console(up, session, (workspace / "api-token").read_text().strip())


def hooks_file(workspace: Path) -> Any:
    return orjson.loads((workspace / "hooks.json").read_bytes())


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def test_the_console_s_sequence_runs_the_hook_and_leaves_a_prx_file(
    console: Console, up: UpProcess, workspace: Path
) -> None:
    marks = workspace / "marks"
    script(workspace, "one.sh", f"cat > {workspace}/stdin\necho one >> {marks}\n")
    script(workspace, "two.sh", f"echo two >> {marks}\n")
    assert await console.call("GET") == (200, {"hooks": []})

    status, answer = await console.call("POST", body={"event": "tool_call", "command": "./one.sh", "timeout_ms": 30000})
    assert (status, answer["status"], answer["event"]) == (201, "created", "tool_call")
    [hook] = await console.hooks()
    assert (hook["event"], hook["command"], hook["timeout_ms"], hook["enabled"]) == (
        "tool_call",
        "./one.sh",
        30000,
        True,
    )
    assert hook["id"] == answer["id"]
    as_prx_writes = {"command": "./one.sh", "args": [], "env": {}, "cwd": None, "timeout_ms": 30000, "stdin_json": True}
    assert hooks_file(workspace) == {"hooks": {"tool_call": [as_prx_writes]}}

    async with Bus(up.nats_url) as bus:
        await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})
        await wait_until(lambda: lines(marks) == ["one"], what="the created hook")
        assert orjson.loads((workspace / "stdin").read_bytes())["payload"] == {"tool": "shell"}

        status, _ = await console.call("PATCH", f"/{hook['id']}/toggle")
        assert status == 200
        assert [h["enabled"] for h in await console.hooks()] == [False]
        assert hooks_file(workspace)["hooks"]["tool_call"][0] == {**as_prx_writes, "enabled": False}

        change = {"event": "tool_call", "command": "./two.sh", "timeout_ms": 5000}
        assert await console.call("PUT", f"/{hook['id']}", change) == (200, {"status": "updated", "id": hook["id"]})
        [changed] = await console.hooks()
        assert (changed["command"], changed["timeout_ms"], changed["enabled"]) == ("./two.sh", 5000, False)

        assert (await console.call("PATCH", f"/{changed['id']}/toggle"))[0] == 200
        await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})
        await wait_until(lambda: lines(marks) == ["one", "two"], what="the changed hook")

    assert await console.call("DELETE", f"/{changed['id']}") == (204, None)  # the id the list gave: hookbus's
    assert await console.call("GET") == (200, {"hooks": []})


PRX_FILE: dict[str, Any] = {
    "enabled": True,
    "timeout_ms": 4000,
    "hooks": {
        "Tool-Call": [
            {"command": "./a.sh", "args": [], "env": {}, "cwd": None, "timeout_ms": None, "stdin_json": True},
            {"command": "./b.sh", "args": ["x"], "env": {}, "cwd": None, "timeout_ms": 1000, "stdin_json": True},
        ],
        "error": [{"command": "./c.sh"}],
    },
}


@pytest.fixture
def prx_workspace(workspace: Path) -> Path:
    (workspace / "hooks.json").write_bytes(orjson.dumps(PRX_FILE))
    return workspace


async def test_prx_ids_name_hooks_and_get_prx_s_answers(prx_workspace: Path, console: Console) -> None:
    status, listed = await console.call("GET")
    assert status == 200 and listed["enabled"] is True
    assert [(h["event"], h["command"], h["timeout_ms"]) for h in listed["hooks"]] == [
        ("tool_call", "./a.sh", 4000),
        ("tool_call", "./b.sh", 1000),
        ("error", "./c.sh", 4000),
    ]

    toggled = await console.call("PATCH", "/tool_call:1/toggle")
    assert toggled == (200, {"status": "toggled", "id": "tool_call:1", "enabled": False})
    assert await console.call("PUT", "/tool_call", {"timeout_ms": 2500}) == (
        200,
        {"status": "updated", "id": "tool_call"},
    )
    assert await console.call("PUT", "/error", {"event": "agent_end"}) == (200, {"status": "updated", "id": "error"})
    written = hooks_file(prx_workspace)
    assert {name: written[name] for name in ("enabled", "timeout_ms")} == {"enabled": True, "timeout_ms": 4000}
    assert written["hooks"] == {
        "Tool-Call": [
            {**PRX_FILE["hooks"]["Tool-Call"][0], "timeout_ms": 2500},
            {**PRX_FILE["hooks"]["Tool-Call"][1], "enabled": False},
        ],
        "agent_end": [{"command": "./c.sh"}],
    }

    status, answer = await console.call("DELETE", "/tool_call:7")
    assert status == 404 and "tool_call:7" in answer["error"]
    assert await console.call("DELETE", "/tool_call:1") == (200, {"status": "deleted", "id": "tool_call:1"})
    assert await console.call("DELETE", "/tool_call") == (200, {"status": "deleted", "id": "tool_call"})
    assert [h["event"] for h in await console.hooks()] == ["agent_end"]
    assert (await console.call("PATCH", "/agent_end/toggle", token=False))[0] == 401


async def test_the_file_wide_switch_is_shown(workspace: Path) -> None:
    (workspace / "hooks.json").write_bytes(orjson.dumps({**PRX_FILE, "enabled": False}))
    up = UpProcess(workspace)
    try:
        async with aiohttp.ClientSession() as session:
            console = Console(up, session, (workspace / "api-token").read_text().strip())
            status, listed = await console.call("GET")
            assert status == 200 and listed["enabled"] is False and len(listed["hooks"]) == 3
    finally:
        up.close()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"event": "tool_call", "command": "./x.sh; rm -rf /"}, "metacharacters"),
        ({"event": "tool_call", "command": "   "}, "command is empty"),
        ({"event": "tool_call", "command": "./x.sh", "timeout_ms": 0}, "timeout_ms"),
        ({"event": "tool_call", "command": "./x.sh", "timeout_ms": "soon"}, "timeout_ms"),
        ({"event": "tool_call", "command": "./x.sh", "shell": True}, "shell: unknown field"),
        ({"event": "bad event!", "command": "./x.sh"}, "event"),
        ({"command": "./x.sh"}, "event"),
        ({"event": "tool_call", "command": "./x.sh", "args": "-v"}, "args"),
    ],
)
async def test_bad_flat_bodies_are_400_with_the_reason(
    console: Console, workspace: Path, body: dict[str, Any], reason: str
) -> None:
    status, answer = await console.call("POST", body=body)
    assert status == 400, answer
    assert reason in answer["error"]
    assert not (workspace / "hooks.json").exists()


async def test_a_bad_flat_change_is_400_and_leaves_the_file_alone(prx_workspace: Path, console: Console) -> None:
    before = (prx_workspace / "hooks.json").read_bytes()
    for change in ({"timeout_ms": "soon"}, {"command": "./x.sh|sh"}, {"event": "no such!"}, {"cwd": "/"}):
        status, answer = await console.call("PUT", "/tool_call:1", change)
        assert status == 400, (change, answer)
    assert (prx_workspace / "hooks.json").read_bytes() == before
