"""LLM triggers: config, filters, templates, guards, the turn.completed loop, replicas, CLI."""

from __future__ import annotations

import asyncio
import logging
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, ConfigError, TurnRequest
from bus._core.encoder import Encoder
from bus._core.envelope import Event, decode_event
from bus._journal.entries import JournalEntry, decode_entry
from bus._runtime.filewatch import WatchedFile
from tests.conftest import run_cli
from tests.support.waiting import barrier_payload, probe_until, wait_until
from triggers.engine import _config as config
from triggers.engine._config import TriggerSpec
from triggers.engine.engine import TriggerEngine


def spec(**fields: Any) -> TriggerSpec:
    item = {"name": "t", "on": "eva.spend.day", "prompt": "spent {payload.total}", "agent": "eva", **fields}
    return config.parse_one(item, "test")


def event(subject: str = "eva.spend.day", depth: int = 0, **payload: Any) -> Event:
    data, _ = Encoder().encode(subject, payload, "s1", depth)
    return decode_event(subject, data)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"on": "eva.x", "prompt": "p", "agent": "a"}, "field 'name'"),
        ({"name": "t", "prompt": "p", "agent": "a"}, "field 'on' is required"),
        ({"name": "t", "on": "eva..x", "prompt": "p", "agent": "a"}, "field 'on': invalid subject"),
        ({"name": "t", "on": "eva.x", "prompt": "p", "agent": "a b"}, "field 'agent'"),
        ({"name": "t", "on": "eva.x", "prompt": "p", "agent": "a", "colour": 1}, "unknown field 'colour'"),
        ({"name": "t", "on": "eva.x", "prompt": "{payload.x", "agent": "a"}, "unbalanced brace"),
        ({"name": "t", "on": "eva.x", "prompt": "{__class__}", "agent": "a"}, "not a field path"),
        (
            {"name": "t", "on": "eva.x", "prompt": "p", "agent": "a", "filter": {"payload.x": {"~": 1}}},
            "unknown operator '~'",
        ),
        (
            {"name": "t", "on": "eva.x", "prompt": "p", "agent": "a", "filter": {"payload.x": {"matches": "("}}},
            "bad regular expression",
        ),
        ({"name": "t", "on": "eva.x", "prompt": "p", "agent": "a", "cooldown_s": -1}, "'cooldown_s'"),
        ({"name": "t", "on": "eva.x", "prompt": "p", "agent": "a", "max_in_flight": 0}, "'max_in_flight'"),
    ],
)
def test_bad_trigger_definitions_name_what_is_wrong(item: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config.parse({"triggers": [item]}, "triggers.yaml")


def test_duplicate_names_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="defined twice"):
        config.parse({"triggers": [spec().source, spec().source]}, "f")
    path = tmp_path / "triggers.yaml"
    path.write_text("triggers: [ {")
    with pytest.raises(ConfigError, match=r"triggers\.yaml: not valid YAML"):
        config.load(path)


def test_filters_and_templates() -> None:
    s = spec(
        filter={
            "payload.total": {">": 10, "<=": 100},
            "payload.currency": "USD",
            "payload.model": {"in": ["gpt-4o", "o3"]},
            "payload.tool": {"matches": "^write"},
            "payload.skip": {"exists": False},
            "session_id": "s1",
        },
        prompt="{payload.total} {payload.currency} on {payload.model}; {{literal}}; "
        "missing:[{payload.none}] obj:{payload.extra}",
    )
    good = event(total=50, currency="USD", model="o3", tool="write_file", extra={"a": 1})
    assert all(c.holds(good) for c in s.conditions)
    assert s.prompt.render(good) == '50 USD on o3; {literal}; missing:[] obj:{"a":1}'
    for bad in (
        event(total=5, currency="USD", model="o3", tool="write_file"),
        event(total=500, currency="USD", model="o3", tool="write_file"),
        event(total="50", currency="USD", model="o3", tool="write_file"),
        event(total=50, currency="EUR", model="o3", tool="write_file"),
        event(total=50, currency="USD", model="llama", tool="write_file"),
        event(total=50, currency="USD", model="o3", tool="read_file"),
        event(total=50, currency="USD", model="o3", tool="write_file", skip=True),
    ):
        assert not all(c.holds(bad) for c in s.conditions)


BARRIER_PROMPT = "barrier"


class Agent:
    """A turn handler that records requests; optionally emits turn.completed like a real agent."""

    def __init__(
        self, bus: Bus, emit_completed: bool = False, hold: asyncio.Event | None = None, name: str = "eva"
    ) -> None:
        self.bus = bus
        self.name = name
        self.requests: list[TurnRequest] = []
        self.barriers: list[str] = []
        self.emit_completed = emit_completed
        self.hold = hold

    async def barrier(self, via: Bus) -> None:
        """Send a turn request from ``via`` (an engine's bus) and wait until it is here: then every
        turn that engine asked for before has arrived, and a test can assert that no other did."""
        prompt = f"{BARRIER_PROMPT} {uuid.uuid4().hex}"
        await via.request_turn(TurnRequest(agent=self.name, prompt=prompt))
        await wait_until(lambda: prompt in self.barriers, 10, "the barrier turn")

    async def __call__(self, request: TurnRequest) -> str:
        if request.trigger is None and request.prompt.startswith(BARRIER_PROMPT):
            self.barriers.append(request.prompt)
            return "done"
        self.requests.append(request)
        if self.hold is not None:
            await self.hold.wait()
        if self.emit_completed:
            await self.bus.emit("eva.turn.completed", {"answer": "done", "trigger": request.trigger})
        return "done"


