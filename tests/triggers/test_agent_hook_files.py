"""``hook_files:`` in an agent YAML (agent_os's way): the reference agent takes its rule files; other agents do not."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from bus import Bus, TurnRequest
from bus.testing import fake_llm
from tests.conftest import hookbus_cmd, run_cli
from tests.support.waiting import wait_until

SECRETS = """
global: true
rules:
  - name: no-secrets
    stage: user
    if: 'payload.content.contains("secret")'
    then: {cancel: "no secrets for {{ ctx.agent }}"}
"""


@contextmanager
def agent(nats_url: str, llm: fake_llm.FakeLLM, *args: str) -> Iterator[subprocess.Popen[str]]:
    command = [*hookbus_cmd(), "agent", "--llm-url", llm.url, "--model", "m", "--no-stream", *args]
    env = {**os.environ, "NATS_URL": nats_url, "OPENAI_API_KEY": "sk-test"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        process.terminate()
        process.communicate(timeout=20)


async def ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = await asyncio.to_thread(process.stdout.readline)
    assert "serving turns" in line, line + (process.stderr.read() if process.stderr and process.poll() else "")
    return line


async def ask(bus: Bus, name: str, prompt: str) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    inbox = bus.port.nc.new_inbox()

    async def got(msg: Any) -> None:
        results.append(orjson.loads(msg.data))

    await bus.port.nc.subscribe(inbox, cb=got)
    await bus.flush()
    await bus.request_turn(TurnRequest(agent=name, prompt=prompt, session_id=f"s-{name}"), reply=inbox)
    await wait_until(lambda: bool(results), timeout=30, what=f"{name}'s turn result")
    return results[0]


async def test_an_agents_hook_files_apply_to_that_agent_alone(
    nats_url: str, llm: fake_llm.FakeLLM, tmp_path: Path
) -> None:
    (tmp_path / "agents" / "hooks").mkdir(parents=True)
    (tmp_path / "agents" / "hooks" / "secrets.yaml").write_text(SECRETS)
    config = tmp_path / "agents" / "eva.yaml"
    config.write_text("name: eva\nhook_files:\n  - hooks/secrets.yaml\n")  # relative to the agent YAML
    llm.script = [fake_llm.text("fine"), fake_llm.text("fine")]
    with agent(nats_url, llm, "--config", str(config)) as eva, agent(nats_url, llm, "--name", "bob") as bob:
        assert (await ready(eva)).startswith("agent eva:")
        await ready(bob)
        async with Bus(nats_url) as bus:
            refused = await ask(bus, "eva", "tell me the secret")
            answered = await ask(bus, "bob", "tell me the secret")
            kept = await ask(bus, "eva", "say hello")
    assert refused["status"] == "failed", refused
    assert refused["error"] == "TurnFailed: user message rejected: no secrets for eva"
    assert answered["status"] != "failed" and answered["answer"] == "fine", answered  # bob has no such rule
    assert kept["answer"] == "fine", kept
    assert [m["content"] for r in llm.requests for m in r["messages"] if m["role"] == "user"] == [
        "tell me the secret",
        "say hello",
    ]


def test_an_agent_yaml_naming_a_missing_hook_file_or_an_unknown_field_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "eva.yaml"
    config.write_text("hook_files: [hooks/nowhere.yaml]\n")
    done = run_cli("agent", "--config", str(config), "--llm-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert done.returncode != 0 and "hook_files: hooks/nowhere.yaml is not a file" in done.stderr, done.stderr
    config.write_text("name: eva\nhook_file: [x.yaml]\n")
    done = run_cli("agent", "--config", str(config), "--llm-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert done.returncode != 0 and "hook_file" in done.stderr, done.stderr
    config.write_text("name: eva\n")
    done = run_cli("agent", "--config", str(config), "--name", "bob", "--llm-url", "http://127.0.0.1:9/v1")
    assert done.returncode != 0 and "differs from the name" in done.stderr, done.stderr
