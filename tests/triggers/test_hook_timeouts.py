"""Timeouts as agent_os has them: an agent's ``timeouts.hook_secs`` bounds every handler's wait, within the
operator's ceiling (middleware.yaml); a handler declares past the old 30 s cap (reference runner, scripted model,
real nats-server)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Continue, Module, TurnRequest
from bus._core.declaration import DEFAULT_TIMEOUT_CEILING
from bus._core.errors import ConfigError
from bus._middleware import timeouts
from bus._middleware.kernel.intercept import MiddlewareOptions
from bus.testing import EventRecorder, JournalRecorder, fake_llm, serving, wait_for_chain
from tests.conftest import run_cli
from tests.support.waiting import wait_until
from triggers.agent import _agent_file as agent_file
from triggers.agent._hook_turn import HookTurnSpec
from triggers.agent._llm import ChatClient
from triggers.agent.turn_runner import TurnRunner


def test_a_kernel_waits_the_declared_timeout_within_the_agents_bound_and_the_operators_ceiling() -> None:
    assert MiddlewareOptions().handler_wait(2.0) == 2.0  # a process module's short default stands
    assert MiddlewareOptions().handler_wait(300.0) == DEFAULT_TIMEOUT_CEILING == 30.0
    assert MiddlewareOptions(timeout_ceiling=300).handler_wait(120.0) == 120.0  # the judge the operator allows
    assert MiddlewareOptions(timeout_ceiling=300, hook_secs=60).handler_wait(120.0) == 60.0
    assert MiddlewareOptions(timeout_ceiling=20, hook_secs=60).handler_wait(120.0) == 20.0  # the operator wins


def test_the_ceiling_is_the_workspaces_middleware_yaml(tmp_path: Path) -> None:
    assert timeouts.ceiling(tmp_path) == 30.0
    (tmp_path / "middleware.yaml").write_text("timeouts: {ceiling_secs: 300}\n")
    assert timeouts.ceiling(tmp_path) == 300.0
    (tmp_path / "middleware.yaml").write_text("timeouts: {ceiling_sec: 300}\n")
    with pytest.raises(ConfigError, match=r"middleware\.yaml.*ceiling_sec"):
        timeouts.ceiling(tmp_path)


def test_a_hook_turn_may_declare_up_to_the_agents_bound_and_no_more(caplog: pytest.LogCaptureFixture) -> None:
    options = MiddlewareOptions(timeout_ceiling=300)
    agent_file.apply(120, options, "agent.yaml")
    judge = HookTurnSpec(name="judge", stage="tool.call", prompt="judge", timeout=120)
    agent_file.check_hook_turns([judge], options, "hook_turns.yaml")
    slow = HookTurnSpec(name="slow", stage="tool.call", prompt="judge", timeout=121)
    with pytest.raises(ConfigError, match=r"hook-turn 'slow': timeout 121s is over this agent's bound 120s"):
        agent_file.check_hook_turns([slow], options, "hook_turns.yaml")
    tight = MiddlewareOptions()
    agent_file.apply(120, tight, "agent.yaml")
    assert "over the operator's ceiling 30s" in caplog.text and tight.handler_wait(120) == 30.0


def test_hookbus_agent_refuses_a_hook_turn_over_its_agent_yaml_bound(tmp_path: Path) -> None:
    agent_yaml = tmp_path / "eva.yaml"
    agent_yaml.write_text("name: eva\ntimeouts: {hook_secs: 5}\n")
    assert agent_file.load(agent_yaml).hook_secs == 5
    turns = tmp_path / "hook_turns.yaml"
    turns.write_text("hook_turns:\n  - {name: judge, stage: tool.call, prompt: judge it, timeout: 60}\n")
    done = run_cli(
        "agent", "--config", str(agent_yaml), "--llm-url", "http://127.0.0.1:9/v1", "--model", "m",
        "--workspace", str(tmp_path), "--hook-turns", str(turns), "--nats-url", "nats://127.0.0.1:9",
    )  # fmt: skip
    assert done.returncode != 0
    assert "hook-turn 'judge': timeout 60s is over this agent's bound 5s" in done.stderr


async def test_the_agents_hook_secs_ends_the_wait_for_a_slow_guard_that_declared_a_minute(
    nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    agent = f"a{uuid.uuid4().hex[:6]}"
    mod = Module(f"slow{uuid.uuid4().hex[:6]}")
    release = asyncio.Event()

    @mod.stage("user.message", match=agent, fail_closed=True, timeout=60)  # past the old 30 s cap: kept
    async def judge(stage: str, payload: dict[str, Any]) -> Continue:
        await release.wait()
        return Continue()

    assert mod.declarations[0].timeout == 60.0
    client = ChatClient(llm.url, "m", attempts=1)
    options = MiddlewareOptions(hook_secs=0.3)
    try:
        async with Bus(nats_url, trust_new=True, middleware=options) as bus, serving(mod, nats_url):
            journal = await JournalRecorder().attach(bus)
            runner = TurnRunner(bus, agent, client)
            await wait_for_chain(bus, "user.message", [f"{mod.name}.judge"])
            await bus.serve_turns(agent, runner.handle)
            failed = EventRecorder()
            await bus.subscribe("eva.turn.failed", failed)
            await bus.flush()
            await bus.request_turn(TurnRequest(agent=agent, prompt="hi"))
            # Within a wait far shorter than the minute it declared: the agent's bound ended it.
            await wait_until(lambda: bool(failed.events), timeout=20, what="the turn refused by the bounded guard")
            await wait_until(lambda: any(e.who == f"{mod.name}.judge" for e in journal.entries), what="journaled")
            release.set()
    finally:
        await client.close()
    error = failed.events[0].payload["error"]
    assert error == f"user message rejected: {mod.name}.judge is fail-closed and timeout: no reply within 0.8s"
    entry = next(e for e in journal.entries if e.who == f"{mod.name}.judge")
    assert entry.decision == "timeout" and "no reply within 0.8s" in (entry.cause or "")


@pytest.mark.parametrize("secs", [".inf", ".nan", "-1", "0", "3601", "1e400"])
def test_an_agent_yaml_cannot_set_an_unbounded_or_empty_hook_secs(tmp_path: Path, secs: str) -> None:
    """A crafted agent YAML's hook_secs (infinite, not a number, none, past the protocol's bound) is refused."""
    path = tmp_path / "agent.yaml"
    path.write_text(f"name: eva\ntimeouts: {{hook_secs: {secs}}}\n")
    with pytest.raises(ConfigError, match="hook_secs"):
        agent_file.load(path)


def test_an_agent_yaml_over_the_ceiling_waits_the_ceiling(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("name: eva\ntimeouts: {hook_secs: 3600}\n")
    options = MiddlewareOptions(timeout_ceiling=30)
    agent_file.apply(agent_file.load(path).hook_secs, options, str(path))
    assert options.handler_wait(3600.0) == 30.0