class Journal:
    def __init__(self) -> None:
        self.entries: list[JournalEntry] = []

    async def take(self, msg: Any) -> None:
        self.entries.append(decode_entry(msg.data))

    def reasons(self, who: str = "t") -> list[str]:
        return [
            (e.cause or "").split(":")[0] if e.decision == "suppressed" else "fired"
            for e in self.entries
            if e.who == who
        ]


@pytest.fixture
async def engine(bus: Bus) -> AsyncIterator[TriggerEngine]:
    eng = await TriggerEngine(bus).start()
    try:
        yield eng
    finally:
        await eng.stop()


@pytest.fixture
async def journal(bus: Bus) -> Journal:
    j = Journal()
    await bus.port.nc.subscribe("hookbus.journal.trigger", cb=j.take)
    return j


async def test_fires_a_turn_with_prompt_depth_and_cause(bus: Bus, engine: TriggerEngine, journal: Journal) -> None:
    agent = Agent(bus)
    await bus.serve_turns("eva", agent)
    await engine.apply({"t": spec(filter={"payload.total": {">": 10}})})
    await bus.flush()
    await bus.emit("eva.spend.day", {"total": 5}, session_id="s1")
    await bus.emit("eva.spend.day", {"total": 42}, session_id="s1")
    await wait_until(lambda: len(agent.requests) == 1 and len(journal.entries) == 2)
    [request] = agent.requests
    assert request.prompt == "spent 42"
    assert request.depth == 1 and request.trigger == "t" and request.session_id == "s1"
    assert request.event is not None and request.event["payload"] == {"total": 42}
    assert journal.reasons() == ["filter", "fired"]
    assert journal.entries[1].cause is not None and request.id in journal.entries[1].cause
    assert engine.status()[0]["fired"] == 1 and engine.status()[0]["suppressed"] == {"filter": 1}


async def test_cooldown_dedupe_and_in_flight(bus: Bus, engine: TriggerEngine, journal: Journal) -> None:
    release = asyncio.Event()
    agent = Agent(bus, hold=release)
    await bus.serve_turns("eva", agent)
    await engine.apply(
        {
            "t": spec(cooldown_s=3600),
            "d": spec(name="d", dedupe="{payload.day}", on="eva.custom.day", max_in_flight=10),
            "f": spec(name="f", max_in_flight=2, on="eva.custom.work"),
        }
    )
    await bus.flush()
    for _ in range(3):
        await bus.emit("eva.spend.day", {"total": 1})
    for day in ("mon", "mon", "tue", "mon"):
        await bus.emit("eva.custom.day", {"day": day})
    for _ in range(4):
        await bus.emit("eva.custom.work", {})
    await wait_until(lambda: len(journal.entries) == 11)
    assert journal.reasons("t") == ["fired", "cooldown", "cooldown"]
    assert journal.reasons("d") == ["fired", "dedupe", "fired", "dedupe"]
    assert journal.reasons("f") == ["fired", "fired", "in_flight", "in_flight"]
    release.set()  # the turns end and report back: room in flight again
    await wait_until(lambda: engine.status()[2]["in_flight"] == 0)
    await bus.emit("eva.custom.work", {})
    await wait_until(lambda: journal.reasons("f")[-1:] == ["fired"])


async def test_debounce_fires_once_with_the_last_event(bus: Bus, engine: TriggerEngine, journal: Journal) -> None:
    agent = Agent(bus)
    await bus.serve_turns("eva", agent)
    await engine.apply({"t": spec(debounce_s=0.3)})
    await bus.flush()
    for total in (1, 2, 3):
        await bus.emit("eva.spend.day", {"total": total})
    await wait_until(lambda: len(agent.requests) == 1)
    assert engine.state["t"].debounce is None  # no timer left that could fire again
    await agent.barrier(bus)
    assert [r.prompt for r in agent.requests] == ["spent 3"]
    await wait_until(lambda: len(journal.entries) >= 3, 10, "three journal entries")
    assert journal.reasons() == ["debounce", "debounce", "fired"]


async def test_turn_completed_loop_stops_at_the_depth_limit(bus: Bus, engine: TriggerEngine, journal: Journal) -> None:
    agent = Agent(bus, emit_completed=True)
    await bus.serve_turns("eva", agent)
    # max_in_flight is high so that only the depth rule can end the loop
    await engine.apply({"t": spec(on="eva.turn.completed", prompt="again", max_in_flight=100)})
    await bus.flush()
    await bus.emit("eva.turn.completed", {"answer": "first"})
    await wait_until(lambda: any(e.decision == "suppressed" for e in journal.entries))
    await agent.barrier(bus)  # nothing more may start after the stop
    assert [r.depth for r in agent.requests] == [1, 2, 3, 4, 5, 6, 7]
    last = journal.entries[-1]
    assert last.decision == "suppressed" and last.depth == 7
    assert last.cause == "depth: turn would run at depth 8, the limit is 8"


