"""Receivers enforce the limits: what an honest emitter never sends is dropped and counted, nothing crashes.

Each hostile message goes out raw (a plain nats-py client, as an attacker
would publish it) on a real nats-server; a valid marker follows it from the
same connection, so once the marker is in, the hostile message has been
judged too.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import nats
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from bus import Bus, Event
from bus._core.depth import DEFAULT_MAX_DEPTH
from bus._core.envelope import DEFAULT_MAX_BYTES
from bus._core.subjects import event_name
from bus._turns.server import TurnRequest, turn_subject
from bus.testing import EventRecorder
from tests.conftest import unique
from tests.support.waiting import wait_until
from triggers.engine.engine import TriggerEngine

SUBJECT = "prx.lifecycle.tool_call"


def envelope(subject: str = SUBJECT, **changes: Any) -> bytes:
    """A valid envelope for ``subject``, with ``changes`` applied (stdlib json: integers of any size)."""
    fields = {"event": event_name(subject), "timestamp": "2026-01-01T00:00:00.000Z", "session_id": None}
    return json.dumps({**fields, "payload": {}, "id": "x-1", "depth": 0, **changes}).encode()


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the event loop's exception handler (an unretrieved task exception, for one)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    yield seen
    gc.collect()  # an unretrieved task exception is reported when the task is collected
    loop.set_exception_handler(None)
    assert seen == [], "the event loop's exception handler was called"


async def marker_after(raw: Client, subject: str, data: bytes, recorder: EventRecorder) -> Event:
    """Publish ``data`` then a valid marker from the same connection; the marker once it arrived."""
    await raw.publish(subject, data)
    token = unique("marker")
    await raw.publish(SUBJECT, envelope(payload={"marker": token}, id=token))
    await raw.flush()
    await wait_until(lambda: any(e.payload.get("marker") == token for e in recorder.events), what="the marker")
    return next(e for e in recorder.events if e.payload.get("marker") == token)


HOSTILE = [
    ("1 MB", SUBJECT, envelope(payload={"x": "y" * 1_000_000}), "oversize"),
    ("just over the limit", SUBJECT, envelope(payload={"x": "y" * DEFAULT_MAX_BYTES}), "oversize"),
    ("depth 2**63", SUBJECT, envelope(depth=2**63), "depth"),
    ("depth 2**64-1", SUBJECT, envelope(depth=2**64 - 1), "depth"),
    ("depth beyond 64 bits", SUBJECT, envelope(depth=10**40), "malformed"),
    ("depth at the limit", SUBJECT, envelope(depth=DEFAULT_MAX_DEPTH), "depth"),
    ("negative depth", SUBJECT, envelope(depth=-1), "depth"),
    ("umlaut token", "prx.lifecycle.tool_cüll", envelope("prx.lifecycle.tool_cüll"), "malformed"),
    ("dollar token", "prx.lifecycle.$x", envelope("prx.lifecycle.$x"), "malformed"),
    ("star inside a token", "prx.lifecycle.a*b", envelope("prx.lifecycle.a*b"), "malformed"),
    ("not UTF-8", SUBJECT, envelope(session_id="s").replace(b'"s"', b'"\xff\xfe"'), "malformed"),
    ("lone surrogate", SUBJECT, envelope(session_id="\ud800"), "malformed"),
    ("event not the subject's", SUBJECT, envelope(event="agent_end"), "malformed"),
]


@pytest.mark.parametrize(("what", "subject", "data", "reason"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_a_subscriber_drops_and_counts_what_no_honest_emitter_sends(
    bus: Bus, raw: Client, loop_errors: list[dict[str, Any]], what: str, subject: str, data: bytes, reason: str
) -> None:
    recorder = EventRecorder()
    await bus.subscribe("prx.lifecycle.*", recorder)
    before = Counter(bus.stats.dropped)
    marker = await marker_after(raw, subject, data, recorder)
    assert [event.id for event in recorder.events] == [marker.id], f"{what} reached the handler"
    assert bus.stats.dropped - before == Counter({reason: 1})
    assert loop_errors == []


async def test_the_last_depth_below_the_limit_is_delivered_and_runs_at_the_limit(bus: Bus, raw: Client) -> None:
    depths: list[int] = []

    async def handler(event: Event) -> None:
        depths.append(event.depth)
        await bus.emit("eva.custom.echo", {})  # at depth 8: dropped by the emitter, counted

    recorder = EventRecorder()
    await bus.subscribe("prx.lifecycle.*", recorder)
    await bus.subscribe(SUBJECT, handler)
    before = bus.stats.dropped["depth"]
    await marker_after(raw, SUBJECT, envelope(depth=DEFAULT_MAX_DEPTH - 1), recorder)
    await wait_until(lambda: len(depths) == 2, what="both events handled")
    assert sorted(depths) == [0, DEFAULT_MAX_DEPTH - 1]
    await wait_until(lambda: bus.stats.dropped["depth"] == before + 1, what="the echo at the limit dropped")


async def test_a_hostile_turn_request_starts_no_turn(bus: Bus, raw: Client, loop_errors: list[dict[str, Any]]) -> None:
    agent = unique("agent")
    prompts: list[str] = []

    async def turn(request: TurnRequest) -> str:
        prompts.append(request.prompt)
        return "ok"

    await bus.serve_turns(agent, turn)
    subject = turn_subject(agent)
    good = {"agent": agent, "prompt": "p", "id": "t1"}
    hostile = [
        (orjson.dumps({**good, "prompt": "deep", "depth": DEFAULT_MAX_DEPTH}), "depth"),
        (orjson.dumps({**good, "prompt": "huge depth", "depth": 2**63}), "depth"),
        (orjson.dumps({**good, "prompt": "x" * (DEFAULT_MAX_BYTES + 1)}), "oversize"),
        (orjson.dumps({**good, "prompt": "other", "agent": "someone-else"}), "malformed"),
        (b'{"agent": "\xff", "prompt": "p", "id": "t"}', "malformed"),
    ]
    before = Counter(bus.stats.dropped)
    for data, _ in hostile:
        await raw.publish(subject, data)
    await raw.publish(subject, orjson.dumps({**good, "prompt": "valid", "depth": DEFAULT_MAX_DEPTH - 1}))
    await raw.flush()
    await wait_until(lambda: prompts, what="the valid turn")
    assert prompts == ["valid"]
    assert bus.stats.dropped - before == Counter(reason for _, reason in hostile)
    assert loop_errors == []


#: Subject tokens as NATS carries them: no dot, no control or space characters (the protocol's
#: separators), not a lone wildcard (the server refuses those itself). Everything else an attacker may send.
tokens = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cc", "Zs", "Zl", "Zp"], exclude_characters="."),
    min_size=1,
    max_size=12,
).filter(lambda token: token not in ("*", ">"))
hostile_values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=40),
    st.text(st.sampled_from("\0\x1b\r\n$*>ü"), max_size=30),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    token=tokens,
    field=st.sampled_from(["event", "timestamp", "session_id", "payload", "id", "depth", "source", "truncated"]),
    value=hostile_values,
    garbage=st.binary(max_size=64),
)
def test_fuzz_the_receive_path_nothing_crashes_and_valid_events_still_arrive(
    nats_url: str, token: str, field: str, value: object, garbage: bytes
) -> None:
    async def attack() -> None:
        errors: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        async with Bus(nats_url, name="fuzz") as bus:
            nc = await nats.connect(nats_url)
            try:
                recorder = EventRecorder()
                await bus.subscribe(">", recorder)
                subject = f"eva.custom.{token}"
                body = json.loads(envelope(subject))
                body[field] = value
                await nc.publish(subject, json.dumps(body).encode())
                await nc.publish(subject, garbage)
                await marker_after(nc, subject, envelope(), recorder)
            finally:
                await nc.close()
        assert all(event.subject in (SUBJECT, subject) for event in recorder.events)
        assert errors == []

    asyncio.run(attack())


async def test_the_trigger_engine_drops_unreadable_turn_results(bus: Bus, loop_errors: list[dict[str, Any]]) -> None:
    engine = await TriggerEngine(bus).start()
    try:
        before = bus.stats.dropped["malformed"]
        for data in (
            b"\xff",
            b'{"id": [1]}',
            b'{"id": {"a": 1}}',
            b"[]",
            b'{"id": "' + b"x" * DEFAULT_MAX_BYTES + b'"}',
        ):
            await bus.port.nc.publish(f"{engine._inbox}.t", data)
        await bus.flush()
        await wait_until(lambda: bus.stats.dropped["malformed"] == before + 5, what="five drops")
    finally:
        await engine.stop()
