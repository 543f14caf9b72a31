"""``hookbus up`` answers Claude Code's hooks: the ``http`` hook type at ``POST /hooks/claude-code``, and the relay
``hookbus claude-hook`` asks; both with a guard on the bus, the hook inputs in Claude Code's documented shapes."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from bus import Bus, Decision, Module, Patch
from bus.adapters._subjects import adapter_subject
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.adapters.test_claude_code import SESSION, bash, claude_hook, denial, env_for, guard, hook_input
from tests.cli.test_cli import UpProcess
from tests.conftest import unique
from tests.support.waiting import barrier, without_barriers


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("ws"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
async def guarded(up: UpProcess) -> AsyncIterator[str]:
    name = unique("httpguard")
    async with serving(guard(name), up.nats_url, detach_on_stop=True):
        async with Bus(up.nats_url, trust_new=True) as kernel:  # approves it on first sight, for every kernel
            await wait_for_chain(kernel, "tool.call", [f"{name}.no_rm"])
        yield name


def api(up: UpProcess) -> tuple[str, str]:
    """The endpoint's URL and agent eva's hook-only token in ``up``'s workspace."""
    from subscribers.http_api._token import hook_token

    base = re.search(r"api\s+(http://\S+)/api/hooks", "\n".join(up.lines)).group(1)  # type: ignore[union-attr]
    workspace = Path(re.search(r"workspace (\S+)", up.lines[0]).group(1))  # type: ignore[union-attr]
    return f"{base}/hooks/claude-code", hook_token(workspace, "eva")[0]


async def post(url: str, body: Any, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=data, headers=headers) as response:
        return response.status, await response.json()


async def test_the_http_hook_denies_patches_and_emits(up: UpProcess, guarded: str) -> None:
    url, token = api(up)
    status, answer = await post(url, bash("rm -rf /"), token)
    assert status == 200 and denial(answer) == f"hookbus ({guarded}.no_rm): only by hand"
    status, answer = await post(url, bash("ls"), token)
    assert status == 200 and answer["hookSpecificOutput"]["updatedInput"]["command"] == "ls -la"

    async with Bus(up.nats_url) as bus:
        recorder = EventRecorder()
        await bus.subscribe("prx.lifecycle.>", recorder)
        await bus.flush()
        status, answer = await post(url, hook_input("SessionStart", source="resume"), token)
        assert (status, answer) == (200, {})
        await barrier(bus, "prx.lifecycle.error", recorder)
        [event] = without_barriers(recorder.events)
        assert event.subject == "prx.lifecycle.agent_start" and event.session_id == SESSION

    assert (await post(url, bash("ls"), None))[0] == 401
    assert (await post(url, bash("ls"), "wrong"))[0] == 401
    status, answer = await post(url, b"[]", token)
    assert status == 400 and answer["error"] == "the hook input must be a JSON object, not array"
    status, answer = await post(url, {**bash("ls"), "session_id": 7}, token)
    assert status == 400 and "field 'session_id'" in answer["error"]


async def test_hookbus_up_relays_the_hook_command(up: UpProcess, guarded: str, tmp_path: Path) -> None:
    assert any(line.startswith("  agents   claude-hook, codex-hook and gemini-hook relay") for line in up.lines)
    async with Bus(up.nats_url) as bus:  # the relay answers (a command without one would decide on its own)
        request = orjson.dumps({"input": bash("rm -rf /")})
        reply = orjson.loads(await bus.port.request_raw(adapter_subject("claude-code"), request, 10.0))
    assert denial(reply["output"]) == f"hookbus ({guarded}.no_rm): only by hand"
    assert reply["fail_closed"]["tool.call"] == [f"{guarded}.no_rm"]
    code, output, _ = await claude_hook(bash("rm -rf /"), env_for(up.nats_url, tmp_path))
    assert code == 0 and denial(output) == f"hookbus ({guarded}.no_rm): only by hand"


def context_guard(name: str) -> Module:
    """A prompt guard that only adds context, as a UserPromptSubmit hook printing a project rule does."""
    module = Module(name)

    @module.stage("user.message")
    async def rules(stage: str, payload: dict[str, Any]) -> Decision:
        return Patch({**payload, "content": f"{payload['content']}\n\nProject rule: answer in English."})

    return module


async def test_a_context_only_prompt_guard_lets_every_prompt_through(up: UpProcess, tmp_path: Path) -> None:
    """Before: the appended prompt was written back as "blocked; send it as: ...", refusing every prompt."""
    name = unique("ctxguard")
    url, token = api(up)
    prompt = hook_input("UserPromptSubmit", prompt="refactor the parser")
    async with serving(context_guard(name), up.nats_url, detach_on_stop=True):
        async with Bus(up.nats_url, trust_new=True) as kernel:
            await wait_for_chain(kernel, "user.message", [f"{name}.rules"])
        expected = {"hookEventName": "UserPromptSubmit", "additionalContext": "Project rule: answer in English."}
        status, answer = await post(url, prompt, token)
        assert status == 200 and answer == {"hookSpecificOutput": expected}
        code, output, _ = await claude_hook(prompt, env_for(up.nats_url, tmp_path))
        assert code == 0 and output == {"hookSpecificOutput": expected}


async def test_the_hook_token_opens_no_admin_route_and_the_admin_token_not_the_hook(
    up: UpProcess, guarded: str
) -> None:
    """The guarded session holds its hook token: with it, it must not disable its guard nor add a shell hook."""
    url, hook = api(up)
    base = url.removesuffix("/hooks/claude-code")
    workspace = Path(re.search(r"workspace (\S+)", up.lines[0]).group(1))  # type: ignore[union-attr]
    admin = (workspace / "api-token").read_text().strip()
    shell_hook = {"event": "tool_call", "command": "/bin/sh", "args": ["-c", "id > /tmp/hookbus-pwned"]}
    async with aiohttp.ClientSession() as session:
        for method, path, body in (
            ("POST", "/api/middleware/disable", {"name": f"{guarded}.no_rm"}),
            ("POST", "/api/hooks", shell_hook),
            ("GET", "/api/hooks", None),
        ):
            request = session.request(method, base + path, json=body, headers={"Authorization": f"Bearer {hook}"})
            async with request as response:
                assert response.status == 401, (path, response.status)
    status, answer = await post(url, bash("rm -rf /"), admin)
    assert status == 401, "the admin token is refused on the hook route"
    status, answer = await post(url, bash("rm -rf /"), hook)
    assert status == 200 and denial(answer) == f"hookbus ({guarded}.no_rm): only by hand"