async def test_replicas_start_each_turn_once(nats_url: str) -> None:
    async with Bus(nats_url) as a, Bus(nats_url) as b, Bus(nats_url) as agent_bus:
        agent = Agent(agent_bus, name="solo")
        await agent_bus.serve_turns("solo", agent)
        engines = [await TriggerEngine(x).start() for x in (a, b)]
        # the filter keeps the barrier events below from starting turns
        has_n = {"payload.n": {"exists": True}}
        ticks = spec(
            name="r", on="eva.custom.tick", prompt="{payload.n}", agent="solo", max_in_flight=100, filter=has_n
        )
        for eng in engines:
            await eng.apply({"r": ticks})
        for x in (a, b, agent_bus):
            await x.flush()
        for n in range(30):
            await agent_bus.emit("eva.custom.tick", {"n": n})
        await wait_until(lambda: len(agent.requests) == 30)
        # Barrier events from the same publisher into the group until each engine has handled one, so has
        # handled (and fired for) every tick it got before; then a barrier turn from each engine's bus.
        await probe_until(
            lambda: agent_bus.emit("eva.custom.tick", barrier_payload()),
            lambda: all(e.status()[0]["suppressed"].get("filter", 0) > 0 for e in engines),
            what="a barrier event at each engine",
        )
        for x in (a, b):
            await agent.barrier(x)
        assert sorted(int(r.prompt) for r in agent.requests) == list(range(30))
        assert all(e.status()[0]["fired"] > 0 for e in engines)
        for eng in engines:
            await eng.stop()


async def test_reload_keeps_the_last_good_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "triggers.yaml"
    applied: list[dict[str, TriggerSpec]] = []

    async def apply(specs: dict[str, TriggerSpec]) -> None:
        applied.append(specs)

    watched: WatchedFile[dict[str, TriggerSpec]] = WatchedFile(path, config.load, apply, {})
    path.write_text(
        textwrap.dedent("""
        triggers:
          - {name: a, on: eva.spend.day, prompt: p, agent: eva}
    """)
    )
    assert await watched.check()
    path.write_text("triggers:\n  - {name: a, on: eva.spend.day, prompt: p, agent: eva, cooldown: 5}\n")
    with caplog.at_level(logging.ERROR, logger="hookbus.config"):
        assert not await watched.check()
        assert not await watched.check()  # one error per change, not per poll
    assert len(caplog.records) == 1
    assert "trigger 'a': unknown field 'cooldown'" in caplog.records[0].getMessage()
    assert list(watched.current) == ["a"] and watched.current["a"].cooldown_s == 0
    path.write_text("triggers:\n  - {name: b, on: eva.x.y, prompt: p, agent: eva}\n")
    assert await watched.check()
    assert [list(x) for x in applied] == [["a"], ["b"]]


def test_cli_test_and_list(workspace: Path, nats_url: str) -> None:
    (workspace / "triggers.yaml").write_text(
        "triggers:\n  - {name: spend, on: eva.spend.day, prompt: 'spent {payload.total}', agent: eva,\n"
        "     filter: {payload.total: {'>': 10}}}\n"
    )
    ws = ["--workspace", str(workspace)]
    fires = run_cli("triggers", *ws, "test", "spend", '{"total": 12}')
    assert fires.returncode == 0, fires.stderr
    assert "would fire: a turn on agent 'eva' at depth 1" in fires.stdout and "spent 12" in fires.stdout
    blocked = run_cli("triggers", *ws, "test", "spend", '{"total": 2}')
    assert blocked.returncode == 1 and "filter failed: payload.total > 10" in blocked.stdout
    unknown = run_cli("triggers", *ws, "test", "nope", "{}")
    assert unknown.returncode == 1 and "no trigger named 'nope'" in unknown.stderr
    listing = run_cli("triggers", *ws, env={"NATS_URL": "nats://127.0.0.1:1"})
    assert listing.returncode == 0 and "spend: on eva.spend.day -> agent eva" in listing.stdout
    assert "no trigger engine answered" in listing.stdout


async def test_cli_list_shows_a_running_engine(bus: Bus, engine: TriggerEngine, workspace: Path, nats_url: str) -> None:
    """``hookbus triggers`` asks the running engine (a raw request over the bus) and shows its state."""
    name = f"live{uuid.uuid4().hex[:6]}"
    await engine.apply({name: spec(name=name)})
    await bus.flush()
    args = ("triggers", "--workspace", str(workspace), "list", "--json", "--nats-url", nats_url)
    listing = await asyncio.to_thread(run_cli, *args)
    assert listing.returncode == 0, listing.stderr
    shown = orjson.loads(listing.stdout)
    assert shown["running"] is True
    assert [row["name"] for row in shown["triggers"]] == [name]
    assert shown["triggers"][0]["fired"] == 0 and shown["triggers"][0]["in_flight"] == 0
