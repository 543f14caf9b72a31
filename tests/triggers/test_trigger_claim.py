"""Triggers on claimed events: filters and templates read the whole payload, checked, on a real nats-server.

A 1 MiB event keeps its payload in the ``hookbus_payloads`` object store and
travels as a preview plus a reference; the trigger engine fetches the whole
(checked like every receiver does) before judging and rendering, and the turn
request still carries the envelope as received. A reference that does not
match its object is never taken for it: the trigger is judged on the preview,
and the log and journal say why. Small events are judged as before.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, NatsServer, TurnRequest
from bus.testing import EventRecorder
from tests.conftest import as_user as url
from tests.conftest import shipped_permissions
from tests.support.waiting import wait_until
from tests.transport.test_claim_check import BIG_OUTPUT, MIB, SUBJECT, claimed_envelope
from tests.triggers.test_triggers import Agent, Journal
from triggers.engine import _config as config
from triggers.engine._config import TriggerSpec
from triggers.engine.engine import TriggerEngine

NEEDLE = "NEEDLE-4242"
FINDS_NEEDLE = {"payload.output": {"matches": "NEEDLE-[0-9]+"}}
#: Smaller than the bus limit, so a prompt renders it whole; cut in the preview of the event that carries it.
DIFF = "".join(f"diff line {n}\n" for n in range(4000))[: 40 * 1024]


def trigger(name: str, prompt: str, **fields: Any) -> TriggerSpec:
    item = {"name": name, "on": SUBJECT, "prompt": prompt, "agent": "eva", "max_in_flight": 100, **fields}
    return config.parse_one(item, "test")


def claimed_payload() -> dict[str, Any]:
    """A 1 MiB tool output with the needle in its middle (the part a preview cuts) and a 40 KiB diff."""
    half = MIB // 2
    return {"tool": "shell", "output": BIG_OUTPUT[:half] + NEEDLE + BIG_OUTPUT[half:], "diff": DIFF}


def requests_of(agent: Agent, name: str) -> list[TurnRequest]:
    return [request for request in agent.requests if request.trigger == name]


@pytest.fixture
async def engine(bus: Bus) -> Any:
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


async def test_a_claimed_1_mib_event_fires_on_a_field_past_its_preview_and_renders_from_the_whole(
    bus: Bus, engine: TriggerEngine, journal: Journal
) -> None:
    await bus.port.ensure_payloads_bucket()
    agent = Agent(bus)
    await bus.serve_turns("eva", agent)
    await engine.apply(
        {
            "needle": trigger("needle", "diff: {payload.diff}", filter=FINDS_NEEDLE),
            "long": trigger("long", "{payload.output}", dedupe="{payload.output}"),
        }
    )
    await bus.flush()
    recorder = EventRecorder()
    await bus.subscribe(SUBJECT, recorder)
    payload = claimed_payload()
    await bus.emit(SUBJECT, payload, session_id="s1")
    await bus.emit(SUBJECT, payload, session_id="s1")
    [event, _] = await recorder.wait_for(2)
    assert event.payload_ref is not None and bus.stats.claimed == 2
    assert NEEDLE not in event.payload["output"] and event.payload["diff"] != DIFF, "the preview lacks both"
    await wait_until(lambda: len(journal.entries) == 4, 30, "four journal entries")
    assert journal.reasons("needle") == ["fired", "fired"]
    assert journal.reasons("long") == ["fired", "dedupe"]
    dedupe = next(entry for entry in journal.entries if entry.decision == "suppressed")
    assert dedupe.cause is not None and "key 'sha256:" in dedupe.cause, "a long key is remembered by its hash"
    assert not any("preview" in (entry.cause or "") for entry in journal.entries)
    await agent.barrier(bus)
    [first, _] = requests_of(agent, "needle")
    assert first.prompt == "diff: " + DIFF
    envelope = orjson.loads(event.raw)
    assert first.event is not None and first.event["payload_ref"] == envelope["payload_ref"], "never the whole"
    assert first.event["id"] == event.id and first.event["truncated"] is True
    assert len(first.encode()) <= bus.max_bytes, "the preview is cut further so prompt and envelope fit"
    [long] = requests_of(agent, "long")
    assert long.prompt.startswith(BIG_OUTPUT[:1000]) and long.prompt.endswith("bytes cut]")
    assert len(long.prompt.encode()) <= bus.max_bytes * 3 // 4 + 32, "bounded by the bus limit"
    assert long.event is not None and long.event["payload_ref"] == envelope["payload_ref"]
    assert len(long.encode()) <= bus.max_bytes


async def test_a_tampered_reference_never_fires_on_the_object_and_says_why(
    bus: Bus, engine: TriggerEngine, journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    """The object named exists and holds the needle; only its SHA-256 differs from the reference's."""
    await bus.port.ensure_payloads_bucket()
    recorder = EventRecorder()
    await bus.subscribe(SUBJECT, recorder)
    await bus.emit(SUBJECT, claimed_payload())
    [genuine] = await recorder.wait_for(1)
    ref = {**orjson.loads(genuine.raw)["payload_ref"], "sha256": hashlib.sha256(b"other").hexdigest()}
    agent = Agent(bus)
    await bus.serve_turns("eva", agent)
    await engine.apply(
        {
            "needle": trigger("needle", "diff: {payload.diff}", filter=FINDS_NEEDLE),
            "tool": trigger("tool", "tool {payload.tool} {payload.diff}"),
        }
    )
    await bus.flush()
    with caplog.at_level(logging.WARNING, "hookbus.triggers"):
        await bus.port.publish_raw(SUBJECT, claimed_envelope(ref))
        await wait_until(lambda: len(journal.entries) == 2, 30, "two journal entries")
    assert journal.reasons("needle") == ["filter"]
    assert journal.reasons("tool") == ["fired"]
    for entry in journal.entries:
        assert entry.cause is not None and "on the preview, the whole payload was refused" in entry.cause
        assert "SHA-256" in entry.cause and entry.trace_id == "hostile"
    assert caplog.text.count("event hostile judged on its preview") == 2
    await agent.barrier(bus)
    [request] = agent.requests
    assert request.trigger == "tool" and request.prompt == "tool preview ", "rendered from the preview only"
    assert request.event is not None and request.event["payload_ref"] == ref


