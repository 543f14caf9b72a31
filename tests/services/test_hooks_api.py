"""The hooks HTTP API, served by a real `hookbus up`, driving a real worker."""

from __future__ import annotations

import re
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from bus import Bus
from tests.cli.test_cli import UpProcess
from tests.conftest import run_cli
from tests.support.hooks_support import script, wait_for_file, wait_until, write_hooks
from tests.support.waiting import probe_until


class Api:
    """A client of the hooks API of one `hookbus up`."""

    def __init__(self, up: UpProcess, session: aiohttp.ClientSession, token: str) -> None:
        match = re.search(r"api\s+(http://\S+)/api/hooks", "\n".join(up.lines))
        assert match is not None, up.lines
        self.base = match.group(1) + "/api/hooks"
        self.session = session
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str = "", body: Any = None, **kw: Any) -> tuple[int, Any]:
        headers = kw.pop("headers", self.headers)
        data = orjson.dumps(body) if body is not None else kw.pop("data", None)
        async with self.session.request(method, self.base + path, data=data, headers=headers) as response:
            text = await response.read()
            return response.status, orjson.loads(text) if text else None


@pytest.fixture
def up(workspace: Path) -> Iterator[UpProcess]:
    process = UpProcess(workspace)
    yield process
    process.close()


@pytest.fixture
async def api(up: UpProcess, workspace: Path) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(up, session, (workspace / "api-token").read_text().strip())


HOOK = {"event": "tool_call", "action": {"command": "./mark.sh", "args": ["one"], "timeout_ms": 3000}, "enabled": True}


def test_the_token_file_is_created_private_and_its_location_printed(up: UpProcess, workspace: Path) -> None:
    token_file = workspace / "api-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert len(token_file.read_text().strip()) >= 32
    assert any(str(token_file) in line for line in up.lines)


async def test_every_endpoint_needs_the_token(api: Api) -> None:
    calls = [("GET", ""), ("POST", ""), ("PUT", "/h"), ("DELETE", "/h"), ("PATCH", "/h/toggle"), ("GET", "/metrics")]
    for method, path in calls:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": api.headers["Authorization"][7:]}):
            status, body = await api.call(method, path, HOOK, headers=headers)
            assert status == 401, (method, path, headers)
            assert body == {"error": "missing or wrong bearer token"}


async def test_crud_and_toggle_take_effect_in_the_running_worker(api: Api, up: UpProcess, workspace: Path) -> None:
    script(workspace, "mark.sh", f'echo "$1" >> {workspace}/marks\n')
    assert await api.call("GET") == (200, {"hooks": []})

    status, created = await api.call("POST", body=HOOK)
    assert status == 201
    assert created["event"] == "tool_call"
    assert created["action"] == {**HOOK["action"], "stdin_json": False}
    assert created["enabled"] is True
    assert created["created_at"] == created["updated_at"]
    hook_id = created["id"]
    assert (await api.call("GET"))[1] == {"hooks": [created]}

    async with Bus(up.nats_url) as bus:
        await bus.emit("prx.lifecycle.tool_call", {})
        assert (await wait_for_file(workspace / "marks")).split() == ["one"]

        changed = {**HOOK, "action": {**HOOK["action"], "args": ["two"]}}
        status, updated = await api.call("PUT", f"/{hook_id}", changed)
        assert status == 200
        assert updated["action"]["args"] == ["two"]
        assert updated["created_at"] == created["created_at"]

        assert await api.call("PATCH", f"/{hook_id}/toggle") == (200, {"id": hook_id, "enabled": False})
        file_hooks = orjson.loads((workspace / "hooks.json").read_bytes())["hooks"]["tool_call"]
        assert file_hooks[0]["enabled"] is False, "disabled hooks stay in the file"
        await bus.emit("prx.lifecycle.tool_call", {})  # disabled: must not run

        assert await api.call("PATCH", f"/{hook_id}/toggle") == (200, {"id": hook_id, "enabled": True})
        await bus.emit("prx.lifecycle.tool_call", {})
        await wait_for_file_lines(workspace / "marks", 2)
        assert (workspace / "marks").read_text().split() == ["one", "two"]

    assert await api.call("DELETE", f"/{hook_id}") == (204, None)
    assert await api.call("GET") == (200, {"hooks": []})
    assert (await api.call("DELETE", f"/{hook_id}"))[0] == 404
    assert (await api.call("PATCH", "/nope/toggle"))[0] == 404


