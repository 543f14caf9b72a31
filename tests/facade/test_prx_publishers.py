"""PRX publishers on the bus: its documented envelope (no ``id``, no ``depth``) and the bare payload
objects its agent publishes on ``prx.lifecycle.<event>`` are completed on receipt, flagged in
``received_as``, and reach shell hooks, Python subscribers and triggers; every limit still holds.

The fixtures are written from PRX's hooks documentation (the envelope and the payload fields of its
eight events) and from how its hook manager bridges events to its bus (the payload object alone).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from bus import Bus, Event, TurnRequest
from bus._core.encoder import Encoder
from bus._core.envelope import decode_event
from bus._core.errors import EnvelopeError
from subscribers import Subscriber
from tests.conftest import StartWorker
from tests.support.hooks_support import script, wait_until, write_hooks
from triggers.engine import _config as config
from triggers.engine.engine import TriggerEngine

#: PRX's envelope exactly as its documentation shows it: no ``id``, no ``depth``.
PRX_ENVELOPE: dict[str, Any] = {
    "event": "llm_response",
    "timestamp": "2026-03-21T08:15:30.123Z",
    "session_id": "sess_abc123",
    "payload": {"provider": "openai", "model": "gpt-4o", "duration_ms": 1842, "success": True},
}
#: What PRX's agent publishes on ``prx.lifecycle.tool_call``: the payload object alone.
BARE_TOOL_CALL: dict[str, Any] = {"tool": "shell", "success": True, "output": "ok"}
ENVELOPE_SUBJECT = "prx.lifecycle.llm_response"
BARE_SUBJECT = "prx.lifecycle.tool_call"
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_a_prx_envelope_gets_depth_0_and_an_id_of_its_own() -> None:
    data = orjson.dumps(PRX_ENVELOPE)
    first, second = decode_event(ENVELOPE_SUBJECT, data), decode_event(ENVELOPE_SUBJECT, data)
    assert (first.event, first.timestamp, first.session_id) == (
        "llm_response",
        PRX_ENVELOPE["timestamp"],
        "sess_abc123",
    )
    assert first.payload == PRX_ENVELOPE["payload"]
    assert (first.depth, first.received_as) == (0, "prx-envelope")
    assert first.id and second.id and first.id != second.id
    # what shell hooks read is the completed envelope: one shape for every publisher
    completed = orjson.loads(first.raw)
    assert completed == {**PRX_ENVELOPE, "id": first.id, "depth": 0, "received_as": "prx-envelope"}
    assert decode_event(ENVELOPE_SUBJECT, first.raw).payload == PRX_ENVELOPE["payload"]


def test_a_prx_envelope_keeps_the_id_or_depth_it_has() -> None:
    with_depth = decode_event(ENVELOPE_SUBJECT, orjson.dumps({**PRX_ENVELOPE, "depth": 3}))
    with_id = decode_event(ENVELOPE_SUBJECT, orjson.dumps({**PRX_ENVELOPE, "id": "prx-7"}))
    assert (with_depth.depth, with_depth.received_as) == (3, "prx-envelope")
    assert (with_id.id, with_id.depth, with_id.received_as) == ("prx-7", 0, "prx-envelope")


def test_a_bare_payload_on_a_lifecycle_subject_is_wrapped_as_its_event() -> None:
    event = decode_event(BARE_SUBJECT, orjson.dumps(BARE_TOOL_CALL))
    assert (event.event, event.session_id, event.depth) == ("tool_call", None, 0)
    assert event.payload == BARE_TOOL_CALL
    assert event.received_as == "prx-payload"
    assert STAMP.fullmatch(event.timestamp) and event.id
    wrapped = orjson.loads(event.raw)
    assert wrapped["payload"]["tool"] == "shell"  # a PRX script reading .payload.tool keeps working
    assert wrapped["received_as"] == "prx-payload"
    empty = decode_event("prx.lifecycle.turn_complete", b"{}")  # PRX's turn_complete payload is an empty object
    assert (empty.event, empty.payload, empty.received_as) == ("turn_complete", {}, "prx-payload")


def test_a_hookbus_envelope_is_never_flagged_even_if_its_sender_says_so() -> None:
    data, _ = Encoder().encode(BARE_SUBJECT, BARE_TOOL_CALL, "s1", 2)
    assert decode_event(BARE_SUBJECT, data).received_as is None
    forged = orjson.dumps({**orjson.loads(data), "received_as": "prx-payload"})
    event = decode_event(BARE_SUBJECT, forged)
    assert (event.received_as, event.depth) == (None, 2)


@pytest.mark.parametrize(
    ("subject", "message", "reason", "drop"),
    [
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "id": None}, "field 'id' has type NoneType", "malformed"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "id": 7}, "field 'id' has type int", "malformed"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "depth": "0"}, "field 'depth' has type str", "malformed"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "depth": True}, "field 'depth' has type bool", "malformed"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "depth": 8}, "at or over the limit 8", "depth"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "depth": -1}, "negative", "depth"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "session_id": 5}, "field 'session_id' has type int", "malformed"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "payload": []}, "field 'payload' has type list", "malformed"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "timestamp": 1}, "field 'timestamp' has type int", "malformed"),
        (ENVELOPE_SUBJECT, {**PRX_ENVELOPE, "source": 1}, "field 'source' has type int", "malformed"),
        (BARE_SUBJECT, PRX_ENVELOPE, "field 'event' is 'llm_response', the subject says 'tool_call'", "malformed"),
        (ENVELOPE_SUBJECT, {"payload": {}}, "missing field 'event'", "malformed"),  # an envelope, not a payload
        (ENVELOPE_SUBJECT, {"event": "llm_response"}, "missing field 'timestamp'", "malformed"),
        ("eva.custom.deploy", BARE_TOOL_CALL, "missing field 'event'", "malformed"),  # bare only on prx.lifecycle
        (BARE_SUBJECT, [BARE_TOOL_CALL], "expected a JSON object, got list", "malformed"),
        (BARE_SUBJECT, {"output": "x" * 70_000}, "over the 65536-byte limit", "oversize"),
        ("prx.lifecycle.tool$call", BARE_TOOL_CALL, "subject refused", "malformed"),
    ],
)
def test_prx_shapes_still_meet_every_limit(subject: str, message: Any, reason: str, drop: str) -> None:
    with pytest.raises(EnvelopeError, match=re.escape(reason)) as caught:
        decode_event(subject, orjson.dumps(message))
    assert caught.value.drop == drop


async def publish_prx_shapes(raw: Client) -> None:
    """From a plain NATS connection, as PRX would: a broken envelope, then the two accepted shapes."""
    await raw.publish(ENVELOPE_SUBJECT, orjson.dumps({**PRX_ENVELOPE, "payload": "not an object"}))
    await raw.publish(BARE_SUBJECT, orjson.dumps(BARE_TOOL_CALL))
    await raw.publish(ENVELOPE_SUBJECT, orjson.dumps(PRX_ENVELOPE))
    await raw.flush()


async def test_both_shapes_reach_shell_hooks(bus: Bus, raw: Client, workspace: Path, start_worker: StartWorker) -> None:
    script(workspace, "log.sh", 'printf "%s\\n" "$ZERO_HOOK_EVENT $ZERO_HOOK_PAYLOAD" >> "$OUT"\n')
    out = workspace / "out"
    action = {"command": "./log.sh", "env": {"OUT": str(out)}}
    write_hooks(workspace, {"tool_call": [action], "llm_response": [action]})
    dropped = bus.stats.dropped["malformed"]
    worker = await start_worker(queue="prx-publishers")
    await publish_prx_shapes(raw)
    await wait_until(lambda: worker.stats.runs == 2, what="two hook runs")
    await wait_until(lambda: len(out.read_text().splitlines()) == 2, what="two lines from the hooks")
    lines = dict(line.split(" ", 1) for line in out.read_text().splitlines())
    bare, envelope = orjson.loads(lines["tool_call"]), orjson.loads(lines["llm_response"])
    assert (bare["payload"], bare["depth"], bare["received_as"]) == (BARE_TOOL_CALL, 0, "prx-payload")
    assert (envelope["payload"], envelope["session_id"]) == (PRX_ENVELOPE["payload"], "sess_abc123")
    assert (envelope["depth"], envelope["received_as"]) == (0, "prx-envelope") and envelope["id"]
    assert bus.stats.dropped["malformed"] == dropped + 1  # the broken one, refused naming 'payload'
    assert worker.stats.failures == 0


async def test_both_shapes_reach_python_subscribers(bus: Bus, raw: Client) -> None:
    app = Subscriber("prx-audit", queue="prx-audit")
    seen: list[Event] = []

    @app.on("prx.lifecycle.*")
    async def audit(event: Event, out: Bus) -> None:
        seen.append(event)

    await app.start(bus)
    await publish_prx_shapes(raw)
    await wait_until(lambda: len(seen) == 2, what="two events")
    await raw.publish(BARE_SUBJECT, orjson.dumps({"barrier": True}))  # after it, the broken one is surely in
    await wait_until(lambda: len(seen) == 3, what="the barrier")
    await app.stop()
    bare, envelope = seen[0], seen[1]
    assert (bare.event, bare.payload, bare.depth, bare.received_as) == ("tool_call", BARE_TOOL_CALL, 0, "prx-payload")
    assert (envelope.event, envelope.session_id, envelope.depth) == ("llm_response", "sess_abc123", 0)
    assert envelope.received_as == "prx-envelope" and envelope.payload == PRX_ENVELOPE["payload"]


async def test_both_shapes_fire_triggers(nats_url: str, bus: Bus, raw: Client) -> None:
    requests: list[TurnRequest] = []

    async def agent(request: TurnRequest) -> str:
        requests.append(request)
        return "done"

    async with Bus(nats_url, name="prx-agent") as agent_bus:
        await agent_bus.serve_turns("prx-agent", agent)
        engine = await TriggerEngine(bus).start()
        try:
            specs = {
                "on_tool": config.parse_one(
                    {"name": "on_tool", "on": BARE_SUBJECT, "prompt": "tool {payload.tool}", "agent": "prx-agent"},
                    "test",
                ),
                "on_llm": config.parse_one(
                    {"name": "on_llm", "on": ENVELOPE_SUBJECT, "prompt": "model {payload.model}", "agent": "prx-agent"},
                    "test",
                ),
            }
            await engine.apply(specs)
            await bus.flush()
            await publish_prx_shapes(raw)
            await wait_until(lambda: len(requests) == 2, what="two turns")
        finally:
            await engine.stop()
    assert sorted(request.prompt for request in requests) == ["model gpt-4o", "tool shell"]
    assert {request.depth for request in requests} == {1}  # the events were at depth 0
    by_trigger = {request.trigger: request for request in requests}
    assert by_trigger["on_llm"].session_id == "sess_abc123"
    assert (by_trigger["on_tool"].event or {}).get("received_as") == "prx-payload"