async def test_small_events_are_judged_as_before_and_received_as_is_a_field(
    bus: Bus, engine: TriggerEngine, journal: Journal
) -> None:
    agent = Agent(bus)
    await bus.serve_turns("eva", agent)
    await engine.apply(
        {
            "needle": trigger("needle", "diff: {payload.diff}", filter=FINDS_NEEDLE),
            "prx": trigger("prx", "from {received_as} {payload.tool}", filter={"received_as": "prx-envelope"}),
        }
    )
    await bus.flush()
    recorder = EventRecorder()
    await bus.subscribe(SUBJECT, recorder)
    await bus.emit(SUBJECT, {"tool": "shell", "output": f"x {NEEDLE} y", "diff": "d"}, session_id="s1")
    prx = {"event": "tool_call", "timestamp": "2026-01-01T00:00:00.000Z", "session_id": None, "payload": {"tool": "t"}}
    await bus.port.publish_raw(SUBJECT, orjson.dumps(prx))
    [small, completed] = await recorder.wait_for(2)
    assert small.payload_ref is None and completed.received_as == "prx-envelope"
    await wait_until(lambda: len(journal.entries) == 4, 30, "four journal entries")
    assert sorted(journal.reasons("needle")) == ["filter", "fired"]
    assert sorted(journal.reasons("prx")) == ["filter", "fired"]
    assert not any("preview" in (entry.cause or "") for entry in journal.entries)
    await agent.barrier(bus)
    [needle] = requests_of(agent, "needle")
    assert needle.prompt == "diff: d" and needle.event == orjson.loads(small.raw)
    [from_prx] = requests_of(agent, "prx")
    assert from_prx.prompt == "from prx-envelope t" and from_prx.event is not None
    assert from_prx.event["received_as"] == "prx-envelope"


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(config_file=shipped_permissions(tmp_path), jetstream=False) as server:
        yield server


async def test_on_the_shipped_permissions_the_bus_role_judges_an_agents_claimed_event(shipped: NatsServer) -> None:
    """``hookbus up`` runs triggers as the bus user; agent-eva emits the 1 MiB event and serves its turns."""
    async with Bus(url(shipped, "bus"), name="up") as up, Bus(url(shipped, "agent-eva"), name="eva") as eva:
        await up.port.ensure_payloads_bucket()
        agent = Agent(eva)
        await eva.serve_turns("eva", agent)
        engine = await TriggerEngine(up).start()
        try:
            await engine.apply({"needle": trigger("needle", "diff: {payload.diff}", filter=FINDS_NEEDLE)})
            await up.flush()
            await eva.emit(SUBJECT, claimed_payload())
            await wait_until(lambda: agent.requests, 30, "the turn request")
        finally:
            await engine.stop()
    assert eva.stats.claimed == 1
    [request] = agent.requests
    assert request.prompt == "diff: " + DIFF and request.event is not None and "payload_ref" in request.event
