"""Budgets in the reference runner: thresholds once per layer and day, exhaustion cancels, eva.spend.day.

Against the scripted model (which reports ``usage``, streamed in the last
chunk) over a real nats-server; the day is a value the test moves forward.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, TurnRequest
from bus._core.errors import ConfigError
from bus._turns.errors import TurnFailed
from bus.testing import EventRecorder, JournalRecorder, fake_llm
from tests.conftest import run_cli
from tests.support.waiting import wait_until
from triggers.agent import _budgets as budgets
from triggers.agent._budgets import BudgetBook
from triggers.agent._config_schema import BudgetLayer, BudgetsFile, ModelPrice
from triggers.agent._llm import ChatClient
from triggers.agent.turn_runner import TurnRunner

#: 30 prompt and 10 completion tokens at 1 and 2 USD per million: 50 micro-USD a call.
USAGE = (30, 10)
CALL_USD = 50e-6


class Agent:
    """One runner with its book, serving turns; runs them one at a time and keeps what it emitted."""

    def __init__(self, bus: Bus, llm: fake_llm.FakeLLM, config: BudgetsFile) -> None:
        self.bus = bus
        self.name = f"b{uuid.uuid4().hex[:6]}"
        self.day = ["2026-11-30"]
        self.book = BudgetBook(config, today=lambda: self.day[0])
        client = ChatClient(llm.url, "model-a", provider="fake", attempts=1, timeout=5.0)
        self.runner = TurnRunner(bus, self.name, client, budgets=self.book)
        self.events = EventRecorder(lambda event: event.payload.get("agent") == self.name)

    async def start(self, agents: list[Agent]) -> Agent:
        agents.append(self)
        await self.bus.subscribe("eva.>", self.events)
        await self.bus.flush()
        return self

    async def turn(self, session: str, user: str | None = None) -> dict[str, Any]:
        request = TurnRequest(agent=self.name, prompt="go", session_id=session, publisher=user)
        try:
            return {"status": "completed", "answer": await self.runner.handle(request)}
        except TurnFailed as exc:
            return {"status": "failed", "error": str(exc)}

    def of(self, subject: str) -> list[dict[str, Any]]:
        return [e.payload for e in self.events.events if e.subject == subject]


@pytest.fixture
async def agents() -> AsyncIterator[list[Agent]]:
    """Agents a test starts (append them): their model clients are closed after it."""
    started: list[Agent] = []
    yield started
    for agent in started:
        await agent.runner.client.close()


def config(**layers: BudgetLayer) -> BudgetsFile:
    return BudgetsFile(prices={"model-a": ModelPrice(input=1.0, output=2.0)}, **layers)


async def test_thresholds_fire_once_per_layer_and_exhaustion_cancels(
    kernel: Bus, llm: fake_llm.FakeLLM, agents: list[Agent]
) -> None:
    journal = await JournalRecorder().attach(kernel)
    llm.default = fake_llm.text("ok", usage=USAGE)
    layers = {
        "session": BudgetLayer(max=2 * CALL_USD, warn_at=0.5),
        "group": BudgetLayer(max=1000, unit="tokens"),
        "user": BudgetLayer(max=120, unit="tokens"),  # three calls of 40 tokens
    }
    agent = await Agent(kernel, llm, config(**layers)).start(agents)
    assert (await agent.turn("s1", user="ann"))["status"] == "completed"
    assert (await agent.turn("s1", user="ann"))["status"] == "completed"
    refused = await agent.turn("s1", user="ann")
    assert len(llm.requests) == 2  # the third call never reached the model
    assert refused["status"] == "failed"
    assert (
        "llm.request cancelled: budget exhausted: session s1 spent 0.0001 USD of 0.0001 USD today" in refused["error"]
    )
    assert (await agent.turn("s2", user="ann"))["status"] == "completed"  # another session; the user at 120 of 120
    await wait_until(lambda: len(agent.of("eva.budget.threshold")) == 5, what="five thresholds")
    crossed = [(t["level"], t["key"], t["kind"]) for t in agent.of("eva.budget.threshold")]
    assert crossed == [
        ("session", "s1", "warn"), ("session", "s1", "exhausted"), ("session", "s2", "warn"),
        ("user", "ann", "warn"), ("user", "ann", "exhausted"),
    ]  # fmt: skip
    assert agent.of("eva.budget.threshold")[0] == {
        "agent": agent.name, "level": "session", "key": "s1", "kind": "warn", "spent": CALL_USD,
        "max": 2 * CALL_USD, "ratio": 0.5, "unit": "usd", "day": "2026-11-30", "layer": "session",
    }  # fmt: skip
    assert (
        agent.of("eva.budget.threshold")[-1]["spent"] == 120
        and agent.of("eva.budget.threshold")[-1]["unit"] == "tokens"
    )
    assert not any(t["level"] == "group" for t in agent.of("eva.budget.threshold"))  # 160 of 1000 tokens
    refused_again = await agent.turn("s3", user="ann")
    assert "budget exhausted: user ann" in refused_again["error"]
    assert len(agent.of("eva.budget.threshold")) == 5  # no second announcement of the same level
    await wait_until(
        lambda: any(e.who.endswith(":budget") and e.decision == "cancel" for e in journal.entries),
        what="the budget's cancel in the journal",
    )


async def test_a_new_day_reports_spend_and_opens_the_budgets_again(
    kernel: Bus, llm: fake_llm.FakeLLM, agents: list[Agent]
) -> None:
    llm.default = fake_llm.text("ok", usage=USAGE)
    agent = await Agent(kernel, llm, config(session=BudgetLayer(max=CALL_USD))).start(agents)
    assert (await agent.turn("s1"))["status"] == "completed"
    assert (await agent.turn("s1"))["status"] == "failed"
    await agent.runner.tick()
    agent.day[0] = "2026-12-01"
    await agent.runner.tick()
    await agent.runner.tick()  # the same day again: nothing more
    assert (await agent.turn("s1"))["status"] == "completed"
    await wait_until(lambda: agent.of("eva.spend.day"), what="eva.spend.day")
    marker = f"eva.custom.{agent.name}"
    await kernel.emit(marker, {"agent": agent.name})
    await wait_until(lambda: agent.of(marker), what="the barrier")
    assert agent.of("eva.spend.day") == [
        {"agent": agent.name, "day": "2026-11-30", "total": CALL_USD, "tokens": 40, "calls": 1}
    ]
    levels = [(t["key"], t["kind"], t["day"]) for t in agent.of("eva.budget.threshold")]
    assert ("s1", "exhausted", "2026-12-01") in levels and ("s1", "exhausted", "2026-11-30") in levels


async def test_without_usage_the_call_is_counted_approximately(
    kernel: Bus, llm: fake_llm.FakeLLM, agents: list[Agent]
) -> None:
    llm.default = fake_llm.text("a reply with no usage reported")
    agent = await Agent(kernel, llm, config(session=BudgetLayer(max=1, unit="tokens"))).start(agents)
    await agent.turn("s1")
    await wait_until(lambda: agent.of("eva.budget.threshold"), what="a threshold from the approximate count")
    assert agent.of("eva.budget.threshold")[-1]["spent"] > 1


@pytest.mark.parametrize(
    "usage", [{"prompt_tokens": -1_000_000, "completion_tokens": 0}, {"prompt_tokens": 5, "completion_tokens": "many"}]
)
async def test_a_usage_no_call_can_have_spent_is_counted_approximately(
    kernel: Bus, llm: fake_llm.FakeLLM, agents: list[Agent], usage: dict[str, Any]
) -> None:
    """A provider reporting negative or garbled counts neither credits the books nor fails the turn."""
    llm.default = {**fake_llm.text("a reply whose usage is not believable"), "usage": usage}
    agent = await Agent(kernel, llm, config(session=BudgetLayer(max=1, unit="tokens"))).start(agents)
    assert (await agent.turn("s1"))["status"] == "completed"
    second = await agent.turn("s1")
    assert second["status"] == "failed" and "budget exhausted: session s1" in second["error"], second


def test_budgets_yaml_problems_name_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "budgets.yaml"
    path.write_text("session: {max: 1, unit: euros}\nprices: {m: {input: 1, output: 1}}\n")
    with pytest.raises(ConfigError, match=r"budgets.yaml.*session.unit"):
        budgets.load(path)
    path.write_text("session: {max: 1}\n")
    with pytest.raises(ConfigError, match="layer 'session' counts USD but 'prices' is empty"):
        budgets.load(path)
    path.write_text("group: {max: 5000, unit: tokens, warn_at: 0.5}\n")
    assert budgets.load(path).group == BudgetLayer(max=5000, unit="tokens", warn_at=0.5)
    path.write_text("user: {max: 1, warn_at: 2}\nprices: {m: {input: 1, output: 1}}\n")
    done = run_cli("agent", "--name", "x", "--llm-url", "http://127.0.0.1:9", "--model", "m", "--budgets", str(path))
    assert done.returncode != 0 and "warn_at" in done.stderr and "budgets.yaml" in done.stderr


def test_agent_flags_are_checked_before_connecting() -> None:
    base = (
        "agent",
        "--name",
        "x",
        "--llm-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--nats-url",
        "nats://127.0.0.1:9",
    )
    done = run_cli(*base, "--context-tokens", "0")
    assert done.returncode != 0 and "--context-tokens must be at least 1, not 0" in done.stderr
    done = run_cli(*base, "--stream-subject", "eva.stream.*")
    assert done.returncode != 0 and "eva.stream.*" in done.stderr


def test_a_shared_group_that_budgets_yaml_does_not_list_refuses_the_agent(tmp_path: Path) -> None:
    """A group's book counts only the members ``groups:`` names: an agent spending from a group that is not listed
    (or does not list it) would go uncounted by the others, so it does not start."""
    path = tmp_path / "budgets.yaml"
    path.write_text("group: {max: 5000, unit: tokens}\ngroups: {research: [eva, bob]}\n")
    argv = ["agent", "--llm-url", "http://127.0.0.1:9", "--model", "m", "--budgets", str(path)]
    unlisted = run_cli(*argv, "--name", "eva", "--group", "ops")
    assert unlisted.returncode != 0 and "'groups.ops'" in unlisted.stderr and "budgets.yaml" in unlisted.stderr
    stranger = run_cli(*argv, "--name", "carol", "--group", "research")
    assert stranger.returncode != 0 and "'groups.research' does not list 'carol'" in stranger.stderr
    config = budgets.load(path)
    budgets.check_group(config, "eva", "research", path)  # a member
    budgets.check_group(config, "carol", "carol", path)  # its own group: only its own spending to count
    budgets.check_group(config, "carol", None, path)
    budgets.check_group(type(config)(), "carol", "ops", path)  # no group layer: nothing to count
