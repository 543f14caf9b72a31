"""`hookbus agent` processes spend from the fleet's books: one process hands over to another, and a restarted
one finds the day as it was. Real agent processes as agent-eva under the shipped permissions, the scripted
model reporting ``usage`` (40 tokens a call), turn requests sent as the worker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, NatsServer, TurnRequest
from bus._core.subjects import BUDGET_BUCKETS, BUDGET_MAX_AGE_S, RULES_BUCKET
from bus._middleware.registry import ensure_buckets
from bus.testing import fake_llm
from tests.conftest import as_user as url
from tests.conftest import hookbus_cmd, shipped_server
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "agent-budgets")


@pytest.fixture
async def worker(server: NatsServer) -> AsyncIterator[Bus]:
    """What `hookbus up` makes as the bus role, then the worker's connection that starts turns."""
    async with Bus(url(server, "bus")) as up:
        await ensure_buckets(up.port, (RULES_BUCKET, None))
        for name in BUDGET_BUCKETS.values():
            await up.port.counter_bucket(name, BUDGET_MAX_AGE_S).ensure()
    async with Bus(url(server, "worker")) as bus:
        yield bus


class Agents:
    """`hookbus agent --name eva` processes, each started and stopped by the test."""

    def __init__(self, server: NatsServer, llm: fake_llm.FakeLLM, budgets: Path, workspace: Path) -> None:
        self.command = [
            *hookbus_cmd(), "agent", "--name", "eva", "--nats-url", url(server, "agent-eva"), "--llm-url", llm.url,
            "--model", "model-a", "--provider", "fake", "--attempts", "1", "--budgets", str(budgets),
            "--workspace", str(workspace),
        ]  # fmt: skip
        self.running: list[subprocess.Popen[str]] = []

    async def start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
        agent = subprocess.Popen(self.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.running.append(agent)
        assert agent.stdout is not None
        line = await asyncio.to_thread(agent.stdout.readline)  # its first line: it serves turns
        assert line, agent.communicate(timeout=20)
        return agent

    def stop(self, agent: subprocess.Popen[str]) -> None:
        agent.terminate()
        agent.communicate(timeout=20)
        self.running.remove(agent)


@pytest.fixture
async def agents(server: NatsServer, llm: fake_llm.FakeLLM, tmp_path: Path) -> AsyncIterator[Agents]:
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("session: {max: 120, unit: tokens}\nuser: {max: 1000, unit: tokens}\n")
    started = Agents(server, llm, budgets, tmp_path)
    yield started
    for agent in list(started.running):
        started.stop(agent)


async def turn(worker: Bus, session: str) -> dict[str, Any]:
    """One turn on eva, as a trigger of the worker starts it: its result."""
    results: list[dict[str, Any]] = []
    inbox = worker.port.nc.new_inbox()

    async def got(msg: Any) -> None:
        results.append(orjson.loads(msg.data))

    sub = await worker.port.nc.subscribe(inbox, cb=got)
    await worker.flush()
    await worker.request_turn(TurnRequest(agent="eva", prompt="go", session_id=session, publisher="alice"), inbox)
    await wait_until(lambda: bool(results), timeout=30, what="the turn's result")
    await sub.unsubscribe()
    return results[0]


async def test_agent_processes_spend_from_one_book_and_a_restart_keeps_the_day(
    worker: Bus, agents: Agents, llm: fake_llm.FakeLLM
) -> None:
    llm.default = fake_llm.text("ok", usage=(30, 10))
    session = f"s-{uuid.uuid4().hex[:6]}"
    first = await agents.start()
    assert [(await turn(worker, session))["status"] for _ in range(2)] == ["completed", "completed"]
    second = await agents.start()
    agents.stop(first)  # the second process takes over the agent: 80 of 120 tokens spent by the first
    assert (await turn(worker, session))["status"] == "completed"
    refused = await turn(worker, session)
    assert refused["status"] == "failed", refused
    assert "budget exhausted: session" in refused["error"] and "spent 120 tokens of 120 tokens" in refused["error"]
    agents.stop(second)
    await agents.start()  # a restart: the day's books are where the fleet left them
    again = await turn(worker, session)
    assert again["status"] == "failed" and "spent 120 tokens of 120 tokens" in again["error"], again
    assert len(llm.requests) == 3