async def wait_for_file_lines(path: Path, count: int) -> None:
    await wait_until(lambda: len(path.read_text().split()) >= count, what=f"{count} lines in {path}")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"event": "tool_call", "action": {"command": "./x.sh; rm -rf /"}}, "metacharacters"),
        ({"event": "tool_call", "action": {"command": "x", "cwd": "../.."}}, "'..'"),
        ({"event": "tool_call", "action": {"command": "x", "timeout_ms": "1"}}, "action.timeout_ms"),
        ({"event": "tool_call", "action": {"command": "x", "surprise": 1}}, "action.surprise: unknown field"),
        ({"event": "bad event!", "action": {"command": "x"}}, "event"),
        ({"action": {"command": "x"}}, "event"),
        ([], "expected a JSON object"),
    ],
)
async def test_bad_hooks_are_400_with_the_reason(api: Api, workspace: Path, body: Any, reason: str) -> None:
    status, answer = await api.call("POST", body=body)
    assert status == 400
    assert reason in answer["error"]
    assert not (workspace / "hooks.json").exists()


async def test_body_that_is_not_json_is_400(api: Api) -> None:
    status, answer = await api.call("POST", data=b"{nope")
    assert status == 400
    assert "not valid JSON" in answer["error"]


async def test_hooks_persist_across_restart_and_plain_prx_entries_get_ids(workspace: Path) -> None:
    write_hooks(workspace, {"agent_start": [{"command": "/bin/true"}]})
    first = UpProcess(workspace)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(first, session, (workspace / "api-token").read_text().strip())
            status, listed = await api.call("GET")
            assert status == 200
            plain_id = listed["hooks"][0]["id"]
            assert listed["hooks"][0]["created_at"] is None
            status, created = await api.call("POST", body=HOOK)
            assert status == 201
    finally:
        assert first.stop()[0] == 0
    second = UpProcess(workspace)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(second, session, (workspace / "api-token").read_text().strip())
            status, listed = await api.call("GET")
            assert [hook["id"] for hook in listed["hooks"]] == [plain_id, created["id"]]
            assert listed["hooks"][1] == created
    finally:
        second.close()


async def test_token_from_the_environment(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKBUS_API_TOKEN", "from-env-token")
    up = UpProcess(workspace)
    try:
        assert not (workspace / "api-token").exists()
        async with aiohttp.ClientSession() as session:
            assert (await Api(up, session, "from-env-token").call("GET"))[0] == 200
    finally:
        up.close()


def test_a_busy_http_port_is_one_line_and_leaves_nothing_running(workspace: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        done = run_cli(
            "up", "--workspace", str(workspace), "--port", "0", "--metrics-port", "-1", "--http-port", port,
            env={"NATS_URL": ""},
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith(f"hookbus: error: cannot serve the hooks API on 127.0.0.1:{port}")
    assert "Traceback" not in done.stderr


async def test_metrics_snapshot_per_hook_and_point(api: Api, up: UpProcess, workspace: Path) -> None:
    script(workspace, "mark.sh", "exit 0\n")
    assert (await api.call("POST", body=HOOK))[0] == 201
    rows: list[dict[str, Any]] = []

    async def counted() -> bool:
        status, body = await api.call("GET", "/metrics")
        assert status == 200
        rows[:] = body["metrics"]
        return bool(rows)

    async with Bus(up.nats_url) as bus:  # events until the worker has picked the new hook up
        await probe_until(
            lambda: bus.emit("prx.lifecycle.tool_call", {"tool": "x", "success": True, "output": ""}),
            counted,
            what="the hook's metrics",
        )
    [row] = rows
    assert row["point"] == "tool_call" and row["calls"] >= 1 and row["failures"] == 0
    assert set(row) == {
        "hook",
        "point",
        "calls",
        "failures",
        "timeouts",
        "refusals",
        "total_ms",
        "mean_ms",
        "last_error",
    }
